"""The 8-DOF vehicle model of the calibration paper (Unjhawala et al. 2023, doi:10.1115/1.4062199, Eqs. 4-13).

Degrees of freedom: longitudinal, lateral, yaw and roll of the chassis plus the four wheel spins. State vector
(``STATE_NAMES``): ``x, y, u, v, psi, phi, wx, wz, w_lf, w_lr, w_rf, w_rr`` with
``u, v`` body-frame velocities (m/s), ``psi`` yaw and ``phi`` roll (rad), ``wx`` roll rate and ``wz`` yaw rate
(rad/s), ``w_ij`` wheel spins (rad/s).

Equations, per step:

* contact-patch velocities: ``u -+ wz c/2`` (left/right) and ``v + wz a`` (front), ``v - wz b`` (rear);
* Fiala tires (:mod:`vehcal_ros.models.fiala`, paper Section 3, Eqs. 8-9), front forces rotated by the steer
  angle into the body frame;
* chassis Eqs. (4)-(7): Eq. (4) gives ``u_dot``; Eqs. (5)-(7) are linear in ``(v_dot, wx_dot, wz_dot)`` and are
  solved with the constant inverse of their 3x3 inertia matrix;
* wheel spin ``(Jw + Jd) w_dot = T_drive + T_brake + T_rr - r_l Fx`` (``Jd``: the driveline inertia lumped into
  a driven wheel, a parameter) with the powertrain and brake maps of :mod:`vehcal_ros.models.powertrain` and rolling
  resistance ``T_rr = -rr |Fz| sign(w)``; per-wheel brake gains (N m at full brake, default 4000 N m = the
  paper's map) are parameters so a later brake-friction fit can calibrate them; integrated linearly implicitly
  against the wheel's own tire force (``_spin_rate``: a light wheel on a stiff tire, e.g. the sedan's rear, is
  unstable with the explicit update at 5 ms);
* tire rolling radius ``r = r0 - Fz/kt`` (slip, Eq. 8) and loaded radius ``r_l = r - rolling_excess`` (the
  force's lever and the wheel-centre height; ``rolling_excess`` = 0 in the paper's model, ~1 cm for a Pac02
  tire, which rolls at R0 - deflection/3); a description that gives the load-independent
  ``tire.rolling_radius`` gets ``r0`` = that radius and ``kt`` = :data:`RIGID_RADIUS_KT`
  (:meth:`VehicleConstants.from_description`);
* normal loads, Eqs. (10)-(13), recomputed after every step and clamped at zero. The paper's printed
  ``f_f, f_r, f_c`` terms are garbled, so they are derived here from quasi-static load transfer with roll
  centres (Shim & Ghike 2007, the paper's ref. 20), with ``muf``/``mur`` the mass of ONE unsprung corner:

  - static:        ``m g b / (2 L) + muf g`` (front wheel), ``m g a / (2 L) + mur g`` (rear wheel), L = a + b;
  - longitudinal:  ``f_c = (m h + 2 muf h_uf + 2 mur h_ur) a_x / (2 L)``, off the front, onto the rear;
  - lateral:       ``f_f = (m b (h - hrcf) / L + 2 muf h_uf) a_y / c_f`` (rear alike with a, hrcr, mur, c_r),
    off the left, onto the right wheel (positive a_y is to the left), plus the suspension's roll moment
    ``(kphi_f phi + bphi_f wx) / c_f``;

  with ``a_x = u_dot - wz v``, ``a_y = v_dot + wz u`` of the step just taken and ``h_u`` the wheel-centre
  height (loaded radius). The four loads sum to ``m_t g`` exactly (before clamping). The public code uses
  ``muf g / 2`` and ``muf h_uf`` instead (its loads do not sum to ``m_t g``); the difference is below 2 %.
* half-implicit (semi-implicit Euler) integration as the paper's ref. 33 and its code: accelerations from the
  state at step k and the inputs at t_{k+1}; velocities updated first, then positions and angles with the new
  velocities; default ``dt`` 5 ms.

Many parameter sets (particles) are simulated at once in parallel (``prange``); all per-step work is numba.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from importlib import resources

import numpy as np
import yaml
from numba import njit, prange

from vehcal_ros.models.borrowed import borrowed
from vehcal_ros.models.chunked import run_chunked
from vehcal_ros.models.fiala import FASTMATH, MIN_CONTACT_SPEED, MU_MAX, MU_MIN, fiala_tire_slip
from vehcal_ros.models.powertrain import (
    GEAR_RATIO,
    MAX_BRAKE_TORQUE,
    MAX_MOTOR_SPEED,
    MAX_MOTOR_TORQUE,
    STEERING_GAIN,
    brake_torque,
    engine_map_torque,
    initial_gear,
    pack_powertrain,
    shift_gear,
)
from vehcal_ros.vehicle.description import load_description

STATE_NAMES: tuple[str, ...] = ("x", "y", "u", "v", "psi", "phi", "wx", "wz", "w_lf", "w_lr", "w_rf", "w_rr")
"""State order."""
STATE_INDEX: dict[str, int] = {name: i for i, name in enumerate(STATE_NAMES)}

PARAM_NAMES: tuple[str, ...] = (
    "Cxf", "Cxr", "Cyf", "Cyr", "kphi_f", "kphi_r", "bphi_f", "bphi_r", "rr",
    "brake_gain_lf", "brake_gain_rf", "brake_gain_lr", "brake_gain_rr", "Jd",
)
"""Calibratable parameters: longitudinal slip stiffness front/rear (N), cornering stiffness front/rear (N/rad),
roll stiffness front/rear (N m/rad), roll damping front/rear (N m s/rad), rolling resistance coefficient (-),
brake torque of each wheel at full brake (N m; the four brake coefficients of the parallel-estimation paper's
brake-friction problem), driveline spin inertia lumped into each driven wheel (kg m^2, added to the constants'
wheel inertia ``Jw`` / ``Jw_r`` on the axles the powertrain's ``front_share`` drives: the shafts, differential
and gearbox that turn with a driven wheel downstream of where its torque is measured, which a spec sheet does not
give)."""
PARAM_INDEX: dict[str, int] = {name: i for i, name in enumerate(PARAM_NAMES)}
_P_JD = PARAM_INDEX["Jd"]

DEFAULT_PARAMETERS: dict[str, float] = {
    "Cxf": 10300.0, "Cxr": 10300.0, "Cyf": 50000.0, "Cyr": 50000.0, "kphi_f": 37500.0, "kphi_r": 37500.0,
    "bphi_f": 7500.0, "bphi_r": 7500.0, "rr": 0.0175,
    "brake_gain_lf": MAX_BRAKE_TORQUE, "brake_gain_rf": MAX_BRAKE_TORQUE,
    "brake_gain_lr": MAX_BRAKE_TORQUE, "brake_gain_rr": MAX_BRAKE_TORQUE, "Jd": 0.0,
}
"""Defaults: the public code's held-fixed values (data/vehicle_8dof.yaml ``stages``), the 4000 N m map and
no driveline inertia beyond the wheels'."""

_N_CONST = 39
PT_OFFSET = _N_CONST
"""Start of the packed powertrain block (models/powertrain.py) in the constants vector."""
N_INPUTS = 7
"""Columns of the per-step input array: throttle, brake, steering, then the measured per-wheel net torque
(drive + brake, N m) in state order lf, lr, rf, rr (used when the constants' measured flag is set)."""
_N_COLUMNS = N_INPUTS + 2
"""The kernels' per-step rows: the ``N_INPUTS`` inputs, then cos and sin of the road-wheel steer angle (the
same for every parameter set: computed once per maneuver, :func:`_steer_trig`, not in every run's step)."""


RIGID_RADIUS_KT = 1.0e12
"""N/m, the vertical stiffness that makes the 8-DOF rolling radius ``r0 - Fz/kt`` load-independent (1e-7 m at
1e5 N): used for a description that gives ``tire.rolling_radius``."""


