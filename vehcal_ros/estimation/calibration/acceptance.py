"""Predictive acceptance of a calibrated stage: the candidate must predict held-back data.

A stage's fit (its posterior, the *candidate*) replaces the model in force (the stage's accepted posterior means,
or the vehicle description's nominal values before any acceptance: the *replaced* model) only when it predicts a
held-back segment of the same maneuver, one that did not enter the fit, no worse than the replaced model and
within its own predictive band. The held-back segment (the calibrator's choice, :mod:`calibration_pipeline`) is
the last ``holdout_fraction`` of the qualifying window: every window gives one, so the rule works on everyday
driving where qualifying windows come one at a time. Both models run from the held-back segment's measured
initial state with the same inputs, the other stages' parameters at the same values; only the stage's own
parameters differ.

**RMSE, no worse** (per channel ``c`` of the stage, channel units). With ``e`` the candidate's residual at its
posterior mean and ``r`` the replaced model's, over the ``n`` held-back samples::

    RMSE_cand = sqrt(mean e_t^2),  RMSE_repl = sqrt(mean r_t^2)                                          (H1)
    z_t = e_t^2 - r_t^2,  D = mean z_t = RMSE_cand^2 - RMSE_repl^2                                        (H2)
    SE(D) = sd(z) / sqrt(n_eff(z)),  SE(RMSE_cand - RMSE_repl) = SE(D) / (RMSE_cand + RMSE_repl)           (H3)

(H3) uses ``sqrt(A) - sqrt(B) = (A - B) / (sqrt(A) + sqrt(B))``. The residuals of a dynamic model are
autocorrelated (model-form error is smooth; a parameter error makes a slow drift), so ``z`` is too: ``n_eff`` is
its effective sample size by Geyer's initial monotone sequence estimator (:func:`effective_sample_size`; Geyer
1992, the estimator of MCMC effective sample sizes), not ``n``. A held-back segment whose residual differences
are one slow drift thus counts as a few samples and the tolerance widens accordingly. The channel fails when::

    RMSE_cand - RMSE_repl > k SE(RMSE_cand - RMSE_repl) + m RMSE_repl                                     (H4)

with ``k = holdout_tolerance`` (default 3) and ``m`` = :data:`PRACTICAL_MARGIN` (2 %). A stage has up to four
channels and two rules each, eight one-sided tests: at k = 3 an equal, well-calibrated model is refused with
probability <= 8 x 0.13 % = 1.1 % (Bonferroni, normal approximation; at k = 2 it would be 18 %, and a refusal on a
replay of single maneuvers leaves the stage without a model). Where the nominal values are already as good as
the data allow, the candidate's posterior-mean error adds an O(1/n_fit) share to the mean square (a few tenths of
a per cent of the RMSE for 100+ fitted samples per parameter), which the margin absorbs so that an equal result
is accepted.

Power of (H4): the SE is that of the held-back segment's own residual differences, so where the candidate's
error is one slow drift across the segment (a wrong roll stiffness on a 1 s tail) ``n_eff`` is 3-5 and (H4)
needs an excess of ~1-2 RMSE of the replaced model to refuse (measured: roll rate 0.084 vs 0.0052 rad/s at n_eff
4.7 passes (H4)). Such a candidate is caught by its band instead (14 % of the roll-rate samples in its 90 %
band: refused under ``holdout_band: refuse``, WARN under ``warn``), which is why both rules apply.

**Band policy** (``holdout_band``: ``warn``, the default, or ``refuse``). With the likelihood's residual model as it
stands (one noise sigma per channel, sampled: the *in-sample* residual level), data from another model carry
model-form error that is larger on a segment the fit did not see than on the one it fitted, and the band is then
overconfident although the point prediction is better than the replaced model's. Measured in ``vehcal demo``
(14-DOF HMMWV, 2026-11-28): the throttle ramp's longitudinal fit predicted its held-back tail no worse than the
nominal model but its w_lr band held 66.7 % (< 76.2 %); refused, no stage was ever calibrated (the stages wait for
each other) and the held-out test maneuver's u RMSE was 2.13 m/s against 0.50 with the fits accepted on their
diagnostics (8 of 8 Table 9 channels better than the priors). ``warn`` accepts such a fit on the RMSE rule, sets
the stage's status to WARN and names the shortfall; ``refuse`` is the full rule, for a likelihood whose intervals
include the model-form error.

**Predictive band** (per channel): the candidate's 90 % posterior predictive band from ``S`` posterior draws
``theta_s`` with the noise model's marginal residual sd ``s_s`` (``sigma_c``; ``sqrt(sigma_c^2 + delta_c^2)``
with a model-discrepancy term) and the standard error ``se_c`` of the held-back segment's initial value (its
local quadratic fit over the first second, :func:`~vehcal_ros.estimation.calibration.fit.initial_state_uncertainty`, the
same standard error that sets the prior of a sampled initial state): ``s_s^2 + se_c^2``, a mixture of normals.
The initial-state term is exact for an integrated state that keeps its initial error (u in a coast-down) and
conservative for those that forget it (v, the rates); without it a correct longitudinal fit's u band held 80.5 %
of a held-back tail (a 0.03 m/s initial error is 0.3 sigma_u for the whole segment). A sample ``y_t`` lies in
the central 90 % band iff its probability integral transform lies in [0.05, 0.95]::

    F_t(y_t) = 1/S sum_s Phi((y_t - f_t(theta_s)) / s_s),   inside = 0.05 <= F_t(y_t) <= 0.95             (H5)

(exact for the mixture, no band quantiles needed). The coverage ``p`` = share of samples inside has
``SE(p) = sqrt(p0 (1 - p0) / n_eff)`` with ``p0 = 0.9`` and ``n_eff`` of the inside-indicator series (again
autocorrelated). The band is too narrow (overconfident) when ``p < 0.9 - k SE(p) - m_cov``
(:data:`COVERAGE_MARGIN` 0.02; the band policy above decides what follows). A coverage above ``0.9 + k SE(p)``
(a band wider than the residuals need, e.g. a held-back part with less model-form error than the fitted one) is
reported and does not refuse: it predicts better than it claims.

Nothing here imports rclpy.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
from scipy.special import ndtr

from vehcal_ros.errors import EstimationError
from vehcal_ros.estimation.calibration.fit import (
    CHANNELS,
    CalibrationResult,
    Segment,
    StageProblem,
    base_parameters,
    initial_state_uncertainty,
    stage_setup,
)

BAND = 0.90
"""Central probability of the candidate's predictive band (-)."""
DEFAULT_TOLERANCE = 3.0
"""``k`` of (H4) and of the coverage rule [standard errors] (``holdout_tolerance``)."""
PRACTICAL_MARGIN = 0.02
"""``m`` of (H4): relative RMSE excess [-] below which a candidate counts as equal to the replaced model."""
COVERAGE_MARGIN = 0.02
"""Coverage [-] below ``BAND - k SE`` still tolerated (the band's Monte-Carlo error from ``S`` draws)."""
DEFAULT_FRACTION = 0.25
"""Share of a qualifying window held back from the fit (its last part) [-] (``holdout_fraction``)."""
MIN_HOLDOUT_S = 0.5
"""Shortest held-back segment [s] (and at least 50 samples: the calibration segments' own minimum)."""
BAND_DRAWS = 200
"""Posterior draws ``S`` of the predictive band (H5)."""
BAND_POLICIES = ("warn", "refuse")
"""What a band holding too few held-back samples does (``holdout_band``): ``refuse`` the fit, or ``warn`` (accept it
on the RMSE rule and report the shortfall)."""
DEFAULT_BAND = "warn"
"""``holdout_band`` default (module docstring, "Band policy")."""


