"""Staged Bayesian calibration of the 8-DOF model (Unjhawala et al. 2023, doi:10.1115/1.4062199, Section 3).

Three stages, each on its own maneuver segment, as the paper's Sections 3.3-3.5 (priors and noise scales from
data/vehicle_8dof.yaml ``stages``):

=====================  ===========================================  ====================================
stage                  calibrated (uniform priors, Eq. 14)           data (half-normal noise sigma each)
=====================  ===========================================  ====================================
longitudinal           Cxf, Cxr                                      u, w_lf, w_lr          (Sec. 3.3)
lateral                Cyf, Cyr, kphi_f, kphi_r, bphi                v, yaw_rate, roll, roll_rate (3.4)
rolling_resistance     rr                                            u (coast-down)         (Sec. 3.5)
=====================  ===========================================  ====================================

``bphi`` is the total roll damping with ``bphi_f = bphi_r = bphi/2`` (the paper's identifiability fix, Section
4.2); ``separate_bphi=True`` samples ``bphi_f`` and ``bphi_r`` separately (each U(100, 30000), Eq. 14) to show
their non-identifiability. ``kphi_f`` and ``kphi_r`` are sampled as total roll stiffness and front fraction
(same uniform prior on the (kphi_f, kphi_r) box, :class:`_RollSplit`) and reported as kphi_f, kphi_r: the roll
angle fixes the total, not the split. Parameters a stage does not calibrate come from ``previous`` (earlier stages'
posterior means), else from the stage's configured values (the yaml's ``held_fixed``), else from
:data:`~vehcal_ros.models.vehicle_8dof.DEFAULT_PARAMETERS`.

The likelihood (``noise_model="ar1"``) models each channel's residuals ``e_t = y_t - f_t(theta)``
as a stationary AR(1) process with marginal standard deviation ``sigma_c`` and lag-one correlation ``rho_c``,
both sampled (half-normal and uniform priors): ``e_t = rho e_{t-1} + eta_t``, ``eta_t ~ N(0, sigma^2 (1 -
rho^2))``, ``e_0 ~ N(0, sigma^2)``. Its exact log density (the first term stationary, nothing conditioned away) is

    log L = -sum_c [N/2 log(2 pi sigma_c^2) + (N-1)/2 log(1 - rho_c^2) + Q_c / (2 sigma_c^2 (1 - rho_c^2))]  (A1)
    Q_c   = (1 - rho_c^2) e_0^2 + sum_{t=1}^{N-1} (e_t - rho_c e_{t-1})^2                                  (A2)

i.e. the multivariate normal with covariance ``sigma^2 rho^|i-j|`` (determinant ``sigma^{2N} (1 -
rho^2)^{N-1}``). At rho = 0 it is the paper's independent Gaussian (Eq. 2-3 with Gamma diagonal), ``-sum_c [N/2
log(2 pi sigma_c^2) + SSE_c / (2 sigma_c^2)]``, which ``noise_model="white"`` keeps. Why: at 100 Hz the
residuals of an imperfect model (8-DOF against a 14-DOF model, Chrono or a car) are smooth, and the independent
likelihood counts each of N samples as new information, overstating it by about ``(1 + rho) / (1 - rho)`` (the
effective sample size of an AR(1) mean); the intervals then come out narrower than the spread of the estimates
between drives. Where the data carry white sensor noise only, rho's posterior sits at 0 and the likelihood is
the paper's.

``noise_model="discrepancy"`` separates the two (Kennedy & O'Hagan 2001, a Gaussian-process model discrepancy
with the exponential kernel, which sampled at a uniform step is an AR(1) process): ``e_t = d_t + eps_t``,
``eps_t ~ N(0, sigma_c^2)`` white sensor noise, ``d_t`` stationary AR(1) with marginal sd ``delta_c``
(half-normal, the same scale as sigma) and lag-one coefficient ``rho_c`` (U(0.5, 0.999): smooth)::

    log L = -1/2 sum_c [N log 2 pi + log det C_c + e_c' C_c^-1 e_c],  C_c = sigma_c^2 I + delta_c^2 rho_c^|i-j|  (A3)

evaluated exactly by a scalar Kalman filter per channel inside the 8-DOF kernel (the log determinant is the sum
of the innovation variances' logs, :func:`~vehcal_ros.models.vehicle_8dof.kf_log_det`). ``delta_c`` goes to 0
where the data do not support a discrepancy. On AR(1) residuals alone (``ar1``) white sensor noise and a smooth
discrepancy of similar size mix into a small rho (0.2-0.5 on the 14-DOF HMMWV's lateral maneuver, whose sensor
noise the discrepancy model recovers to 2 %), so ``ar1`` still undercounts the discrepancy there; measured
across drives in benchmarks/README_calibration.md, "Intervals across drives".

The 8-DOF model starts from the measured state at the segment's first sample; with ``initial_state="sampled"``
the initial values of the stage's measured channels are nuisance parameters instead, ``x0_c ~ N(x0_c measured,
se_c^2)`` with ``se_c`` the standard error of a local quadratic fit over the segment's first second
(:func:`initial_state_uncertainty`; the pipeline's segments start from such a fit, and the pipeline samples
them by default): an initial roll angle or roll rate off by one or two standard errors starts a roll transient
that the roll damping otherwise absorbs (bphi +2.3 to +2.9 posterior sd on the pipeline test's synthetic drive
over three noise seeds; sampled: +0.8, -2.2, -1.0).

Sampling: tempered SMC (:mod:`vehcal_ros.inference.smc`), several independent runs as chains; diagnostics via
arviz (R-hat, bulk/tail ESS, MCSE, 94 % HDI). The posterior predictive check is the paper's mean RMSE of 100
model responses against the data for prior and posterior draws (Tables 3, 5, 7).
"""

from __future__ import annotations

import csv
import functools
import math
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from importlib import resources

import numpy as np
import yaml

from vehcal_ros.errors import EstimationError, InputError
from vehcal_ros.estimation.calibration.noise_models import DEFAULT_NOISE_MODEL, stage_noise_model
from vehcal_ros.estimation.calibration.qualification import (
    MAX_ROAD_WHEEL_ANGLE,
    STAGE_NEED,
    StageThresholds,
    excitation_failures,
    fmt_angle,
)
from vehcal_ros.inference.diagnostics import converged as _converged
from vehcal_ros.inference.diagnostics import summarize_draws
from vehcal_ros.inference.smc import Distribution, HalfNormal, Normal, Prior, SMCResult, Uniform, run_smc
from vehcal_ros.json_values import jsonable
from vehcal_ros.models.vehicle_8dof import (
    DEFAULT_PARAMETERS,
    PARAM_INDEX,
    PARAM_NAMES,
    STATE_INDEX,
    STATE_NAMES,
    Simulator8Dof,
    VehicleConstants,
    default_vehicle_constants,
    kf_log_det,
    parameter_vector,
)
from vehcal_ros.vehicle.description import (
    CALIBRATED,
    VehicleDescription,
    check_driveline_inertia_range,
    load_description,
)

STAGE_NAMES: tuple[str, ...] = ("longitudinal", "lateral", "rolling_resistance")

CHANNELS: dict[str, int] = {
    "u": STATE_INDEX["u"], "v": STATE_INDEX["v"], "yaw_rate": STATE_INDEX["wz"], "roll": STATE_INDEX["phi"],
    "roll_rate": STATE_INDEX["wx"], "w_lf": STATE_INDEX["w_lf"], "w_lr": STATE_INDEX["w_lr"],
    "w_rf": STATE_INDEX["w_rf"], "w_rr": STATE_INDEX["w_rr"],
}
"""Measured channel -> 8-DOF state index. Units: u, v m/s; yaw_rate, roll_rate, w_* rad/s; roll rad."""

CSV_COLUMNS: tuple[str, ...] = ("time", "throttle", "brake", "steering", "u", "v", "yaw_rate", "roll",
                                "roll_rate", "w_lf", "w_rf", "w_lr", "w_rr")
"""Columns of the calibration CSV; the first row is the initial state."""

MIN_SAMPLES = 50
MIN_DURATION_S = 0.5