@dataclass(frozen=True)
class VehicleConstants:
    """Known 8-DOF constants of one vehicle (paper Table 2's quantities). SI units.

    The vehicle's own quantities have no defaults: they come from its description
    (:meth:`from_description`, :func:`default_vehicle_constants` for the package's default vehicle). The fields
    from ``g`` on default to the paper's model (its gravity, Fiala friction, steering gain, DC motor and brakes)."""

    m: float                   # sprung mass, kg
    muf: float                 # unsprung mass of one front corner, kg
    mur: float                 # unsprung mass of one rear corner, kg
    a: float                   # CM to front axle, m
    b: float                   # CM to rear axle, m
    h: float                   # sprung CM height, m
    cf: float                  # front track, m
    cr: float                  # rear track, m
    Jx: float                  # roll inertia, kg m^2
    Jz: float                  # yaw inertia, kg m^2
    Jxz: float                 # product of inertia, kg m^2
    r0: float                  # unloaded tire radius, m
    ktf: float                 # front tire vertical stiffness, N/m
    ktr: float                 # rear tire vertical stiffness, N/m
    hrcf: float                # front roll centre below sprung CM, m
    hrcr: float                # rear roll centre below sprung CM, m
    Jw: float                  # front wheel spin inertia, kg m^2
    Jw_r: float                # rear wheel spin inertia, kg m^2
    g: float = 9.8              # m/s^2 (the code's value)
    mu_max: float = MU_MAX      # Fiala friction at zero slip (-)
    mu_min: float = MU_MIN      # Fiala friction at full slip (-)
    steer_gain: float = STEERING_GAIN  # rad of road-wheel angle per unit steering input
    powertrain: str = "dc_motor"  # dc_motor | engine_map (models/powertrain.py)
    max_torque: float = MAX_MOTOR_TORQUE  # dc_motor: N m at zero motor speed
    max_speed: float = MAX_MOTOR_SPEED    # dc_motor: rad/s at zero torque
    ratio: float = GEAR_RATIO   # dc_motor: wheel speed / motor speed
    efficiency: float = 1.0     # driveline efficiency
    front_share: float = 0.5    # fraction of the drive torque on the front axle
    final_drive: float = 1.0    # engine_map: differential output/input speed
    engine_speed: tuple[float, ...] = ()   # engine_map knots, rad/s
    torque_full: tuple[float, ...] = ()    # N m at full throttle
    torque_zero: tuple[float, ...] = ()    # N m with the throttle closed
    gear_ratios: tuple[float, ...] = ()    # output/input speed per gear
    shift_down: tuple[float, ...] = ()     # rad/s engine speed
    shift_up: tuple[float, ...] = ()       # rad/s engine speed
    brake_front: float = MAX_BRAKE_TORQUE  # N m per wheel at full pedal (default of the brake-gain parameters)
    brake_rear: float = MAX_BRAKE_TORQUE
    nominal: tuple[tuple[str, float], ...] = ()  # nominal values of the calibrated parameters (description)
    torque_source: str = "map"  # map | measured: what drives the wheels in calibration (description torque_source)
    rolling_excess: float = 0.0  # free-rolling minus loaded radius, m (the force acts at r0 - Fz/kt - this)

    @property
    def total_mass(self) -> float:
        """m_t = m + 2 muf + 2 mur (kg)."""
        return self.m + 2.0 * self.muf + 2.0 * self.mur

    @classmethod
    def from_yaml(cls, path: str | None = None) -> VehicleConstants:
        """Constants from ``known_parameters`` of a vehicle_8dof.yaml (default: the package's copy)."""
        if path is None:
            text = resources.files("vehcal_ros").joinpath("data/vehicle_8dof.yaml").read_text()
        else:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        doc = yaml.safe_load(text)
        known = doc["known_parameters"]
        names = {f.name for f in fields(cls)}
        kw = {k: float(v) for k, v in known.items() if k in names}
        kw.setdefault("Jw_r", kw["Jw"])   # the paper's model has one wheel inertia
        fiala = doc.get("fiala_as_coded", {})
        if "mu_max_coefficient" in fiala:
            kw["mu_max"] = float(fiala["mu_max_coefficient"])
        if "mu_min_coefficient" in fiala:
            kw["mu_min"] = float(fiala["mu_min_coefficient"])
        steer = doc.get("inputs", {}).get("steering_to_road_wheel_rad")
        if steer is not None:
            kw["steer_gain"] = float(steer)
        return cls(**kw)

    @classmethod
    def from_description(cls, vehicle=None) -> VehicleConstants:
        """Constants of a vehicle description (:func:`vehcal_ros.vehicle.description.load_description`: a name,
        a file or a description; None = the package's default vehicle, ``hmmwv``).

        A description with ``tire.rolling_radius`` (> 0; the load-independent effective rolling radius, m) rolls
        at that radius whatever the load: ``r0`` = rolling_radius and ``ktf`` = ``ktr`` = :data:`RIGID_RADIUS_KT`.
        The slip's radius ``r0 - Fz/kt`` with the tire's full vertical stiffness would shrink by the whole
        deflection under load, three times a Pac02 tire's effective rolling radius (R0 - deflection/3): under 3.5
        m/s^2 of acceleration the ~1 kN per wheel moved onto the HMMWV's rear axle (kt 204 kN/m) shrinks that
        radius by 1 %, which the longitudinal stage reads as 1 % of slip (about half the slip of the tire force)
        and answers with rear slip stiffnesses at their prior's upper bound and front ones below the data's."""
        d = load_description(vehicle)
        fixed = d.rolling_radius > 0.0
        return cls(m=d.m, muf=d.muf, mur=d.mur, a=d.a, b=d.b, h=d.h, cf=d.cf, cr=d.cr, Jx=d.Jx, Jz=d.Jz, Jxz=d.Jxz,
                   r0=d.rolling_radius if fixed else d.r0, ktf=RIGID_RADIUS_KT if fixed else d.ktf,
                   ktr=RIGID_RADIUS_KT if fixed else d.ktr, hrcf=d.hrcf, hrcr=d.hrcr, Jw=d.Jw_f, g=d.g, mu_max=d.mu_max,
                   mu_min=d.mu_min, steer_gain=d.steer_gain, Jw_r=d.Jw_r, powertrain=d.powertrain,
                   max_torque=d.max_torque, max_speed=d.max_speed, ratio=d.ratio, efficiency=d.efficiency,
                   front_share=d.front_share, final_drive=d.final_drive, engine_speed=tuple(d.engine_speed),
                   torque_full=tuple(d.torque_full), torque_zero=tuple(d.torque_zero),
                   gear_ratios=tuple(d.gear_ratios) if d.powertrain == "engine_map" else (),
                   shift_down=tuple(d.shift_down), shift_up=tuple(d.shift_up),
                   brake_front=d.brake_front, brake_rear=d.brake_rear, nominal=tuple(sorted(d.nominal.items())),
                   torque_source="measured" if d.wheel_torque_measured else "map", rolling_excess=d.rolling_excess)

    def default_parameters(self) -> dict[str, float]:
        """Full 8-DOF parameter set before calibration: the description's nominal values and its brake torques
        (``DEFAULT_PARAMETERS`` for the default constants)."""
        return {**DEFAULT_PARAMETERS, **dict(self.nominal),
                "brake_gain_lf": self.brake_front, "brake_gain_rf": self.brake_front,
                "brake_gain_lr": self.brake_rear, "brake_gain_rr": self.brake_rear}

    def static_wheel_loads(self) -> tuple[float, float]:
        """Static load of one front and one rear wheel (N), the 8-DOF model's static term."""
        L = self.a + self.b
        return self.m * self.g * self.b / (2.0 * L) + self.muf * self.g, self.m * self.g * self.a / (2.0 * L) + \
            self.mur * self.g

    def to_dict(self) -> dict[str, float]:
        return asdict(self)

    def as_array(self) -> np.ndarray:
        """Packed constants for the numba kernels (with derived m_t, h_rc and the inverse inertia matrix)."""
        pt = pack_powertrain(self.powertrain, max_torque=self.max_torque, max_speed=self.max_speed,
                             ratio=self.ratio, efficiency=self.efficiency, front_share=self.front_share,
                             final_drive=self.final_drive, engine_speed=self.engine_speed,
                             torque_full=self.torque_full, torque_zero=self.torque_zero,
                             gear_ratios=self.gear_ratios, shift_down=self.shift_down, shift_up=self.shift_up)
        k = np.zeros(_N_CONST + pt.size)
        k[_N_CONST:] = pt
        k[35] = self.Jw_r
        k[36] = 0.0   # measured-torque flag (set by Simulator8Dof when per-wheel torque is given)
        k[37] = self.rolling_excess
        k[38] = 0.0   # initial gear (1-based) of the automatic; 0 = the lowest gear below its up-shift speed
        vals = [self.m, self.muf, self.mur, self.a, self.b, self.h, self.cf, self.cr, self.Jx, self.Jz, self.Jxz,
                self.r0, self.ktf, self.ktr, self.hrcf, self.hrcr, self.Jw, self.g, self.mu_max, self.mu_min,
                self.steer_gain]
        k[:21] = vals
        mt = self.total_mass
        hrc = (self.hrcf * self.b + self.hrcr * self.a) / (self.a + self.b)
        a1 = self.mur * self.b - self.muf * self.a
        a2 = self.Jx + self.m * hrc ** 2
        a3 = hrc * self.m
        # Eqs. (5), (7), (6) for (v_dot, wx_dot, wz_dot):  M @ [v_dot, wx_dot, wz_dot] = [E1, E3, E2]
        mat = np.array([[mt, -a3, -a1], [-a3, a2, self.Jxz], [-a1, self.Jxz, self.Jz]])
        k[21] = mt
        k[22] = hrc
        k[23:32] = np.linalg.inv(mat).ravel()
        k[32] = a1
        k[33] = a2
        k[34] = a3
        return k


