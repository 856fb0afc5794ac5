"""Qualifying maneuver segments in buffered vehicle signals (Unjhawala et al. 2023, doi:10.1115/1.4062199,
Sections 3.3-3.5).

Each calibration stage needs its own kind of maneuver:

==================  ===========================================================================================
stage               qualifying window (thresholds are :class:`SegmentConfig` fields, in physical units: the
                    road-wheel angle delta is the steering input through the vehicle description's steering map;
                    qualification.py says why each value)
==================  ===========================================================================================
longitudinal        throttle applied (> ``long_min_throttle``), no brake, straight (|delta| <=
                    ``straight_max_road_wheel_angle``), speed rising
                    by at least ``long_min_speed_gain`` (Sec. 3.3: throttle ramp 0 -> 0.5 -> 0); starts up to
                    ``pad`` before the throttle onset but not before u reaches ``long_min_start_speed`` (the
                    8-DOF model is not started from rest: its likelihood there is jagged; the paper starts at 1 s);
                    the tire force must VARY: the 0.5 s mean forward acceleration spans at least
                    ``long_min_accel_range`` within the window (identifiability of Cx, below)
lateral             steering (|delta| >= ``lat_min_road_wheel_angle``) at speed (u > ``lat_min_speed``), no brake,
                    roughly steady speed (|du/dt| < ``lat_max_accel``), and a peak lateral acceleration
                    |u r + dv/dt| >= ``lat_min_lateral_accel`` in the window (Sec. 3.4)
rolling_resistance  coast-down: throttle 0, brake 0, straight, u > ``rr_min_speed``, decelerating (Sec. 3.5);
                    with a measured wheel torque (the description's ``torque_source: measured`` and the torque
                    recorded throughout) any straight, brake-free, steady (|du/dt| < ``rr_max_accel``) stretch
                    at u > ``rr_min_speed``, throttle or not, whose rolling-resistance sensitivity (the speed
                    a 0.01 m lever takes off over it) is at least ``rr_min_speed_drop`` (qualification.py: the
                    drive torque is known, so steady driving identifies rr as a coast-down does); the
                    coast-downs when the data hold no such stretch
==================  ===========================================================================================

Identifiability of the slip stiffnesses (longitudinal stage). In the Fiala tire's elastic range the wheel slip is
``s = Fx / Cx``, and the data show it only as the wheel speeds against u. A window whose tire force hardly changes
(a steady gentle launch under a speed controller: the 160 s daily drive's [2.25, 12.25] s, 1.0 +- 0.2 m/s^2 at
throttle 0.08-0.10, true slip 0.0057-0.0058 throughout) holds ONE point of the slip-force curve, whose level is
confounded with everything else that offsets the slip or the drive force: the rolling radius (measured
(r w - u)/u = -0.028 there, 8-DOF r0 - Fz/kt against the simulated tire's), and the drive force at low throttle,
where the not-yet-calibrated rolling-resistance torque (held 0.0175 m x Fz; the prior range [0.005, 0.03] m spans
0.54 m/s^2 of acceleration, ``d_rr g / r``) is a third of it (the 8-DOF accelerated at 0.74 vs the data's 1.01
m/s^2). Such windows gave confident but wrong slip stiffnesses: 1396/1368 N (Cxf at its prior bound: refused
after a 38 CPU-s fit), 6112, 3240, 7560 N (accepted on the accel_coast bag), against 23500-37800 N from every
window whose acceleration spans >= 2.8 m/s^2 (daily drive [30.0, 34.3], [61.1, 65.2] s; throttle_ramp; the
14-DOF tire's own slope is ~1e5 N). A throttle step from cruise spans its whole peak acceleration (the window
starts ``pad`` before the onset). ``long_min_accel_range`` (1.0 m/s^2, 1.25-2x what the rolling-resistance prior
spans; estimation/calibration/qualification.py) keeps such windows out before any fit; the window then reports why
(``find_windows``'s reason).

The buffered topics (wheel speeds, IMU, odometry, controls; each a ``(n, 1 + k)`` stamp-first array as
:meth:`~vehcal_ros.estimation.sensing.buffers.RollingBuffer.array` returns) are resampled onto one uniform grid
(``rate``, linear interpolation); grid points whose bracketing samples of any topic are more than ``max_gap``
apart are invalid, and no window ever contains one. :func:`build_segment` cuts a
:class:`~vehcal_ros.estimation.calibration.fit.Segment` with the initial 8-DOF state taken from the data at its
start (each channel's local quadratic fit over the first ``initial_window`` seconds, so one noisy
sample does not set the initial state). Wheel order: ``WHEELS`` is FL, FR, RL, RR -> 8-DOF ``w_lf, w_rf, w_lr,
w_rr``. Nothing here imports rclpy.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from vehcal_ros.errors import InputError
from vehcal_ros.estimation.calibration.fit import STAGE_NAMES, Segment
from vehcal_ros.estimation.calibration.qualification import (
    StageThresholds,
    fmt_angle,
    lateral_acceleration,
    mean_accelerations,
    rr_sensitivity,
    threshold,
    validate_declared,
)
from vehcal_ros.models.vehicle_8dof import STATE_INDEX, STATE_NAMES, VehicleConstants
from vehcal_ros.vehicle.description import VehicleDescription, load_description

SOURCE_COLUMNS: dict[str, tuple[str, ...]] = {
    "wheel_speeds": ("w_lf", "w_rf", "w_lr", "w_rr"),            # WHEELS order FL, FR, RL, RR
    "imu": ("roll", "roll_rate", "imu_yaw_rate"),
    "odom": ("u", "v", "odom_yaw_rate", "x", "y", "psi"),
    "controls": ("throttle", "brake", "steering"),
}
"""Buffered source -> its value columns (after the stamp), in SI units."""
YAW_RATE_SOURCES = ("odom", "imu")

OPTIONAL_SOURCES: dict[str, tuple[str, ...]] = {
    "wheel_torque": ("t_fl", "t_fr", "t_rl", "t_rr"),
}
"""Optional sources: measured per-wheel net torque (N m, ``JointState.effort`` of the wheel-speed topic, FL, FR,
RL, RR; ``WheelSpeeds.torque``). When present over a whole window, the segment carries it and it drives the
8-DOF wheels instead of the vehicle description's powertrain and brake maps."""
MEASURED = ("u", "v", "yaw_rate", "roll", "roll_rate", "w_lf", "w_rf", "w_lr", "w_rr")


