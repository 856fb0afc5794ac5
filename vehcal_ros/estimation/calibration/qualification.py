"""When a stretch of driving qualifies for a calibration stage: thresholds in physical units.

Every calibration stage needs its own excitation (Unjhawala et al. 2023, doi:10.1115/1.4062199, Sections
3.3-3.5). The thresholds here are physical quantities of the vehicle's motion, never raw input units:

* the **road-wheel angle** delta (rad), converted from the segment's steering input through the vehicle
  description's steering map (:meth:`~vehcal_ros.vehicle.description.VehicleDescription.road_wheel_angle`:
  normalised input x lock, steering-wheel angle / steering ratio, or the road-wheel angle itself), so one
  threshold holds for every car whatever its steering axis carries;
* the **lateral acceleration** a_y = u r + dv/dt (m/s^2) from the measured speed, lateral velocity and yaw rate
  (:func:`lateral_acceleration`), the quantity the lateral tire forces are made of (sum F_y = m a_y);
* the **longitudinal acceleration range** (m/s^2) and the **speed** (m/s, speed gained, speed lost).

The pedals stay normalised (0..1): they only say whether the driver is on the throttle or the brake.

Why these values (:class:`StageThresholds`, module constants below); they follow from the physics of an
ordinary car on an ordinary road, not from one vehicle's drives:

* **Lateral excitation, 0.5 m/s^2 peak.** The lateral stage identifies the cornering stiffnesses from the slip
  angles alpha = F_y / C_y = a_y / (g CC), with the cornering coefficient CC = C_y / F_z ~ 10-20 /rad of
  passenger-car and light-truck tires (0.15-0.3 deg at 0.5 m/s^2), and the roll stiffness from the roll angle
  (roll gradients of 3-7 deg/g: 0.15-0.35 deg at 0.5 m/s^2). What the flat-road 8-DOF model cannot represent
  sets the floor: a road's crossfall (2-2.5 % for drainage) puts a steady 0.20-0.25 m/s^2 of gravity across
  the car, and an accelerometer or yaw-rate bias ~0.05-0.1 m/s^2. At 0.5 m/s^2 the steered lateral force is at
  least twice the largest of them, and the slip angle it causes is ~10 x the noise of a 1 s mean measured slip
  angle (0.05 m/s lateral-velocity noise at 15 m/s: 0.19 deg per sample, 0.02 deg over 100 samples).
* **Steering, 0.25 deg of road-wheel angle (0.0044 rad).** The steering input must be known better than it is
  large: a steering-angle sensor's zero offset (~1-2 deg at the steering wheel, ~0.1 deg at the road wheel with
  a 15:1 ratio) and the toe tolerance of a wheel alignment (~0.1 deg) are each below 0.25 deg / 2. The same
  angle bounds "straight" for the longitudinal and coast-down stages: at 0.25 deg and 20 m/s on a 2.7 m
  wheelbase the path curvature gives a_y <= 0.65 m/s^2, whose cornering drag (lateral force x steer and slip
  angles, ~a_y x 0.01 rad <= 0.006 m/s^2) is ~5 % of a passenger car's rolling-resistance deceleration
  (~0.1 m/s^2), and the inner/outer wheel-speed split t delta / (2 L) ~0.1 % is a fifth of an everyday drive
  slip (~0.5 %).
* **Lateral speed, 10 m/s.** The slip angles are (v + x r) / u: below ~10 m/s the 0.05 m/s lateral-velocity
  noise alone is > 0.3 deg per sample, the size of the slip angle to be identified.
* **Longitudinal: speed gain 2 m/s and acceleration range 1.0 m/s^2.** The slip stiffnesses are identified
  only when the tire force varies (segments.py, "Identifiability of the slip stiffnesses"): one point of the
  slip-force curve is confounded with the drive-force offset of a not-yet-known rolling resistance, whose lever
  range (0.005-0.03 m) spans d_rr g / r = 0.5-0.8 m/s^2 of acceleration on 0.3-0.5 m tires; a 0.5 s mean
  forward acceleration spanning 1.0 m/s^2 is 1.25-2 x that. A passenger car's everyday launches span 1-1.5
  m/s^2 (the simulated sedan's daily drive: none reaches 1.5), and with the driveline inertia sampled beside Cx
  (calibration.py, ``stage_spec``) they converge and predict their held-back part (benchmarks/
  results/holdout_vehicles.md); the wrong slip stiffnesses the gentler windows gave before were fitted with the
  description's incomplete spin inertia.
* **Coast-down: speed >= 5 m/s and >= 0.2 m/s lost.** Rolling resistance decelerates a car by ~0.1-0.2 m/s^2
  (lever 0.0035-0.01 m on a 0.3-0.5 m radius); 0.2 m/s lost is 4 x the 0.05 m/s speed noise. Below ~5 m/s the
  wheel-speed-based slip of the 8-DOF model becomes ill-conditioned.
* **Rolling resistance with a measured wheel torque (``torque_source: measured``): any straight, unbraked stretch
  at speed.** The lever rr is identified by the force balance ``m du/dt = sum (T - rr F_z) / r - J dw/dt / r``:
  with the throttle released T = 0 (the coast-down above); with T measured it is known whatever the pedal does,
  so ordinary steady driving identifies rr just as well. What has to be large against the noise is then not the
  speed lost (which is rr's size, zero for a tire without rolling resistance) but how much rr moves the speed:
  ``du/d(rr) = g t / r``. The window's rolling-resistance sensitivity, the speed a 0.01 m lever (a typical
  passenger-car or light-truck tire, 0.008-0.015 x the rolling radius) takes off over its duration T,
  ``0.01 g T / r`` (:func:`rr_sensitivity`), must reach the same ``rr_min_speed_drop`` (0.2 m/s, 4 x the speed
  noise); on a 0.3-0.5 m tire that is 0.6-1.0 s, below the 2 s ``min_duration``, so a 2 s window resolves a
  lever difference of ~0.001 m to ~1 x the noise of one speed sample and ~14 x the noise of the window's mean.
  The brake stays released: an ECU's brake-torque estimate (pressure x gain, ~10-20 % uncertain on braking
  torques of 10^3 N m) errs by more than the whole rolling-resistance torque (rr F_z ~ 20-100 N m). And the speed
  stays steady, |du/dt| < ``rr_max_accel`` = 0.3 m/s^2 (1 s means): with the torque measured, rr = (sum T / r_l -
  m du/dt) r_l / (m g), so a relative error eps of the description's mass or lever mimics a lever of eps a r / g;
  at 5 % and 0.3 m/s^2 that is 0.0007 m (7 % of a typical 0.01 m lever), during a 3 m/s^2 launch 0.007 m, the
  size of rr itself (in a coast-down T = 0 and the mass cancels: rr = -a r / g).

:func:`excitation_failures` checks a whole segment and returns one message per failing quantity, each naming the
quantity, its value and the threshold in physical units (and nothing about quantities that passed). Numpy only;
no rclpy, nothing from estimation's higher modules.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields
from typing import Any

import numpy as np

from vehcal_ros.errors import InputError

LATERAL_ACCEL_SPAN = 0.5
"""s, centred span of the moving mean (and of the dv/dt difference) in :func:`lateral_acceleration`: it takes a
0.02 rad/s yaw-rate noise at 20 m/s (0.4 m/s^2 per sample at 100 Hz) down to ~0.06 m/s^2 and keeps a lane
change's 0.25 Hz lateral acceleration within 3 %."""

