"""Vehicle description: everything the estimators take as known about one vehicle.

One YAML file per vehicle, ``config/vehicles/<name>.yaml`` (schema, field by field: docs/vehicle_description.md),
loaded into a frozen :class:`VehicleDescription` by :func:`load_description`. The package ships ``hmmwv`` (the 8-DOF
paper's numbers, the default) and ``sedan`` (Project Chrono's Sedan). The 8-DOF model
(:mod:`vehcal_ros.models.vehicle_8dof`) and the calibration stages take their constants, powertrain, brake and
steering maps, prior ranges and nominal parameter values from it.

Validation: a missing or invalid field is one :class:`~vehcal_ros.errors.InputError` line naming the field (its
YAML path), the expected unit and range. Prior ranges and nominal values the file does not give are derived from
the static axle loads (:func:`derived_priors`). Nothing here imports rclpy.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from vehcal_ros.errors import InputError
from vehcal_ros.resources import find_resource, resource_dirs, searched

DEFAULT_VEHICLE = "hmmwv"
RPM = math.pi / 30.0
"""rad/s per rpm."""

CALIBRATED = ("Cxf", "Cxr", "Cyf", "Cyr", "kphi_f", "kphi_r", "bphi", "rr", "Jd")
"""Parameters with a uniform prior range (``bphi`` = total roll damping, split equally front/rear; ``Jd`` = the
driveline spin inertia lumped into each driven wheel)."""
NOMINAL_NAMES = ("Cxf", "Cxr", "Cyf", "Cyr", "kphi_f", "kphi_r", "bphi_f", "bphi_r", "rr", "Jd")
STAGES = ("longitudinal", "lateral", "rolling_resistance")

# (dataclass field, YAML path, unit, lower, upper, default or None = required); bounds inclusive unless noted
_SCALARS: tuple[tuple[str, str, str, float, float, float | None], ...] = (
    ("g", "gravity", "m/s^2", 9.0, 10.5, 9.81),
    ("m", "mass.sprung", "kg", 1.0, 1e5, None),
    ("muf", "mass.unsprung_front", "kg (one corner)", 0.0, 1e4, None),
    ("mur", "mass.unsprung_rear", "kg (one corner)", 0.0, 1e4, None),
    ("a", "cg.to_front_axle", "m", 0.01, 20.0, None),
    ("b", "cg.to_rear_axle", "m", 0.01, 20.0, None),
    ("h", "cg.height", "m", 0.01, 5.0, None),
    ("Jx", "inertia.roll", "kg m^2", 0.1, 1e7, None),
    ("Jz", "inertia.yaw", "kg m^2", 0.1, 1e8, None),
    ("Jxz", "inertia.roll_yaw", "kg m^2", -1e6, 1e6, 0.0),
    ("cf", "track.front", "m", 0.1, 5.0, None),
    ("cr", "track.rear", "m", 0.1, 5.0, None),
    ("hrcf", "roll_centre_below_cg.front", "m", -5.0, 5.0, None),
    ("hrcr", "roll_centre_below_cg.rear", "m", -5.0, 5.0, None),
    ("r0", "tire.unloaded_radius", "m", 0.05, 3.0, None),
    ("ktf", "tire.vertical_stiffness_front", "N/m", 1e3, 1e9, None),
    ("ktr", "tire.vertical_stiffness_rear", "N/m", 1e3, 1e9, None),
    ("rolling_excess", "tire.rolling_minus_loaded", "m", -0.1, 0.1, 0.0),
    ("mu_max", "tire.friction_peak", "-", 0.05, 3.0, 0.9835),
    ("mu_min", "tire.friction_slide", "-", 0.0, 3.0, 0.5568),
    ("Jw_f", "wheel.spin_inertia_front", "kg m^2", 1e-3, 1e4, None),
    ("Jw_r", "wheel.spin_inertia_rear", "kg m^2", 1e-3, 1e4, None),
    ("brake_front", "brakes.torque_front", "N m per wheel at full pedal", 0.0, 1e6, None),
    ("brake_rear", "brakes.torque_rear", "N m per wheel at full pedal", 0.0, 1e6, None),
    ("brake_gain_front", "brakes.pressure_gain_front", "N m per wheel per bar (0 = not given)", 0.0, 1e4, 0.0),
    ("brake_gain_rear", "brakes.pressure_gain_rear", "N m per wheel per bar (0 = not given)", 0.0, 1e4, 0.0),
    ("efficiency", "powertrain.efficiency", "- (0..1]", 0.01, 1.0, 1.0),
    ("lateral_ratio", "tire.lateral_friction_ratio", "-", 0.2, 3.0, 1.0),
    ("pitch_at_rest", "suspension.pitch_at_rest", "rad", -0.5, 0.5, 0.0),
    ("wheel_rate_f", "suspension.wheel_rate_front", "N/m (0 = unknown)", 0.0, 1e8, 0.0),
    ("wheel_rate_r", "suspension.wheel_rate_rear", "N/m (0 = unknown)", 0.0, 1e8, 0.0),
)
COMBINED_SLIP = ("none", "ellipse", "mf")
"""``tire.combined_slip``: how the grip fit combines a sample's longitudinal and lateral slip (docs)."""

