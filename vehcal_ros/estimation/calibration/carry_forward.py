"""A calibration stage carried forward from one drive to the next: the prior of each calibrated parameter on a
new drive is the last accepted posterior, widened for the time since its data.

Drift model (each calibrated parameter a random walk relative to its value, plus a floor)::

    s_prior^2 = s_post^2 + (rate * |m| )^2 * dt_days + (floor * |m|)^2

* ``m``, ``s_post``: the accepted posterior mean and standard deviation (the parameter's unit: N, N/rad,
  N m/rad, N m s/rad or m);
* ``dt_days``: data time from the accepted fit's data (its segment's end) to the new drive's first record, in
  days (stamps in s / 86400); a new drive older than the posterior counts as ``dt_days = 0``;
* ``rate`` [1/sqrt(day)]: relative random-walk intensity (default 0.01: the sd grows by 1 % of the value after one
  day, 10 % after 100 days: tire wear, inflation, load changes);
* ``floor`` [-]: relative sd added whatever the time (default 0.02: a tire change or a different load between two
  drives the same day).

The carried prior handed to the sampler is uniform (the stages' priors are uniform ranges, and the lateral
stage's roll split samples a uniform box) on ``m +- half_width * s_prior`` (default ``half_width`` 3: the
widened posterior's 99.7 % range), clipped to the vehicle description's prior range of the parameter; a clip
leaving less than ``min_share`` of the description's range, or a non-finite summary, falls back to the
description's range. The uniform restricts the new drive's fit to the plausible range rather than sharpening it:
its own sd is ``half_width / sqrt(3)`` times ``s_prior``. A fit whose posterior HDI reaches a carried bound
(:func:`touches_bound`: the data pull beyond the drift model's allowance) is run once more by the calibration
pipeline on the description's ranges, so that a change larger than the model allows is estimated, not clipped.

Spread between windows (random effects). A stage's parameters estimated on one window (a maneuver, a drive) differ
from those of another by more than either's posterior sd says: the 8-DOF is not the vehicle, and which model-form
error its parameters absorb depends on the maneuver (the HMMWV's longitudinal windows of one route: Cxf 96-123 k,
each +- 2-3 k). Each window's best fit is therefore taken as ``theta + b_j + e_j``: ``theta`` the vehicle's
parameters, ``b_j ~ N(0, tau^2)`` the window's own offset (per parameter, independent), ``e_j`` its estimation
error. ``tau^2`` is estimated from the recalibration checks the vehicle's history keeps (each window checked
against the carried posterior: its deviation ``d_j = best_j - mean`` and the variance ``v_j`` the check expects
without spread, the carried posterior's plus the window's own; estimation/calibration/recalibration_check.py) by the
method of moments (DerSimonian & Laird, Controlled Clinical Trials 7 (1986) 177-188, unweighted)::

    tau^2 = max(0, mean_j(d_j^2 - v_j))                                   (:func:`window_spread`)

when the windows are heterogeneous, Cochran's Q = sum_j d_j^2 / v_j above the 1 - :data:`SPREAD_ALPHA` (95 %)
quantile of chi^2(J), J the windows; else 0 (a few windows of an unchanged vehicle give a positive moment estimate
by chance half of the time, and a spread that is not there would hide a real change from the check and the flag).

The carried mean holds offsets of its own (a single window's fit holds that window's ``b``; a model updated by n
windows their mean), so ``E[d^2 - v] = tau^2 (1 + 1/n)`` and the estimate is high by at most a factor 2 (n = 1):
it errs toward wider priors and fewer refits, and a change the drift flag must see (a tire or load change moves a
parameter by many tau) still stands out. ``tau^2`` enters everywhere a new window or drive is compared with the
carried posterior: the carried prior (``s_prior^2`` above plus ``tau^2``), the recalibration check (``tau^2`` added
to the covariance of the window and of the carried posterior, which counts as one window: its Mahalanobis
distance and the information a confirming window adds both count the spread, so confirming windows average their
offsets instead of deferring to the first fit) and the drift flag below. No checked windows (the first drives, an
old state file): ``tau^2 = 0``.

Drift between drives (:func:`drift_flag`): consecutive drives' means ``m_prev``, ``m_i`` with sds ``s_prev``,
``s_i`` differ beyond their uncertainty when ``|m_i - m_prev| > z * sqrt(s_i^2 + s_prev^2 + tau^2 + s_drift^2)``
with ``tau^2`` the spread between windows measured before drive i and
``s_drift^2 = (rate * |m_prev|)^2 * dt_days + (floor * |m_prev|)^2`` (the drift the model allows over the gap) and
``z`` = :data:`DRIFT_Z` (3.0; two independent unbiased drives trip it with probability 0.27 % per parameter).

The free-rolling radius between drives (:func:`radius_flag`): each drive's measurement ``r_i`` with standard error
``se_i`` (estimation/segments.free_rolling_radius) against the previous drive's, the same rule with
``s_drift = radius_floor * r_prev`` and no random walk (tread wear moves it by well under 0.1 mm per day).
``radius_floor`` (default 3e-4: 0.14 mm on a 0.465 m HMMWV tire, 0.10 mm on a 0.339 m sedan tire) is the
allowance for what moves a tire's rolling radius from day to day without a change to the vehicle: inflation with
the tire's temperature, the speeds it was measured at. It is a chosen allowance, not measured on a fleet. The
radius falls with the wheel load (the tire's vertical deflection, Fz / kz): +20 % chassis mass lowers the simulated
HMMWV's by 0.78 mm and the sedan's by 0.89 mm (scores 5.6 and 7.9), one passenger in the sedan (+5 %) by about
0.2 mm (score about 2, not flagged). A flag therefore says: more load (about 10 % or more), a tire or an inflation
change. Nothing here imports rclpy.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass

from vehcal_ros.errors import InputError
from vehcal_ros.inference.quantiles import chi2_upper_quantile

SECONDS_PER_DAY = 86400.0
DRIFT_Z = 3.0
"""[-] z of the drift flag (module docstring)."""
SPREAD_ALPHA = 0.05
"""[-] level of the heterogeneity test that a spread between windows must pass (module docstring)."""


@dataclass(frozen=True)
class DriftModel:
    """How far a calibrated parameter may move between drives (module docstring; relative to its value)."""

    rate: float = 0.01         #: [1/sqrt(day)] relative random-walk intensity
    floor: float = 0.02        #: [-] relative sd added whatever the elapsed time
    half_width: float = 3.0    #: [prior sd] half width of the carried uniform prior
    min_share: float = 1e-6    #: [-] narrowest carried range, as a share of the description's range
    radius_floor: float = 3e-4  #: [-] relative sd of the free-rolling radius between drives (:func:`radius_flag`)

    def validate(self) -> None:
        """Raise :class:`InputError` naming a field out of range."""
        for name, lo, hi in (("rate", 0.0, 10.0), ("floor", 0.0, 10.0), ("half_width", 0.1, 100.0),
                             ("min_share", 0.0, 1.0), ("radius_floor", 0.0, 1.0)):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and not isinstance(v, bool) and lo <= v <= hi):
                raise InputError(f"drift model: {name} = {v!r} is out of range [{lo}, {hi}]")

    def to_dict(self) -> dict[str, float]:
        return asdict(self)

    @classmethod
    def from_mapping(cls, values: Mapping[str, object] | None) -> DriftModel:
        """A validated model from ``{rate, floor, half_width, min_share, radius_floor}`` (absent keys: the
        defaults)."""
        values = dict(values or {})
        unknown = sorted(set(values) - set(cls.__dataclass_fields__))
        if unknown:
            raise InputError(f"drift model: unknown field {unknown[0]!r} (known: "
                             f"{', '.join(cls.__dataclass_fields__)})")
        try:
            model = cls(**{k: float(v) for k, v in values.items()})  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise InputError(f"drift model: every field must be a number, got {values!r}") from None
        model.validate()
        return model


DEFAULT_DRIFT = DriftModel()
"""The drift model used when none is given (the live calibrator's restore, ``vehcal batch --fleet`` without a
``drift`` section in the fleet file)."""


def drift_sd(mean: float, elapsed_s: float, drift: DriftModel) -> float:
    """sd [parameter unit] the drift model adds over ``elapsed_s`` s of data time (negative counts as 0)."""
    days = max(0.0, float(elapsed_s)) / SECONDS_PER_DAY if math.isfinite(elapsed_s) else 0.0
    scale = abs(float(mean))
    return math.sqrt((drift.rate * scale) ** 2 * days + (drift.floor * scale) ** 2)


def window_spread(windows: Iterable[Mapping[str, Sequence[float]]]) -> dict[str, float]:
    """``tau^2`` per parameter [parameter unit^2] (module docstring: the moment estimate where Cochran's Q says the
    windows are heterogeneous, else 0) from checked windows, each ``{parameter: (d, v)}``: its best fit's
    deviation from the carried mean and the variance the check expected without spread; entries that are not two
    finite numbers (v > 0) are left out; a parameter without any: absent."""
    acc: dict[str, list[tuple[float, float]]] = {}
    for window in windows:
        for name, pair in (window or {}).items():
            try:
                d, v = (float(x) for x in pair)
            except (TypeError, ValueError):
                continue
            if math.isfinite(d) and math.isfinite(v) and v > 0.0:
                acc.setdefault(name, []).append((d, v))
    out = {}
    for name, dv in acc.items():
        q = math.fsum(d * d / v for d, v in dv)
        moment = math.fsum(d * d - v for d, v in dv) / len(dv)
        out[name] = max(0.0, moment) if q > chi2_upper_quantile(SPREAD_ALPHA, len(dv)) else 0.0
    return out


def prior_sd(mean: float, sd: float, elapsed_s: float, drift: DriftModel, spread: float = 0.0) -> float:
    """The widened sd ``sqrt(s_post^2 + tau^2 + drift_sd^2)`` [parameter unit] (module docstring; ``spread``:
    ``tau^2``)."""
    return math.sqrt(float(sd) ** 2 + max(0.0, float(spread)) + drift_sd(mean, elapsed_s, drift) ** 2)


def carried_range(mean: float, sd: float, elapsed_s: float, bounds: tuple[float, float],
                  drift: DriftModel, spread: float = 0.0) -> tuple[float, float]:
    """The carried uniform prior ``(lower, upper)`` of one parameter: ``mean +- half_width * prior_sd``, clipped
    to ``bounds`` (the description's range); ``bounds`` itself when the summary is not finite or the clip leaves
    less than ``min_share`` of it."""
    lo_b, hi_b = float(bounds[0]), float(bounds[1])
    if not (math.isfinite(mean) and math.isfinite(sd) and sd >= 0.0 and math.isfinite(spread)):
        return lo_b, hi_b
    half = drift.half_width * prior_sd(mean, sd, elapsed_s, drift, spread)
    lo, hi = max(lo_b, mean - half), min(hi_b, mean + half)
    if not hi - lo > drift.min_share * (hi_b - lo_b):
        return lo_b, hi_b
    return lo, hi


def carried_priors(parameters: Mapping[str, Mapping[str, float]], elapsed_s: float,
                   bounds: Mapping[str, tuple[float, float]], drift: DriftModel,
                   spread: Mapping[str, float] | None = None) -> dict[str, tuple[float, float]]:
    """Carried uniform prior ranges of the parameters that have ``bounds`` (``parameters``: name -> posterior
    summary with ``mean`` and ``std``; ``spread``: name -> ``tau^2``, 0 where absent); parameters without bounds
    (not sampled by the stage) are left out."""
    out = {}
    for name, summary in parameters.items():
        if name not in bounds:
            continue
        out[name] = carried_range(float(summary.get("mean", math.nan)), float(summary.get("std", math.nan)),
                                  elapsed_s, bounds[name], drift, (spread or {}).get(name, 0.0))
    return out


def touches_bound(summary: Mapping[str, float], bounds: tuple[float, float], share: float = 0.01) -> bool:
    """True when a posterior summary's HDI (``hdi_low``, ``hdi_high``) reaches within ``share`` of the range of
    ``bounds`` (a carried prior's): the data pull the parameter against the carried range (a truncated posterior's
    mean stays about one sd inside, its HDI does not)."""
    lo, hi = float(bounds[0]), float(bounds[1])
    margin = share * (hi - lo)
    h_lo, h_hi = float(summary.get("hdi_low", math.nan)), float(summary.get("hdi_high", math.nan))
    return (math.isfinite(h_hi) and h_hi >= hi - margin) or (math.isfinite(h_lo) and h_lo <= lo + margin)


def drift_flag(m_prev: float, s_prev: float, m: float, s: float, elapsed_s: float, drift: DriftModel,
               z: float = DRIFT_Z, spread: float = 0.0) -> tuple[bool, float]:
    """(flag, score): ``score = |m - m_prev| / sqrt(s^2 + s_prev^2 + tau^2 + drift_sd(m_prev, elapsed)^2)``
    (``spread``: ``tau^2``) and ``flag = score > z`` (module docstring); (False, nan) when a number is missing."""
    vals = (m_prev, s_prev, m, s, spread)
    if not all(isinstance(v, (int, float)) and math.isfinite(v) for v in vals):
        return False, math.nan
    denom = math.sqrt(s ** 2 + s_prev ** 2 + max(0.0, spread) + drift_sd(m_prev, elapsed_s, drift) ** 2)
    if denom <= 0.0:
        return (m != m_prev), (math.inf if m != m_prev else 0.0)
    score = abs(m - m_prev) / denom
    return score > z, score


def radius_flag(r_prev: float, se_prev: float, r: float, se: float, drift: DriftModel,
                z: float = DRIFT_Z) -> tuple[bool, float]:
    """(flag, score) of two drives' free-rolling radii [m] with their standard errors [m]: :func:`drift_flag` with
    the radius allowance ``radius_floor * r_prev`` and no random walk (module docstring)."""
    return drift_flag(r_prev, se_prev, r, se, 0.0, DriftModel(rate=0.0, floor=drift.radius_floor), z)


__all__ = ["DriftModel", "DEFAULT_DRIFT", "DRIFT_Z", "SPREAD_ALPHA", "SECONDS_PER_DAY", "window_spread", "drift_sd",
           "prior_sd", "carried_range", "carried_priors", "touches_bound", "drift_flag", "radius_flag"]
