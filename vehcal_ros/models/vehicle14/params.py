"""Vehicle parameter sets for the 14-DOF constraint-embedding simulator (docs/simulator_model.md,
"Simulator").

A vehicle MODEL FILE has the layout of the shipped ``data/hmmwv.yaml``
(Project Chrono's HMMWV, the default) and ``data/sedan.yaml`` (Chrono's Sedan). :func:`load_simulator_params`
takes a name (``hmmwv``, ``sedan``) or a file path. Geometry, inertias, springs, dampers, steering, driveline
and Pac02 tire data all come from the file. Everything is in the chassis reference frame (x forward, y left,
z up); suspension hardpoints are the LEFT side with the suspension location added (right side = mirror).

Reductions (documented in docs/simulator_model.md):

* the steering link and Pitman arm (or the rack) are driven kinematically, so their masses are lumped into the
  chassis;
* the tierods and shock/spring halves are massless (Chrono's ``use_tierod_bodies: false``);
* the wheel body = Chrono spindle + rim + tire; its spin inertia adds the axle shaft;
* a multi-link rear is simulated through the file's derived double-wishbone approximation
  (``double_wishbone.rear``, with its own ``bodies_derived``);
* a spring with a preload is a spring with the equivalent free length (``front_free_length_equivalent_no_preload``);
* the HMMWV (engine ``SHAFTS``) keeps the 8-DOF paper's drive map (models/powertrain.py); a file whose engine is
  ``SIMPLE_MAP`` with an ``AUTOMATIC_SIMPLE_MAP`` transmission (the sedan) gets that engine map and gearbox.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import numpy as np
import yaml

from vehcal_ros.errors import InputError
from vehcal_ros.models.powertrain import MAX_BRAKE_TORQUE, STEERING_GAIN

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
    """Steering: a Pitman-arm linkage (reference ``steering_pitman_arm``, ``kind = "pitman"``) or a rack and
    pinion (reference ``rack_pinion``, ``kind = "rack"``).

    Pitman: points in the steering frame (x-y plane = linkage); ``location``/``pitch`` place the steering frame
    in the chassis frame (rotation ``pitch`` about +y); ``max_pitman_angle`` bounds the lookup table that maps
    the road-wheel angle to the arm angle. Rack: ``location`` = rack COM; the front tierod inner points ride on
    the rack, which slides along y by at most ``rack_travel`` (m) each way (+ rack coordinate = toward -y =
    steer left, Chrono's sign). ``servo_tau`` is the first-order lag of the actuator (s). ``gain`` (rad per
    unit input) is the MEAN front road-wheel angle per unit steering input: the simulator positions the arm /
    rack so that this map is linear; None = the rack's own slope at the centre times ``rack_travel`` (Chrono's
    map, rack displacement = input x max pinion angle x pinion radius, linearised at the centre).
    """

    location: np.ndarray
    pitch: float
    rev: np.ndarray
    univ: np.ndarray
    revsph_r: np.ndarray
    revsph_s: np.ndarray
    servo_tau: float = 0.02
    max_pitman_angle: float = 0.78
    kind: str = "pitman"
    rack_travel: float = 0.0
    gain: float | None = STEERING_GAIN


@dataclass(frozen=True)
class PowertrainParams:
    """Engine map + automatic gearbox + open differentials (Chrono ``EngineSimpleMap`` and
    ``AutomaticTransmissionSimpleMap``; reference ``powertrain``, ``driveline_2wd``).

    Engine torque (N m) = (1 - throttle) map_zero(w_e) + throttle map_full(w_e), w_e = engine speed (rad/s),
    linear between points and held beyond the ends. w_e = |w_diff| / (gear x final), w_diff = the
    torque-weighted mean spin of the driven wheels; each driven wheel gets fraction_i x T_e / (gear x final).
    Gear ratios are output/input speed; the gearbox shifts up above ``shift_up[g]`` and down below
    ``shift_down[g]`` (rad/s), checked every step, without latency or torque converter (Chrono's simple map).
    """

    map_full: np.ndarray        # (n, 2) [rad/s, N m]
    map_zero: np.ndarray        # (m, 2) [rad/s, N m]
    gear_ratios: np.ndarray     # (k,) output/input speed, first to top gear
    shift_down: np.ndarray      # (k,) rad/s
    shift_up: np.ndarray        # (k,) rad/s
    final_ratio: float          # differential-box speed / driveshaft speed
    wheel_fraction: np.ndarray  # (4,) FL, FR, RL, RR share of the driveshaft torque (sums to 1)


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
    combined: str = "mf"  # "mf": MF2002 weighting functions (RBX..); "ellipsis": Chrono's friction ellipsis


@dataclass(frozen=True)
class HmmwvParams:
    """Complete 14-DOF vehicle parameter set (the HMMWV's by default); build with :meth:`from_yaml` or
    :func:`load_simulator_params`. ``lca_rear``..``wheel_rear`` = the rear axle's bodies when they differ from
    the front's; ``powertrain`` None = the 8-DOF paper's shared drive map; ``brake_max_torque`` N m per wheel
    at full pedal."""

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
    name: str = "hmmwv"
    lca_rear: RigidBody | None = None
    uca_rear: RigidBody | None = None
    upright_rear: RigidBody | None = None
    wheel_rear: RigidBody | None = None
    powertrain: PowertrainParams | None = None
    brake_max_torque: float = MAX_BRAKE_TORQUE
    implicit_wheel_spin: bool | None = None  # None = when the explicit spin update is unstable (simulator.py)
    raw: dict = field(default_factory=dict, repr=False, compare=False)

    def corner_bodies(self, axle: int) -> tuple[RigidBody, RigidBody, RigidBody, RigidBody]:
        """(LCA, UCA, upright, wheel) of axle 0 (front) or 1 (rear)."""
        front = (self.lca, self.uca, self.upright, self.wheel)
        if axle == 0:
            return front
        rear = (self.lca_rear, self.uca_rear, self.upright_rear, self.wheel_rear)
        return tuple(r if r is not None else f for r, f in zip(rear, front))  # type: ignore[return-value]

    @property
    def total_mass(self) -> float:
        """Total vehicle mass (kg): chassis (with the kinematic steering parts) + 4 corners."""
        corner = [sum(b.mass for b in self.corner_bodies(a)) for a in (0, 1)]
        if corner[0] == corner[1]:
            return self.chassis.mass + 4.0 * corner[0]
        return self.chassis.mass + 2.0 * corner[0] + 2.0 * corner[1]

    @classmethod
    def from_yaml(cls, path: str | Path | None = None) -> HmmwvParams:
        """Load a vehicle model file (default: the package copy ``vehcal_ros/data/hmmwv.yaml``)."""
        if path is None:
            text = resources.files("vehcal_ros").joinpath("data/hmmwv.yaml").read_text()
            name, source = "hmmwv", "data/hmmwv.yaml"
        else:
            text = Path(path).read_text()
            name, source = Path(path).stem, str(path)
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError:
            raise InputError(f"{source}: not valid YAML") from None
        try:
            return cls.from_dict(data, name=name)
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            if isinstance(exc, InputError):
                raise
            what = f"missing field {exc}" if isinstance(exc, KeyError) else f"invalid field ({exc})"
            raise InputError(f"{source}: not a vehicle model file in the layout of hmmwv.yaml: {what}") from None

    @classmethod
    def from_dict(cls, d: dict, name: str = "hmmwv") -> HmmwvParams:
        """Build from the parsed model file (the layout of ``data/hmmwv.yaml``)."""
        lay = d["vehicle_layout"]
        dw = d["double_wishbone"]
        front = _axle(dw, "front", lay["front_suspension_location"])
        rear = _axle(dw, "rear", lay["rear_suspension_location"])
        chassis, com, steering = _chassis_and_steering(d)
        bodies = dw["bodies"]
        rear_bodies = dw["rear"].get("bodies_derived")
        lca, uca, upright, wheel = _corner_bodies(d, bodies)
        rear_set: tuple = (None, None, None, None)
        if rear_bodies is not None:
            rear_set = _corner_bodies(d, rear_bodies)
        aero = lay.get("aero_drag_used_in_demos") or {}
        powertrain, brake_max = _powertrain(d)
        if powertrain is not None:  # the driveline's rotating inertia, lumped into the driven wheels' spin
            extra = _driveline_inertia(d, powertrain)
            if rear_set[3] is None and (extra[0] != extra[1]):
                rear_set = (rear_set[0], rear_set[1], rear_set[2], wheel)
            wheel = _with_spin_inertia(wheel, extra[0])
            if rear_set[3] is not None:
                rear_set = (*rear_set[:3], _with_spin_inertia(rear_set[3], extra[1]))
        return cls(
            gravity=9.81,
            chassis=chassis,
            chassis_com=com,
            front=front,
            rear=rear,
            lca=lca,
            uca=uca,
            upright=upright,
            wheel=wheel,
            bump_stop_curve=_a(dw["spring"]["stops"]["bump_and_rebound_curve"]),
            steering=steering,
            tire=_tire(d["tires"]["pac02"]),
            aero_cd=float(aero.get("Cd", 0.5)),
            aero_area=float(aero.get("area", 5.0)),
            aero_rho=float(aero.get("air_density", 1.2)),
            name=name,
            lca_rear=rear_set[0],
            uca_rear=rear_set[1],
            upright_rear=rear_set[2],
            wheel_rear=rear_set[3],
            powertrain=powertrain,
            brake_max_torque=brake_max,
            raw=d,
        )


def _axle(dw: dict, name: str, loc) -> AxleSuspension:
    """One axle's suspension; a spring preload becomes the equivalent free length (linear spring)."""
    a = dw[name]
    hp = {k: _a(v) + _a(loc) for k, v in a["hardpoints_m"].items()}
    cubic = dw["spring"]["cubic_fit_derived"][name]
    stops = dw["spring"]["stops"][name]
    sh = dw["shock"][name]
    free = float(a["spring_free_length"])
    preload = float((dw["spring"].get("preload") or {}).get(name, 0.0))
    if preload != 0.0:
        if float(cubic["k3"]) != 0.0:
            raise InputError(f"double_wishbone.spring.preload.{name}: a preload needs a linear spring (k3 = 0)")
        free += preload / float(cubic["k1"])
    return AxleSuspension(
        hardpoints=hp,
        spring_k1=float(cubic["k1"]),
        spring_k3=float(cubic["k3"]),
        spring_free_length=free,
        stop_min=float(stops["min_length"]) if stops is not None else -np.inf,
        stop_max=float(stops["max_length"]) if stops is not None else np.inf,
        damper_mid_compression=float(sh["midstroke_compression"]),
        damper_mid_rebound=float(sh["midstroke_rebound"]),
        damper_bump_compression=float(sh["bumpstop_compression"]),
        damper_bump_rebound=float(sh["bumpstop_rebound"]),
        damper_engage_min=float(dw["shock"]["engagement_min_length"]),
        damper_engage_max=float(dw["shock"]["engagement_max_length"]),
    )


def _chassis_and_steering(d: dict) -> tuple[RigidBody, np.ndarray, SteeringParams]:
    """Chassis with the kinematically driven steering parts lumped in (point masses at their COMs)."""
    lay = d["vehicle_layout"]
    ch = d["chassis"]
    m_c = float(ch["mass"])
    com_c = _a(ch["com_location"])
    i_c = np.diag(_a(ch["inertia_moments"]))
    zero = np.zeros(3)
    if "steering_pitman_arm" in d:
        st = d["steering_pitman_arm"]
        pts = st["hardpoints_chassis_frame_derived"]
        extra = [
            (float(st["steering_link"]["mass"]), _a(pts["STEERINGLINK"])),
            (float(st["pitman_arm"]["mass"]), 0.5 * (_a(pts["REV"]) + _a(pts["UNIV"]))),
        ]
        hp = st["hardpoints_steering_frame_m"]
        e0, _, e2, _ = q_to_list(lay["steering_orientation_quat"])
        steering = SteeringParams(
            location=_a(lay["steering_location"]),
            pitch=float(2.0 * np.arctan2(e2, e0)),
            rev=_a(hp["REV"]),
            univ=_a(hp["UNIV"]),
            revsph_r=_a(hp["REVSPH_R"]),
            revsph_s=_a(hp["REVSPH_S"]),
        )
    elif "rack_pinion" in d:
        rp = d["rack_pinion"]
        loc = _a(rp["location"])
        extra = [(float(rp["steering_link"]["mass"]), loc + np.array([0.0, float(rp["steering_link"].get(
            "com_offset_y", 0.0)), 0.0]))]
        travel = float(rp["pinion_radius"]) * float(rp["max_pinion_angle_rad"])
        steering = SteeringParams(location=loc, pitch=0.0, rev=zero, univ=zero, revsph_r=zero, revsph_s=zero,
                                  kind="rack", rack_travel=travel, gain=None)
    else:
        raise KeyError("steering_pitman_arm or rack_pinion")
    m_tot = m_c + sum(m for m, _ in extra)
    com = (m_c * com_c + sum(m * p for m, p in extra)) / m_tot
    inertia = i_c + m_c * _parallel(com_c - com)
    for m, p in extra:
        inertia = inertia + m * _parallel(p - com)
    return RigidBody(m_tot, inertia), com, steering


def _inertia(b: dict, key: str = "inertia_moments") -> np.ndarray:
    """Inertia tensor from moments (Ixx, Iyy, Izz) and optional products (Ixy, Ixz, Iyz: Chrono's
    SetInertiaXY values, the tensor's off-diagonal entries)."""
    i = np.diag(_a(b[key]))
    pr = b.get("inertia_products")
    if pr is not None and any(float(x) != 0.0 for x in pr):
        i[0, 1] = i[1, 0] = float(pr[0])
        i[0, 2] = i[2, 0] = float(pr[1])
        i[1, 2] = i[2, 1] = float(pr[2])
    return i


def _corner_bodies(d: dict, bodies: dict) -> tuple[RigidBody, RigidBody, RigidBody, RigidBody]:
    """(LCA, UCA, upright, wheel = spindle + rim + tire, spin inertia + axle shaft) of one axle."""

    def arm(name: str) -> RigidBody:
        b = bodies[name]
        return RigidBody(float(b["mass"]), _inertia(b, "inertia_moments" if "inertia_moments" in b else "inertia"))

    wh = d["wheel"]
    ti = d["tires"]["common"]
    sp = bodies["spindle"]
    m_w = float(sp["mass"]) + float(wh["mass"]) + float(ti["mass"])
    i_w = _a(sp["inertia"]) + _a(wh["inertia"]) + _a(ti["inertia"])
    i_w[1] += float(bodies["axle_shaft_inertia"])
    return arm("LCA"), arm("UCA"), arm("upright"), RigidBody(m_w, np.diag(i_w))


_LONGITUDINAL = ("PCX1", "PDX1", "PDX2", "PEX1", "PEX2", "PEX3", "PEX4", "PKX1", "PKX2", "PKX3")
_LATERAL = ("PCY1", "PDY1", "PDY2", "PEY1", "PEY2", "PKY1", "PKY2")
_COMBINED_X = ("RBX1", "RBX2", "RCX1", "REX1", "REX2", "RHX1")
_COMBINED_Y = ("RBY1", "RBY2", "RBY3", "RCY1", "REY1", "REY2", "RHY1", "RHY2")


def _tire(pac: dict) -> TireParams:
    """Pac02 coefficients; a file without combined-slip coefficients (or with ``combined_method:
    friction_ellipsis``) is combined by Chrono's friction ellipsis. LCZ absent = 1."""
    lo, la, dim, ve, sc = pac["longitudinal"], pac["lateral"], pac["dimension"], pac["vertical"], pac["scaling"]
    ellipsis = pac.get("combined_method") == "friction_ellipsis" or "combined" in pac and pac["combined"] is None
    comb = {k.lower(): float(lo[k]) if not ellipsis else 0.0 for k in _COMBINED_X}
    comb.update({k.lower(): float(la[k]) if not ellipsis else 0.0 for k in _COMBINED_Y})
    return TireParams(
        r0=float(dim["UNLOADED_RADIUS"]),
        kz=float(ve["VERTICAL_STIFFNESS"]) * float(sc.get("LCZ", 1.0)),
        cz=float(ve["VERTICAL_DAMPING"]),
        fz0=float(ve["FNOMIN"]) * float(sc["LFZO"]),
        fnomin=float(ve["FNOMIN"]),
        dreff=float(ve["DREFF"]),
        breff=float(ve["BREFF"]),
        freff=float(ve["FREFF"]),
        **{k.lower(): float(lo[k]) for k in _LONGITUDINAL},
        **{k.lower(): float(la[k]) for k in _LATERAL},
        **comb,
        qsy1=float(pac["rolling"]["QSY1"]),
        combined="ellipsis" if ellipsis else "mf",
    )


def _powertrain(d: dict) -> tuple[PowertrainParams | None, float]:
    """Engine map + gearbox + driveline of a ``SIMPLE_MAP`` engine (else None = the 8-DOF paper's map) and the
    brake torque per wheel at full pedal (N m)."""
    wd = d.get("meta", {}).get("wrapper_defaults", {})
    if wd.get("engine") != "SIMPLE_MAP" or not str(wd.get("transmission", "")).startswith("AUTOMATIC_SIMPLE_MAP"):
        return None, MAX_BRAKE_TORQUE
    pt = d["powertrain"]
    eng, tr = pt["engine_simple_map_cpp"], pt["transmission_simple_map"]
    rpm = np.pi / 30.0
    shifts = np.asarray(tr["shift_points_rpm"], dtype=np.float64) * rpm
    ratios = _a(tr["forward_gear_ratios"])
    if shifts.shape != (ratios.size, 2):
        raise InputError("powertrain.transmission_simple_map.shift_points_rpm: one [down, up] pair per forward gear")
    if "driveline_2wd" in d:
        dl = d["driveline_2wd"]
        driven = str(dl["driven_axle"])
        if driven not in ("front", "rear"):
            raise InputError(f"driveline_2wd.driven_axle: {driven!r} is not front or rear")
        frac = np.array([0.5, 0.5, 0.0, 0.0]) if driven == "front" else np.array([0.0, 0.0, 0.5, 0.5])
        final = float(dl["conical_gear_ratio"])
    else:
        dl = d["driveline_4wd"]
        frac = np.full(4, 0.25)
        final = float(dl["front_conical_gear_ratio"])
    ptp = PowertrainParams(
        map_full=np.asarray(eng["map_full_throttle"], dtype=np.float64),
        map_zero=np.asarray(eng["map_zero_throttle"], dtype=np.float64),
        gear_ratios=ratios,
        shift_down=shifts[:, 0].copy(),
        shift_up=shifts[:, 1].copy(),
        final_ratio=final,
        wheel_fraction=frac,
    )
    return ptp, float(d["brakes"]["max_torque_per_wheel"])


def _driveline_inertia(d: dict, pt: PowertrainParams) -> tuple[float, float]:
    """Spin inertia (kg m^2) added to each front and each rear driven wheel for the driveline's shafts (Chrono
    ShaftsDriveline2WD: driveshaft 0.5 turning 1/final times faster than the differential box 0.6): J_box =
    J_diff + J_driveshaft / final^2 at the differential box speed, which is the mean of the axle's two wheels, so
    each wheel gets J_box / 2 (exact when both wheels turn alike; an open differential's differential mode
    sees none of it in reality). A 4WD file splits it per axle the same way."""
    if "driveline_2wd" in d:
        ine = d["driveline_2wd"].get("inertias", {})
        j_box = float(ine.get("differential_box", 0.0)) + float(ine.get("driveshaft", 0.0)) / pt.final_ratio**2
        front = pt.wheel_fraction[0] > 0.0
        return (0.5 * j_box, 0.0) if front else (0.0, 0.5 * j_box)
    return 0.0, 0.0


def _with_spin_inertia(w: RigidBody, extra: float) -> RigidBody:
    if extra == 0.0:
        return w
    i = w.inertia.copy()
    i[1, 1] += extra
    return RigidBody(w.mass, i)


VARIANTS: dict[str, tuple[str, float]] = {"sedan_zero_bump_steer": ("sedan", 0.031941)}
"""Shipped variants: name -> (base model file, upward shift in m of the front inner tierod points TIEROD_C).

``sedan_zero_bump_steer``: Chrono's sedan with the front bump steer corrected the way a chassis engineer would, by
raising the rack-end tierod points 31.9 mm, which makes d(toe)/d(wheel travel) zero at the static ride height
(the published geometry gives +2.28 deg toe-in at 50 mm rebound and, with the tire forces' jacking, scrubs the
front tires at |Fy/Fz| 0.2-0.6 in straight driving; docs/simulator_model.md "Front toe scrub")."""

VEHICLE_NAMES = ("hmmwv", "sedan", *VARIANTS)
"""Shipped vehicles: model files in ``vehcal_ros/data`` (``<name>.yaml``) and the :data:`VARIANTS`."""
DEFAULT_MODEL = "hmmwv"
"""The simulated vehicle when none is named (a scenario's ``vehicle: ""``)."""


def vehicle_model_file(vehicle: str | Path | None) -> Path:
    """The model file of a shipped vehicle name (``hmmwv``, ``sedan``; None or "" = hmmwv; a variant: its base
    file) or a file path."""
    if vehicle is None or str(vehicle) == "":
        vehicle = DEFAULT_MODEL
    if str(vehicle) in VEHICLE_NAMES:
        base = VARIANTS[str(vehicle)][0] if str(vehicle) in VARIANTS else str(vehicle)
        return Path(str(resources.files("vehcal_ros").joinpath(f"data/{base}.yaml")))
    p = Path(vehicle)
    if p.is_file():
        return p
    raise InputError(f"vehicle {str(vehicle)!r}: not a shipped vehicle ({', '.join(VEHICLE_NAMES)}) "
                     "nor an existing model file")


def load_simulator_params(vehicle: str | Path | None = None) -> HmmwvParams:
    """The 14-DOF simulator's parameters of a shipped vehicle (name) or of a model file in the layout of
    ``hmmwv.yaml`` (the vehicle as the simulator builds it). Not the estimators' description
    (:func:`vehcal_ros.vehicle.description.load_description`)."""
    from dataclasses import replace

    path = vehicle_model_file(vehicle)
    params = HmmwvParams.from_yaml(path)
    if str(vehicle) in VEHICLE_NAMES:
        params = replace(params, name=str(vehicle))
    if str(vehicle) in VARIANTS:
        hp = dict(params.front.hardpoints)
        hp["TIEROD_C"] = hp["TIEROD_C"] + np.array([0.0, 0.0, VARIANTS[str(vehicle)][1]])
        params = replace(params, front=replace(params.front, hardpoints=hp))
    return params


def q_to_list(q) -> tuple[float, float, float, float]:
    """(e0, e1, e2, e3) of a quaternion given as a list."""
    return float(q[0]), float(q[1]), float(q[2]), float(q[3])


def _parallel(r: np.ndarray) -> np.ndarray:
    """Parallel-axis term (|r|^2 1 - r r^T) for a unit mass at offset r."""
    return float(r @ r) * np.eye(3) - np.outer(r, r)
