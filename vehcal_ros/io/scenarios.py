"""Simulation scenarios: a strictly validated YAML schema, the ``Scenario`` record and the driver program.

A scenario file is one YAML mapping (field paths in errors start at ``scenario``)::

    name: throttle_ramp            # required
    description: ...               # optional
    duration: 12.0                 # s, required
    dt: 0.001                      # s, model step (default 1 ms)
    seed: 0                        # sensor-noise seed (the CLI's --seed overrides it)
    vehicle: sedan                 # simulated vehicle: hmmwv (default), sedan or a model file (--vehicle overrides)
    initial: {speed: 0.0, x: 0.0, y: 0.0, yaw: 0.0}
    origin: {latitude: 43.0722, longitude: -89.4008, altitude: 270.0}  # WGS-84 deg, deg, m: where world
                                   # (x, y, z) = (east, north, up) is 0 (the GNSS fix's reference; this default)
    driver:
      rate: 100                    # Hz at which the inputs are updated (held in between)
      file: ramp_steer.txt         # optional: driver file (time, steering, throttle, brake; linear between rows)
      throttle: [segments]         # per channel, segments in time order (or from the file, not both)
      brake: [segments]
      steering: [segments]
      speed_control:               # optional PI speed controller: drives throttle and brake inside [start, end)
        target: [segments]         # target speed, m/s (before the first segment: initial.speed)
        kp: 0.5                    # 1 / (m/s)
        ki: 0.1                    # 1 / m
        start: 0.0
        end: .inf
        coast: [{t0: 40, t1: 50}]  # optional: intervals inside [start, end) where it lets go (throttle 0, brake 0)
    road:
      default_mu: 0.9
      patches: [{name: wet, surface: wet, x0: 0, x1: 100, y0: -50, y1: 50}]  # rectangles, OR
      track: [{surface: dry, x0: -100, x1: 500}, {surface: wet, x0: 500, x1: 900}]  # contiguous along x
      grade: 0.0                   # rise over run along +x (0.05 = 5 % uphill towards +x), the whole road
    sensors:
      imu: {rate: 100, noise_std: {yaw_rate: 0.02, roll: 0.005}, bias: {ay: 0.05}, latency: 0.005}
      gnss: {rate: 10, noise_std: 0.05, latency: 0.1}   # ENU velocity (the defaults; on whenever odom is)
      gnss_fix: {rate: 10, noise_std: {east: 1.5, north: 1.5, up: 3.0}, latency: 0.1}  # NavSatFix position, m
                                 # (the defaults; when not given: on whenever gnss is, at gnss's rate and latency)
      # faults (none by default; models/sensors.py): wheel_speeds {torque_scale, quantisation_teeth,
      # quantisation_window, report_torque}, imu {misalignment_deg: [roll, pitch, yaw]}, gnss_fix {drift_std:
      # {east, north, up} m, drift_tau s}, any sensor {stamp_latency, stamp_jitter}
      drive_torque: {enabled: true}    # a production car's CAN: engine torque + gear, axle torques (off by default)
      brake_pressure: {enabled: true}  # brake line pressure per axle, Pa (off by default)

Segments: ``{type: step|hold, t0, value}``, ``{type: ramp, t0, t1, to, from?}``,
``{type: sine, t0, t1, amplitude, frequency, offset?, phase?}``, ``{type: knots, points: [[t, v], ...]}``
(linear between points). A channel holds its last value between segments and starts at 0 (the speed target
at ``initial.speed``); ``from`` and ``offset`` default to the value held before the segment. Surfaces:
dry 0.9, wet 0.6, snow 0.3, ice 0.15 (a patch's ``mu`` overrides). Any unknown key, wrong type, time going
backwards, inverted or overlapping patch, or gap in a track raises ``InputError`` naming the field path,
e.g. ``scenario.road.patches[2].x1: must be > x0 (= 40)``.

Vehicles: ``load_scenario(name, vehicle=V)`` runs the scenario on V; when V names a vehicle that has its own
version of a built-in scenario (``<vehicle>_<name>``, e.g. ``sedan_daily_driving`` for ``daily_driving``), that
version is loaded instead (the maneuvers scaled to that vehicle's power).
"""

from __future__ import annotations

import bisect
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from vehcal_ros.errors import InputError
from vehcal_ros.models.geodesy import Geodetic
from vehcal_ros.models.sensors import (
    DEFAULT_ORIGIN,
    DEFAULT_SENSORS,
    FULL_PEDAL_PRESSURE,
    SENSOR_CHANNELS,
    SensorSpec,
    period_steps,
)
from vehcal_ros.resources import resource_dirs, searched
from vehcal_ros.vehicle.description import (
    BAR_PA,
    CAN_TORQUE_SOURCES,
    VehicleDescription,
    description_from_dict,
    load_description,
    simulated_vehicle_description,
)

SURFACES: dict[str, float] = {"dry": 0.9, "wet": 0.6, "snow": 0.3, "ice": 0.15}
"""Named road surfaces -> peak friction coefficient."""

CHANNEL_RANGES: dict[str, tuple[float, float]] = {
    "throttle": (0.0, 1.0), "brake": (0.0, 1.0), "steering": (-1.0, 1.0), "target": (0.0, 100.0)}

_UNBOUNDED_Y = 1.0e6  # m: y extent of along-track intervals


