"""HMMWV parameter set for the 14-DOF constraint-embedding simulator (shared/DESIGN.md section 5,
"Simulator").

Geometry, inertias, springs, dampers, Pitman steering and Pac02 tire data come from ``data/hmmwv.yaml``
(Project Chrono's public HMMWV model). Everything is in the chassis reference frame (x forward, y left,
z up); suspension hardpoints are the LEFT side with the suspension location added (right side = mirror).

Reductions (documented in docs/simulator_model.md):

* the steering link and Pitman arm are driven kinematically, so their masses are lumped into the chassis;
* the tierods and shock/spring halves are massless (Chrono's ``use_tierod_bodies: false``);
* the wheel body = Chrono spindle + rim + tire (71.105 kg); its spin inertia adds the 0.4 kg m^2 axle shaft.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import numpy as np
import yaml

IN_HARDPOINTS = (
    "SPINDLE",
    "UPRIGHT",
    "UCA_F",
    "UCA_B",
    "UCA_U",
    "UCA_CM",
    "LCA_F",
    "LCA_B",
    "LCA_U",
    "LCA_CM",
    "SHOCK_C",
    "SHOCK_A",
    "SPRING_C",
    "SPRING_A",
    "TIEROD_C",
    "TIEROD_U",
)


def _a(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


@dataclass(frozen=True)
class AxleSuspension:
    """One axle's double wishbone (left side, chassis frame), spring and damper (reference
    ``double_wishbone``).

    The spring force pushes the ends apart by -f(L - free_length) with f(x) = k1 x + k3 x^3 (the reference's
    cubic fit of Chrono's table, < 1e-3 N off), plus the bump/rebound stop curve outside [stop_min, stop_max].
    The damper is piecewise linear: midstroke rates inside [engage_min, engage_max], bump-stop rates outside.
    """

    hardpoints: dict[str, np.ndarray]
    spring_k1: float
    spring_k3: float
    spring_free_length: float
    stop_min: float
    stop_max: float
    damper_mid_compression: float
    damper_mid_rebound: float
    damper_bump_compression: float
    damper_bump_rebound: float
    damper_engage_min: float
    damper_engage_max: float


@dataclass(frozen=True)
class RigidBody:
    """Mass (kg), COM is given by the hardpoints, inertia (kg m^2) about the COM in the body axes."""

    mass: float
    inertia: np.ndarray  # (3, 3)


@dataclass(frozen=True)
class SteeringParams:
    """Pitman-arm linkage (reference ``steering_pitman_arm``); points in the steering frame (x-y plane =
    linkage).

    ``location``/``pitch`` place the steering frame in the chassis frame (rotation ``pitch`` about +y).
    ``servo_tau`` is the first-order lag of the Pitman-arm actuator (s); ``max_pitman_angle`` bounds the
    lookup table that maps the road-wheel angle of the shared ``road_wheel_angle`` map to the arm angle.
    """

    location: np.ndarray
    pitch: float
    rev: np.ndarray
    univ: np.ndarray
    revsph_r: np.ndarray
    revsph_s: np.ndarray
    servo_tau: float = 0.02
    max_pitman_angle: float = 0.78


@dataclass(frozen=True)
class TireParams:
    """Pac02 (MF 2002) coefficients of ``HMMWV_Pac02Tire`` used by tires.py (see its reductions).

    ``kz``/``cz`` vertical stiffness (VERTICAL_STIFFNESS x LCZ) and damping; ``fz0`` = FNOMIN x LFZO.
    ``fz_mu_ref``: the load at which the road's mu equals the curve's peak (None = static corner load m g /
    4).
    ``v_low``: floor of the slip denominators for the force computation (like Pac02's VXLOW), m/s.
    """

    r0: float
    kz: float
    cz: float
    fz0: float
    fnomin: float
    dreff: float
    breff: float
    freff: float
    pcx1: float
    pdx1: float
    pdx2: float
    pex1: float
    pex2: float
    pex3: float
    pex4: float
    pkx1: float
    pkx2: float
    pkx3: float
    rbx1: float
    rbx2: float
    rcx1: float
    rex1: float
    rex2: float
    rhx1: float
    pcy1: float
    pdy1: float
    pdy2: float
    pey1: float
    pey2: float
    pky1: float
    pky2: float
    rby1: float
    rby2: float
    rby3: float
    rcy1: float
    rey1: float
    rey2: float
    rhy1: float
    rhy2: float
    qsy1: float
    fz_mu_ref: float | None = None
    v_low: float = 2.0


@dataclass(frozen=True)
class HmmwvParams:
    """Complete 14-DOF HMMWV parameter set; build with :meth:`from_yaml`."""

    gravity: float
    chassis: RigidBody
    chassis_com: np.ndarray
    front: AxleSuspension
    rear: AxleSuspension
    lca: RigidBody
    uca: RigidBody
    upright: RigidBody
    wheel: RigidBody
    bump_stop_curve: np.ndarray  # (n, 2): penetration m, force N
    steering: SteeringParams
    tire: TireParams
    aero_enabled: bool = False
    aero_cd: float = 0.5
    aero_area: float = 5.0
    aero_rho: float = 1.2
    raw: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def total_mass(self) -> float:
        """Total vehicle mass (kg): chassis (with steering link and Pitman arm) + 4 corners."""
        corner = self.lca.mass + self.uca.mass + self.upright.mass + self.wheel.mass
        return self.chassis.mass + 4.0 * corner

    @classmethod
    def from_yaml(cls, path: str | Path | None = None) -> HmmwvParams:
        """Load ``hmmwv.yaml`` (default: the package copy ``vehcal_ros/data/hmmwv.yaml``)."""
        if path is None:
            text = resources.files("vehcal_ros").joinpath("data/hmmwv.yaml").read_text()
        else:
            text = Path(path).read_text()
        return cls.from_dict(yaml.safe_load(text))

    @classmethod
    def from_dict(cls, d: dict) -> HmmwvParams:
        """Build from the parsed reference YAML (same layout as ``reference/hmmwv.yaml``)."""
        lay = d["vehicle_layout"]
        dw = d["double_wishbone"]
        bodies = dw["bodies"]

        def axle(name: str, loc) -> AxleSuspension:
            a = dw[name]
            hp = {k: _a(v) + _a(loc) for k, v in a["hardpoints_m"].items()}
            cubic = dw["spring"]["cubic_fit_derived"][name]
            stops = dw["spring"]["stops"][name]
            sh = dw["shock"][name]
            return AxleSuspension(
                hardpoints=hp,
                spring_k1=float(cubic["k1"]),
                spring_k3=float(cubic["k3"]),
                spring_free_length=float(a["spring_free_length"]),
                stop_min=float(stops["min_length"]),
                stop_max=float(stops["max_length"]),
                damper_mid_compression=float(sh["midstroke_compression"]),
                damper_mid_rebound=float(sh["midstroke_rebound"]),
                damper_bump_compression=float(sh["bumpstop_compression"]),
                damper_bump_rebound=float(sh["bumpstop_rebound"]),
                damper_engage_min=float(dw["shock"]["engagement_min_length"]),
                damper_engage_max=float(dw["shock"]["engagement_max_length"]),
            )

        front = axle("front", lay["front_suspension_location"])
        rear = axle("rear", lay["rear_suspension_location"])

        # Chassis + kinematically driven steering link and Pitman arm lumped in (point masses at their COMs).
        ch = d["chassis"]
        st = d["steering_pitman_arm"]
        m_c = float(ch["mass"])
        com_c = _a(ch["com_location"])
        i_c = np.diag(_a(ch["inertia_moments"]))
        pts = st["hardpoints_chassis_frame_derived"]
        extra = [
            (float(st["steering_link"]["mass"]), _a(pts["STEERINGLINK"])),
            (float(st["pitman_arm"]["mass"]), 0.5 * (_a(pts["REV"]) + _a(pts["UNIV"]))),
        ]
        m_tot = m_c + sum(m for m, _ in extra)
        com = (m_c * com_c + sum(m * p for m, p in extra)) / m_tot
        inertia = i_c + m_c * _parallel(com_c - com)
        for m, p in extra:
            inertia = inertia + m * _parallel(p - com)
        chassis = RigidBody(m_tot, inertia)

        def arm(name: str) -> RigidBody:
            b = bodies[name]
            return RigidBody(float(b["mass"]), np.diag(_a(b["inertia_moments"])))

        wh = d["wheel"]
        ti = d["tires"]["common"]
        sp = bodies["spindle"]
        m_w = float(sp["mass"]) + float(wh["mass"]) + float(ti["mass"])
        i_w = _a(sp["inertia"]) + _a(wh["inertia"]) + _a(ti["inertia"])
        i_w[1] += float(bodies["axle_shaft_inertia"])
        wheel = RigidBody(m_w, np.diag(i_w))

        pac = d["tires"]["pac02"]
        lo, la, dim, ve, sc = (
            pac["longitudinal"],
            pac["lateral"],
            pac["dimension"],
            pac["vertical"],
            pac["scaling"],
        )
        tire = TireParams(
            r0=float(dim["UNLOADED_RADIUS"]),
            kz=float(ve["VERTICAL_STIFFNESS"]) * float(sc["LCZ"]),
            cz=float(ve["VERTICAL_DAMPING"]),
            fz0=float(ve["FNOMIN"]) * float(sc["LFZO"]),
            fnomin=float(ve["FNOMIN"]),
            dreff=float(ve["DREFF"]),
            breff=float(ve["BREFF"]),
            freff=float(ve["FREFF"]),
            **{
                k.lower(): float(lo[k])
                for k in (
                    "PCX1",
                    "PDX1",
                    "PDX2",
                    "PEX1",
                    "PEX2",
                    "PEX3",
                    "PEX4",
                    "PKX1",
                    "PKX2",
                    "PKX3",
                    "RBX1",
                    "RBX2",
                    "RCX1",
                    "REX1",
                    "REX2",
                    "RHX1",
                )
            },
            **{
                k.lower(): float(la[k])
                for k in (
                    "PCY1",
                    "PDY1",
                    "PDY2",
                    "PEY1",
                    "PEY2",
                    "PKY1",
                    "PKY2",
                    "RBY1",
                    "RBY2",
                    "RBY3",
                    "RCY1",
                    "REY1",
                    "REY2",
                    "RHY1",
                    "RHY2",
                )
            },
            qsy1=float(pac["rolling"]["QSY1"]),
        )
        q = st  # steering frame points
        hp = q["hardpoints_steering_frame_m"]
        e0, _, e2, _ = q_to_list(lay["steering_orientation_quat"])
        pitch = 2.0 * np.arctan2(e2, e0)
        steering = SteeringParams(
            location=_a(lay["steering_location"]),
            pitch=float(pitch),
            rev=_a(hp["REV"]),
            univ=_a(hp["UNIV"]),
            revsph_r=_a(hp["REVSPH_R"]),
            revsph_s=_a(hp["REVSPH_S"]),
        )
        aero = lay["aero_drag_used_in_demos"]
        return cls(
            gravity=9.81,
            chassis=chassis,
            chassis_com=com,
            front=front,
            rear=rear,
            lca=arm("LCA"),
            uca=arm("UCA"),
            upright=arm("upright"),
            wheel=wheel,
            bump_stop_curve=_a(dw["spring"]["stops"]["bump_and_rebound_curve"]),
            steering=steering,
            tire=tire,
            aero_cd=float(aero["Cd"]),
            aero_area=float(aero["area"]),
            aero_rho=float(aero["air_density"]),
            raw=d,
        )


def q_to_list(q) -> tuple[float, float, float, float]:
    """(e0, e1, e2, e3) of a quaternion given as a list."""
    return float(q[0]), float(q[1]), float(q[2]), float(q[3])


def _parallel(r: np.ndarray) -> np.ndarray:
    """Parallel-axis term (|r|^2 1 - r r^T) for a unit mass at offset r."""
    return float(r @ r) * np.eye(3) - np.outer(r, r)
