"""Generate a zoo of random, plausible vehicles for the 14-DOF simulator, each with an everyday drive.

``python benchmarks/zoo/make_zoo.py --n 32 --seed 2026 --out benchmarks/zoo/vehicles`` writes, per vehicle
``zoo_NN``, a directory with

* ``zoo_NN.yaml``   - a simulator model file in the layout of ``vehcal_ros/data/hmmwv.yaml`` (loaded by
  ``vehcal_ros.models.vehicle14.params.load_simulator_params``), scaled from the package's sedan (cars, < ``HEAVY_KG``)
  or HMMWV (heavy ones) model file;
* ``scenario.yaml`` - a random everyday drive (120-160 s, low excitation like ``config/scenarios/
  sedan_daily_driving.yaml``) over 3-4 road sections with 2-3 friction changes drawn from ``ROAD_MUS`` (the
  first section has mu >= 0.6: a launch from standstill on 0.3-0.4 spins the driven wheels of a 2WD zoo vehicle
  for ~0.1 s at the 1-2 gear change, even at 10 % throttle, with the base files' engine maps); its
  ``vehicle`` field points at the model file, so ``vehcal simulate benchmarks/zoo/vehicles/zoo_NN/scenario.yaml``
  runs it;
* ``spec_sheet.yaml`` - what a spec sheet states about the vehicle (the schema of the vehicle spec sheets);

plus ``manifest.yaml`` with each vehicle's sampled targets and the values measured on the built model (static
equilibrium of the simulator), its tire set and LFZO, and its road schedule.

What is scaled (each vehicle; draws from ``numpy.random.default_rng(seed)``):

* mass (Latin-hypercube over 900-3500 kg): the chassis mass takes the rest after the corner bodies; unsprung
  bodies scale with (mass ratio)^0.5, the wheel (rim + tire) with the tire's radius;
* wheelbase and track: suspension locations along x, every hardpoint's y per axle (and the steering linkage's y),
  the steering subsystem moved with the front axle;
* CG: the chassis COM x is solved for the sampled front-axle share, its z for the sampled CG height;
* chassis inertias: Ixx ~ m track^2, Iyy ~ m wheelbase^2, Izz ~ m (wheelbase^2 + track^2), each x U(0.9, 1.1);
* springs: rate x (sprung axle load ratio) x phi^2 (phi ~ U(0.9, 1.12): ride frequency factor), the free length
  moved so the design-position force scales with the sprung load; dampers x (load ratio) x phi (same damping
  ratio); bump/rebound stops follow the design length;
* tire: a ZOO set of ``vehcal_ros/data/tire_coefficients.yaml`` by mass class (``_tire_for``); its PCX1..PKX3,
  PHX/PVX, FNOMIN, unloaded radius and vertical stiffness go into ``tires.pac02`` (the simulator drops PHX, PVX:
  no shifts); LFZO = 1 when the static corner load is 0.45-1.1 x FNOMIN, else the load / FNOMIN / U(0.6, 0.9)
  (Chrono sizes a tire to a vehicle the same way). Lateral and combined-slip coefficients stay the base file's;
* drive: FWD / RWD / AWD in equal thirds (shuffled). Every zoo vehicle uses the engine-map powertrain
  (``SIMPLE_MAP`` + ``AUTOMATIC_SIMPLE_MAP``: the base's engine map, torque x mass ratio x U(0.85, 1.15)) with
  ``driveline_2wd`` (driven_axle front/rear) or ``driveline_4wd`` (equal split): the layouts models/vehicle14/params.py
  already supports, no simulator change. Brake torque x mass ratio x radius ratio.

Spec-sheet values are measured on the built model: mass = total mass, front_axle_share = front static wheel loads
/ all at the simulator's static equilibrium, wheelbase and track = spindle positions, cg_height = the design-pose
centre of mass height above the ground at the equilibrium ride height (all bodies; +/- a few mm).
``steering_ratio`` is a drawn hand-wheel ratio (cars 14-17, heavy 16-20); the simulator has no hand wheel: its
controls steering axis carries the normalised input -1..1 whose mean front road-wheel angle is
``steering_gain`` x input (``steering_input: normalised``; the gain is in the manifest).
"""

from __future__ import annotations

import argparse
import copy
import math
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import yaml