EFFECTIVE_RADIUS_LOAD_SHARE = 1.0 / 3.0
"""Share of a load change's tire deflection by which the effective rolling radius (distance per wheel revolution
/ 2 pi) changes: R_e ~ R0 - deflection / 3 for a radial tire (Pacejka, Tire and Vehicle Dynamics, 3rd ed. 2012,
Sec. 7.2.2; Jazar, Vehicle Dynamics: Theory and Application, 2nd ed. 2014, ch. 3: R_w ~ R_g - (R_g - R_h)/3 from a
tread that rolls off its contact patch like a rigid disk). The wheel centre sinks by the whole deflection while
the rolled distance changes by a third of it; MF-Tyre's fitted effective-radius law (DREFF, BREFF, FREFF) falls
even less at the nominal load."""
_DC_MOTOR = (("max_torque", "powertrain.max_torque", "N m", 0.0, 1e6),
             ("max_speed", "powertrain.max_speed", "rad/s", 1.0, 1e6),
             ("ratio", "powertrain.ratio", "wheel/motor speed", 1e-4, 10.0))
BAR_PA = 1.0e5
"""Pa per bar: ``brakes.pressure_gain_*`` are per bar of line pressure, the brake-pressure message is in Pa."""
TORQUE_SOURCES = ("map", "measured", "engine", "axle")
"""``torque_source`` values (:attr:`VehicleDescription.torque_source`)."""
CAN_TORQUE_SOURCES = ("engine", "axle")
"""Torque sources read from a production car's CAN signals (``/vehicle/drive_torque``, ``/vehicle/brake_pressure``)
and turned into per-wheel torque by estimation/sensing/can_torque.py."""
_KNOWN_TOP = {"name", "note", "gravity", "mass", "cg", "inertia", "track", "roll_centre_below_cg", "tire", "wheel",
              "driveline", "torque_source", "powertrain", "brakes", "steering", "priors", "nominal",
              "held_fixed", "suspension"}
_REFERENCE_PRIORS_PER_LOAD = {  # derived default prior ranges (derived_priors)
    "Cx": (1.0, 40.0), "Cy": (3.0, 30.0), "kphi": (0.2, 10.0), "bphi": (0.002, 1.0), "rr": (0.0, 0.03)}


