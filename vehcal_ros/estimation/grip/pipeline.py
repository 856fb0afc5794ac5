"""The grip estimation cycle shared by the live node and bag replay.

``GripPipeline`` owns a :class:`~vehcal_ros.estimation.grip.friction_samples.GripDataCollector` (signals -> (s, mu)
samples per scope) and runs Algorithm 1 of the friction paper (:class:`~vehcal_ros.estimation.grip.fit.GripEstimator`)
on each scope's buffer once per cycle. It keeps the last good estimate per scope: a fit that fails (too few
points, unexcited data) or does not converge is reported with a WARN/ERROR status and does not replace it.

A cycle is split in three so a node can keep its executor free: :meth:`snapshot` (fast, under the caller's
lock), :meth:`fit` (slow, in a worker thread, touches no shared state) and :meth:`commit` (fast). Seeds are
``seed + cycle`` so a replay of the same data gives the same numbers as a live run with the same cycle times.

Force source (``force_source``): ``measured`` feeds the tire-force records (a transducer) to the collector;
``estimated`` runs :class:`~vehcal_ros.estimation.sensing.tire_forces.TireForceEstimator` on the wheel speeds
(with their net torque) and the IMU and feeds its forces instead; ``auto`` feeds the measured forces while the
tire-force topic is alive (a sample within ``force_timeout`` s of the newest wheel-speed stamp) and the
estimated ones otherwise. Every friction sample carries ``mu_var`` (0 for measured forces) into the fit.

Road changes (``surface_change``): each fit first tests its samples newer than the scope's published estimate
against that estimate's posterior predictive (:mod:`~vehcal_ros.estimation.grip.surface_change`); from a detected
change on, the scope's fits use only the samples after the estimated change time (and, of the older ones, those
in pure longitudinal slip below the change's friction level: :meth:`GripPipeline.current_surface`).

Health: :meth:`GripPipeline.inputs_report` and :meth:`GripPipeline.reports` give the statuses a live node
publishes on ``/diagnostics`` as plain :class:`~vehcal_ros.diagnostic_levels.HealthReport` data (level, message,
key/values).
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vehcal_ros.diagnostic_levels import ERROR, OK, WARN, HealthReport
from vehcal_ros.errors import EstimationError
from vehcal_ros.estimation.grip.belief import (
    Belief,
    BeliefTracker,
    ContradictionTest,
    HazardModel,
    Odometer,
    floor_mu_max,
    noise_sd,
    sample_floors,
)
from vehcal_ros.estimation.grip.fit import GripConfig, GripEstimate, GripEstimator, MuMax
from vehcal_ros.estimation.grip.friction_samples import (
    GripDataCollector,
    GripSignalConfig,
    ScopeData,
    slip_geometry,
)
from vehcal_ros.estimation.grip.latent_slip import latent_slip
from vehcal_ros.estimation.grip.surface_change import (
    PredictiveReference,
    SurfaceChange,
    SurfaceChangeConfig,
    detect_surface_change,
)
from vehcal_ros.estimation.sensing.can_torque import CanTorqueConfig, CanWheelTorque
from vehcal_ros.estimation.sensing.imu_mounting import ImuYawMount
from vehcal_ros.estimation.sensing.rolling_radius import RollingRadiusConfig, RollingRadiusEstimator, slip_terms
from vehcal_ros.estimation.sensing.speed_reference import resolve_speed_reference
from vehcal_ros.estimation.sensing.tire_forces import TireForceConfig, TireForceEstimator, TireForceVehicle
from vehcal_ros.estimation.sensing.torque_scale import TorqueScaleConfig, TorqueScaleEstimator
from vehcal_ros.inference.blas import BlasThreads
from vehcal_ros.inference.quantiles import normal_quantile
from vehcal_ros.records import (
    Controls,
    GnssVelocity,
    ImuSample,
    TireForce,
    WheelSpeeds,
)
from vehcal_ros.vehicle.description import load_description

FORCE_SOURCES = ("measured", "estimated", "auto")

WATCHED_INPUTS: dict[str, tuple[str, ...]] = {"measured": ("wheel_speeds", "tire_forces", "odom"),
                                              "estimated": ("wheel_speeds", "imu", "odom"),
                                              "auto": ("wheel_speeds", "odom")}
"""Per force source, the input topics a live node reports as silent (WARN) after its ``stale_timeout``."""


@dataclass
class ScopeStatus:
    """Health of one scope's estimate (level 0 OK, 1 WARN, 2 ERROR, as diagnostic_msgs)."""

    level: int = WARN
    message: str = "waiting for data"
    estimate: GripEstimate | None = None       #: last good (converged) estimate
    last_fit: GripEstimate | None = field(default=None, repr=False)  #: last sampled fit, published or not
    estimate_stamp: float = float("nan")       #: header time of the newest sample in that estimate's data
    n_fits: int = 0
    n_failed: int = 0
    n_not_converged: int = 0
    n_prior_dominated: int = 0                 #: published estimates whose mu_max the data barely narrow
    n_skipped_unexcited: int = 0               #: windows below min_excitation: not sampled (counted in n_failed)
    last_fit_s: float = float("nan")           #: wall time of the last fit
    last_attempt_stamp: float = float("nan")
    excitation: float = 0.0                    #: span of |mu| in the fitted data (95th - 5th percentile)
    surface_changes: int = 0                   #: road-surface changes detected (estimation/grip/surface_change.py)
    last_surface_change: float = -math.inf     #: estimated time of the last one, s: older samples are not fitted
    surface_change_level: float = 0.0          #: ... except those with |mu| below this (where the surfaces agreed)
    surface_change_times: list[float] = field(default_factory=list)  #: estimated times of all of them, s
    n_withdrawn: int = 0                       #: estimates withdrawn by the contradiction test
    n_floor: int = 0                           #: floor beliefs put in force (estimation/grip/belief.py)


@dataclass
class FitOutcome:
    """What one fit of one scope produced (an estimate, or why not)."""

    scope: str
    stamp: float
    n_points: int
    excitation: float
    estimate: GripEstimate | None = None
    error: str | None = None
    wall_s: float = 0.0
    surface_change: SurfaceChange | None = None   #: a road change detected in this fit's data
    skipped: bool = False    #: True when the window could never publish and the sampler was not run (pre-gate)
    new_excitation: float = math.inf   #: excitation of the samples newer than the published estimate's data
    mu_floor: float = 0.0    #: the window's largest |mu| beyond its noise (:func:`observed_floor`): mu_max is above
    #: (t, floor) of the samples that can set a floor belief (:func:`floor_candidates`, newest first)
    floor_candidates: tuple[np.ndarray, np.ndarray] | None = None
    #: relative SD of a friction-scale error the force balance showed at the snapshot (:meth:`GripPipeline.
    #: scale_doubt`): the estimate and the floors are widened by it
    scale_error: float = 0.0


SUBSAMPLE_RULES = ("even", "excitation")

RADIUS_DOUBT = 0.005
"""A learnt rolling-radius scale further than this from 1 (and 3 SDs) names the description's radius as doubtful."""

NOISE_DOUBT = 3.0
"""A wheel-speed scatter per sample (the rolling radius's pooled free-rolling scatter about local lines) above
this multiple of the stated ``wheel_speed_noise`` names that noise as doubtful: the 10-sample scatter's own
sampling error is ~25 %, so 3x is far beyond it, and a noise variance 9x the stated one is what a tire-force
filter tuned to the stated one cannot absorb."""

ACCEL_DOUBT = 0.05
"""m/s^2: a learnt accelerometer offset larger than this (and 3 SDs) names the IMU as doubtful: a calibrated
automotive IMU's bias is a few 0.01 m/s^2, and 0.05 m/s^2 is 0.3 deg of mounting pitch."""

MIN_TORQUE_SHARE = 0.5
"""Estimated forces: more than this share of wheel-speed samples without a torque names the missing torque."""

TORQUE_DOUBT = 0.02
"""A learnt torque scale (estimation/sensing/torque_scale.py) further than this from 1 (and 3 SDs) names the reported
wheel torques, or the description's mass, as doubtful (learnt whether or not ``torque_scale_learning`` applies
it): the scale agrees with 1 within 0.5 % on the simulated HMMWV's exact torques."""


