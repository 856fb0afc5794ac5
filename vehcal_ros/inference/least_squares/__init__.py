"""Bounded nonlinear least squares: multi-start ML fit of the friction paper (Algorithm 1, steps 1-3)."""

from vehcal_ros.inference.least_squares.multistart import (
    DEFAULT_BOUNDS,
    FALLBACK_PROPOSAL_COV,
    MLFit,
    ml_covariance,
    multistart_fit,
)

__all__ = ["DEFAULT_BOUNDS", "FALLBACK_PROPOSAL_COV", "MLFit", "ml_covariance", "multistart_fit"]