@dataclass(frozen=True)
class VehicleDescription:
    """A validated vehicle description (SI units; YAML paths in brackets; docs/vehicle_description.md)."""

    name: str
    m: float                 #: [mass.sprung] sprung mass, kg
    muf: float               #: [mass.unsprung_front] unsprung mass of ONE front corner, kg
    mur: float               #: [mass.unsprung_rear] unsprung mass of ONE rear corner, kg
    a: float                 #: [cg.to_front_axle] sprung CG to front axle, m
    b: float                 #: [cg.to_rear_axle] sprung CG to rear axle, m
    h: float                 #: [cg.height] sprung CG above ground, m
    Jx: float                #: [inertia.roll] roll inertia of the sprung mass about its CG, kg m^2
    Jz: float                #: [inertia.yaw] yaw inertia, kg m^2
    Jxz: float               #: [inertia.roll_yaw] product of inertia, kg m^2
    cf: float                #: [track.front] m
    cr: float                #: [track.rear] m
    hrcf: float              #: [roll_centre_below_cg.front] sprung CG height minus front roll-centre height, m
    hrcr: float              #: [roll_centre_below_cg.rear] m
    r0: float                #: [tire.unloaded_radius] m
    ktf: float               #: [tire.vertical_stiffness_front] N/m
    ktr: float               #: [tire.vertical_stiffness_rear] N/m
    mu_max: float            #: [tire.friction_peak] Fiala friction at zero slip, -
    mu_min: float            #: [tire.friction_slide] Fiala friction at full slip, -
    Jw_f: float              #: [wheel.spin_inertia_front] kg m^2 per wheel
    Jw_r: float              #: [wheel.spin_inertia_rear] kg m^2 per wheel
    g: float                 #: [gravity] m/s^2
    driven_axles: tuple[str, ...]   #: [driveline.driven_axles] subset of (front, rear)
    front_share: float       #: [driveline.front_share] fraction of drive torque on the front axle, 0..1
    torque_source: str
    """[torque_source] what gives the wheel torque: ``map`` (the powertrain and brake maps from the pedals),
    ``measured`` (per-wheel net torque in JointState.effort), ``engine`` (the CAN bus's engine torque and gear
    through ``powertrain.gear_ratios``, ``final_drive``, ``efficiency``) or ``axle`` (the CAN bus's drive torque
    per axle); with ``engine`` and ``axle`` the brake torque is the line pressure times ``brakes.pressure_gain_*``
    (:data:`TORQUE_SOURCES`, estimation/sensing/can_torque.py)"""
    powertrain: str          #: [powertrain.kind] dc_motor | engine_map | none (left out: measured torque)
    max_torque: float        #: [powertrain.max_torque] dc_motor: N m at zero motor speed (0 for engine_map)
    max_speed: float         #: [powertrain.max_speed] dc_motor: rad/s where the torque reaches zero
    ratio: float             #: [powertrain.ratio] dc_motor: wheel speed / motor speed
    engine_speed: tuple[float, ...]   #: [powertrain.full_throttle_rpm] engine_map knots, rad/s (given in rpm)
    torque_full: tuple[float, ...]    #: full-throttle engine torque at ``engine_speed``, N m
    torque_zero: tuple[float, ...]    #: [powertrain.zero_throttle_rpm] closed-throttle torque at ``engine_speed``, N m
    gear_ratios: tuple[float, ...]    #: [powertrain.gear_ratios] output/input speed per forward gear
    shift_down: tuple[float, ...]     #: [powertrain.shift_rpm] engine speed below which gear i shifts down, rad/s
    shift_up: tuple[float, ...]       #: engine speed above which gear i shifts up, rad/s
    final_drive: float       #: [powertrain.final_drive] differential output/input speed
    efficiency: float        #: [powertrain.efficiency] driveline efficiency, (0, 1]
    brake_front: float       #: [brakes.torque_front] N m per front wheel at full pedal
    brake_rear: float        #: [brakes.torque_rear] N m per rear wheel at full pedal
    brake_gain_front: float  #: [brakes.pressure_gain_front] brake torque per front wheel per bar of line pressure
    brake_gain_rear: float   #: [brakes.pressure_gain_rear] N m per rear wheel per bar (0 = not given)
    steering_source: str     #: [steering.source] ratio | measured (input is the road-wheel angle, rad)
    steer_gain: float        #: [steering.ratio] rad of road-wheel angle per unit steering input (1 if measured)
    priors: Mapping[str, tuple[float, float]] = field(default_factory=dict)  #: [priors] uniform ranges
    nominal: Mapping[str, float] = field(default_factory=dict)   #: [nominal] held-fixed values before calibration
    held_fixed: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    """[held_fixed] per stage, values that stage holds fixed instead of ``nominal`` (the paper's per-stage
    values for the HMMWV); earlier stages' results still override them."""
    inertia_in_wheels: bool = False
    """[driveline.inertia_in_wheels] the wheels' spin inertias already hold everything that turns with them
    downstream of where the wheel torque is known (measured, e.g. from a multi-body model), so the calibrator
    calibrates no driveline inertia ``Jd``; false (the default): it does (a spec sheet leaves it out)"""
    source: str = ""         #: file it was read from
    rolling_radius: float = 0.0
    """[tire.rolling_radius] load-independent effective rolling radius (distance per wheel revolution / 2 pi), m;
    0 = not given: the radius is ``r0 - Fz/kt`` (:meth:`VehicleDescription.rolling_radius_at`)"""
    rolling_excess: float = 0.0
    """[tire.rolling_minus_loaded] free-rolling radius minus loaded radius (wheel-centre height), m: the tire
    rolls at ``r0 - Fz/kt`` and its force acts at ``r0 - Fz/kt - rolling_excess`` below the wheel centre (0 = the
    8-DOF paper's tire; a Pac02/Chrono tire rolls at R0 - deflection/3, ~1 cm above its loaded radius)"""
    combined_slip: str = "none"
    """[tire.combined_slip] none (the grip fit takes every sample as pure longitudinal slip) | ellipse (the
    friction ellipse: the tire's longitudinal force at a slip angle, estimation/combined_slip.py) | mf (the
    MF2002 weighting functions of a Pac02 file with combined-slip coefficients: ``combined_coefficients``)"""
    combined_coefficients: tuple[float, ...] = ()
    """[tire.combined_coefficients] mf: the tire's RBX1, RBX2, RCX1, REX1, RHX1 (Pac02 file; -, -, -, -, rad)"""
    lateral_ratio: float = 1.0
    """[tire.lateral_friction_ratio] peak of the pure-lateral |Fy|/Fz over the peak of the pure-longitudinal
    Fx/Fz at the static load, -"""
    toe_front: tuple[tuple[float, float], ...] = ((0.0, 0.0),)
    """[suspension.toe_in_front] (wheel travel m, + = bump from the static ride height; toe-in rad, + = toe-in)
    rows in increasing travel: static toe and bump steer of a front wheel, straight-ahead steering"""
    toe_rear: tuple[tuple[float, float], ...] = ((0.0, 0.0),)
    """[suspension.toe_in_rear] the same for a rear wheel"""
    pitch_at_rest: float = 0.0
    """[suspension.pitch_at_rest] IMU pitch (rad, + = nose down) of the car standing on a level floor: the
    reference of the front wheel travel L (pitch - pitch_at_rest) (estimation/grip/friction_samples.py)"""
    wheel_rate_f: float = 0.0
    """[suspension.wheel_rate_front] suspension wheel rate at the static ride height (spring rate x motion
    ratio^2), N/m; 0 = unknown"""
    wheel_rate_r: float = 0.0
    """[suspension.wheel_rate_rear] the same for a rear wheel, N/m"""

    # ------------------------------------------------------------------ derived quantities
    @property
    def wheel_torque_measured(self) -> bool:
        """True when the vehicle's data give each wheel's net torque: reported per wheel (``measured``) or
        derived from its CAN signals (``engine``, ``axle``). The 8-DOF wheels in calibration are then driven by
        that torque instead of the pedal maps."""
        return self.torque_source != "map"

    @property
    def wheelbase(self) -> float:
        """L = a + b, m."""
        return self.a + self.b

    @property
    def driven(self) -> tuple[bool, bool]:
        """(front, rear): whether each axle is driven (``driveline.driven_axles``)."""
        return "front" in self.driven_axles, "rear" in self.driven_axles

    def driven_wheel_inertia(self) -> float:
        """The smaller spin inertia of a driven wheel, kg m^2 (the driveline inertia ``Jd`` must stay above
        minus this)."""
        return min(self.Jw_f if a == "front" else self.Jw_r for a in self.driven_axles)

    @property
    def total_mass(self) -> float:
        """m + 2 muf + 2 mur, kg."""
        return self.m + 2.0 * self.muf + 2.0 * self.mur

    def road_wheel_angle(self, steering: Any) -> Any:
        """The steering map: road-wheel angle (rad, + = left) of a steering input (a number or an array) in the
        units the controls' steering axis carries (``steering.source``: ``ratio`` = normalised -1..1 x lock, or
        steering-wheel rad / steering ratio; ``measured`` = the road-wheel angle itself). The one conversion
        every stage threshold in road-wheel angle goes through."""
        return self.steer_gain * steering

    def rolling_radius_at(self, fz_front: float, fz_rear: float) -> tuple[float, float]:
        """Effective rolling radius of a front and a rear wheel at these normal loads, m: ``tire.rolling_radius``
        when the description gives it (load-independent), else ``r0 - Fz/kt`` (the 8-DOF model's radius)."""
        if self.rolling_radius > 0.0:
            return self.rolling_radius, self.rolling_radius
        return self.r0 - fz_front / self.ktf, self.r0 - fz_rear / self.ktr

    def slip_radius_law(self) -> tuple[str, float, float, float]:
        """The effective rolling radius the wheel speeds roll at, as the slip measurement's law
        (mode, r0', kt_front', kt_rear'): ``("fixed", R, kt_f, kt_r)`` when ``tire.rolling_radius`` gives it
        (load-independent; the stiffnesses unused), else ``("load", r0', kt_f', kt_r')`` with
        R_e(Fz) = r0' - Fz / kt': equal to :meth:`rolling_radius_at` at the static loads (the mean over the axles),
        and falling by :data:`EFFECTIVE_RADIUS_LOAD_SHARE` of the deflection Fz / kt as the load changes
        (kt' = kt / share)."""
        if self.rolling_radius > 0.0:
            return "fixed", float(self.rolling_radius), float(self.ktf), float(self.ktr)
        share = EFFECTIVE_RADIUS_LOAD_SHARE
        fz_f, fz_r = self.static_wheel_loads()
        r0 = self.r0 - (1.0 - share) * 0.5 * (fz_f / self.ktf + fz_r / self.ktr)
        return "load", float(r0), float(self.ktf / share), float(self.ktr / share)

    def static_rolling_radius(self) -> float:
        """Mean effective rolling radius of the four wheels at their static loads, m (:meth:`rolling_radius_at`)."""
        return float(sum(self.rolling_radius_at(*self.static_wheel_loads())) / 2.0)

    def with_rolling_radius(self, radius: float) -> VehicleDescription:
        """This description rolling at ``radius`` (m) at its static loads: ``tire.rolling_radius`` replaced when it
        is given, else ``r0`` shifted by the difference (the load dependence ``Fz/kt`` kept)."""
        if self.rolling_radius > 0.0:
            return _replace(self, rolling_radius=float(radius))
        return _replace(self, r0=self.r0 + float(radius) - self.static_rolling_radius())

    def static_wheel_loads(self) -> tuple[float, float]:
        """Static load of one front and one rear wheel, N (the 8-DOF model's static term, Eqs. 10-13)."""
        L = self.wheelbase
        return (self.m * self.g * self.b / (2.0 * L) + self.muf * self.g,
                self.m * self.g * self.a / (2.0 * L) + self.mur * self.g)

    def static_axle_loads(self) -> tuple[float, float]:
        """Static front and rear axle loads, N (sum = total weight)."""
        f, r = self.static_wheel_loads()
        return 2.0 * f, 2.0 * r

    def to_dict(self) -> dict[str, Any]:
        """The YAML document this description round-trips through (:func:`description_from_dict`)."""
        return to_document(self)