# Derived constants of a run (``q``, filled by _derived before the time loop): reciprocals, so that the step
# multiplies where the equations divide by a constant (a divide costs ~10x a multiply and the step was bound by
# its 89 divides: benchmarks/README.md, Roofline), and the loads' constant terms.
_Q_INV_JW = 0          # 1 / Jw (front wheels)
_Q_INV_JW_R = 1        # 1 / Jw_r (rear wheels)
_Q_INV_MT = 2          # 1 / m_t
_Q_INV_KTF = 3         # 1 / kt front
_Q_INV_KTR = 4         # 1 / kt rear
_Q_STAT_F = 5          # static load of a front wheel, N
_Q_STAT_R = 6          # static load of a rear wheel, N
_Q_INV_2L = 7          # 1 / (2 L)
_Q_LAT_F = 8           # m b (h - hrcf) / L
_Q_LAT_R = 9           # m a (h - hrcr) / L
_Q_INV_CF = 10         # 1 / c_f
_Q_INV_CR = 11         # 1 / c_r
_Q_MH = 12             # m h
_Q_INV_RATIO = 13      # 1 / motor gear ratio (dc_motor)
_Q_INV_MAX_SPEED = 14  # 1 / motor no-load speed (dc_motor)
N_DERIVED = 15


@functools.cache
def default_vehicle_constants() -> VehicleConstants:
    """The constants of the package's default vehicle description (``hmmwv``: the 8-DOF paper's HMMWV)."""
    return VehicleConstants.from_description(None)


@njit(cache=True, nogil=True, fastmath=FASTMATH)
def _derived(k: np.ndarray, q: np.ndarray) -> None:
    """The run's derived constants into ``q`` (``N_DERIVED``; indices ``_Q_*``) from the packed constants."""
    m = k[0]
    a = k[3]
    b = k[4]
    h = k[5]
    g = k[17]
    L = a + b
    q[_Q_INV_MT] = 1.0 / k[21]
    q[_Q_INV_KTF] = 1.0 / k[12]
    q[_Q_INV_KTR] = 1.0 / k[13]
    q[_Q_STAT_F] = m * g * b / (2.0 * L) + k[1] * g
    q[_Q_STAT_R] = m * g * a / (2.0 * L) + k[2] * g
    q[_Q_INV_2L] = 1.0 / (2.0 * L)
    q[_Q_LAT_F] = m * b * (h - k[14]) / L
    q[_Q_LAT_R] = m * a * (h - k[15]) / L
    q[_Q_INV_CF] = 1.0 / k[6]
    q[_Q_INV_CR] = 1.0 / k[7]
    q[_Q_MH] = m * h
    ratio = k[PT_OFFSET + 3]
    max_speed = k[PT_OFFSET + 2]
    q[_Q_INV_RATIO] = 1.0 / ratio if ratio != 0.0 else 0.0
    q[_Q_INV_MAX_SPEED] = 1.0 / max_speed if max_speed != 0.0 else 0.0


@njit(cache=True, nogil=True, fastmath=FASTMATH)
def _spin_inertias(k: np.ndarray, q: np.ndarray, p: np.ndarray) -> None:
    """``q``'s reciprocal spin inertias of a front and a rear wheel: the constants' wheel inertia plus, on a
    driven axle (the powertrain's front share above 0 / below 1), the parameters' driveline inertia ``Jd``."""
    share = k[PT_OFFSET + 5]
    jd = p[_P_JD]
    q[_Q_INV_JW] = 1.0 / (k[16] + jd) if share > 0.0 else 1.0 / k[16]
    q[_Q_INV_JW_R] = 1.0 / (k[35] + jd) if share < 1.0 else 1.0 / k[35]


@njit(cache=True, nogil=True, fastmath=FASTMATH)
def _dc_motor(k: np.ndarray, q: np.ndarray, throttle: float, wheel_speed: float, share: float) -> float:
    """:func:`~vehcal_ros.models.powertrain.dc_motor_torque` (the paper's motor, N m at one wheel) with the
    run's reciprocals of the gear ratio and the no-load speed (multiplies instead of its three divides)."""
    o = PT_OFFSET
    motor_speed = wheel_speed * q[_Q_INV_RATIO]
    motor_torque = (k[o + 1] - k[o + 1] * motor_speed * q[_Q_INV_MAX_SPEED]) * throttle
    return motor_torque * q[_Q_INV_RATIO] * k[o + 4] * share


@njit(cache=True, nogil=True, fastmath=FASTMATH)
def _normal_loads(k: np.ndarray, q: np.ndarray, p: np.ndarray, phi: float, wx: float, ax: float, ay: float,
                  r_f: float, r_r: float, fz: np.ndarray) -> None:
    """Quasi-static normal loads (N) into ``fz`` = [lf, lr, rf, rr] (Eqs. 10-13, derived; see module doc)."""
    muf = k[1]
    mur = k[2]
    stat_f = q[_Q_STAT_F]
    stat_r = q[_Q_STAT_R]
    f_c = (q[_Q_MH] + 2.0 * muf * r_f + 2.0 * mur * r_r) * ax * q[_Q_INV_2L]
    f_f = ((q[_Q_LAT_F] + 2.0 * muf * r_f) * ay + (p[4] * phi + p[6] * wx)) * q[_Q_INV_CF]
    f_r = ((q[_Q_LAT_R] + 2.0 * mur * r_r) * ay + (p[5] * phi + p[7] * wx)) * q[_Q_INV_CR]
    fz[0] = max(stat_f - f_f - f_c, 0.0)   # lf
    fz[1] = max(stat_r - f_r + f_c, 0.0)   # lr
    fz[2] = max(stat_f + f_f - f_c, 0.0)   # rf
    fz[3] = max(stat_r + f_r + f_c, 0.0)   # rr


@njit(cache=True, nogil=True, fastmath=FASTMATH)
def _initial_loads(k: np.ndarray, q: np.ndarray, p: np.ndarray, s: np.ndarray, fz: np.ndarray) -> None:
    """Loads at the initial state: steady cornering a_y = wz u, no longitudinal acceleration."""
    r_f = k[11] - (k[0] * k[17] * k[4] / (2.0 * (k[3] + k[4])) + k[1] * k[17]) / k[12] - k[37]
    r_r = k[11] - (k[0] * k[17] * k[3] / (2.0 * (k[3] + k[4])) + k[2] * k[17]) / k[13] - k[37]
    _normal_loads(k, q, p, s[5], s[6], 0.0, s[7] * s[2], r_f, r_r, fz)
    fz[4] = k[38] - 1.0 if k[38] > 0.0 else initial_gear(k, PT_OFFSET, _driven_speed(k, s))