@dataclass(frozen=True)
class SegmentConfig(StageThresholds):
    """Settings of the segment finder: the stage thresholds in physical units (:class:`~vehcal_ros.estimation.
    qualification.StageThresholds`, where each is declared with its unit and range, and why its value) and the
    windowing below (units in brackets). The model_calibrator declares one parameter per field
    (:func:`~vehcal_ros.estimation.calibration.qualification.declared`); :meth:`validate` enforces the declared
    ranges."""

    rate: float = threshold(100.0, "Hz", 10.0, 1000.0, "resampling grid")
    max_gap: float = threshold(0.05, "s", 0.001, 5.0, "larger gaps between samples of any topic invalidate the "
                               "data there")
    min_duration: float = threshold(2.0, "s", 0.5, 600.0, "shortest qualifying segment")
    max_duration: float = threshold(10.0, "s", 0.5, 600.0, "longest segment handed to a fit")
    initial_window: float = threshold(1.0, "s", 0.0, 5.0, "span of the local fit giving the initial state")
    pad: float = threshold(1.0, "s", 0.0, 5.0, "kept before the steering (lateral) or throttle (longitudinal) "
                           "onset")
    yaw_rate_source: str = threshold("odom", "", None, None, "yaw rate from odometry or the IMU",
                                     choices=YAW_RATE_SOURCES)
    rr_settle: float = threshold(0.5, "s", 0.0, 10.0, "coast-down: skipped after the throttle release "
                                 "(wheel-slip transient)")

    def validate(self) -> None:
        """Raise :class:`InputError` naming the field and its range."""
        validate_declared(self, "segment config")
        if self.max_duration < self.min_duration:
            raise InputError(f"segment config: max_duration {self.max_duration} < min_duration {self.min_duration}")


@dataclass(frozen=True)
class Resampled:
    """All channels on one uniform grid: ``time`` (s), ``values`` name -> array, ``valid`` (no gap nearby)."""

    time: np.ndarray
    values: Mapping[str, np.ndarray]
    valid: np.ndarray
    yaw_rate_source: str = "odom"

    def __getitem__(self, name: str) -> np.ndarray:
        if name == "yaw_rate":
            return self.values[f"{self.yaw_rate_source}_yaw_rate"]
        return self.values[name]

    @property
    def size(self) -> int:
        return int(self.time.size)


@dataclass(frozen=True)
class Window:
    """A qualifying window: ``stage``, ``t_start``/``t_end`` (s), ``score`` (the stage's excitation: peak forward
    acceleration m/s^2 — the tire-force level that identifies the slip stiffnesses —, peak |lateral acceleration|
    m/s^2, speed lost m/s in a coast-down or, with a measured wheel torque, the rolling-resistance sensitivity
    m/s, :func:`~vehcal_ros.estimation.calibration.qualification.rr_sensitivity`)."""

    stage: str
    t_start: float
    t_end: float
    score: float

    @property
    def duration(self) -> float:
        return self.t_end - self.t_start