def effective_sample_size(x: np.ndarray) -> float:
    """Effective sample size of the mean of the series ``x`` (Geyer's initial monotone sequence estimator).

    ``n_eff = n / tau``, ``tau = -1 + 2 sum_k Gamma_k``, ``Gamma_k = rho_2k + rho_2k+1`` summed while positive and
    made non-increasing (Geyer 1992, Statistical Science 7: 473); ``rho`` the sample autocorrelations (FFT).
    For an AR(1) series ``tau = (1 + rho) / (1 - rho)``. Clipped to [1, n]; a constant series gives ``n``.
    """
    x = np.asarray(x, dtype=float).ravel()
    n = x.size
    if n < 4:
        return float(max(n, 1))
    d = x - x.mean()
    var = float(d @ d) / n
    if not var > 0.0:
        return float(n)
    m = 1 << (2 * n - 1).bit_length()
    f = np.fft.rfft(d, m)
    acov = np.fft.irfft(f * np.conj(f), m)[:n] / n
    rho = acov / acov[0]
    n_pairs = (n - 1) // 2
    gam = rho[0:2 * n_pairs:2] + rho[1:2 * n_pairs:2]
    pos = np.flatnonzero(gam <= 0.0)
    gam = gam[: pos[0]] if pos.size else gam
    if gam.size == 0:
        return float(n)
    gam = np.minimum.accumulate(gam)
    tau = max(-1.0 + 2.0 * float(gam.sum()), 1.0 / n)
    return float(min(max(n / tau, 1.0), n))