HEAVY_KG = 2200.0
"""Vehicles at or above this mass (kg) are scaled from the HMMWV model file, lighter ones from the sedan's."""
MASS_RANGE = (900.0, 3500.0)
"""Total mass range (kg)."""
ROAD_MUS = (1.0, 0.8, 0.6, 0.4, 0.3)
"""Road friction values of the drive's sections (peak Fx/Fz at the reference load)."""
LAYOUTS = ("FWD", "RWD", "AWD")
G = 9.81
PARAM_FIELDS = ("PCX1", "PDX1", "PDX2", "PEX1", "PEX2", "PEX3", "PEX4", "PKX1", "PKX2", "PKX3", "PHX1", "PHX2",
                "PVX1", "PVX2")


def _data(name: str) -> dict:
    """A parsed YAML file of the package's ``vehcal_ros/data``."""
    return yaml.safe_load(resources.files("vehcal_ros").joinpath(f"data/{name}").read_text())


def _v(x: Any) -> np.ndarray:
    return np.asarray(x, dtype=float)


def _r(x: float, nd: int = 6) -> float:
    return float(round(float(x), nd))


def _rl(x: Any, nd: int = 6) -> list[float]:
    return [_r(v, nd) for v in np.asarray(x, dtype=float).ravel()]


def zoo_tires() -> list[dict]:
    """The ZOO sets of ``vehcal_ros/data/tire_coefficients.yaml``."""
    return [s for s in _data("tire_coefficients.yaml")["sets"] if s["split"] == "zoo"]


def _tire_for(mass: float, tires: list[dict], rng: np.random.Generator) -> dict:
    """Tire by mass class: < 1400 kg the 185/80R14, 1400-2600 kg the 255/55R20, heavier the 335/65R22.5 (one of
    its four pressure fits at random)."""
    by = {t["id"]: t for t in tires}
    if mass < 1400.0:
        return by["van_185_80R14"]
    if mass < 2600.0:
        return by["suv_255_55R20_mf61"]
    feda = [t for t in tires if t["family"] == "goodyear_G275MSA_335_65R22.5"]
    return feda[int(rng.integers(len(feda)))]


def _trim(base: dict, heavy: bool) -> dict:
    """The base model file reduced to the sections the simulator reads."""
    keep = ["vehicle_layout", "chassis", "double_wishbone", "wheel", "brakes", "powertrain", "tires"]
    keep.append("steering_pitman_arm" if heavy else "rack_pinion")
    d = {k: copy.deepcopy(base[k]) for k in keep}
    d["tires"] = {"common": d["tires"]["common"], "size": d["tires"]["size"], "pac02": d["tires"]["pac02"]}
    pt = d["powertrain"]
    d["powertrain"] = {"engine_simple_map_cpp": pt["engine_simple_map_cpp"],
                       "transmission_simple_map": pt["transmission_simple_map"]}
    for k in ("geometry_derived",):
        d["double_wishbone"].pop(k, None)
    sp = d["double_wishbone"]["spring"]
    for k in ("deformation_points", "front_force_table", "rear_force_table", "json_alternative"):
        sp.pop(k, None)
    d["double_wishbone"]["shock"].pop("json_linear_alternative", None)
    return d


def _spindle(d: dict, axle: str) -> np.ndarray:
    return _v(d["double_wishbone"][axle]["hardpoints_m"]["SPINDLE"]) + _v(
        d["vehicle_layout"][f"{axle}_suspension_location"])


def _corner_masses(d: dict, axle: str) -> float:
    """Mass (kg) of one corner of ``axle``: arms, upright, spindle, rim, tire."""
    dw = d["double_wishbone"]
    b = dw["rear"].get("bodies_derived") if axle == "rear" and "bodies_derived" in dw["rear"] else dw["bodies"]
    return (b["LCA"]["mass"] + b["UCA"]["mass"] + b["upright"]["mass"] + b["spindle"]["mass"]
            + d["wheel"]["mass"] + d["tires"]["common"]["mass"])


def _corner_com_mass(d: dict, axle: str) -> tuple[float, np.ndarray]:
    """(mass, mass-weighted position sum over the axle's two corners) in the chassis frame, design pose."""
    dw = d["double_wishbone"]
    b = dw["rear"].get("bodies_derived") if axle == "rear" and "bodies_derived" in dw["rear"] else dw["bodies"]
    hp = {k: _v(v) + _v(d["vehicle_layout"][f"{axle}_suspension_location"])
          for k, v in dw[axle]["hardpoints_m"].items()}
    parts = [(b["LCA"]["mass"], hp["LCA_CM"]), (b["UCA"]["mass"], hp["UCA_CM"]), (b["upright"]["mass"], hp["UPRIGHT"]),
             (b["spindle"]["mass"] + d["wheel"]["mass"] + d["tires"]["common"]["mass"], hp["SPINDLE"])]
    m = 2.0 * sum(p[0] for p in parts)
    s = np.zeros(3)
    for mi, p in parts:
        s += mi * (p * np.array([1.0, 0.0, 1.0])) * 2.0  # left + mirrored right: y cancels
    return m, s


