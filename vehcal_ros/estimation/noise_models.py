"""The calibration likelihood's residual models (estimation/calibration.py, Eqs. A1-A3), named once.

A constants-only module (no numerics), so the CLI's argument parser and the ``model_calibrator``'s parameter
declaration read the choices and the default without importing the likelihood.
"""

from __future__ import annotations

NOISE_MODELS: tuple[str, ...] = ("ar1", "white", "discrepancy")
"""Residual models of the likelihood: ``ar1`` per-channel stationary AR(1) (Eq. A1-A2), ``white`` independent
Gaussian (the paper's Eq. 2-3), ``discrepancy`` white sensor noise plus an AR(1) model discrepancy per channel
(Eq. A3)."""

DEFAULT_NOISE_MODEL: str = "ar1"
"""The residual model used when none is named (the CLI's ``--noise-model``, the calibration pipeline's and the
``model_calibrator``'s ``noise_model``)."""