def subsample(data: ScopeData, n_max: int, rule: str = "even", deconvolve: bool = True) -> ScopeData:
    """At most ``n_max`` samples for the fit (its cost is O(n)), chosen on time or the slip, never on the friction.

    ``rule="even"`` (the default): evenly spaced in time order, the newest kept. ``rule="excitation"`` (NOT the
    default: simulation-based calibration put its 90 % intervals at 83.5 % over 200 sets of
    600-block windows, against 88.5 % evenly in time on the same sets, benchmarks/README_grip.md):

    A window of everyday driving is mostly cruise and coast near zero slip; the few blocks that climb the curve
    (an acceleration, a brake) are what identify its top. Taken evenly in time, 100 of the ~600 blocks of the
    accel_coast window kept 13 of its 80 acceleration blocks and the front estimate fell to 0.67 [0.54, 0.86]
    (truth 0.90; all 602 blocks: 0.81 [0.69, 0.95]). So the samples are ranked by the excitation |slip| of the
    maneuver they belong to (:func:`local_excitation`), then chosen by :func:`stratified_indices` (dyadic strata
    of the rank, the same number of samples from each, evenly in time within a stratum; the newest sample always
    kept). The choice depends on the slips (the regressor) only, so
    the likelihood of the friction given the chosen slips is unchanged: selecting on the friction would bias it.

    With slip variances and ``deconvolve`` (the fit's ``slip_prior="deconvolved"``), under either rule (a fit that
    deconvolves its 100 samples alone reads the HMMWV's first daily-drive estimates at 0.4-0.65 against 0.90,
    benchmarks/README_tire_forces.md), each true slip's posterior
    (:mod:`~vehcal_ros.estimation.grip.latent_slip`) is taken under the slip distribution deconvolved from EVERY
    sample of the window: the selected samples' distribution is the selection's, not the vehicle's (and an
    evenly-in-time share of 200 of the accel_coast window's 602 blocks merged its tight acceleration cluster
    into a broad component, the failure the latent-slip model exists to avoid: 0.53 [0.50, 0.60] vs 0.90).
    The returned slips are then those posterior means and variances, the excitation rank uses them, and
    ``slip_is_latent`` tells the fit not to deconvolve again."""
    n = data.t.size
    if n <= n_max:
        return data
    latent = None
    v = data.slip_var
    if deconvolve and v is not None and np.any(v > 0.0):
        ok = np.flatnonzero(np.isfinite(data.slip) & np.isfinite(v) & (v >= 0.0))
        m, w = np.array(data.slip, dtype=float), np.array(v, dtype=float)
        m[ok], w[ok] = latent_slip(m[ok], w[ok])
        latent = (m, w)
    if rule == "even":
        idx = even_indices(n, n_max)
    else:
        key = np.abs(latent[0] if latent is not None else data.slip)
        idx = stratified_indices(local_excitation(np.where(np.isfinite(key), key, 0.0)), n_max)
    arrays = {f.name: getattr(data, f.name)[idx] for f in dataclasses.fields(data)
              if isinstance(getattr(data, f.name), np.ndarray)}   # t, slip, mu, slip_var, mu_var, lat
    if latent is not None:
        arrays.update(slip=latent[0][idx], slip_var=latent[1][idx], slip_is_latent=True)
    return dataclasses.replace(data, **arrays)


def even_indices(n: int, n_max: int) -> np.ndarray:
    """At most ``n_max`` of ``n`` indices evenly spaced in time order, the first and the newest kept."""
    if n <= n_max:
        return np.arange(n)
    return np.unique(np.round(np.linspace(0, n - 1, n_max)).astype(int))


EXCITATION_SPAN = 9
"""Samples (time order) whose mean |slip| ranks a sample: ~0.5 s of an axle's two wheels' 0.1 s blocks."""


def local_excitation(abs_slip: np.ndarray, span: int = EXCITATION_SPAN) -> np.ndarray:
    """Mean of ``abs_slip`` over the ``span`` samples centred on each (fewer at the ends): the excitation of the
    maneuver a sample belongs to. Ranking by it instead of the sample's own |slip| keeps the choice from
    favouring the samples whose slip NOISE is largest (SBC ``live_window``: ranking by the own |slip| put
    90 % coverage at 83 %, the true slips' posterior being least exact at the edge of their distribution)."""
    if abs_slip.size <= 1 or span <= 1:
        return abs_slip.copy()
    kernel = np.ones(span)
    return np.convolve(abs_slip, kernel, "same") / np.convolve(np.ones(abs_slip.size), kernel, "same")