def _steering_parts(d: dict) -> list[tuple[float, np.ndarray]]:
    if "rack_pinion" in d:
        rp = d["rack_pinion"]
        return [(float(rp["steering_link"]["mass"]), _v(rp["location"]))]
    st = d["steering_pitman_arm"]
    pts = st["hardpoints_chassis_frame_derived"]
    return [(float(st["steering_link"]["mass"]), _v(pts["STEERINGLINK"])),
            (float(st["pitman_arm"]["mass"]), 0.5 * (_v(pts["REV"]) + _v(pts["UNIV"])))]


def _scale_body(b: dict, s: float) -> None:
    """Mass and inertia x s (a corner body entry of the model file)."""
    b["mass"] = _r(float(b["mass"]) * s)
    for k in ("inertia", "inertia_moments", "inertia_products"):
        if k in b and b[k] is not None:
            b[k] = _rl(_v(b[k]) * s, 8)


def _spring_length(hp: dict) -> float:
    return float(np.linalg.norm(_v(hp["SPRING_C"]) - _v(hp["SPRING_A"])))


def _sprung_axle_load(d: dict) -> tuple[float, float]:
    """Sprung load (kg) on the front and the rear axle, rigid statics at the design pose."""
    m_tot, com = _total_com(d)
    xf, xr = _spindle(d, "front")[0], _spindle(d, "rear")[0]
    share = (com[0] - xr) / (xf - xr)
    return (share * m_tot - 2.0 * _corner_masses(d, "front"),
            (1.0 - share) * m_tot - 2.0 * _corner_masses(d, "rear"))


def _total_com(d: dict) -> tuple[float, np.ndarray]:
    """Total mass (kg) and centre of mass (chassis frame, design pose)."""
    ch = d["chassis"]
    m = float(ch["mass"])
    s = m * _v(ch["com_location"])
    for mi, p in _steering_parts(d):
        m += mi
        s = s + mi * p
    for axle in ("front", "rear"):
        mc, sc = _corner_com_mass(d, axle)
        m += mc
        s = s + sc
    return m, s / m