def resample(sources: Mapping[str, np.ndarray], rate: float = 100.0, max_gap: float = 0.05,
             yaw_rate_source: str = "odom") -> Resampled:
    """Linear interpolation of every source onto one grid at ``rate`` over the sources' common time span.

    ``sources``: name (:data:`SOURCE_COLUMNS`) -> ``(n, 1 + k)`` stamp-first rows in increasing time. A grid
    point is invalid when, for any source, its bracketing samples are more than ``max_gap`` apart (or a value
    is non-finite). Raises :class:`InputError` when a source is missing or there is no common span.
    """
    missing = [s for s in SOURCE_COLUMNS if s not in sources or np.asarray(sources[s]).shape[0] < 2]
    if missing:
        raise InputError(f"no data (or < 2 samples) on: {', '.join(missing)}")
    t0 = max(float(sources[s][0, 0]) for s in SOURCE_COLUMNS)
    t1 = min(float(sources[s][-1, 0]) for s in SOURCE_COLUMNS)
    if not t1 > t0:
        raise InputError("the topics do not overlap in time")
    step = 1.0 / rate
    grid = t0 + step * np.arange(int(np.floor((t1 - t0) / step + 1e-9)) + 1)
    valid = np.ones(grid.size, dtype=bool)
    values: dict[str, np.ndarray] = {}
    for name, cols in SOURCE_COLUMNS.items():
        a = np.asarray(sources[name], dtype=float)
        t = a[:, 0]
        if np.any(np.diff(t) <= 0):
            keep = np.concatenate([[True], np.diff(t) > 0])
            a, t = a[keep], t[keep]
        if a.shape[1] != len(cols) + 1:
            raise InputError(f"source {name}: expected {len(cols)} value columns {cols}, got {a.shape[1] - 1}")
        idx = np.clip(np.searchsorted(t, grid, side="right"), 1, t.size - 1)
        span = t[idx] - t[idx - 1]
        valid &= span <= max_gap + 1e-9
        finite = np.all(np.isfinite(a[:, 1:]), axis=1)
        valid &= finite[idx] & finite[idx - 1]
        for j, c in enumerate(cols):
            values[c] = np.interp(grid, t, a[:, 1 + j])
    for name, cols in OPTIONAL_SOURCES.items():   # no validity mask: a window uses it only where it is complete
        a = np.asarray(sources.get(name, np.empty((0, len(cols) + 1))), dtype=float)
        if a.ndim != 2 or a.shape[0] < 2 or a.shape[1] != len(cols) + 1:
            continue
        a = a[np.all(np.isfinite(a), axis=1)]
        if a.shape[0] < 2:
            continue
        keep = np.concatenate([[True], np.diff(a[:, 0]) > 0])
        a = a[keep]
        idx = np.clip(np.searchsorted(a[:, 0], grid, side="right"), 1, a.shape[0] - 1)
        ok = (a[idx, 0] - a[idx - 1, 0] <= max_gap + 1e-9) & (grid >= a[0, 0] - 1e-9) & (grid <= a[-1, 0] + 1e-9)
        for j, c in enumerate(cols):
            values[c] = np.where(ok, np.interp(grid, a[:, 0], a[:, 1 + j]), np.nan)
    return Resampled(grid, values, valid, yaw_rate_source)


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """Inclusive index ranges of consecutive True values."""
    if mask.size == 0:
        return []
    d = np.diff(np.concatenate([[0], mask.astype(np.int8), [0]]))
    starts = np.nonzero(d == 1)[0]
    ends = np.nonzero(d == -1)[0] - 1
    return list(zip(starts.tolist(), ends.tolist()))


def _accel(r: Resampled, span: float = 1.0) -> np.ndarray:
    """du/dt by a central difference over ``span`` seconds (noise-robust), m/s^2."""
    u = r["u"]
    h = max(1, int(round(0.5 * span * (r.size - 1) / max(r.time[-1] - r.time[0], 1e-9))))
    a = np.zeros_like(u)
    if u.size > 2 * h:
        a[h:-h] = (u[2 * h:] - u[:-2 * h]) / (r.time[2 * h:] - r.time[:-2 * h])
        a[:h] = a[h]
        a[-h:] = a[-h - 1]
    return a