MAX_ROAD_WHEEL_ANGLE = 1.0
"""rad (57 deg), the plausibility bound of a road-wheel angle: above any road vehicle's steering lock (~35-45
deg); a larger converted angle means the description's steering map does not fit the data."""


def threshold(default: Any, unit: str, lo: float | None, hi: float | None, doc: str,
              choices: tuple[str, ...] | None = None) -> Any:
    """A dataclass field that declares one threshold: default, unit, inclusive range and meaning (the one place
    a threshold is declared; the model_calibrator's parameters, their ranges and the docs are generated from
    it)."""
    return field(default=default, metadata={"unit": unit, "lo": lo, "hi": hi, "doc": doc, "choices": choices})


def declared(cls: type) -> list[dict[str, Any]]:
    """The declarations of a dataclass built with :func:`threshold` fields, in field order: name, default, unit,
    lo, hi, doc, choices."""
    out = []
    for f in fields(cls):
        if "doc" not in f.metadata:
            continue
        out.append({"name": f.name, "default": f.default if f.default is not MISSING else None, **f.metadata})
    return out


def validate_declared(obj: Any, label: str) -> None:
    """Raise :class:`InputError` naming the first field of ``obj`` outside its declared range or choices."""
    for d in declared(type(obj)):
        v = getattr(obj, d["name"])
        if d["choices"]:
            if v not in d["choices"]:
                raise InputError(f"{label}: {d['name']} = {v!r} is not one of {', '.join(d['choices'])}")
            continue
        lo, hi = d["lo"], d["hi"]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(float(v)) or (
                lo is not None and hi is not None and not lo <= float(v) <= hi):
            raise InputError(f"{label}: {d['name']} = {v!r} is out of range [{lo:g}, {hi:g}] {d['unit']}")