def build_vehicle(name: str, base_name: str, rng: np.random.Generator, mass: float, layout: str,
                  tire: dict) -> tuple[dict, dict]:
    """One zoo model file (dict) and its sampled targets.

    mass: total mass target (kg); layout: FWD/RWD/AWD; tire: a ZOO set of tire_coefficients.yaml.
    """
    heavy = base_name == "hmmwv"
    base = _data(f"{base_name}.yaml")
    d = _trim(base, heavy)
    lay = d["vehicle_layout"]
    dw = d["double_wishbone"]
    m_base, _ = _total_com(d)
    sprung_base = _sprung_axle_load(d)
    len_base = {a: _spring_length(dw[a]["hardpoints_m"]) for a in ("front", "rear")}
    m_ratio = mass / m_base

    # ---- targets ----
    if heavy:
        wheelbase = float(np.clip(2.9 + 0.0004 * (mass - 2200.0) + rng.normal(0.0, 0.12), 2.8, 3.6))
        track = float(rng.uniform(1.60, 1.82))
        cg_height = float(rng.uniform(0.62, 0.85))
        share = float(rng.uniform(0.52, 0.60) if layout == "FWD" else rng.uniform(0.48, 0.56))
    else:
        wheelbase = float(np.clip(2.35 + 0.00045 * (mass - 900.0) + rng.normal(0.0, 0.08), 2.3, 3.1))
        track = float(np.clip(1.38 + 0.00017 * (mass - 900.0) + rng.normal(0.0, 0.03), 1.35, 1.68))
        cg_height = float(rng.uniform(0.46, 0.62))
        share = {"FWD": rng.uniform(0.58, 0.64), "RWD": rng.uniform(0.48, 0.55),
                 "AWD": rng.uniform(0.52, 0.60)}[layout]
        share = float(share)
    track_rear = float(track + rng.uniform(-0.03, 0.03))
    phi = {"front": float(rng.uniform(0.9, 1.12)), "rear": float(rng.uniform(0.9, 1.12))}
    torque_factor = float(rng.uniform(0.85, 1.15))
    inertia_f = rng.uniform(0.9, 1.1, 3)

    # ---- tire ----
    r0_base = float(d["tires"]["pac02"]["dimension"]["UNLOADED_RADIUS"])
    r0 = float(tire["UNLOADED_RADIUS"])
    corner_load = mass * G / 4.0
    fnomin = float(tire["FNOMIN"])
    if 0.45 <= corner_load / fnomin <= 1.1:
        lfzo = 1.0
    else:
        lfzo = corner_load / fnomin / float(rng.uniform(0.6, 0.9))
    w_s = (r0 / r0_base) ** 2  # wheel + tire mass scale (inertia ~ mass x radius^2)
    pac = d["tires"]["pac02"]
    size = str(tire["size"])
    pac["origin"] = (f"zoo: longitudinal MF coefficients, FNOMIN, radius and vertical stiffness of tire set "
                     f"{tire['id']} ({tire['source']['repository']} {tire['source']['path']}); lateral and "
                     f"combined-slip coefficients of the {base_name} file")
    pac.pop("json", None)
    pac["dimension"]["UNLOADED_RADIUS"] = r0
    pac["vertical"]["FNOMIN"] = fnomin
    pac["vertical"]["VERTICAL_STIFFNESS"] = float(tire["VERTICAL_STIFFNESS"])
    pac["scaling"]["LFZO"] = _r(lfzo, 9)
    pac["scaling"]["LCZ"] = 1.0
    for k in ("effective_vertical_stiffness_derived", "effective_Fz0_derived", "headline_derived"):
        pac.pop(k, None)
    for k in PARAM_FIELDS:
        pac["longitudinal"][k] = float(tire["longitudinal"][k])
    d["tires"]["size"] = size
    d["tires"]["common"] = {"mass": _r(d["tires"]["common"]["mass"] * w_s, 4),
                            "inertia": _rl(_v(d["tires"]["common"]["inertia"]) * w_s * (r0 / r0_base) ** 2, 5)}
    d["wheel"]["mass"] = _r(d["wheel"]["mass"] * w_s, 4)
    d["wheel"]["inertia"] = _rl(_v(d["wheel"]["inertia"]) * w_s * (r0 / r0_base) ** 2, 5)
    for k in ("spindle_total_mass_derived", "spin_inertia_total_derived", "spin_inertia_total_rear_derived"):
        d["wheel"].pop(k, None)

    # ---- unsprung bodies ----
    u_s = math.sqrt(m_ratio)
    bodies = [dw["bodies"]] + ([dw["rear"]["bodies_derived"]] if "bodies_derived" in dw["rear"] else [])
    for bs in bodies:
        for k in ("spindle", "upright", "UCA", "LCA"):
            _scale_body(bs[k], u_s)
        if bs.get("tierod"):
            _scale_body(bs["tierod"], u_s)

    # ---- geometry: wheelbase (x) and track (y per axle) ----
    xf0 = float(lay["front_suspension_location"][0])
    xr0 = float(lay["rear_suspension_location"][0])
    wb0 = float(_spindle(d, "front")[0] - _spindle(d, "rear")[0])
    sx = (wheelbase - (wb0 - (xf0 - xr0))) / (xf0 - xr0)  # spindle x offsets in the suspension frames stay
    xf, xr = xf0 * sx, xr0 * sx
    lay["front_suspension_location"][0] = _r(xf)
    lay["rear_suspension_location"][0] = _r(xr)
    dxf = xf - xf0
    for axle, tr in (("front", track), ("rear", track_rear)):
        hp = dw[axle]["hardpoints_m"]
        sy = (tr / 2.0) / float(hp["SPINDLE"][1])
        for k, p in hp.items():
            hp[k] = _rl([p[0], p[1] * sy, p[2]])
        if axle == "front":
            sy_front = sy
    lay["steering_location"][0] = _r(lay["steering_location"][0] + dxf)
    if heavy:
        st = d["steering_pitman_arm"]
        for k, p in st["hardpoints_steering_frame_m"].items():
            st["hardpoints_steering_frame_m"][k] = _rl([p[0], p[1] * sy_front, p[2]])
        for k, p in st["hardpoints_chassis_frame_derived"].items():
            st["hardpoints_chassis_frame_derived"][k] = _rl([p[0] + dxf, p[1] * sy_front, p[2]])
    else:
        d["rack_pinion"]["location"][0] = _r(d["rack_pinion"]["location"][0] + dxf)
    lay["wheelbase"] = _r(xf - xr)
    lay["track"] = _r(track)
    lay["track_rear"] = _r(track_rear)
    for k in list(lay):
        if k.endswith("_derived") or k in ("min_turning_radius", "wheel_center_z_in_chassis",
                                          "wheel_center_z_in_chassis_rear"):
            lay.pop(k)

    # ---- chassis mass, CG and inertias ----
    ch = d["chassis"]
    m_c0 = float(ch["mass"])
    rest = sum(m for m, _ in _steering_parts(d)) + sum(_corner_com_mass(d, a)[0] for a in ("front", "rear"))
    m_c = mass - rest
    x_f, x_r = _spindle(d, "front")[0], _spindle(d, "rear")[0]
    x_cm = x_r + share * (x_f - x_r)
    s_other = sum(m * p for m, p in _steering_parts(d)) + sum(_corner_com_mass(d, a)[1] for a in ("front", "rear"))
    # ground height in the chassis frame: wheel centre minus the loaded radius (static deflection ~ load / kz)
    z_wc = 0.5 * (_spindle(d, "front")[2] + _spindle(d, "rear")[2])
    z_ground = z_wc - (r0 - corner_load / float(tire["VERTICAL_STIFFNESS"]))
    z_cm = z_ground + cg_height
    com_c = np.array([(mass * x_cm - s_other[0]) / m_c, 0.0, (mass * z_cm - s_other[2]) / m_c])
    i0 = _v(ch["inertia_moments"])
    tr0 = 2.0 * float(base["double_wishbone"]["front"]["hardpoints_m"]["SPINDLE"][1])
    ch["mass"] = _r(m_c, 3)
    ch["com_location"] = _rl(com_c)
    ch["inertia_moments"] = _rl([
        i0[0] * m_c / m_c0 * (track / tr0) ** 2 * inertia_f[0],
        i0[1] * m_c / m_c0 * (wheelbase / wb0) ** 2 * inertia_f[1],
        i0[2] * m_c / m_c0 * (wheelbase**2 + track**2) / (wb0**2 + tr0**2) * inertia_f[2]], 3)
    for k in ("driver_position", "rear_connector_location", "collision_box_note"):
        ch.pop(k, None)

    # ---- springs, dampers, stops ----
    sprung_new = _sprung_axle_load(d)
    sp = dw["spring"]
    for i, axle in enumerate(("front", "rear")):
        load_ratio = sprung_new[i] / sprung_base[i]
        ks = load_ratio * phi[axle] ** 2
        cub = sp["cubic_fit_derived"][axle]
        k1 = float(cub["k1"])
        free0 = float(dw[axle]["spring_free_length"])
        pre = float((sp.get("preload") or {}).get(axle, 0.0))
        free_eq0 = free0 + pre / k1
        l_new = _spring_length(dw[axle]["hardpoints_m"])
        free_new = l_new + (free_eq0 - len_base[axle]) / phi[axle] ** 2
        sp["cubic_fit_derived"][axle] = {"k1": _r(k1 * ks, 3), "k3": _r(float(cub["k3"]) * ks, 1)}
        dw[axle]["spring_free_length"] = _r(free_new)
        dw[axle]["spring_design_length_derived"] = _r(l_new)
        dw[axle].pop("shock_design_length_derived", None)
        dw[axle].pop("tierod_length_derived", None)
        stops = sp["stops"].get(axle)
        if stops is not None:
            shift = l_new - len_base[axle]
            sp["stops"][axle] = {"min_length": _r(stops["min_length"] + shift),
                                 "max_length": _r(stops["max_length"] + shift)}
        cs = load_ratio * phi[axle]
        for k, val in list(dw["shock"][axle].items()):
            dw["shock"][axle][k] = _r(float(val) * cs, 3)
    sp.pop("preload", None)
    sp.pop("linear_coefficient", None)
    sp.pop("legacy_linear_coefficient", None)
    sp.pop("front_free_length_equivalent_no_preload_derived", None)
    dw["front"].pop("approximation", None)
    dw["rear"].pop("approximation", None)

    # ---- powertrain, driveline, brakes ----
    eng = d["powertrain"]["engine_simple_map_cpp"]
    tq = m_ratio * torque_factor
    eng["map_full_throttle"] = [[_r(w), _r(t * tq, 2) if t > 0 else _r(t, 2)] for w, t in eng["map_full_throttle"]]
    eng.pop("json_version", None)
    eng.pop("json_version_differs", None)
    eng.pop("peak_torque", None)
    eng.pop("peak_power_derived", None)
    d["powertrain"]["transmission_simple_map"] = {k: v for k, v in d["powertrain"]["transmission_simple_map"].items()
                                                  if k in ("forward_gear_ratios", "reverse_gear_ratio",
                                                           "shift_points_rpm")}
    if layout == "AWD":
        d["driveline_4wd"] = {"front_conical_gear_ratio": 0.2, "rear_conical_gear_ratio": 0.2,
                              "central_differential": "open (equal split)"}
    else:
        d["driveline_2wd"] = {"driven_axle": "front" if layout == "FWD" else "rear", "conical_gear_ratio": 0.2,
                              "inertias": {"driveshaft": 0.5, "differential_box": 0.6}}
    d["brakes"] = {"max_torque_per_wheel": _r(float(base["brakes"]["max_torque_per_wheel"]) * m_ratio
                                              * r0 / r0_base, 1)}
    d["meta"] = {
        "zoo": name,
        "base_model_file": f"vehcal_ros/data/{base_name}.yaml",
        "generator": "benchmarks/zoo/make_zoo.py",
        "note": "a random plausible vehicle scaled from the base file (see the generator's docstring); not a real car",
        "wrapper_defaults": {"steering": "PITMAN_ARM" if heavy else "RACK_PINION", "driveline": layout,
                             "engine": "SIMPLE_MAP", "transmission": "AUTOMATIC_SIMPLE_MAP"},
    }
    lay["aero_drag_used_in_demos"] = None
    order = ["meta", "vehicle_layout", "chassis", "double_wishbone", "steering_pitman_arm", "rack_pinion", "wheel",
             "driveline_2wd", "driveline_4wd", "brakes", "powertrain", "tires"]
    d = {k: d[k] for k in order if k in d}
    targets = {"mass": _r(mass, 1), "front_axle_share": _r(share, 4), "wheelbase": _r(wheelbase, 4),
               "track": [_r(track, 4), _r(track_rear, 4)], "cg_height": _r(cg_height, 4),
               "ride_frequency_factor": [_r(phi["front"], 4), _r(phi["rear"], 4)],
               "engine_torque_factor": _r(torque_factor, 4)}
    tire_info = {"set": tire["id"], "size": size, "LFZO": _r(lfzo, 6), "Fz0": _r(fnomin * lfzo, 1),
                 "static_corner_load_over_Fz0": _r(corner_load / (fnomin * lfzo), 4)}
    return d, {"targets": targets, "tire": tire_info}