@njit(cache=True, nogil=True, fastmath=FASTMATH)
def _driven_speed(k: np.ndarray, s: np.ndarray) -> float:
    """Mean spin of the driven wheels (rad/s): the differential input speed x the final drive."""
    share = k[PT_OFFSET + 5]
    if share >= 1.0:
        return 0.5 * (s[8] + s[10])
    if share <= 0.0:
        return 0.5 * (s[9] + s[11])
    return 0.25 * (s[8] + s[9] + s[10] + s[11])


@njit(cache=True, nogil=True, fastmath=FASTMATH, inline="always")  # numba-inlined into the time loops
def _step(k: np.ndarray, q: np.ndarray, p: np.ndarray, s: np.ndarray, fz: np.ndarray, inp: np.ndarray,
          dt: float, xy: bool) -> None:
    """One half-implicit Euler step of Eqs. (4)-(13), in place on state ``s`` (12,) and loads ``fz`` (5,: the
    four loads, then the automatic's gear); ``q`` the run's derived constants (:func:`_derived`); ``inp`` one row
    of the ``_N_COLUMNS`` input columns. ``xy`` False
    leaves the position ``x, y`` as it is (nothing else depends on it; a likelihood that does not observe it
    saves the two libm calls of the yaw rotation)."""
    throttle = inp[0]
    brake = inp[1]
    a = k[3]
    b = k[4]
    cf = k[6]
    cr = k[7]
    r0 = k[11]
    g = k[17]
    mu_max = k[18]
    mu_min = k[19]
    mt = k[21]
    hrc = k[22]
    a1 = k[32]
    m = k[0]
    muf = k[1]
    mur = k[2]

    u = s[2]
    v = s[3]
    psi = s[4]
    phi = s[5]
    wx = s[6]
    wz = s[7]
    cd = inp[N_INPUTS]       # cos, sin of the steer angle steering * k[20] (_steer_trig)
    sd = inp[N_INPUTS + 1]

    r_lf = r0 - fz[0] * q[_Q_INV_KTF]
    r_lr = r0 - fz[1] * q[_Q_INV_KTR]
    r_rf = r0 - fz[2] * q[_Q_INV_KTF]
    r_rr = r0 - fz[3] * q[_Q_INV_KTR]

    # tire forces (tire frame), wheels lf, lr, rf, rr, and each tire's slip, 1/|vx| and slope for the spin
    fxt_lf, fyt_lf, s_lf, id_lf, c_lf = fiala_tire_slip(u - wz * cf / 2.0, v + wz * a, cd, sd, s[8], r_lf, fz[0],
                                                        p[0], p[2], mu_max, mu_min)
    fxt_lr, fyt_lr, s_lr, id_lr, c_lr = fiala_tire_slip(u - wz * cr / 2.0, v - wz * b, 1.0, 0.0, s[9], r_lr, fz[1],
                                                        p[1], p[3], mu_max, mu_min)
    fxt_rf, fyt_rf, s_rf, id_rf, c_rf = fiala_tire_slip(u + wz * cf / 2.0, v + wz * a, cd, sd, s[10], r_rf, fz[2],
                                                        p[0], p[2], mu_max, mu_min)
    fxt_rr, fyt_rr, s_rr, id_rr, c_rr = fiala_tire_slip(u + wz * cr / 2.0, v - wz * b, 1.0, 0.0, s[11], r_rr,
                                                        fz[3], p[1], p[3], mu_max, mu_min)

    # body-frame ("global" in the paper) contact forces
    fxg_lf = fxt_lf * cd - fyt_lf * sd
    fxg_rf = fxt_rf * cd - fyt_rf * sd
    fyg_lf = fxt_lf * sd + fyt_lf * cd
    fyg_rf = fxt_rf * sd + fyt_rf * cd
    fxg_lr = fxt_lr
    fxg_rr = fxt_rr
    fyg_lr = fyt_lr
    fyg_rr = fyt_rr

    # chassis, Eqs. (4)-(7)
    sum_fx = fxg_lf + fxg_rf + fxg_lr + fxg_rr
    sum_fy = fyg_lf + fyg_rf + fyg_lr + fyg_rr
    u_dot = wz * v + (sum_fx + (muf * a - mur * b) * wz * wz - 2.0 * hrc * m * wz * wx) * q[_Q_INV_MT]
    e1 = -mt * wz * u + sum_fy
    e2 = ((fyg_lf + fyg_rf) * a - (fyg_lr + fyg_rr) * b + (fxg_rf - fxg_lf) * cf / 2.0
          + (fxg_rr - fxg_lr) * cr / 2.0 + a1 * wz * u)
    e3 = m * g * hrc * phi - (p[4] + p[5]) * phi - (p[6] + p[7]) * wx + hrc * m * wz * u
    v_dot = k[23] * e1 + k[24] * e3 + k[25] * e2
    wx_dot = k[26] * e1 + k[27] * e3 + k[28] * e2
    wz_dot = k[29] * e1 + k[30] * e3 + k[31] * e2

    # wheel spin: drive + brake (per-wheel brake gain, N m at full pedal) or the measured net torque, rolling
    # resistance, tire force
    rr = p[8]
    inv_jw = q[_Q_INV_JW]
    inv_jw_r = q[_Q_INV_JW_R]
    if k[36] > 0.0:
        t_lf = inp[3]
        t_lr = inp[4]
        t_rf = inp[5]
        t_rr = inp[6]
    else:
        o = PT_OFFSET
        share_f = 0.5 * k[o + 5]
        share_r = 0.5 * (1.0 - k[o + 5])
        gear = fz[4]
        if k[o] == 0.0:   # the paper's motor: each wheel's own speed
            d_lf = _dc_motor(k, q, throttle, s[8], share_f)
            d_lr = _dc_motor(k, q, throttle, s[9], share_r)
            d_rf = _dc_motor(k, q, throttle, s[10], share_f)
            d_rr = _dc_motor(k, q, throttle, s[11], share_r)
        else:             # engine map through the gearbox: the driven wheels' mean speed
            w_d = _driven_speed(k, s)
            d_lf = engine_map_torque(k, o, throttle, w_d, gear, share_f)
            d_rf = d_lf
            d_lr = engine_map_torque(k, o, throttle, w_d, gear, share_r)
            d_rr = d_lr
        t_lf = d_lf
        t_lr = d_lr
        t_rf = d_rf
        t_rr = d_rr
        if brake != 0.0:   # (no brake adds exactly nothing: the four divides skipped)
            t_lf += brake_torque(brake * p[9] / MAX_BRAKE_TORQUE, s[8])
            t_lr += brake_torque(brake * p[11] / MAX_BRAKE_TORQUE, s[9])
            t_rf += brake_torque(brake * p[10] / MAX_BRAKE_TORQUE, s[10])
            t_rr += brake_torque(brake * p[12] / MAX_BRAKE_TORQUE, s[11])
    # the tire force acts at the loaded radius (wheel-centre height), rolling_excess below the rolling radius
    xs = k[37]
    w = s[8]
    dw_lf = (t_lf - rr * fz[0] * _sign(w) - fxt_lf * (r_lf - xs)) * inv_jw
    w = s[9]
    dw_lr = (t_lr - rr * fz[1] * _sign(w) - fxt_lr * (r_lr - xs)) * inv_jw_r
    w = s[10]
    dw_rf = (t_rf - rr * fz[2] * _sign(w) - fxt_rf * (r_rf - xs)) * inv_jw
    w = s[11]
    dw_rr = (t_rr - rr * fz[3] * _sign(w) - fxt_rr * (r_rr - xs)) * inv_jw_r
    # linearly implicit spin against the wheel's own tire force (see _spin_rate): the contact patches' forward
    # speed changes over this step by dt x its acceleration
    vxa_f = (v + wz * a) * sd
    vxd_f = (v_dot + wz_dot * a) * sd
    dw_lf = _spin_rate(dw_lf, r_lf, xs, inv_jw, (u - wz * cf / 2.0) * cd + vxa_f,
                       (u_dot - wz_dot * cf / 2.0) * cd + vxd_f, dt, s_lf, id_lf, c_lf)
    dw_rf = _spin_rate(dw_rf, r_rf, xs, inv_jw, (u + wz * cf / 2.0) * cd + vxa_f,
                       (u_dot + wz_dot * cf / 2.0) * cd + vxd_f, dt, s_rf, id_rf, c_rf)
    dw_lr = _spin_rate(dw_lr, r_lr, xs, inv_jw_r, u - wz * cr / 2.0, u_dot - wz_dot * cr / 2.0, dt,
                       s_lr, id_lr, c_lr)
    dw_rr = _spin_rate(dw_rr, r_rr, xs, inv_jw_r, u + wz * cr / 2.0, u_dot + wz_dot * cr / 2.0, dt,
                       s_rr, id_rr, c_rr)

    # velocities first ...
    u = u + dt * u_dot
    v = v + dt * v_dot
    wx = wx + dt * wx_dot
    wz = wz + dt * wz_dot
    s[8] += dt * dw_lf
    s[9] += dt * dw_lr
    s[10] += dt * dw_rf
    s[11] += dt * dw_rr
    # ... then positions with the new velocities
    if xy:
        s[0] += dt * (u * math.cos(psi) - v * math.sin(psi))
        s[1] += dt * (u * math.sin(psi) + v * math.cos(psi))
    s[4] = psi + dt * wz
    s[5] = phi + dt * wx
    s[2] = u
    s[3] = v
    s[6] = wx
    s[7] = wz
    # loads for the next step from this step's accelerations
    _normal_loads(k, q, p, s[5], wx, u_dot - wz * v, v_dot + wz * u, 0.5 * (r_lf + r_rf) - xs,
                  0.5 * (r_lr + r_rr) - xs, fz)
    if k[PT_OFFSET] != 0.0 and k[36] == 0.0:
        fz[4] = shift_gear(k, PT_OFFSET, fz[4], _driven_speed(k, s))