@dataclass(frozen=True)
class ChannelCheck:
    """The held-back figures of one channel (channel units; coverage as a share)."""

    rmse_candidate: float          #: (H1) at the candidate's posterior mean
    rmse_replaced: float           #: (H1) of the model in force
    se_difference: float          #: (H3)
    n_eff: float                   #: effective samples of z (H2)
    coverage: float                #: share of held-back samples in the candidate's 90 % band (H5)
    coverage_se: float             #: SE of the coverage under 90 % (H5)
    worse: bool                    #: (H4) holds: worse beyond the tolerance
    undercovered: bool             #: coverage below 0.9 - k SE - margin

    def to_dict(self) -> dict[str, float | bool]:
        return {k: (bool(v) if isinstance(v, bool) else float(v)) for k, v in self.__dict__.items()}


@dataclass(frozen=True)
class HoldoutCheck:
    """The predictive check of a stage's candidate on its held-back segment (module docstring)."""

    stage: str
    segment: tuple[float, float]   #: [s] the held-back segment (data time)
    fitted: tuple[float, float]    #: [s] the fitted segment
    n_samples: int
    channels: dict[str, ChannelCheck]
    replaced: str                  #: "accepted" (the stage's accepted model) or "nominal" (the description's)
    replaced_values: dict[str, float]
    candidate_values: dict[str, float]
    tolerance: float               #: k [SE]
    margin: float = PRACTICAL_MARGIN
    notes: tuple[str, ...] = field(default=())
    band: str = "refuse"
    """what an overconfident band does: ``refuse`` (the rule) or ``warn`` (accepted, the shortfall reported)."""

    @property
    def passed(self) -> bool:
        return not self.failures()

    def _worse(self) -> list[str]:
        return [f"{c} RMSE {k.rmse_candidate:.4g} vs {k.rmse_replaced:.4g} of the {self.replaced} model (worse by "
                f"{k.rmse_candidate - k.rmse_replaced:.3g} > {self.tolerance:g} x SE {k.se_difference:.3g} + "
                f"{100 * self.margin:g} %, n_eff {k.n_eff:.0f})" for c, k in self.channels.items() if k.worse]

    def _undercovered(self) -> list[str]:
        return [f"{c} in the 90 % predictive band {100 * k.coverage:.1f} % of the time (< "
                f"{100 * (BAND - self.tolerance * k.coverage_se - COVERAGE_MARGIN):.1f} %, SE "
                f"{100 * k.coverage_se:.1f} %)" for c, k in self.channels.items() if k.undercovered]

    def failures(self) -> list[str]:
        """One phrase per refusing failure, naming the channel, the RMSE values or the band coverage (a band's
        shortfall refuses only with ``band == "refuse"``)."""
        return self._worse() + (self._undercovered() if self.band == "refuse" else [])

    def warnings(self) -> list[str]:
        """Band shortfalls that do not refuse (``band == "warn"``)."""
        return self._undercovered() if self.band != "refuse" else []

    def describe(self) -> str:
        t0, t1 = self.segment
        head = f"held-back [{t0:.2f}, {t1:.2f}] s"
        if not self.passed:
            return f"{head}: " + "; ".join(self.failures())
        figs = ", ".join(f"{c} {k.rmse_candidate:.4g} vs {k.rmse_replaced:.4g} ({100 * k.coverage:.0f} % in band)"
                         for c, k in self.channels.items())
        warn = self.warnings()
        tail = f"; its band is too narrow: {'; '.join(warn)}" if warn else ""
        return f"{head}: RMSE candidate vs {self.replaced} {figs}{tail}"

    def to_dict(self) -> dict:
        """JSON-ready: segment, channels (per channel :class:`ChannelCheck`), passed, replaced, values, message."""
        return {"segment": list(self.segment), "fitted": list(self.fitted), "n_samples": int(self.n_samples),
                "passed": bool(self.passed), "replaced": self.replaced, "tolerance_se": float(self.tolerance),
                "margin": float(self.margin), "band": BAND, "band_policy": self.band, "warnings": self.warnings(),
                "rmse_candidate": {c: float(k.rmse_candidate) for c, k in self.channels.items()},
                "rmse_replaced": {c: float(k.rmse_replaced) for c, k in self.channels.items()},
                "coverage": {c: float(k.coverage) for c, k in self.channels.items()},
                "channels": {c: k.to_dict() for c, k in self.channels.items()},
                "replaced_values": dict(self.replaced_values), "candidate_values": dict(self.candidate_values),
                "notes": list(self.notes), "message": self.describe()}