def _ramp_schedule(rng: np.random.Generator, duration: float, change_times: list[float], mus: list[float],
                   drive_share: float) -> tuple[list[dict], list[tuple[float, float]]]:
    """Speed-target ramps (scenario segments) and the (t, v) knots of the target, low excitation: a ramp's
    acceleration or deceleration is at most 0.35 x mu x g x drive_share (accelerating; braking: 0.35 x mu x g,
    all four wheels) with mu the lowest friction within 5 s of the ramp, and at most 1.2 m/s^2."""

    def mu_at(t0: float, t1: float) -> float:
        lo = [mus[i] for i in range(len(mus))
              if (change_times[i - 1] if i > 0 else -1e9) - 5.0 <= t1
              and (change_times[i] if i < len(change_times) else 1e9) + 5.0 >= t0]
        return min(lo)

    segs: list[dict] = []
    knots = [(0.0, 0.0)]
    t, v = 1.0, 0.0
    first = True
    while t < duration - 8.0:
        hold = float(rng.uniform(2.0, 7.0)) if not first else 0.0
        t0 = t + hold
        if first:
            target = float(rng.uniform(11.0, 15.0))
        else:
            target = float(np.clip(v + rng.choice([-1.0, 1.0]) * rng.uniform(3.0, 8.0), 6.0, 20.0))
        mu = mu_at(t0, t0 + 15.0)
        a_cap = min(1.2, 0.35 * mu * G * (drive_share if target > v else 1.0))
        a = float(rng.uniform(0.5, 1.0)) * a_cap
        dt = max(abs(target - v) / a, 2.0)
        t1 = t0 + dt
        if t1 > duration - 3.0:
            break
        seg = {"type": "ramp", "t0": _r(t0, 2), "t1": _r(t1, 2), "to": _r(target, 2)}
        if first:
            seg["from"] = 0.0
        segs.append(seg)
        knots += [(t0, v), (t1, target)]
        t, v, first = t1, target, False
    knots.append((duration, v))
    return segs, knots