@dataclass(frozen=True)
class StageThresholds:
    """The excitation each calibration stage needs, in physical units (module docstring: why these values)."""

    max_brake: float = threshold(0.02, "-", 0.0, 1.0, "brake pedal below this counts as released (0..1)")
    straight_max_road_wheel_angle: float = threshold(
        0.0044, "rad", 0.0, 0.5, "longitudinal and coast-down: a road-wheel angle of at most this (either way) counts "
        "as straight (0.25 deg: cornering drag < ~5 % of the rolling resistance)")
    long_min_throttle: float = threshold(0.05, "-", 0.0, 1.0, "longitudinal: throttle pedal above this counts as "
                                         "applied (0..1)")
    long_min_speed_gain: float = threshold(2.0, "m/s", 0.0, 100.0, "longitudinal: speed gained over the segment")
    long_min_start_speed: float = threshold(1.0, "m/s", 0.0, 100.0, "longitudinal: segments start once the speed "
                                            "(0.2 s mean) reaches this")
    long_min_accel_range: float = threshold(1.0, "m/s^2", 0.0, 20.0, "longitudinal: span (max - min) of the 0.5 s "
                                            "mean forward acceleration in the segment (a steady force does not "
                                            "identify Cx)")
    lat_min_speed: float = threshold(10.0, "m/s", 0.0, 100.0, "lateral: minimum speed")
    lat_min_road_wheel_angle: float = threshold(
        0.0044, "rad", 0.0, 0.5, "lateral: peak road-wheel angle (either way; the steering input through the "
        "vehicle description's steering map; 0.25 deg)")
    lat_min_lateral_accel: float = threshold(
        0.5, "m/s^2", 0.0, 20.0, "lateral: peak lateral acceleration u r + dv/dt (either way, 0.5 s mean): twice "
        "the 0.25 m/s^2 of a road's crossfall")
    lat_max_accel: float = threshold(2.0, "m/s^2", 0.0, 20.0, "lateral: forward acceleration (either way) at "
                                     "roughly steady speed")
    rr_min_speed: float = threshold(5.0, "m/s", 0.0, 100.0, "coast-down: minimum speed")
    rr_max_throttle: float = threshold(0.02, "-", 0.0, 1.0, "coast-down: throttle pedal below this counts as "
                                       "released (0..1)")
    rr_min_speed_drop: float = threshold(0.2, "m/s", 0.0, 100.0, "coast-down: speed lost over the segment; with a "
                                         "measured wheel torque: the speed a 0.01 m lever takes off over it")
    rr_max_accel: float = threshold(0.3, "m/s^2", 0.0, 20.0, "rolling resistance with a measured wheel torque: "
                                    "1 s mean forward acceleration (either way) at steady speed")


def deg(angle_rad: float) -> float:
    """rad -> deg."""
    return math.degrees(angle_rad)


def fmt_angle(angle_rad: float) -> str:
    """A road-wheel angle as ``0.0044 rad (0.252 deg)`` (3 significant digits each)."""
    return f"{angle_rad:.3g} rad ({deg(angle_rad):.3g} deg)"


def moving_mean(x: np.ndarray, k: int) -> np.ndarray:
    """Centred mean over ``2 k + 1`` samples, the edges over the samples available."""
    if k < 1 or x.size < 2:
        return np.asarray(x, dtype=float).copy()
    c = np.concatenate([[0.0], np.cumsum(x, dtype=float)])
    i = np.arange(x.size)
    lo, hi = np.maximum(i - k, 0), np.minimum(i + k + 1, x.size)
    return (c[hi] - c[lo]) / (hi - lo)