def split_segment(segment: Segment, fraction: float = DEFAULT_FRACTION, initial_window: float = 1.0
                  ) -> tuple[Segment, Segment]:
    """(fitted, held back): the last ``fraction`` of ``segment`` (at least :data:`MIN_HOLDOUT_S` and 50 samples)
    held back. The held-back part starts from a local quadratic fit of each channel over its first
    ``initial_window`` s (as the calibrator's segments), so one noisy sample does not set its initial state.
    :class:`EstimationError` if either part would be shorter than that."""
    t = segment.time
    n = t.size
    n_hold = max(int(round(fraction * n)), 50, int(math.ceil(MIN_HOLDOUT_S / max(segment.sample_period, 1e-9))) + 1)
    if not 0.0 < fraction < 1.0 or n - n_hold < 50:
        raise EstimationError(f"{segment.source}: {segment.duration:.2f} s is too short to hold back "
                              f"{fraction:g} of it (>= {MIN_HOLDOUT_S:g} s and 50 samples each part)")
    i = n - n_hold
    fit = segment.window(float(t[0]), float(t[i - 1]))
    fit = replace(fit, initial_state=segment.initial_state.copy())
    held = segment.window(float(t[i]), float(t[-1]))
    h = max(8, min(held.time.size, int(round(initial_window / max(segment.sample_period, 1e-9))) + 1))
    x0 = held.initial_state.copy()
    tt = held.time[:h] - held.time[0]
    for name, arr in held.measured.items():
        coef = np.polyfit(tt, arr[:h], 2)
        x0[CHANNELS[name]] = float(coef[-1])
    return fit, replace(held, initial_state=x0)


def _columns(result: CalibrationResult, names: Sequence[str]) -> np.ndarray:
    flat = result.draws.reshape(-1, result.draws.shape[-1])
    return flat[:, [result.names.index(n) for n in names]]


def marginal_sd(result: CalibrationResult, channels: Sequence[str]) -> np.ndarray:
    """Per draw and channel the noise model's marginal residual sd ``(n_draws, n_channels)``: ``sigma_c``, with
    ``delta_c`` (a model-discrepancy term) ``sqrt(sigma_c^2 + delta_c^2)`` [channel units]."""
    sd = _columns(result, [f"sigma_{c}" for c in channels]) ** 2
    disc = [f"delta_{c}" for c in channels]
    if all(d in result.names for d in disc):
        sd = sd + _columns(result, disc) ** 2
    return np.sqrt(sd)


