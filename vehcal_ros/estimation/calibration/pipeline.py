"""The 8-DOF model calibration cycle shared by the ``model_calibrator`` node and bag replay.

``CalibrationPipeline`` buffers the vehicle topics (wheel speeds, IMU, odometry, controls; the per-wheel net
torque of ``JointState.effort`` when the vehicle description's ``torque_source`` is ``measured``) in bounded rolling
buffers, finds qualifying maneuver segments (:mod:`vehcal_ros.estimation.calibration.segments`) and runs the staged
Bayesian calibration of Unjhawala et al. 2023, doi:10.1115/1.4062199 (Section 3: longitudinal -> lateral -> rolling
resistance; tempered SMC, several runs as chains) on them. Each stage keeps its last accepted result: a fit
whose diagnostics fail (any R-hat > ``max_r_hat``, bulk ESS < ``min_ess`` or tail ESS < ``min_ess_tail``, Section
3.2, also after one re-run with ``retry_draws_factor`` times the particles), that raises, or that
does not predict its window's held-back last part (``holdout_fraction``, not fitted) no worse than the model it
would replace, within its predictive band (:mod:`vehcal_ros.estimation.calibration.acceptance`), is reported and
does not replace it. A stage's fit holds the other stages' accepted posterior means fixed (the
paper's "previous stages' results"; after the first pass every stage sees the latest values of all others).

A cycle is split in three, as :class:`~vehcal_ros.estimation.grip.pipeline.GripPipeline`: :meth:`snapshot`
(fast, under the caller's lock: copies of the segments to fit), :meth:`fit` (slow, worker thread, touches no
shared state; seeds ``seed + 1000 * cycle + k``) and :meth:`commit` (fast). Segment freshness is judged on data
stamps, never wall time, so a replayed bag gives the numbers of a live run with the same cycle times.

Health and outputs: :meth:`CalibrationPipeline.inputs_report` and :meth:`CalibrationPipeline.reports` give the
statuses a live node publishes on ``/diagnostics`` as plain :class:`~vehcal_ros.diagnostic_levels.HealthReport`
data (level, message, key/values); :meth:`CalibrationPipeline.model_statuses` what ``vehcal/model_parameters``
carries.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

import numpy as np
import yaml

from vehcal_ros.atomic_files import write_atomic
from vehcal_ros.diagnostic_levels import ERROR, OK, WARN, HealthReport
from vehcal_ros.errors import Cancelled, EstimationError, InputError
from vehcal_ros.estimation.calibration.acceptance import (
    BAND_POLICIES,
    DEFAULT_BAND,
    DEFAULT_FRACTION,
    DEFAULT_TOLERANCE,
    MIN_HOLDOUT_S,
    predictive_check,
)
from vehcal_ros.estimation.calibration.carry_forward import DEFAULT_DRIFT, DriftModel, carried_priors, touches_bound
from vehcal_ros.estimation.calibration.fit import (
    STAGE_NAMES,
    CalibrationResult,
    Segment,
    calibrate_stage,
    check_prior_ranges,
    check_segment,
    stage_spec,
)
from vehcal_ros.estimation.calibration.maneuver_spread import (
    DEFAULT_MIN_PART_S,
    DEFAULT_PARTS,
    MIN_PARTS,
    PartSpread,
    maneuver_offsets,
    part_bounds,
    part_spread,
    widened,
)
from vehcal_ros.estimation.calibration.noise_models import DEFAULT_NOISE_MODEL, NOISE_MODEL_CHOICES
from vehcal_ros.estimation.calibration.recalibration_check import (
    DEFAULT_THRESHOLD,
    WindowCheck,
    check_window,
    updated_result,
)
from vehcal_ros.estimation.calibration.segments import (
    OPTIONAL_SOURCES,
    SOURCE_COLUMNS,
    FreeRolling,
    SegmentConfig,
    Window,
    build_segment,
    find_windows,
    free_rolling_radius,
    record_row,
    record_source,
    resample,
)
from vehcal_ros.estimation.sensing.buffers import RollingBuffer
from vehcal_ros.estimation.sensing.can_torque import CanTorqueConfig, CanWheelTorque
from vehcal_ros.inference.quantiles import halfnormal_quantile
from vehcal_ros.models.vehicle_8dof import DEFAULT_PARAMETERS
from vehcal_ros.vehicle.description import load_description

MODEL_PARAMETERS: tuple[str, ...] = ("Cxf", "Cxr", "Cyf", "Cyr", "kphi_f", "kphi_r", "bphi", "rr", "Jd")
"""Published model parameters (``bphi`` = bphi_f + bphi_r, the paper's identifiable total roll damping; ``Jd``
the driveline inertia the model adds to each driven wheel's spin inertia)."""

UNITS: dict[str, str] = {"Cxf": "N", "Cxr": "N", "Cyf": "N/rad", "Cyr": "N/rad", "kphi_f": "N m/rad",
                         "kphi_r": "N m/rad", "bphi": "N m s/rad", "rr": "m (torque per unit normal load)",
                         "Jd": "kg m^2", "rolling_radius": "m"}
STAGE_OF: dict[str, str] = {"Cxf": "longitudinal", "Cxr": "longitudinal", "Cyf": "lateral", "Cyr": "lateral",
                            "kphi_f": "lateral", "kphi_r": "lateral", "bphi": "lateral", "rr": "rolling_resistance",
                            "Jd": "longitudinal"}


EXCITATION: dict[str, tuple[str, str]] = {
    "longitudinal": ("peak forward acceleration", "m/s^2"), "lateral": ("peak lateral acceleration", "m/s^2"),
    "rolling_resistance": ("speed lost (coast-down) or rolling-resistance sensitivity (measured torque)", "m/s")}
"""What a stage's window score (segments.Window.score) measures, and its unit (named in the status)."""

MANEUVERS: dict[str, str] = {"longitudinal": "straight throttle ramp", "lateral": "steering at speed",
                             "rolling_resistance": "coast-down"}
"""What a driver does to give each stage its data (named in the ``calibration required`` status)."""


def full_parameters(defaults: Mapping[str, float] | None, vehicle: str | None = None) -> dict[str, float]:
    """Every 8-DOF parameter: the vehicle description's nominal values (None: the paper's HMMWV) with ``defaults``
    (model parameter names; ``bphi`` = total, split equally into bphi_f and bphi_r) over them."""
    start = DEFAULT_PARAMETERS
    if vehicle is not None:
        from vehcal_ros.models.vehicle_8dof import VehicleConstants

        start = VehicleConstants.from_description(vehicle).default_parameters()
    base = {**start, **{k: float(v) for k, v in (defaults or {}).items() if k != "bphi"}}
    if defaults and "bphi" in defaults:
        base["bphi_f"] = base["bphi_r"] = 0.5 * float(defaults["bphi"])
    return base


@dataclass(frozen=True)
class CalibrationPipelineConfig:
    """Settings of the calibration cycle (units in brackets)."""

    stages: tuple[str, ...] = STAGE_NAMES
    """stages in calibration order (the paper's: longitudinal, lateral, rolling_resistance)."""
    n_chains: int = 4                  #: independent SMC runs (chains), 1..64
    n_draws: int = 1000                #: particles per run (draws per chain), 20..100000
    seed: int = 0                      #: base seed; fit k of cycle c uses seed + 1000 c + k
    window: float = 120.0              #: [s] data kept per topic (relative to its newest stamp)
    buffer_size: int = 24000           #: rows kept per topic (bounded memory)
    segments: SegmentConfig = field(default_factory=SegmentConfig)
    max_r_hat: float = 1.01            #: accept a fit only if every R-hat <= this (paper Section 3.2)
    min_ess: float = 400.0             #: ... and every bulk ESS >= this (lower it for quick configurations)
    min_ess_tail: float = 400.0        #: ... and every tail ESS >= this (the 5 % and 95 % quantiles' ESS)
    retry_draws_factor: int = 2
    """a fit whose chains fail the rule above is run once more with ``retry_draws_factor`` x ``n_draws`` particles
    per chain before it is refused (1: no re-run). One of the independent SMC runs can lose a mode of a posterior
    with a ridge (the longitudinal stage's Cx against Jd): measured on the simulated HMMWV's daily drive (seed 2),
    its three longitudinal windows failed at 4 x 1000 (R-hat 1.03-1.39, bulk ESS 9-127) and passed at 4 x 2000
    (R-hat <= 1.001, ESS >= 7200), at the same means; a larger cap on the mutation steps changed nothing. The
    re-run costs about twice a fit, and only where a fit failed."""
    recalibration_period: float = 60.0 #: [s, data time] between two fits of one stage
    min_new_data: float = 2.0          #: [s] a stage's next window must end this much after its last one
    clock_jump: float = 1.0            #: [s] a stamp jump larger than this (either way) restarts the buffers
    require_order: bool = False
    """True: a stage waits until the stages before it have an accepted result (the paper's chain). False
    (default): each stage is fitted when a segment qualifies, holding the other stages' latest accepted values
    (the nominal ones until then), so a stage a drive cannot qualify does not block the others (measured:
    benchmarks/results/holdout_vehicles.md, 19 of 20 daily drives calibrate some stage against 7 of 20 with True)."""
    defaults: Mapping[str, float] | None = None
    """values of not-yet-calibrated parameters (8-DOF names; ``bphi`` = total); None: the model's defaults."""
    kernel: str = "imh"                #: SMC mutation kernel (imh | rw)
    max_mutation_steps: int = 10       #: cap on the MH steps per SMC stage (calibration.calibrate_stage); the
    #: sampler's "distinct" rule stops a stage's mutation early once the particles are distinct, so the cap only
    #: costs where the IMH kernel accepts little (with a cap of 5, a 4 x 300 lateral fit on the 14-DOF bags ended
    #: at bulk ESS 32)
    refit_proposal: bool = True        #: refit the IMH proposal before every mutation step (inference.smc): with
    #: one fit per stage and 5 steps, a run of the lateral stage could stay biased (steering ramp: R-hat 1.01-1.9)
    predictive_draws: int = 20         #: draws of the posterior-predictive RMSE check
    r0: float | None = None            #: [m] tire radius of the wheel-speed unit check (w r0 / u ~ 1); None: the
    #: description's unloaded radius
    dt: float | None = None            #: [s] 8-DOF integration step; None: the paper's (5 ms long., 10 ms others)
    noise_prior_factor: float = 10.0   #: x the paper's half-normal noise scales: live data carry model-form
    #: error (the sigma must be free to grow well above the sensor noise; calibration.calibrate_stage)
    initial_state: str = "lateral"     #: the segments' initial states are local quadratic fits to noisy data
    #: (segments.build_segment): "sampled" treats the stage's channels' initial values as nuisance parameters
    #: with the fit's standard error (calibration.calibrate_stage; on the synthetic drive's lateral window the
    #: fitted initial roll rate put bphi 2.3 posterior sd high, sampled 0.7 sd); "measured" holds them fixed;
    #: "lateral" (default) samples them in the lateral stage only: a coast-down's or a throttle ramp's initial
    #: speeds are well fitted, and sampling them left the live coast-down fit of accel_coast unconverged (4 x 500:
    #: R-hat 1.76, bulk ESS 6)
    def stage_initial_state(self, stage: str) -> str:
        """``initial_state`` of one stage: "sampled" or "measured" (``lateral`` resolved per stage)."""
        if self.initial_state == "lateral":
            return "sampled" if stage == "lateral" else "measured"
        return self.initial_state

    replace_min_score: float = 0.9     #: a converged refit replaces the accepted result of its stage only if its
    #: segment's excitation score is at least this share of the accepted one's (a gentle speed-controlled
    #: acceleration must not overwrite a fit on a throttle ramp; such a segment is not fitted); 0 = always replace
    confirm_max_shift: float = DEFAULT_THRESHOLD
    """[sd] a due refit of a stage that has an accepted result first fits the new window by least squares around
    the accepted model (estimation/calibration/recalibration_check.py): if that best fit lies within this
    Mahalanobis distance of the accepted posterior mean (covariance: the posterior's plus the best fit's), the model is
    *confirmed* (counted, no SMC); otherwise the stage is refitted. 0: always refit (no check)."""
    priors: Mapping[str, tuple[float, float]] | None = None
    """uniform prior ranges {name: (lower, upper)} replacing the vehicle description's (names as
    :data:`MODEL_PARAMETERS`); None or absent names: the description's ranges (the paper's Eq. 14 ones,
    calibration.paper_prior_ranges, when ``vehicle`` is None)."""
    vehicle: str | None = None
    """vehicle description (name or file, vehicle/description.py): 8-DOF constants, drive maps, priors and
    nominal values; None: the paper's HMMWV."""
    holdout_fraction: float = DEFAULT_FRACTION
    """[-] share of each qualifying window held back from the fit (its last part, >= 0.5 s and 50 samples): the
    fit is accepted only if it predicts that part no worse than the model it replaces, within its 90 % predictive
    band (estimation/calibration/acceptance.py); 0: no predictive check (accepted on its diagnostics alone), 0..0.5."""
    holdout_tolerance: float = DEFAULT_TOLERANCE
    """[standard errors] k of the predictive check: a channel fails if the candidate's held-back RMSE exceeds the
    replaced model's by more than k SE of the difference (autocorrelation counted) + 2 %, or its band holds fewer
    than 90 % - k SE - 2 % of the samples (acceptance.py Eq. H4, H5; default 3), 0..10."""
    holdout_band: str = DEFAULT_BAND
    """what a 90 % band holding too few held-back samples does: ``warn`` (accepted on the RMSE rule, stage WARN,
    shortfall named) or ``refuse`` (acceptance.py, "Band policy")."""
    noise_model: str = DEFAULT_NOISE_MODEL
    """the likelihood's residual model of the fits (estimation/calibration/noise_models.py): ``auto`` (each stage's
    own), or ``ar1``, ``white`` or ``discrepancy`` for every stage (calibration.calibrate_stage)."""
    spread_parts: int = DEFAULT_PARTS
    """[-] an accepted fit's window is cut into this many parts, each fitted alone by least squares; where the
    parts disagree beyond their noise, each parameter's interval is widened by their spread
    (estimation/calibration/maneuver_spread.py); 0 (default): not estimated, else 3..20."""
    spread_min_part_s: float = DEFAULT_MIN_PART_S
    """[s] shortest part (fewer parts in a shorter window; fewer than 3: not estimated), 0.1..60."""

    def validate(self) -> None:
        """Raise :class:`InputError` naming a bad field and its range."""
        bad = [s for s in self.stages if s not in STAGE_NAMES]
        if bad or not self.stages or len(set(self.stages)) != len(self.stages):
            raise InputError(f"stages must be distinct names among {', '.join(STAGE_NAMES)}, got {list(self.stages)}")
        for name, lo, hi in (("n_chains", 1, 64), ("n_draws", 20, 100000), ("buffer_size", 10, 10_000_000),
                             ("window", 1.0, 86400.0), ("max_r_hat", 1.0, 10.0), ("min_ess", 0.0, 1e7),
                             ("min_ess_tail", 0.0, 1e7), ("retry_draws_factor", 1, 16),
                             ("recalibration_period", 0.0, 86400.0), ("min_new_data", 0.0, 86400.0),
                             ("clock_jump", 0.01, 3600.0), ("r0", 0.1, 2.0)):
            v = getattr(self, name)
            if name == "r0" and v is None:
                continue   # None: the description's unloaded radius
            if not (isinstance(v, (int, float)) and lo <= v <= hi):
                raise InputError(f"calibration config: {name} = {v!r} is out of range [{lo}, {hi}]")
        if not (isinstance(self.noise_prior_factor, (int, float)) and 0.1 <= self.noise_prior_factor <= 1000.0):
            raise InputError(f"calibration config: noise_prior_factor = {self.noise_prior_factor!r} is out of range "
                             "[0.1, 1000]")
        if not (isinstance(self.confirm_max_shift, (int, float)) and 0.0 <= self.confirm_max_shift <= 100.0):
            raise InputError(f"calibration config: confirm_max_shift = {self.confirm_max_shift!r} is out of range "
                             "[0, 100]")
        if not (isinstance(self.replace_min_score, (int, float)) and 0.0 <= self.replace_min_score <= 10.0):
            raise InputError(f"calibration config: replace_min_score = {self.replace_min_score!r} is out of range "
                             "[0, 10]")
        if self.initial_state not in ("measured", "sampled", "lateral"):
            raise InputError(f"calibration config: initial_state = {self.initial_state!r}: expected 'measured', "
                             "'sampled' or 'lateral'")
        if not (isinstance(self.spread_parts, int) and not isinstance(self.spread_parts, bool)
                and (self.spread_parts == 0 or MIN_PARTS <= self.spread_parts <= 20)):
            raise InputError(f"calibration config: spread_parts = {self.spread_parts!r} is out of range: 0 or "
                             f"[{MIN_PARTS}, 20]")
        for name, lo, hi in (("holdout_fraction", 0.0, 0.5), ("holdout_tolerance", 0.0, 10.0),
                             ("spread_min_part_s", 0.1, 60.0)):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and not isinstance(v, bool) and lo <= v <= hi):
                raise InputError(f"calibration config: {name} = {v!r} is out of range [{lo:g}, {hi:g}]")
        if self.noise_model not in NOISE_MODEL_CHOICES:
            raise InputError(f"calibration config: noise_model = {self.noise_model!r} is not one of "
                             f"{', '.join(NOISE_MODEL_CHOICES)}")
        if self.holdout_band not in BAND_POLICIES:
            raise InputError(f"calibration config: holdout_band = {self.holdout_band!r} is not one of "
                             f"{', '.join(BAND_POLICIES)}")
        if self.dt is not None and not 1e-4 <= self.dt <= 0.05:
            raise InputError(f"calibration config: dt = {self.dt!r} is out of range [0.0001, 0.05]")
        try:
            check_prior_ranges(self.priors)
        except InputError as exc:
            raise InputError(f"calibration config: {exc}") from None
        self.segments.validate()


