"""``vehcal vehicle describe``: the estimators' vehicle description derived from a simulator model file.

What a user would have measured on the car, taken from the 14-DOF model (models/vehicle14) settled at rest on a
flat road: masses (sprung = chassis with the steering parts and the control arms; unsprung per corner = upright
+ spindle + rim + tire), the sprung CG and its inertias about the CG (chassis axes), wheel-centre wheelbase and
tracks, the roll centres of the suspension geometry, the tire radius as the 8-DOF uses it (``r0`` such that
r0 - Fz/kt equals the measured free-rolling radius u/omega at the static loads: the simulator's tire rolls at
R0 - deflection/3, the 8-DOF's at r0 - deflection), the rolling radius minus the loaded radius (wheel-centre
height, R0 - deflection: the lever of the tire force) and vertical stiffness, the tire's friction
peak and full-slide values on the dry road (mu 0.9), wheel spin inertias, driveline, engine map and gearbox (or
the 8-DOF paper's motor map for the HMMWV), brake gains, the steering gain, and the rolling-resistance lever
``nominal.rr`` = QSY1 x R0 (HMMWV 0.00376 m, sedan 0; the other nominal values and the priors are left to the
schema's load-derived defaults). The result is a document in the
schema of vehicle/description.py (docs/vehicle_description.md), validated by ``description_from_dict``.

Roll centre of an axle (the swing-arm construction in the y-z plane): the contact point P of the left wheel
moves with the knuckle; the line through P perpendicular to its velocity per unit suspension travel (y-z
components) passes through the knuckle's instant centre, and it crosses the vehicle centreline y = 0 at the
roll centre: z_rc = P_z + P_y v_y / v_z.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from vehcal_ros.vehicle.description import RPM, VehicleDescription, description_from_dict

DRY_MU = 0.9
"""Road friction at which the tire's friction peak/slide values are reported (the scenarios' dry surface)."""


def _parallel(r: np.ndarray) -> np.ndarray:
    return float(r @ r) * np.eye(3) - np.outer(r, r)


def describe_model(model: str | Path | None = None) -> dict[str, Any]:
    """The description document (a dict in the vehicle-description schema) of a vehicle model file or shipped
    vehicle name (``hmmwv``, ``sedan``; None = hmmwv). Raises InputError on an unreadable model file."""
    from vehcal_ros.models.powertrain import GEAR_RATIO, MAX_MOTOR_SPEED, MAX_MOTOR_TORQUE
    from vehcal_ros.models.vehicle14 import Hmmwv14, RoadMap, load_simulator_params
    from vehcal_ros.models.vehicle14 import dynamics as dyn
    from vehcal_ros.models.vehicle14.kinematics import B_KN, B_LCA, B_UCA, B_WH, corner_state

    params = load_simulator_params(model)
    sim = Hmmwv14(params, RoadMap.uniform(DRY_MU))
    sim.reset(speed=0.0)
    y = sim.state
    work = sim._work
    sim.accelerations()  # fills the kinematics of the settled pose
    pos, rot = work[1], work[0]
    R = np.array(dyn.quat_to_rot(*y[dyn.Y_Q : dyn.Y_Q + 4]))
    g = params.gravity

    # ---- masses and the sprung CG (chassis frame, settled pose) ----
    sprung = [(params.chassis.mass, params.chassis_com, params.chassis.inertia)]
    unsprung = [0.0, 0.0]
    for i in range(4):
        lca, uca, upright, wheel = params.corner_bodies(0 if i < 2 else 1)
        ci = sim.geometry.ci[i]
        for j, body in ((B_LCA, lca), (B_UCA, uca)):
            Rj = rot[i, j]
            sprung.append((body.mass, pos[i, j].copy(), Rj @ ci[j] @ Rj.T))
        unsprung[0 if i < 2 else 1] = upright.mass + wheel.mass
    m_s = sum(m for m, _, _ in sprung)
    cg = sum(m * p for m, p, _ in sprung) / m_s
    inertia = sum(I + m * _parallel(p - cg) for m, p, I in sprung)
    x_front = 0.5 * (pos[0, B_WH][0] + pos[1, B_WH][0])
    x_rear = 0.5 * (pos[2, B_WH][0] + pos[3, B_WH][0])
    h = y[dyn.Y_R + 2] + R[2] @ cg

    # ---- roll centres (module doc) ----
    wt = work[12]
    rc_height = []
    for i in (0, 2):
        st = corner_state(sim.geometry, i, y[dyn.Y_TH + i], 1.0, y[dyn.Y_SIG], 0.0)
        w, v_o = st["sth"][B_KN, :3], st["sth"][B_KN, 3:]
        c = st["pos"][B_WH]
        p_c = c - np.array([0.0, 0.0, params.tire.r0 - wt[i, dyn.W_DELTA]])  # contact point, chassis frame
        v = v_o + np.cross(w, p_c)
        z_rc = p_c[2] + p_c[1] * v[1] / v[2]
        rc_height.append(y[dyn.Y_R + 2] + R[2] @ np.array([c[0], 0.0, z_rc]))

    # ---- rolling radius as measured (u / omega of a free-rolling wheel at its rest load), expressed as the r0
    # of the 8-DOF's r0 - Fz/kt with kt = the tire's vertical stiffness ----
    r0_rolling = float(np.mean(wt[:, dyn.W_RE] + wt[:, dyn.W_FZ] / params.tire.kz))

    # ---- tire friction on the dry road at the static loads ----
    slip = np.linspace(0.0, 1.0, 20001)
    mu_curve = sim.tire_mu_curve(0, slip)
    mu_peak, mu_slide = float(mu_curve.max()), float(mu_curve[-1])
    mu_lat = _lateral_peak(sim, float(wt[0, dyn.W_FZ]))

    doc: dict[str, Any] = {
        "name": params.name,
        "note": f"derived by `vehcal vehicle describe` from the simulator model file of '{params.name}' "
                "(settled at rest on a flat road; friction on the dry road, mu 0.9)",
        "gravity": g,
        "mass": {"sprung": m_s, "unsprung_front": unsprung[0], "unsprung_rear": unsprung[1]},
        "cg": {"to_front_axle": x_front - cg[0], "to_rear_axle": cg[0] - x_rear, "height": h},
        "inertia": {"roll": inertia[0, 0], "yaw": inertia[2, 2], "roll_yaw": inertia[0, 2]},
        "track": {"front": pos[0, B_WH][1] - pos[1, B_WH][1], "rear": pos[2, B_WH][1] - pos[3, B_WH][1]},
        "roll_centre_below_cg": {"front": h - rc_height[0], "rear": h - rc_height[1]},
        "tire": {"unloaded_radius": r0_rolling, "rolling_minus_loaded": r0_rolling - params.tire.r0,
                 "vertical_stiffness_front": params.tire.kz,
                 "vertical_stiffness_rear": params.tire.kz, "friction_peak": mu_peak, "friction_slide": mu_slide,
                 "combined_slip": "ellipse" if params.tire.combined == "ellipsis" else "mf",
                 "lateral_friction_ratio": mu_lat / mu_peak},
        "suspension": {"toe_in_front": _toe_table(sim, 0), "toe_in_rear": _toe_table(sim, 2),
                       "wheel_rate_front": _wheel_rate(sim, 0), "wheel_rate_rear": _wheel_rate(sim, 2),
                       "pitch_at_rest": float(-math.asin(max(-1.0, min(1.0, R[2, 0]))))},
        "wheel": {"spin_inertia_front": params.corner_bodies(0)[3].inertia[1, 1],
                  "spin_inertia_rear": params.corner_bodies(1)[3].inertia[1, 1]},
        "torque_source": "map",
        "brakes": {"torque_front": params.brake_max_torque, "torque_rear": params.brake_max_torque},
        "steering": {"source": "ratio", "ratio": sim.steering_gain},
        # the rolling-resistance lever (8-DOF rr, m): the tire's QSY1 x R0 (a tire data sheet / coast-down value)
        "nominal": {"rr": params.tire.qsy1 * params.tire.r0},
    }
    if params.tire.combined != "ellipsis":   # MF2002 weighting functions (estimation/grip/friction_samples.py)
        t = params.tire
        doc["tire"]["combined_coefficients"] = {"RBX1": t.rbx1, "RBX2": t.rbx2, "RCX1": t.rcx1, "REX1": t.rex1,
                                                "RHX1": t.rhx1}
    pt = params.powertrain
    if pt is None:  # the 8-DOF paper's motor map on all four wheels (models/powertrain.py)
        doc["driveline"] = {"driven_axles": ["front", "rear"], "front_share": 0.5, "inertia_in_wheels": True}
        doc["powertrain"] = {"kind": "dc_motor", "max_torque": MAX_MOTOR_TORQUE, "max_speed": MAX_MOTOR_SPEED,
                             "ratio": GEAR_RATIO, "efficiency": 1.0}
    else:
        front = float(pt.wheel_fraction[0] + pt.wheel_fraction[1])
        axles = [a for a, share in (("front", front), ("rear", 1.0 - front)) if share > 0.0]
        doc["driveline"] = {"driven_axles": axles, "front_share": front, "inertia_in_wheels": True}
        doc["powertrain"] = {
            "kind": "engine_map",
            "full_throttle_rpm": [[w / RPM, t] for w, t in pt.map_full.tolist()],
            "zero_throttle_rpm": [[w / RPM, t] for w, t in pt.map_zero.tolist()],
            "gear_ratios": pt.gear_ratios.tolist(),
            "shift_rpm": [[d / RPM, u / RPM] for d, u in zip(pt.shift_down.tolist(), pt.shift_up.tolist())],
            "final_drive": pt.final_ratio,
            "efficiency": 1.0,
        }
    return _plain(doc)


TOE_TRAVEL = np.round(np.arange(-0.10, 0.0601, 0.01), 3)
"""Wheel travels (m, + = bump, from the settled pose) of the toe tables ``suspension.toe_in_*``."""


def _toe_table(sim: Any, corner: int) -> list[list[float]]:
    """Toe-in (rad) of ``corner``'s wheel (0 = front left, 2 = rear left) at the wheel travels ``TOE_TRAVEL`` (m,
    + = bump: wheel centre up relative to the body, from its height at the settled pose), straight-ahead rack:
    the suspension's kinematic toe curve (static toe + bump steer), as an alignment rig measures it. The LCA
    rotation is swept (poses where the linkage closes) and toe and wheel-centre height interpolated onto the
    travels."""
    from vehcal_ros.models.vehicle14 import dynamics as dyn
    from vehcal_ros.models.vehicle14.kinematics import corner_state

    y = sim.state
    q0, sigma = float(y[dyn.Y_TH + corner]), float(y[dyn.Y_SIG])
    z0 = corner_state(sim.geometry, corner, q0, 1.0, sigma, 0.0)["wheel_centre"][2]
    q = q0 + np.linspace(-0.6, 0.6, 241)
    st = [corner_state(sim.geometry, corner, float(x), 1.0, sigma, 0.0) for x in q]
    st = [s for s in st if abs(s["residual"]) <= 1e-9]   # poses where the linkage closes
    travel = np.array([s["wheel_centre"][2] - z0 for s in st])
    toe = np.array([s["toe"] for s in st])
    order = np.argsort(travel)
    travel, toe = travel[order], toe[order]
    keep = (TOE_TRAVEL >= travel[0]) & (TOE_TRAVEL <= travel[-1])
    return [[float(z), float(np.interp(z, travel, toe))] for z in TOE_TRAVEL[keep]]


def _wheel_rate(sim: Any, corner: int) -> float:
    """Suspension wheel rate (N/m) of ``corner`` at the settled pose: spring rate (k1 + 3 k3 x^2 at its static
    deflection x) times the squared motion ratio d(spring length)/d(wheel travel) (central differences)."""
    from vehcal_ros.models.vehicle14 import dynamics as dyn
    from vehcal_ros.models.vehicle14.kinematics import corner_state

    y = sim.state
    q0, sigma = float(y[dyn.Y_TH + corner]), float(y[dyn.Y_SIG])
    axle = sim.params.front if corner < 2 else sim.params.rear
    st = [corner_state(sim.geometry, corner, q0 + dq, 1.0, sigma, 0.0) for dq in (-1e-4, 0.0, 1e-4)]
    ratio = (st[2]["spring_length"] - st[0]["spring_length"]) / (st[2]["wheel_centre"][2] - st[0]["wheel_centre"][2])
    x = st[1]["spring_length"] - axle.spring_free_length
    return float((axle.spring_k1 + 3.0 * axle.spring_k3 * x * x) * ratio * ratio)


def _lateral_peak(sim: Any, fz: float) -> float:
    """Peak of the pure-lateral |Fy|/Fz curve of the tire at load ``fz`` on the dry road (mu DRY_MU)."""
    from vehcal_ros.models.vehicle14.tires import fy_pure

    alpha = np.linspace(0.0, 0.6, 6001)
    return float(max(abs(fy_pure(sim._tp, fz, float(a), DRY_MU)) for a in alpha) / fz)


def _plain(x: Any) -> Any:
    """numpy scalars -> float, rounded to 7 significant digits for a readable file; nested containers kept."""
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, (float, np.floating)):
        v = float(x)
        return float(f"{v:.7g}") if math.isfinite(v) and v != 0.0 else v
    if isinstance(x, np.integer):
        return int(x)
    return x


def describe_vehicle(model: str | Path | None = None) -> VehicleDescription:
    """:func:`describe_model` validated into a :class:`VehicleDescription` (priors/nominal derived)."""
    return description_from_dict(describe_model(model), source=f"described from {model or 'hmmwv'}")


__all__ = ["describe_model", "describe_vehicle", "DRY_MU"]