@njit(cache=True, nogil=True, fastmath=FASTMATH)
def _spin_rate(f: float, r: float, excess: float, inv_jw: float, vx: float, vx_dot: float, dt: float,
               s: float, inv_den: float, c: float) -> float:
    """Wheel spin acceleration (rad/s^2) for a linearly implicit (backward Euler) update of the stiff slip mode.

    ``f`` = the explicit ``(T - T_rr - r Fx) / Jw``. The tire force depends on the wheel's slip
    ``s = (r w - vx) / |vx|`` with slope ``c = dFx/ds`` (``Cx`` in the elastic range, the secant ``Fx / s``
    beyond it; ``s``, ``1/|vx|`` and ``c`` come from the tire, :func:`~vehcal_ros.models.fiala.fiala_tire_slip`),
    so ``df/dw = -lam``, ``lam = r_l r c / (|vx| Jw)`` (``r`` rolling radius, ``r_l = r - excess``
    the force's lever), and ``df/dvx = lam (1 + s) / r`` (vx > 0). Backward
    Euler in both: ``w_dot = (f + lam (1 + s) / r * dt vx_dot) / (1 + dt lam)``. For a light wheel on a stiff tire
    at low speed (the sedan's rear: lam ~ 10^3 1/s at 5 m/s) the explicit update (``f`` alone) is unstable at
    5 ms; dividing ``f`` alone by ``1 + dt lam`` would be stable but makes the wheel lag the car by one step,
    which a stiff tire turns into a spurious force ``Cx dt a_x / |vx|``; the ``vx_dot`` term removes that lag.
    Where ``dt lam`` is small (the HMMWV) this equals the explicit update to O(dt lam).
    """
    if abs(vx) < MIN_CONTACT_SPEED:
        return f
    lam_r = (r - excess) * c * inv_jw * inv_den   # lam / r
    lam = lam_r * r
    g = 1.0 / (1.0 + dt * lam)
    if abs(s) > 1.0 or vx * (vx + dt * vx_dot) <= 0.0:
        # gross slip, or the contact patch's speed crosses zero within the step (starting from rest, rolling
        # back): s is far from linear in vx there, and the vx_dot term (which assumes it is) flips the wheel's
        # spin every step while the car chatters about vx = 0 (seen: a launch from 0.1 m/s that never left)
        return f * g
    ds = s if vx > 0.0 else -s   # d s / d vx = -(1 + s sign(vx)) / |vx|
    return (f + lam_r * (1.0 + ds) * dt * vx_dot) * g


@njit(cache=True, nogil=True, fastmath=FASTMATH)
def _steer_trig(inputs: np.ndarray, gain: float) -> None:
    """Columns ``N_INPUTS``, ``N_INPUTS + 1`` of ``inputs`` = cos, sin of the steer angle ``steering * gain``."""
    for i in range(inputs.shape[0]):
        delta = inputs[i, 2] * gain
        inputs[i, N_INPUTS] = math.cos(delta)
        inputs[i, N_INPUTS + 1] = math.sin(delta)


@njit(cache=True, nogil=True, fastmath=FASTMATH)
def _sign(x: float) -> float:
    if x > 0.0:
        return 1.0
    if x < 0.0:
        return -1.0
    return 0.0


# The time loops below: every array they touch is an argument (owned by the caller for the call) and is
# borrowed at the top (models/borrowed.py), so the inlined step carries no reference counting; the thin
# ``*_one`` wrappers allocate the state and loads. The step's branches on the powertrain kind and the
# measured-torque flag are taken the same way at every step (predicted; measured as free).
@njit(cache=True, nogil=True, fastmath=FASTMATH)
def _simulate_loop(k: np.ndarray, q: np.ndarray, p: np.ndarray, s: np.ndarray, fz: np.ndarray, inputs: np.ndarray,
                   dt: float, n_sub: int, out: np.ndarray) -> None:
    """Trajectory from state ``s`` (in place): ``out[j]`` = state after ``j * n_sub`` steps."""
    k = borrowed(k)
    q = borrowed(q)
    p = borrowed(p)
    s = borrowed(s)
    fz = borrowed(fz)
    inputs = borrowed(inputs)
    out = borrowed(out)
    _derived(k, q)
    _spin_inertias(k, q, p)
    _initial_loads(k, q, p, s, fz)
    n_out = out.shape[0]
    out[0, :] = s
    step = 0
    for j in range(1, n_out):
        for _ in range(n_sub):
            _step(k, q, p, s, fz, inputs[step], dt, True)
            step += 1
        out[j, :] = s


@njit(cache=True, nogil=True, fastmath=FASTMATH)
def _simulate_one(k: np.ndarray, p: np.ndarray, x0: np.ndarray, inputs: np.ndarray, dt: float, n_sub: int,
                  out: np.ndarray) -> None:
    """Trajectory of one parameter set: ``out[j]`` = state after ``j * n_sub`` steps (``out[0]`` = x0)."""
    _simulate_loop(k, np.empty(N_DERIVED), p, x0.copy(), np.zeros(5), inputs, dt, n_sub, out)


@njit(cache=True, nogil=True, parallel=True)
def _simulate_batch(k: np.ndarray, params: np.ndarray, x0: np.ndarray, inputs: np.ndarray, dt: float,
                    n_sub: int, out: np.ndarray) -> None:
    for i in prange(params.shape[0]):
        _simulate_one(k, params[i], x0, inputs, dt, n_sub, out[i])