def _distance(knots: list[tuple[float, float]], t: float) -> float:
    """x (m) travelled by time t along the piecewise-linear target speed."""
    ts = np.array([k[0] for k in knots])
    vs = np.array([k[1] for k in knots])
    grid = np.linspace(0.0, t, 4001)
    return float(np.trapezoid(np.interp(grid, ts, vs), grid))


def build_scenario(name: str, rng: np.random.Generator, layout: str, share: float, steering_gain: float,
                   heavy: bool) -> tuple[dict, dict]:
    """A random everyday drive: 120-160 s, 2-3 friction changes, gentle speed changes and lane changes."""
    duration = float(np.round(rng.uniform(120.0, 160.0), 1))
    n_changes = int(rng.integers(2, 4))
    mus: list[float] = [float(rng.choice([m for m in ROAD_MUS if m >= 0.6]))]  # launch: see the module doc
    for _ in range(n_changes):
        mus.append(float(rng.choice([m for m in ROAD_MUS if m != mus[-1]])))
    edges = np.linspace(0.0, duration, n_changes + 2)
    change_times = [float(e + rng.uniform(-0.1, 0.1) * duration / (n_changes + 1)) for e in edges[1:-1]]
    drive_share = {"FWD": share, "RWD": 1.0 - share, "AWD": 1.0}[layout]
    segs, knots = _ramp_schedule(rng, duration, change_times, mus, drive_share)
    xs = [_distance(knots, t) for t in change_times]
    track = []
    x0 = -100.0
    for i, mu in enumerate(mus):
        x1 = xs[i] if i < len(xs) else 10000.0
        track.append({"mu": mu, "x0": _r(x0, 1), "x1": _r(x1, 1)})
        x0 = x1
    # lane changes: one steering sine period, mean road-wheel amplitude 0.3-0.6 deg
    steer = []
    t = float(rng.uniform(12.0, 20.0))
    phase = 0.0
    while t < duration - 8.0:
        amp = math.radians(float(rng.uniform(0.3, 0.6))) / steering_gain
        steer.append({"type": "sine", "t0": _r(t, 2), "t1": _r(t + 4.0, 2), "amplitude": _r(amp, 5),
                      "frequency": 0.25, "phase": _r(phase, 6)})
        phase = math.pi - phase
        t += float(rng.uniform(22.0, 35.0))
    scen = {
        "name": f"{name}_daily_driving",
        "description": f"{name} ({layout}) - random everyday drive over {len(mus)} road sections (low excitation)",
        "vehicle": f"{name}.yaml",
        "duration": duration,
        "dt": 0.001,
        "seed": int(rng.integers(0, 2**31 - 1)),
        "initial": {"speed": 0.0, "x": 0.0, "y": 0.0, "yaw": 0.0},
        "driver": {"rate": 100,
                   "speed_control": {"kp": 0.3, "ki": 0.05, "max_throttle": 0.3, "target": segs},
                   "steering": steer},
        "road": {"default_mu": mus[0], "track": track},
        "sensors": {
            "wheel_speeds": {"rate": 100, "noise_std": {"omega": 0.05, "torque": 20.0 if heavy else 10.0}},
            "odom": {"rate": 100, "noise_std": {"u": 0.02, "v": 0.02, "yaw_rate": 0.005}},
            "imu": {"rate": 100, "noise_std": {"roll": 0.002, "roll_rate": 0.002, "yaw_rate": 0.005, "ax": 0.05,
                                               "ay": 0.05, "az": 0.05}},
            "tire_forces": {"rate": 100, "noise_std": {"fx": 30.0, "fy": 30.0, "fz": 50.0}},
            "controls": {"rate": 100},
            "ground_truth": {"rate": 100},
            "clock": {"rate": 100},
        },
    }
    info = {"duration": duration, "road_mu": mus, "change_times_planned": [_r(t, 1) for t in change_times],
            "change_x": [_r(x, 1) for x in xs]}
    return scen, info