# ---------------------------------------------------------------------------------------------------------
# records
# ---------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Segment:
    """One piece of a driver channel, fully resolved (``v0`` = start/offset value, ``v1`` = end value)."""

    kind: str                      # step | hold | ramp | sine | knots
    t0: float                      # s
    t1: float                      # s (== t0 for step/hold)
    v0: float = 0.0
    v1: float = 0.0
    amplitude: float = 0.0         # sine
    frequency: float = 0.0         # Hz, sine
    phase: float = 0.0             # rad, sine
    points: tuple[tuple[float, float], ...] = ()  # knots

    def value_at(self, t: float) -> float:
        if self.kind in ("step", "hold"):
            return self.v1
        if self.kind == "ramp":
            if t >= self.t1:
                return self.v1
            return self.v0 + (self.v1 - self.v0) * (t - self.t0) / (self.t1 - self.t0)
        if self.kind == "sine":
            if t >= self.t1:
                return self.v0
            return self.v0 + self.amplitude * math.sin(2.0 * math.pi * self.frequency * (t - self.t0) + self.phase)
        ts = [p[0] for p in self.points]
        vs = [p[1] for p in self.points]
        return float(np.interp(t, ts, vs))

    @property
    def end_value(self) -> float:
        if self.kind == "sine":
            return self.v0
        if self.kind == "knots":
            return self.points[-1][1]
        return self.v1


@dataclass(frozen=True)
class Channel:
    """A driver channel: ``initial`` before the first segment, then the segments in time order."""

    initial: float = 0.0
    segments: tuple[Segment, ...] = ()

    @cached_property
    def _starts(self) -> list[float]:
        return [s.t0 for s in self.segments]

    def value_at(self, t: float) -> float:
        i = bisect.bisect_right(self._starts, t) - 1
        if i < 0:
            return self.initial
        return self.segments[i].value_at(t)


@dataclass(frozen=True)
class SpeedControl:
    """PI speed controller (gains kp in 1/(m/s), ki in 1/m) active in [start, end) s, tracking ``target``."""

    target: Channel
    kp: float = 0.5
    ki: float = 0.1
    start: float = 0.0
    end: float = math.inf
    max_throttle: float = 1.0
    max_brake: float = 1.0
    coast: tuple[tuple[float, float], ...] = ()  # [t0, t1) s intervals where the controller lets go

    def engaged(self, t: float) -> bool:
        """True where the controller drives throttle and brake (inside [start, end), outside every coast)."""
        return self.start <= t < self.end and not any(c0 <= t < c1 for c0, c1 in self.coast)


@dataclass(frozen=True)
class DriverSpec:
    """Open-loop channels plus an optional speed controller; inputs are updated at ``rate`` Hz."""

    throttle: Channel = field(default_factory=Channel)
    brake: Channel = field(default_factory=Channel)
    steering: Channel = field(default_factory=Channel)
    speed_control: SpeedControl | None = None
    rate: float = 100.0
    source_file: str | None = None


@dataclass(frozen=True)
class PatchSpec:
    """A rectangle of road in world x-y (m) with peak friction ``mu``."""

    x0: float
    x1: float
    y0: float
    y1: float
    mu: float
    name: str = ""


@dataclass(frozen=True)
class RoadSpec:
    """Friction map: ``mu`` of the patch containing a point, else ``default_mu``."""

    patches: tuple[PatchSpec, ...] = ()
    default_mu: float = 0.9
    grade: float = 0.0   # rise over run along +x (0.05 = 5 % uphill towards +x); the whole road

    def mu_at(self, x: float, y: float) -> float:
        for p in self.patches:
            if p.x0 <= x < p.x1 and p.y0 <= y < p.y1:
                return p.mu
        return self.default_mu

    def to_road_map(self):
        """The 14-DOF model's ``RoadMap`` (imported lazily: the model may be absent in light tests)."""
        from vehcal_ros.models.vehicle14 import RoadMap, RoadPatch

        return RoadMap(patches=tuple(RoadPatch(p.x0, p.x1, p.y0, p.y1, p.mu, name=p.name) for p in self.patches),
                       default_mu=self.default_mu, grade=self.grade)


@dataclass(frozen=True)
class InitialState:
    speed: float = 0.0   # m/s
    x: float = 0.0       # m
    y: float = 0.0       # m
    yaw: float = 0.0     # rad