@njit(cache=True, nogil=True, fastmath=FASTMATH, error_model="numpy")
def _wsse_bounded_loop(k: np.ndarray, q: np.ndarray, p: np.ndarray, s: np.ndarray, fz: np.ndarray,
                       inputs: np.ndarray, dt: float, n_sub: int, chan: np.ndarray, data: np.ndarray, w: np.ndarray,
                       rho: np.ndarray, budget: float, sse: np.ndarray, prev: np.ndarray) -> int:
    """Per-channel AR(1) quadratic forms ``sse[c]`` of the residuals ``e_j = state[chan[c]] - data[j, c]`` of the
    run from state ``s`` (in place), stopping as soon as the weighted sum ``sum_c w[c] sse[c]`` exceeds ``budget``.

    ``sse[c] = (1 - rho_c^2) e_0^2 + sum_{j >= 1} (e_j - rho_c e_{j-1})^2`` (the exponent of the exact AR(1)
    likelihood with the stationary first term; ``rho_c = 0``: the plain sum of squared residuals, computed by
    the same arithmetic). Every term is >= 0, so once the partial sum passes the budget the full one does too:
    the caller's decision (an MH rejection) is already certain. A stopped or diverged (NaN) run leaves
    ``sse = inf``. ``prev`` (n_channels) is scratch for ``e_{j-1}``. Returns the integration steps taken.
    """
    k = borrowed(k)
    q = borrowed(q)
    p = borrowed(p)
    s = borrowed(s)
    fz = borrowed(fz)
    inputs = borrowed(inputs)
    chan = borrowed(chan)
    data = borrowed(data)
    w = borrowed(w)
    rho = borrowed(rho)
    sse = borrowed(sse)
    prev = borrowed(prev)
    _derived(k, q)
    _spin_inertias(k, q, p)
    _initial_loads(k, q, p, s, fz)
    n_ch = chan.shape[0]
    xy = _fits_position(chan)
    tot = 0.0
    for c in range(n_ch):
        r = s[chan[c]] - data[0, c]
        prev[c] = r
        e = (1.0 - rho[c] * rho[c]) * (r * r)
        sse[c] = e
        tot += w[c] * e
    step = 0
    if tot <= budget:
        for j in range(1, data.shape[0]):
            for _ in range(n_sub):
                _step(k, q, p, s, fz, inputs[step], dt, xy)
                step += 1
            for c in range(n_ch):
                r = s[chan[c]] - data[j, c]
                a = r - rho[c] * prev[c]
                prev[c] = r
                e = a * a
                sse[c] += e
                tot += w[c] * e
            if not tot <= budget:  # over budget, or NaN
                break
    if not tot <= budget:
        for c in range(n_ch):
            sse[c] = np.inf
    return step


@njit(cache=True, nogil=True, fastmath=FASTMATH, error_model="numpy")
def _fits_position(chan: np.ndarray) -> bool:
    """True when a fitted channel is the position x or y (state indices 0, 1): the integration must track it."""
    for c in range(chan.shape[0]):
        if chan[c] < 2:
            return True
    return False


@njit(cache=True, nogil=True, fastmath=FASTMATH, error_model="numpy")
def _wsse_bounded_one(k: np.ndarray, p: np.ndarray, x0: np.ndarray, inputs: np.ndarray, dt: float, n_sub: int,
                      chan: np.ndarray, data: np.ndarray, w: np.ndarray, rho: np.ndarray, budget: float,
                      sse: np.ndarray) -> int:
    """:func:`_wsse_bounded_loop` of one parameter set from ``x0``; returns the steps taken."""
    return _wsse_bounded_loop(k, np.empty(N_DERIVED), p, x0.copy(), np.zeros(5), inputs, dt, n_sub, chan, data,
                              w, rho, budget, sse, np.empty(chan.shape[0]))


@njit(cache=True, nogil=True, fastmath=FASTMATH, error_model="numpy")
def _wsse_block(k: np.ndarray, params: np.ndarray, x0: np.ndarray, inputs: np.ndarray, dt: float, n_sub: int,
                chan: np.ndarray, data: np.ndarray, w: np.ndarray, rho: np.ndarray, budget: np.ndarray, lo: int,
                hi: int, sse: np.ndarray, steps: np.ndarray) -> None:
    """Rows ``lo..hi-1`` of a bounded batch, serially in the calling thread (GIL released: ``nogil``); row ``i``
    starts from ``x0[i]`` (``(n, 12)``)."""
    for i in range(lo, hi):
        steps[i] = _wsse_bounded_one(k, params[i], x0[i], inputs, dt, n_sub, chan, data, w[i], rho[i], budget[i],
                                     sse[i])


@njit(cache=True, nogil=True, fastmath=FASTMATH, error_model="numpy")
def _kf_bounded_loop(k: np.ndarray, q: np.ndarray, p: np.ndarray, s: np.ndarray, fz: np.ndarray,
                     inputs: np.ndarray, dt: float, n_sub: int, chan: np.ndarray, data: np.ndarray, s2: np.ndarray,
                     t2: np.ndarray, rho: np.ndarray, budget: float, out: np.ndarray, kf: np.ndarray) -> int:
    """Per-channel sums ``out[c] = sum_j v_j^2 / S_j`` of the standardised Kalman innovations of the residuals
    ``e_j = state[chan[c]] - data[j, c]`` under ``e_j = d_j + eps_j``: white noise ``eps_j ~ N(0, s2[c])`` plus a
    stationary AR(1) discrepancy ``d_j = rho d_{j-1} + eta_j`` of marginal variance ``t2[c]`` (scalar Kalman
    filter, exact; the innovation variances ``S_j`` do not depend on the data). Stops as soon as ``sum_c out[c]``
    exceeds ``budget`` (every term >= 0); a stopped or diverged run leaves ``out = inf``. ``kf`` ``(2,
    n_channels)`` is scratch (predicted mean and variance of d). Returns the integration steps taken."""
    k = borrowed(k)
    q = borrowed(q)
    p = borrowed(p)
    s = borrowed(s)
    fz = borrowed(fz)
    inputs = borrowed(inputs)
    chan = borrowed(chan)
    data = borrowed(data)
    s2 = borrowed(s2)
    t2 = borrowed(t2)
    rho = borrowed(rho)
    out = borrowed(out)
    kf = borrowed(kf)
    _derived(k, q)
    _spin_inertias(k, q, p)
    _initial_loads(k, q, p, s, fz)
    n_ch = chan.shape[0]
    xy = _fits_position(chan)
    tot = 0.0
    for c in range(n_ch):
        kf[0, c] = 0.0
        kf[1, c] = t2[c]
        out[c] = 0.0
    step = 0
    for j in range(data.shape[0]):
        if j > 0:
            for _ in range(n_sub):
                _step(k, q, p, s, fz, inputs[step], dt, xy)
                step += 1
        for c in range(n_ch):
            r = s[chan[c]] - data[j, c]
            m = kf[0, c]
            pv = kf[1, c]
            sv = pv + s2[c]
            v = r - m
            e = v * v / sv
            out[c] += e
            tot += e
            gain = pv / sv
            a = rho[c]
            kf[0, c] = a * (m + gain * v)
            kf[1, c] = a * a * pv * (1.0 - gain) + t2[c] * (1.0 - a * a)
        if not tot <= budget:  # over budget, or NaN
            break
    if not tot <= budget:
        for c in range(n_ch):
            out[c] = np.inf
    return step


@njit(cache=True, nogil=True, fastmath=FASTMATH, error_model="numpy")
def _kf_block(k: np.ndarray, params: np.ndarray, x0: np.ndarray, inputs: np.ndarray, dt: float, n_sub: int,
              chan: np.ndarray, data: np.ndarray, s2: np.ndarray, t2: np.ndarray, rho: np.ndarray,
              budget: np.ndarray, lo: int, hi: int, out: np.ndarray, steps: np.ndarray) -> None:
    """Rows ``lo..hi-1`` of :func:`_kf_bounded_loop`, serially in the calling thread; row ``i`` from ``x0[i]``."""
    for i in range(lo, hi):
        steps[i] = _kf_bounded_loop(k, np.empty(N_DERIVED), params[i], x0[i].copy(), np.zeros(5), inputs, dt,
                                    n_sub, chan, data, s2[i], t2[i], rho[i], budget[i], out[i],
                                    np.empty((2, chan.shape[0])))


@njit(cache=True, nogil=True, error_model="numpy")
def kf_log_det(s2: np.ndarray, t2: np.ndarray, rho: np.ndarray, n_obs: int) -> np.ndarray:
    """``sum_j log S_j`` per row and channel ``(n, n_channels)`` of :func:`_kf_bounded_loop`'s innovation
    variances (the log determinant of the covariance ``t2 rho^|i-j| + s2 I`` of ``n_obs`` residuals)."""
    out = np.zeros(s2.shape)
    for i in range(s2.shape[0]):
        for c in range(s2.shape[1]):
            pv = t2[i, c]
            a = rho[i, c]
            tot = 0.0
            for _ in range(n_obs):
                sv = pv + s2[i, c]
                tot += math.log(sv)
                pv = a * a * pv * (1.0 - pv / sv) + t2[i, c] * (1.0 - a * a)
            out[i, c] = tot
    return out