@dataclass(frozen=True)
class StageJob:
    """One stage to fit on a copied segment (made by :meth:`CalibrationPipeline.snapshot`)."""

    stage: str
    window: Window
    segment: Segment = field(repr=False)
    previous: Mapping[str, float] = field(repr=False)
    """8-DOF values held fixed (accepted means of the other stages, then defaults)."""
    seed: int
    cycle: int
    waits_for: tuple[str, ...] = ()
    """earlier stages with no accepted result yet: this job runs only if they are accepted earlier in the batch."""
    accepted: CalibrationResult | None = field(default=None, repr=False)
    """the stage's accepted result when the window is first checked against it (confirm_max_shift > 0)."""
    held: Segment | None = field(default=None, repr=False)
    """the window's held-back last part (not fitted; the predictive check's data), None: no check."""
    replaced: Mapping[str, float] = field(default_factory=dict, repr=False)
    """the stage's accepted posterior means (8-DOF names), the model a new fit replaces; empty: nominal."""
    vehicle: Any = field(default=None, repr=False)
    """the vehicle description the fit runs the 8-DOF model with (the configured one at the rolling radius the
    data show, :meth:`CalibrationPipeline.model_vehicle`); None: the configured ``vehicle``."""
    parts: tuple[tuple[float, float], ...] = ()
    """[s] the consecutive parts the fitted segment is cut into (maneuver_spread.part_bounds); empty: no spread
    is estimated."""