@dataclass(frozen=True)
class Scenario:
    """A validated scenario (see the module docstring for the YAML schema)."""

    name: str
    duration: float                                  # s
    dt: float = 0.001                                # s
    seed: int = 0
    description: str = ""
    initial: InitialState = field(default_factory=InitialState)
    driver: DriverSpec = field(default_factory=DriverSpec)
    road: RoadSpec = field(default_factory=RoadSpec)
    sensors: Mapping[str, SensorSpec] = field(default_factory=lambda: dict(DEFAULT_SENSORS))
    source: str = ""                                 # file it was loaded from
    vehicle: str = ""                                # simulated vehicle (name or model file); "" = hmmwv
    origin: Geodetic = DEFAULT_ORIGIN                # WGS-84 position of the world origin (deg, deg, m)

    def with_seed(self, seed: int) -> Scenario:
        from dataclasses import replace

        return replace(self, seed=int(seed))

    def without_sensor(self, name: str) -> Scenario:
        """The same scenario with sensor ``name`` disabled (e.g. ``tire_forces``: no force transducers)."""
        from dataclasses import replace

        if name not in self.sensors:
            raise InputError(f"unknown sensor {name!r} (sensors: {', '.join(self.sensors)})")
        sensors = dict(self.sensors)
        sensors[name] = replace(sensors[name], enabled=False)
        return replace(self, sensors=sensors)

    def with_sensor_fault(self, name: str, **fault: Any) -> Scenario:
        """The same scenario with sensor ``name``'s spec changed by ``fault``: any ``SensorSpec`` field (e.g.
        ``torque_scale=1.05``, ``quantisation_teeth=48``, ``misalignment_deg=(0, 1, 1)``, ``stamp_latency=0.02``,
        ``stamp_jitter=0.005``); ``bias`` and ``noise_std`` mappings are merged into the sensor's (e.g.
        ``bias={"torque": 50.0}`` N m, ``bias={"ax": 0.1, "ay": 0.1}`` m/s^2). InputError on an unknown sensor
        or field, or a fault the sensor does not take."""
        from dataclasses import fields, replace

        if name not in self.sensors:
            raise InputError(f"unknown sensor {name!r} (sensors: {', '.join(self.sensors)})")
        spec = self.sensors[name]
        known = {f.name for f in fields(spec)}
        fault_keys = {"torque_scale", "quantisation_teeth", "quantisation_window", "misalignment_deg", "drift_std",
                      "drift_tau", "stamp_latency", "stamp_jitter", "report_torque"}
        kw: dict[str, Any] = {}
        for key, value in fault.items():
            if key not in known:
                raise InputError(f"sensor {name!r}: unknown field {key!r} (fields: {', '.join(sorted(known))})")
            if key in fault_keys and key not in _fault_keys(name):
                raise InputError(f"sensor {name!r} does not take {key!r}")
            if key in ("bias", "noise_std", "drift_std"):
                bad = sorted(set(value) - set(SENSOR_CHANNELS[name]))
                if bad:
                    raise InputError(f"sensor {name!r}: unknown channel(s) {', '.join(bad)}")
                value = {**getattr(spec, key), **{k: float(x) for k, x in value.items()}}
            elif key == "misalignment_deg":
                value = tuple(float(a) for a in value)
                if len(value) != 3:
                    raise InputError(f"sensor {name!r}: misalignment_deg needs [roll, pitch, yaw] (deg)")
            kw[key] = value
        sensors = dict(self.sensors)
        sensors[name] = replace(spec, **kw)
        return replace(self, sensors=sensors)

    def with_can_torque(self) -> Scenario:
        """The same drive on a production car's sensors: the CAN drive torque and brake pressure on and no wheel
        torque in the wheel speeds (``JointState.effort`` empty; models/sensors.py). The other sensors' records
        are unchanged (each sensor has its own noise stream)."""
        sensors = dict(self.sensors)
        for key in ("drive_torque", "brake_pressure"):
            sensors[key] = replace(sensors[key], enabled=True)
        sensors["wheel_speeds"] = replace(sensors["wheel_speeds"], report_torque=False)
        return replace(self, sensors=sensors)

    def with_grade(self, grade: float) -> Scenario:
        """The same scenario on a road of ``grade`` (rise over run along +x, e.g. 0.05 = 5 % uphill)."""
        from dataclasses import replace

        g = float(grade)
        if not (math.isfinite(g) and -0.5 <= g <= 0.5):
            raise InputError(f"grade must be within [-0.5, 0.5], got {grade!r}")
        return replace(self, road=replace(self.road, grade=g))

    def with_vehicle(self, vehicle: str) -> Scenario:
        from dataclasses import replace

        return replace(self, vehicle=str(vehicle))


class DriverProgram:
    """Runs a ``DriverSpec``: ``inputs_at(t, state) -> (throttle, brake, steering)``.

    Holds the PI integrator, so make one per run (``DriverProgram(scenario.driver)``); call it with
    non-decreasing ``t``. ``state`` is a mapping with at least ``u`` (m/s), e.g. ``sim.outputs()``.
    """

    def __init__(self, spec: DriverSpec) -> None:
        self.spec = spec
        self.reset()

    def reset(self) -> None:
        self._integral = 0.0
        self._t_last: float | None = None

    def inputs_at(self, t: float, state: Mapping[str, Any] | None = None) -> tuple[float, float, float]:
        spec = self.spec
        steering = spec.steering.value_at(t)
        sc = spec.speed_control
        if sc is not None and sc.engaged(t):
            if state is None:
                raise ValueError("the speed controller needs the vehicle state (u)")
            err = sc.target.value_at(t) - float(state["u"])
            dt = 0.0 if self._t_last is None else max(0.0, t - self._t_last)
            self._t_last = t
            cmd = sc.kp * err + sc.ki * self._integral
            saturated = (cmd > sc.max_throttle and err > 0) or (cmd < -sc.max_brake and err < 0)
            if not saturated:  # conditional integration: no wind-up while an actuator is at its limit
                self._integral += err * dt
                cmd = sc.kp * err + sc.ki * self._integral
            if cmd >= 0.0:
                return min(cmd, sc.max_throttle), 0.0, steering
            return 0.0, min(-cmd, sc.max_brake), steering
        self._t_last = None
        return spec.throttle.value_at(t), spec.brake.value_at(t), steering


