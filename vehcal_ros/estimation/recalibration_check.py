"""Is a refit needed? A posterior-predictive check of a new window against a stage's accepted posterior.

The calibrator refits a stage on a fresh maneuver every ``recalibration_period``. When the vehicle has not
changed, the refit reproduces the accepted posterior (on the 900 s long drive: 15 longitudinal refits of the
same throttle step, each the same Cx within ~1.5 sd, at ~7 CPU-s of SMC each). This check decides, for the cost
of ONE 8-DOF run of the window, whether the new window says anything the accepted posterior does not.

The rule (papers/bayesian-calibration-8dof-vehicle-model.md, Eq. 2-3: Gaussian residuals, one noise sigma per
channel; the accepted posterior of sigma_c is the residual level the calibrated model leaves):

1. Run the 8-DOF on the new window from its measured initial state, with this stage's parameters free and
   every other parameter at its currently accepted value (as a refit would), and find the window's best fit
   ``theta_new``: weighted least squares of the stage's channels, each divided by the accepted posterior mean of
   its sigma_c and whitened by the accepted posterior mean of its residual AR(1) coefficient rho_c
   (calibration.py Eq. A2; rho_c = 0 with the white noise model), started at the accepted posterior mean
   (scipy.optimize.least_squares, bounded by the prior; a few dozen 8-DOF runs, ~13 ms for a 4 s longitudinal
   window).
2. ``shift = sqrt(d' (S_acc + S_new)^-1 d)``, ``d = theta_new - mean_acc``: the Mahalanobis distance of the
   new window's best fit from the accepted posterior mean, under the accepted posterior's covariance ``S_acc``
   (from its draws) plus the best fit's ``S_new`` (Gauss-Newton, ``(J'J)^-1`` times the window's own residual
   variance). A two-sample Wald test: if the vehicle has not changed and both are Gaussian, ``shift^2 ~
   chi^2(k)``, k = the stage's parameters (2 / 5 / 1).
3. ``shift <= threshold`` (``confirm_max_shift``, default 3.5): the window is *consistent*, the accepted model
   is **confirmed** (counted, no SMC); otherwise the stage is refitted as before.

Nominal false-alarm rate (a refit although the vehicle did not change) at 3.5: P(chi^2(k) > 12.25) = 0.22 %
(longitudinal), 3.2 % (lateral), 0.05 % (rolling resistance). On data with model-form error (another model, a
real vehicle) the posterior is narrower than the window-to-window scatter, so the rate is measured too:
docs/model_calibrator.md "Confirming instead of refitting" (900 s long drive: 0 of 14 windows; synthetic
8-DOF windows: 0 of 30). A false alarm only costs the refit that used to run every time; a miss keeps a model
the new window moves by less than the threshold.

The residual level alone (RMSE at the accepted model / posterior sigma, reported as ``ratio``) was measured first
and is not the rule: on the long drive same-vehicle windows gave 0.86-1.01 and a 30 % change of Cx only
1.08-1.24, because the residual is mostly model-form error that no Cx removes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares

from vehcal_ros.estimation.calibration import (
    CalibrationResult,
    Segment,
    StageProblem,
    _base_parameters,
    stage_setup,
)

DEFAULT_THRESHOLD = 3.5
"""Default largest ``shift`` [sd] of a consistent window (``confirm_max_shift``); 0: the check is off."""


@dataclass(frozen=True)
class WindowCheck:
    """The outcome of :func:`check_window`. ``mean``: the accepted posterior means of the stage's parameters;
    ``best``: the new window's best fit (weighted least squares with the accepted noise sigmas); ``shift``: the
    Mahalanobis distance between them under the sum of both covariances (the accepted posterior's, from its draws,
    and the best fit's, from its Gauss-Newton Jacobian) [sd]; under the same vehicle shift^2 ~ chi^2(k);
    ``ratio``/``ratio_best``: per channel RMSE of the model on the new window at ``mean``/``best`` over the
    accepted noise sigma (posterior mean) [-]."""

    stage: str
    mean: dict[str, float]
    best: dict[str, float]
    shift: float
    ratio: dict[str, float]
    ratio_best: dict[str, float]
    threshold: float

    @property
    def consistent(self) -> bool:
        """The shift is finite and <= threshold (threshold 0: never, i.e. always refit)."""
        return self.threshold > 0.0 and math.isfinite(self.shift) and self.shift <= self.threshold

    def describe(self) -> str:
        moved = ", ".join(f"{k} {self.mean[k]:.5g} -> {self.best[k]:.5g}" for k in self.mean)
        worst = max(self.ratio.values(), default=math.nan)
        return (f"the window's best fit is {self.shift:.3g} sd from the accepted model "
                f"{'<=' if self.consistent else '>'} {self.threshold:g} ({moved}; residual / posterior noise at "
                f"the accepted model {worst:.3g})")


def check_window(segment: Segment, result: CalibrationResult, previous: Mapping[str, float], threshold: float,
                 *, priors: Mapping | None = None, vehicle=None, dt: float | None = None) -> WindowCheck:
    """The recalibration check of ``segment`` against the accepted ``result`` of its stage (module docstring).
    ``previous``: the other stages' accepted 8-DOF values (held fixed, as a refit would hold them);
    ``priors``/``vehicle``/``dt`` as the pipeline's fit. A few dozen batch 8-DOF runs; no sampling."""
    spec, constants, segment = stage_setup(segment, result.stage, separate_bphi=result.separate_bphi,
                                           priors=priors, vehicle=vehicle, dt=dt)
    names = spec.parameter_names
    base = _base_parameters(spec, {**previous, **result.posterior_means()}, constants.default_parameters())
    problem = StageProblem(segment, spec, base, constants, roll_split=False)
    sigma = np.array([float(result.noise[c]["mean"]) for c in spec.channels])
    rho = np.array([float(result.residual_correlation[c]["mean"]) if c in result.residual_correlation else 0.0
                    for c in spec.channels])
    flat = result.draws.reshape(-1, result.draws.shape[-1])[:, [result.names.index(n) for n in names]]
    if flat.shape[0] >= 2:
        mean = flat.mean(axis=0)
        cov = np.atleast_2d(np.cov(flat, rowvar=False))
    else:   # a result read back from a state file keeps its summaries only: independent, with their sds
        mean = np.array([float(result.parameters[n]["mean"]) for n in names])
        cov = np.diag([float(result.parameters[n]["std"]) ** 2 for n in names])
    sd = np.sqrt(np.diag(cov))
    box = [result.priors.get(n, (d.low, d.high)) for n, d in spec.priors]
    lower, upper = np.array([b[0] for b in box], float), np.array([b[1] for b in box], float)

    def standardized(theta: np.ndarray) -> np.ndarray:
        with np.errstate(invalid="ignore", over="ignore"):
            r = (problem.responses(theta[None, :])[0] - problem.data) / sigma
            # whitened by the accepted fit's residual AR(1) coefficients (calibration.py Eq. A2): the sum of
            # squares is the AR(1) quadratic form, so the new window's covariance counts its autocorrelation
            r[1:] = (r[1:] - rho * r[:-1]) / np.sqrt(1.0 - rho * rho)
        return np.where(np.isfinite(r), r, 1e6).ravel()

    start = np.clip(mean, lower + 1e-9 * (upper - lower), upper - 1e-9 * (upper - lower))
    fit = least_squares(standardized, start, bounds=(lower, upper), x_scale=np.where(sd > 0, sd, 1.0),
                        method="trf", diff_step=1e-6, max_nfev=30 * (len(names) + 1))
    delta = fit.x - mean
    r = fit.fun
    scale = float(r @ r) / max(1, r.size - len(names))   # the new window's own residual level (1: the accepted one's)
    cov_new = np.linalg.pinv(fit.jac.T @ fit.jac) * scale
    shift = float(np.sqrt(max(0.0, delta @ np.linalg.pinv(cov + cov_new) @ delta)))

    def ratio(theta: np.ndarray) -> dict[str, float]:
        rms = np.sqrt(np.mean(standardized(theta).reshape(-1, sigma.size) ** 2, axis=0))
        return {c: float(v) for c, v in zip(spec.channels, rms)}

    return WindowCheck(result.stage, dict(zip(names, map(float, mean))), dict(zip(names, map(float, fit.x))),
                       shift if np.all(np.isfinite(fit.x)) else math.inf, ratio(mean), ratio(fit.x),
                       float(threshold))


__all__ = ["WindowCheck", "check_window", "DEFAULT_THRESHOLD"]