@dataclass(frozen=True)
class StageOutcome:
    """What one fit produced: a result (accepted or not) or why not."""

    stage: str
    window: Window
    cycle: int
    result: CalibrationResult | None = None
    accepted: bool = False
    error: str | None = None
    wall_s: float = 0.0
    segment: Segment | None = field(default=None, repr=False)   #: the data fitted (for reports)
    check: WindowCheck | None = None   #: the recalibration check of the window (None: not checked)
    holdout: dict | None = None        #: the predictive check on the held-back part (HoldoutCheck.to_dict)

    @property
    def confirmed(self) -> bool:
        """The window was consistent with the accepted model: no fit ran."""
        return self.result is None and self.error is None and self.check is not None and self.check.consistent


@dataclass
class StageStatus:
    """Health of one stage (level 0 OK, 1 WARN, 2 ERROR as diagnostic_msgs)."""

    level: int = WARN
    message: str = "waiting for data"
    result: CalibrationResult | None = None       #: last accepted result
    result_segment: tuple[float, float] | None = None
    result_data: Segment | None = field(default=None, repr=False)   #: the data of the accepted fit (reports)
    result_score: float = 0.0                      #: excitation score of the accepted fit's segment
    n_fits: int = 0
    n_failed: int = 0                              #: fits that raised or failed their diagnostics
    n_not_converged: int = 0
    n_rejected: int = 0                            #: segments refused by the plausibility check before a fit
    n_confirmed: int = 0                           #: windows that confirmed the accepted model (no fit ran)
    last_confirmed: tuple[float, float] | None = None   #: the newest confirming window (t0, t1)
    last_check: str = ""                           #: the newest recalibration check's figures and decision
    last_fit_s: float = float("nan")               #: wall time of the last fit (s)
    segment: tuple[float, float] | None = None     #: last segment fitted or checked (t0, t1)
    excitation: float = float("nan")               #: the last window's score (segments.Window.score)
    last_reason: str = ""                          #: why the newest data did not give a fit ("" if it did)
    result_holdout: dict | None = None             #: the accepted fit's predictive check (HoldoutCheck.to_dict)
    last_holdout: dict | None = None               #: the newest predictive check (accepted or refused)
    n_refused_holdout: int = 0                     #: converged fits refused because they did not predict
    result_restored: bool = False                  #: the accepted result is one restored or carried forward
    #: the recalibration-check shifts of the windows checked against a restored / carried result (the model the
    #: drive started from; a drift flag's evidence independent of refits: io/fleet_summary.py)
    carried_shifts: list[float] = field(default_factory=list)
    check_threshold: float = float("nan")          #: the shift threshold of those checks (confirm_max_shift)
    #: the same windows' deviations from the model checked against (recalibration_check.WindowCheck.deviation):
    #: the spread between windows that later drives carry (estimation/carry_forward.window_spread)
    carried_deviations: list[dict[str, tuple[float, float]]] = field(default_factory=list)


@dataclass
class PipelineCounters:
    """Records received per topic, dropped by reason, clock jumps (buffer restarts), ignored records."""

    received: dict[str, int] = field(default_factory=lambda: dict.fromkeys(SOURCE_COLUMNS, 0))
    dropped: dict[str, int] = field(default_factory=dict)
    clock_jumps: int = 0
    ignored: int = 0

    @property
    def n_dropped(self) -> int:
        return sum(self.dropped.values())

    @property
    def n_received(self) -> int:
        return sum(self.received.values())