def measure(model_path: Path) -> dict:
    """Spec-sheet values measured on the built model (simulator static equilibrium; module doc)."""
    from vehcal_ros.models.vehicle14.simulator import Hmmwv14

    sim = Hmmwv14(str(model_path))
    p = sim.params
    out = sim.outputs()
    fz = np.asarray(out["fz"])
    d = yaml.safe_load(model_path.read_text())
    m_tot, com = _total_com(d)
    cg_h = float(out["z"]) + float(com[2])
    sf, sr = _spindle(d, "front"), _spindle(d, "rear")
    from vehcal_ros.models.vehicle14.tires import T_FZ0, T_PDX1, T_PDX2, mu_scale, pack_tire

    tp = pack_tire(p.tire, p.total_mass * p.gravity / 4.0)
    peak = [float((tp[T_PDX1] + tp[T_PDX2] * (f - tp[T_FZ0]) / tp[T_FZ0]) * mu_scale(tp, 1.0)) for f in fz]
    return {"mass": _r(p.total_mass, 2), "front_axle_share": _r((fz[0] + fz[1]) / fz.sum(), 4),
            "wheelbase": _r(sf[0] - sr[0], 4), "track": [_r(2 * sf[1], 4), _r(2 * sr[1], 4)],
            "cg_height": _r(cg_h, 4), "static_wheel_loads": _rl(fz, 1), "steering_gain": _r(sim.steering_gain, 5),
            "implicit_wheel_spin": bool(sim.implicit_spin), "peak_mu_at_static_loads_road_1": _rl(peak, 4),
            "total_mass_design_com": _r(m_tot, 2)}


