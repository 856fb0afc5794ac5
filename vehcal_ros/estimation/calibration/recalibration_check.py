"""Is a refit needed? A posterior-predictive check of a new window against a stage's accepted posterior.

The calibrator refits a stage on a fresh maneuver every ``recalibration_period``. When the vehicle has not
changed, the refit reproduces the accepted posterior (on the 900 s long drive: 15 longitudinal refits of the
same throttle step, each the same Cx within ~1.5 sd, at ~7 CPU-s of SMC each). This check decides, for the cost
of ONE 8-DOF run of the window, whether the new window says anything the accepted posterior does not.

The rule (Unjhawala et al. 2023, doi:10.1115/1.4062199, Eq. 2-3: Gaussian residuals, one noise sigma per
channel; the accepted posterior of sigma_c is the residual level the calibrated model leaves):

1. Run the 8-DOF on the new window from its measured initial state, with this stage's parameters free and
   every other parameter at its currently accepted value (as a refit would), and find the window's best fit
   ``theta_new``: weighted least squares of the stage's channels, each divided by the accepted posterior mean of
   its sigma_c and whitened by the accepted posterior mean of its residual AR(1) coefficient rho_c
   (calibration.py Eq. A2; rho_c = 0 with the white noise model), started at the accepted posterior mean
   (scipy.optimize.least_squares, bounded by the configured prior ranges, not by the narrower ranges a
   carried stage is refitted on: a change beyond those would be clipped at their bound and look smaller than it
   is; a few dozen 8-DOF runs, ~13 ms for a 4 s longitudinal window).
2. ``shift = sqrt(d' (S_acc + S_new)^-1 d)``, ``d = theta_new - mean_acc``: the Mahalanobis distance of the
   new window's best fit from the accepted posterior mean, under the accepted posterior's covariance ``S_acc``
   (from its draws) plus the best fit's ``S_new`` (Gauss-Newton, ``(J'J)^-1`` times the window's own residual
   variance). With a spread between windows ``T = diag(tau^2)`` (the vehicle's history shows one,
   estimation/calibration/carry_forward.py; 0 without) both windows are estimates of the vehicle's parameters with
   an offset of their own, and ``S_acc + T``, ``S_new + T`` take their places here and in step 4: the accepted posterior
   counts as one window. An accepted posterior widened by the spread between the parts of its own window
   (estimation/calibration/maneuver_spread.py, ``O = diag(tau_w^2)``) already holds its window's offset: the new
   window's takes ``S_new + max(T, O)``, the accepted one's ``S_acc + T``. A two-sample Wald test: if the vehicle has
   not changed and both are Gaussian, ``shift^2 ~ chi^2(k)``, k = the stage's parameters (2 / 5 / 1).
3. ``shift <= threshold`` (``confirm_max_shift``, default 3.5): the window is *consistent*, the accepted model
   is **confirmed** (counted, no SMC); otherwise the stage is refitted as before.
4. A confirming window's information is added to the accepted posterior (:func:`updated_result`): the Gaussian
   product of the accepted posterior ``N(mean_acc, S_acc)`` and the window's best fit ``N(theta_new, S_new)``,

       S_upd = (S_acc^-1 + S_new^-1)^-1,   mean_upd = S_upd (S_acc^-1 mean_acc + S_new^-1 theta_new),

   the sequential Bayesian update under the Gauss-Newton (Laplace) approximation of the window's likelihood.
   The draws are moved by the affine map that takes the draws' own ``N(mean_acc, S_acc)`` (without ``T``) to
   ``N(mean_upd, S_upd)``
   (``x -> mean_upd + L_upd L_acc^-1 (x - mean_acc)``, L the Cholesky factors), so their shape, the noise
   sigmas and the convergence diagnostics' chains are kept; a result read back from a state file (summaries only)
   gets the updated means, sds and correlations (the state file keeps the correlations: without them a window's
   information on the roll stiffnesses' sum would narrow each of the two, whose split it does not see). Without
   the update a carried model never learns from the drives that confirm it: after four drives it is the first
   drive's fit.

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
from dataclasses import dataclass, field, replace

import numpy as np
from scipy.optimize import least_squares

from vehcal_ros.estimation.calibration.fit import (
    CalibrationResult,
    Segment,
    StageProblem,
    StageSpec,
    base_parameters,
    stage_setup,
)
from vehcal_ros.inference.diagnostics import summarize_draws

HDI_Z = 1.8807936081512509
"""z of a two-sided 94 % normal interval: the HDI summarize_draws reports, for a summaries-only update."""

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
    cov_best: np.ndarray | None = field(default=None, repr=False, compare=False)
    """the best fit's covariance as a measurement of the vehicle's parameters (``best``'s order): its Gauss-Newton
    covariance plus the spread between windows ``tau^2`` (estimation/calibration/carry_forward.py)."""
    cov_accepted: np.ndarray | None = field(default=None, repr=False, compare=False)
    """the accepted posterior's covariance as an estimate of the vehicle's parameters (``best``'s order): from its
    draws or summaries plus ``tau^2`` (the window it was fitted on had an offset of its own)."""
    deviation: dict[str, tuple[float, float]] = field(default_factory=dict, compare=False)
    """per parameter (``best - mean``, the variance of that difference without the spread: the accepted
    posterior's plus the Gauss-Newton one) [unit, unit^2]: what carry_forward.window_spread estimates tau^2 from."""

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


def _flat(result: CalibrationResult, names: list[str]) -> np.ndarray | None:
    """The draws of ``names``, chains pooled (None: a result read back from a state file, summaries only)."""
    if result.draws.size == 0:
        return None
    flat = result.draws.reshape(-1, result.draws.shape[-1])[:, [result.names.index(n) for n in names]]
    return flat if flat.shape[0] >= 2 else None


def posterior_moments(result: CalibrationResult, names: list[str]) -> tuple[np.ndarray, np.ndarray, bool]:
    """(mean, covariance, from draws) of the parameters ``names`` of ``result``: from its draws, or, for a result
    read back from a state file (summaries only), its means and sds with its kept ``correlation`` (independent
    where it has none)."""
    flat = _flat(result, names)
    if flat is not None:
        return flat.mean(axis=0), np.atleast_2d(np.cov(flat, rowvar=False)), True
    mean = np.array([float(result.parameters[n]["mean"]) for n in names])
    sd = np.array([float(result.parameters[n]["std"]) for n in names])
    corr = np.eye(len(names))
    for i, a in enumerate(names):
        for j, b in enumerate(names):
            r = (result.correlation.get(a) or {}).get(b)
            if i != j and r is not None and math.isfinite(r):
                corr[i, j] = float(np.clip(r, -1.0, 1.0))
    return mean, corr * np.outer(sd, sd), False


def correlation_of(cov: np.ndarray, names: list[str]) -> dict[str, dict[str, float]]:
    """``{a: {b: r_ab}}`` of a covariance matrix (``names`` its order); a zero variance gives r = 0."""
    sd = np.sqrt(np.clip(np.diag(cov), 0.0, None))
    with np.errstate(invalid="ignore", divide="ignore"):
        r = np.where(np.outer(sd, sd) > 0.0, cov / np.outer(sd, sd), 0.0)
    return {a: {b: float(np.clip(r[i, j], -1.0, 1.0)) for j, b in enumerate(names)} for i, a in enumerate(names)}


def window_problem(segment: Segment, result: CalibrationResult, previous: Mapping[str, float], *,
                   priors: Mapping | None = None, vehicle=None, dt: float | None = None
                   ) -> tuple[StageSpec, StageProblem, np.ndarray, np.ndarray]:
    """(spec, problem, sigma, rho) of ``result``'s stage on ``segment``: the 8-DOF problem of a refit (the other
    stages at ``previous``, ``priors``/``vehicle``/``dt`` as the fit) and the accepted posterior mean noise sigma
    and residual AR(1) coefficient per channel (rho 0 with the white noise model) that weigh its least squares."""
    spec, constants, segment = stage_setup(segment, result.stage, separate_bphi=result.separate_bphi,
                                           priors=priors, vehicle=vehicle, dt=dt)
    base = base_parameters(spec, {**previous, **result.posterior_means()}, constants.default_parameters())
    problem = StageProblem(segment, spec, base, constants, roll_split=False)
    sigma = np.array([float(result.noise[c]["mean"]) for c in spec.channels])
    rho = np.array([float(result.residual_correlation[c]["mean"]) if c in result.residual_correlation else 0.0
                    for c in spec.channels])
    return spec, problem, sigma, rho


def whitened_residuals(problem: StageProblem, sigma: np.ndarray, rho: np.ndarray, theta: np.ndarray) -> np.ndarray:
    """The residuals of ``problem``'s 8-DOF at the stage parameters ``theta`` against its data, each channel divided
    by ``sigma`` and whitened by its residual AR(1) coefficient ``rho`` (calibration.py Eq. A2: their sum of squares
    is the AR(1) quadratic form, so a least-squares covariance counts the autocorrelation), flattened; a
    non-finite response gives 1e6 (a least-squares step away from it)."""
    with np.errstate(invalid="ignore", over="ignore"):
        r = (problem.responses(theta[None, :])[0] - problem.data) / sigma
        r[1:] = (r[1:] - rho * r[:-1]) / np.sqrt(1.0 - rho * rho)
    return np.where(np.isfinite(r), r, 1e6).ravel()


def check_window(segment: Segment, result: CalibrationResult, previous: Mapping[str, float], threshold: float,
                 *, priors: Mapping | None = None, vehicle=None, dt: float | None = None,
                 spread: Mapping[str, float] | None = None,
                 offset: Mapping[str, float] | None = None) -> WindowCheck:
    """The recalibration check of ``segment`` against the accepted ``result`` of its stage (module docstring).
    ``previous``: the other stages' accepted 8-DOF values (held fixed, as a refit would hold them);
    ``priors``/``vehicle``/``dt`` as the pipeline's fit (``priors`` also bound the best fit: the ranges before any
    carrying, so that a change beyond a carried range shows its full size); ``spread``: parameter -> the spread
    between windows ``tau^2`` (estimation/calibration/carry_forward.py; absent: 0), added to the window's and the
    accepted posterior's covariance; ``offset``: parameter -> the variance of a window's own offset that the accepted
    posterior already includes (estimation/calibration/maneuver_spread.py: the spread between the parts of its
    window), added to the new window's covariance only, where it exceeds ``spread``. A few dozen batch 8-DOF runs; no
    sampling."""
    spec, problem, sigma, rho = window_problem(segment, result, previous, priors=priors, vehicle=vehicle, dt=dt)
    names = spec.parameter_names
    mean, cov_raw, _ = posterior_moments(result, names)
    sd = np.sqrt(np.diag(cov_raw))
    box = [(d.low, d.high) for _, d in spec.priors]   # ``priors``' ranges, not a carried fit's narrower ones
    lower, upper = np.array([b[0] for b in box], float), np.array([b[1] for b in box], float)

    def standardized(theta: np.ndarray) -> np.ndarray:
        return whitened_residuals(problem, sigma, rho, theta)

    start = np.clip(mean, lower + 1e-9 * (upper - lower), upper - 1e-9 * (upper - lower))
    fit = least_squares(standardized, start, bounds=(lower, upper), x_scale=np.where(sd > 0, sd, 1.0),
                        method="trf", diff_step=1e-6, max_nfev=30 * (len(names) + 1))
    delta = fit.x - mean
    r = fit.fun
    scale = float(r @ r) / max(1, r.size - len(names))   # the new window's own residual level (1: the accepted one's)
    cov_fit = np.linalg.pinv(fit.jac.T @ fit.jac) * scale
    tau2 = np.array([max(0.0, float((spread or {}).get(n, 0.0))) for n in names])
    own = np.maximum(tau2, [max(0.0, float((offset or {}).get(n, 0.0))) for n in names])
    cov, cov_new = cov_raw + np.diag(tau2), cov_fit + np.diag(own)
    shift = float(np.sqrt(max(0.0, delta @ np.linalg.pinv(cov + cov_new) @ delta)))
    expected = np.diag(cov_raw) + np.diag(cov_fit)

    def ratio(theta: np.ndarray) -> dict[str, float]:
        rms = np.sqrt(np.mean(standardized(theta).reshape(-1, sigma.size) ** 2, axis=0))
        return {c: float(v) for c, v in zip(spec.channels, rms)}

    return WindowCheck(result.stage, dict(zip(names, map(float, mean))), dict(zip(names, map(float, fit.x))),
                       shift if np.all(np.isfinite(fit.x)) else math.inf, ratio(mean), ratio(fit.x),
                       float(threshold), cov_new, cov,
                       {n: (float(delta[k]), float(expected[k])) for k, n in enumerate(names)})


def _cholesky(cov: np.ndarray) -> np.ndarray | None:
    try:
        return np.linalg.cholesky(cov)
    except np.linalg.LinAlgError:
        return None


def updated_result(result: CalibrationResult, check: WindowCheck) -> CalibrationResult:
    """``result`` (the stage's accepted posterior now) with a consistent window's information added (module
    docstring, step 4); ``result`` itself when the check is not consistent, has no covariance, or the update is not
    a finite positive-definite Gaussian."""
    if not check.consistent or check.cov_best is None or result.stage != check.stage:
        return result
    names = list(check.best)
    m_acc, s_draws, from_draws = posterior_moments(result, names)
    s_acc = check.cov_accepted if check.cov_accepted is not None else s_draws
    m_new = np.array([check.best[n] for n in names])
    p_acc, p_new = np.linalg.pinv(s_acc), np.linalg.pinv(check.cov_best)
    cov = np.linalg.pinv(p_acc + p_new)
    cov = 0.5 * (cov + cov.T)
    mean = cov @ (p_acc @ m_acc + p_new @ m_new)
    l_acc, l_upd = _cholesky(s_draws), _cholesky(cov)
    if l_acc is None or l_upd is None or not np.all(np.isfinite(mean)):
        return result
    box = [result.priors.get(n, (-math.inf, math.inf)) for n in names]
    mean = np.clip(mean, [b[0] for b in box], [b[1] for b in box])
    parameters = {k: dict(v) for k, v in result.parameters.items()}
    draws = result.draws
    if from_draws:
        idx = [result.names.index(n) for n in names]
        a = l_upd @ np.linalg.inv(l_acc)
        draws = np.array(draws, dtype=float, copy=True)
        # the affine map of a Gaussian update can carry draws out of the prior's support (a wide posterior near a
        # bound, e.g. a roll stiffness the window hardly informs): the posterior has no mass there, keep them in
        draws[..., idx] = np.clip(mean + (draws[..., idx] - m_acc) @ a.T, [b[0] for b in box], [b[1] for b in box])
        for n, summ in summarize_draws(draws[..., idx], names).items():
            parameters[n] = {**parameters[n], **summ.to_dict()}
    else:
        for k, n in enumerate(names):
            sd = float(math.sqrt(cov[k, k]))
            parameters[n] = {**parameters[n], "mean": float(mean[k]), "std": sd,
                             "hdi_low": float(max(mean[k] - HDI_Z * sd, box[k][0])),
                             "hdi_high": float(min(mean[k] + HDI_Z * sd, box[k][1]))}
        return replace(result, parameters=parameters, correlation=correlation_of(cov, names))
    return replace(result, parameters=parameters, draws=draws)


__all__ = ["WindowCheck", "check_window", "whitened_residuals", "window_problem", "posterior_moments",
           "correlation_of", "updated_result", "DEFAULT_THRESHOLD", "HDI_Z"]