# ---------------------------------------------------------------------------------------------------------
# loading and validation
# ---------------------------------------------------------------------------------------------------------
class _V:
    """Validation helpers bound to one file: every error names the file and the field path."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, path: str, msg: str) -> InputError:
        return InputError(f"{self.source}: {path}: {msg}")

    def mapping(self, v: Any, path: str, allowed: set[str], required: set[str] = frozenset()) -> dict:
        if not isinstance(v, dict):
            raise self.fail(path, f"must be a mapping, got {type(v).__name__}")
        for k in v:
            if k not in allowed:
                raise self.fail(f"{path}.{k}", f"unknown key (allowed: {', '.join(sorted(allowed))})")
        for k in sorted(required):
            if k not in v:
                raise self.fail(f"{path}.{k}", "required key is missing")
        return v

    def number(self, v: Any, path: str, lo: float | None = None, hi: float | None = None,
               lo_open: bool = False, allow_inf: bool = False) -> float:
        if isinstance(v, str) and v.strip().lower() in (".inf", "inf") and allow_inf:
            return math.inf
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise self.fail(path, f"must be a number, got {v!r}")
        x = float(v)
        if math.isnan(x) or (math.isinf(x) and not allow_inf):
            raise self.fail(path, f"must be finite, got {v!r}")
        if lo is not None and (x < lo or (lo_open and x <= lo)):
            top = hi if hi is not None else "inf"
            rng = f"({lo}, {top}]" if lo_open else f"[{lo}, {top}]"
            raise self.fail(path, f"{x:g} is out of range {rng}")
        if hi is not None and x > hi:
            raise self.fail(path, f"{x:g} is out of range [{lo if lo is not None else '-inf'}, {hi}]")
        return x

    def integer(self, v: Any, path: str, lo: int = 0, hi: int = 2**63 - 1) -> int:
        if isinstance(v, bool) or not isinstance(v, int):
            raise self.fail(path, f"must be an integer, got {v!r}")
        if not lo <= v <= hi:
            raise self.fail(path, f"{v} is out of range [{lo}, {hi}]")
        return int(v)

    def string(self, v: Any, path: str, choices: tuple[str, ...] | None = None) -> str:
        if not isinstance(v, str):
            raise self.fail(path, f"must be a string, got {v!r}")
        if choices is not None and v not in choices:
            raise self.fail(path, f"{v!r} is not one of {', '.join(choices)}")
        return v

    def boolean(self, v: Any, path: str) -> bool:
        if not isinstance(v, bool):
            raise self.fail(path, f"must be true or false, got {v!r}")
        return v

    def seq(self, v: Any, path: str) -> list:
        if not isinstance(v, list):
            raise self.fail(path, f"must be a list, got {type(v).__name__}")
        return v


_SEGMENT_KEYS = {
    "step": ({"type", "t0", "value"}, {"type", "t0", "value"}),
    "hold": ({"type", "t0", "t1", "value"}, {"type", "t0", "value"}),
    "ramp": ({"type", "t0", "t1", "from", "to"}, {"type", "t0", "t1", "to"}),
    "sine": ({"type", "t0", "t1", "amplitude", "frequency", "offset", "phase"},
             {"type", "t0", "t1", "amplitude", "frequency"}),
    "knots": ({"type", "points"}, {"type", "points"}),
}


def _channel(v: _V, raw: Any, path: str, name: str, initial: float = 0.0) -> Channel:
    lo, hi = CHANNEL_RANGES[name]
    segs: list[Segment] = []
    held = initial
    t_end = -math.inf
    for i, item in enumerate(v.seq(raw, path)):
        p = f"{path}[{i}]"
        if not isinstance(item, dict):
            raise v.fail(p, f"must be a mapping with a 'type', got {item!r}")
        kind = v.string(item.get("type"), f"{p}.type", tuple(_SEGMENT_KEYS))
        allowed, required = _SEGMENT_KEYS[kind]
        v.mapping(item, p, allowed, required)
        if kind == "knots":
            pts = v.seq(item["points"], f"{p}.points")
            if len(pts) < 2:
                raise v.fail(f"{p}.points", "needs at least 2 [t, value] points")
            parsed = []
            for j, pt in enumerate(pts):
                if not isinstance(pt, list) or len(pt) != 2:
                    raise v.fail(f"{p}.points[{j}]", f"must be [t, value], got {pt!r}")
                tj = v.number(pt[0], f"{p}.points[{j}][0]", 0.0)
                vj = v.number(pt[1], f"{p}.points[{j}][1]", lo, hi)
                if parsed and tj <= parsed[-1][0]:
                    raise v.fail(f"{p}.points[{j}][0]", f"times must increase (previous {parsed[-1][0]:g})")
                parsed.append((tj, vj))
            t0, t1 = parsed[0][0], parsed[-1][0]
            if t0 < t_end:
                raise v.fail(f"{p}.points[0][0]", f"must be >= the previous segment's end ({t_end:g})")
            seg = Segment("knots", t0, t1, points=tuple(parsed))
        else:
            t0 = v.number(item["t0"], f"{p}.t0", 0.0)
            if t0 < t_end:
                raise v.fail(f"{p}.t0", f"must be >= the previous segment's end ({t_end:g})")
            t1 = t0
            if "t1" in item:
                t1 = v.number(item["t1"], f"{p}.t1", 0.0)
                if t1 <= t0:
                    raise v.fail(f"{p}.t1", f"must be > t0 (= {t0:g})")
            if kind in ("step", "hold"):
                val = v.number(item["value"], f"{p}.value", lo, hi)
                seg = Segment(kind, t0, t1, v0=held, v1=val)
            elif kind == "ramp":
                v0 = v.number(item["from"], f"{p}.from", lo, hi) if "from" in item else held
                seg = Segment(kind, t0, t1, v0=v0, v1=v.number(item["to"], f"{p}.to", lo, hi))
            else:  # sine
                off = v.number(item["offset"], f"{p}.offset", lo, hi) if "offset" in item else held
                amp = v.number(item["amplitude"], f"{p}.amplitude", 0.0)
                if off - amp < lo - 1e-12 or off + amp > hi + 1e-12:
                    raise v.fail(f"{p}.amplitude", f"offset {off:g} +- {amp:g} leaves the range [{lo:g}, {hi:g}]")
                seg = Segment(kind, t0, t1, v0=off, amplitude=amp,
                              frequency=v.number(item["frequency"], f"{p}.frequency", 0.0, 1000.0, lo_open=True),
                              phase=v.number(item.get("phase", 0.0), f"{p}.phase"))
        segs.append(seg)
        held = seg.end_value
        t_end = seg.t1
    return Channel(initial=initial, segments=tuple(segs))


def read_driver_file(path: str | os.PathLike) -> tuple[Channel, Channel, Channel]:
    """Channels (throttle, brake, steering) from a driver file of the 8-DOF paper's data.

    Rows ``time steering throttle brake`` (whitespace separated, ``#`` comments), linear between rows,
    first/last row held before/after. InputError names the file and the line of a bad row.
    """
    path = Path(path)
    rows: list[tuple[float, float, float, float]] = []
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise InputError(f"driver file not found: {path}") from None
    except (IsADirectoryError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: not a readable text driver file ({exc.__class__.__name__})") from None
    for n, line in enumerate(text.splitlines(), start=1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.replace(",", " ").split()
        try:
            vals = [float(x) for x in parts]
        except ValueError:
            raise InputError(f"{path}:{n}: expected 4 numbers (time steering throttle brake), got {line!r}") from None
        if len(vals) != 4 or not all(math.isfinite(x) for x in vals):
            raise InputError(f"{path}:{n}: expected 4 finite numbers (time steering throttle brake), got {line!r}")
        t, st, th, br = vals
        if rows and t <= rows[-1][0]:
            raise InputError(f"{path}:{n}: time {t:g} is not after the previous row's {rows[-1][0]:g}")
        if not (0 <= th <= 1 and 0 <= br <= 1 and -1 <= st <= 1):
            raise InputError(f"{path}:{n}: throttle/brake must be in [0, 1] and steering in [-1, 1]")
        rows.append((t, st, th, br))
    if len(rows) < 2:
        raise InputError(f"{path}: a driver file needs at least 2 rows (time steering throttle brake)")

    def chan(col: int) -> Channel:
        pts = tuple((r[0], r[col]) for r in rows)
        return Channel(initial=pts[0][1], segments=(Segment("knots", pts[0][0], pts[-1][0], points=pts),))

    return chan(2), chan(3), chan(1)


def _driver(v: _V, raw: Any, base_dir: Path, initial_speed: float, dt: float) -> DriverSpec:
    p = "scenario.driver"
    v.mapping(raw, p, {"rate", "file", "throttle", "brake", "steering", "speed_control"})
    rate = v.number(raw.get("rate", 100.0), f"{p}.rate", 0.0, 1.0 / dt + 1e-9, lo_open=True)
    try:
        period_steps(rate, dt)
    except ValueError as exc:
        raise v.fail(f"{p}.rate", str(exc)) from None
    source_file = None
    if "file" in raw:
        fpath = Path(v.string(raw["file"], f"{p}.file"))
        if not fpath.is_absolute():
            fpath = base_dir / fpath
        clash = [k for k in ("throttle", "brake", "steering") if k in raw]
        if clash:
            raise v.fail(f"{p}.{clash[0]}", "give the channels either in 'file' or as segments, not both")
        throttle, brake, steering = read_driver_file(fpath)
        source_file = str(fpath)
    else:
        throttle = _channel(v, raw.get("throttle", []), f"{p}.throttle", "throttle")
        brake = _channel(v, raw.get("brake", []), f"{p}.brake", "brake")
        steering = _channel(v, raw.get("steering", []), f"{p}.steering", "steering")
    sc = None
    if "speed_control" in raw:
        q = f"{p}.speed_control"
        s = v.mapping(raw["speed_control"], q, {"target", "kp", "ki", "start", "end", "max_throttle", "max_brake",
                                                "coast"}, {"target"})
        start = v.number(s.get("start", 0.0), f"{q}.start", 0.0)
        end = v.number(s.get("end", math.inf), f"{q}.end", 0.0, allow_inf=True)
        if end <= start:
            raise v.fail(f"{q}.end", f"must be > start (= {start:g})")
        sc = SpeedControl(target=_channel(v, s["target"], f"{q}.target", "target", initial=initial_speed),
                          kp=v.number(s.get("kp", 0.5), f"{q}.kp", 0.0, 100.0),
                          ki=v.number(s.get("ki", 0.1), f"{q}.ki", 0.0, 100.0),
                          start=start, end=end,
                          max_throttle=v.number(s.get("max_throttle", 1.0), f"{q}.max_throttle", 0.0, 1.0),
                          max_brake=v.number(s.get("max_brake", 1.0), f"{q}.max_brake", 0.0, 1.0),
                          coast=_coast(v, s.get("coast", []), f"{q}.coast"))
    return DriverSpec(throttle=throttle, brake=brake, steering=steering, speed_control=sc, rate=rate,
                      source_file=source_file)


def _coast(v: _V, raw: Any, path: str) -> tuple[tuple[float, float], ...]:
    """Coast intervals ``[{t0, t1}, ...]``: in time order, not overlapping."""
    out: list[tuple[float, float]] = []
    for i, item in enumerate(v.seq(raw, path)):
        p = f"{path}[{i}]"
        v.mapping(item, p, {"t0", "t1"}, {"t0", "t1"})
        t0 = v.number(item["t0"], f"{p}.t0", 0.0)
        t1 = v.number(item["t1"], f"{p}.t1", 0.0)
        if t1 <= t0:
            raise v.fail(f"{p}.t1", f"must be > t0 (= {t0:g})")
        if out and t0 < out[-1][1]:
            raise v.fail(f"{p}.t0", f"must be >= the previous interval's end ({out[-1][1]:g})")
        out.append((t0, t1))
    return tuple(out)


def _mu(v: _V, item: dict, p: str) -> tuple[float, str]:
    surface = v.string(item["surface"], f"{p}.surface", tuple(SURFACES)) if "surface" in item else None
    if "mu" in item:
        mu = v.number(item["mu"], f"{p}.mu", 0.0, 2.0, lo_open=True)
    elif surface is not None:
        mu = SURFACES[surface]
    else:
        raise v.fail(f"{p}.mu", "give 'mu' or a 'surface' (" + ", ".join(f"{k} {m}" for k, m in SURFACES.items()) + ")")
    name = v.string(item["name"], f"{p}.name") if "name" in item else (surface or "")
    return mu, name


def _road(v: _V, raw: Any) -> RoadSpec:
    p = "scenario.road"
    v.mapping(raw, p, {"default_mu", "patches", "track", "grade"})
    default_mu = v.number(raw.get("default_mu", 0.9), f"{p}.default_mu", 0.0, 2.0, lo_open=True)
    grade = v.number(raw.get("grade", 0.0), f"{p}.grade", -0.5, 0.5)
    if "patches" in raw and "track" in raw:
        raise v.fail(f"{p}.track", "give either 'patches' (rectangles) or 'track' (intervals along x), not both")
    patches: list[PatchSpec] = []
    if "patches" in raw:
        for i, item in enumerate(v.seq(raw["patches"], f"{p}.patches")):
            q = f"{p}.patches[{i}]"
            v.mapping(item, q, {"name", "surface", "mu", "x0", "x1", "y0", "y1"}, {"x0", "x1"})
            x0 = v.number(item["x0"], f"{q}.x0")
            x1 = v.number(item["x1"], f"{q}.x1")
            if x1 <= x0:
                raise v.fail(f"{q}.x1", f"must be > x0 (= {x0:g})")
            y0 = v.number(item.get("y0", -_UNBOUNDED_Y), f"{q}.y0")
            y1 = v.number(item.get("y1", _UNBOUNDED_Y), f"{q}.y1")
            if y1 <= y0:
                raise v.fail(f"{q}.y1", f"must be > y0 (= {y0:g})")
            mu, name = _mu(v, item, q)
            new = PatchSpec(x0, x1, y0, y1, mu, name)
            for j, old in enumerate(patches):
                if new.x0 < old.x1 and old.x0 < new.x1 and new.y0 < old.y1 and old.y0 < new.y1:
                    raise v.fail(q, f"overlaps {p}.patches[{j}]" + (f" ({old.name!r})" if old.name else ""))
            patches.append(new)
    elif "track" in raw:
        items = v.seq(raw["track"], f"{p}.track")
        if not items:
            raise v.fail(f"{p}.track", "must list at least one interval")
        for i, item in enumerate(items):
            q = f"{p}.track[{i}]"
            v.mapping(item, q, {"name", "surface", "mu", "x0", "x1"}, {"x0", "x1"})
            x0 = v.number(item["x0"], f"{q}.x0")
            x1 = v.number(item["x1"], f"{q}.x1")
            if x1 <= x0:
                raise v.fail(f"{q}.x1", f"must be > x0 (= {x0:g})")
            if patches:
                prev = patches[-1].x1
                if x0 > prev:
                    raise v.fail(f"{q}.x0", f"gap: the previous interval ends at x1 = {prev:g}")
                if x0 < prev:
                    raise v.fail(f"{q}.x0", f"overlaps the previous interval (which ends at x1 = {prev:g})")
            mu, name = _mu(v, item, q)
            patches.append(PatchSpec(x0, x1, -_UNBOUNDED_Y, _UNBOUNDED_Y, mu, name))
    return RoadSpec(patches=tuple(patches), default_mu=default_mu, grade=grade)


def _per_channel(v: _V, raw: Any, path: str, sensor: str, lo: float | None) -> dict[str, float]:
    channels = SENSOR_CHANNELS[sensor]
    if isinstance(raw, dict):
        out = {}
        for k, x in raw.items():
            if k not in channels:
                raise v.fail(f"{path}.{k}", f"unknown channel of sensor '{sensor}' (channels: "
                                            f"{', '.join(channels) or 'none'})")
            out[k] = v.number(x, f"{path}.{k}", lo)
        return out
    x = v.number(raw, path, lo)
    if x != 0.0 and not channels:
        raise v.fail(path, f"sensor '{sensor}' has no noisy channels")
    return {k: x for k in channels}


SENSOR_FAULT_KEYS: dict[str, tuple[str, ...]] = {
    "wheel_speeds": ("torque_scale", "quantisation_teeth", "quantisation_window", "report_torque"),
    "imu": ("misalignment_deg",),
    "gnss_fix": ("drift_std", "drift_tau"),
}
"""Sensor -> the fault keys only it accepts; ``stamp_latency`` and ``stamp_jitter`` go on any sensor but ``clock``
(models/sensors.py describes each fault)."""


def _fault_keys(sensor: str) -> set[str]:
    keys = set(SENSOR_FAULT_KEYS.get(sensor, ()))
    if sensor != "clock":
        keys |= {"stamp_latency", "stamp_jitter"}
    return keys


def _faults(v: _V, item: Mapping[str, Any], q: str) -> dict[str, Any]:
    """The fault fields of one sensor's mapping (only those given; the ``SensorSpec`` defaults are none)."""
    out: dict[str, Any] = {}
    if "drift_std" in item:
        out["drift_std"] = _per_channel(v, item["drift_std"], f"{q}.drift_std", q.rsplit(".", 1)[-1], 0.0)
    if "drift_tau" in item:
        out["drift_tau"] = v.number(item["drift_tau"], f"{q}.drift_tau", 0.0, 1.0e5, lo_open=True)
    if "torque_scale" in item:
        out["torque_scale"] = v.number(item["torque_scale"], f"{q}.torque_scale", 0.0, 10.0, lo_open=True)
    if "quantisation_teeth" in item:
        out["quantisation_teeth"] = v.integer(item["quantisation_teeth"], f"{q}.quantisation_teeth", 0, 100000)
    if "report_torque" in item:
        out["report_torque"] = v.boolean(item["report_torque"], f"{q}.report_torque")
    if "quantisation_window" in item:
        out["quantisation_window"] = v.number(item["quantisation_window"], f"{q}.quantisation_window", 0.0, 10.0)
    if "misalignment_deg" in item:
        angles = v.seq(item["misalignment_deg"], f"{q}.misalignment_deg")
        if len(angles) != 3:
            raise v.fail(f"{q}.misalignment_deg", f"must list 3 angles [roll, pitch, yaw] (deg), got {len(angles)}")
        out["misalignment_deg"] = tuple(v.number(a, f"{q}.misalignment_deg[{i}]", -45.0, 45.0)
                                        for i, a in enumerate(angles))
    if "stamp_latency" in item:
        out["stamp_latency"] = v.number(item["stamp_latency"], f"{q}.stamp_latency", 0.0, 10.0)
    if "stamp_jitter" in item:
        out["stamp_jitter"] = v.number(item["stamp_jitter"], f"{q}.stamp_jitter", 0.0, 1.0)
        if out["stamp_jitter"] > out.get("stamp_latency", 0.0):
            raise v.fail(f"{q}.stamp_jitter", "must not exceed stamp_latency (a stamp never runs ahead of its data)")
    return out


def _sensors(v: _V, raw: Any, dt: float) -> dict[str, SensorSpec]:
    p = "scenario.sensors"
    v.mapping(raw, p, set(SENSOR_CHANNELS))
    out = dict(DEFAULT_SENSORS)
    for name, item in raw.items():
        q = f"{p}.{name}"
        v.mapping(item, q, {"rate", "noise_std", "bias", "latency", "enabled"} | _fault_keys(name))
        base = DEFAULT_SENSORS[name]
        rate = v.number(item.get("rate", base.rate), f"{q}.rate", 0.0, 1.0 / dt + 1e-9, lo_open=True)
        try:
            period_steps(rate, dt)
        except ValueError as exc:
            raise v.fail(f"{q}.rate", str(exc)) from None
        noise = _per_channel(v, item.get("noise_std", {}), f"{q}.noise_std", name, 0.0)
        if isinstance(item.get("noise_std", {}), dict):   # named channels override the default's, others keep it
            noise = {**base.noise_std, **noise}
        out[name] = SensorSpec(
            rate=rate,
            noise_std=noise,
            bias=_per_channel(v, item.get("bias", {}), f"{q}.bias", name, None),
            latency=v.number(item.get("latency", base.latency), f"{q}.latency", 0.0, 10.0),
            enabled=v.boolean(item.get("enabled", True), f"{q}.enabled"),
            **_faults(v, item, q))
    if "gnss" not in raw:   # a vehicle with odometry has a GNSS receiver too, unless the scenario says otherwise
        out["gnss"] = replace(DEFAULT_SENSORS["gnss"], enabled=out["odom"].enabled)
    if "gnss_fix" not in raw:   # the same receiver's position: with its velocity, at its rate and latency
        gnss = out["gnss"]
        out["gnss_fix"] = replace(DEFAULT_SENSORS["gnss_fix"], enabled=gnss.enabled, rate=gnss.rate,
                                  latency=gnss.latency)
    return out


def _origin(v: _V, raw: Any) -> Geodetic:
    """``scenario.origin``: {latitude, longitude (deg), altitude (m, ellipsoidal)}; omitted fields default to
    ``DEFAULT_ORIGIN``'s."""
    p = "scenario.origin"
    v.mapping(raw, p, {"latitude", "longitude", "altitude"})
    return Geodetic(latitude=v.number(raw.get("latitude", DEFAULT_ORIGIN.latitude), f"{p}.latitude", -90.0, 90.0),
                    longitude=v.number(raw.get("longitude", DEFAULT_ORIGIN.longitude), f"{p}.longitude",
                                       -180.0, 180.0),
                    altitude=v.number(raw.get("altitude", DEFAULT_ORIGIN.altitude), f"{p}.altitude",
                                      -11000.0, 100000.0))


def parse_scenario(data: Any, source: str = "<scenario>", base_dir: str | os.PathLike = ".") -> Scenario:
    """Validate a scenario mapping (as loaded from YAML) and build the ``Scenario``."""
    v = _V(source)
    p = "scenario"
    v.mapping(data, p, {"name", "description", "duration", "dt", "seed", "initial", "driver", "road", "sensors",
                        "vehicle", "origin"}, {"name", "duration"})
    name = v.string(data["name"], f"{p}.name")
    if not name.strip():
        raise v.fail(f"{p}.name", "must not be empty")
    dt = v.number(data.get("dt", 0.001), f"{p}.dt", 1e-5, 0.01)
    duration = v.number(data["duration"], f"{p}.duration", 0.0, 86400.0, lo_open=True)
    if duration < dt:
        raise v.fail(f"{p}.duration", f"must be at least one step (dt = {dt:g})")
    seed = v.integer(data.get("seed", 0), f"{p}.seed", 0, 2**32 - 1)
    ini_raw = v.mapping(data.get("initial", {}), f"{p}.initial", {"speed", "x", "y", "yaw"})
    initial = InitialState(speed=v.number(ini_raw.get("speed", 0.0), f"{p}.initial.speed", 0.0, 100.0),
                           x=v.number(ini_raw.get("x", 0.0), f"{p}.initial.x"),
                           y=v.number(ini_raw.get("y", 0.0), f"{p}.initial.y"),
                           yaw=v.number(ini_raw.get("yaw", 0.0), f"{p}.initial.yaw", -math.pi, math.pi))
    driver = _driver(v, data.get("driver", {}), Path(base_dir), initial.speed, dt)
    road = _road(v, data.get("road", {}))
    sensors = _sensors(v, data.get("sensors", {}), dt)
    origin = _origin(v, data.get("origin", {}))
    desc = v.string(data.get("description", ""), f"{p}.description")
    vehicle = v.string(data.get("vehicle", ""), f"{p}.vehicle")
    if vehicle.endswith((".yaml", ".yml")) and not Path(vehicle).is_absolute():
        vehicle = str(Path(base_dir) / vehicle)
    return Scenario(name=name, duration=duration, dt=dt, seed=seed, description=desc, initial=initial,
                    driver=driver, road=road, sensors=sensors, source=source, vehicle=vehicle, origin=origin)


def scenario_dirs() -> list[Path]:
    """Where built-in scenarios are looked up: ``config/scenarios`` of the package's share folder (ament index on
    a ROS 2 install, the source tree, ``sys.prefix/share``; :mod:`vehcal_ros.resources`)."""
    return resource_dirs("config", "scenarios")


def builtin_scenarios() -> dict[str, Path]:
    """Built-in scenario name -> file."""
    out: dict[str, Path] = {}
    for d in scenario_dirs():
        if d.is_dir():
            for f in sorted(d.glob("*.yaml")):
                out.setdefault(f.stem, f)
    return out


def resolve_scenario_path(path_or_name: str | os.PathLike) -> Path:
    """A scenario file path, or the file of a built-in scenario name (``daily_driving``)."""
    p = Path(path_or_name)
    if p.is_file():
        return p
    if p.is_dir():
        raise InputError(f"{p}: is a directory, expected a scenario YAML file")
    builtins = builtin_scenarios()
    key = p.name[:-5] if p.name.endswith(".yaml") and len(p.parts) == 1 else str(path_or_name)
    if key in builtins:
        return builtins[key]
    raise InputError(f"no such scenario file or built-in scenario: {path_or_name} "
                     f"(built-ins: {', '.join(builtins) or 'none found in ' + searched('config', 'scenarios')})")


def vehicle_scenario_name(name: str | os.PathLike, vehicle: str | os.PathLike | None) -> str | os.PathLike:
    """The built-in ``<vehicle>_<name>`` version of scenario ``name`` when ``vehicle`` has one, else ``name``.

    A variant name falls back to its base (``sedan_zero_bump_steer`` -> ``sedan_<name>``)."""
    if not vehicle or Path(name).is_file():
        return name
    key = str(name)[:-5] if str(name).endswith(".yaml") else str(name)
    parts = Path(str(vehicle)).stem.split("_")
    builtins = builtin_scenarios()
    for n in range(len(parts), 0, -1):
        stem = "_".join(parts[:n])
        if key.startswith(f"{stem}_"):
            return name
        if f"{stem}_{key}" in builtins:
            return f"{stem}_{key}"
    return name


def simulated_description(scenario: str | os.PathLike, vehicle: str | os.PathLike | None = None) -> str | None:
    """The shipped vehicle description of the vehicle the built-in simulator drives in ``scenario``: its
    ``vehicle`` parameter if set, else the scenario's ``vehicle``, else the simulator's default model, through
    :func:`vehcal_ros.vehicle.description.simulated_vehicle_description` (``hmmwv`` -> ``hmmwv_sim``). None when
    that vehicle has no shipped description (a model file): the user names one. InputError for a bad scenario."""
    from vehcal_ros.models.vehicle14.params import DEFAULT_MODEL  # the simulator package, loaded on use

    return simulated_vehicle_description(str(load_scenario(scenario, vehicle=vehicle or None).vehicle or DEFAULT_MODEL))


def can_description(vehicle: str | os.PathLike | VehicleDescription, drive: str) -> VehicleDescription:
    """The description ``vehicle`` of a simulated car as read through its CAN signals (:meth:`Scenario.
    with_can_torque`): ``torque_source`` ``drive`` (``engine`` or ``axle``) and the brake gains of the simulated
    brakes, their torque at full pedal over :data:`~vehcal_ros.models.sensors.FULL_PEDAL_PRESSURE` (N m per
    bar). InputError for another ``drive`` or one the vehicle lacks the data for (``engine`` without gears)."""
    desc = load_description(vehicle)
    if drive not in CAN_TORQUE_SOURCES:
        raise InputError(f"drive = {drive!r}: expected {' or '.join(CAN_TORQUE_SOURCES)}")
    doc = desc.to_dict()
    doc["torque_source"] = drive
    bar = FULL_PEDAL_PRESSURE / BAR_PA
    doc["brakes"]["pressure_gain_front"] = desc.brake_front / bar
    doc["brakes"]["pressure_gain_rear"] = desc.brake_rear / bar
    return description_from_dict(doc, f"{desc.name}_{drive}_can")


def load_scenario(path_or_name: str | os.PathLike, vehicle: str | os.PathLike | None = None) -> Scenario:
    """Load and validate a scenario YAML file or built-in name; InputError names the file and field.

    ``vehicle`` (a simulator vehicle name or model file) overrides the scenario's ``vehicle``; a built-in name
    then resolves to the vehicle's own version when there is one (:func:`vehicle_scenario_name`).
    """
    if vehicle:
        scenario = load_scenario(vehicle_scenario_name(path_or_name, vehicle))
        return scenario.with_vehicle(str(vehicle))
    path = resolve_scenario_path(path_or_name)
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        raise InputError(f"{path}: not valid YAML{where}") from None
    except UnicodeDecodeError:
        raise InputError(f"{path}: not a text (YAML) file") from None
    if data is None:
        raise InputError(f"{path}: empty scenario file")
    return parse_scenario(data, source=str(path), base_dir=path.parent)