# ---------------------------------------------------------------------------------------------- lookup
def vehicle_names() -> list[str]:
    """Names of the shipped descriptions (``config/vehicles/*.yaml``)."""
    out: set[str] = set()
    for d in resource_dirs("config", "vehicles"):
        out.update(p.stem for p in d.glob("*.yaml"))
    return sorted(out)


def simulated_vehicle_description(model: str) -> str | None:
    """The shipped description (``config/vehicles``) of a built-in simulator vehicle ``model`` (``hmmwv``,
    ``sedan``, ...): ``<model>_sim`` where one exists (``hmmwv`` itself holds the 8-DOF paper's numbers for its
    Chrono runs; ``hmmwv_sim`` the simulator's HMMWV), else ``<model>``; None for a model file or a model
    without a shipped description (the user names one)."""
    if Path(str(model)).suffix in (".yaml", ".yml"):
        return None
    names = vehicle_names()
    return next((n for n in (f"{model}_sim", str(model)) if n in names), None)


def vehicle_path(name_or_path: str | os.PathLike) -> Path:
    """The description file: an existing path, else ``config/vehicles/<name>.yaml`` through io.resources."""
    s = os.fspath(name_or_path)
    p = Path(s)
    if p.suffix in (".yaml", ".yml") or os.sep in s or p.exists():
        if not p.is_file():
            raise InputError(f"vehicle description {s}: no such file")
        return p
    found = find_resource("config", "vehicles", f"{s}.yaml")
    if found is None:
        raise InputError(f"vehicle '{s}': no description (known: {', '.join(vehicle_names()) or 'none'}; "
                         f"looked in {searched('config', 'vehicles')}); give a name or a YAML file")
    return found


def load_description(name_or_path: str | os.PathLike | VehicleDescription | None = None) -> VehicleDescription:
    """Load and validate the estimators' vehicle description (what the user knows of their car: geometry, tires,
    powertrain, priors) by name (``hmmwv``, ``sedan``) or file path; None = ``hmmwv``. Not the simulator's model
    file (:func:`vehcal_ros.models.vehicle14.params.load_simulator_params`).

    Raises :class:`InputError` (one line naming the field, unit and range) on a missing or invalid field.
    """
    if isinstance(name_or_path, VehicleDescription):
        return name_or_path
    path = vehicle_path(DEFAULT_VEHICLE if name_or_path in (None, "") else name_or_path)
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise InputError(f"vehicle description {path}: not valid YAML ({str(exc).splitlines()[0]})") from None
    return description_from_dict(doc, source=str(path))


# ---------------------------------------------------------------------------------------------- parsing
def _get(doc: Mapping, dotted: str) -> Any:
    cur: Any = doc
    for part in dotted.split("."):
        if not isinstance(cur, Mapping) or part not in cur:
            return None
        cur = cur[part]
    return cur