@njit(cache=True, nogil=True, parallel=True)
def _sse_batch(k: np.ndarray, params: np.ndarray, x0: np.ndarray, inputs: np.ndarray, dt: float, n_sub: int,
               chan: np.ndarray, data: np.ndarray, sse: np.ndarray) -> None:
    """Unbounded per-channel sums of squared residuals, rows over numba's threads (``prange``): the bounded
    kernel's loop at rho = 0, equal to its numbers up to round-off (the parallel gufunc contracts other
    multiply-adds)."""
    w = np.ones(chan.shape[0])
    rho = np.zeros(chan.shape[0])
    for i in prange(params.shape[0]):
        _wsse_bounded_one(k, params[i], x0, inputs, dt, n_sub, chan, data, w, rho, np.inf, sse[i])


@njit(cache=True, nogil=True, fastmath=FASTMATH)
def _loads_batch(k: np.ndarray, params: np.ndarray, states: np.ndarray, ax: np.ndarray, ay: np.ndarray,
                 out: np.ndarray) -> None:
    r_f = k[11] - (k[0] * k[17] * k[4] / (2.0 * (k[3] + k[4])) + k[1] * k[17]) / k[12] - k[37]
    r_r = k[11] - (k[0] * k[17] * k[3] / (2.0 * (k[3] + k[4])) + k[2] * k[17]) / k[13] - k[37]
    q = np.empty(N_DERIVED)
    _derived(k, q)
    for i in range(states.shape[0]):
        _normal_loads(k, q, params[i], states[i, 5], states[i, 6], ax[i], ay[i], r_f, r_r, out[i])


def normal_loads(params: Mapping[str, float] | np.ndarray, state: np.ndarray, ax: float = 0.0, ay: float = 0.0,
                 constants: VehicleConstants | None = None) -> np.ndarray:
    """Normal loads [lf, lr, rf, rr] (N) for one state and body accelerations ``ax``, ``ay`` (m/s^2)."""
    constants = constants or default_vehicle_constants()
    k = constants.as_array()
    p = parameter_vector(params, constants.default_parameters())[None, :]
    out = np.empty((1, 4))
    _loads_batch(k, p, np.asarray(state, float)[None, :], np.array([ax], float), np.array([ay], float), out)
    return out[0]


def parameter_vector(params: Mapping[str, float] | Sequence[float] | np.ndarray | None = None,
                     defaults: Mapping[str, float] | None = None) -> np.ndarray:
    """Full parameter vector in ``PARAM_NAMES`` order; a mapping fills the rest from ``defaults`` (default
    ``DEFAULT_PARAMETERS``; a vehicle's: ``VehicleConstants.default_parameters()``)."""
    if params is None:
        params = {}
    if isinstance(params, Mapping):
        unknown = set(params) - set(PARAM_NAMES)
        if unknown:
            raise ValueError(f"unknown 8-DOF parameters {sorted(unknown)}; known: {list(PARAM_NAMES)}")
        merged = {**(DEFAULT_PARAMETERS if defaults is None else defaults), **{k: float(v) for k, v in params.items()}}
        return np.array([merged[name] for name in PARAM_NAMES], dtype=float)
    arr = np.asarray(params, dtype=float)
    if arr.shape[-1] != len(PARAM_NAMES):
        raise ValueError(f"parameter vectors must have {len(PARAM_NAMES)} entries ({PARAM_NAMES}), got {arr.shape}")
    return arr


def state_vector(state: Mapping[str, float] | Sequence[float] | np.ndarray) -> np.ndarray:
    """State vector in ``STATE_NAMES`` order (a mapping may omit x, y, psi: they default to 0)."""
    if isinstance(state, Mapping):
        base = dict.fromkeys(("x", "y", "psi"), 0.0)
        base.update({k: float(v) for k, v in state.items()})
        missing = [n for n in STATE_NAMES if n not in base]
        if missing:
            raise ValueError(f"initial state misses {missing}")
        return np.array([base[n] for n in STATE_NAMES], dtype=float)
    arr = np.asarray(state, dtype=float)
    if arr.shape != (len(STATE_NAMES),):
        raise ValueError(f"state must have shape ({len(STATE_NAMES)},), got {arr.shape}")
    return arr