class CalibrationPipeline:
    """Records in, staged 8-DOF calibration out; see the module docstring for the cycle."""

    def __init__(self, config: CalibrationPipelineConfig | None = None) -> None:
        self.config = config or CalibrationPipelineConfig()
        self.config.validate()
        c = self.config
        self.vehicle = load_description(c.vehicle)
        """the vehicle description (None in the config: the default vehicle): its steering map gives the
        road-wheel angle of the stage thresholds"""
        self.buffers = {name: RollingBuffer(cols, c.buffer_size, c.window, max_gap=c.clock_jump)
                        for name, cols in SOURCE_COLUMNS.items()}
        if self.vehicle.wheel_torque_measured:   # the wheels' net torque drives the 8-DOF wheels
            cols = OPTIONAL_SOURCES["wheel_torque"]
            self.buffers["wheel_torque"] = RollingBuffer(cols, c.buffer_size, c.window, max_gap=c.clock_jump)
        can = CanTorqueConfig.from_description(self.vehicle)
        self.can = CanWheelTorque(can) if can is not None else None
        """the wheels' net torque from CAN signals (torque_source engine or axle; estimation/sensing/can_torque.py)"""
        self.status: dict[str, StageStatus] = {s: StageStatus() for s in STAGE_NAMES}
        self.cycle = 0
        self._received = dict.fromkeys(SOURCE_COLUMNS, 0)
        self._backward_jumps = 0
        self._ignored = 0
        self._undecodable = 0
        self._rejected: dict[str, int] = {}
        self._newest = -math.inf
        self._reset_marks()
        self.cancel = threading.Event()   #: set it to stop a running fit (between SMC rounds): no outcome
        self._first = math.nan
        self._carried: dict[str, tuple[dict, float, DriftModel]] = {}
        self._base_priors: Mapping[str, tuple[float, float]] | None = None   # config.priors before carrying
        self._priors_carried = False   # config.priors hold carried ranges (set at the first record after carrying)
        self.carried_priors: dict[str, dict[str, dict[str, float]]] = {}
        """stage -> parameter -> {lower, upper, elapsed_s}: the carried uniform priors set at the first record
        after :meth:`carry_forward` (empty: none carried)"""
        self.spread: dict[str, dict[str, float]] = {}
        """stage -> parameter -> the spread between windows tau^2 carried with the stage
        (estimation/calibration/carry_forward.py; empty: none), in the carried priors and the recalibration checks"""
        self.free_rolling: FreeRolling | None = None
        """the rolling radius the newest snapshot's free rolling shows (segments.free_rolling_radius), None: not
        enough free rolling yet"""

    def stage_report(self, stage: str) -> dict[str, Any]:
        """The state of ``stage`` as /diagnostics key values: fit counts, the last check and segment, and, once a
        fit is accepted, its convergence diagnostics, parameter means and predictive check
        (:func:`holdout_values`)."""
        st = self.status[stage]
        kv: dict[str, Any] = {"n_fits": st.n_fits, "n_failed": st.n_failed, "n_not_converged": st.n_not_converged,
                              "n_rejected": st.n_rejected, "n_confirmed": st.n_confirmed,
                              "last_check": st.last_check, "last_fit_s": st.last_fit_s,
                              "excitation": st.excitation, "last_reason": st.last_reason,
                              "n_refused_holdout": st.n_refused_holdout,
                              "last_holdout": (st.last_holdout or {}).get("message", "")}
        if st.segment:
            kv.update({"segment_t0": st.segment[0], "segment_t1": st.segment[1]})
        if st.result is not None:
            r_hat, ess, tail = worst_diagnostics(st.result)
            kv.update({"r_hat_max": r_hat, "ess_bulk_min": ess, "ess_tail_min": tail,
                       "converged": st.result.converged})
            kv.update({k: v["mean"] for k, v in st.result.parameters.items()})
            kv.update(holdout_values(st.result_holdout))
        return kv

    def reconfigure(self, values: Mapping[str, Any]) -> None:
        """Apply the model_calibrator's parameters from ``values`` (:func:`config_from`); buffers, accepted results
        and counters are kept."""
        self.config = config_from(values)

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.pop("cancel", None)   # a threading.Event does not pickle (a parallel replay returns the pipeline)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self.cancel = threading.Event()

    def _reset_marks(self) -> None:
        self._last_end = dict.fromkeys(STAGE_NAMES, -math.inf)
        self._last_attempt = dict.fromkeys(STAGE_NAMES, -math.inf)

    # ------------------------------------------------------------------ input
    def add(self, record: object) -> None:
        """Buffer a WheelSpeeds, ImuSample, OdomSample or Controls record (others ignored). Bad samples are
        counted by reason (non-finite, out of order, duplicate, clock jump) and never raised. With CAN torque
        signals (the description's ``torque_source`` engine or axle) a DriveTorque or BrakePressure record is kept
        by :attr:`can`, and a wheel-speed record takes its wheels' net torque from them."""
        if self.can is not None:
            record = self.can.route(record)
            if record is None:
                return
        src = record_source(record)
        if src is None:
            self._ignored += 1
            return
        self._received[src] += 1
        try:
            row = record_row(record)
        except (TypeError, ValueError, IndexError):
            self.buffers[src].counters.n_nonfinite += 1
            return
        t = float(row[0])
        if self._carried and math.isfinite(t):
            self._apply_carried(t)
        if math.isfinite(t) and t < self._newest - self.config.clock_jump:
            # time went back by more than a clock jump (simulation restart, bag loop): start over
            self._backward_jumps += 1
            for b in self.buffers.values():
                b.clear()
            self._newest = -math.inf
            self._reset_marks()
        if self.buffers[src].append(t, row[1:]):
            self._newest = max(self._newest, t)
            if not math.isfinite(self._first):
                self._first = t
        torque = self.buffers.get("wheel_torque") if src == "wheel_speeds" else None
        if torque is not None:
            effort = getattr(record, "torque", None)
            if effort is not None and len(effort) == 4:   # a message without effort leaves a gap (map not used)
                torque.append(t, effort)

    def reject(self, source: str, reason: str = "undecodable") -> None:
        """Count a message of ``source`` refused before it became a record: not convertible (malformed
        JointState or Joy), implausible, or with a bad stamp (input_guard reasons)."""
        self._received[source] = self._received.get(source, 0) + 1
        if reason == "undecodable":
            self._undecodable += 1
        else:
            self._rejected[reason] = self._rejected.get(reason, 0) + 1

    @property
    def counters(self) -> PipelineCounters:
        dropped = {"nonfinite": 0, "out_of_order": 0, "duplicate": 0, "undecodable": self._undecodable}
        jumps = self._backward_jumps
        for b in self.buffers.values():
            dropped["nonfinite"] += b.counters.n_nonfinite
            dropped["out_of_order"] += b.counters.n_out_of_order
            dropped["duplicate"] += b.counters.n_duplicate
            jumps += b.counters.n_clock_jumps
        for reason, n in self._rejected.items():
            dropped[reason] = dropped.get(reason, 0) + n
        return PipelineCounters(dict(self._received), dropped, jumps, self._ignored)

    @property
    def data_span(self) -> tuple[float, float]:
        """(first, newest) stamp buffered [s, stamp clock]; nan before any record."""
        return self._first, (self._newest if math.isfinite(self._newest) else math.nan)

    def fill(self) -> dict[str, int]:
        """Rows buffered per topic."""
        return {k: len(b) for k, b in self.buffers.items()}

    # ------------------------------------------------------------------ health
    @property
    def received(self) -> dict[str, int]:
        """Records received per input topic, refused ones included."""
        return dict(self._received)

    @property
    def watched_inputs(self) -> tuple[str, ...]:
        """The input topics that must not fall silent: every topic received (each stage needs all of them)."""
        return tuple(self._received)

    def inputs_report(self) -> HealthReport:
        """The pipeline's part of the inputs status: records dropped by reason, rows buffered per topic, buffer
        restarts (clock jumps) and the CAN torque's counts. WARN when more than half the records were dropped."""
        c = self.counters
        values: dict[str, Any] = {f"dropped_{k}": n for k, n in c.dropped.items()}
        values.update({f"fill_{k}": n for k, n in self.fill().items()})
        values["buffer_restarts"] = c.clock_jumps
        if self.can is not None:   # the wheel torque from CAN signals (estimation/sensing/can_torque.py)
            values.update({f"can_{k}": n for k, n in self.can.counters.items()})
        if c.n_dropped > 0.5 * max(c.n_received, 1):
            return HealthReport(WARN, f"most samples dropped ({c.n_dropped} of {c.n_received})", values)
        return HealthReport(OK, f"receiving; {c.n_received} samples, {c.n_dropped} dropped", values)

    def calibration_report(self, state: Mapping[str, Any] | None = None, refused: str = "") -> HealthReport:
        """``calibration required`` (WARN) while no stage has an accepted result, naming for each stage the
        maneuver it needs (:data:`MANEUVERS`) and what the newest data gave (``seen_<stage>``); once one has, OK
        naming the calibrated stages and the maneuvers still needed. ``state``: the state file's key/values
        (published after ``calibrated_stages``); ``refused``: why the state file was refused at start ('' = it
        was not): then named in the message, as ``state_refused``, and the status is WARN."""
        stages = self.config.stages
        done = [s for s in stages if self.status[s].result is not None]
        needed = [s for s in stages if s not in done]
        values: dict[str, Any] = {"calibrated_stages": ",".join(done), **(state or {})}
        if refused:
            values["state_refused"] = refused
        for s in needed:
            values[f"seen_{s}"] = self.status[s].last_reason or self.status[s].message
        if not done:
            message = "calibration required: " + "; ".join(f"{MANEUVERS[s]} ({s}: {values[f'seen_{s}']})"
                                                           for s in needed)
            return HealthReport(WARN, f"state file refused ({refused}); {message}" if refused else message, values)
        message = f"calibrated: {', '.join(done)}"
        if needed:
            message += f"; still needed: {', '.join(MANEUVERS[s] for s in needed)}"
        if refused:
            message += f"; state file refused at start ({refused})"
        return HealthReport(WARN if refused else OK, message, values)

    def reports(self, state: Mapping[str, Any] | None = None, refused: str = "") -> dict[str, HealthReport]:
        """The statuses that follow the inputs status, by name: ``calibration`` (:meth:`calibration_report` with
        ``state`` and ``refused``), then each configured stage's status with :meth:`stage_report`."""
        out = {"calibration": self.calibration_report(state, refused)}
        for stage in self.config.stages:
            st = self.status[stage]
            out[stage] = HealthReport(st.level, st.message, self.stage_report(stage))
        return out

    # ------------------------------------------------------------------ cycle
    def accepted_values(self, exclude: str | None = None) -> dict[str, float]:
        """8-DOF values implied by the accepted results (stage order), on top of the configured defaults."""
        out = dict(self.config.defaults and full_parameters(self.config.defaults, self.config.vehicle) or {})
        for s in self.config.stages:
            res = self.status[s].result
            if s != exclude and res is not None:
                out.update(res.posterior_means())
        return out

    def snapshot(self, final: bool = False) -> list[StageJob]:
        """The stages with a fresh qualifying, plausible segment (copied data), in stage order.

        A window that still reaches the newest data (the maneuver may go on) waits until it is closed or
        ``max_duration`` long; ``final=True`` (end of a replay) takes it as it is."""
        c = self.config
        sources = {k: b.array() for k, b in self.buffers.items()}
        try:
            r = resample(sources, c.segments.rate, c.segments.max_gap, c.segments.yaw_rate_source)
        except InputError as exc:
            for s in c.stages:
                self._note(s, f"waiting for data: {exc}")
            return []
        newest = float(r.time[-1])
        self.free_rolling = free_rolling_radius(r, c.segments, self.vehicle) or self.free_rolling
        model_vehicle = self.model_vehicle()
        jobs: list[StageJob] = []
        planned: list[str] = []
        for k_stage, stage in enumerate(c.stages):
            st = self.status[stage]
            waits = tuple(e for e in c.stages[:k_stage] if self.status[e].result is None)
            if c.require_order and any(e not in planned for e in waits):
                self._note(stage, f"waiting for stage {waits[0]} (stages run in order: {', '.join(c.stages)})")
                continue
            if newest - self._last_attempt[stage] < c.recalibration_period:
                continue
            windows, why = find_windows(r, stage, c.segments, self.vehicle)
            open_end = newest - 2.0 / c.segments.rate
            fresh = [w for w in windows if w.t_end - self._last_end[stage] >= c.min_new_data
                     and (final or w.t_end < open_end or w.duration >= c.segments.max_duration - 1e-6)]
            if not fresh:
                if not windows:
                    self._note(stage, f"no qualifying segment: {why}")
                elif windows[-1].t_end - self._last_end[stage] >= c.min_new_data:   # still open (going on)
                    w = windows[-1]
                    self._note(stage, f"maneuver in progress: {w.duration:.2f} s so far "
                                      f"([{w.t_start:.2f}, {w.t_end:.2f}] s); fitted when it ends")
                continue
            w = fresh[-1]
            self._last_end[stage] = w.t_end
            self._last_attempt[stage] = newest
            st.segment, st.excitation = (w.t_start, w.t_end), w.score
            try:
                t_fit, t_held = self._split(w)   # the fitted part, the held-back last part (acceptance.py)
                seg = build_segment(r, w.t_start, t_fit, c.segments, source=f"{stage} segment")
                held = None if t_held is None else build_segment(r, t_held, w.t_end, c.segments,
                                                                 source=f"{stage} held-back part")
                parts = tuple(part_bounds(float(seg.time[0]), float(seg.time[-1]), c.spread_parts,
                                          c.spread_min_part_s, dt=1.0 / c.segments.rate))   # none with spread_parts 0
                if "wheel_torque" in self.buffers and seg.wheel_torque is None:
                    raise InputError(f"{stage} segment [{w.t_start:.2f}, {w.t_end:.2f}] s: no measured wheel torque "
                                     "(JointState.effort of every wheel) throughout, and the vehicle's "
                                     "torque_source is measured")
                check_segment(seg, stage_spec(stage, priors=c.priors, vehicle=c.vehicle), r0=c.r0,
                              vehicle=self.vehicle, thresholds=c.segments)
            except (InputError, EstimationError) as exc:
                st.n_rejected += 1
                self._note(stage, f"segment rejected: {exc}", level=ERROR if isinstance(exc, InputError) else WARN)
                continue
            if st.result is not None and w.score < c.replace_min_score * st.result_score:
                # commit would keep the accepted model whatever this fit gives: spare the worker the fit (after the
                # plausibility check, so a bad segment is still reported)
                name, unit = EXCITATION[stage]
                self._note(stage, f"segment [{w.t_start:.2f}, {w.t_end:.2f}] s is less excited ({name} {w.score:.3g} "
                                  f"vs {st.result_score:.3g} {unit} of the accepted fit's); not fitted")
                continue
            jobs.append(StageJob(stage, w, seg, self.accepted_values(exclude=stage),
                                 seed=int(c.seed) + 1000 * self.cycle + len(jobs), cycle=self.cycle,
                                 waits_for=waits, accepted=st.result if c.confirm_max_shift > 0 else None,
                                 held=held, replaced=st.result.posterior_means() if st.result is not None else {},
                                 vehicle=model_vehicle, parts=parts))
            planned.append(stage)
        return jobs

    def model_vehicle(self) -> Any:
        """The vehicle description the fits run the 8-DOF model with: the configured one, at the rolling radius
        its free rolling shows (:attr:`free_rolling`) when that differs from the description's static rolling
        radius by more than 3 standard errors (segments.free_rolling_radius: a spec sheet's radius is rarely
        known to the 0.5 % of an everyday slip); else the configured ``vehicle`` as given."""
        fr = self.free_rolling
        if fr is None or abs(fr.radius - self.vehicle.static_rolling_radius()) <= 3.0 * fr.se:
            return self.config.vehicle
        return self.vehicle.with_rolling_radius(fr.radius)

    def rolling_radius_report(self) -> dict[str, float | bool] | None:
        """The free-rolling radius measurement for reports: radius, se (m), seconds, the description's static
        radius (m) and whether the fits use the measured one; None: not enough free rolling yet."""
        fr = self.free_rolling
        if fr is None:
            return None
        return {"radius": fr.radius, "se": fr.se, "seconds": fr.seconds,
                "description": self.vehicle.static_rolling_radius(),
                "used": self.model_vehicle() is not self.config.vehicle}

    def _split(self, w: Window) -> tuple[float, float | None]:
        """(end of the fitted part, start of the held-back part) of window ``w`` [s]: the last
        ``holdout_fraction`` of its samples, at least
        :data:`~vehcal_ros.estimation.calibration.acceptance.MIN_HOLDOUT_S` and 50 samples, are held back; ``(t_end,
        None)`` when the check is off. :class:`EstimationError` if the fitted part would keep fewer than 50 samples."""
        c = self.config
        if c.holdout_fraction <= 0.0:
            return w.t_end, None
        step = 1.0 / c.segments.rate
        n = int(round(w.duration / step)) + 1
        n_hold = max(int(round(c.holdout_fraction * n)), 50, int(math.ceil(MIN_HOLDOUT_S / step)) + 1)
        if n - n_hold < 50:
            raise EstimationError(f"window [{w.t_start:.2f}, {w.t_end:.2f}] s is too short to hold back "
                                  f"{c.holdout_fraction:g} of it (>= {MIN_HOLDOUT_S:g} s and 50 samples) and fit "
                                  "50 samples")
        t_split = w.t_start + (n - n_hold) * step   # the first held-back grid point
        return t_split - 0.6 * step, t_split - 0.4 * step

    def _note(self, stage: str, reason: str, level: int = WARN) -> None:
        """Record why the newest data gave no fit; the last good result (and its OK level) is kept."""
        st = self.status[stage]
        st.last_reason = reason
        if st.result is None:
            st.level, st.message = max(level, WARN), reason
        else:
            st.message = f"{self.result_summary(stage)}; newest data: {reason}"

    def acceptable(self, result: CalibrationResult) -> bool:
        """The convergence rule: every parameter, noise sigma and residual AR(1) coefficient has a finite mean,
        split R-hat <= max_r_hat, bulk ESS >= min_ess and tail ESS >= min_ess_tail."""
        c = self.config
        for s in _summaries(result):
            r_hat, ess, tail, mean = s.get("r_hat"), s.get("ess_bulk"), s.get("ess_tail"), s.get("mean")
            if not all(isinstance(x, (int, float)) and math.isfinite(x) for x in (r_hat, ess, tail, mean)):
                return False
            if r_hat > c.max_r_hat or ess < c.min_ess or tail < c.min_ess_tail:
                return False
        return True

    def fit(self, jobs: list[StageJob]) -> list[StageOutcome]:
        """Calibrate each job's stage (slow; call from a worker thread). Touches no shared state; a result
        accepted earlier in the batch feeds the later jobs. ``cancel`` set: the running fit stops at its next SMC
        round and the outcomes end before it (nothing to commit for it)."""
        c = self.config
        outcomes: list[StageOutcome] = []
        chained: dict[str, float] = {}
        accepted_now: set[str] = set()
        for job in jobs:
            if self.cancel.is_set():   # shutting down: no new fits
                break
            missing = [s for s in job.waits_for if s not in accepted_now]
            if c.require_order and missing:
                outcomes.append(StageOutcome(job.stage, job.window, job.cycle,
                                             error=f"skipped: stage {missing[0]} has no accepted result"))
                continue
            t0 = time.perf_counter()
            check = self._check(job, chained)
            if check is not None and check.consistent:   # the accepted model explains the new window: no SMC
                outcomes.append(StageOutcome(job.stage, job.window, job.cycle, wall_s=time.perf_counter() - t0,
                                             segment=job.segment, check=check))
                continue
            try:
                result, error = self._fit(job, chained, c.priors)
                if result is not None and not self.acceptable(result) and c.retry_draws_factor > 1:
                    # one SMC run lost a mode (a ridge): once more with more particles per run
                    result, error = self._fit(job, chained, c.priors, c.n_draws * c.retry_draws_factor)
                carried = self.carried_priors.get(job.stage, {})
                if result is not None and any(touches_bound(result.parameters[n], (b["lower"], b["upper"]))
                                              for n, b in carried.items() if n in result.parameters):
                    # the data contradict the carried prior (a change beyond the drift model's allowance): refit
                    # once on the ranges configured before carrying, so that the change is estimated, not clipped
                    result, error = self._fit(job, chained, self.configured_priors, _draws_per_chain(result))
            except Cancelled:   # stopped on request: no outcome, the last good model stays
                break
            # converged (the rule) and plausible (no parameter at a prior bound, residuals within their prior)
            ok = result is not None and self.acceptable(result) and implausible(job.stage, result, c) is None
            if ok and job.parts:   # the spread between the window's parts widens the intervals (maneuver_spread.py)
                result = widened(result, self._part_spread(job, result, chained))
            holdout = None
            if ok and job.held is not None:   # the acceptance rule: it must predict the held-back part
                holdout = self._predict(job, result, chained)
                ok = bool(holdout["passed"])
            if ok:
                chained.update(result.posterior_means())
                accepted_now.add(job.stage)
            outcomes.append(StageOutcome(job.stage, job.window, job.cycle, result, ok, error,
                                         time.perf_counter() - t0, segment=job.segment, check=check,
                                         holdout=holdout))
        return outcomes

    def _predict(self, job: StageJob, result: CalibrationResult, chained: Mapping[str, float]) -> dict:
        """The predictive check of ``result`` on ``job``'s held-back part against the model it replaces
        (acceptance.predictive_check; ``HoldoutCheck.to_dict``); a check that cannot run refuses, saying why."""
        c = self.config
        fitted = (float(job.segment.time[0]), float(job.segment.time[-1]))
        try:
            return predictive_check(job.held, result, {**job.previous, **chained}, job.replaced,
                                    tolerance=c.holdout_tolerance, vehicle=_job_vehicle(job, c), priors=c.priors,
                                    dt=c.dt,
                                    seed=job.seed, fitted=fitted, band=c.holdout_band).to_dict()
        except (InputError, EstimationError, KeyError, ValueError, FloatingPointError, ArithmeticError,
                np.linalg.LinAlgError) as exc:
            t0, t1 = float(job.held.time[0]), float(job.held.time[-1])
            return {"segment": [t0, t1], "fitted": list(fitted), "passed": False,
                    "message": f"held-back [{t0:.2f}, {t1:.2f}] s: the predictive check failed: {exc!r}"}

    def _fit(self, job: StageJob, chained: Mapping[str, float],
             priors: Mapping[str, tuple[float, float]] | None, n_draws: int | None = None) -> tuple[Any, str | None]:
        """One SMC fit of ``job`` on ``priors`` (the pipeline's sampler settings and residual model; ``n_draws``
        particles per chain, default the config's): (result, None), or (None, the reason it failed).
        :class:`Cancelled` propagates."""
        c = self.config
        try:
            return calibrate_stage(job.segment, job.stage, previous={**job.previous, **chained},
                                   n_chains=c.n_chains, n_draws=n_draws or c.n_draws, seed=job.seed, kernel=c.kernel,
                                   predictive_draws=c.predictive_draws, check=False, dt=c.dt,
                                   max_mutation_steps=c.max_mutation_steps, noise_prior_factor=c.noise_prior_factor,
                                   priors=priors, initial_state=c.stage_initial_state(job.stage),
                                   noise_model=c.noise_model, vehicle=_job_vehicle(job, c),
                                   smc_options={"refit_proposal": bool(c.refit_proposal),
                                                "stop": self.cancel.is_set}), None
        except (InputError, EstimationError) as exc:
            return None, str(exc)
        except (ValueError, FloatingPointError, ArithmeticError, np.linalg.LinAlgError, RuntimeError) as exc:
            return None, f"fit failed: {exc!r}"

    def _part_spread(self, job: StageJob, result: CalibrationResult,
                     chained: Mapping[str, float]) -> dict[str, PartSpread]:
        """The spread of ``result``'s parameters between ``job``'s parts (maneuver_spread.part_spread); empty when a
        part's fit cannot run (the result is then published as fitted)."""
        c = self.config
        try:
            return part_spread(job.segment, job.parts, result, {**job.previous, **chained},
                               priors=self.configured_priors, vehicle=_job_vehicle(job, c), dt=c.dt)
        except (InputError, EstimationError, KeyError, ValueError, FloatingPointError, ArithmeticError,
                np.linalg.LinAlgError):
            return {}

    def _check(self, job: StageJob, chained: Mapping[str, float]) -> WindowCheck | None:
        """The recalibration check of ``job``'s window against its stage's accepted result (None: no accepted
        result, check off, or the check could not run: then the stage is refitted)."""
        c = self.config
        if job.accepted is None or c.confirm_max_shift <= 0:
            return None
        try:
            # bounded by the ranges configured before carrying (a carried range would clip the best fit)
            return check_window(job.segment, job.accepted, {**job.previous, **chained}, c.confirm_max_shift,
                                priors=self.configured_priors, vehicle=_job_vehicle(job, c), dt=c.dt,
                                spread=self.spread.get(job.stage), offset=maneuver_offsets(job.accepted))
        except (InputError, EstimationError, KeyError, ValueError, FloatingPointError, ArithmeticError):
            return None

    def commit(self, outcomes: list[StageOutcome]) -> list[str]:
        """Record the outcomes; return the stages whose accepted result changed."""
        updated = []
        for o in outcomes:
            st = self.status[o.stage]
            st.segment = (o.window.t_start, o.window.t_end)
            keep = "; keeping the last good model" if st.result is not None else "; no model for this stage yet"
            if o.result is None and o.error and o.error.startswith("skipped"):
                st.last_reason = o.error
                if st.result is None:
                    st.level, st.message = WARN, o.error
                continue
            if o.check is not None:
                st.last_check = f"[{o.window.t_start:.2f}, {o.window.t_end:.2f}] s: {o.check.describe()}" + (
                    ": confirmed, not refitted" if o.confirmed else ": refitted")
                if st.result_restored and math.isfinite(o.check.shift):
                    st.carried_shifts.append(float(o.check.shift))
                    st.check_threshold = float(o.check.threshold)
                    st.carried_deviations.append(dict(o.check.deviation))
            if o.confirmed:
                st.n_confirmed += 1
                st.last_confirmed = (o.window.t_start, o.window.t_end)
                st.level, st.last_reason = OK, ""
                if st.result is not None:   # the window's information joins the accepted posterior
                    before = st.result
                    st.result = updated_result(st.result, o.check)
                    if st.result is not before:
                        updated.append(o.stage)
                st.message = (f"{self.result_summary(o.stage)}; confirmed by [{o.window.t_start:.2f}, "
                              f"{o.window.t_end:.2f}] s (its best fit {o.check.shift:.3g} sd from the model <= "
                              f"{o.check.threshold:g}; {st.n_confirmed} confirmations, each added to the "
                              "posterior)")
                continue
            st.n_fits += 1
            st.last_fit_s = o.wall_s
            if o.holdout is not None:
                st.last_holdout = o.holdout
            if o.result is None:
                st.n_failed += 1
                st.level = WARN if st.result is not None else ERROR
                st.message = st.last_reason = f"{o.error}{keep}"
            elif self.acceptable(o.result) and (bound := implausible(o.stage, o.result, self.config)) is not None:
                st.n_failed += 1
                st.level = WARN if st.result is not None else ERROR
                st.message = st.last_reason = (
                    f"fit on [{o.window.t_start:.2f}, {o.window.t_end:.2f}] s converged but {bound}{keep}")
            elif o.holdout is not None and not o.holdout.get("passed", False):
                st.n_failed += 1
                st.n_refused_holdout += 1
                st.level = WARN if st.result is not None else ERROR
                st.message = st.last_reason = (
                    f"fit on [{o.window.t_start:.2f}, {o.window.t_end:.2f}] s converged but does not predict its "
                    f"{o.holdout.get('message', 'held-back part')}{keep}")
            elif not o.accepted:
                st.n_failed += 1
                st.n_not_converged += 1
                st.level = WARN
                r_hat, ess, tail = worst_diagnostics(o.result)
                st.message = st.last_reason = (
                    f"fit on [{o.window.t_start:.2f}, {o.window.t_end:.2f}] s did not pass its diagnostics at "
                    f"{self.config.n_chains} x {_draws_per_chain(o.result)} particles (max R-hat {r_hat:.4g} vs <= "
                    f"{self.config.max_r_hat:g}, min bulk ESS {ess:.0f} vs >= {self.config.min_ess:g}, min tail "
                    f"ESS {tail:.0f} vs >= {self.config.min_ess_tail:g}){keep}")
            elif st.result is not None and o.window.score < self.config.replace_min_score * st.result_score:
                st.level = OK
                st.last_reason = (f"fit on [{o.window.t_start:.2f}, {o.window.t_end:.2f}] s converged but its "
                                  f"segment is less excited ({EXCITATION[o.stage][0]} {o.window.score:.3g} vs "
                                  f"{st.result_score:.3g} {EXCITATION[o.stage][1]}); "
                                  "keeping the model from the more excited one")
            else:
                st.result = o.result
                st.result_restored = False
                st.result_segment = (o.window.t_start, o.window.t_end)
                st.result_data = o.segment
                st.result_score = float(o.window.score)
                st.result_holdout = o.holdout
                st.level = OK
                st.last_reason = ""
                st.message = self.result_summary(o.stage)
                if o.holdout and o.holdout.get("warnings"):   # holdout_band warn: accepted, its band too narrow
                    st.level = WARN
                    st.message += f"; its 90 % band is too narrow: {'; '.join(o.holdout['warnings'])}"
                updated.append(o.stage)
        self.cycle += 1
        return updated

    def restore(self, stage: str, result: CalibrationResult, segment: tuple[float, float] | None, score: float,
                note: str = "restored", holdout: dict | None = None) -> None:
        """Take ``result`` as ``stage``'s accepted result (a restart reading its state file back; ``holdout``: its
        predictive check, if the file has one); a new fit replaces it under the usual rule (a segment at least
        ``replace_min_score`` as excited, predicting its held-back part no worse than this result)."""
        st = self.status[stage]
        st.result, st.result_segment, st.result_score, st.result_data = result, segment, float(score), None
        st.result_holdout = holdout
        st.result_restored = True
        st.level, st.last_reason = OK, ""
        st.message = f"{self.result_summary(stage)} ({note})"

    def carry_forward(self, stage: str, result: CalibrationResult, segment: tuple[float, float] | None,
                      score: float, *, data_time: float | None, drift: DriftModel | None = DEFAULT_DRIFT,
                      note: str = "carried forward", holdout: dict | None = None,
                      spread: Mapping[str, float] | None = None) -> None:
        """Start ``stage`` from an earlier drive's accepted ``result`` (a state file read back, the previous bag of
        a fleet chain): it is restored as the accepted result (:meth:`restore`), and, unless ``drift`` is None, the
        stage's uniform priors become the carried ranges of :mod:`vehcal_ros.estimation.calibration.carry_forward` (the
        posterior widened for the data time from ``data_time`` [s, the stamp clock; the accepted fit's segment
        end] to the first record added after this call, clipped to the configured ranges). The ranges are set
        in ``config.priors`` at that first record and listed in :attr:`carried_priors`. A fit of a carried stage
        whose posterior HDI reaches a carried bound (``carry_forward.touches_bound``) is run once more on the ranges
        configured before carrying (:meth:`fit`): a change beyond the drift model's allowance is estimated, not
        clipped. A carried stage's excitation ``score`` is not carried (``replace_min_score`` then compares against
        0): a converged, predicting fit of the new drive replaces the carried result however excited its segment,
        its prior holding the earlier drives' information; with ``drift`` None the score is restored as given.
        ``spread``: parameter -> the spread between windows tau^2 of the vehicle's history
        (carry_forward.window_spread), added to the carried priors' and the recalibration checks' variances."""
        carried = drift is not None and data_time is not None and math.isfinite(data_time)
        self.restore(stage, result, segment, 0.0 if carried else score, note=note, holdout=holdout)
        self.spread[stage] = {k: float(v) for k, v in (spread or {}).items()}
        if carried:
            self._carried[stage] = ({k: dict(v) for k, v in result.parameters.items()}, float(data_time), drift)

    def _apply_carried(self, t_now: float) -> None:
        """Set the carried priors of :meth:`carry_forward` at data time ``t_now`` [s]."""
        base, c = self.config.priors, self.config
        ranges: dict[str, tuple[float, float]] = {}
        for stage, (params, t_data, drift) in self._carried.items():
            spec = stage_spec(stage, priors=base, vehicle=c.vehicle)
            bounds = {n: (float(d.low), float(d.high)) for n, d in spec.priors if hasattr(d, "low")}
            carried = carried_priors(params, t_now - t_data, bounds, drift, self.spread.get(stage))
            ranges.update(carried)
            self.carried_priors[stage] = {n: {"lower": lo, "upper": hi, "elapsed_s": t_now - t_data}
                                          for n, (lo, hi) in carried.items()}
        self._carried = {}
        if ranges:
            self._base_priors, self._priors_carried = base, True
            self.config = with_updates(self.config, priors={**(base or {}), **ranges})

    @property
    def configured_priors(self) -> Mapping[str, tuple[float, float]] | None:
        """The prior ranges configured before any carrying (``config.priors`` while none is carried): the ranges
        a carried stage is refitted on when its data reach a carried bound, and that bound a recalibration
        check's best fit."""
        return self._base_priors if self._priors_carried else self.config.priors

    def result_summary(self, stage: str) -> str:
        """``stage``'s accepted result in one line, as its status message opens with it: the parameter means, the
        segment it was fitted on (s), its worst convergence diagnostics (R-hat, bulk and tail ESS) and, with a
        predictive check, the held-out RMSE per channel (channel units) against the model it replaced; "no model
        yet" without an accepted result."""
        st = self.status[stage]
        res = st.result
        if res is None:
            return "no model yet"
        r_hat, ess, tail = worst_diagnostics(res)
        vals = ", ".join(f"{k} {v['mean']:.5g}" for k, v in res.parameters.items())
        t0, t1 = st.result_segment or (float("nan"), float("nan"))
        h = st.result_holdout
        held = ""
        if h and h.get("rmse_candidate"):
            held = "; held-out RMSE " + ", ".join(
                f"{c} {v:.4g} vs {h['rmse_replaced'][c]:.4g} {h['replaced']}" for c, v in h["rmse_candidate"].items())
        return (f"{vals} (segment [{t0:.2f}, {t1:.2f}] s, max R-hat {r_hat:.4f}, min bulk ESS {ess:.0f}, min tail "
                f"ESS {tail:.0f}{held})")

    def run_cycle(self, final: bool = False) -> list[str]:
        """snapshot + fit + commit in the caller's thread (bag replay, tests); ``final``: see :meth:`snapshot`."""
        return self.commit(self.fit(self.snapshot(final)))

    def cycle_failed(self, jobs: list[StageJob] | None, message: str) -> None:
        """A cycle that raised: the stages of ``jobs`` (every configured stage when None) go to ERROR with
        ``message``; their accepted results are kept."""
        for stage in [job.stage for job in jobs] if jobs is not None else list(self.config.stages):
            st = self.status[stage]
            st.level, st.message = ERROR, message

    def calibrate_outcome(self, jobs: list[StageJob],
                          before: Mapping[str, CalibrationResult | None]) -> tuple[bool, str]:
        """(success, message) of a calibrate-now request once ``jobs`` (possibly none) were fitted and committed;
        ``before``: each stage's accepted result before the fit. A stage counts as accepted when its result changed;
        success when there were jobs and every fitted stage was accepted. The message names each fitted stage
        (every configured one when nothing was fitted): accepted or not, with its status message."""
        stages = [job.stage for job in jobs] or list(self.config.stages)
        accepted = {s for s in stages if self.status[s].result is not before[s]}
        lines = [f"{s}: {'accepted' if s in accepted else 'not accepted'}: {self.status[s].message}" for s in stages]
        return bool(jobs) and accepted == set(stages), ("fitted " if jobs else "nothing to fit; ") + " | ".join(lines)

    # ------------------------------------------------------------------ outputs
    def model_parameters(self) -> dict[str, float]:
        """Latest accepted values (defaults where not yet calibrated) of :data:`MODEL_PARAMETERS`."""
        p = {**full_parameters(self.config.defaults, self.config.vehicle), **self.accepted_values()}
        out = {k: float(p[k]) for k in MODEL_PARAMETERS if k != "bphi"}
        out["bphi"] = float(p["bphi_f"] + p["bphi_r"])
        return {k: out[k] for k in MODEL_PARAMETERS}

    def model_values(self) -> dict[str, float]:
        """:meth:`model_parameters` named as the calibrator's output parameters, ``model.<name>`` (lower case)."""
        return {f"model.{k.lower()}": v for k, v in self.model_parameters().items()}

    def calibrated(self) -> dict[str, str]:
        """Model parameter -> stage, for the parameters with an accepted result."""
        out = {}
        for s in self.config.stages:
            res = self.status[s].result
            if res is not None:
                out.update(dict.fromkeys((k for k in res.parameters if k in MODEL_PARAMETERS), s))
        return out

    def parameter_summaries(self) -> dict[str, dict[str, float | str]]:
        """Per accepted parameter and noise sigma (``sigma_<channel>`` of a stage: ``<stage>/sigma_<channel>``):
        mean, std, hdi_low, hdi_high, r_hat, ess_bulk, ess_tail, stage, time (end of its segment, s)."""
        out: dict[str, dict] = {}
        keys = ("mean", "std", "hdi_low", "hdi_high", "r_hat", "ess_bulk", "ess_tail")
        for s in self.config.stages:
            st = self.status[s]
            if st.result is None:
                continue
            t_end = st.result_segment[1] if st.result_segment else float("nan")
            for name, summ in st.result.parameters.items():
                out[name] = {**{k: float(summ[k]) for k in keys}, "stage": s, "time": t_end}
            for ch, summ in st.result.noise.items():
                out[f"{s}/sigma_{ch}"] = {**{k: float(summ[k]) for k in keys}, "stage": s, "time": t_end}
            for ch, summ in st.result.residual_correlation.items():
                out[f"{s}/rho_{ch}"] = {**{k: float(summ[k]) for k in keys}, "stage": s, "time": t_end}
        return out

    def model_statuses(self, hardware_id: str) -> list[tuple[str, str, int, str, dict[str, Any]]]:
        """What ``vehcal/model_parameters`` carries (live node and replay alike), as (name, hardware_id, level,
        message, values) diagnostic statuses, all OK: one per accepted parameter and noise term
        (:meth:`parameter_summaries`), ``rolling_radius`` (the free-rolling radius the data show:
        :meth:`rolling_radius_report`, m; once measured) and ``model`` (:meth:`model_parameters`, and which of
        them are calibrated)."""
        out = [(name, hardware_id, 0, f"{s['stage']} ({UNITS.get(name, 'channel units')})", s)
               for name, s in self.parameter_summaries().items()]
        radius = self.rolling_radius_report()
        if radius is not None:
            out.append(("rolling_radius", hardware_id, 0,
                        "free-rolling radius the data show (m); used by the fits: " + str(bool(radius["used"])).lower(),
                        {k: (float(v) if not isinstance(v, bool) else v) for k, v in radius.items()}))
        out.append(("model", hardware_id, 0, "latest accepted 8-DOF model (defaults where not calibrated)",
                    {**self.model_values(), "calibrated": ",".join(self.calibrated())}))
        return out

    def params_yaml(self, node_name: str = "model_calibrator") -> str:
        """A ROS 2 params YAML (``<node>: ros__parameters: model: {cxf: ..., ...}``) an MPC node can load."""
        cal = self.calibrated()
        model = {k.lower(): float(v) for k, v in self.model_parameters().items()}
        head = ["# 8-DOF model parameters from vehcal_ros model_calibrator (Unjhawala et al. 2023, "
                "doi:10.1115/1.4062199)", "# units: cx* N, cy* N/rad, kphi_* N m/rad, bphi N m s/rad (total, split "
                "equally front/rear), rr m, jd kg m^2 (driveline inertia added to each driven wheel's spin inertia)"]
        for k in MODEL_PARAMETERS:
            head.append(f"#   {k.lower()}: {'calibrated, stage ' + cal[k] if k in cal else 'default (not calibrated)'}")
        body = yaml.safe_dump({node_name: {"ros__parameters": {"model": model}}}, sort_keys=False)
        return "\n".join(head) + "\n" + body

    def write_params(self, path: str | os.PathLike, node_name: str = "model_calibrator") -> None:
        """Write :meth:`params_yaml` atomically (temp file in the same directory, then rename)."""
        write_atomic(path, self.params_yaml(node_name))