def make_zoo(n: int, seed: int, out: Path) -> list[dict]:
    """Write n vehicles under ``out`` (module doc) and return the manifest entries."""
    rng = np.random.default_rng(seed)
    tires = zoo_tires()
    masses = MASS_RANGE[0] + (rng.permutation(n) + rng.uniform(0.0, 1.0, n)) / n * (MASS_RANGE[1] - MASS_RANGE[0])
    layouts = [LAYOUTS[i % 3] for i in range(n)]
    layouts = [layouts[i] for i in rng.permutation(n)]
    out.mkdir(parents=True, exist_ok=True)
    manifest = []
    for i in range(n):
        name = f"zoo_{i:02d}"
        mass, layout = float(masses[i]), layouts[i]
        heavy = mass >= HEAVY_KG
        tire = _tire_for(mass, tires, rng)
        model, info = build_vehicle(name, "hmmwv" if heavy else "sedan", rng, mass, layout, tire)
        vdir = out / name
        vdir.mkdir(exist_ok=True)
        header = (f"# {name}: zoo vehicle model file (layout of vehcal_ros/data/hmmwv.yaml), generated by\n"
                  f"# benchmarks/zoo/make_zoo.py --n {n} --seed {seed}; do not edit by hand.\n")
        mpath = vdir / f"{name}.yaml"
        mpath.write_text(header + yaml.safe_dump(model, sort_keys=False, width=120, default_flow_style=None))
        meas = measure(mpath)
        # one correction of the chassis COM height for the CG-height target (the design pose is not the static
        # equilibrium, so the first estimate of the ground height is off by a few cm)
        com = model["chassis"]["com_location"]
        dz = (info["targets"]["cg_height"] - meas["cg_height"]) * meas["mass"] / model["chassis"]["mass"]
        model["chassis"]["com_location"] = [com[0], com[1], _r(com[2] + dz)]
        mpath.write_text(header + yaml.safe_dump(model, sort_keys=False, width=120, default_flow_style=None))
        meas = measure(mpath)
        scen, sinfo = build_scenario(name, rng, layout, meas["front_axle_share"], meas["steering_gain"], heavy)
        (vdir / "scenario.yaml").write_text(
            f"# {name}: random everyday drive (benchmarks/zoo/make_zoo.py --n {n} --seed {seed})\n"
            + yaml.safe_dump(scen, sort_keys=False, width=120, default_flow_style=None))
        steering_ratio = float(rng.uniform(16.0, 20.0) if heavy else rng.uniform(14.0, 17.0))
        spec = {"name": name, "spec_sheet": {
            "mass": int(round(meas["mass"])), "front_axle_share": round(meas["front_axle_share"], 3),
            "wheelbase": round(meas["wheelbase"], 3), "track": [round(t, 3) for t in meas["track"]],
            "cg_height": round(meas["cg_height"], 3), "tire": info["tire"]["size"], "drive": layout,
            "steering_ratio": round(steering_ratio, 1), "steering_input": "normalised",
            "steering_lock_deg": round(math.degrees(meas["steering_gain"]), 2)}}   # the model's lock
        (vdir / "spec_sheet.yaml").write_text(yaml.safe_dump(spec, sort_keys=False, width=200,
                                                             default_flow_style=None))
        manifest.append({"name": name, "base": "hmmwv" if heavy else "sedan", "drive": layout, **info,
                         "measured": meas, "scenario": sinfo})
        print(f"{name}: {layout} {meas['mass']:.0f} kg share {meas['front_axle_share']:.3f} wb "
              f"{meas['wheelbase']:.2f} cg {meas['cg_height']:.2f} tire {info['tire']['set']} LFZO "
              f"{info['tire']['LFZO']:.3f} roads {sinfo['road_mu']} {sinfo['duration']:.0f} s", flush=True)
    (out / "manifest.yaml").write_text(
        f"# benchmarks/zoo/make_zoo.py --n {n} --seed {seed}: per vehicle the sampled targets, the values measured\n"
        "# on the built model (simulator static equilibrium), the tire set and the road schedule.\n"
        + yaml.safe_dump({"n": n, "seed": seed, "vehicles": manifest}, sort_keys=False, width=120,
                         default_flow_style=None))
    return manifest


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=32, help="number of vehicles")
    ap.add_argument("--seed", type=int, default=2026, help="random seed")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "vehicles", help="output folder")
    args = ap.parse_args(argv)
    make_zoo(args.n, args.seed, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
