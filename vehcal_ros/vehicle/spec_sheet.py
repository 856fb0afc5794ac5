"""A vehicle description from spec-sheet quantities only (docs/vehicle_description.md, "From a spec sheet").

A spec sheet gives what a brochure, a type-approval document or a weighbridge tells about a car: mass, axle
loads (or the front share of the weight), wheelbase, tracks, CG height, the ISO tire size, the drive layout and
the steering ratio. :func:`description_document_from_spec` turns it into a full description document in the
layout :func:`vehcal_ros.vehicle.description.description_from_dict` validates; every other field is defaulted
by a rule of thumb stated next to it (:data:`RULES`, the comments of :func:`description_yaml_from_spec`).
The document has ``torque_source: measured`` (the per-wheel net torque comes from the ECU in
``JointState.effort``) and no ``powertrain`` section, unless the spec sheet says the torque comes from the CAN bus
(``torque_source: engine`` with the gearbox's and final drive's ratios, or ``axle``; the brake pressure's gains
then follow a rule of thumb unless given).

Spec schema (SI units)::

    name: my_car
    spec_sheet:
      mass: 1350            # kg, kerb mass + driver
      front_axle_share: 0.6 # fraction of the weight on the front axle (or axle_loads: [front_kg, rear_kg])
      wheelbase: 2.6        # m
      track: [1.5, 1.5]     # m, front, rear (one number: both)
      cg_height: 0.55       # m, CG of the whole car above ground
      tire: 195/65R15       # ISO size: section width mm / aspect ratio % R rim diameter inch
      drive: FWD            # FWD | RWD | AWD (AWD: optional drive_front_share, default 0.5)
      steering_ratio: 15.5  # steering-wheel angle / road-wheel angle
      steering_input: steering_wheel_angle   # steering_wheel_angle (rad) | road_wheel_angle (rad) | normalised
      # steering_lock_deg: 34.0   # normalised input only: road-wheel angle at full input (+-1), deg
      # torque_source: engine     # measured (default) | engine | axle: the wheel torque from CAN signals
      # gear_ratios: [3.46, 1.95, 1.28, 0.97, 0.78]   # engine only: gearbox ratios as spec sheets give them
      # final_drive: 3.94         # engine only: axle ratio (input / output speed), as spec sheets give it
      # brake_pressure_gain: [30.0, 15.0]   # engine / axle: N m per wheel per bar, front, rear (default: rule)

Imports only the standard library, ``yaml`` and :mod:`vehcal_ros.errors` (the ground floor); no rclpy.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

import yaml

from vehcal_ros.errors import InputError
from vehcal_ros.vehicle.description import checked_number

G = 9.81
"""m/s^2, gravity of the generated description."""
INCH = 0.0254
"""m per inch."""

# ------------------------------------------------------------------------------------------- rules of thumb
REF_TIRE_MASS = 17.0
"""kg, tire + steel wheel of a 195/65R15 (tire ~8.5 kg, 15x6J steel wheel ~8.5 kg: typical catalogue masses);
other sizes scale with outer diameter x section width (the tire's and rim's material scale with both)."""
REF_TIRE_DW = (2 * (15 * INCH / 2 + 0.195 * 0.65)) * 0.195
"""m^2, outer diameter x section width of the reference 195/65R15."""
CORNER_HARDWARE_SHARE = 0.015
"""Hub, bearing, brake disc and caliper, upright and the unsprung halves of the arms, springs and drive shaft of
one corner, as a fraction of the vehicle mass (~20 kg for a 1350 kg car; assumption giving 35-50 kg per corner
with the wheel, the range of docs/vehicle_description.md step 1)."""
STATIC_DEFLECTION_RATIO = 0.12
"""Static tire deflection / section height: placard pressures are chosen so that a passenger tire deflects
~10-15 % of its section height under its static load (assumption); k_z = mean static wheel load / deflection,
the same on both axles (one tire size and pressure)."""
KZ_RANGE = (150e3, 300e3)
"""N/m, typical passenger-car tire vertical stiffness (docs/vehicle_description.md step 5: 200-300 kN/m at
nominal pressure; 150 kN/m for soft high-profile tires); the load rule is clamped to it."""
ROLLING_DEFLECTION_FRACTION = 1.0 / 3.0
"""Effective rolling radius R_e = R0 - deflection/3 (radial tire; Pacejka, Tire and Vehicle Dynamics, 3rd ed.,
2012, Sec. 7.2.2: R_e ~ R0 - rho_z0/3 near the rated load; also the Pac02 convention of the package's sedan)."""
SPIN_GYRATION = 0.7
"""Radius of gyration of tire + wheel about the spin axis / unloaded radius (the tire's mass sits at the tread,
the rim's at ~0.5 R0): J = m_tw (0.7 R0)^2, ~0.8 kg m^2 for a 195/65R15 (assumption)."""
SPIN_HARDWARE = 0.15
"""kg m^2, brake disc, hub and half shaft added to each wheel's spin inertia (assumption: a 10 kg disc of
0.13 m radius of gyration is 0.17 kg m^2). The driveline reflected to the driven wheels is NOT added (a spec
sheet does not give it): the calibrator's longitudinal stage calibrates it for the 8-DOF model (``Jd``)."""
ROLL_CENTRE_HEIGHT = (0.075, 0.175)
"""m, front and rear roll-centre heights above ground: midpoints of the typical car ranges 0-0.15 m front,
0.05-0.3 m rear (docs/vehicle_description.md step 4; assumption without the suspension geometry)."""
YAW_DYNAMIC_INDEX = 1.0
"""Jz = DI m_s a b with the dynamic index DI = k_z^2 / (a b) ~ 0.9-1.1 for passenger cars (Milliken & Milliken,
Race Car Vehicle Dynamics, 1995, Sec. 5.9; docs/vehicle_description.md step 3)."""
ROLL_GYRATION_TRACK = 0.25
"""Jx = m_s (0.25 t)^2 + m_s (h_s - h_rc)^2 / 3 (docs/vehicle_description.md step 3; assumption)."""
BRAKE_CAPACITY = 1.0
"""Full pedal decelerates the car at 1.0 g (brakes sized to lock the wheels on a dry road; assumption)."""
BRAKE_DESIGN_DECEL = 0.8
"""Front brake share = the ideal distribution at 0.8 g, W_f/W + 0.8 h/L, clamped to [0.5, 0.85] (brake balance
is designed so that the front locks first up to ~0.8 g; assumption)."""
ROLLING_RESISTANCE = 0.010
"""Rolling-resistance coefficient of a passenger radial tire on asphalt (0.008-0.015: Gillespie, Fundamentals of
Vehicle Dynamics, 1992, Ch. 4); the 8-DOF lever rr = coefficient x rolling radius (m)."""
FRICTION = (0.9, 0.75)
"""Fiala friction peak and slide of a passenger tire on dry asphalt (Wong, Theory of Ground Vehicles, Table 1.3:
peak 0.8-0.9, sliding 0.75); only the 8-DOF calibration model uses them."""
FULL_BRAKE_LINE_PRESSURE = 100.0
"""bar of brake line pressure at the full-pedal brake torque (``BRAKE_CAPACITY``): a passenger car's hydraulic
brakes reach ~1 g at 80-120 bar (assumption); the rule for ``brakes.pressure_gain_*`` when the spec sheet gives
no ``brake_pressure_gain``."""
TORQUE_SOURCES = ("measured", "engine", "axle")
"""``spec_sheet.torque_source``: the wheels' torque reported per wheel (ECU) or from the CAN engine torque and
gear, or axle torques (docs/vehicle_description.md, "Wheel torque from CAN")."""
AWD_FRONT_SHARE = 0.5
"""Front share of the drive torque of an AWD car without ``drive_front_share`` (centre differential 50:50;
assumption)."""

RULES: dict[str, str] = {
    "mass.sprung": "spec mass minus 4 unsprung corners",
    "mass.unsprung_front": "tire+wheel 17 kg x (D W)/(D W of 195/65R15) + 1.5 % of the mass per corner "
                           "(hub, brake, upright, arms; assumption)",
    "mass.unsprung_rear": "as the front",
    "cg.to_front_axle": "sprung CG from the axle loads: (m a_total - 2 m_u,rear L) / m_s",
    "cg.to_rear_axle": "wheelbase - to_front_axle",
    "cg.height": "sprung CG from the total CG height and the unsprung corners at their loaded wheel-centre height",
    "inertia.roll": "m_s (0.25 t)^2 + m_s (h_s - h_rc)^2 / 3 (docs step 3; assumption)",
    "inertia.yaw": "m_s a b x dynamic index 1.0 (Milliken, RCVD Sec. 5.9: DI 0.9-1.1 for cars)",
    "inertia.roll_yaw": "0: symmetric body assumed",
    "track.front": "spec",
    "track.rear": "spec",
    "roll_centre_below_cg.front": "h_s - 0.075 m (front roll centre: typical 0-0.15 m; assumption)",
    "roll_centre_below_cg.rear": "h_s - 0.175 m (rear roll centre: typical 0.05-0.3 m; assumption)",
    "tire.unloaded_radius": "the schema's r0 (r0 - Fz/kt = rolling radius at the static load): ISO R0 (rim/2 + "
                            "width x aspect) + 2/3 of the mean static deflection; force lever r0 - Fz/kt - "
                            "rolling_minus_loaded = the loaded radius R0 - deflection",
    "tire.rolling_radius": "R0 - static deflection/3 at the mean static wheel load (Pacejka 2012 Sec. 7.2.2)",
    "tire.rolling_minus_loaded": "rolling - loaded radius = 2/3 of the mean static deflection",
    "tire.vertical_stiffness_front": "mean static wheel load / (12 % of the section height), clamped to "
                                     "150-300 kN/m (assumption)",
    "tire.vertical_stiffness_rear": "as the front (one tire size and pressure)",
    "tire.friction_peak": "dry asphalt, passenger tire (Wong, Table 1.3: 0.8-0.9)",
    "tire.friction_slide": "dry asphalt, locked wheel (Wong, Table 1.3: 0.75)",
    "tire.combined_slip": "ellipse: a tire without known combined-slip coefficients (docs: friction ellipse)",
    "tire.lateral_friction_ratio": "1: lateral peak taken equal to the longitudinal (unknown from a spec sheet)",
    "wheel.spin_inertia_front": "tire+wheel mass x (0.7 R0)^2 + 0.15 kg m^2 disc/hub/shaft (assumption)",
    "wheel.spin_inertia_rear": "as the front",
    "brakes.torque_front": "1.0 g at full pedal x front share (ideal at 0.8 g: W_f/W + 0.8 h/L) x R_e / 2",
    "brakes.torque_rear": "1.0 g at full pedal x rear share x R_e / 2",
    "driveline.driven_axles": "spec drive",
    "driveline.front_share": "FWD 1, RWD 0, AWD drive_front_share (default 0.5)",
    "torque_source": "spec torque_source (measured: net wheel torque from the ECU in JointState.effort)",
    "powertrain.gear_ratios": "1 / spec gear_ratios (output / input speed)",
    "powertrain.final_drive": "1 / spec final_drive",
    "powertrain.efficiency": "1: no driveline loss (assumption; the torque-scale WARN shows a real one)",
    "brakes.pressure_gain_front": "spec brake_pressure_gain, else full-pedal torque / 100 bar (assumption)",
    "brakes.pressure_gain_rear": "as the front",
    "steering.source": "spec steering_input",
    "steering.ratio": "1 / steering_ratio: road-wheel rad per steering-wheel rad",
    "nominal.rr": "rolling-resistance coefficient 0.010 x R_e (Gillespie 1992, Ch. 4: 0.008-0.015)",
}
"""YAML path -> the rule that produced it (written as a comment next to the value)."""

_SPEC_KEYS = ("mass", "front_axle_share", "axle_loads", "wheelbase", "track", "cg_height", "tire", "drive",
              "drive_front_share", "steering_ratio", "steering_input", "steering_lock_deg", "torque_source",
              "gear_ratios", "final_drive", "brake_pressure_gain")
_TIRE_RE = re.compile(r"^\s*(\d{3})\s*/\s*(\d{2,3})\s*Z?R\s*(\d{2}(?:\.\d)?)(?:\s+\d{2,3}\s*[A-Z]{1,2})?\s*$",
                      re.IGNORECASE)
STEERING_INPUTS = ("steering_wheel_angle", "road_wheel_angle", "normalised")
DRIVES = ("FWD", "RWD", "AWD")


# ------------------------------------------------------------------------------------------------ parsing

def parse_tire_size(size: Any, where: str = "spec_sheet.tire") -> tuple[float, float, float]:
    """ISO metric size ``195/65R15`` (optionally ``ZR``, a load index and speed symbol) -> (section width m,
    aspect ratio -, rim diameter m); InputError naming ``where`` otherwise."""
    m = _TIRE_RE.match(str(size)) if isinstance(size, str) else None
    if m is None:
        raise InputError(f"{where} = {size!r}: expected an ISO tire size WIDTH/ASPECT R RIM, e.g. 195/65R15 "
                         "(section width mm / aspect ratio % R rim diameter inch)")
    width = checked_number(f"{where} (section width)", float(m.group(1)) / 1000.0, "m", 0.1, 0.5)
    aspect = checked_number(f"{where} (aspect ratio)", float(m.group(2)) / 100.0, "-", 0.2, 1.2)
    rim = checked_number(f"{where} (rim diameter)", float(m.group(3)) * INCH, "m", 10 * INCH, 24 * INCH)
    return width, aspect, rim


def unloaded_radius(size: str) -> float:
    """Unloaded tire radius of an ISO size, m: rim diameter / 2 + section width x aspect ratio."""
    width, aspect, rim = parse_tire_size(size)
    return rim / 2.0 + width * aspect


def _spec_values(spec: Any) -> tuple[str, dict[str, Any]]:
    """(name, validated spec-sheet values in SI units); InputError naming the field."""
    if not isinstance(spec, Mapping):
        raise InputError("spec: expected a mapping with 'name' and 'spec_sheet'")
    unknown = sorted(set(map(str, spec)) - {"name", "note", "spec_sheet"})
    if unknown:
        raise InputError(f"spec: unknown key '{unknown[0]}'; known: name, note, spec_sheet")
    s = spec.get("spec_sheet")
    if not isinstance(s, Mapping):
        raise InputError("spec_sheet: missing or not a mapping (mass, front_axle_share or axle_loads, wheelbase, "
                         "track, cg_height, tire, drive, steering_ratio, steering_input)")
    unknown = sorted(set(map(str, s)) - set(_SPEC_KEYS))
    if unknown:
        raise InputError(f"spec_sheet.{unknown[0]}: unknown field; known: {', '.join(_SPEC_KEYS)}")

    def need(key: str, unit: str, lo: float, hi: float) -> float:
        if s.get(key) is None:
            raise InputError(f"spec_sheet.{key}: missing ({unit}, in [{lo:g}, {hi:g}])")
        return checked_number(f"spec_sheet.{key}", s[key], unit, lo, hi)

    out: dict[str, Any] = {}
    loads = s.get("axle_loads")
    if loads is not None:
        if s.get("front_axle_share") is not None:
            raise InputError("spec_sheet.axle_loads: give either axle_loads or front_axle_share, not both")
        if not isinstance(loads, (list, tuple)) or len(loads) != 2:
            raise InputError(f"spec_sheet.axle_loads = {loads!r}: expected [front_kg, rear_kg]")
        f = checked_number("spec_sheet.axle_loads[0]", loads[0], "kg", 1.0, 5e4)
        r = checked_number("spec_sheet.axle_loads[1]", loads[1], "kg", 1.0, 5e4)
        out["mass"] = need("mass", "kg", 100.0, 1e5) if s.get("mass") is not None else f + r
        if abs(f + r - out["mass"]) > 0.02 * out["mass"]:
            raise InputError(f"spec_sheet.axle_loads = [{f:g}, {r:g}]: sum {f + r:g} kg differs from "
                             f"spec_sheet.mass {out['mass']:g} kg by more than 2 %")
        out["front_share"] = f / (f + r)
        if not 0.2 <= out["front_share"] <= 0.8:
            raise InputError(f"spec_sheet.axle_loads = [{f:g}, {r:g}]: front share {out['front_share']:.3f} "
                             "outside [0.2, 0.8]")
    else:
        out["mass"] = need("mass", "kg", 100.0, 1e5)
        if s.get("front_axle_share") is None:
            raise InputError("spec_sheet.front_axle_share: missing (fraction of the weight on the front axle, "
                             "in [0.2, 0.8]; or give axle_loads: [front_kg, rear_kg])")
        out["front_share"] = need("front_axle_share", "-", 0.2, 0.8)
    out["L"] = need("wheelbase", "m", 0.5, 10.0)
    track = s.get("track")
    if isinstance(track, (list, tuple)):
        if len(track) != 2:
            raise InputError(f"spec_sheet.track = {track!r}: expected [front, rear] m or one number")
        out["track"] = tuple(checked_number(f"spec_sheet.track[{i}]", t, "m", 0.5, 3.0) for i, t in enumerate(track))
    else:
        t = need("track", "m", 0.5, 3.0)
        out["track"] = (t, t)
    out["h"] = need("cg_height", "m", 0.1, 3.0)
    if s.get("tire") is None:
        raise InputError("spec_sheet.tire: missing (ISO size, e.g. 195/65R15)")
    out["tire"] = parse_tire_size(s["tire"])
    drive = str(s.get("drive", "")).upper()
    if drive not in DRIVES:
        raise InputError(f"spec_sheet.drive = {s.get('drive')!r}: expected one of {', '.join(DRIVES)}")
    out["drive"] = drive
    if s.get("drive_front_share") is not None:
        if drive != "AWD":
            raise InputError("spec_sheet.drive_front_share: only with drive AWD")
        out["drive_front_share"] = checked_number("spec_sheet.drive_front_share", s["drive_front_share"], "-", 0.0, 1.0)
    out["steering_ratio"] = need("steering_ratio", "steering-wheel / road-wheel angle", 5.0, 40.0)
    si = s.get("steering_input")
    if si not in STEERING_INPUTS:
        raise InputError(f"spec_sheet.steering_input = {si!r}: expected one of {', '.join(STEERING_INPUTS)}")
    out["steering_input"] = si
    if si == "normalised":   # the controls carry -1..1 of the lock: the road-wheel angle at full lock is needed
        out["steering_lock"] = math.radians(need("steering_lock_deg", "deg road-wheel angle at full input", 5.0,
                                                 80.0))
    elif s.get("steering_lock_deg") is not None:
        raise InputError("spec_sheet.steering_lock_deg: only with steering_input normalised")
    out.update(_torque_source(s))
    if out["h"] >= out["L"]:
        raise InputError(f"spec_sheet.cg_height = {out['h']:g} m: expected below the wheelbase {out['L']:g} m")
    name = spec.get("name")
    if name is not None and (not isinstance(name, str) or not name.strip()):
        raise InputError(f"name = {name!r}: expected a non-empty string")
    return (name or "spec_vehicle"), out


def _torque_source(s: Mapping) -> dict[str, Any]:
    """``torque_source`` and what it needs: ``engine`` the gear ratios and final drive (input / output speed, as a
    spec sheet states them), ``engine`` and ``axle`` optionally ``brake_pressure_gain``."""
    source = s.get("torque_source", "measured")
    if source not in TORQUE_SOURCES:
        raise InputError(f"spec_sheet.torque_source = {source!r}: expected one of {', '.join(TORQUE_SOURCES)}")
    out: dict[str, Any] = {"torque_source": source}
    can_only = [k for k in ("gear_ratios", "final_drive", "brake_pressure_gain") if s.get(k) is not None]
    if source == "measured":
        if can_only:
            raise InputError(f"spec_sheet.{can_only[0]}: only with torque_source engine or axle")
        return out
    if source == "engine":
        gears = s.get("gear_ratios")
        if not isinstance(gears, (list, tuple)) or not gears:
            raise InputError("spec_sheet.gear_ratios: missing (the gearbox's ratio per forward gear, input / output "
                             "speed, e.g. [3.46, 1.95, 1.28]) for torque_source engine")
        out["gear_ratios"] = tuple(checked_number(f"spec_sheet.gear_ratios[{i}]", g, "input / output speed", 0.1,
                                                  10.0) for i, g in enumerate(gears))
        if s.get("final_drive") is None:
            raise InputError("spec_sheet.final_drive: missing (axle ratio, input / output speed, in [1, 10]) for "
                             "torque_source engine")
        out["final_drive"] = checked_number("spec_sheet.final_drive", s["final_drive"], "input / output speed", 1.0,
                                            10.0)
    elif s.get("gear_ratios") is not None or s.get("final_drive") is not None:
        raise InputError("spec_sheet.gear_ratios / final_drive: only with torque_source engine")
    gains = s.get("brake_pressure_gain")
    if gains is not None:
        if not isinstance(gains, (list, tuple)) or len(gains) != 2:
            raise InputError(f"spec_sheet.brake_pressure_gain = {gains!r}: expected [front, rear] N m per wheel "
                             "per bar")
        out["brake_pressure_gain"] = tuple(checked_number(f"spec_sheet.brake_pressure_gain[{i}]", g,
                                                          "N m per wheel per bar", 0.01, 1e4)
                                           for i, g in enumerate(gains))
    return out


# ---------------------------------------------------------------------------------------------- derivation
def _r(x: float, digits: int = 6) -> float:
    """Rounded to ``digits`` significant digits (readable YAML; far below any spec sheet's precision)."""
    return float(f"{x:.{digits}g}")


def description_document_from_spec(spec: Mapping) -> dict:
    """The vehicle-description document (docs/vehicle_description.md) of a spec sheet (module doc), SI units.

    Spec-sheet values are copied; every other field follows the rule in :data:`RULES`. ``torque_source`` is the
    spec's (``measured`` by default, with no ``powertrain`` section; ``engine`` gives a ``powertrain`` of the gearing
    only). Raises :class:`InputError` naming the spec field on bad input.
    """
    name, s = _spec_values(spec)
    m, L, h = s["mass"], s["L"], s["h"]
    tf, tr = s["track"]
    width, aspect, rim = s["tire"]
    r0 = rim / 2.0 + width * aspect
    section_height = width * aspect
    outer_d = 2.0 * r0

    # masses and CG (the unsprung corners sit on the axles)
    m_tw = REF_TIRE_MASS * outer_d * width / REF_TIRE_DW                     # tire + wheel, kg
    mu_corner = m_tw + CORNER_HARDWARE_SHARE * m                              # one corner, kg
    m_s = m - 4.0 * mu_corner
    if m_s < 0.5 * m:
        raise InputError(f"spec_sheet.mass = {m:g} kg: too light for the tire {width * 1000:.0f} mm wide "
                         f"(4 unsprung corners of {mu_corner:.1f} kg)")
    a_total = L * (1.0 - s["front_share"])                                   # total CG to front axle, m
    a_s = (m * a_total - 2.0 * mu_corner * L) / m_s
    if not 0.05 * L < a_s < 0.95 * L:
        raise InputError(f"spec_sheet.front_axle_share = {s['front_share']:g}: puts the sprung CG "
                         f"{a_s:.3f} m behind the front axle, outside the wheelbase")
    b_s = L - a_s

    # tire: static loads, stiffness, radii
    wf = m * G * s["front_share"] / 2.0                                       # static wheel loads, N
    wr = m * G * (1.0 - s["front_share"]) / 2.0
    deflect = STATIC_DEFLECTION_RATIO * section_height                      # at the mean wheel load, m
    kzf = kzr = min(max(0.5 * (wf + wr) / deflect, KZ_RANGE[0]), KZ_RANGE[1])  # one placard pressure, N/m
    defl_mean = 0.5 * (wf / kzf + wr / kzr)
    r_roll = r0 - ROLLING_DEFLECTION_FRACTION * defl_mean
    r_lf, r_lr = r0 - wf / kzf, r0 - wr / kzr                                  # loaded wheel-centre heights
    h_s = (m * h - 2.0 * mu_corner * (r_lf + r_lr)) / m_s
    if h_s <= max(ROLL_CENTRE_HEIGHT):
        raise InputError(f"spec_sheet.cg_height = {h:g} m: the sprung CG ({h_s:.3f} m) would lie below the "
                         f"assumed roll centres ({max(ROLL_CENTRE_HEIGHT):g} m)")

    # inertias
    t_mean = 0.5 * (tf + tr)
    h_rc = 0.5 * sum(ROLL_CENTRE_HEIGHT)
    jx = m_s * (ROLL_GYRATION_TRACK * t_mean) ** 2 + m_s * (h_s - h_rc) ** 2 / 3.0
    jz = YAW_DYNAMIC_INDEX * m_s * a_s * b_s
    jw = m_tw * (SPIN_GYRATION * r0) ** 2 + SPIN_HARDWARE

    # brakes
    phi = min(max(s["front_share"] + BRAKE_DESIGN_DECEL * h / L, 0.5), 0.85)
    brake_total = BRAKE_CAPACITY * m * G * r_roll                             # N m, all four wheels
    drive = s["drive"]
    axles = {"FWD": ["front"], "RWD": ["rear"], "AWD": ["front", "rear"]}[drive]
    share = {"FWD": 1.0, "RWD": 0.0}.get(drive, s.get("drive_front_share", AWD_FRONT_SHARE))

    brakes: dict[str, Any] = {"torque_front": _r(brake_total * phi / 2.0),
                              "torque_rear": _r(brake_total * (1.0 - phi) / 2.0)}
    if s["torque_source"] != "measured":   # the CAN brake pressure's gains: given, or full pedal at 100 bar
        gains = s.get("brake_pressure_gain") or (brakes["torque_front"] / FULL_BRAKE_LINE_PRESSURE,
                                                 brakes["torque_rear"] / FULL_BRAKE_LINE_PRESSURE)
        brakes.update(pressure_gain_front=_r(gains[0]), pressure_gain_rear=_r(gains[1]))
    steering: dict[str, Any] = ({"source": "ratio", "ratio": _r(1.0 / s["steering_ratio"])}
                                if s["steering_input"] == "steering_wheel_angle" else
                                {"source": "ratio", "ratio": _r(s["steering_lock"])}
                                if s["steering_input"] == "normalised" else {"source": "measured"})
    return {
        "name": name,
        "note": f"generated from a spec sheet (vehcal vehicle from-spec): {drive}, tire "
                f"{round(width * 1000)}/{round(aspect * 100)}R{rim / INCH:g}, steering ratio "
                f"{s['steering_ratio']:g}; defaults by rule of thumb (vehcal_ros/vehicle/spec_sheet.py)",
        "gravity": G,
        "mass": {"sprung": _r(m_s), "unsprung_front": _r(mu_corner), "unsprung_rear": _r(mu_corner)},
        "cg": {"to_front_axle": _r(a_s), "to_rear_axle": _r(b_s), "height": _r(h_s)},
        "inertia": {"roll": _r(jx), "yaw": _r(jz), "roll_yaw": 0.0},
        "track": {"front": tf, "rear": tr},
        "roll_centre_below_cg": {"front": _r(h_s - ROLL_CENTRE_HEIGHT[0]), "rear": _r(h_s - ROLL_CENTRE_HEIGHT[1])},
        "tire": {"unloaded_radius": _r(r_roll + defl_mean), "rolling_radius": _r(r_roll),
                 "rolling_minus_loaded": _r((1.0 - ROLLING_DEFLECTION_FRACTION) * defl_mean),
                 "vertical_stiffness_front": _r(kzf), "vertical_stiffness_rear": _r(kzr),
                 "friction_peak": FRICTION[0], "friction_slide": FRICTION[1], "combined_slip": "ellipse",
                 "lateral_friction_ratio": 1.0},
        "wheel": {"spin_inertia_front": _r(jw), "spin_inertia_rear": _r(jw)},
        "driveline": {"driven_axles": axles, "front_share": float(share)},
        "torque_source": s["torque_source"],
        **({"powertrain": {"gear_ratios": [_r(1.0 / g) for g in s["gear_ratios"]],
                           "final_drive": _r(1.0 / s["final_drive"]), "efficiency": 1.0}}
           if s["torque_source"] == "engine" else {}),
        "brakes": brakes,
        "steering": steering,
        "nominal": {"rr": _r(ROLLING_RESISTANCE * r_roll)},
    }


# -------------------------------------------------------------------------------------------- YAML output
def _scalar(v: Any) -> str:
    return yaml.safe_dump(v, default_flow_style=True, width=1000).strip().removesuffix("...").strip()


def _emit(doc: Mapping, prefix: str, indent: int, lines: list[str]) -> None:
    pad = "  " * indent
    for key, value in doc.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping):
            lines.append(f"{pad}{key}:")
            _emit(value, path + ".", indent + 1, lines)
            continue
        text = f"{pad}{key}: {_scalar(value)}"
        rule = RULES.get(path)
        lines.append(f"{text:<44} # {rule}" if rule else text)


def description_yaml_from_spec(spec: Mapping, header: str = "") -> str:
    """The document of :func:`description_document_from_spec` as YAML text with each derived value's rule as a
    comment next to it (``yaml.safe_load`` of the text gives the document back); ``header``: comment lines."""
    doc = description_document_from_spec(spec)
    lines = [f"# {h}" if h else "#" for h in header.splitlines()] if header else []
    lines.append("# Schema: docs/vehicle_description.md. Derived from the spec sheet by the rules commented below.")
    _emit(doc, "", 0, lines)
    return "\n".join(lines) + "\n"


__all__ = ["description_document_from_spec", "description_yaml_from_spec", "parse_tire_size", "unloaded_radius",
           "RULES"]