def _job_vehicle(job: StageJob, config: CalibrationPipelineConfig) -> Any:
    """The vehicle description ``job`` is fitted with (its own, else the configured one)."""
    return job.vehicle if job.vehicle is not None else config.vehicle


def _draws_per_chain(res: CalibrationResult) -> int | None:
    """Particles per chain of a fit (None: a result without its draws, e.g. restored from a state file)."""
    draws = getattr(res, "draws", None)
    return int(draws.shape[1]) if draws is not None and np.ndim(draws) == 3 else None


def _summaries(res: CalibrationResult) -> list[Mapping[str, Any]]:
    """The summaries the convergence rule reads: parameters, noise sigmas, residual AR(1) coefficients."""
    return [*res.parameters.values(), *res.noise.values(), *res.residual_correlation.values()]


def worst_diagnostics(res: CalibrationResult) -> tuple[float, float, float]:
    """(largest R-hat, smallest bulk ESS, smallest tail ESS) over :func:`_summaries` (nan counts as worst)."""
    def values(key: str) -> list[float]:
        return [s[key] if s.get(key) is not None else math.nan for s in _summaries(res)]

    r = max(values("r_hat"), key=lambda x: math.inf if not math.isfinite(x) else x)
    e = min(values("ess_bulk"), key=lambda x: -math.inf if not math.isfinite(x) else x)
    t = min(values("ess_tail"), key=lambda x: -math.inf if not math.isfinite(x) else x)
    return float(r), float(e), float(t)