def predictive_check(held: Segment, candidate: CalibrationResult, previous: Mapping[str, float],
                     replaced: Mapping[str, float] | None = None, *, tolerance: float = DEFAULT_TOLERANCE,
                     vehicle=None, priors: Mapping | None = None, dt: float | None = None,
                     n_draws: int = BAND_DRAWS, seed: int = 0,
                     fitted: tuple[float, float] = (math.nan, math.nan), label: str | None = None,
                     band: str = "refuse") -> HoldoutCheck:
    """Judge ``candidate`` (a stage's posterior) on the held-back segment ``held`` (module docstring).

    ``previous``: the other stages' 8-DOF values, held fixed for both models (as the fit held them);
    ``replaced``: the stage's accepted posterior means (8-DOF names; ``bphi_f``/``bphi_r`` for bphi), None or
    empty: the description's nominal values (``previous`` over the vehicle's defaults, as the fit's base);
    ``tolerance``: k [SE] of (H4) and the coverage rule; ``vehicle``/``priors``/``dt``: as the fit;
    ``n_draws``: posterior draws of the band (H5); ``label``: how messages name the replaced model (default
    ``accepted`` with ``replaced``, else ``nominal``); ``band``: ``refuse`` (a band holding too few held-back
    samples refuses) or ``warn`` (it is reported, the RMSE rule alone decides). ~``n_draws + 2`` runs of the
    8-DOF on ``held``.
    """
    if band not in BAND_POLICIES:
        raise ValueError(f"band must be one of {', '.join(BAND_POLICIES)}, got {band!r}")
    spec, constants, held = stage_setup(held, candidate.stage, separate_bphi=candidate.separate_bphi,
                                        priors=priors, vehicle=vehicle, dt=dt)
    names = spec.parameter_names
    nominal = base_parameters(spec, previous, constants.default_parameters())
    base = {**nominal, **(replaced or {})}
    problem = StageProblem(held, spec, base, constants)
    chans = spec.channels

    def stage_vector(values: Mapping[str, float]) -> np.ndarray:
        return np.array([values["bphi_f"] + values["bphi_r"] if n == "bphi" else values[n] for n in names])

    theta_repl = stage_vector(base)
    flat = _columns(candidate, names)
    theta_mean = flat.mean(axis=0)
    rng = np.random.default_rng(seed)
    pick = rng.choice(flat.shape[0], min(n_draws, flat.shape[0]), replace=False)
    se0 = initial_state_uncertainty(held, chans)
    held_se = np.array([se0[c] for c in chans])
    sd = np.sqrt(marginal_sd(candidate, chans)[pick] ** 2 + held_se[None, :] ** 2)  # (S, C)
    resp = problem.responses(np.vstack([theta_mean, theta_repl, flat[pick]]))
    data = problem.data                                             # (n, C)
    with np.errstate(invalid="ignore", over="ignore"):
        e = resp[0] - data
        r = resp[1] - data
        pit = ndtr((data[None, :, :] - resp[2:]) / sd[:, None, :]).mean(axis=0)   # (n, C)   (H5)
    out: dict[str, ChannelCheck] = {}
    for j, c in enumerate(chans):
        ej, rj = e[:, j], r[:, j]
        rmse_c, rmse_r = float(np.sqrt(np.mean(ej * ej))), float(np.sqrt(np.mean(rj * rj)))
        z = ej * ej - rj * rj                                                        # (H2)
        if np.all(np.isfinite(z)):
            n_eff = effective_sample_size(z)
            se = float(np.std(z) / math.sqrt(n_eff) / max(rmse_c + rmse_r, 1e-300))  # (H3)
        else:
            n_eff, se = 1.0, math.nan
        inside = np.isfinite(pit[:, j]) & (pit[:, j] >= 0.5 * (1 - BAND)) & (pit[:, j] <= 0.5 * (1 + BAND))
        cov = float(inside.mean())
        n_cov = effective_sample_size(inside.astype(float))
        cov_se = math.sqrt(BAND * (1 - BAND) / n_cov)
        worse = not (math.isfinite(rmse_c) and math.isfinite(se)) or (
            rmse_c - rmse_r > tolerance * se + PRACTICAL_MARGIN * rmse_r)                    # (H4)
        under = cov < BAND - tolerance * cov_se - COVERAGE_MARGIN
        out[c] = ChannelCheck(rmse_c, rmse_r, se, n_eff, cov, cov_se, bool(worse), bool(under))
    notes = tuple(f"{c}: {100 * k.coverage:.0f} % in the 90 % band, wider than needed (> "
                  f"{100 * (BAND + tolerance * k.coverage_se):.0f} %)"
                  for c, k in out.items() if k.coverage > BAND + tolerance * k.coverage_se)
    seg = (float(held.time[0]), float(held.time[-1]))
    rep_vals = {n: float(v) for n, v in zip(names, theta_repl)}
    cand_vals = {n: float(v) for n, v in zip(names, theta_mean)}
    return HoldoutCheck(candidate.stage, seg, fitted, int(held.time.size), out,
                        label or ("accepted" if replaced else "nominal"), rep_vals, cand_vals, float(tolerance),
                        notes=notes, band=band)


__all__ = ["HoldoutCheck", "ChannelCheck", "predictive_check", "split_segment", "effective_sample_size",
           "marginal_sd", "BAND", "DEFAULT_TOLERANCE", "DEFAULT_FRACTION", "PRACTICAL_MARGIN",
           "COVERAGE_MARGIN", "MIN_HOLDOUT_S", "BAND_DRAWS", "BAND_POLICIES", "DEFAULT_BAND"]
