"""The calibration likelihood's residual models (estimation/calibration/fit.py, Eqs. A1-A3), named once.

``auto`` (the default) picks the model per stage by what identifies the stage's parameters
(:data:`STAGE_NOISE_MODELS`):

* **longitudinal: white.** Cx is identified by the *level* of the wheels' slip under a sustained drive torque,
  i.e. by the low-frequency part of the wheel-speed residuals. An AR(1) residual model with rho near 1 explains
  that part as correlated noise and leaves Cx to the high-frequency wiggles, where the 8-DOF's model-form error
  (driveline and tire dynamics it lacks) lives. Measured (benchmarks/README_calibration.md, "Residual model per
  stage"): on the paper's Chrono runs the AR(1) fit put one axle's Cx at ~2x the paper's in 5 of 5 seeds (white
  within 15 % of the paper in every seed), and on the 14-DOF HMMWV's daily drive every AR(1) longitudinal fit
  was refused by the held-back check (white and discrepancy fits accepted), so no stage was ever calibrated.
* **lateral and rolling resistance: ar1.** Their parameters are identified by the transient (yaw and roll
  response) or by the deceleration over a whole coast; the AR(1) model keeps their intervals honest across drives
  and on data with autocorrelated errors (simulation-based coverage 88 % on the rolling-resistance stage where the
  independent model covers 73.5 %).

A constants-only module (no numerics), so the CLI's argument parser and the ``model_calibrator``'s parameter
declaration read the choices and the default without importing the likelihood.
"""

from __future__ import annotations

from vehcal_ros.errors import InputError

NOISE_MODELS: tuple[str, ...] = ("ar1", "white", "discrepancy")
"""Residual models of the likelihood: ``ar1`` per-channel stationary AR(1) (Eq. A1-A2), ``white`` independent
Gaussian (the paper's Eq. 2-3), ``discrepancy`` white sensor noise plus an AR(1) model discrepancy per channel
(Eq. A3)."""

AUTO = "auto"
NOISE_MODEL_CHOICES: tuple[str, ...] = (AUTO, *NOISE_MODELS)
"""What a user may name: one model for every stage, or ``auto`` (each stage's :data:`STAGE_NOISE_MODELS`)."""

STAGE_NOISE_MODELS: dict[str, str] = {"rolling_resistance": "ar1", "longitudinal": "white", "lateral": "ar1"}
"""The residual model ``auto`` gives each stage (module docstring)."""

DEFAULT_NOISE_MODEL: str = AUTO
"""The residual model used when none is named (the CLI's ``--noise-model``, the calibration pipeline's and the
``model_calibrator``'s ``noise_model``)."""


def stage_noise_model(noise_model: str, stage: str) -> str:
    """The residual model a fit of ``stage`` uses under the setting ``noise_model`` (InputError naming a bad one)."""
    if noise_model == AUTO:
        if stage not in STAGE_NOISE_MODELS:
            raise InputError(f"noise_model auto: no residual model for stage {stage!r}")
        return STAGE_NOISE_MODELS[stage]
    if noise_model not in NOISE_MODELS:
        raise InputError(f"noise_model must be one of {', '.join(NOISE_MODEL_CHOICES)}, got {noise_model!r}")
    return noise_model