# --------------------------------------------------------------------------------------------------- segments
@dataclass(frozen=True)
class Segment:
    """One maneuver: inputs and measured channels on a uniform time grid, and the initial 8-DOF state.

    ``time`` s; ``throttle``, ``brake`` 0..1 (normalised pedals); ``steering`` in the units of the controls'
    steering axis (normalised -1..1, steering-wheel rad or road-wheel rad: the vehicle description's steering
    map, :meth:`~vehcal_ros.vehicle.description.VehicleDescription.road_wheel_angle`, gives the road-wheel angle);
    ``measured`` channel -> samples in SI units (see :data:`CHANNELS`); ``initial_state`` (12,) in
    ``STATE_NAMES`` order (x, y, psi are irrelevant to the calibrated channels and default to 0).
    """

    time: np.ndarray = field(repr=False)
    throttle: np.ndarray = field(repr=False)
    brake: np.ndarray = field(repr=False)
    steering: np.ndarray = field(repr=False)
    measured: Mapping[str, np.ndarray] = field(repr=False)
    initial_state: np.ndarray = field(repr=False)
    source: str = "arrays"
    wheel_torque: np.ndarray | None = field(default=None, repr=False)
    """measured per-wheel net torque (drive + brake, N m), ``(n, 4)`` in WHEELS order FL, FR, RL, RR, or None
    (the vehicle description's powertrain and brake maps drive the model)."""

    @property
    def duration(self) -> float:
        """s"""
        return float(self.time[-1] - self.time[0]) if self.time.size else 0.0

    @property
    def sample_period(self) -> float:
        """Median sample spacing (s)."""
        return float(np.median(np.diff(self.time))) if self.time.size > 1 else float("nan")

    @classmethod
    def from_arrays(cls, time: Sequence[float], throttle: Sequence[float], brake: Sequence[float],
                    steering: Sequence[float], measured: Mapping[str, Sequence[float]],
                    initial_state: Mapping[str, float] | np.ndarray | None = None, source: str = "arrays",
                    wheel_torque: Sequence[Sequence[float]] | np.ndarray | None = None) -> Segment:
        """Build a segment; without ``initial_state`` it is read from the first sample of ``measured``;
        ``wheel_torque`` (n, 4) N m, FL, FR, RL, RR: measured per-wheel net torque (optional)."""
        t = np.asarray(time, dtype=float).ravel()
        arrays = {}
        for name, vals in (("throttle", throttle), ("brake", brake), ("steering", steering)):
            arr = np.asarray(vals, dtype=float).ravel()
            if arr.shape != t.shape:
                raise InputError(f"{source}: input '{name}' has {arr.size} samples, time has {t.size}")
            arrays[name] = arr
        meas = {}
        for name, vals in measured.items():
            if name not in CHANNELS:
                raise InputError(f"{source}: unknown channel '{name}'; known: {', '.join(CHANNELS)}")
            arr = np.asarray(vals, dtype=float).ravel()
            if arr.shape != t.shape:
                raise InputError(f"{source}: channel '{name}' has {arr.size} samples, time has {t.size}")
            meas[name] = arr
        if initial_state is None:
            x0 = _initial_state_from(meas, source)
        elif isinstance(initial_state, Mapping):
            x0 = np.zeros(len(STATE_NAMES))
            for k, v in initial_state.items():
                x0[STATE_INDEX[k]] = float(v)
        else:
            x0 = np.asarray(initial_state, dtype=float).copy()
        tq = None
        if wheel_torque is not None:
            tq = np.asarray(wheel_torque, dtype=float)
            if tq.shape != (t.size, 4):
                raise InputError(f"{source}: wheel_torque must be ({t.size}, 4) (FL, FR, RL, RR), got {tq.shape}")
        return cls(t, arrays["throttle"], arrays["brake"], arrays["steering"], meas, x0, source, tq)

    @classmethod
    def from_csv(cls, path: str | os.PathLike) -> Segment:
        """Read a calibration CSV (header :data:`CSV_COLUMNS`, any order; extra columns ignored).

        Raises :class:`InputError` for a missing file, missing columns or unparsable numbers.
        """
        path = os.fspath(path)
        if not os.path.exists(path):
            raise InputError(f"no such file: {path}")
        if os.path.isdir(path):
            raise InputError(f"{path} is a directory, expected a CSV file")
        try:
            with open(path, newline="", encoding="utf-8") as f:
                reader = csv.reader(f)
                try:
                    header = [h.strip() for h in next(reader)]
                except StopIteration:
                    raise InputError(f"{path}: empty file") from None
                rows = [r for r in reader if r and any(c.strip() for c in r)]
        except UnicodeDecodeError as exc:
            raise InputError(f"{path}: not a UTF-8 text CSV (byte 0x{exc.object[exc.start]:02x} at offset "
                             f"{exc.start})") from None
        missing = [c for c in CSV_COLUMNS if c not in header]
        if missing:
            raise InputError(f"{path}: missing columns {', '.join(missing)} (need {', '.join(CSV_COLUMNS)})")
        col = {name: header.index(name) for name in CSV_COLUMNS}
        data = np.empty((len(rows), len(CSV_COLUMNS)))
        for i, row in enumerate(rows):
            for j, name in enumerate(CSV_COLUMNS):
                try:
                    cell = row[col[name]].strip()
                    data[i, j] = float(cell) if cell else float("nan")
                except (IndexError, ValueError):
                    raise InputError(f"{path}: row {i + 2}, column '{name}': not a number") from None
        c = {name: data[:, j] for j, name in enumerate(CSV_COLUMNS)}
        if data.shape[0] == 0:
            raise InputError(f"{path}: no data rows")
        measured = {k: c[k] for k in CSV_COLUMNS[4:]}
        return cls.from_arrays(c["time"], c["throttle"], c["brake"], c["steering"], measured, source=path)

    @classmethod
    def from_chrono(cls, csv_path: str | os.PathLike, driver_path: str | os.PathLike, start_row: int,
                    end_row: int) -> Segment:
        """A window of the paper's Chrono HMMWV data (shared data/chrono_hmmwv/README.md).

        ``start_row``..``end_row`` (inclusive, data rows counted from 0) of the 100 Hz CSV; inputs from the driver
        file (time, steering, throttle, brake; linear between rows). x, y are made relative to the start row.
        """
        with open(csv_path, encoding="utf-8") as f:
            header = [h.strip() for h in f.readline().split(",")]
        raw = np.genfromtxt(csv_path, delimiter=",", skip_header=1)
        col = {name: raw[:, i] for i, name in enumerate(header) if name}
        drv = np.loadtxt(driver_path)
        sl = slice(start_row, end_row + 1)
        t = col["time"][sl]
        measured = {"u": col["vx"][sl], "v": col["vy"][sl], "yaw_rate": col["yaw_rate"][sl],
                    "roll": col["roll"][sl], "roll_rate": col["roll_rate"][sl], "w_lf": col["wlf"][sl],
                    "w_lr": col["wlr"][sl], "w_rf": col["wrf"][sl], "w_rr": col["wrr"][sl]}
        x0 = _initial_state_from(measured, os.fspath(csv_path))
        x0[STATE_INDEX["psi"]] = col["yaw"][start_row]
        return cls.from_arrays(t, np.interp(t, drv[:, 0], drv[:, 2]), np.interp(t, drv[:, 0], drv[:, 3]),
                               np.interp(t, drv[:, 0], drv[:, 1]), measured, x0, source=os.fspath(csv_path))

    def window(self, t_start: float, t_end: float) -> Segment:
        """Sub-segment with samples in [t_start, t_end]; its first sample becomes the initial state."""
        sel = (self.time >= t_start - 1e-9) & (self.time <= t_end + 1e-9)
        meas = {k: v[sel] for k, v in self.measured.items()}
        x0 = _initial_state_from(meas, self.source) if sel.any() else self.initial_state
        return Segment(self.time[sel], self.throttle[sel], self.brake[sel], self.steering[sel], meas, x0,
                       self.source, None if self.wheel_torque is None else self.wheel_torque[sel])

    def with_noise(self, sigmas: Mapping[str, float], seed: int = 0) -> Segment:
        """A copy with white Gaussian noise of std ``sigmas[channel]`` added (paper Section 3.1); the initial
        state stays the noise-free one, as in the paper."""
        rng = np.random.default_rng(seed)
        meas = {k: (v + rng.normal(0.0, float(sigmas[k]), v.shape) if k in sigmas else v.copy())
                for k, v in self.measured.items()}
        return replace(self, measured=meas)