def with_updates(config: CalibrationPipelineConfig, **changes) -> CalibrationPipelineConfig:
    """A validated copy of ``config``; keys of :class:`SegmentConfig` go to ``config.segments``."""
    seg_fields = set(SegmentConfig.__dataclass_fields__)
    seg = {k: v for k, v in changes.items() if k in seg_fields}
    top = {k: v for k, v in changes.items() if k not in seg_fields}
    new = replace(config, segments=replace(config.segments, **seg), **top)
    new.validate()
    return new


__all__ = ["CalibrationPipeline", "CalibrationPipelineConfig", "StageJob", "StageOutcome", "StageStatus",
           "PipelineCounters", "MODEL_PARAMETERS", "UNITS", "STAGE_OF",
           "worst_diagnostics", "with_updates"]


PHYSICAL_MINIMUM = 0.0
"""The lower physical limit of every calibrated parameter (stiffnesses, the roll damping, the rolling-resistance
lever are non-negative); a prior range starting there is bounded by physics, not by choice (:func:`at_prior_bound`)."""


def at_prior_bound(stage: str, result: CalibrationResult, share: float = 0.01,
                   priors: Mapping[str, tuple[float, float]] | None = None) -> str | None:
    """Name a model parameter whose posterior mean lies within ``share`` of its uniform prior's range from a bound.

    A posterior piled against a prior bound means the data of the segment do not identify that parameter (or the
    8-DOF model cannot reproduce them with any value inside the prior's range); such a fit is not accepted. A
    lower bound at :data:`PHYSICAL_MINIMUM` is the exception: every calibrated parameter is a stiffness, a damping
    or a rolling-resistance lever, none of which can be negative, so a posterior piled against 0 says that the
    data put the value at its physical limit (a car with no measurable rolling resistance), not that they failed
    to identify it. The ranges are the result's own (those it was sampled with), else ``priors`` over the
    paper's.
    """
    for name, prior in stage_spec(stage, priors=priors).priors:
        low, high = result.priors.get(name, (float(prior.low), float(prior.high)))
        s = result.parameters.get(name)
        if s is None:
            continue
        m, margin = float(s["mean"]), share * (high - low)
        at_low = m <= low + margin and low > PHYSICAL_MINIMUM
        if at_low or m >= high - margin:
            side = "lower" if at_low else "upper"
            return f"{name} = {m:.5g} is at the {side} bound of its prior [{low:g}, {high:g}]"
    return None