class Simulator8Dof:
    """A maneuver (initial state, driver inputs, output grid) ready to be simulated for many parameter sets.

    ``time``: input sample times (s, increasing); ``throttle`` 0..1, ``brake`` 0..1, ``steering`` -1..1 sampled on
    ``time`` and interpolated linearly onto the integration grid. The simulation starts at ``time[0]`` from
    ``initial_state`` and produces ``n_out`` states spaced ``output_dt`` (a multiple of ``dt``), the first being
    the initial state. Inputs are evaluated at the end of each step (as the paper's code).
    """

    def __init__(self, initial_state: Mapping[str, float] | np.ndarray, time: np.ndarray, throttle: np.ndarray,
                 brake: np.ndarray, steering: np.ndarray, *, dt: float = 0.005, output_dt: float | None = None,
                 n_out: int | None = None, constants: VehicleConstants | None = None,
                 wheel_torque: np.ndarray | None = None, initial_gear: int | None = None) -> None:
        time = np.asarray(time, dtype=float)
        if time.ndim != 1 or time.size < 2 or np.any(np.diff(time) <= 0):
            raise ValueError("time must be a strictly increasing 1-D array with at least 2 samples")
        if output_dt is None:
            output_dt = float(np.median(np.diff(time)))
        n_sub = int(round(output_dt / dt))
        if n_sub < 1 or abs(n_sub * dt - output_dt) > 1e-9 * max(1.0, output_dt):
            raise ValueError(f"output_dt {output_dt} must be a positive multiple of dt {dt}")
        if n_out is None:
            n_out = int(math.floor((time[-1] - time[0]) / output_dt + 1e-9)) + 1
        self.constants = constants or default_vehicle_constants()
        self.k = self.constants.as_array()
        self.defaults = self.constants.default_parameters()
        self.x0 = state_vector(initial_state)
        self.dt = float(dt)
        self.n_sub = n_sub
        self.n_out = int(n_out)
        self.output_dt = float(output_dt)
        self.t0 = float(time[0])
        n_steps = (self.n_out - 1) * n_sub
        t_steps = self.t0 + dt * np.arange(1, n_steps + 1)
        cols = [np.interp(t_steps, time, np.asarray(throttle, float)),
                np.interp(t_steps, time, np.asarray(brake, float)),
                np.interp(t_steps, time, np.asarray(steering, float))]
        if wheel_torque is not None:   # measured per-wheel net torque, WHEELS order FL, FR, RL, RR -> lf, lr, rf, rr
            tq = np.asarray(wheel_torque, dtype=float)
            if tq.shape != (time.size, 4):
                raise ValueError(f"wheel_torque must be ({time.size}, 4) (FL, FR, RL, RR), got {tq.shape}")
            cols += [np.interp(t_steps, time, tq[:, j]) for j in (0, 2, 1, 3)]
            self.k[36] = 1.0
        else:
            cols += [np.zeros(n_steps)] * 4
        cols += [np.zeros(n_steps)] * 2
        self.inputs = np.ascontiguousarray(np.column_stack(cols)).reshape(n_steps, _N_COLUMNS)
        _steer_trig(self.inputs, float(self.k[20]))
        self.initial_gear = initial_gear

    @property
    def initial_gear(self) -> int | None:
        """Gear (1-based) of the automatic at the start, or None: the lowest gear whose engine speed is below
        its up-shift speed. An automatic holds any gear inside its shift band, so the gear at a segment's start
        is part of the state (a production car reports it; :func:`feasible_gears`)."""
        g = int(self.k[38])
        return g if g > 0 else None

    @initial_gear.setter
    def initial_gear(self, gear: int | None) -> None:
        n = len(self.constants.gear_ratios)
        if gear is not None and not (1 <= int(gear) <= n):
            raise ValueError(f"initial_gear must be in [1, {n}] for this vehicle, got {gear}")
        self.k[38] = 0.0 if gear is None else float(int(gear))

    def feasible_gears(self) -> list[int]:
        """Gears (1-based) whose engine speed at the initial state lies inside their shift band [down-shift,
        up-shift speed] (the gears an automatic may be holding); [] without a gearbox or with measured torque."""
        c = self.constants
        if c.powertrain != "engine_map" or self.k[36] > 0.0 or not c.gear_ratios:
            return []
        s = self.x0
        share = c.front_share
        w = 0.5 * (s[8] + s[10]) if share >= 1.0 else 0.5 * (s[9] + s[11]) if share <= 0.0 else 0.25 * (
            s[8] + s[9] + s[10] + s[11])
        out = []
        for i, ratio in enumerate(c.gear_ratios):
            w_e = w / (ratio * c.final_drive)
            if c.shift_down[i] <= w_e <= c.shift_up[i] or (i == 0 and w_e <= c.shift_up[i]):
                out.append(i + 1)
        return out

    @property
    def t_out(self) -> np.ndarray:
        """Output times (s)."""
        return self.t0 + self.output_dt * np.arange(self.n_out)

    def run(self, params: Mapping[str, float] | np.ndarray) -> np.ndarray:
        """States ``(n_particles, n_out, 12)`` for ``params`` ``(n_particles, 15)``; ``(n_out, 12)`` for one set."""
        p = parameter_vector(params, self.defaults)
        single = p.ndim == 1
        p2 = np.ascontiguousarray(np.atleast_2d(p))
        out = np.empty((p2.shape[0], self.n_out, len(STATE_NAMES)))
        if p2.shape[0] == 1:
            _simulate_one(self.k, p2[0], self.x0, self.inputs, self.dt, self.n_sub, out[0])
        else:
            _simulate_batch(self.k, p2, self.x0, self.inputs, self.dt, self.n_sub, out)
        return out[0] if single else out

    def sse(self, params: np.ndarray, channels: Sequence[int] | np.ndarray, data: np.ndarray) -> np.ndarray:
        """Per-channel sum of squared residuals ``(n_particles, n_channels)`` against ``data (n_out, n_channels)``.

        ``channels`` are state indices (``STATE_INDEX``). Non-finite trajectories give ``inf``.
        """
        p2 = np.ascontiguousarray(np.atleast_2d(np.asarray(params, dtype=float)))
        chan = np.ascontiguousarray(np.asarray(channels, dtype=np.int64))
        data = np.ascontiguousarray(np.asarray(data, dtype=float))
        if data.shape != (self.n_out, chan.size):
            raise ValueError(f"data must be ({self.n_out}, {chan.size}), got {data.shape}")
        sse = np.empty((p2.shape[0], chan.size))
        _sse_batch(self.k, p2, self.x0, self.inputs, self.dt, self.n_sub, chan, data, sse)
        sse[~np.isfinite(sse)] = np.inf
        return sse

    def sse_bounded(self, params: np.ndarray, channels: np.ndarray, data: np.ndarray, weights: np.ndarray,
                    budget: np.ndarray | None = None, rho: np.ndarray | None = None,
                    initial_states: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`sse` whose row ``i`` stops as soon as ``sum_c weights[i, c] sse[i, c] > budget[i]``.

        Returns ``(sse, steps)``: per-channel sums ``(n, n_channels)`` (``inf`` for a row stopped over budget or
        diverged) and the integration steps each row took (a full run takes ``(n_out - 1) * n_sub``). The rows
        run in chunks over threads (:mod:`vehcal_ros.models.chunked`). ``budget`` None: no bound.

        ``rho`` (``(n, n_channels)`` or broadcastable, each in (-1, 1); None = 0): per-channel AR(1) coefficients
        of the residuals; the sums are then the AR(1) quadratic forms ``(1 - rho^2) e_0^2 + sum_{j>=1} (e_j -
        rho e_{j-1})^2`` (:func:`_wsse_bounded_loop`), equal to the plain sums at rho = 0.
        ``initial_states`` (``(n, 12)``, None = the simulator's ``x0`` for every row): each row's initial state.
        """
        p2, chan, data, b, x0, rows = self._bounded_batch(params, channels, data, budget, initial_states)
        n = p2.shape[0]
        w = rows(weights)
        r = rows(0.0 if rho is None else rho)
        sse = np.empty((n, chan.size))
        steps = np.zeros(n, dtype=np.int64)
        run_chunked(_wsse_block, (self.k, p2, x0, self.inputs, self.dt, self.n_sub, chan, data, w, r, b),
                    (sse, steps), n)
        return sse, steps

    def _bounded_batch(self, params: np.ndarray, channels: np.ndarray, data: np.ndarray,
                       budget: np.ndarray | None, initial_states: np.ndarray | None):
        """The contiguous arguments of a bounded batch: ``(params (n, 13), channels, data, budget (n,) with NaN
        and None as inf, initial states (n, 12), rows)``; ``rows(a)`` broadcasts a per-channel array to
        ``(n, n_channels)``. ValueError when ``data`` is not ``(n_out, n_channels)``."""
        p2 = np.ascontiguousarray(np.atleast_2d(np.asarray(params, dtype=float)))
        n = p2.shape[0]
        chan = np.ascontiguousarray(np.asarray(channels, dtype=np.int64))
        data = np.ascontiguousarray(np.asarray(data, dtype=float))
        if data.shape != (self.n_out, chan.size):
            raise ValueError(f"data must be ({self.n_out}, {chan.size}), got {data.shape}")
        b = np.full(n, np.inf) if budget is None else np.ascontiguousarray(
            np.broadcast_to(np.asarray(budget, dtype=float), (n,)))
        b = np.where(np.isnan(b), np.inf, b)
        x0 = np.ascontiguousarray(np.broadcast_to(self.x0 if initial_states is None else np.asarray(
            initial_states, dtype=float), (n, self.x0.size)))

        def rows(a) -> np.ndarray:
            return np.ascontiguousarray(np.broadcast_to(np.asarray(a, dtype=float), (n, chan.size)))

        return p2, chan, data, b, x0, rows

    def discrepancy_bounded(self, params: np.ndarray, channels: np.ndarray, data: np.ndarray, noise_var: np.ndarray,
                            discrepancy_var: np.ndarray, rho: np.ndarray, budget: np.ndarray | None = None,
                            initial_states: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Per-channel ``sum_j v_j^2 / S_j`` ``(n, n_channels)`` of the residuals' Kalman innovations under white
        noise of variance ``noise_var`` plus an AR(1) discrepancy of marginal variance ``discrepancy_var`` and
        lag-one coefficient ``rho`` (each ``(n, n_channels)``; :func:`_kf_bounded_loop`), row ``i`` stopping once
        its sum over channels exceeds ``budget[i]``; and the steps each row took. With :func:`kf_log_det` the
        exact Gaussian log density ``-1/2 sum_c [N log 2 pi + log det + out_c]``."""
        p2, chan, data, b, x0, rows = self._bounded_batch(params, channels, data, budget, initial_states)
        n = p2.shape[0]
        out = np.empty((n, chan.size))
        steps = np.zeros(n, dtype=np.int64)
        run_chunked(_kf_block, (self.k, p2, x0, self.inputs, self.dt, self.n_sub, chan, data, rows(noise_var),
                                rows(discrepancy_var), rows(rho), b), (out, steps), n)
        return out, steps

    @property
    def steps_per_run(self) -> int:
        """Integration steps of one full run."""
        return (self.n_out - 1) * self.n_sub


def simulate(params: Mapping[str, float] | np.ndarray, initial_state: Mapping[str, float] | np.ndarray,
             time: np.ndarray, throttle: np.ndarray, brake: np.ndarray, steering: np.ndarray, *,
             dt: float = 0.005, output_dt: float | None = None,
             constants: VehicleConstants | None = None,
             wheel_torque: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Simulate the 8-DOF model over the input record; returns ``(t_out, states)``.

    ``params``: mapping (defaults fill the rest), one vector of 15 or a batch ``(n, 15)`` (``PARAM_NAMES``);
    states are ``(n_out, 12)`` or ``(n, n_out, 12)`` in ``STATE_NAMES`` order, at ``output_dt`` spacing
    (default: the input grid's) from ``time[0]`` to ``time[-1]``.
    """
    sim = Simulator8Dof(initial_state, time, throttle, brake, steering, dt=dt, output_dt=output_dt,
                        constants=constants, wheel_torque=wheel_torque)
    return sim.t_out, sim.run(params)