def _initial_state_from(measured: Mapping[str, np.ndarray], source: str) -> np.ndarray:
    need = ("u", "v", "yaw_rate", "roll", "roll_rate", "w_lf", "w_lr", "w_rf", "w_rr")
    missing = [k for k in need if k not in measured]
    if missing:
        raise InputError(f"{source}: the initial state needs channels {', '.join(missing)}")
    x0 = np.zeros(len(STATE_NAMES))
    for k in need:
        if measured[k].size == 0:
            raise InputError(f"{source}: no samples")
        x0[CHANNELS[k]] = float(measured[k][0])
    return x0


# --------------------------------------------------------------------------------------------------- stages
@dataclass(frozen=True)
class StageSpec:
    """One calibration stage: priors of the calibrated parameters, noise scales, data channels, step."""

    name: str
    priors: tuple[tuple[str, Distribution], ...]
    noise_scales: tuple[tuple[str, float], ...]
    held_fixed: Mapping[str, float]
    dt: float

    @property
    def channels(self) -> tuple[str, ...]:
        return tuple(c for c, _ in self.noise_scales)

    @property
    def parameter_names(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.priors)


@functools.cache
def _load_stage_config() -> dict:
    """The package's vehicle_8dof.yaml, parsed once per process (read-only: callers never change it)."""
    text = resources.files("vehcal_ros").joinpath("data/vehicle_8dof.yaml").read_text()
    return yaml.safe_load(text)


def paper_prior_ranges() -> dict[str, tuple[float, float]]:
    """The paper's uniform prior ranges (Eq. 14, vehicle_8dof.yaml) of every calibrated parameter, in stage
    order: Cxf, Cxr (N), Cyf, Cyr (N/rad), kphi_f, kphi_r (N m/rad), bphi (total, N m s/rad), rr (m)."""
    stages = _load_stage_config()["stages"]
    return {k: (float(lo), float(hi)) for s in STAGE_NAMES for k, (lo, hi) in stages[s]["priors"].items()}


def check_prior_ranges(priors: Mapping[str, Sequence[float]] | None, label: str = "prior.{}"
                       ) -> dict[str, tuple[float, float]]:
    """Validated uniform prior ranges ``{name: (lower, upper)}`` (names: the description's calibrated
    parameters, :data:`~vehcal_ros.vehicle.description.CALIBRATED`).

    Each value must be two finite numbers with lower < upper; an :class:`InputError` names the offending
    parameter as ``label.format(name.lower())`` (the model_calibrator's ``prior.<name>`` parameters).
    """
    known = CALIBRATED
    by_lower = {k.lower(): k for k in known}
    out: dict[str, tuple[float, float]] = {}
    for name, value in (priors or {}).items():
        key = by_lower.get(str(name).lower())
        if key is None:
            raise InputError(f"{label.format(str(name).lower())}: unknown calibrated parameter; known: "
                             f"{', '.join(k.lower() for k in known)}")
        where = label.format(key.lower())
        try:
            pair = [float(v) for v in value]
        except (TypeError, ValueError):
            raise InputError(f"{where} = {value!r}: expected [lower, upper], two finite numbers") from None
        if len(pair) != 2 or not all(math.isfinite(v) for v in pair):
            raise InputError(f"{where} = {list(value)!r}: expected [lower, upper], two finite numbers")
        if not pair[0] < pair[1]:
            raise InputError(f"{where} = {pair!r}: the lower bound must be below the upper bound")
        out[key] = (pair[0], pair[1])
    return out


def _identified(pname: str, stage: str, desc) -> bool:
    """Whether ``stage`` identifies ``pname`` on this vehicle. A straight throttle ramp loads only the DRIVEN
    wheels: an undriven axle's tires carry just their own spin-up force (Jw dw/dt / r, ~30 N on the sedan's
    rear), so its slip stiffness is set by model-form errors of 0.1 % in the wheel speed (e.g. the rolling
    radius's load sensitivity), not by the tire; the longitudinal stage of a front- (rear-) drive vehicle then
    calibrates Cxf (Cxr) only and holds the other at the description's nominal value."""
    if stage != "longitudinal":
        return True
    axle = {"Cxf": "front", "Cxr": "rear"}.get(pname)
    return axle is None or axle in desc.driven_axles


def stage_spec(name: str, *, separate_bphi: bool = False,
               priors: Mapping[str, Sequence[float]] | None = None, vehicle=None) -> StageSpec:
    """The stage's configuration from vehicle_8dof.yaml (paper Sections 3.3-3.5, Eq. 14).

    ``vehicle``: a vehicle description (name, file or :class:`~vehcal_ros.vehicle.description.
    VehicleDescription`) whose prior ranges and per-stage held-fixed values replace the paper's HMMWV ones
    (None: the paper's; the shipped ``hmmwv`` description carries the same numbers); the longitudinal stage of
    a vehicle with an undriven axle does not calibrate that axle's Cx (:func:`_identified`). It also calibrates
    the driveline spin inertia ``Jd`` of each driven wheel (range: the description's ``priors.Jd``), unless the
    description's ``driveline.inertia_in_wheels`` says its wheel inertias are complete: the torque that spins
    the driven wheels up is measured or mapped before the shafts, differential and gearbox that turn with them,
    and a wrong inertia there reads as a wrong slip stiffness. One value serves every driven wheel: with both
    axles driven, each axle's inertia trades against its own slip stiffness and only their sum is pinned by the
    vehicle's acceleration.

    ``priors``: uniform prior ranges ``{name: (lower, upper)}`` replacing the paper's for the parameters of
    this stage (others are ignored; see :func:`check_prior_ranges`). With ``separate_bphi`` a ``bphi`` range
    applies to bphi_f and bphi_r each (the paper's U(100, 30000) by default).
    """
    if name not in STAGE_NAMES:
        raise InputError(f"unknown stage '{name}'; choose one of {', '.join(STAGE_NAMES)}")
    override = check_prior_ranges(priors)
    doc = _load_stage_config()
    cfg = doc["stages"][name]
    steps = doc.get("time_step", {})
    priors_out: list[tuple[str, Distribution]] = []
    desc = None
    if vehicle is not None:
        desc = load_description(vehicle)
    for pname, (lo, hi) in cfg["priors"].items():
        if desc is not None and not _identified(pname, name, desc):
            continue   # held at the description's nominal value
        if desc is not None:
            lo, hi = desc.priors[pname]
        lo, hi = override.get(pname, (float(lo), float(hi)))
        if pname == "bphi" and separate_bphi:
            lo, hi = override.get(pname, (100.0, 30000.0) if desc is None else (0.5 * lo, 0.5 * hi))
            priors_out += [("bphi_f", Uniform(lo, hi)), ("bphi_r", Uniform(lo, hi))]
        else:
            priors_out.append((pname, Uniform(float(lo), float(hi))))
    if desc is not None and name == "longitudinal" and not desc.inertia_in_wheels:
        lo, hi = override.get("Jd", desc.priors["Jd"])
        check_driveline_inertia_range(desc, lo, hi, "prior.jd")
        priors_out.append(("Jd", Uniform(float(lo), float(hi))))
    noise = tuple((ch, float(s)) for ch, s in cfg["noise_priors_halfnormal_scale"].items())
    fixed: dict[str, float] = {}
    for k, v in (cfg.get("held_fixed") or {}).items():
        if k in ("kphi", "bphi"):
            fixed[f"{k}_f"] = float(v)
            fixed[f"{k}_r"] = float(v)
        else:
            fixed[k] = float(v)
    if desc is not None:
        fixed = {k: float(v) for k, v in desc.held_fixed.get(name, {}).items()}
    dt = float(steps.get("longitudinal_and_test", 0.005)) if name == "longitudinal" else float(
        steps.get("lateral_and_rolling_resistance", 0.01))
    return StageSpec(name, tuple(priors_out), noise, fixed, dt)