def checked_number(where: str, value: Any, unit: str, lo: float, hi: float) -> float:
    """``value`` as a float in [``lo``, ``hi``]; else one InputError line naming ``where``, the unit and range."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        v = float("nan")
    if isinstance(value, bool) or not math.isfinite(v) or not lo <= v <= hi:
        raise InputError(f"{where} = {value!r}: expected a number in [{lo:g}, {hi:g}] {unit}")
    return v


def _table(where: str, value: Any, unit: str, width: int) -> list[list[float]]:
    if not isinstance(value, (list, tuple)) or len(value) < 1 or not all(
            isinstance(r, (list, tuple)) and len(r) == width for r in value):
        raise InputError(f"{where}: expected a list of [{unit}] rows")
    return [[checked_number(f"{where}[{i}][{j}]", c, u, -1e7, 1e7) for j, (c, u) in enumerate(zip(r, unit.split(", ")))]
            for i, r in enumerate(value)]


def description_from_dict(doc: Any, source: str = "<dict>") -> VehicleDescription:
    """Validate a parsed description document (module doc) into a :class:`VehicleDescription`."""
    src = f"vehicle description {source}"
    if not isinstance(doc, Mapping):
        raise InputError(f"{src}: expected a mapping of sections (mass, cg, inertia, ...)")
    unknown = sorted(set(map(str, doc)) - _KNOWN_TOP)
    if unknown:
        raise InputError(f"{src}: unknown section '{unknown[0]}'; known: {', '.join(sorted(_KNOWN_TOP))}")
    kw: dict[str, Any] = {"name": str(doc.get("name") or Path(source).stem), "source": source}
    for fname, path, unit, lo, hi, default in _SCALARS:
        value = _get(doc, path)
        if value is None:
            if default is None:
                raise InputError(f"{src}: missing field {path} ({unit}, in [{lo:g}, {hi:g}])")
            value = default
        kw[fname] = checked_number(f"{src}: {path}", value, unit, lo, hi)
    for fname, path in (("hrcf", "roll_centre_below_cg.front"), ("hrcr", "roll_centre_below_cg.rear")):
        if kw[fname] > kw["h"]:
            raise InputError(f"{src}: {path} = {kw[fname]:g} m: expected <= cg.height {kw['h']:g} m "
                             "(the roll centre cannot be below the ground)")
    if kw["mu_min"] > kw["mu_max"]:
        raise InputError(f"{src}: tire.friction_slide = {kw['mu_min']:g}: expected <= tire.friction_peak")
    kw.update(_driveline(doc, src))
    ts = doc.get("torque_source", "map")
    if ts not in TORQUE_SOURCES:
        raise InputError(f"{src}: torque_source = {ts!r}: expected {', '.join(TORQUE_SOURCES[:-1])} or "
                         f"{TORQUE_SOURCES[-1]}")
    kw["torque_source"] = ts
    kw.update(_powertrain(doc, src, optional=ts != "map", gearing=ts == "engine"))
    if ts in CAN_TORQUE_SOURCES:
        for fname, path in (("brake_gain_front", "brakes.pressure_gain_front"),
                            ("brake_gain_rear", "brakes.pressure_gain_rear")):
            if kw[fname] <= 0.0:
                raise InputError(f"{src}: missing field {path} (N m of brake torque per wheel per bar of line "
                                 f"pressure, in (0, 1e4]): torque_source {ts} takes the brake torque from the "
                                 "brake pressure")
    kw.update(_steering(doc, src))
    kw.update(_rolling_radius(doc, src, kw))
    kw.update(_combined_slip(doc, src))
    desc = VehicleDescription(**kw)
    priors = {**derived_priors(desc), **_priors(doc.get("priors"), f"{src}: priors", desc)}
    nominal = {**derived_nominal(priors), **_nominal(doc.get("nominal"), f"{src}: nominal")}
    held = doc.get("held_fixed") or {}
    if not isinstance(held, Mapping) or not set(held) <= set(STAGES):
        raise InputError(f"{src}: held_fixed: expected a mapping stage -> {{name: value}} with stages "
                         f"{', '.join(STAGES)}")
    held_fixed = {str(st): _nominal(v, f"{src}: held_fixed.{st}") for st, v in held.items()}
    return _replace(desc, priors=priors, nominal=nominal, held_fixed=held_fixed)


def _combined_slip(doc: Mapping, src: str) -> dict[str, Any]:
    """``tire.combined_slip`` and the toe tables ``suspension.toe_in_front`` / ``toe_in_rear``."""
    method = _get(doc, "tire.combined_slip") or "none"
    if method not in COMBINED_SLIP:
        raise InputError(f"{src}: tire.combined_slip = {method!r}: expected one of {', '.join(COMBINED_SLIP)}")
    out: dict[str, Any] = {"combined_slip": method}
    if method == "mf":
        coef = _get(doc, "tire.combined_coefficients") or {}
        names = ("RBX1", "RBX2", "RCX1", "REX1", "RHX1")
        try:
            values = tuple(float(coef[k]) for k in names)
        except (KeyError, TypeError, ValueError):
            values = ()
        if len(values) != 5 or not all(math.isfinite(v) and abs(v) <= 1e3 for v in values):
            raise InputError(f"{src}: tire.combined_coefficients: expected {{{', '.join(names)}}} (finite numbers, "
                             "the tire file's MF2002 combined-slip coefficients) with tire.combined_slip mf")
        out["combined_coefficients"] = values
    for fname, path in (("toe_front", "suspension.toe_in_front"), ("toe_rear", "suspension.toe_in_rear")):
        rows = _get(doc, path)
        if rows is None:
            continue
        try:
            table = tuple((float(z), float(t)) for z, t in rows)
        except (TypeError, ValueError):
            table = ()
        z = [r[0] for r in table]
        if not table or not all(math.isfinite(v) and abs(v) <= 0.5 for r in table for v in r) \
                or any(b <= a for a, b in zip(z, z[1:])):
            raise InputError(f"{src}: {path}: expected rows [wheel travel m, toe-in rad] with increasing travel, "
                             "each value in [-0.5, 0.5]")
        out[fname] = table
    return out


def _rolling_radius(doc: Mapping, src: str, kw: Mapping[str, Any]) -> dict[str, Any]:
    """``tire.rolling_radius`` (optional, m): within 20 % of ``tire.unloaded_radius`` and not above it."""
    value = _get(doc, "tire.rolling_radius")
    if value is None:
        return {}
    r0 = kw["r0"]
    return {"rolling_radius": checked_number(f"{src}: tire.rolling_radius", value, "m (<= tire.unloaded_radius)",
                                      0.8 * r0, r0)}


def _replace(desc: VehicleDescription, **kw: Any) -> VehicleDescription:
    from dataclasses import replace
    return replace(desc, **kw)


def _driveline(doc: Mapping, src: str) -> dict[str, Any]:
    axles = _get(doc, "driveline.driven_axles")
    if axles is None:
        raise InputError(f"{src}: missing field driveline.driven_axles (a list of front, rear)")
    if isinstance(axles, str):
        axles = [axles]
    if not isinstance(axles, (list, tuple)) or not axles or not set(axles) <= {"front", "rear"} \
            or len(set(axles)) != len(axles):
        raise InputError(f"{src}: driveline.driven_axles = {axles!r}: expected a non-empty list of front, rear")
    share = _get(doc, "driveline.front_share")
    if share is None:
        if len(axles) == 2:
            raise InputError(f"{src}: missing field driveline.front_share (fraction of drive torque on the front "
                             "axle, in [0, 1]) for a vehicle with two driven axles")
        share = 1.0 if axles[0] == "front" else 0.0
    share = checked_number(f"{src}: driveline.front_share", share, "-", 0.0, 1.0)
    if (share > 0.0 and "front" not in axles) or (share < 1.0 and "rear" not in axles):
        raise InputError(f"{src}: driveline.front_share = {share:g} puts torque on an axle that is not driven")
    order = tuple(a for a in ("front", "rear") if a in axles)
    in_wheels = _get(doc, "driveline.inertia_in_wheels") or False
    if not isinstance(in_wheels, bool):
        raise InputError(f"{src}: driveline.inertia_in_wheels = {in_wheels!r}: expected true or false")
    return {"driven_axles": order, "front_share": share, "inertia_in_wheels": in_wheels}


def _powertrain(doc: Mapping, src: str, optional: bool = False, gearing: bool = False) -> dict[str, Any]:
    """``powertrain``: required with ``torque_source: map``; with ``measured``, ``engine`` or ``axle`` (the
    wheel torque comes from the vehicle's ECU or CAN bus) it may be left out, and the kind is then ``none`` (no
    drive-torque map). ``gearing``: the gear ratios and final drive are required even without a kind (the CAN
    engine torque reaches the wheels through them)."""
    kind = _get(doc, "powertrain.kind")
    out: dict[str, Any] = {"powertrain": kind, "max_torque": 0.0, "max_speed": 1.0, "ratio": 1.0,
                           "engine_speed": (), "torque_full": (), "torque_zero": (), "gear_ratios": (),
                           "shift_down": (), "shift_up": (), "final_drive": 1.0}
    if kind is None and optional:
        out["powertrain"] = "none"
        if gearing:
            out.update(_gearing(doc, src))
        return out
    if kind is None:
        raise InputError(f"{src}: missing field powertrain.kind (dc_motor or engine_map; the section may be left "
                         "out only with torque_source: measured)")
    if kind == "dc_motor":
        for fname, path, unit, lo, hi in _DC_MOTOR:
            value = _get(doc, path)
            if value is None:
                raise InputError(f"{src}: missing field {path} ({unit}, in [{lo:g}, {hi:g}])")
            out[fname] = checked_number(f"{src}: {path}", value, unit, lo, hi)
        return out
    if kind != "engine_map":
        raise InputError(f"{src}: powertrain.kind = {kind!r}: expected dc_motor or engine_map")
    full = _get(doc, "powertrain.full_throttle_rpm")
    if full is None:
        raise InputError(f"{src}: missing field powertrain.full_throttle_rpm ([rpm, N m] rows)")
    full = _table(f"{src}: powertrain.full_throttle_rpm", full, "rpm, N m", 2)
    speeds = [r[0] for r in full]
    if len(full) < 2 or any(b <= a for a, b in zip(speeds, speeds[1:])):
        raise InputError(f"{src}: powertrain.full_throttle_rpm: expected >= 2 rows with increasing rpm")
    zero_doc = _get(doc, "powertrain.zero_throttle_rpm")
    zero = _table(f"{src}: powertrain.zero_throttle_rpm", zero_doc, "rpm, N m", 2) if zero_doc else [[0.0, 0.0]]
    zs = [r[0] for r in zero]
    if any(b <= a for a, b in zip(zs, zs[1:])):
        raise InputError(f"{src}: powertrain.zero_throttle_rpm: expected increasing rpm")
    import numpy as np
    out["engine_speed"] = tuple(float(s) * RPM for s in speeds)
    out["torque_full"] = tuple(float(r[1]) for r in full)
    out["torque_zero"] = tuple(float(v) for v in np.interp(speeds, zs, [r[1] for r in zero]))
    out.update(_gearing(doc, src))
    gears = out["gear_ratios"]
    shifts = _get(doc, "powertrain.shift_rpm")
    if len(gears) > 1 or shifts is not None:
        shifts = _table(f"{src}: powertrain.shift_rpm", shifts, "rpm, rpm", 2)
        if len(shifts) != len(gears):
            raise InputError(f"{src}: powertrain.shift_rpm: expected one [down, up] row per gear ({len(gears)})")
        for i, (d, u) in enumerate(shifts):
            if not 0.0 <= d < u:
                raise InputError(f"{src}: powertrain.shift_rpm[{i}] = [{d:g}, {u:g}]: expected 0 <= down < up rpm")
    else:
        shifts = [[0.0, 1e9]]
    out["shift_down"] = tuple(float(d) * RPM for d, _ in shifts)
    out["shift_up"] = tuple(float(u) * RPM for _, u in shifts)
    return out


def _gearing(doc: Mapping, src: str) -> dict[str, Any]:
    """``powertrain.gear_ratios`` (output/input speed per forward gear) and ``powertrain.final_drive``."""
    gears = _get(doc, "powertrain.gear_ratios")
    if not isinstance(gears, (list, tuple)) or not gears:
        raise InputError(f"{src}: missing field powertrain.gear_ratios (output/input speed per forward gear, "
                         "in (0, 10])")
    ratios = tuple(checked_number(f"{src}: powertrain.gear_ratios[{i}]", g, "output/input speed", 1e-4, 10.0)
                   for i, g in enumerate(gears))
    fd = _get(doc, "powertrain.final_drive")
    if fd is None:
        raise InputError(f"{src}: missing field powertrain.final_drive (differential output/input speed, "
                         "in [0.0001, 10])")
    return {"gear_ratios": ratios,
            "final_drive": checked_number(f"{src}: powertrain.final_drive", fd, "output/input speed", 1e-4, 10.0)}


def _steering(doc: Mapping, src: str) -> dict[str, Any]:
    source = _get(doc, "steering.source") or "ratio"
    if source not in ("ratio", "measured"):
        raise InputError(f"{src}: steering.source = {source!r}: expected ratio or measured")
    if source == "measured":
        return {"steering_source": source, "steer_gain": 1.0}
    ratio = _get(doc, "steering.ratio")
    if ratio is None:
        raise InputError(f"{src}: missing field steering.ratio (rad of road-wheel angle per unit steering input, "
                         "in (0, 2])")
    gain = checked_number(f"{src}: steering.ratio", ratio, "rad per unit input", 1e-4, 2.0)
    return {"steering_source": source, "steer_gain": gain}


def _priors(value: Any, where: str, desc: VehicleDescription) -> dict[str, tuple[float, float]]:
    """The file's ``priors``: 0 <= lower < upper, except ``Jd`` (an inertia added to the driven wheels'), whose
    lower bound may be negative down to minus the smallest driven wheel's inertia (exclusive)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InputError(f"{where}: expected a mapping name: [lower, upper]")
    out = {}
    for name, pair in value.items():
        if name not in CALIBRATED:
            raise InputError(f"{where}.{name}: unknown calibrated parameter; known: {', '.join(CALIBRATED)}")
        if not isinstance(pair, (list, tuple)) or len(pair) != 2:
            raise InputError(f"{where}.{name} = {pair!r}: expected [lower, upper]")
        lo = checked_number(f"{where}.{name}[0]", pair[0], "", -1e12, 1e12)
        hi = checked_number(f"{where}.{name}[1]", pair[1], "", -1e12, 1e12)
        if name == "Jd":
            check_driveline_inertia_range(desc, lo, hi, f"{where}.{name}")
        elif not 0.0 <= lo < hi:
            raise InputError(f"{where}.{name} = [{lo:g}, {hi:g}]: expected 0 <= lower < upper")
        out[str(name)] = (lo, hi)
    return out