NOISE_PRIOR_QUANTILE = 0.999
"""A residual sigma beyond this quantile of its half-normal prior is a prior-data conflict
(:func:`noise_beyond_prior`)."""


def noise_beyond_prior(stage: str, result: CalibrationResult, noise_prior_factor: float,
                       quantile: float = NOISE_PRIOR_QUANTILE) -> str | None:
    """Name a channel whose residual sigma's posterior mean lies beyond the ``quantile`` of its half-normal prior
    (scale: the stage's noise scale x ``noise_prior_factor``, calibration.calibrate_stage).

    The prior already allows the model-form error of live data (ten times the paper's sensor-noise scales by
    default); residuals beyond it mean that the 8-DOF model does not describe the segment with any parameter value
    (e.g. a launch whose wheels spin far beyond the tires' linear range), a prior-data conflict in the sense of
    Evans & Moshonov (2006). Such a fit's parameters describe nothing, however well its chains converged.
    """
    for channel, scale in stage_spec(stage).noise_scales:
        s = result.noise.get(channel)
        if s is None:
            continue
        limit = halfnormal_quantile(quantile, scale * noise_prior_factor)
        if float(s["mean"]) > limit:
            return (f"its residual sigma of {channel} = {float(s['mean']):.4g} is beyond the {100 * quantile:g} % "
                    f"quantile {limit:.4g} of its prior: the 8-DOF model does not describe this segment")
    return None