# --------------------------------------------------------------------------------------------------- checks
def check_segment(segment: Segment, stage: StageSpec, r0: float | None = None, vehicle=None,
                  thresholds: StageThresholds | None = None) -> None:
    """Plausibility of a segment for a stage: raises :class:`InputError` (units, NaN, gaps, too short, missing
    channels, a steering input the description's steering map turns into an impossible road-wheel angle) or
    :class:`EstimationError` (the maneuver does not excite the stage's parameters; the message names each failing
    quantity with its value and threshold in physical units, :mod:`~vehcal_ros.estimation.calibration.qualification`).

    ``vehicle``: vehicle description (name, file or description; None: the default vehicle) whose steering map
    converts the steering input to the road-wheel angle; ``r0``: the tire radius (m) of the wheel-speed unit check
    w r0 / u ~ 1 (None: the description's unloaded radius); ``thresholds``: the stage thresholds (None: their
    declared defaults; the calibrator passes its configured ones)."""
    desc = vehicle if isinstance(vehicle, VehicleDescription) else load_description(vehicle)
    r0 = desc.r0 if r0 is None else r0
    src = segment.source
    t = segment.time
    missing = [c for c in stage.channels if c not in segment.measured]
    if missing:
        raise InputError(f"{src}: stage {stage.name} needs channels {', '.join(missing)}")
    cols = {"time": t, "throttle": segment.throttle, "brake": segment.brake, "steering": segment.steering}
    cols.update(segment.measured)
    for name, arr in cols.items():
        bad = ~np.isfinite(arr)
        if bad.any():
            i = int(np.argmax(bad))
            raise InputError(f"{src}: {int(bad.sum())} non-finite value(s) in '{name}' (first at sample {i}); "
                             "drop or fill those rows")
    if t.size < MIN_SAMPLES or segment.duration < MIN_DURATION_S:
        raise InputError(f"{src}: segment too short ({t.size} samples, {segment.duration:.2f} s); need at least "
                         f"{MIN_SAMPLES} samples and {MIN_DURATION_S} s")
    dts = np.diff(t)
    if np.any(dts <= 0):
        i = int(np.argmax(dts <= 0))
        raise InputError(f"{src}: time is not strictly increasing at sample {i + 1} (t = {t[i + 1]:.4f} s)")
    med = float(np.median(dts))
    gap = dts > 1.5 * med
    if gap.any() or np.any(dts < 0.5 * med):
        i = int(np.argmax(gap)) if gap.any() else int(np.argmax(dts < 0.5 * med))
        raise InputError(f"{src}: non-uniform sampling: step of {dts[i]:.4f} s at t = {t[i]:.3f} s "
                         f"(median {med:.4f} s); the segment must be gap-free and uniformly sampled")
    for name, lo, hi in (("throttle", 0.0, 1.0), ("brake", 0.0, 1.0)):
        arr = cols[name]
        if arr.min() < lo - 0.01 or arr.max() > hi + 0.01:
            raise InputError(f"{src}: '{name}' outside [{lo:g}, {hi:g}] (range {arr.min():.3g}..{arr.max():.3g}); "
                             "pedals must be normalised 0..1")
    delta = desc.road_wheel_angle(segment.steering)
    peak = float(np.abs(delta).max())
    if peak > MAX_ROAD_WHEEL_ANGLE:
        raise InputError(f"{src}: the steering input reaches {float(np.abs(segment.steering).max()):.3g}, a "
                         f"road-wheel angle of {fmt_angle(peak)} through the description's steering map "
                         f"(steering.ratio {desc.steer_gain:g} rad per unit input), above any steering lock "
                         f"({fmt_angle(MAX_ROAD_WHEEL_ANGLE)}); check steering.source / steering.ratio of "
                         f"{desc.name}")
    meas = segment.measured
    if "u" in meas:
        moving = meas["u"] > 2.0
        wheels = [w for w in ("w_lf", "w_lr", "w_rf", "w_rr") if w in meas]
        if moving.sum() >= 5 and wheels:
            ratio = float(np.median(np.concatenate([meas[w][moving] for w in wheels])
                                    * r0 / np.repeat(meas["u"][moving][None, :], len(wheels), 0).ravel()))
            if not 0.6 < ratio < 1.6:
                hint = " (they look like rpm: convert with * pi/30)" if 6.0 < ratio < 14.0 else ""
                raise InputError(f"{src}: wheel speeds inconsistent with u: median w*r0/u = {ratio:.2f}, expected "
                                 f"~1; wheel speeds must be in rad/s{hint}")
    for name, lim, unit in (("roll", 0.5, "rad"), ("roll_rate", 3.0, "rad/s"), ("yaw_rate", 3.0, "rad/s")):
        if name in meas and np.abs(meas[name]).max() > lim:
            raise InputError(f"{src}: |{name}| reaches {np.abs(meas[name]).max():.3g}, implausible in {unit} "
                             "(degrees?)")
    if "u" not in meas:   # a lateral segment without its speed channel: the initial speed stands for it
        meas = {**meas, "u": np.full(t.size, float(segment.initial_state[STATE_INDEX["u"]]))}
    failures = excitation_failures(stage.name, t, segment.throttle, segment.brake, delta, meas,
                                   thresholds if thresholds is not None else StageThresholds(),
                                   torque_measured=(desc.wheel_torque_measured
                                                    and segment.wheel_torque is not None),
                                   radius=desc.static_rolling_radius(), gravity=desc.g)
    if failures:
        raise EstimationError(f"{src}: {STAGE_NEED[stage.name]}: " + "; ".join(failures))


# --------------------------------------------------------------------------------------------------- results
@dataclass(frozen=True)
class CalibrationResult:
    """Posterior of one calibration stage (JSON-ready via :meth:`to_dict`).

    ``parameters``/``noise``: name/channel -> {mean, std, hdi_low, hdi_high (94 %), mcse_mean, r_hat,
    ess_bulk, ess_tail}, in the parameter's units (N, N/rad, N m/rad, N m s/rad, -) and the channel's units.
    """

    stage: str
    parameters: dict[str, dict[str, float]]
    noise: dict[str, dict[str, float]]
    converged: bool
    """every split R-hat <= 1.01, bulk and tail ESS >= 400 (diagnostics.converged)."""
    elapsed_s: float
    """wall time of the stage including the predictive check (s)."""
    log_evidence: float
    """log marginal likelihood (nats), mean over runs."""
    n_stages: int
    """SMC tempering stages (longest run)."""
    names: tuple[str, ...]
    draws: np.ndarray = field(repr=False)
    """``(chain, draw, param)`` in ``names`` order (parameters, then ``sigma_<channel>``, then the noise model's
    ``delta_<channel>``/``rho_<channel>`` and any sampled ``x0_<channel>``: :class:`StageProblem`)."""
    fixed: dict[str, float] = field(default_factory=dict)
    """values of the 8-DOF parameters not calibrated in this stage."""
    rmse_prior: dict[str, float] = field(default_factory=dict)
    """mean RMSE of 100 prior-draw responses vs the data, per channel (paper Tables 3, 5, 7)."""
    rmse_posterior: dict[str, float] = field(default_factory=dict)
    """mean RMSE of 100 posterior-draw responses vs the data, per channel."""
    rmse_posterior_mean: dict[str, float] = field(default_factory=dict)
    """RMSE of the response at the posterior mean, per channel."""
    sampling_s: float = 0.0
    """SMC wall time (s)."""
    smc: dict = field(default_factory=dict, repr=False)
    """SMC bookkeeping (temperatures, acceptance, mutation steps, evaluations)."""
    separate_bphi: bool = False
    priors: dict[str, tuple[float, float]] = field(default_factory=dict)
    """the uniform prior range (lower, upper) of each calibrated parameter (empty: the paper's)."""
    discrepancy: dict[str, dict[str, float]] = field(default_factory=dict)
    """channel -> summary of the model discrepancy's marginal sd delta (channel units; ``noise_model=
    "discrepancy"`` only; ``noise`` is then the white sensor noise and ``residual_correlation`` the
    discrepancy's rho)."""
    initial_state: dict[str, dict[str, float]] = field(default_factory=dict)
    """channel -> summary of the sampled initial value (channel units; empty unless ``initial_state="sampled"``)."""
    residual_correlation: dict[str, dict[str, float]] = field(default_factory=dict)
    """channel -> summary of the residuals' lag-one AR(1) coefficient rho (-, at the segment's sample period;
    empty with the white noise model); rho near 1 means the residuals are model-form error, not sensor noise."""
    noise_model: str = DEFAULT_NOISE_MODEL
    """the likelihood's residual model: ``"ar1"`` (Eq. A1), ``"discrepancy"`` (Eq. A3) or ``"white"``
    (independent, the paper's)."""
    correlation: dict[str, dict[str, float]] = field(default_factory=dict)
    """parameter -> parameter -> posterior correlation of the calibrated parameters, kept for a result without
    draws (read back from a state file: the lateral stage's roll stiffnesses are strongly anti-correlated); empty:
    the draws give it, or (no draws) the parameters are taken as independent."""

    maneuver_spread: dict[str, dict[str, float]] = field(default_factory=dict)
    """parameter -> the spread between the parts of the fitted window (estimation/calibration/maneuver_spread.py:
    ``tau``, Cochran's ``q``, ``parts``, ``widened``); where ``widened``, ``parameters`` and ``draws`` include it.
    Empty: not estimated."""

    def posterior_means(self) -> dict[str, float]:
        """Means of the calibrated 8-DOF parameters, with merged ``bphi`` split into ``bphi_f = bphi_r``."""
        out = {k: v["mean"] for k, v in self.parameters.items()}
        if "bphi" in out:
            b = out.pop("bphi")
            out["bphi_f"] = out["bphi_r"] = 0.5 * b
        return out

    def model_parameters(self) -> dict[str, float]:
        """The full 8-DOF parameter set this stage implies: fixed values overridden by posterior means."""
        return {**DEFAULT_PARAMETERS, **self.fixed, **self.posterior_means()}

    def to_dict(self, include_draws: bool = False) -> dict:
        out = {
            "stage": self.stage, "converged": self.converged, "elapsed_s": self.elapsed_s,
            "sampling_s": self.sampling_s, "log_evidence": self.log_evidence, "n_stages": self.n_stages,
            "parameters": self.parameters, "noise": self.noise, "fixed": self.fixed,
            "noise_model": self.noise_model, "residual_correlation": self.residual_correlation,
            "initial_state": self.initial_state, "discrepancy": self.discrepancy,
            "separate_bphi": self.separate_bphi, "priors": {k: list(v) for k, v in self.priors.items()},
            "rmse_prior": self.rmse_prior, "rmse_posterior": self.rmse_posterior,
            "rmse_posterior_mean": self.rmse_posterior_mean,
            "draws_shape": list(self.draws.shape), "smc": self.smc, "maneuver_spread": self.maneuver_spread,
        }
        if include_draws:
            out["names"] = list(self.names)
            out["draws"] = self.draws.tolist()
        return jsonable(out)