def _best_subwindow(r: Resampled, i0: int, i1: int, n_max: int, score) -> tuple[int, int]:
    """The sub-range of at most ``n_max`` samples within [i0, i1] with the largest ``score(a, b)``."""
    if i1 - i0 + 1 <= n_max:
        return i0, i1
    step = max(1, n_max // 10)
    best, arg = -np.inf, (i0, i0 + n_max - 1)
    for a in range(i0, i1 - n_max + 2, step):
        s = score(a, a + n_max - 1)
        if s > best:
            best, arg = s, (a, a + n_max - 1)
    return arg


def _description(vehicle: Any) -> VehicleDescription:
    """The vehicle description of a name, file or description (None: the default vehicle)."""
    return vehicle if isinstance(vehicle, VehicleDescription) else load_description(vehicle)


def find_windows(r: Resampled, stage: str, config: SegmentConfig = SegmentConfig(),
                 vehicle: VehicleDescription | str | None = None,
                 use_torque: bool = True) -> tuple[list[Window], str]:
    """Qualifying windows of ``stage`` in ``r`` (time order) and, when there are none, why (else "").

    ``vehicle`` (description, name or file; None: the default vehicle): its steering map turns the steering input
    into the road-wheel angle the thresholds are in (:mod:`~vehcal_ros.estimation.calibration.qualification`). Rolling
    resistance with a measured wheel torque takes the steady-driving windows, and the coast-downs when there are
    none (a coast-down decelerates by rr g plus the drag, which may exceed ``rr_max_accel``); ``use_torque``
    False: the coast-down rule only."""
    if stage not in STAGE_NAMES:
        raise InputError(f"unknown stage '{stage}'; choose one of {', '.join(STAGE_NAMES)}")
    c = config
    n_min = int(np.ceil(c.min_duration * c.rate)) + 1
    n_max = int(np.floor(c.max_duration * c.rate)) + 1
    u, thr, brk = r["u"], r["throttle"], r["brake"]
    desc = _description(vehicle)
    delta = np.abs(desc.road_wheel_angle(r["steering"]))   # rad
    torque = torque_recorded(r) if desc.wheel_torque_measured and use_torque else None
    radius = desc.static_rolling_radius()
    no_brake = brk < c.max_brake
    straight = delta <= c.straight_max_road_wheel_angle
    if stage == "longitudinal":
        mask = r.valid & no_brake & straight & (thr > c.long_min_throttle)
    elif stage == "lateral":
        mask = r.valid & no_brake & (u > c.lat_min_speed) & (np.abs(_accel(r)) < c.lat_max_accel)
    elif torque is not None:   # the drive torque is measured: no need for a released throttle
        mask = r.valid & no_brake & straight & torque & (u > c.rr_min_speed) & (np.abs(_accel(r)) < c.rr_max_accel)
    else:
        mask = r.valid & no_brake & straight & (thr < c.rr_max_throttle) & (u > c.rr_min_speed)
    out: list[Window] = []
    best_reason, best_score = "", -np.inf
    runs = _runs(mask)
    if not runs:
        return _or_coast_down(r, stage, c, vehicle, torque, _why_none(r, stage, c, no_brake, straight, torque))
    ay = np.abs(lateral_acceleration(r.time, u, r["v"], r["yaw_rate"])) if stage == "lateral" else None
    for i0, i1 in runs:
        run0, run1 = i0, i1
        if stage == "lateral":
            steered = np.nonzero(delta[i0:i1 + 1] >= c.lat_min_road_wheel_angle)[0]
            if steered.size == 0:   # closeness to qualifying: the share of the threshold reached (< 1)
                peak = float(delta[i0:i1 + 1].max())
                share = peak / c.lat_min_road_wheel_angle if c.lat_min_road_wheel_angle > 0 else 0.0
                if share > best_score:
                    best_score, best_reason = share, (
                        f"no lateral excitation: peak road-wheel angle {fmt_angle(peak)}, need >= "
                        f"{fmt_angle(c.lat_min_road_wheel_angle)}")
                continue
            first, last = i0 + int(steered[0]), i0 + int(steered[-1])
            i0 = max(i0, first - int(round(c.pad * c.rate)))
            # ... and ends `pad` after the steering returns: straight driving after the maneuver adds nothing
            # about the lateral parameters (the paper's window ends with its steering ramp)
            i1 = min(i1, last + int(round(c.pad * c.rate)))
        elif stage == "longitudinal":
            k = 0   # extend back over valid, straight, brake-free, still-unthrottled samples (the steady start)
            while k < int(round(c.pad * c.rate)) and i0 - k - 1 >= 0 and r.valid[i0 - k - 1] and \
                    no_brake[i0 - k - 1] and straight[i0 - k - 1]:
                k += 1
            i0 -= k
            # not from rest: the 8-DOF model's slip ratios are ill-conditioned near u = 0, which makes the
            # likelihood surface jagged (multimodal); the paper starts its 8-DOF model at 1 s for that reason
            if c.long_min_start_speed > 0.0:
                h = max(1, int(round(0.1 * c.rate)))
                um = np.convolve(u[i0:i1 + 1], np.ones(2 * h + 1) / (2 * h + 1), mode="same")
                moving = np.nonzero(um >= c.long_min_start_speed)[0]
                i0 = i0 + int(moving[0]) if moving.size else i1 + 1
        elif stage == "rolling_resistance" and torque is None:
            i0 = i0 + int(round(c.rr_settle * c.rate))
        if i1 - i0 + 1 < n_min:
            dur = max(i1 - i0, 0) / c.rate
            cut = (run0 > 0 and not r.valid[run0 - 1]) or (run1 + 1 < r.size and not r.valid[run1 + 1])
            if -1.0 - dur > best_score:
                best_score, best_reason = -1.0 - dur, (f"too short: {dur:.2f} s < min_duration {c.min_duration:g} s"
                                                       + (" (cut by a gap or NaN in the data)" if cut else ""))
            continue
        if stage == "longitudinal":
            def score(a: int, b: int) -> float:
                return float(u[b] - u[a])
            a, b = _best_subwindow(r, i0, i1, n_max, score)
            s, need = score(a, b), c.long_min_speed_gain
            label = f"speed gain {s:.2f} m/s, need >= {need:g} m/s"
            if s >= need:  # excitation of the slip stiffnesses: the peak tire force, i.e. the peak acceleration
                acc = mean_accelerations(u[a:b + 1], c.rate)
                spread = float(acc.max() - acc.min())
                if spread >= c.long_min_accel_range:
                    out.append(Window(stage, float(r.time[a]), float(r.time[b]), float(acc.max())))
                    continue
                if math.inf > best_score:   # the closest miss: it qualifies but for the identifiability check
                    best_score, best_reason = math.inf, (
                        f"not identifying Cx: the tire force hardly varies: forward acceleration range "
                        f"{spread:.2f} m/s^2 (0.5 s means {acc.min():.2f} to {acc.max():.2f}), need >= "
                        f"{c.long_min_accel_range:g} m/s^2 (long_min_accel_range)")
                continue
        elif stage == "lateral":   # excitation of the lateral tire forces: the peak lateral acceleration
            a, b = i0, min(i1, i0 + n_max - 1)
            s, need = float(ay[a:b + 1].max()), c.lat_min_lateral_accel
            if s >= need:
                out.append(Window(stage, float(r.time[a]), float(r.time[b]), s))
            elif (share := s / need) > best_score:
                best_score, best_reason = share, (f"no lateral excitation: peak lateral acceleration {s:.2f} m/s^2, "
                                                  f"need >= {need:g} m/s^2")
            continue
        elif torque is not None:
            a, b = i0, min(i1, i0 + n_max - 1)
            s, need = rr_sensitivity(float(r.time[b] - r.time[a]), radius, desc.g), c.rr_min_speed_drop
            label = f"rolling-resistance sensitivity {s:.2f} m/s, need >= {need:g} m/s"
        else:
            def score(a: int, b: int) -> float:
                return float(u[a] - u[b])
            a, b = i0, min(i1, i0 + n_max - 1)
            s, need = score(a, b), c.rr_min_speed_drop
            label = f"speed drop {s:.2f} m/s, need >= {need:g} m/s"
        if s >= need:
            out.append(Window(stage, float(r.time[a]), float(r.time[b]), s))
        elif s > best_score:
            best_score, best_reason = s, f"not excited: {label}"
    if not out and stage == "rolling_resistance" and torque is None and best_reason.startswith("too short"):
        released = r.valid & (thr < c.rr_max_throttle) & (u > c.rr_min_speed)
        why = _shares(r, released, f"with the throttle released at u > {c.rr_min_speed:g} m/s", [
            (~no_brake, f"braked (brake >= {c.max_brake:g})"),
            (~straight, f"not straight (road-wheel angle > {fmt_angle(c.straight_max_road_wheel_angle)})")])
        best_reason += f"; {why}" if why else ""
    if out:
        return out, ""
    return _or_coast_down(r, stage, c, vehicle, torque, best_reason)


def _or_coast_down(r: Resampled, stage: str, c: SegmentConfig, vehicle: Any, torque: np.ndarray | None,
                   why: str) -> tuple[list[Window], str]:
    """No window of ``stage`` (``why``): for rolling resistance with a measured torque (``torque`` not None), the
    coast-down windows instead, else none with both reasons."""
    if stage != "rolling_resistance" or torque is None:
        return [], why
    coast, why_coast = find_windows(r, stage, c, vehicle, use_torque=False)
    return (coast, "") if coast else ([], f"steady driving: {why}; coast-down: {why_coast}")


def _shares(r: Resampled, base: np.ndarray, what: str, failing: list[tuple[np.ndarray, str]]) -> str:
    """``of the T s <what>, a % <label>, ...``: the share of the ``base`` time each failing condition takes (only
    conditions that fail somewhere are named)."""
    rate = (r.size - 1) / max(float(r.time[-1] - r.time[0]), 1e-9)
    parts = [f"{100 * float(bad[base].mean()):.0f} % {label}" for bad, label in failing if bad[base].any()]
    if not parts:
        return ""
    return f"of the {base.sum() / rate:.1f} s {what}, " + ", ".join(parts)


def torque_recorded(r: Resampled) -> np.ndarray | None:
    """Grid points where every wheel's measured torque is recorded (finite), None when there is no torque
    channel at all."""
    cols = OPTIONAL_SOURCES["wheel_torque"]
    if not all(col in r.values for col in cols):
        return None
    return np.all([np.isfinite(r.values[col]) for col in cols], axis=0)


def _why_none(r: Resampled, stage: str, c: SegmentConfig, no_brake: np.ndarray, straight: np.ndarray,
              torque: np.ndarray | None = None) -> str:
    """Why no sample can start a window of ``stage``: the quantity that fails, with its value and threshold
    (``torque``: where the measured wheel torque is recorded, None: not measured)."""
    u, thr = r["u"], r["throttle"]
    braked = (~no_brake, f"braked (brake >= {c.max_brake:g})")
    steered = (~straight, f"not straight (road-wheel angle > {fmt_angle(c.straight_max_road_wheel_angle)})")
    gaps = (~r.valid, "invalid (gaps or NaN)")
    if stage == "longitudinal":
        base = thr > c.long_min_throttle
        if not base.any():
            return f"no throttle application: peak throttle {float(thr.max()):.3f}, need > {c.long_min_throttle:g}"
        return "no straight throttle application without brake: " + _shares(
            r, base, f"with throttle > {c.long_min_throttle:g}", [braked, steered, gaps])
    if stage == "lateral":
        base = u > c.lat_min_speed
        if not base.any():
            return f"no lateral excitation: peak speed {float(u.max()):.1f} m/s, need > {c.lat_min_speed:g} m/s"
        accelerating = (np.abs(_accel(r)) >= c.lat_max_accel,
                        f"not at steady speed (forward acceleration >= {c.lat_max_accel:g} m/s^2 either way)")
        return "no steady driving at speed without brake: " + _shares(
            r, base, f"at u > {c.lat_min_speed:g} m/s", [braked, accelerating, gaps])
    base = u > c.rr_min_speed
    if not base.any():
        return f"no coasting at speed: peak speed {float(u.max()):.1f} m/s, need > {c.rr_min_speed:g} m/s"
    if torque is not None:
        unsteady = (np.abs(_accel(r)) >= c.rr_max_accel,
                    f"not at steady speed (forward acceleration >= {c.rr_max_accel:g} m/s^2 either way)")
        return "no steady straight driving without brake and with the wheel torque recorded: " + _shares(
            r, base, f"at u > {c.rr_min_speed:g} m/s", [braked, steered, unsteady, gaps, (~torque, "no wheel torque")])
    released = base & (thr < c.rr_max_throttle)
    if not released.any():
        return (f"no coasting: the throttle is never released at u > {c.rr_min_speed:g} m/s (lowest throttle "
                f"{float(thr[base].min()):.3f}, need < {c.rr_max_throttle:g})")
    return "no straight coasting: " + _shares(r, released, f"with the throttle released at u > "
                                               f"{c.rr_min_speed:g} m/s", [braked, steered, gaps])


FREE_ROLLING_MAX_ACCEL = 0.3
"""m/s^2, free rolling: the 1 s mean forward acceleration stays below this (steady speed), and below the
acceleration whose tire force would slip the tires by :data:`FREE_ROLLING_MAX_SLIP` at the description's nominal
slip stiffnesses, ``4 s_max min(Cxf, Cxr) / m_t`` (0.39 m/s^2 for the spec-sheet HMMWV and sedan, 0.03 m/s^2 for
the paper's HMMWV, whose Cx = 10300 N slips 2.6 % under its own rolling resistance)."""
FREE_ROLLING_MAX_SLIP = 0.002
"""-, the slip free rolling may leave in the measured radius: < 0.2 %, a fifth of an everyday drive's ~1 %."""
FREE_ROLLING_MAX_MU = 0.02
"""Free rolling with a measured wheel torque: every wheel's |T| / (F_z,static r) below this, i.e. a tire force
below 2 % of the load, whose slip (F_x / (CC F_z), cornering-type coefficient CC ~ 10-20) is < 0.2 %; without a
measured torque the throttle must be released (``rr_max_throttle``): then F_x is the rolling resistance alone
(~1-2 % of the load)."""
FREE_ROLLING_MIN_S = 2.0
"""s of free rolling needed: the median of >= 200 samples of u / omega whose single-sample error is <= 1 % (0.05
m/s of speed noise at >= 5 m/s) has a standard error <= 0.1 %, a fifth of an everyday drive slip (~0.5 %)."""


@dataclass(frozen=True)
class FreeRolling:
    """The effective rolling radius measured where the wheels roll freely: ``radius`` (m, median of u / mean
    wheel speed), its standard error ``se`` (m, 1.2533 x 1.4826 MAD / sqrt(n)), ``n`` samples, ``seconds``."""

    radius: float
    se: float
    n: int
    seconds: float


def free_rolling_radius(r: Resampled, config: SegmentConfig = SegmentConfig(),
                        vehicle: VehicleDescription | str | None = None) -> FreeRolling | None:
    """The effective rolling radius the wheels show where they roll freely (None: < :data:`FREE_ROLLING_MIN_S`
    of such data).

    Free rolling: valid, u > ``rr_min_speed`` (wheel-speed resolution), straight (|delta| <=
    ``straight_max_road_wheel_angle``), no brake, steady (:data:`FREE_ROLLING_MAX_ACCEL`) and no drive force to
    speak of (:data:`FREE_ROLLING_MAX_MU`). There the slip is < 0.2 % and u = omega r, so r = u / omega with
    omega the mean of the four wheel speeds (the yaw-rate lever arm cancels between left and right). The slip
    stiffnesses are identified from slips of 0.5-3 %, and a spec sheet's rolling radius is rarely known to
    1 % (measured: the 14-DOF HMMWV rolls at 0.4652 m against its spec-sheet description's 0.4575 m, the sedan
    at 0.339 m against 0.322 m), so the calibration pipeline runs the 8-DOF model at this radius
    (:meth:`~vehcal_ros.vehicle.description.VehicleDescription.with_rolling_radius`)."""
    c = config
    desc = _description(vehicle)
    u = r["u"]
    omega = 0.25 * (r["w_lf"] + r["w_rf"] + r["w_lr"] + r["w_rr"])
    gate = r.valid & (u > c.rr_min_speed) & (omega > 0.0) & (r["brake"] < c.max_brake)
    gate &= np.abs(desc.road_wheel_angle(r["steering"])) <= c.straight_max_road_wheel_angle
    nominal = VehicleConstants.from_description(desc).default_parameters()
    a_slip = FREE_ROLLING_MAX_SLIP * 4.0 * min(nominal["Cxf"], nominal["Cxr"]) / desc.total_mass
    gate &= np.abs(_accel(r)) < min(FREE_ROLLING_MAX_ACCEL, a_slip)
    torque = torque_recorded(r) if desc.wheel_torque_measured else None
    if torque is not None:
        fz_f, fz_r = desc.static_wheel_loads()
        radius = desc.static_rolling_radius()
        gate &= torque
        for col, fz in zip(OPTIONAL_SOURCES["wheel_torque"], (fz_f, fz_f, fz_r, fz_r)):
            tq = np.nan_to_num(r.values[col], nan=np.inf)
            gate &= np.abs(tq) < FREE_ROLLING_MAX_MU * fz * radius
    else:
        gate &= r["throttle"] < c.rr_max_throttle
    n = int(gate.sum())
    seconds = n / c.rate
    if seconds < FREE_ROLLING_MIN_S:
        return None
    ratio = u[gate] / omega[gate]
    med = float(np.median(ratio))
    mad = float(np.median(np.abs(ratio - med)))
    return FreeRolling(med, 1.2533 * 1.4826 * mad / math.sqrt(n), n, seconds)


def _initial_value(t: np.ndarray, x: np.ndarray, valid: np.ndarray, i0: int, h: int) -> float:
    """Local quadratic least-squares fit over the valid samples in [i0, i0 + h] evaluated at ``t[i0]`` (inside
    the segment, so no regime change such as a throttle release is straddled); the sample itself if h < 2."""
    if h < 2:
        return float(x[i0])
    lo, hi = i0, min(t.size, i0 + h + 1)
    sel = np.arange(lo, hi)
    sel = sel[valid[sel]]
    if sel.size < 8:
        return float(x[i0])
    coef = np.polyfit(t[sel] - t[i0], x[sel], 2)
    return float(coef[-1])


def build_segment(r: Resampled, t_start: float, t_end: float, config: SegmentConfig = SegmentConfig(),
                  source: str = "buffers") -> Segment:
    """The :class:`Segment` of [t_start, t_end] on ``r``'s grid with the initial 8-DOF state from the data.

    x, y, psi start at 0 (irrelevant to the calibrated channels); u, v, phi, wx, wz and the wheel speeds are
    local quadratic fits over the first ``initial_window`` seconds evaluated at the first sample, so the sensor
    noise of one sample does not become the initial state (the paper's synthetic study starts from the
    noise-free state, Section 3.1).
    """
    sel = (r.time >= t_start - 1e-9) & (r.time <= t_end + 1e-9)
    if not sel.any():
        raise InputError(f"{source}: no samples in [{t_start:.2f}, {t_end:.2f}] s")
    if not r.valid[sel].all():
        raise InputError(f"{source}: gap or NaN in [{t_start:.2f}, {t_end:.2f}] s (gaps > {config.max_gap:g} s)")
    t = r.time[sel]
    meas = {name: np.array(r[name][sel]) for name in MEASURED}
    i0 = int(np.argmax(sel))
    h = int(round(config.initial_window * config.rate))
    x0 = np.zeros(len(STATE_NAMES))
    for name, state in (("u", "u"), ("v", "v"), ("roll", "phi"), ("roll_rate", "wx"), ("yaw_rate", "wz"),
                        ("w_lf", "w_lf"), ("w_rf", "w_rf"), ("w_lr", "w_lr"), ("w_rr", "w_rr")):
        x0[STATE_INDEX[state]] = _initial_value(r.time, r[name], r.valid, i0, h)
    torque = None
    cols = OPTIONAL_SOURCES["wheel_torque"]
    if all(c in r.values for c in cols):
        tq = np.column_stack([r.values[c][sel] for c in cols])
        torque = tq if np.all(np.isfinite(tq)) else None   # only a complete record replaces the maps
    return Segment.from_arrays(t, r["throttle"][sel], r["brake"][sel], r["steering"][sel], meas, x0,
                               source=f"{source} [{t[0]:.2f}, {t[-1]:.2f}] s", wheel_torque=torque)


def find_segments(sources: Mapping[str, np.ndarray], stage: str, config: SegmentConfig = SegmentConfig(),
                  source: str = "buffers", vehicle: VehicleDescription | str | None = None
                  ) -> tuple[list[tuple[Window, Segment]], str]:
    """Resample ``sources`` and return (window, segment) pairs of ``stage`` in time order, and why none ("" if some);
    ``vehicle`` as :func:`find_windows`."""
    r = resample(sources, config.rate, config.max_gap, config.yaw_rate_source)
    wins, reason = find_windows(r, stage, config, vehicle)
    return [(w, build_segment(r, w.t_start, w.t_end, config, source)) for w in wins], reason


def records_to_sources(records) -> dict[str, np.ndarray]:
    """``(topic, record)`` or records (WheelSpeeds, ImuSample, OdomSample, Controls) -> stamp-first arrays per
    source (others ignored). Non-finite rows are kept here; :func:`resample` marks them invalid."""
    from vehcal_ros.records import Controls, ImuSample, OdomSample, WheelSpeeds

    rows: dict[str, list] = {k: [] for k in (*SOURCE_COLUMNS, *OPTIONAL_SOURCES)}
    for item in records:
        rec = item[1] if isinstance(item, tuple) else item
        if isinstance(rec, WheelSpeeds):
            rows["wheel_speeds"].append(record_row(rec))
            effort = getattr(rec, "torque", None)   # measured per-wheel net torque (JointState.effort), if any
            if effort is not None and np.size(effort) == 4:
                rows["wheel_torque"].append([rec.t, *np.asarray(effort, dtype=float).ravel()])
        elif isinstance(rec, ImuSample):
            rows["imu"].append(record_row(rec))
        elif isinstance(rec, OdomSample):
            rows["odom"].append(record_row(rec))
        elif isinstance(rec, Controls):
            rows["controls"].append(record_row(rec))
    width = {**SOURCE_COLUMNS, **OPTIONAL_SOURCES}
    return {k: (np.array(v, dtype=float) if v else np.empty((0, len(width[k]) + 1))) for k, v in rows.items()}


def record_source(rec: object) -> str | None:
    """The source name of a record (None for records the calibrator does not use)."""
    from vehcal_ros.records import Controls, ImuSample, OdomSample, WheelSpeeds

    return {WheelSpeeds: "wheel_speeds", ImuSample: "imu", OdomSample: "odom", Controls: "controls"}.get(type(rec))


def record_row(rec) -> list[float]:
    """``[t, values...]`` of a record in :data:`SOURCE_COLUMNS` order (wheel speeds FL, FR, RL, RR)."""
    name = record_source(rec)
    if name == "wheel_speeds":
        w = np.asarray(rec.omega, dtype=float)
        return [rec.t, float(w[0]), float(w[1]), float(w[2]), float(w[3])]
    if name == "imu":
        return [rec.t, rec.roll, rec.roll_rate, rec.yaw_rate]
    if name == "odom":
        return [rec.t, rec.u, rec.v, rec.yaw_rate, rec.x, rec.y, rec.yaw]
    if name == "controls":
        return [rec.t, rec.throttle, rec.brake, rec.steering]
    raise TypeError(f"not a calibration record: {type(rec).__name__}")


__all__ = ["SegmentConfig", "Resampled", "Window", "FreeRolling", "free_rolling_radius", "torque_recorded",
           "SOURCE_COLUMNS", "resample", "find_windows", "build_segment",
           "find_segments", "records_to_sources", "record_row", "record_source"]