def stratified_indices(key: np.ndarray, n_max: int) -> np.ndarray:
    """Sorted indices of at most ``n_max`` of the samples (time order), chosen by their excitation ``key``
    alone: the rank of ``key`` is cut in dyadic strata from the top (the lower half, the next quarter, eighth,
    ..., down to a top stratum of at most 4 samples); each stratum gives the same number of samples, a stratum
    with fewer gives all of them and the rest go to the others (water-filling); within a stratum they are taken
    evenly in time. The newest sample (the last) is always kept. The top 1/2^k of the excitation thus gets
    about k / L of the budget instead of 1/2^k: a window of cruise with one acceleration keeps the acceleration."""
    n = key.size
    if n <= n_max:
        return np.arange(n)
    by_rank = np.argsort(key, kind="stable")            # least excited first
    strata, lo = [], 0
    while n - lo > 4:
        hi = lo + (n - lo + 1) // 2
        strata.append(by_rank[lo:hi])
        lo = hi
    strata.append(by_rank[lo:])
    sizes = np.array([s.size for s in strata])
    budget = n_max - 1                                   # one place for the newest sample
    quota = np.zeros(sizes.size, dtype=int)
    while budget > 0 and np.any(quota < sizes):          # water-filling: equal shares, capped by the sizes
        open_ = np.flatnonzero(quota < sizes)
        share = max(budget // open_.size, 1)
        for k in open_[::-1]:                            # the most excited strata first when the shares run out
            add = min(share, sizes[k] - quota[k], budget)
            quota[k] += add
            budget -= add
            if budget == 0:
                break
    chosen = [n - 1]
    for members, q in zip(strata, quota):
        if q:
            members = np.sort(members)
            chosen.extend(members[np.unique(np.round(np.linspace(0, members.size - 1, q)).astype(int))])
    return np.unique(np.asarray(chosen, dtype=int))   # n_max, or n_max - 1 when a stratum chose the newest


def observed_floor(data: ScopeData, sigma: float, level: float = 0.01, since: float = -math.inf) -> float:
    """The largest of :func:`sample_floors`: the road under these samples offered at least this much friction,
    unless a false alarm of probability ``level``, so no credible interval of its mu_max may end below it. 0
    without samples."""
    floor = sample_floors(data, sigma, level, since)[1]
    return float(max(np.max(floor), 0.0)) if floor.size else 0.0


def floor_candidates(data: ScopeData, sigma: float, level: float = 0.01,
                     since: float = -math.inf) -> tuple[np.ndarray, np.ndarray]:
    """(t, floor) of the samples whose :func:`sample_floors` value is positive and above that of every newer
    sample, newest first: the samples that can set a floor belief (an older sample is worth more only with a
    higher floor, since the road-change hazard ages it longer)."""
    t, f = sample_floors(data, sigma, level, since)
    if t.size == 0:
        return t, f
    order = np.argsort(t, kind="stable")[::-1]          # newest first
    t, f = t[order], f[order]
    best_newer = np.concatenate([[0.0], np.maximum.accumulate(f)[:-1]])
    keep = f > best_newer
    return t[keep], f[keep]


def with_floor_only(data: ScopeData) -> ScopeData:
    """``data``'s frictions (t, mu, mu_var) in time order with its :attr:`ScopeData.floor_only` samples (taken
    while the rolling radius was being learnt) merged in: what :func:`floor_candidates` reads. ``data`` itself
    when it has none."""
    if data.floor_only is None or data.floor_only[0].size == 0:
        return data
    ft, fmu, fvar = data.floor_only
    mu_var = np.zeros(data.t.size) if data.mu_var is None else np.asarray(data.mu_var, dtype=float)
    t = np.concatenate([np.asarray(data.t, dtype=float), ft])
    order = np.argsort(t, kind="stable")
    return ScopeData(scope=data.scope, t=t[order], slip=np.zeros(t.size),
                     mu=np.concatenate([np.asarray(data.mu, dtype=float), fmu])[order],
                     mu_var=np.concatenate([mu_var, fvar])[order])


def floored(estimate: GripEstimate, floor: float) -> GripEstimate:
    """A prior-dominated estimate with the lower end of its interval at the data's floor when that is lower.

    When the data barely narrow mu_max, the posterior's lower quantile is set by the prior's bulk: the uniform
    prior on D (up to 1.7 for published tires) puts it near 0.35-0.5 whatever the road, above a snowy road's 0.3
    (measured: grip overstated 16 % of a 15-minute snow drive). What such data establish is only the floor, the
    largest friction they show beyond their noise (:func:`observed_floor`), which every road under them offers;
    the interval [min(lower, floor), upper] holds at least the posterior's probability."""
    mu = estimate.mu_max
    if not floor < mu.lower:
        return estimate
    return dataclasses.replace(estimate, mu_max=dataclasses.replace(mu, lower=max(float(floor), 0.0)))


def with_scale_error(estimate: GripEstimate, rel_sd: float) -> GripEstimate:
    """``estimate`` with its mu_max widened by a friction-scale error common to all its samples, mu_max (1 + e),
    e ~ N(0, ``rel_sd``^2): the estimated forces' normal loads rest on the description's constants (mass, CG,
    roll split) whose error does not average out over a window's samples. Each half of the interval and the
    std combine with it in quadrature: lower' = m - sqrt((m - lower)^2 + (z m rel_sd)^2), upper' alike (z of the
    interval's probability), std' = sqrt(std^2 + (m rel_sd)^2). ``rel_sd`` 0: unchanged."""
    mu = estimate.mu_max
    if not rel_sd > 0.0:
        return estimate
    m = float(mu.mean)
    z = normal_quantile(0.5 + 0.5 * float(mu.prob))
    d = z * m * rel_sd
    widened = dataclasses.replace(mu, std=math.hypot(float(mu.std), m * rel_sd),
                                  lower=max(m - math.hypot(m - float(mu.lower), d), 0.0),
                                  upper=m + math.hypot(float(mu.upper) - m, d))
    return dataclasses.replace(estimate, mu_max=widened)


def mu_span(mu: np.ndarray) -> float:
    """The span of |mu| (95th - 5th percentile), friction; 0 without samples."""
    return float(np.subtract(*np.quantile(np.abs(mu), [0.95, 0.05]))) if mu.size else 0.0


def excitation_of(data: ScopeData) -> float:
    """The span of |mu| the samples cover (:func:`mu_span`): a curve is only identified by data that climb it;
    one cluster (e.g. a launch at constant acceleration) spans nothing, however high it sits."""
    return mu_span(data.mu)


def pure_slip(data: ScopeData) -> np.ndarray:
    """Per sample: True when it was taken in pure longitudinal slip (``lat`` 0, or no ``lat`` at all), i.e. its
    friction follows the pure-slip curve, whose low part (the slip stiffness) a road change barely moves. A
    sample at a slip angle under the friction ellipse (``lat`` > 0) follows the combined curve, whose apparent
    slip stiffness K / sqrt(1 + (K lat / mu_max)^2) falls with the road's friction at every slip
    (:func:`~vehcal_ros.models.pacejka.combined`): after a road change it does not follow the new surface's
    curve however low its friction (on the sedan's daily drive, the dry road's samples at |mu| 0.02-0.2 sit
    +0.3 to +0.6 SD above the wet posterior predictive, the wet samples -0.25 to +0.14 SD;
    benchmarks/README_tire_forces.md), so :meth:`GripPipeline.current_surface` drops it."""
    lat = getattr(data, "lat", None)
    if lat is None:
        return np.ones(data.t.size, dtype=bool)
    return ~(np.asarray(lat) > 0.0)


@dataclass
class GripPipeline:
    """Signals in, per-scope grip estimates out; see the module docstring for the cycle."""

    #: the friction-sample settings; default: the shipped ones on the package's default vehicle description
    signal_config: GripSignalConfig = field(default_factory=GripSignalConfig.from_description)
    fit_config: GripConfig = field(default_factory=GripConfig)
    warm_start: bool = True
    warm_steps: int = 10_000     #: steps per chain before the first convergence check of a warm-started fit
    warm_burn_in: float = 0.2    #: burn-in fraction of a warm-started fit's chains (they start in the posterior)
    min_new_points: int = 20     #: a scope is refitted only when this many new samples arrived since its last fit
    max_fit_points: int = 100    #: a fit uses at most this many samples of the window (:func:`subsample`)
    subsample_rule: str = "even"  #: how they are chosen: "even" in time or by slip "excitation" (:func:`subsample`)
    max_r_hat: float = 1.01      #: publish only when every split R-hat (theta, sigma, mu_max) is at most this
    min_ess: float = 400.0       #: ... and every bulk ESS at least this
    min_ess_tail: float = 400.0  #: ... and every tail ESS at least this
    min_excitation: float = 0.15  #: ... and the span of |mu| in the window (95th - 5th percentile) reaches this
    force_source: str = "measured"  #: "measured", "estimated" or "auto" (module docstring)
    force_config: TireForceConfig | None = None   #: the force estimator's settings (None: HMMWV defaults)
    force_timeout: float = 0.5   #: s, auto: the tire-force topic counts as alive this long after its last sample
    shape_prior: bool = False    #: fit with a tire-shape prior learnt from this scope's published estimates
    shape_prior_inflation: float = 4.0  #: variance factor of the learnt shape prior (room for a changed shape)
    surface_change: SurfaceChangeConfig = field(default_factory=SurfaceChangeConfig)  #: road-change test
    #: publish (fit) only when the samples newer than the published estimate's data reach ``min_excitation``
    #: (:meth:`pre_gate`; benchmarks/README_tire_forces.md)
    require_new_excitation: bool = True
    hazard: HazardModel = field(default_factory=HazardModel)   #: the belief in force over time (grip_belief.py)
    #: the online rolling radius (estimation/sensing/rolling_radius.py; None = the description's radius as it is)
    radius_config: RollingRadiusConfig | None = None
    max_radius_sd: float = 0.002   #: friction samples wait until SD(k) / k of both axles is at most this
    #: the contradiction test of the belief in force (grip_belief.py; None = off)
    contradiction: ContradictionTest | None = field(default_factory=ContradictionTest)
    #: a window that publishes no fit may put a floor belief in force (grip_belief.py, :meth:`offer_floor`)
    floor_belief: bool = True
    #: relative SD of a friction-scale error common to a fit's samples (:func:`with_scale_error`): the estimated
    #: forces' ``fz_rel_std`` (pipeline_from_params), 0 for measured forces
    mu_scale_sd: float = 0.0
    #: the wheels' net torque from CAN signals (estimation/sensing/can_torque.py; None: as the wheel speeds carry it)
    can_torque: CanTorqueConfig | None = None

    def __post_init__(self) -> None:
        if self.force_source not in FORCE_SOURCES:
            raise ValueError(f"force_source must be one of {', '.join(FORCE_SOURCES)}, got {self.force_source!r}")
        if self.subsample_rule not in SUBSAMPLE_RULES:
            raise ValueError(f"subsample_rule must be one of {', '.join(SUBSAMPLE_RULES)}, got {self.subsample_rule!r}")
        if not 0.0 < self.force_timeout <= 60.0:
            raise ValueError(f"force_timeout must be in (0, 60] s, got {self.force_timeout}")
        if self.contradiction is not None:   # a learnt radius is trusted to max_radius_sd: a slip error that stays
            self.contradiction = dataclasses.replace(self.contradiction, shared_slip_sd=self.max_radius_sd)
        self.collector = GripDataCollector(self.signal_config)
        self.force_estimator = (TireForceEstimator(self.force_config) if self.force_source != "measured"
                                else None)
        if self.force_estimator is not None:   # the torque-scale regression's toe drag
            self.force_estimator.toe_squares = self.collector.toe_squares
        self.can = CanWheelTorque(self.can_torque) if self.can_torque is not None else None
        self._measured_t = -math.inf
        self.status: dict[str, ScopeStatus] = {s: ScopeStatus() for s in self.collector.scopes()}
        self.cycle = 0
        self._accepted_at_fit: dict[str, int] = dict.fromkeys(self.status, -1)
        self._fill_at_fit: dict[str, float] = dict.fromkeys(self.status, -np.inf)
        self._shape_history: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
        self.cancel = threading.Event()  #: set it to end running fits early (their chains stop extending)
        self.config_warnings: list[str] = []   #: parameters that override the vehicle description (WARN)
        self.radius = RollingRadiusEstimator(self.radius_config) if self.radius_config is not None else None
        self.imu_mount = ImuYawMount()   #: the IMU's mounting yaw: named (doubtful_assumptions) and turned back
        self.odometer = Odometer()   #: distance travelled (the road-change hazard's clock)
        self.collector.on_speed = self.odometer.add_speed   # driven by the slips' speed reference
        self.beliefs: dict[str, BeliefTracker] = {
            s: BeliefTracker(self.hazard, self.fit_config.interval_prob, self.odometer) for s in self.status}
        self._scratch = BeliefTracker(self.hazard, self.fit_config.interval_prob, self.odometer)
        self.floor_updates: list[tuple[str, MuMax, float]] = []   #: (scope, mu_max, data stamp) of the last commit

    # -------------------------------------------------------------- cycle
    def add(self, record: object) -> list[TireForce]:
        """Feed one record; returns the estimated tire forces it produced (empty unless a force estimator runs
        and ``record`` is a wheel-speed sample). With CAN torque signals (``can_torque``) a wheel-speed sample
        takes its wheels' net torque from them (:meth:`CanWheelTorque.fill`)."""
        if self.can is not None:
            record = self.can.route(record)
            if record is None:
                return []
        if isinstance(record, ImuSample):
            self.imu_mount.add_imu(record)
            record = self.imu_mount.corrected(record)   # turned back by a named mounting yaw
        elif isinstance(record, GnssVelocity):
            self.imu_mount.add_gnss(record)
        radius = self.radius
        if radius is not None and isinstance(record, (WheelSpeeds, ImuSample, Controls, GnssVelocity)):
            radius.add(record)
            if isinstance(record, GnssVelocity):   # a speed reference: the slips use the learnt radius
                self._use_radius(radius)
        if isinstance(record, GnssVelocity):
            self.collector.add_gnss(record)
            if self.force_estimator is not None:   # the road grade of its torque-scale regression
                self.force_estimator.add_gnss(record)
            return []
        est = self.force_estimator
        if est is None:
            self.collector.add(record)
            return []
        if isinstance(record, TireForce):
            if math.isfinite(record.t):
                self._measured_t = max(self._measured_t, record.t)
            if self.force_source == "auto":
                self.collector.add_tire_force(record)
            return []
        if isinstance(record, ImuSample):
            self.collector.add_imu(record)   # first: the force estimator's regression reads its toe at this stamp
            est.add_imu(record)
            return []
        self.collector.add(record)
        if not isinstance(record, WheelSpeeds):
            return []
        forces = est.add_wheel_speeds(record)
        if forces and not self.measured_alive(record.t):
            for f in forces:
                self.collector.add_tire_force(f, estimated=True)
        return forces

    def reject(self, topic: str, reason: str) -> None:
        """Count a message of ``topic`` refused before it became a record (malformed, implausible, bad stamp)."""
        self.collector.reject(topic, reason)

    def use_odometer(self, odometer: Odometer) -> None:
        """Age the beliefs by ``odometer`` (a parallel replay's committing pipeline, which is fed no records, takes
        its planner's)."""
        self.odometer = odometer
        for tracker in (*self.beliefs.values(), self._scratch):
            tracker.odometer = odometer

    def _use_radius(self, radius: RollingRadiusEstimator) -> None:
        """Hand the learnt radius scale to the collector; hold its friction samples back while k is uncertain.
        Once k is known (the gate open), the force estimator's lever follows the measured radius too: each axle's
        lever base moves by (k - 1) R_desc at the static load (:meth:`TireForceEstimator.set_lever_shift`), so a
        tire radius the description has wrong does not scale every estimated Fx."""
        k, sd = radius.k, radius.sd
        self.collector.radius_scale[0], self.collector.radius_scale[1] = k
        self.collector.radius_gate = max(sd[0] / k[0], sd[1] / k[1]) > self.max_radius_sd
        if self.force_estimator is not None and not self.collector.radius_gate:
            cfg = radius.config
            self.force_estimator.set_lever_shift((k[0] - 1.0) * cfg.radius_desc(0), (k[1] - 1.0) * cfg.radius_desc(1))

    def measured_alive(self, t: float) -> bool:
        """auto: True while measured tire forces arrive (the newest within ``force_timeout`` s of ``t``)."""
        return self.force_source == "auto" and abs(t - self._measured_t) <= self.force_timeout

    def use_model_parameters(self, values: Mapping[str, Any]) -> bool:
        """Take the calibrated roll stiffnesses (lateral load split) and rolling resistance (spin equation) from
        ``vehcal/model_parameters``'s ``model`` status: keys ``model.kphi_f``, ``model.kphi_r``, ``model.rr`` and
        ``calibrated``, a comma list. Only values the calibrator has accepted count (not its defaults); returns
        True when any was taken."""
        est = self.force_estimator
        calibrated = str(values.get("calibrated", "")).split(",")
        if est is None:
            return False
        taken = False
        try:
            if "kphi_f" in calibrated and "kphi_r" in calibrated:
                taken |= est.set_roll_stiffness(float(values["model.kphi_f"]), float(values["model.kphi_r"]))
            if "rr" in calibrated:
                taken |= est.set_rolling_resistance(float(values["model.rr"]))
        except (KeyError, TypeError, ValueError):
            return False
        return taken

    @property
    def active_force_source(self) -> str:
        """What feeds the friction samples now: "measured" or "estimated"."""
        if self.force_source == "auto":
            t = self.collector.last_stamp.get("wheel_speeds", math.nan)
            return "measured" if self.measured_alive(t) else "estimated"
        return self.force_source

    def snapshot(self) -> list[ScopeData]:
        """Copies of the scopes that have enough new data to be worth a fit (every sample of the window)."""
        out = []
        for scope in self.collector.scopes():
            data = self.collector.snapshot(scope)
            floor_t = data.floor_only[0] if data.floor_only is not None else np.empty(0)
            if data.t.size == 0 and floor_t.size == 0:
                continue
            if data.t_end < self._fill_at_fit[scope]:  # the clock went back (restart): everything is new
                self._fill_at_fit[scope] = -np.inf
            new = int(np.sum(data.t > self._fill_at_fit[scope])) + int(np.sum(floor_t > self._fill_at_fit[scope]))
            if new < self.min_new_points:
                continue
            data.scale_error = self.scale_doubt()
            out.append(data)   # the whole window: fit() tests it for a road change, then subsamples
        return out

    def scale_doubt(self) -> float:
        """|k - 1| of the estimated forces' torque scale (estimation/sensing/torque_scale.py) while it is named as
        doubtful (:meth:`_doubted_scale`) and not applied; else 0. The wheel torques, the mass or the spin inertia the
        force balance contradicts scale the frictions by about that much, and which of them is wrong it cannot tell: the
        fits' and floors' intervals are widened by it as a relative SD (what cannot be estimated is widened)."""
        scale = self._doubted_scale()
        return abs(scale.scale - 1.0) if scale is not None and not scale.config.apply else 0.0

    def _doubted_scale(self) -> TorqueScaleEstimator | None:
        """The estimated forces' torque scale when it is learnt and departs from 1 by more than ``TORQUE_DOUBT``
        and 3 of its SDs; else None."""
        est = self.force_estimator
        scale = est.torque_scale if est is not None and self.active_force_source == "estimated" else None
        if scale is None or not scale.learnt:
            return None
        return scale if abs(scale.scale - 1.0) > max(TORQUE_DOUBT, 3.0 * scale.scale_sd) else None

    def fit(self, snapshots: list[ScopeData]) -> list[FitOutcome]:
        """Run Algorithm 1 on each snapshot (slow; call from a worker thread), OpenBLAS on one thread (its small
        linear algebra gains nothing from more, and spinning BLAS threads cost CPU: inference/blas.py)."""
        with BlasThreads(1):
            return self._fit_each(snapshots)

    def _fit_each(self, snapshots: list[ScopeData]) -> list[FitOutcome]:
        """:meth:`fit`'s loop: the pre-gate, then Algorithm 1 per snapshot (warm-started where possible)."""
        cycle = self.cycle
        outcomes = []
        for k, data in enumerate(snapshots):
            if self.cancel.is_set():  # shutting down: no new fits
                break
            if data.t.size == 0:   # only samples taken while the rolling radius is being learnt: a floor at most
                outcomes.append(self._floor_only_outcome(data))
                continue
            t_end, scale_error = data.t_end, data.scale_error
            data, change = self.current_surface(data)   # on every sample of the window, before subsampling
            config = dataclasses.replace(self.fit_config, seed=int(self.fit_config.seed) + 1000 * cycle + k,
                                         shape_prior=self.learnt_shape_prior(data.scope))
            window = data
            # the gate's span of |mu|: of the fitted samples when they are the window's even share, of the whole
            # window when the subsample leans to its excited blocks (the frictions: no deconvolution needed)
            gate_mu = (window.mu[even_indices(window.mu.size, self.max_fit_points)] if self.subsample_rule == "even"
                       else window.mu)
            outcome = FitOutcome(scope=window.scope, stamp=t_end, n_points=int(min(window.mu.size,
                                                                                   self.max_fit_points)),
                                 excitation=mu_span(gate_mu), surface_change=change,
                                 scale_error=scale_error,
                                 new_excitation=self.new_excitation(window) if self.require_new_excitation
                                 else math.inf)
            since = change.time if change is not None else self.status[window.scope].last_surface_change
            if self.floor_belief:
                outcome.floor_candidates = self.window_floors(window, since)
            if self.pre_gate(outcome):   # before the subsample's deconvolution: a skipped window costs nothing
                outcomes.append(outcome)
                continue
            data = subsample(window, self.max_fit_points, self.subsample_rule, config.slip_prior == "deconvolved")
            if data.slip_is_latent:   # deconvolved over the whole window already (subsample's docstring)
                config = dataclasses.replace(config, slip_prior="flat")
            outcome.n_points = int(data.mu.size)
            previous = self.warm_start_of(data.scope)
            if previous is not None:
                config = self.warm_config(config)
            t0 = time.perf_counter()
            try:
                outcome.estimate = GripEstimator(config).fit(data.slip, data.mu, warm_start=previous,
                                                             slip_var=data.slip_var,
                                                             mu_var=getattr(data, "mu_var", None),
                                                             stop=self.cancel.is_set,
                                                             lateral=getattr(data, "lat", None))
            except EstimationError as exc:
                outcome.error = str(exc)
            except (ValueError, FloatingPointError, np.linalg.LinAlgError) as exc:
                outcome.error = f"fit failed: {exc}"
            outcome.wall_s = time.perf_counter() - t0
            if outcome.estimate is not None:   # the samples since the last road change only
                outcome.mu_floor = observed_floor(window, outcome.estimate.sigma, since=since)
            outcomes.append(outcome)
        return outcomes

    def _floor_only_outcome(self, data: ScopeData) -> FitOutcome:
        """The outcome of a window whose samples all wait for the rolling radius (:attr:`ScopeData.floor_only`):
        not fitted (no slips), its floor candidates taken since the scope's last road change."""
        o = FitOutcome(scope=data.scope, stamp=data.t_end, n_points=0, excitation=0.0, surface_change=None,
                       new_excitation=0.0, scale_error=data.scale_error)
        o.skipped = True
        o.error = ("no slips yet: the rolling radius is being learnt (max_radius_sd); the samples' friction bounds "
                   "mu_max from below")
        if self.floor_belief:
            o.floor_candidates = self.window_floors(data, self.status[data.scope].last_surface_change)
        return o

    def window_floors(self, data: ScopeData, since: float) -> tuple[np.ndarray, np.ndarray]:
        """:func:`floor_candidates` of a window's frictions since ``since``, its samples waiting for the rolling
        radius included (:func:`with_floor_only`)."""
        frictions = with_floor_only(data)
        return floor_candidates(frictions, self.floor_sigma(frictions, since), since=since)

    def floor_sigma(self, data: ScopeData, since: float) -> float:
        """The friction noise std of a window's floor (:func:`sample_floors`): the larger of the scope's last
        fit's sigma and the window's own noise (:func:`noise_sd` of its samples since ``since``)."""
        last = self.status[data.scope].last_fit
        own = noise_sd(np.asarray(data.mu)[np.asarray(data.t) >= since])
        return max(own, float(last.sigma) if last is not None and math.isfinite(last.sigma) else 0.0)

    def offer_floor(self, o: FitOutcome) -> bool:
        """Put a floor belief (grip_belief.py) in force for ``o.scope`` when one of the window's candidates
        gives a higher lower bound at the window's end (``o.stamp``) than the estimate in force, hazard-aged to
        then (0 without one; a withdrawal is not looked at, so a replay, which reruns the contradiction test
        afterwards, decides as the live node): the candidate with the highest hazard-aged lower bound then,
        stamped with its sample's time. Returns True when it did (``floor_updates`` holds it)."""
        cands = o.floor_candidates
        if not self.floor_belief or cands is None or cands[0].size == 0:
            return False
        prob = self.fit_config.interval_prob
        now = self.beliefs[o.scope].belief(o.stamp, kept=True)
        best, best_lower = None, now.lower if now.known else 0.0
        shrink = max(0.0, 1.0 - normal_quantile(0.5 + 0.5 * prob) * o.scale_error)   # a doubted force scale
        for t_i, f_i in zip(*cands):
            mu = floor_mu_max(float(f_i) * shrink, self.hazard, prob)
            self._scratch.set_estimate(mu, float(t_i), floor=True)
            lower = self._scratch.belief(o.stamp, kept=True).lower
            if lower > best_lower + 1e-6:
                best, best_lower = (mu, float(t_i)), lower
        if best is None:
            return False
        mu, t_i = best
        self.beliefs[o.scope].set_estimate(mu, t_i, floor=True)
        self.floor_updates.append((o.scope, mu, t_i))
        st = self.status[o.scope]
        st.n_floor += 1
        st.message += (f"; floor belief in force: mu_max >= {mu.lower:.3f} (the largest friction the data show "
                       f"beyond their noise at t = {t_i:.2f} s; no curve identified)")
        return True

    def commit(self, outcomes: list[FitOutcome]) -> list[str]:
        """Record the outcomes; return the scopes whose published estimate changed (a floor belief put in force
        is not one: ``floor_updates`` lists those of this commit)."""
        updated = []
        self.floor_updates = []
        for o in outcomes:
            st = self.status[o.scope]
            st.n_fits += 1
            st.last_fit_s = o.wall_s
            st.last_attempt_stamp = o.stamp
            st.excitation = o.excitation
            self._fill_at_fit[o.scope] = o.stamp
            if o.surface_change is not None:
                st.surface_changes += 1
                st.last_surface_change = max(st.last_surface_change, o.surface_change.time)
                st.surface_change_level = o.surface_change.level
                st.surface_change_times.append(o.surface_change.time)
            if o.estimate is not None:
                o.estimate = with_scale_error(o.estimate, math.hypot(self.mu_scale_sd, o.scale_error))
                st.last_fit = o.estimate
            if o.estimate is None:
                st.n_failed += 1
                st.n_skipped_unexcited += int(o.skipped)
                st.level = WARN if (st.estimate is not None or o.skipped or "excit" in (o.error or "")
                                    or "few" in (o.error or "")) else ERROR
                keep = "; keeping the last good estimate" if st.estimate is not None else ""
                st.message = f"{o.error}{keep}"
                self.offer_floor(o)
                continue
            e = o.estimate
            withheld = self._withheld(o)
            if withheld is not None:
                counter, why = withheld
                setattr(st, counter, getattr(st, counter) + 1)
                st.level = WARN
                keep = "; keeping the last good estimate" if st.estimate is not None else ""
                st.message = f"{why}: not published{keep}"
                self.offer_floor(o)
                continue
            if e.prior_dominated:
                e = floored(e, o.mu_floor)
            st.estimate = e
            self.beliefs[o.scope].set_estimate(e.mu_max, o.stamp, e)
            if e.shape_cov is not None and not e.shape_prior_used:
                self._shape_history.setdefault(o.scope, []).append((np.asarray(e.shape_mean), e.shape_cov))
            st.estimate_stamp = o.stamp
            st.level = OK
            st.message = (f"mu_max {e.mu_max_mean:.3f} [{e.mu_max_lower:.3f}, {e.mu_max_upper:.3f}] "
                          f"from {o.n_points} points, excitation {o.excitation:.2f}")
            if e.prior_dominated:
                st.n_prior_dominated += 1
                st.message += (f"; prior-dominated (posterior std {e.mu_max.std:.2f} > "
                               f"{self.fit_config.prior_dominated_ratio:.2f} x prior std {e.mu_max_prior_std:.2f}): "
                               "its lower bound is the largest friction the data show")
            if o.surface_change is not None:
                st.message += f"; road surface change detected at t = {o.surface_change.time:.2f} s"
            updated.append(o.scope)
        self.cycle += 1
        return updated

    def current_surface(self, data: ScopeData) -> tuple[ScopeData, SurfaceChange | None]:
        """(the samples of ``data`` on the scope's current road surface, a change detected now or None): tests
        the samples newer than the published estimate against its posterior predictive
        (estimation/grip/surface_change.py) and drops the older ones, except those in pure longitudinal slip
        (:func:`pure_slip`) at friction levels below where the last detected change showed (|mu| < its
        ``level``): only there do the two surfaces share the curve. Reads the scope's status, changes nothing
        (runs in :meth:`fit`); :meth:`commit` records a detected change."""
        st = self.status[data.scope]
        reference = None
        if st.estimate is not None and st.estimate_stamp > st.last_surface_change:  # not an old surface's
            reference = PredictiveReference.from_estimate(st.estimate, st.estimate_stamp)
        change = detect_surface_change(self.surface_change, reference, data.t, data.slip, data.mu, data.slip_var,
                                       getattr(data, "mu_var", None), getattr(data, "lat", None))
        keep_from, level = st.last_surface_change, st.surface_change_level
        if change is not None:
            keep_from, level = change.time, change.level
        keep = (data.t >= keep_from) | ((np.abs(data.mu) < level) & pure_slip(data))
        if keep.all():
            return data, change
        return dataclasses.replace(data, **{f.name: getattr(data, f.name)[keep] for f in dataclasses.fields(data)
                                            if isinstance(getattr(data, f.name), np.ndarray)}), change

    def pre_gate(self, o: FitOutcome) -> bool:
        """True (and ``o`` marked skipped, with the reason as its error) when the window cannot be published
        whatever the chains give, so the sampler is not run: its excitation is below ``min_excitation`` (the
        same gate :meth:`_withheld` applies after a fit); with ``require_new_excitation``, also when the samples
        that arrived since the published estimate's data do not reach it: the window's peak then rests on older
        maneuvers, and a road change since them is invisible to the surface-change test (it sees a change only
        where the new surface's samples leave the old curve, not on its linear part), so a new stamp would claim
        what the data cannot show. The scope keeps its last good estimate."""
        if o.excitation < self.min_excitation:
            o.skipped = True
            o.error = (f"excitation {o.excitation:.2f} < min_excitation {self.min_excitation:.2f}: the data sit on "
                       "the linear part of the curve; not fitted")
            return True
        if self.require_new_excitation and o.new_excitation < self.min_excitation:
            o.skipped = True
            o.error = (f"no new excitation since the published estimate (excitation {o.new_excitation:.2f} < "
                       f"min_excitation {self.min_excitation:.2f}): the peak rests on older data, on a road that may "
                       "have changed unseen; not fitted")
            return True
        return False

    def new_excitation(self, data: ScopeData) -> float:
        """:func:`excitation_of` the samples of ``data`` (the current surface's) newer than the scope's published
        estimate's data; inf before the first estimate."""
        st = self.status[data.scope]
        if st.estimate is None or not math.isfinite(st.estimate_stamp):
            return math.inf
        return mu_span(data.mu[data.t > st.estimate_stamp])

    def scope_report(self, scope: str) -> dict[str, Any]:
        """The state of ``scope`` as /diagnostics key values: fit counts, excitation and road changes, the last
        published estimate's mu_max and convergence diagnostics, and the belief in force at the newest data
        time."""
        st = self.status[scope]
        kv: dict[str, Any] = {"n_fits": st.n_fits, "n_failed": st.n_failed, "n_not_converged": st.n_not_converged,
                              "n_prior_dominated": st.n_prior_dominated,
                              "n_skipped_unexcited": st.n_skipped_unexcited, "last_fit_s": st.last_fit_s,
                              "excitation": st.excitation, "surface_changes": st.surface_changes,
                              "last_surface_change": st.last_surface_change, "n_withdrawn": st.n_withdrawn,
                              "n_floor": st.n_floor}
        if st.estimate is not None:
            e = st.estimate
            kv.update({"mu_max": e.mu_max_mean, "mu_max_lower": e.mu_max_lower, "mu_max_upper": e.mu_max_upper,
                       "r_hat_max": e.r_hat_max, "ess_bulk_min": e.ess_bulk_min, "ess_tail_min": e.ess_tail_min,
                       "converged": e.converged, "prior_dominated": e.prior_dominated,
                       "n_steps_used": e.n_steps_used, "mu_max_r_hat": e.mu_max_r_hat,
                       "mu_max_ess_bulk": e.mu_max_ess_bulk, "n_points": e.n_points})
        b = self.belief(scope, self.data_time())
        kv.update({"in_force_mean": b.mean, "in_force_lower": b.lower, "in_force_upper": b.upper,
                   "in_force_known": b.known, "in_force_floor": b.floor, "age_s": b.age, "distance_m": b.distance,
                   "p_road_change": b.p_change})
        return kv

    @property
    def received(self) -> dict[str, int]:
        """Messages received per input topic, refused ones included."""
        return self.collector.counters.received

    @property
    def watched_inputs(self) -> tuple[str, ...]:
        """The input topics that must not fall silent with this ``force_source`` (:data:`WATCHED_INPUTS`)."""
        return WATCHED_INPUTS[self.force_source]

    def inputs_report(self) -> HealthReport:
        """The pipeline's part of the inputs status: samples dropped by reason, samples buffered per scope and
        kept in all; with estimated forces the force estimator's counts, roll split and learnt torque scale; the
        CAN torque's counts; the online rolling radius's scales; the slips' speed reference (what ``auto``
        chose) and the GNSS/IMU speed filter's counts. WARN when more samples were dropped than kept."""
        collector = self.collector
        counters = collector.counters
        values: dict[str, Any] = {f"dropped_{k}": n for k, n in counters.dropped.items()}
        values.update({f"fill_{s}": n for s, n in collector.fill().items()})
        values["accepted"] = counters.accepted
        est = self.force_estimator
        if est is not None:
            values["force_source"] = self.active_force_source
            values.update({f"forces_{k}": n for k, n in est.counters.items()})
            values["roll_split"] = "calibrated" if est.kphi is not None else "vehicle"
            ts = est.torque_scale
            if ts is not None:
                values.update({"torque_scale": ts.scale, "torque_scale_sd": ts.scale_sd,
                               "torque_scale_applied": ts.learnt and ts.config.apply,
                               "torque_offset_force": ts.offset, "toe_drag": ts.toe_drag})
        if self.can is not None:   # the wheel torque from CAN signals (estimation/sensing/can_torque.py)
            values.update({f"can_{k}": n for k, n in self.can.counters.items()})
        radius = self.radius
        if radius is not None:
            (kf, kr), (sf, sr) = radius.k, radius.sd
            values.update({"radius_scale_front": kf, "radius_scale_rear": kr, "radius_scale_sd_front": sf,
                           "radius_scale_sd_rear": sr, "radius_gate": collector.radius_gate,
                           "radius_gnss_used": radius.used.get("gnss", 0)})
        values["speed_reference"] = collector.config.speed_reference
        if collector.speed is not None:   # estimation/sensing/speed_reference.py
            values.update({f"speed_{k}": n for k, n in collector.speed.counters.items()})
        dropped, kept = counters.n_dropped, counters.accepted
        if dropped and dropped > kept:
            return HealthReport(WARN, f"most samples dropped ({dropped} dropped, {kept} kept)", values)
        return HealthReport(OK, f"receiving; {kept} samples kept, {dropped} dropped", values)

    def description_report(self) -> HealthReport:
        """The vehicle-description status: WARN naming every assumption the data contradict
        (:meth:`doubtful_assumptions`), OK when none is; with the speed filter's accelerometer offset and its SD
        (m/s^2; NaN without the GNSS/IMU speed reference), the road grade (rad), the IMU's mounting yaw (deg) and
        the free-rolling wheel-speed scatter (rad/s; NaN without the online rolling radius)."""
        doubts = self.doubtful_assumptions()
        offset = self.collector.speed.offset if self.collector.speed is not None else None
        values = {"doubtful": len(doubts), "accel_offset": offset[0] if offset else math.nan,
                  "accel_offset_sd": offset[1] if offset else math.nan, "road_grade": self.collector.grade,
                  "imu_mount_yaw_deg": self.imu_mount.angle_deg,
                  "wheel_speed_scatter": self.radius.wheel_speed_scatter() if self.radius is not None else math.nan}
        if doubts:
            return HealthReport(WARN, "; ".join(doubts), values)
        return HealthReport(OK, "no fact of the description and no sensor assumption is in doubt", values)

    def reports(self) -> dict[str, HealthReport]:
        """The statuses that follow the inputs status, by name: ``vehicle description``
        (:meth:`description_report`), then each scope's fit status with :meth:`scope_report`."""
        out = {"vehicle description": self.description_report()}
        for scope, st in self.status.items():
            out[scope] = HealthReport(st.level, st.message, self.scope_report(scope))
        return out

    def cycle_failed(self, snapshots: list[ScopeData] | None, message: str) -> None:
        """A cycle that raised: the scopes of ``snapshots`` (every scope when None) go to ERROR with ``message``;
        their estimates are kept."""
        for scope in [d.scope for d in snapshots] if snapshots is not None else list(self.status):
            st = self.status[scope]
            st.level, st.message = ERROR, message

    def reconfigure(self, values: Mapping[str, Any]) -> None:
        """Apply the grip_estimator's parameters that may change while it runs (the fit's settings, the schedule's
        gates and the convergence rule) from ``values``, as :func:`pipeline_from_params` reads them; buffers,
        estimates and beliefs are kept."""
        self.fit_config = fit_config_from(values, self.fit_config)
        self.warm_start = bool(values["warm_start"])
        self.warm_steps = int(values["warm_steps"])
        self.min_new_points = int(values["min_new_points"])
        self.max_fit_points = int(values["max_fit_points"])
        self.max_r_hat = float(values["max_r_hat"])
        self.min_ess = float(values["min_ess"])
        self.min_ess_tail = float(values["min_ess_tail"])
        self.shape_prior = bool(values["shape_prior"])
        self.min_excitation = float(values["min_excitation"])
        self.require_new_excitation = bool(values["require_new_excitation"])

    def warm_start_of(self, scope: str) -> GripEstimate | None:
        """The fit a new fit of ``scope`` starts from (``warm_start`` on): its last sampled one if its chains met
        the convergence rule (published, or withheld only for excitation or a prior-dominated maximum: its chains
        are a start, not a result), else the last published estimate (chains that did not mix would hand on
        their trouble), else None (a cold start)."""
        if not self.warm_start:
            return None
        st = self.status[scope]
        return st.last_fit if st.last_fit is not None and self.publishable(st.last_fit) else st.estimate

    def warm_config(self, config: GripConfig) -> GripConfig:
        """The sampler settings of a warm-started fit: its chains go on from the previous fit's (spread over the
        previous posterior, which differs from the new one only by the samples that came and went), so they
        are first checked after ``warm_steps`` instead of ``n_steps`` steps; the convergence rule and its
        extension up to ``max_steps`` are unchanged."""
        if not 0 < self.warm_steps < config.n_steps:
            return config
        return dataclasses.replace(config, n_steps=int(self.warm_steps), burn_in=float(self.warm_burn_in))

    def doubtful_assumptions(self) -> list[str]:
        """The vehicle-description and sensor assumptions the data contradict, one sentence each: the rolling
        radius, when the online scale k of an axle departs from 1 by more than ``RADIUS_DOUBT`` and 3 of its SDs
        (the slips use the learnt radius, so the estimate is corrected; the description should be); the IMU, when
        the speed filter's accelerometer offset exceeds ``ACCEL_DOUBT`` and 3 of its SDs (the slips' speed
        reference learns it, so they are corrected; the IMU's bias or mounting should be); the reported wheel
        torques or the mass, when the estimated forces' learnt torque scale departs from 1 by more than
        ``TORQUE_DOUBT`` and 3 of its SDs (the forces are corrected by it; the sensor or the description should
        be); the wheel-speed noise, when the free-rolling wheel speeds scatter more than ``NOISE_DOUBT`` times
        the stated ``wheel_speed_noise``; the IMU's mounting yaw, when its lateral acceleration follows the
        forward one beyond ``MOUNT_DOUBT`` and 3 SEs (estimation/sensing/imu_mounting.py; the samples are then
        turned back by it)."""
        out = []
        radius = self.radius
        if radius is not None:
            for axle, k, sd in zip(("front", "rear"), radius.k, radius.sd):
                if abs(k - 1.0) > max(RADIUS_DOUBT, 3.0 * sd):
                    out.append(f"{axle} rolling radius: the data give {100.0 * (k - 1.0):+.2f} % "
                               f"(SD {100.0 * sd:.2f} %) against the vehicle description "
                               "(tire.unloaded_radius / tire.rolling_radius)")
        scale = self._doubted_scale()
        if scale is not None:
            action = ("the forces are corrected" if scale.config.apply
                      else "the forces are not corrected: torque_scale_learning is off")
            out.append(f"wheel torques or vehicle mass: the vehicle's acceleration gives the reported torques a scale "
                       f"of {scale.scale:.3f} (SD {scale.scale_sd:.3f}) at the description's mass ({action}; the "
                       "torque sensor's gain, mass.* or the wheels' spin inertia should be)")
        if radius is not None and (scatter := radius.wheel_speed_scatter()) > NOISE_DOUBT * \
                radius.config.wheel_speed_std:
            out.append(f"wheel speeds: {scatter:.2f} rad/s of noise per sample against the stated "
                       f"{radius.config.wheel_speed_std:g} (wheel_speed_noise; a coarse encoder or a noisy "
                       "speed sensor: the rolling radius weighs the data by what they show, the tire-force "
                       "filter by the stated noise)")
        torque = self.missing_torque()
        if torque:
            out.append(torque)
        mount = self.imu_mount
        if mount.named:
            share, sd = -100.0 * mount.slope, 100.0 * mount.slope_se
            out.append(f"IMU mounting yaw: driving straight, the lateral acceleration reads {share:+.1f} % "
                       f"(SD {sd:.1f} %) of the forward one: the IMU turned "
                       f"{mount.angle_deg:+.2f} deg on its mount (its accelerations are turned back by it; the "
                       "mounting should be)")
        speed = self.collector.speed
        offset = speed.offset if speed is not None else None
        if offset is not None and abs(offset[0]) > max(ACCEL_DOUBT, 3.0 * offset[1]):
            b, sd = offset
            out.append(f"IMU longitudinal acceleration: the data give an offset of {b:+.3f} m/s^2 (SD {sd:.3f}) "
                       f"against the GNSS speed: an accelerometer bias, or the IMU pitched "
                       f"{math.degrees(math.asin(max(-1.0, min(1.0, b / 9.81)))):+.2f} deg on its mount")
        return out

    def missing_torque(self) -> str:
        """With estimated forces, when most wheel-speed samples came without the wheels' torque (more than
        :data:`MIN_TORQUE_SHARE` of them, at least ten): the one sentence that says so and where the torque should
        come from; '' otherwise."""
        est = self.force_estimator
        if est is None or self.active_force_source != "estimated":
            return ""
        missing, got = est.counters["no_torque"], est.counters["estimated"] + est.counters["settling"]
        if missing < 10 or missing <= MIN_TORQUE_SHARE * (missing + got):
            return ""
        can = self.can
        if can is None:
            return (f"wheel torque: {missing} of {missing + got} wheel-speed samples carry none (JointState.effort "
                    "empty), so no force is estimated; a car that sends its engine or axle torque and brake "
                    "pressure on CAN sets the description's torque_source to engine or axle "
                    "(docs/vehicle_description.md)")
        reasons = ", ".join(f"{k} {can.counters[k]}" for k in ("stale_drive", "stale_brake", "unknown_gear",
                                                                 "missing_axle") if can.counters[k])
        return (f"wheel torque from CAN (torque_source {can.config.drive}): {missing} of {missing + got} wheel-speed "
                f"samples got none ({reasons or 'no CAN sample'}): check the drive_torque_topic and "
                "brake_pressure_topic")

    def data_time(self) -> float:
        """The time a belief published now refers to: the newest odometry stamp (it follows a clock that went
        back, a restarted simulator or bag), else the newest wheel-speed stamp."""
        t = self.odometer.t
        return t if math.isfinite(t) else self.collector.last_stamp.get("wheel_speeds", -math.inf)

    def watch_beliefs(self, t: float) -> list[str]:
        """Each scope's belief watches the samples buffered since it last looked (grip_belief.py
        ``BeliefTracker.observe``), then the contradiction test of its estimate in force against the samples of
        the last ``contradiction.window`` s before data time ``t``; returns the scopes it withdrew (status WARN)."""
        test = self.contradiction
        out = []
        for scope, tracker in self.beliefs.items():
            tracker.observe(self.collector.recent(scope, tracker.observed_to))
            if test is None or tracker.fit is None or tracker.withdrawn:
                continue
            if tracker.test(t, self.collector.recent(scope, t - test.window), test):
                st = self.status[scope]
                st.n_withdrawn += 1
                st.level = WARN
                fb = tracker.fallback
                then = (f"floor belief mu_max >= {fb[0].lower:.3f} (the largest friction they show beyond their "
                        f"noise) until the next fit" if fb is not None else "unknown until the next fit")
                st.message = (f"estimate withdrawn at t = {t:.2f} s: the newest samples show less grip than its "
                              f"lower bound; {then}")
                out.append(scope)
        return out

    def belief(self, scope: str, t: float) -> Belief:
        """The grip belief in force for ``scope`` at data time ``t`` (estimation/grip/belief.py): the last
        published estimate widened toward the road-friction prior by the road-change hazard, or unknown."""
        return self.beliefs[scope].belief(t)

    def _withheld(self, o: FitOutcome) -> tuple[str, str] | None:
        """(status counter, reason) when a fitted estimate must not be published: too little excitation, the
        convergence rule not met, or an interval the fitted samples contradict (its upper end below the largest
        |mu| they show beyond their noise); None when it may be. A prior-dominated mu_max (the data barely narrow
        it) is published: its wide interval is what the data say, and its lower bound is theirs; a consumer that
        gets "unknown" instead can use no grip at all."""
        e = o.estimate
        if e.mu_max_upper < o.mu_floor:
            return "n_not_converged", (
                f"contradicted by its data: upper bound {e.mu_max_upper:.3f} < {o.mu_floor:.3f}, the largest |mu| "
                f"of the window's samples beyond their noise, mu_max {e.mu_max_mean:.2f} [{e.mu_max_lower:.2f}, "
                f"{e.mu_max_upper:.2f}]")
        if o.excitation < self.min_excitation:
            return "n_not_converged", (
                f"excitation {o.excitation:.2f} < min_excitation {self.min_excitation:.2f}: the data sit on the "
                f"linear part of the curve, mu_max {e.mu_max_mean:.2f} [{e.mu_max_lower:.2f}, {e.mu_max_upper:.2f}]")
        if not self.publishable(e):
            return "n_not_converged", (
                f"not converged after {e.n_steps_used} steps per chain (R-hat max {e.r_hat_max:.3f} > "
                f"{self.max_r_hat} or ESS bulk/tail min {e.ess_bulk_min:.0f}/{e.ess_tail_min:.0f} < "
                f"{self.min_ess:.0f}/{self.min_ess_tail:.0f})")
        return None

    def learnt_shape_prior(self, scope: str) -> tuple | None:
        """The tire-shape prior of ``scope`` (``shape_prior`` on): Gaussian on (B C D, C, E) with the mean of the
        posterior means of its published estimates fitted without a shape prior (the last 20), and covariance
        ``shape_prior_inflation`` x (their mean posterior covariance + the scatter of their means). None when
        off or before the first such estimate. The peak (D, s_v) stays free: shape shared, peak per surface."""
        hist = self._shape_history.get(scope, [])[-20:] if self.shape_prior else []
        if not hist:
            return None
        means = np.array([m for m, _ in hist])
        cov = np.mean([c for _, c in hist], axis=0)
        if len(hist) > 1:
            cov = cov + np.cov(means.T)
        cov = self.shape_prior_inflation * 0.5 * (cov + cov.T)
        return tuple(means.mean(axis=0)), tuple(map(tuple, cov))

    def publishable(self, est: GripEstimate) -> bool:
        """The project's convergence rule on every curve parameter, sigma and mu_max: split R-hat <=
        ``max_r_hat`` and bulk / tail ESS >= ``min_ess`` / ``min_ess_tail``."""
        return bool(np.isfinite(est.r_hat_max) and est.r_hat_max <= self.max_r_hat
                    and est.ess_bulk_min >= self.min_ess and est.ess_tail_min >= self.min_ess_tail)

    def run_cycle(self) -> list[str]:
        """snapshot + fit + commit in the caller's thread (bag replay, tests)."""
        return self.commit(self.fit(self.snapshot()))


# ------------------------------------------------------------------------------------------------------------
# ROS parameters -> pipeline (one mapping for the grip_estimator node and bag replay)
# ------------------------------------------------------------------------------------------------------------
FIT_PARAMS = ("min_points", "n_ml_starts", "n_chains", "n_steps", "max_steps", "max_peak_slip", "prior_mode",
              "interval_prob", "seed", "slip_prior", "slip_mean_error")   # the last two: replay/bench only
#: grip_estimator publication gates -> the GripConfig thresholds of the convergence rule (the chains are
#: extended until the estimate passes the same gates the node publishes with)
GATE_PARAMS = {"max_r_hat": "r_hat_threshold", "min_ess": "ess_threshold", "min_ess_tail": "ess_tail_threshold"}
"""grip_estimator parameters that are fields of :class:`GripConfig`."""


def fit_config_from(values: Mapping[str, Any], base: GripConfig | None = None) -> GripConfig:
    """The sampler settings among the grip_estimator parameters (others keep ``base``'s values);
    ``theta_lower``/``theta_upper`` (6 values each, B C D E s_h s_v) give the prior bounds."""
    base = base or GripConfig()
    names = {f.name for f in dataclasses.fields(base)}
    changes = {k: values[k] for k in FIT_PARAMS if k in values and k in names}
    changes.update({f: float(values[k]) for k, f in GATE_PARAMS.items() if k in values})
    if "max_steps" in changes or "n_steps" in changes:
        changes["max_steps"] = max(int(changes.get("max_steps", base.max_steps)),
                                   int(changes.get("n_steps", base.n_steps)))
    if "theta_lower" in values and "theta_upper" in values:
        changes["bounds"] = tuple((float(a), float(b)) for a, b in zip(values["theta_lower"], values["theta_upper"]))
    return dataclasses.replace(base, **changes)


GEOMETRY_PARAMS = ("wheelbase_front", "wheelbase_rear", "track", "r0", "kt", "steering_gain")
"""grip_estimator parameters that are vehicle facts: 0 (the default) takes them from the vehicle description;
another value overrides it, with a warning naming both (:func:`vehicle_geometry`)."""


def vehicle_geometry(vehicle: Any, values: Mapping[str, Any] | None = None) -> tuple[dict[str, Any], list[str]]:
    """The slip geometry the friction samples need, from the vehicle description ``vehicle``
    (:class:`~vehcal_ros.vehicle.description.VehicleDescription`; :func:`~vehcal_ros.estimation.grip.
    friction_samples.slip_geometry`). The parameters ``r0`` and ``kt`` set the slip radius law ``r0 - Fz/kt``
    themselves.

    ``values``: grip_estimator parameters; one of :data:`GEOMETRY_PARAMS` set to a non-zero value overrides the
    description's. Returns (the GripSignalConfig fields, one warning per override naming both values)."""
    v = vehicle
    geometry = slip_geometry(v)
    warnings: list[str] = []
    values = values or {}

    def given(name: str) -> float | None:
        x = values.get(name)
        return float(x) if x is not None and float(x) != 0.0 else None

    def warn(name: str, value: float, own: float) -> None:
        warnings.append(f"parameter '{name}' = {value:g} overrides the vehicle description's {own:g} "
                        f"({v.source or v.name})")

    a, b, track = given("wheelbase_front"), given("wheelbase_rear"), given("track")
    if a is not None:
        warn("wheelbase_front", a, v.a)
        geometry["wheel_x"] = (a, a, *geometry["wheel_x"][2:])
    if b is not None:
        warn("wheelbase_rear", b, v.b)
        geometry["wheel_x"] = (*geometry["wheel_x"][:2], -b, -b)
    if track is not None:
        warn("track", track, 0.5 * (v.cf + v.cr))
        geometry["wheel_y"] = (track / 2, -track / 2, track / 2, -track / 2)
    gain = given("steering_gain")
    if gain is not None:
        warn("steering_gain", gain, v.steer_gain)
        geometry["steering_gain"] = gain
    r0, kt = given("r0"), given("kt")
    if r0 is not None:   # alone: a load-independent radius; with kt: r0 - Fz/kt
        warn("r0", r0, v.rolling_radius if geometry["radius_mode"] == "fixed" else v.r0)
        geometry.update(r0=r0, radius_mode="fixed" if kt is None else "load")
    if kt is not None:
        warn("kt", kt, v.ktf)
        geometry.update(kt=kt, kt_rear=kt, radius_mode="load")
    return geometry, warnings


def signal_config_from(values: Mapping[str, Any], vehicle: Any = None) -> GripSignalConfig:
    """The slip/friction sample settings among the grip_estimator parameters, the slip geometry from the vehicle
    description ``vehicle`` (:func:`vehicle_geometry`; its warnings are dropped here, see
    :func:`pipeline_from_params`). Without ``vehicle``: the package's default description."""
    if vehicle is None:
        vehicle = load_description(None)
    geometry, _ = vehicle_geometry(vehicle, values)
    return GripSignalConfig(
        scope=values["scope"], wheel_names=tuple(values["wheel_names"]), **geometry,
        min_speed=values["min_speed"], min_fz=values["min_fz"],
        max_abs_slip=values["max_abs_slip"], max_steer=values["max_steer"],
        max_lateral_mu=values["max_lateral_mu"], braking=values["braking"],
        max_slip_angle=float(values.get("max_slip_angle", GripSignalConfig.max_slip_angle)),
        sync_tolerance=values["sync_tolerance"], window=values["window"], capacity=values["buffer_size"],
        average_window=values.get("average_window", GripSignalConfig.average_window),
        speed_reference=resolve_speed_reference(str(values.get("speed_reference", GripSignalConfig.speed_reference)),
                                                geometry["driven"]),
        accel_std=float(values.get("accel_noise", GripSignalConfig.accel_std)),
    )


def vehicle_signal_config(config: GripSignalConfig, vehicle: Any = None) -> GripSignalConfig:
    """``config`` with the vehicle description's toe (static toe and bump steer), its IMU pitch at rest, the
    front travel per longitudinal acceleration (the rear suspension's and the tires' deflection under the load
    transfer (m h + 2 (muf + mur) r0) a_x / 2L per wheel; 0 without ``suspension.wheel_rate_rear``) and its
    tire's combined-slip law (``tire.combined_slip``, ``tire.lateral_friction_ratio``); unchanged without one.

    A tire with MF2002 combined-slip coefficients (``mf``) has each sample reduced to pure slip by its weighting
    G_xa, which stays near 1 at everyday slip angles (0.98 at 0.6 deg on the HMMWV's Pac02). A tire described by
    the friction ellipse (``ellipse``) is not: at everyday slips its longitudinal share kappa / hypot(kappa,
    mu_x sin(alpha) / mu_y,max) is set by the slip angle, and at kappa = 0.01 a 0.5 deg error of alpha (the
    kinematic lateral velocity, toe, the rear axle's own slip angle) moves it by ~30 %. A sample divided by too
    small a share reads a higher curve, and the fitted peak is overstated (measured on the sedan's daily drive:
    grip overstated 7-27 % of the time with the ellipse, 0 % without). Its samples are therefore fitted as pure
    slip: friction used laterally then lowers the fitted curve, which can only understate the peak (the samples
    are gated at ``max_lateral_mu`` and ``max_steer``)."""
    if vehicle is None:
        return config
    v = vehicle
    travel_per_ax = 0.0   # rear suspension + both tires under the longitudinal load transfer per wheel
    if v.wheel_rate_r > 0.0:
        transfer = (v.m * v.h + 2.0 * (v.muf + v.mur) * v.r0) / (2.0 * v.wheelbase)   # N per m/s^2, one wheel
        travel_per_ax = transfer * (1.0 / v.wheel_rate_r + 1.0 / v.ktf + 1.0 / v.ktr)
    config = dataclasses.replace(config, toe_front=tuple(v.toe_front), toe_rear=tuple(v.toe_rear),
                                 pitch_at_rest=float(v.pitch_at_rest), travel_per_ax=travel_per_ax,
                                 combined_slip=v.combined_slip if v.combined_slip == "mf" else "none",
                                 lateral_ratio=float(v.lateral_ratio),
                                 combined_coefficients=tuple(getattr(v, "combined_coefficients", ())))
    config.validate()
    return config


FORCE_PARAMS = {"wheel_speed_noise": "wheel_speed_std", "torque_noise": "torque_std",
                "fx_process_noise": "fx_rate_psd", "accel_noise": "accel_std", "fz_rel_std": "fz_rel_std"}
"""grip_estimator parameters of the force estimator -> :class:`TireForceConfig` fields."""


def force_config_from(values: Mapping[str, Any], vehicle: Any = None) -> TireForceConfig:
    """The force estimator's settings among the grip_estimator parameters (absent ones keep the defaults);
    ``vehicle``: the vehicle description (vehicle/description.py, loaded by the caller from the ``vehicle``
    parameter) whose constants it uses."""
    changes: dict[str, Any] = {f: float(values[p]) for p, f in FORCE_PARAMS.items() if p in values}
    # the torque scale is always learnt, so that /diagnostics can name torques or mass the data contradict; it
    # corrects the forces with torque_scale_learning
    changes["torque_scale"] = TorqueScaleConfig(apply=bool(values.get("torque_scale_learning", False)))
    if vehicle is not None:
        changes["vehicle"] = TireForceVehicle.from_description(vehicle)
    config = dataclasses.replace(TireForceConfig(), **changes)
    config.validate()
    return config


def pipeline_from_params(values: Mapping[str, Any], vehicle: Any = None) -> GripPipeline:
    """The GripPipeline of a grip_estimator with these parameter values (KeyError names a missing one);
    ``vehicle``: the loaded vehicle description of its ``vehicle`` parameter (None: loaded here from
    ``values["vehicle"]``, the package default when absent). Every vehicle fact (slip geometry, rolling radius,
    toe, load transfer, the force estimator's constants) comes from it; a geometry parameter that overrides it
    leaves a warning in the pipeline's ``config_warnings``."""
    if vehicle is None:
        vehicle = load_description(values.get("vehicle") or None)
    signal_config = vehicle_signal_config(signal_config_from(values, vehicle), vehicle)
    force_source = str(values.get("force_source", "measured"))
    force_config = force_config_from(values, vehicle)
    pipeline = GripPipeline(signal_config,
                            fit_config_from(values),
                            force_source=force_source,
                            force_config=force_config,
                            mu_scale_sd=force_config.fz_rel_std if force_source == "estimated" else 0.0,
                            force_timeout=float(values.get("force_timeout", GripPipeline.force_timeout)),
                            warm_start=bool(values["warm_start"]),
                            warm_steps=int(values.get("warm_steps", GripPipeline.warm_steps)),
                            min_new_points=int(values["min_new_points"]),
                            max_fit_points=int(values["max_fit_points"]), max_r_hat=float(values["max_r_hat"]),
                            subsample_rule=str(values.get("subsample_rule", GripPipeline.subsample_rule)),
                            min_ess=float(values["min_ess"]),
                            min_ess_tail=float(values.get("min_ess_tail", GripPipeline.min_ess_tail)),
                            min_excitation=float(values.get("min_excitation", GripPipeline.min_excitation)),
                            shape_prior=bool(values.get("shape_prior", GripPipeline.shape_prior)),
                            require_new_excitation=bool(values.get("require_new_excitation",
                                                                   GripPipeline.require_new_excitation)),
                            surface_change=surface_change_config_from(values), hazard=hazard_from(values),
                            radius_config=(radius_config_from(signal_config, vehicle,
                                                              float(values.get("wheel_speed_noise", 0.05)))
                                           if values.get("radius_learning", True) else None),
                            max_radius_sd=float(values.get("max_radius_sd", GripPipeline.max_radius_sd)),
                            floor_belief=bool(values.get("floor_belief", GripPipeline.floor_belief)),
                            can_torque=CanTorqueConfig.from_description(vehicle))
    pipeline.config_warnings = vehicle_geometry(vehicle, values)[1]
    return pipeline


def radius_config_from(config: GripSignalConfig, vehicle: Any, wheel_speed_std: float) -> RollingRadiusConfig:
    """The online rolling radius's settings: the slip's own radius law (``config``: r0, kt, fixed or load
    dependent), driven axles and steering gain, the description's static loads and slip force terms
    (:func:`~vehcal_ros.estimation.sensing.rolling_radius.slip_terms`) and the stated wheel-speed noise (rad/s, the
    ``wheel_speed_noise`` parameter)."""
    fz_f, fz_r = vehicle.static_wheel_loads()
    return RollingRadiusConfig(r0=config.r0, kt=(config.kt, config.kt_rear if config.kt_rear > 0.0 else config.kt),
                               radius_mode=config.radius_mode, fz_static=(fz_f, fz_r),
                               driven=config.driven, steering_gain=config.steering_gain,
                               wheel_speed_std=wheel_speed_std, **slip_terms(vehicle))


def hazard_from(values: Mapping[str, Any]) -> HazardModel:
    """The road-change hazard of the belief in force (``hazard_change_distance``, ``hazard_change_time``,
    ``unknown_above``; absent ones keep the defaults); ValueError names a parameter out of its range."""
    base = HazardModel()
    hazard = HazardModel(change_distance=float(values.get("hazard_change_distance", base.change_distance)),
                         change_time=float(values.get("hazard_change_time", base.change_time)),
                         unknown_above=float(values.get("unknown_above", base.unknown_above)))
    hazard.validate()
    return hazard


def surface_change_config_from(values: Mapping[str, Any]) -> SurfaceChangeConfig:
    """The road-change test's settings (``surface_change_threshold``, ``surface_change_drift``,
    ``surface_change_batch``; absent ones keep the defaults); ValueError names a parameter out of its range."""
    base = SurfaceChangeConfig()
    config = SurfaceChangeConfig(
        threshold=float(values.get("surface_change_threshold", base.threshold)),
        drift=float(values.get("surface_change_drift", base.drift)),
        batch=int(values.get("surface_change_batch", base.batch)))
    config.validate()
    return config