def _nominal(value: Any, where: str) -> dict[str, float]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InputError(f"{where}: expected a mapping name: value")
    out = {}
    for name, v in value.items():
        if name not in NOMINAL_NAMES:
            raise InputError(f"{where}.{name}: unknown parameter; known: {', '.join(NOMINAL_NAMES)}")
        out[str(name)] = checked_number(f"{where}.{name}", v, "", 0.0, 1e12)
    return out


def check_driveline_inertia_range(desc: VehicleDescription, lo: float, hi: float, where: str) -> None:
    """An :class:`InputError` naming ``where`` unless -Jw < ``lo`` < ``hi`` (kg m^2; Jw the smaller spin inertia of
    a driven wheel): the driveline inertia ``Jd`` may correct an overstated wheel inertia, never cancel it."""
    floor = -desc.driven_wheel_inertia()
    if not floor < lo < hi:
        raise InputError(f"{where} = [{lo:g}, {hi:g}]: expected {floor:g} < lower < upper: the lower bound must be "
                         f"above {floor:g} kg m^2, minus the driven wheels' spin inertia")


def derived_priors(desc: VehicleDescription) -> dict[str, tuple[float, float]]:
    """Default uniform prior ranges from the static loads (used where the file gives none).

    Per static wheel load W (N): Cx in [1, 40] W (N per unit slip; passenger tires ~20-30 W), Cy in [3, 30] W
    (N/rad); per axle roll stiffness in [0.2, 10] W t^2 (N m/rad; wheel rate proportional to the corner load at
    a given ride frequency, times t^2/2 for two wheels); total roll damping in [0.002, 1] s x sum W t^2
    (N m s/rad); rr in [0, 0.03]; the driveline inertia per driven wheel Jd in [-Jw / 2, 0.5 m_t r^2 / n] (n
    driven wheels, m_t the total mass, r the static rolling radius, Jw the smaller spin inertia of a driven
    wheel): the engine's and gearbox's share of the classic mass factor in first gear, 0.0025 xi^2 with an
    overall ratio xi ~ 14, is ~0.5 (Wong, Theory of Ground Vehicles, Ch. 3), the most that can turn with the
    driven wheels downstream of where their torque is known; below 0 the description's own wheel inertia was
    too high (a rule of thumb's), and the bound keeps the prior's support off the exact value 0 a complete
    description has (a posterior piled on a bound mixes badly: split R-hat 1.02-1.2 on such windows).
    """
    wf, wr = desc.static_wheel_loads()
    q = _REFERENCE_PRIORS_PER_LOAD
    roll_f, roll_r = wf * desc.cf ** 2, wr * desc.cr ** 2
    return {"Cxf": (q["Cx"][0] * wf, q["Cx"][1] * wf), "Cxr": (q["Cx"][0] * wr, q["Cx"][1] * wr),
            "Cyf": (q["Cy"][0] * wf, q["Cy"][1] * wf), "Cyr": (q["Cy"][0] * wr, q["Cy"][1] * wr),
            "kphi_f": (q["kphi"][0] * roll_f, q["kphi"][1] * roll_f),
            "kphi_r": (q["kphi"][0] * roll_r, q["kphi"][1] * roll_r),
            "bphi": (q["bphi"][0] * (roll_f + roll_r), q["bphi"][1] * (roll_f + roll_r)), "rr": q["rr"],
            "Jd": (-0.5 * desc.driven_wheel_inertia(),
                   0.5 * desc.total_mass * desc.static_rolling_radius() ** 2 / (2 * len(desc.driven_axles)))}