def lateral_acceleration(time: np.ndarray, u: np.ndarray, v: np.ndarray, yaw_rate: np.ndarray,
                         span: float = LATERAL_ACCEL_SPAN) -> np.ndarray:
    """Lateral acceleration of the body a_y = u r + dv/dt (m/s^2, + = left) from the body-frame speed ``u``
    (m/s), lateral velocity ``v`` (m/s) and yaw rate ``r`` (rad/s) on a uniform grid ``time`` (s); dv/dt by a
    central difference over ``span`` s, the sum averaged over ``span`` (:data:`LATERAL_ACCEL_SPAN`)."""
    t = np.asarray(time, dtype=float)
    u, v, r = (np.asarray(a, dtype=float) for a in (u, v, yaw_rate))
    if t.size < 3:
        return u * r
    dt = float(np.median(np.diff(t)))
    h = max(1, int(round(0.5 * span / dt)))
    dv = np.zeros_like(v)
    if v.size > 2 * h:
        dv[h:-h] = (v[2 * h:] - v[:-2 * h]) / (t[2 * h:] - t[:-2 * h])
        dv[:h], dv[-h:] = dv[h], dv[-h - 1]
    return moving_mean(u * r + dv, h)


def mean_accelerations(u: np.ndarray, rate: float, span: float = 0.5) -> np.ndarray:
    """Mean forward accelerations over every ``span`` s within a window (m/s^2) from the speed ``u`` (m/s) at
    ``rate`` (Hz); max - min is the spread of the tire force (``long_min_accel_range``)."""
    k = max(1, int(round(span * rate)))
    if u.size <= k:
        return np.array([(u[-1] - u[0]) * rate / max(u.size - 1, 1)])
    return (u[k:] - u[:-k]) * rate / k


RR_REFERENCE_LEVER = 0.01
"""m, the rolling-resistance lever whose effect on the speed makes a window's rolling-resistance sensitivity
(:func:`rr_sensitivity`): a typical tire's 0.008-0.015 x its rolling radius (Gillespie 1992, Ch. 4) on a
0.3-0.5 m tire is 0.0025-0.0075 m; 0.01 m is the order of the prior ranges' width (0-0.03 m)."""


def rr_sensitivity(duration: float, radius: float, gravity: float = 9.81) -> float:
    """m/s, the speed a :data:`RR_REFERENCE_LEVER` rolling-resistance lever takes off over ``duration`` (s) on a
    tire of rolling radius ``radius`` (m): ``0.01 g T / r``, i.e. ``du/d(rr)`` at the window's end times 0.01 m
    (the identifiability of rr from a window whose drive torque is measured; module docstring)."""
    return RR_REFERENCE_LEVER * gravity * max(duration, 0.0) / radius if radius > 0 else 0.0


