"""The spread of a stage's parameters between the parts of its window: what one maneuver's posterior leaves out.

The 8-DOF model is not the vehicle, so its best parameters depend on the maneuver (the effective cornering
stiffness falls with the steering amplitude; the driveline inertia absorbs what the powertrain map misses). The
stage's likelihood (Unjhawala et al., "Using a Bayesian-Inference Approach to Calibrating Models for Simulation
in Robotics", J. Comput. Nonlinear Dynam. 2023, doi:10.1115/1.4062199, Eq. 2-3, or its AR(1) form) treats the
window as one experiment on fixed parameters: its posterior says how well THIS window pins its own effective
parameters, not where the next maneuver's lie. Across drives the means then disagree far beyond their
intervals (benchmarks/README_calibration.md "Intervals across drives").

The window itself shows that spread. Its fitted part is cut into K consecutive parts (``n_parts``, each at least
``min_part_s`` long; K >= 3, else nothing is estimated) and each part is fitted alone (:func:`fit_part`):
weighted least squares of the stage's channels, each divided by the fit's posterior mean noise sigma and
whitened by its AR(1) coefficient (calibration.py Eq. A2, as the recalibration check), with the stage's
parameters free, the other stages' held, and the initial values of the stage's channels free too (started
at the fitted model's state there): a part's initial state is as uncertain as its parameters, and on a short
part an initial speed off by a few mm/s moves rolling resistance by as much as the whole window pins it. Where a
channel's residuals in the part are more autocorrelated than the fit's coefficient says (lag 1, by more than
:data:`PART_RHO_STEP`; the independent residual model says 0), the part is fitted once more whitened by its own
coefficient (feasible generalised least squares, Cochrane & Orcutt, J. Am. Stat. Assoc. 44 (1949) 32-61): least
squares on autocorrelated residuals counts every sample as new and understates the part's variance. The
Gauss-Newton covariance at the part's own residual level, its parameters' block, is the part's variance (a
part whose variance is below :data:`MIN_PART_VARIANCE` of the window's posterior variance, or whose best fit
sits at its prior bound, is left out). Per parameter, with the parts' estimates ``y_k`` and variances ``v_k``
(weights ``w_k = 1 / v_k``):

    Q = sum_k w_k (y_k - y_w)^2,   y_w = sum_k w_k y_k / sum_k w_k            (Cochran's Q, K - 1 dof)
    tau^2 = max(0, (Q - (K - 1)) / (S1 - S2 / S1)),   S1 = sum w_k, S2 = sum w_k^2

(the DerSimonian-Laird moment estimator: DerSimonian & Laird, "Meta-analysis in clinical trials", Controlled
Clinical Trials 7 (1986) 177-188), taken only where Q exceeds the 1 - :data:`SPREAD_ALPHA` quantile of
chi^2(K - 1): parts that agree within their noise add nothing (a fit on data the 8-DOF generates is left as it
is, up to the test's 5 % false positives).

The window's posterior combines its parts as if they measured one value (the fixed-effect combination, variance
``1 / S1``). With a spread the parts measure the vehicle's parameter each with an offset of its own, and their
random-effects combination has the variance ``1 / sum_k 1 / (v_k + tau^2)`` (DerSimonian & Laird, as above):
the window tells the vehicle's parameter less well by the ratio

    inflation = S1 / sum_k 1 / (v_k + tau^2)    (>= 1; 1 + tau^2 / v for parts of equal variance v).

Each parameter's draws are spread about their mean by ``sqrt(inflation)``, so its marginal variance grows by
that ratio, while the means, the correlations and the chains' convergence diagnostics (R-hat and ESS are
invariant under an affine map of one parameter) are kept; draws carried beyond the prior's range are clipped to
it. The variance the widening added, ``var (inflation - 1)``, is the window's own offset (``offset``, its sd):
a new window has one too, which the recalibration check adds to it (:func:`maneuver_offsets`). The prediction
for a single new part, ``var + tau^2`` (Higgins, Thompson & Spiegelhalter, J. R. Stat. Soc. A 172 (2009)
137-159), is not taken: a part is much less informative than the window, so a spread barely past the test
gives a tau^2 of the part's own variance, ten times a window's, for one 5 % false positive. The
carried-forward prior of the next drive (estimation/calibration/carry_forward.py) starts from the widened posterior.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
from scipy.optimize import least_squares

from vehcal_ros.estimation.calibration.carry_forward import SPREAD_ALPHA, touches_bound
from vehcal_ros.estimation.calibration.fit import CHANNELS, CalibrationResult, Segment
from vehcal_ros.estimation.calibration.recalibration_check import posterior_moments, whitened_residuals, window_problem
from vehcal_ros.inference.diagnostics import summarize_draws
from vehcal_ros.inference.quantiles import chi2_upper_quantile

MIN_PARTS = 3
"""[-] fewest parts a spread is estimated from (Cochran's Q with 2 dof)."""
MIN_PART_VARIANCE = 0.5
"""[-] a part whose least-squares variance is below this share of the window's posterior variance is left out: a
part of the window cannot know a parameter better than the whole (such a fit sits where the 8-DOF's response
is not smooth in the parameter, and would weigh as many windows)."""
DEFAULT_PARTS = 0
"""[-] parts a window is cut into (``spread_parts``); 0, off: measured on daily drives that repeat one route, the
parts of a window differ in a way every drive repeats, so the widened intervals are several times wider than the
spread between drives (docs/calibration.md, "The spread between the parts of a window"); 4 parts is the
setting measured there."""
DEFAULT_MIN_PART_S = 1.0
"""[s] shortest part (``spread_min_part_s``): 100 samples at the segments' 100 Hz."""
PART_RHO_STEP = 0.05
"""[-] a part whose own lag-1 residual autocorrelation exceeds the fit's coefficient by more than this on a channel is
fitted again whitened by its own (module docstring)."""
MAX_PART_RHO = 0.99
"""[-] the largest own coefficient a part is whitened by: at the segments' 100 Hz a correlation time of 1 s, the
shortest part's length (:data:`DEFAULT_MIN_PART_S`)."""


@dataclass(frozen=True)
class PartSpread:
    """One parameter's spread between the parts of a window (module docstring): ``tau2`` the between-part
    variance [unit^2] (0 unless Q passed its test), ``q`` Cochran's Q, ``parts`` the parts it is estimated
    from, ``inflation`` the random-effects over the fixed-effect variance of their combination (1 without a
    spread)."""

    tau2: float
    q: float
    parts: int
    inflation: float = 1.0

    @property
    def heterogeneous(self) -> bool:
        """Q exceeds its chi^2(parts - 1) quantile at :data:`SPREAD_ALPHA`."""
        return self.parts >= MIN_PARTS and self.q > chi2_upper_quantile(SPREAD_ALPHA, self.parts - 1)

    def to_dict(self) -> dict[str, float | int | bool]:
        return {"tau": math.sqrt(self.tau2), "q": self.q, "parts": self.parts, "inflation": self.inflation,
                "widened": self.inflation > 1.0}


def part_bounds(t_start: float, t_end: float, n_parts: int, min_part_s: float,
                dt: float = 0.0) -> list[tuple[float, float]]:
    """``(t0, t1)`` of the consecutive parts [s] ``[t_start, t_end]`` is cut into: ``n_parts`` of equal length, fewer
    when a part would be shorter than ``min_part_s``; empty when fewer than :data:`MIN_PARTS` remain. ``dt`` [s]:
    the sample spacing of samples at ``t_start`` .. ``t_end``, which last ``t_end - t_start + dt`` (300 samples at
    100 Hz are three parts of 1 s)."""
    span = float(t_end) - float(t_start)
    k = int(n_parts)
    if min_part_s > 0:
        k = min(k, int(math.floor((span + float(dt)) / float(min_part_s) + 1e-9)))
    if k < MIN_PARTS or not span > 0.0:
        return []
    edges = np.linspace(float(t_start), float(t_end), k + 1)
    return [(float(a), float(b)) for a, b in zip(edges[:-1], edges[1:])]


def dersimonian_laird(estimates: Sequence[float], variances: Sequence[float]) -> PartSpread:
    """The spread of ``estimates`` (one per part) beyond their ``variances`` (module docstring): tau^2 where Cochran's
    Q passes its test, else 0. Fewer than :data:`MIN_PARTS` finite pairs (variance > 0): tau^2 = 0, q = nan."""
    pairs = [(float(y), float(v)) for y, v in zip(estimates, variances)
             if math.isfinite(float(y)) and math.isfinite(float(v)) and float(v) > 0.0]
    if len(pairs) < MIN_PARTS:
        return PartSpread(0.0, math.nan, len(pairs))
    y = np.array([p[0] for p in pairs])
    w = 1.0 / np.array([p[1] for p in pairs])
    s1, s2 = float(w.sum()), float((w * w).sum())
    q = float(w @ (y - float(w @ y) / s1) ** 2)
    out = PartSpread(0.0, q, len(pairs))
    if not out.heterogeneous:
        return out
    tau2 = max(0.0, (q - (len(pairs) - 1)) / (s1 - s2 / s1))
    return replace(out, tau2=tau2, inflation=s1 / float(np.sum(1.0 / (1.0 / w + tau2))))


def model_states(segment: Segment, result: CalibrationResult, previous: Mapping[str, float], *,
                 priors: Mapping | None = None, vehicle=None, dt: float | None = None) -> np.ndarray:
    """The 8-DOF states ``(n, 12)`` on ``segment``'s grid at ``result``'s posterior mean (the other stages at
    ``previous``), from the segment's initial state with the fit's sampled initial values (their posterior means)
    where it sampled them: the fitted model's trajectory through the window."""
    spec, problem, _, _ = window_problem(segment, result, previous, priors=priors, vehicle=vehicle, dt=dt)
    for channel, summary in result.initial_state.items():
        problem.sim.x0[CHANNELS[channel]] = float(summary["mean"])
    theta = np.array([float(result.parameters[n]["mean"]) for n in spec.parameter_names])
    return problem.sim.run(problem.parameter_matrix(theta[None, :])[0])


def part_of(segment: Segment, t0: float, t1: float, states: np.ndarray) -> Segment:
    """The samples of ``segment`` in [t0, t1] [s], started from the fitted model's state there (``states``:
    :func:`model_states`; :func:`fit_part` frees the stage's channels' initial values from there)."""
    sel = (segment.time >= t0 - 1e-9) & (segment.time <= t1 + 1e-9)
    i0 = int(np.argmax(sel))
    x0 = np.array(states[i0], dtype=float, copy=True)
    torque = None if segment.wheel_torque is None else segment.wheel_torque[sel]
    return Segment.from_arrays(segment.time[sel], segment.throttle[sel], segment.brake[sel], segment.steering[sel],
                               {c: v[sel] for c, v in segment.measured.items()}, x0,
                               source=f"{segment.source} part [{t0:.2f}, {t1:.2f}] s", wheel_torque=torque)


def _lag1(x: np.ndarray) -> float:
    """Lag-1 autocorrelation of ``x`` about its mean, clipped to [0, :data:`MAX_PART_RHO`]."""
    x = x - np.mean(x)
    den = float(x @ x)
    return float(np.clip(float(x[1:] @ x[:-1]) / den, 0.0, MAX_PART_RHO)) if den > 0.0 else 0.0


def fit_part(part: Segment, result: CalibrationResult, previous: Mapping[str, float], *,
             priors: Mapping | None = None, vehicle=None, dt: float | None = None
             ) -> tuple[dict[str, float], dict[str, float], dict[str, tuple[float, float]]]:
    """One part's least-squares fit (module docstring): (best value, Gauss-Newton variance, prior range) per
    calibrated parameter, the initial values of the stage's channels fitted alongside, refitted whitened by the
    part's own residual autocorrelation where it exceeds the fit's; the variances are nan when the fit did not end
    finite."""
    spec, problem, sigma, rho = window_problem(part, result, previous, priors=priors, vehicle=vehicle, dt=dt)
    names = spec.parameter_names
    box = {n: (d.low, d.high) for n, d in spec.priors}
    k = len(names)
    x0_index = np.array([CHANNELS[c] for c in spec.channels], dtype=np.int64)
    mean = np.array([float(result.parameters[n]["mean"]) for n in names])
    lower = np.array([box[n][0] for n in names] + [-np.inf] * x0_index.size)
    upper = np.array([box[n][1] for n in names] + [np.inf] * x0_index.size)
    width = np.array([box[n][1] - box[n][0] for n in names])
    start = np.concatenate([np.clip(mean, lower[:k] + 1e-6 * width, upper[:k] - 1e-6 * width),
                            problem.sim.x0[x0_index]])
    scale = np.concatenate([np.array([max(float(result.parameters[n]["std"]), 1e-9 * w) for n, w in
                                      zip(names, width)]), sigma])

    def standardized(z: np.ndarray, rho: np.ndarray) -> np.ndarray:
        problem.sim.x0[x0_index] = z[k:]
        return whitened_residuals(problem, sigma, rho, z[:k])

    def solve(z0: np.ndarray, rho: np.ndarray):
        return least_squares(standardized, z0, bounds=(lower, upper), x_scale=scale, method="trf", diff_step=1e-6,
                             max_nfev=30 * (start.size + 1), args=(rho,))

    fit = solve(start, rho)
    if np.all(np.isfinite(fit.x)):   # feasible GLS: the part's own residual autocorrelation (Cochrane-Orcutt)
        raw = standardized(fit.x, np.zeros_like(rho)).reshape(-1, rho.size)
        own = np.array([_lag1(raw[:, c]) for c in range(rho.size)])
        if np.any(own > rho + PART_RHO_STEP):
            fit = solve(np.clip(fit.x, lower, upper), np.maximum(rho, own))
    resid = fit.fun
    level = float(resid @ resid) / max(1, resid.size - start.size)   # the part's own residual level
    js = fit.jac * scale   # columns scaled to their expected size before inverting: the initial speeds' columns
    with np.errstate(invalid="ignore"):   # are ~1e7 times the stiffnesses', beyond pinv's relative cut-off
        cov = np.linalg.pinv(js.T @ js) * np.outer(scale, scale) * level
    var = np.diag(cov)[:k]
    finite = bool(np.all(np.isfinite(fit.x)) and np.all(np.isfinite(var)) and np.all(var > 0.0))
    return ({n: float(fit.x[j]) for j, n in enumerate(names)},
            {n: float(var[j]) if finite else math.nan for j, n in enumerate(names)}, box)


def part_spread(segment: Segment, bounds: Sequence[tuple[float, float]], result: CalibrationResult,
                previous: Mapping[str, float], *, priors: Mapping | None = None, vehicle=None,
                dt: float | None = None) -> dict[str, PartSpread]:
    """Each calibrated parameter's :class:`PartSpread` over the parts ``bounds`` (:func:`part_bounds`) of
    ``segment`` (the window's fitted part), each fitted alone around ``result``'s posterior mean from the fitted
    model's state at its start, with ``previous`` (the other stages' accepted values) held; ``priors``/
    ``vehicle``/``dt`` as the stage's fit. Empty when fewer than :data:`MIN_PARTS` parts are given."""
    if len(bounds) < MIN_PARTS:
        return {}
    states = model_states(segment, result, previous, priors=priors, vehicle=vehicle, dt=dt)
    fits: dict[str, list[tuple[float, float]]] = {}
    for part in (part_of(segment, t0, t1, states) for t0, t1 in bounds):
        best, var, box = fit_part(part, result, previous, priors=priors, vehicle=vehicle, dt=dt)
        for name, value in best.items():
            floor = MIN_PART_VARIANCE * float(result.parameters[name]["std"]) ** 2
            at_bound = touches_bound({"hdi_low": value, "hdi_high": value}, box[name], share=1e-3)
            ok = math.isfinite(value) and not at_bound and var[name] >= floor
            fits.setdefault(name, []).append((value, var[name]) if ok else (math.nan, math.nan))
    return {name: dersimonian_laird([f[0] for f in pairs], [f[1] for f in pairs]) for name, pairs in fits.items()}


def maneuver_offsets(result: CalibrationResult | None) -> dict[str, float]:
    """parameter -> the variance [unit^2] the widening added to ``result``'s parameters (its ``maneuver_spread``
    ``offset``, squared): a window's own offset, which a new window checked against ``result`` has too
    (recalibration_check.check_window ``offset``: without it each confirming window's Gaussian update would shrink
    the widened interval as if the windows had none)."""
    if result is None:
        return {}
    return {n: float(s["offset"]) ** 2 for n, s in result.maneuver_spread.items()
            if s.get("widened") and s.get("offset") is not None and math.isfinite(float(s["offset"]))}


def widened(result: CalibrationResult, spread: Mapping[str, PartSpread]) -> CalibrationResult:
    """``result`` with each parameter's marginal variance multiplied by its spread's ``inflation`` (module
    docstring), and ``maneuver_spread`` recording every spread (with ``offset``, the sd the widening added);
    ``result`` itself when there is nothing to record or it has no draws (a result read back from a state file is
    not a fit's)."""
    if not spread or result.draws.size == 0:
        return result
    names = [n for n in result.parameters if n in spread]
    record = {n: {**spread[n].to_dict(), "offset": 0.0} for n in names}
    grow = [n for n in names if spread[n].inflation > 1.0]
    if not grow:
        return replace(result, maneuver_spread=record)
    mean, cov, _ = posterior_moments(result, grow)
    factor = np.sqrt(np.array([spread[n].inflation for n in grow]))
    for k, n in enumerate(grow):
        record[n]["offset"] = float(math.sqrt(max(0.0, cov[k, k]) * (spread[n].inflation - 1.0)))
    box = [result.priors.get(n, (-math.inf, math.inf)) for n in grow]
    idx = [result.names.index(n) for n in grow]
    draws = np.array(result.draws, dtype=float, copy=True)
    draws[..., idx] = np.clip(mean + (draws[..., idx] - mean) * factor, [b[0] for b in box], [b[1] for b in box])
    parameters = {k: dict(v) for k, v in result.parameters.items()}
    for n, summ in summarize_draws(draws[..., idx], grow).items():
        parameters[n] = {**parameters[n], **summ.to_dict()}
    return replace(result, parameters=parameters, draws=draws, maneuver_spread=record)


__all__ = ["DEFAULT_MIN_PART_S", "DEFAULT_PARTS", "MIN_PARTS", "MIN_PART_VARIANCE", "PartSpread", "dersimonian_laird",
           "part_bounds", "fit_part", "maneuver_offsets", "model_states", "part_of", "part_spread", "widened"]