# --------------------------------------------------------------------------------------------------- problem
class _RollSplit:
    """Sampling (kphi_f, kphi_r) as total roll stiffness and front fraction (the sedan's lateral stage).

    The roll angle fixes the total ``kphi_total = kphi_f + kphi_r`` (steady state ``phi = m_s h a_y / (kphi -
    m_s g h)``) to a few per cent, while the split ``lambda_f = kphi_f / kphi_total`` is seen only through the
    lateral load transfer (tire load sensitivity, bump steer): the (kphi_f, kphi_r) posterior is a thin ridge
    ``kphi_f + kphi_r = const`` that bends in the logit space of the two uniform priors (kphi_f near its lower
    bound), which the SMC's independent Gaussian proposal covers badly (split R-hat 1.01-1.013, tail ESS ~100 on
    the published sedan). In (kphi_total, lambda_f) the ridge is axis-aligned.

    The prior stays the stage's uniform prior on the box ``[lo_f, hi_f] x [lo_r, hi_r]``: SMC samples
    ``kphi_total ~ U(lo_f + lo_r, hi_f + hi_r)``, ``lambda_f ~ U(lo_f / (lo_f + hi_r), hi_f / (hi_f + lo_r))``
    (which contain the box's image) and the likelihood carries the density ratio (Jacobian
    ``|d(kphi_f, kphi_r) / d(kphi_total, lambda_f)| = kphi_total``, zero outside the box), so the posterior at
    phi = 1 and the evidence are exactly those of the box prior; the draws are reported as kphi_f, kphi_r."""

    def __init__(self, j_f: int, j_r: int, box_f: tuple[float, float], box_r: tuple[float, float]) -> None:
        self.j_f, self.j_r = j_f, j_r
        self.box_f, self.box_r = box_f, box_r
        (lf, hf), (lr, hr) = box_f, box_r
        self.total = (lf + lr, hf + hr)
        self.fraction = (lf / (lf + hr), hf / (hf + lr))
        # log [p_box(T, lambda) / p_sampling(T, lambda)] = log T + log(range_T range_lambda) - log(area of the box)
        self._log_const = (math.log((self.total[1] - self.total[0]) * (self.fraction[1] - self.fraction[0]))
                           - math.log((hf - lf) * (hr - lr)))

    @classmethod
    def of(cls, spec: StageSpec) -> _RollSplit | None:
        names = spec.parameter_names
        if "kphi_f" not in names or "kphi_r" not in names:
            return None
        d = dict(spec.priors)
        f, r = d["kphi_f"], d["kphi_r"]
        if not (isinstance(f, Uniform) and isinstance(r, Uniform)) or f.low <= 0.0 or r.low <= 0.0:
            return None
        return cls(names.index("kphi_f"), names.index("kphi_r"), (f.low, f.high), (r.low, r.high))

    def sampling_prior(self, prior: Prior) -> Prior:
        names, dists = list(prior.names), list(prior.dists)
        names[self.j_f], dists[self.j_f] = "kphi_total", Uniform(*self.total)
        names[self.j_r], dists[self.j_r] = "kphi_front_fraction", Uniform(*self.fraction)
        return Prior(tuple(names), tuple(dists))

    def to_reported(self, theta: np.ndarray) -> np.ndarray:
        """(kphi_total, lambda_f) columns -> (kphi_f, kphi_r), any leading shape."""
        out = np.array(theta, dtype=float, copy=True)
        total, frac = theta[..., self.j_f], theta[..., self.j_r]
        out[..., self.j_f] = frac * total
        out[..., self.j_r] = (1.0 - frac) * total
        return out

    def log_prior_ratio(self, theta: np.ndarray) -> np.ndarray:
        total = theta[:, self.j_f]
        rep = self.to_reported(theta)
        f, r = rep[:, self.j_f], rep[:, self.j_r]
        inside = ((f >= self.box_f[0]) & (f <= self.box_f[1]) & (r >= self.box_r[0]) & (r <= self.box_r[1])
                  & (total > 0.0))
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(inside, np.log(np.where(inside, total, 1.0)) + self._log_const, -np.inf)


DISCREPANCY_RHO_PRIOR: tuple[float, float] = (0.5, 0.999)
"""Uniform prior of the discrepancy's lag-one coefficient (-): a discrepancy is smooth (correlated over more than
1.4 samples); below 0.5 it would be white noise, which ``sigma`` already is (and the two would not separate)."""
RHO_PRIOR: tuple[float, float] = (-0.5, 0.999)
"""Uniform prior of each channel's residual AR(1) coefficient rho (-). 0.999 at 100 Hz is a 10 s correlation
time, longer than any stage's segment (a constant offset); below -0.5 a 100 Hz sensor's lag-one correlation is
implausible. Zero (white sensor noise) is inside, away from the bounds."""


INITIAL_FIT_S = 1.0
"""s: span of the local quadratic fit whose standard error is the prior sd of a sampled initial state."""