def excitation_failures(stage: str, time: np.ndarray, throttle: np.ndarray, brake: np.ndarray,
                        road_wheel_angle: np.ndarray, measured: Mapping[str, np.ndarray],
                        thresholds: StageThresholds = StageThresholds(), *,
                        torque_measured: bool = False, radius: float = 0.0, gravity: float = 9.81) -> list[str]:
    """What a whole segment lacks for ``stage``: one message per failing quantity (value and threshold in
    physical units), [] when it qualifies. ``road_wheel_angle`` rad (the description's steering map applied);
    ``measured``: u, v, yaw_rate (m/s, m/s, rad/s) as the calibration segment carries them.
    ``torque_measured``: the segment carries the measured per-wheel torque and the description drives the model
    with it; the rolling-resistance stage then needs no released throttle and no speed lost, but a
    rolling-resistance sensitivity (:func:`rr_sensitivity` on the tire's rolling ``radius`` m, which it then
    needs: 0 gives no sensitivity) of at least ``rr_min_speed_drop`` (module docstring)."""
    c = thresholds
    t = np.asarray(time, dtype=float)
    u = np.asarray(measured["u"], dtype=float)
    delta = float(np.abs(road_wheel_angle).max()) if np.size(road_wheel_angle) else 0.0
    out: list[str] = []
    if stage == "longitudinal":
        thr = float(np.max(throttle))
        if thr < c.long_min_throttle:
            out.append(f"peak throttle {thr:.3f}, need >= {c.long_min_throttle:g}")
        gain = float(np.ptp(u))
        if gain < c.long_min_speed_gain:
            out.append(f"speed range {gain:.2f} m/s, need >= {c.long_min_speed_gain:g} m/s")
        rate = 1.0 / float(np.median(np.diff(t))) if t.size > 1 else 100.0
        acc = mean_accelerations(u, rate)
        spread = float(acc.max() - acc.min())
        if spread < c.long_min_accel_range:
            out.append(f"forward acceleration range {spread:.2f} m/s^2 (0.5 s means {acc.min():.2f} to "
                       f"{acc.max():.2f}), need >= {c.long_min_accel_range:g} m/s^2")
        if delta > c.straight_max_road_wheel_angle:
            out.append(f"not straight: peak road-wheel angle {fmt_angle(delta)}, need <= "
                       f"{fmt_angle(c.straight_max_road_wheel_angle)}")
    elif stage == "lateral":
        mean_u = float(u.mean())
        if mean_u < c.lat_min_speed:
            out.append(f"mean speed {mean_u:.1f} m/s, need >= {c.lat_min_speed:g} m/s")
        if delta < c.lat_min_road_wheel_angle:
            out.append(f"peak road-wheel angle {fmt_angle(delta)}, need >= {fmt_angle(c.lat_min_road_wheel_angle)}")
        if "v" in measured and "yaw_rate" in measured:
            ay = float(np.abs(lateral_acceleration(t, u, measured["v"], measured["yaw_rate"])).max())
            if ay < c.lat_min_lateral_accel:
                out.append(f"peak lateral acceleration {ay:.2f} m/s^2, need >= {c.lat_min_lateral_accel:g} m/s^2")
    elif stage == "rolling_resistance":
        thr, brk = float(np.max(throttle)), float(np.max(brake))
        if brk >= c.max_brake:
            out.append(f"peak brake {brk:.3f}, need < {c.max_brake:g} (released)")
        drop = float(u[0] - u[-1])
        released = f"peak throttle {thr:.3f}, need < {c.rr_max_throttle:g} (released)" \
            if thr >= c.rr_max_throttle else None
        lost = f"speed lost {drop:.2f} m/s, need >= {c.rr_min_speed_drop:g} m/s" \
            if drop < c.rr_min_speed_drop else None
        coast = [m for m in (released, lost) if m]   # the coast-down rule
        if torque_measured:   # steady driving with the drive torque known, or a coast-down
            steady = []
            rate = 1.0 / float(np.median(np.diff(t))) if t.size > 1 else 100.0
            acc = float(np.abs(mean_accelerations(u, rate, span=1.0)).max())
            if acc >= c.rr_max_accel:
                steady.append(f"not steady: 1 s mean forward acceleration up to {acc:.2f} m/s^2, need < "
                              f"{c.rr_max_accel:g} m/s^2")
            sens = rr_sensitivity(float(t[-1] - t[0]) if t.size else 0.0, radius, gravity)
            if sens < c.rr_min_speed_drop:
                steady.append(f"rolling-resistance sensitivity {sens:.2f} m/s (0.01 m lever over "
                              f"{float(t[-1] - t[0]) if t.size else 0.0:.2f} s), need >= {c.rr_min_speed_drop:g} m/s")
            if steady and coast:
                out.append("neither steady driving (" + "; ".join(steady) + ") nor a coast-down ("
                           + "; ".join(coast) + ")")
        else:
            out[:0] = [released] if released else []
            out.extend([lost] if lost else [])
        mean_u = float(u.mean())
        if mean_u < c.rr_min_speed:
            out.append(f"mean speed {mean_u:.1f} m/s, need >= {c.rr_min_speed:g} m/s")
        if delta > c.straight_max_road_wheel_angle:
            out.append(f"not straight: peak road-wheel angle {fmt_angle(delta)}, need <= "
                       f"{fmt_angle(c.straight_max_road_wheel_angle)}")
    else:
        raise InputError(f"unknown stage '{stage}'")
    return out


STAGE_NEED = {"longitudinal": "no longitudinal excitation", "lateral": "no lateral excitation",
              "rolling_resistance": "not a coast-down"}
"""The head of a stage's refusal message (followed by the failing quantities)."""


__all__ = ["StageThresholds", "threshold", "declared", "validate_declared", "lateral_acceleration",
           "mean_accelerations", "excitation_failures", "rr_sensitivity", "RR_REFERENCE_LEVER", "fmt_angle",
           "moving_mean", "STAGE_NEED", "LATERAL_ACCEL_SPAN", "MAX_ROAD_WHEEL_ANGLE"]