def implausible(stage: str, result: CalibrationResult, config: CalibrationPipelineConfig) -> str | None:
    """Why a converged fit is not accepted although its chains passed the rule (None: it may be): a parameter at a
    prior bound (:func:`at_prior_bound`: the segment does not identify it) or residuals beyond their prior
    (:func:`noise_beyond_prior`)."""
    bound = at_prior_bound(stage, result, priors=config.priors)
    if bound is not None:
        return f"{bound}: this segment does not identify it"
    return noise_beyond_prior(stage, result, config.noise_prior_factor)


# ------------------------------------------------------------------------------------------------------------
# ROS parameters -> pipeline configuration (one mapping for the model_calibrator node and bag replay)
# ------------------------------------------------------------------------------------------------------------
PRIOR_PREFIX = "prior."
"""model_calibrator parameters ``prior.<name>`` (lower case) = [lower, upper] uniform prior ranges."""

CONFIG_KEYS = ("n_chains", "n_draws", "seed", "window", "buffer_size", "max_r_hat", "min_ess", "min_ess_tail",
               "retry_draws_factor",
               "recalibration_period", "min_new_data", "clock_jump", "require_order", "confirm_max_shift",
               "holdout_fraction", "holdout_tolerance", "holdout_band", "noise_model", "spread_parts",
               "spread_min_part_s")
"""model_calibrator parameters that are fields of :class:`CalibrationPipelineConfig`."""


def _model_overrides(values: Mapping[str, Any]) -> dict[str, float]:
    """``model.<name>`` values set other than 0 (0, the declared default, takes the description's nominal value;
    only ``model.jd`` may be negative)."""
    out = {}
    for n in MODEL_PARAMETERS:
        v = values.get(f"model.{n.lower()}")
        if v is not None and float(v) != 0.0:
            out[n] = float(v)
    return out


def _prior_overrides(values: Mapping[str, Any]) -> dict[str, Any]:
    """``prior.<name>`` ranges given ([], the declared default, or an unset parameter takes the description's)."""
    return {k[len(PRIOR_PREFIX):]: v for k, v in values.items()
            if k.startswith(PRIOR_PREFIX) and v is not None and len(v) > 0}


def vehicle_overrides(values: Mapping[str, Any]) -> list[str]:
    """One warning per model_calibrator parameter that overrides a fact of the vehicle description (``vehicle``),
    naming both values: ``prior.<name>`` ranges, ``model.<name>`` start-up values and the tire radius ``r0``."""
    desc = load_description(str(values.get("vehicle") or "") or None)
    where = desc.source or desc.name
    nominal = full_parameters(None, str(values.get("vehicle") or "") or None)
    nominal["bphi"] = nominal["bphi_f"] + nominal["bphi_r"]
    out = [f"parameter 'prior.{k.lower()}' = {list(map(float, v))} overrides the vehicle description's "
           f"{list(desc.priors[_prior_key(k)])} ({where})"
           for k, v in _prior_overrides(values).items() if _prior_key(k) in desc.priors]
    out += [f"parameter 'model.{k.lower()}' = {v:g} overrides the vehicle description's {nominal[k]:g} ({where})"
            for k, v in _model_overrides(values).items()]
    r0 = float(values.get("r0") or 0.0)
    if r0 > 0.0:
        out.append(f"parameter 'r0' = {r0:g} overrides the vehicle description's {desc.r0:g} ({where})")
    return out


def _prior_key(name: str) -> str:
    return {k.lower(): k for k in MODEL_PARAMETERS}.get(str(name).lower(), str(name))


def config_from(values: Mapping[str, Any]) -> CalibrationPipelineConfig:
    """The pipeline configuration of model_calibrator parameter values (InputError naming a bad combination).

    The vehicle description ``vehicle`` (None: the default vehicle) holds every vehicle fact: the prior ranges,
    the nominal values of parameters not calibrated yet and the tire radius of the wheel-speed unit check. A
    ``prior.<name>`` = [lower, upper], a ``model.<name>`` other than 0 or an ``r0`` above 0 overrides it
    (:func:`vehicle_overrides` names each); [] and 0, the declared defaults, take the description's. Segment
    thresholds are the ``SegmentConfig`` fields present in ``values``; absent keys keep the configuration classes'
    defaults.
    """
    seg = SegmentConfig(**{f.name: values[f.name] for f in fields(SegmentConfig) if f.name in values})
    extra: dict[str, Any] = {k: values[k] for k in CONFIG_KEYS if k in values}
    if "stages" in values:
        extra["stages"] = tuple(values["stages"])
    vehicle = str(values.get("vehicle") or "") or None
    r0 = float(values.get("r0") or 0.0)
    extra["r0"] = r0 if r0 > 0.0 else load_description(vehicle).r0
    priors = _prior_overrides(values)
    if priors:
        extra["priors"] = check_prior_ranges(priors)
    defaults = _model_overrides(values)
    cfg = CalibrationPipelineConfig(segments=seg, defaults=defaults or None, vehicle=vehicle, **extra)
    cfg.validate()
    return cfg


def holdout_values(holdout: dict | None) -> dict[str, Any]:
    """The /diagnostics keys of an accepted fit's predictive check (estimation/calibration/acceptance.py), next to its
    parameters: ``holdout_rmse_<channel>`` (the fit's held-back RMSE, channel units), ``holdout_rmse_replaced_
    <channel>`` (the model it replaced), ``holdout_coverage_<channel>`` (share in its 90 % band),
    ``holdout_replaced`` (accepted | nominal), ``holdout_t0``/``holdout_t1`` (s); none without a check."""
    if not holdout or not holdout.get("rmse_candidate"):
        return {}
    out: dict[str, Any] = {"holdout_replaced": holdout.get("replaced", ""),
                           "holdout_t0": holdout["segment"][0], "holdout_t1": holdout["segment"][1]}
    for c, v in holdout["rmse_candidate"].items():
        out[f"holdout_rmse_{c}"] = v
        out[f"holdout_rmse_replaced_{c}"] = holdout["rmse_replaced"][c]
        out[f"holdout_coverage_{c}"] = holdout["coverage"][c]
    return out