def initial_state_uncertainty(segment: Segment, channels: Sequence[str], span_s: float = INITIAL_FIT_S
                              ) -> dict[str, float]:
    """Standard error (channel units) of each channel's value at the segment's first sample from an ordinary
    least-squares quadratic fit over the first ``span_s`` seconds (at most a third of the segment):
    ``se = sqrt(s^2 [(X'X)^-1]_00)``, ``X = [1, t, t^2]``, ``s^2`` the fit's residual variance."""
    t = segment.time - segment.time[0]
    n = int(max(8, min(np.searchsorted(t, span_s + 1e-9), t.size // 3)))
    x = np.column_stack([np.ones(n), t[:n], t[:n] ** 2])
    inv00 = float(np.linalg.inv(x.T @ x)[0, 0])
    out = {}
    for c in channels:
        y = segment.measured[c][:n]
        coef, *_ = np.linalg.lstsq(x, y, rcond=None)
        s2 = float(np.sum((y - x @ coef) ** 2)) / (n - 3)
        out[c] = max(math.sqrt(s2 * inv00), 1e-9)
    return out


class StageProblem:
    """The likelihood of one stage on one segment: maps sampled vectors to 8-DOF parameters and runs the
    batch model (:class:`~vehcal_ros.models.vehicle_8dof.Simulator8Dof`) for all particles at once.

    Sampled vector: the stage's model parameters, then ``sigma_<channel>`` (marginal residual sd, channel
    units), then with ``noise_model="ar1"`` ``rho_<channel>`` (lag-one AR(1) coefficient, :data:`RHO_PRIOR`;
    with ``"discrepancy"`` ``sigma`` is the white sensor noise, followed by ``delta_<channel>`` (discrepancy sd)
    and ``rho_<channel>`` (:data:`DISCREPANCY_RHO_PRIOR`)), then with ``initial_state_sd`` ``x0_<channel>`` (the
    channel's state at the first sample, normal prior around the segment's initial state with that sd)."""

    def __init__(self, segment: Segment, spec: StageSpec, base: Mapping[str, float],
                 constants: VehicleConstants | None = None, roll_split: bool = False,
                 noise_model: str = DEFAULT_NOISE_MODEL, initial_state_sd: Mapping[str, float] | None = None) -> None:
        noise_model = stage_noise_model(noise_model, spec.name)
        self.noise_model = noise_model
        self.segment = segment
        self.spec = spec
        period = segment.sample_period
        n_sub = max(1, int(round(period / spec.dt)))
        self.sim = Simulator8Dof(segment.initial_state, segment.time, segment.throttle, segment.brake,
                                 segment.steering, dt=period / n_sub, output_dt=period,
                                 n_out=segment.time.size, constants=constants,
                                 wheel_torque=segment.wheel_torque)
        self.base = parameter_vector(dict(base), self.sim.defaults)
        self.chan = np.array([CHANNELS[c] for c in spec.channels], dtype=np.int64)
        self.data = np.ascontiguousarray(np.column_stack([segment.measured[c] for c in spec.channels]))
        self.n_model = len(spec.priors)
        self.n_channels = len(spec.noise_scales)
        rho = [(f"rho_{c}", Uniform(*RHO_PRIOR)) for c, _ in spec.noise_scales] if noise_model == "ar1" else []
        if noise_model == "discrepancy":
            rho = [(f"delta_{c}", HalfNormal(s)) for c, s in spec.noise_scales] + [
                (f"rho_{c}", Uniform(*DISCREPANCY_RHO_PRIOR)) for c, _ in spec.noise_scales]
        x0_sd = dict(initial_state_sd or {})
        self.x0_channels = tuple(c for c in spec.channels if c in x0_sd)
        self.x0_index = np.array([CHANNELS[c] for c in self.x0_channels], dtype=np.int64)
        x0 = [(f"x0_{c}", Normal(float(segment.initial_state[CHANNELS[c]]), float(x0_sd[c])))
              for c in self.x0_channels]
        self.prior = Prior.from_pairs(list(spec.priors) + [(f"sigma_{c}", HalfNormal(s))
                                                           for c, s in spec.noise_scales] + rho + x0)
        self.n_obs = segment.time.size
        gears = self.sim.feasible_gears()
        if len(gears) > 1:
            self.sim.initial_gear = self._best_gear(gears)
        self.steps_done = 0
        """8-DOF integration steps simulated by :meth:`log_likelihood` so far (its work)."""
        self._roll = _RollSplit.of(spec) if roll_split else None
        self.sampling_prior = self.prior if self._roll is None else self._roll.sampling_prior(self.prior)
        """The prior SMC samples: :attr:`prior` with (kphi_f, kphi_r) replaced by (kphi_total, kphi_front_fraction)
        when the roll-stiffness split is sampled as total and front fraction (:class:`_RollSplit`)."""

    def to_reported(self, theta: np.ndarray) -> np.ndarray:
        """Rows of the sampled vector (:attr:`sampling_prior`'s order) as rows of :attr:`prior`'s order."""
        return theta if self._roll is None else self._roll.to_reported(theta)

    def sampled_log_likelihood(self, theta: np.ndarray, floor: np.ndarray | None = None) -> np.ndarray:
        """:meth:`log_likelihood` of sampled rows (:attr:`sampling_prior`), plus the log ratio of the stage's
        prior to the sampling prior (:meth:`_RollSplit.log_prior_ratio`), so that the posterior (phi = 1) and the
        evidence are those of the stage's prior, uniform on the (kphi_f, kphi_r) box."""
        theta = np.atleast_2d(theta)
        if self._roll is None:
            return self.log_likelihood(theta, floor)
        rep = self._roll.to_reported(theta)
        corr = self._roll.log_prior_ratio(theta)
        out = np.full(theta.shape[0], -np.inf)
        inside = np.isfinite(corr)
        if inside.any():
            fl = None if floor is None else np.asarray(floor, dtype=float)[inside] - corr[inside]
            out[inside] = self.log_likelihood(rep[inside], fl) + corr[inside]
        return out

    def parameter_matrix(self, theta_model: np.ndarray) -> np.ndarray:
        """``(n, len(PARAM_NAMES))`` 8-DOF parameter rows for sampled model parameters ``(n, n_model)``."""
        theta_model = np.atleast_2d(theta_model)
        p = np.repeat(self.base[None, :], theta_model.shape[0], axis=0)
        for j, name in enumerate(self.spec.parameter_names):
            if name == "bphi":
                p[:, PARAM_INDEX["bphi_f"]] = 0.5 * theta_model[:, j]
                p[:, PARAM_INDEX["bphi_r"]] = 0.5 * theta_model[:, j]
            else:
                p[:, PARAM_INDEX[name]] = theta_model[:, j]
        return p

    def _best_gear(self, gears: list[int]) -> int:
        """The automatic's gear at the segment's start: of the gears inside their shift band at the initial
        speed (an automatic holds any of them: after a 4-3-... up-shift sequence a sedan cruises at 25 m/s in 4th,
        while the lowest gear below its up-shift speed is 3rd, whose engine braking doubles the coast-down
        deceleration), the one whose response with the held-fixed / nominal parameters fits the data best
        (SSE weighted by the noise scales). A production car reports its gear; this infers it."""
        scale = dict(self.spec.noise_scales)
        w = np.array([1.0 / scale[c] ** 2 for c in self.spec.channels])
        best, best_cost = gears[0], np.inf
        for g in gears:
            self.sim.initial_gear = g
            cost = float(self.sim.sse(self.base[None, :], self.chan, self.data)[0] @ w)
            if cost < best_cost:
                best, best_cost = g, cost
        return best

    def noise_parameters(self, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(sigma, rho)``, each ``(n, n_channels)``, of sampled rows (rho = 0 with the white noise model; with
        the discrepancy model the discrepancy's rho)."""
        theta = np.atleast_2d(theta)
        j = self.n_model + self.n_channels
        sigma = theta[:, self.n_model:j]
        if self.noise_model == "discrepancy":
            j += self.n_channels
        rho = theta[:, j:j + self.n_channels] if self.noise_model != "white" else np.zeros_like(sigma)
        return sigma, rho

    def _initial_states(self, theta: np.ndarray) -> np.ndarray | None:
        if not self.x0_channels:
            return None
        x0 = np.repeat(self.sim.x0[None, :], theta.shape[0], axis=0)
        x0[:, self.x0_index] = theta[:, theta.shape[1] - self.x0_index.size:]
        return x0

    def _discrepancy_log_likelihood(self, theta: np.ndarray, floor: np.ndarray | None) -> np.ndarray:
        """Eq. A3: per channel ``-1/2 [N log 2 pi + log det C + e' C^-1 e]``, ``C = sigma^2 I + delta^2
        rho^|i-j|``, by a scalar Kalman filter in the 8-DOF kernel (exact early rejection as Eq. A1)."""
        j = self.n_model + self.n_channels
        s2 = theta[:, self.n_model:j] ** 2
        t2 = theta[:, j:j + self.n_channels] ** 2
        rho = theta[:, j + self.n_channels:j + 2 * self.n_channels]
        ok = np.all((s2 > 0.0) & (np.abs(rho) < 1.0) & (t2 >= 0.0), axis=1)
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
            logdet = kf_log_det(np.where(ok[:, None], s2, 1.0), np.where(ok[:, None], t2, 0.0),
                                np.where(ok[:, None], rho, 0.0), self.n_obs)
            const = np.where(ok, -0.5 * np.sum(self.n_obs * math.log(2.0 * math.pi) + logdet, axis=1), -np.inf)
            budget = None if floor is None else 2.0 * (const - np.asarray(floor, dtype=float))
            quad, steps = self.sim.discrepancy_bounded(self.parameter_matrix(theta[:, : self.n_model]), self.chan,
                                                       self.data, s2, t2, rho, budget, self._initial_states(theta))
            ll = const - 0.5 * np.sum(quad, axis=1)
        self.steps_done += int(steps.sum())
        return np.where(np.isfinite(ll), ll, -np.inf)

    def log_likelihood(self, theta: np.ndarray, floor: np.ndarray | None = None) -> np.ndarray:
        """Log likelihood (Eq. A1; at rho = 0 the independent Gaussian) of each row of ``theta`` (model
        parameters, sigmas, then rhos with the AR(1) noise model), ``(n,)``.

        ``log L = c - Q_w / 2`` with ``c = -sum_c [N/2 log(2 pi sigma_c^2) + (N-1)/2 log(1 - rho_c^2)]`` and
        ``Q_w = sum_c Q_c / (sigma_c^2 (1 - rho_c^2))`` (Eq. A2), computed in the 8-DOF kernel while the model
        runs (:meth:`~vehcal_ros.models.vehicle_8dof.Simulator8Dof.sse_bounded`, no Python per sample).
        ``floor`` (optional, ``(n,)``): the caller only needs row ``i`` exactly if it exceeds ``floor[i]`` (an MH
        step rejects below it). ``Q_w`` grows step by step (every term of Eq. A2 is >= 0), so the simulation stops
        once ``Q_w > 2 (c - floor)``; such rows return ``-inf`` (exact early rejection; Solonen et al. 2012).
        Simulated steps add up in ``steps_done``. Rows with ``|rho| >= 1`` or ``sigma <= 0`` get ``-inf``.
        """
        theta = np.atleast_2d(theta)
        if self.noise_model == "discrepancy":
            return self._discrepancy_log_likelihood(theta, floor)
        sigma, rho = self.noise_parameters(theta)
        sig2 = sigma ** 2
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
            one_m = 1.0 - rho * rho
            const = -0.5 * self.n_obs * np.sum(np.log(2.0 * math.pi * sig2), axis=1) - 0.5 * (
                self.n_obs - 1) * np.sum(np.log(one_m), axis=1)
            const = np.where(np.all((one_m > 0.0) & (sig2 > 0.0), axis=1), const, -np.inf)
            w = 1.0 / (sig2 * one_m)
            budget = None if floor is None else 2.0 * (const - np.asarray(floor, dtype=float))
            x0 = self._initial_states(theta)
            sse, steps = self.sim.sse_bounded(self.parameter_matrix(theta[:, : self.n_model]), self.chan, self.data,
                                              np.where(np.isfinite(w), w, 0.0), budget,
                                              rho if self.noise_model == "ar1" else None, x0)
            ll = const - 0.5 * np.sum(sse * w, axis=1)
        self.steps_done += int(steps.sum())
        return np.where(np.isfinite(ll), ll, -np.inf)

    def responses(self, theta_model: np.ndarray) -> np.ndarray:
        """Model responses ``(n, n_out, n_channels)`` for sampled model parameters."""
        states = self.sim.run(self.parameter_matrix(theta_model))
        return states[:, :, self.chan]

    def rmse(self, theta_model: np.ndarray) -> np.ndarray:
        """RMSE ``(n, n_channels)`` of each response against the data."""
        r = self.responses(theta_model) - self.data[None, :, :]
        return np.sqrt(np.mean(r * r, axis=1))


def base_parameters(spec: StageSpec, previous: Mapping[str, float] | None,
                     defaults: Mapping[str, float] | None = None) -> dict[str, float]:
    """Every 8-DOF parameter a stage's model runs with besides the ones it samples: ``defaults`` (None: the
    paper's ``DEFAULT_PARAMETERS``), the stage's held-fixed values over them, and ``previous`` (earlier stages'
    results, model parameter names) over those. InputError on a name the 8-DOF model does not have."""
    base = {**(DEFAULT_PARAMETERS if defaults is None else defaults), **spec.held_fixed}
    if previous:
        unknown = set(previous) - set(PARAM_NAMES)
        if unknown:
            raise InputError(f"unknown 8-DOF parameters in previous results: {sorted(unknown)}")
        base.update({k: float(v) for k, v in previous.items()})
    return base


def stage_setup(segment: Segment, stage: str, *, separate_bphi: bool = False, priors: Mapping | None = None,
                vehicle=None, dt: float | None = None, constants: VehicleConstants | None = None
                ) -> tuple[StageSpec, VehicleConstants, Segment]:
    """The stage's specification (``dt`` overriding its step), the vehicle's 8-DOF constants and the segment as
    the model reads it: without its measured wheel torque unless the description's torque source is
    ``measured`` (the description decides, not the data). Shared by the fit, the recalibration check and the
    held-back acceptance check, so all three run the same model."""
    spec = stage_spec(stage, separate_bphi=separate_bphi, priors=priors, vehicle=vehicle)
    if dt is not None:
        spec = replace(spec, dt=float(dt))
    constants = constants or (default_vehicle_constants() if vehicle is None
                              else VehicleConstants.from_description(vehicle))
    if constants.torque_source != "measured" and segment.wheel_torque is not None:
        segment = replace(segment, wheel_torque=None)
    return spec, constants, segment


def calibrate_stage(segment: Segment, stage: str, *, previous: Mapping[str, float] | None = None,
                    n_chains: int = 8, n_draws: int = 1000, seed: int = 0, separate_bphi: bool = False,
                    kernel: str = "imh", predictive_draws: int = 100, check: bool = True,
                    constants: VehicleConstants | None = None, dt: float | None = None,
                    smc_options: Mapping | None = None, max_mutation_steps: int = 10,
                    noise_prior_factor: float = 1.0,
                    priors: Mapping[str, Sequence[float]] | None = None, vehicle=None,
                    roll_split: bool = True, noise_model: str = DEFAULT_NOISE_MODEL,
                    initial_state: str = "measured") -> CalibrationResult:
    """Calibrate one stage on ``segment`` (paper Sections 3.3-3.5).

    ``vehicle``: vehicle description (name, file or description; None = the paper's HMMWV): the 8-DOF constants,
    drive/brake/steering maps, prior ranges and nominal values (``constants`` overrides its constants). With
    the description's ``torque_source: measured`` the segment's measured per-wheel torque (``JointState.effort``)
    drives the wheels instead of the maps; with ``map`` a measured torque in the data is ignored.

    ``previous``: 8-DOF parameter values from earlier stages (posterior means), overriding the configured
    held-fixed values; ``n_chains`` independent SMC runs of ``n_draws`` particles each; ``seed`` fixes every
    random number (SMC and predictive draws); ``separate_bphi``: sample bphi_f and bphi_r separately (lateral);
    ``dt``: integration step (default per the yaml: 5 ms longitudinal, 10 ms lateral and rolling resistance);
    ``noise_prior_factor``: multiplies the paper's half-normal scales of the noise sigmas (1 = the paper's). The
    paper's scales are its sensor-noise levels; on data from another model or a real vehicle the sigma also
    absorbs the model-form error (e.g. ~1.3 m/s on u for 14-DOF data against a 0.1 scale), and a prior that
    puts the needed sigma 10+ scales out in its tail biases sigma low (over-weighting that channel) and costs
    the tempering ~3x the stages to pull sigma out of the tail. Weakly informative factors (~10) fix both.
    ``priors``: uniform prior ranges ``{name: (lower, upper)}`` replacing the paper's (:func:`stage_spec`).
    ``roll_split`` (default): a stage calibrating kphi_f and kphi_r samples them as total roll stiffness and
    front fraction (same uniform prior on the (kphi_f, kphi_r) box, :class:`_RollSplit`); results, draws and
    diagnostics are reported as kphi_f, kphi_r either way. False samples kphi_f, kphi_r directly (as before).
    ``noise_model``: ``"auto"`` (default: the stage's model, estimation/calibration/noise_models.py
    ``STAGE_NOISE_MODELS``), ``"ar1"`` (per-channel AR(1) residuals, rho sampled, Eq. A1), ``"discrepancy"`` (Eq. A3)
    or ``"white"`` (independent residuals, the paper's likelihood); the result records the model used.
    ``initial_state``: ``"measured"`` (default: the segment's initial state) or ``"sampled"`` (the stage's measured
    channels' initial values are nuisance parameters with the prior of :func:`initial_state_uncertainty`; for segments
    whose initial state is a fit to noisy data).
    """
    t_start = time.perf_counter()
    spec, constants, segment = stage_setup(segment, stage, separate_bphi=separate_bphi, priors=priors,
                                           vehicle=vehicle, dt=dt, constants=constants)
    if not (math.isfinite(noise_prior_factor) and noise_prior_factor > 0.0):
        raise InputError(f"noise_prior_factor must be > 0, got {noise_prior_factor!r}")
    if noise_prior_factor != 1.0:
        spec = replace(spec, noise_scales=tuple((c, s * float(noise_prior_factor)) for c, s in spec.noise_scales))
    if check:
        check_segment(segment, spec, r0=constants.r0, vehicle=vehicle)
    base = base_parameters(spec, previous, constants.default_parameters())
    if initial_state not in ("measured", "sampled"):
        raise InputError(f"initial_state must be 'measured' or 'sampled', got {initial_state!r}")
    x0_sd = initial_state_uncertainty(segment, spec.channels) if initial_state == "sampled" else None
    problem = StageProblem(segment, spec, base, constants, roll_split=roll_split, noise_model=noise_model,
                           initial_state_sd=x0_sd)
    smc: SMCResult = run_smc(problem.sampled_log_likelihood, problem.sampling_prior, n_particles=n_draws,
                             n_chains=n_chains, seed=seed, kernel=kernel, max_mutation_steps=max_mutation_steps,
                             **(smc_options or {}))
    names = problem.prior.names
    draws = problem.to_reported(smc.draws)
    summ = summarize_draws(draws, names)
    params = {n: summ[n].to_dict() for n in names[: problem.n_model]}
    noise = {n[len("sigma_"):]: summ[n].to_dict() for n in names[problem.n_model:] if n.startswith("sigma_")}
    rho = {n[len("rho_"):]: summ[n].to_dict() for n in names[problem.n_model:] if n.startswith("rho_")}
    x0s = {n[len("x0_"):]: summ[n].to_dict() for n in names[problem.n_model:] if n.startswith("x0_")}
    disc = {n[len("delta_"):]: summ[n].to_dict() for n in names[problem.n_model:] if n.startswith("delta_")}
    rng = np.random.default_rng(np.random.SeedSequence(seed).spawn(n_chains + 1)[-1])
    flat = draws.reshape(-1, len(names))[:, : problem.n_model]
    k = min(predictive_draws, flat.shape[0])
    post = flat[rng.choice(flat.shape[0], k, replace=False)]
    pri = problem.prior.sample(rng, k)[:, : problem.n_model]
    chans = spec.channels
    rmse_post = problem.rmse(post).mean(axis=0)
    rmse_prior = problem.rmse(pri).mean(axis=0)
    rmse_mean = problem.rmse(flat.mean(axis=0)[None, :])[0]
    fixed = {n: float(base[n]) for n in PARAM_NAMES
             if n not in spec.parameter_names and not (n in ("bphi_f", "bphi_r") and "bphi" in spec.parameter_names)}
    return CalibrationResult(
        stage=stage, parameters=params, noise=noise, converged=_converged(summ),
        elapsed_s=time.perf_counter() - t_start,
        log_evidence=smc.log_evidence, n_stages=smc.n_stages, names=names, draws=draws, fixed=fixed,
        rmse_prior=dict(zip(chans, map(float, rmse_prior))), rmse_posterior=dict(zip(chans, map(float, rmse_post))),
        rmse_posterior_mean=dict(zip(chans, map(float, rmse_mean))), sampling_s=smc.elapsed_s,
        smc={**{k: v for k, v in smc.to_dict().items() if k not in ("names",)},
             "evaluation_equivalents": problem.steps_done / problem.sim.steps_per_run,
             "initial_gear": problem.sim.initial_gear,
             "sampled_as": list(problem.sampling_prior.names[: problem.n_model])}, separate_bphi=separate_bphi,
        priors={n: (float(d.low), float(d.high)) for n, d in spec.priors if isinstance(d, Uniform)},
        residual_correlation=rho, noise_model=problem.noise_model, initial_state=x0s, discrepancy=disc,
    )


def calibrate_all(segments: Mapping[str, Segment] | Segment, *, n_chains: int = 8, n_draws: int = 1000,
                  seed: int = 0, separate_bphi: bool = False, kernel: str = "imh",
                  previous: Mapping[str, float] | None = None, vehicle=None,
                  noise_prior_factor: float = 1.0, noise_model: str = DEFAULT_NOISE_MODEL
                  ) -> dict[str, CalibrationResult]:
    """Run rolling_resistance -> longitudinal -> lateral (``stage_order.CHAIN_ORDER``: each stage after the
    stages its fit depends on), each on its segment (one segment: the same for all), each stage holding the
    earlier stages' posterior means fixed (paper Section 3); stage ``k`` of ``STAGE_NAMES`` uses seed ``seed + k``;
    ``vehicle`` and ``noise_model`` as :func:`calibrate_stage`."""
    from vehcal_ros.estimation.calibration.stage_order import CHAIN_ORDER

    results: dict[str, CalibrationResult] = {}
    known = dict(previous or {})
    for stage in CHAIN_ORDER:
        seg = segments if isinstance(segments, Segment) else segments.get(stage)
        if seg is None:
            continue
        i = STAGE_NAMES.index(stage)
        res = calibrate_stage(seg, stage, previous=known, n_chains=n_chains, n_draws=n_draws, seed=seed + i,
                              separate_bphi=separate_bphi, kernel=kernel, vehicle=vehicle,
                              noise_prior_factor=noise_prior_factor, noise_model=noise_model)
        results[stage] = res
        known.update(res.posterior_means())
    if not results:
        raise InputError(f"no segment for any stage; give segments for {', '.join(STAGE_NAMES)}")
    return results


def predictive_responses(segment: Segment, result: CalibrationResult, n: int = 100, seed: int = 0,
                         constants: VehicleConstants | None = None) -> dict[str, np.ndarray]:
    """Responses for ``n`` prior and ``n`` posterior draws plus the posterior-mean response (paper Figs. 7-9,
    15-18): keys ``time``, ``data``, ``prior``, ``posterior`` ``(n, n_out, n_channels)``, ``posterior_mean``,
    ``channels``."""
    spec = stage_spec(result.stage, separate_bphi=result.separate_bphi)
    if result.priors:  # the ranges the result was sampled with (separate bphi_f/bphi_r share one range)
        spec = replace(spec, priors=tuple((n, Uniform(*result.priors.get(n, (d.low, d.high))))
                                          for n, d in spec.priors))
    problem = StageProblem(segment, spec, {**DEFAULT_PARAMETERS, **result.fixed}, constants,
                           noise_model=result.noise_model)
    rng = np.random.default_rng(seed)
    flat = result.draws.reshape(-1, result.draws.shape[2])[:, : problem.n_model]
    post = flat[rng.choice(flat.shape[0], min(n, flat.shape[0]), replace=False)]
    pri = problem.prior.sample(rng, n)[:, : problem.n_model]
    return {"time": problem.sim.t_out, "data": problem.data, "channels": np.array(spec.channels),
            "prior": problem.responses(pri), "posterior": problem.responses(post),
            "posterior_mean": problem.responses(flat.mean(axis=0)[None, :])[0]}