def derived_nominal(priors: Mapping[str, tuple[float, float]]) -> dict[str, float]:
    """Default nominal values: the prior means (midpoints); ``bphi`` split equally into bphi_f, bphi_r; no
    driveline inertia beyond the wheels' (``Jd`` = 0: the description's wheel inertia as given)."""
    mid = {k: 0.5 * (lo + hi) for k, (lo, hi) in priors.items() if k != "Jd"}
    b = mid.pop("bphi")
    return {**mid, "bphi_f": 0.5 * b, "bphi_r": 0.5 * b, "Jd": 0.0}


def to_document(desc: VehicleDescription) -> dict[str, Any]:
    """The YAML document of ``desc`` (inverse of :func:`description_from_dict`)."""
    doc: dict[str, Any] = {"name": desc.name}
    values = asdict(desc)
    for fname, path, *_ in _SCALARS:
        _put(doc, path, values[fname])
    doc["driveline"] = {"driven_axles": list(desc.driven_axles), "front_share": desc.front_share,
                        "inertia_in_wheels": desc.inertia_in_wheels}
    doc["torque_source"] = desc.torque_source
    if desc.rolling_radius > 0.0:
        doc["tire"]["rolling_radius"] = desc.rolling_radius
    pt = doc["powertrain"]
    pt["kind"] = desc.powertrain
    for fname, path in (("brake_gain_front", "pressure_gain_front"), ("brake_gain_rear", "pressure_gain_rear")):
        if values[fname] <= 0.0:   # not given
            del doc["brakes"][path]
    if desc.powertrain == "none" and desc.torque_source == "engine":   # CAN engine torque: the gearing only
        pt.update(gear_ratios=list(desc.gear_ratios), final_drive=desc.final_drive)
        del pt["kind"]
    elif desc.powertrain == "none":   # measured torque: no drive-torque map
        del doc["powertrain"]
    elif desc.powertrain == "dc_motor":
        pt.update(max_torque=desc.max_torque, max_speed=desc.max_speed, ratio=desc.ratio)
    else:
        pt["full_throttle_rpm"] = [[s / RPM, t] for s, t in zip(desc.engine_speed, desc.torque_full)]
        pt["zero_throttle_rpm"] = [[s / RPM, t] for s, t in zip(desc.engine_speed, desc.torque_zero)]
        pt["gear_ratios"] = list(desc.gear_ratios)
        pt["shift_rpm"] = [[d / RPM, u / RPM] for d, u in zip(desc.shift_down, desc.shift_up)]
        pt["final_drive"] = desc.final_drive
    doc["steering"] = {"source": desc.steering_source, "ratio": desc.steer_gain}
    doc["tire"]["combined_slip"] = desc.combined_slip
    if desc.combined_slip == "mf":
        doc["tire"]["combined_coefficients"] = dict(zip(("RBX1", "RBX2", "RCX1", "REX1", "RHX1"),
                                                        desc.combined_coefficients))
    doc["suspension"]["toe_in_front"] = [list(r) for r in desc.toe_front]
    doc["suspension"]["toe_in_rear"] = [list(r) for r in desc.toe_rear]
    doc["priors"] = {k: list(v) for k, v in desc.priors.items()}
    doc["nominal"] = dict(desc.nominal)
    if desc.held_fixed:
        doc["held_fixed"] = {k: dict(v) for k, v in desc.held_fixed.items()}
    return doc


def _put(doc: dict, dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    cur = doc
    for p in parts[:-1]:
        cur = cur.setdefault(p, {})
    cur[parts[-1]] = value


FIELD_NAMES = tuple(f.name for f in fields(VehicleDescription))

__all__ = ["VehicleDescription", "load_description", "vehicle_names", "vehicle_path", "simulated_vehicle_description",
           "description_from_dict",
           "derived_priors", "derived_nominal", "check_driveline_inertia_range", "to_document", "DEFAULT_VEHICLE",
           "CALIBRATED"]
