"""Tire forces from production sensors: wheel speeds, per-wheel net torque and an IMU (no rclpy).

The friction paper ends on this point (Mussot et al. 2022, doi:10.1016/j.conengprac.2021.105048, Section 5: in practice
mu is not measured but estimated; a Kalman filter after Ray 1997, its ref. [48], is proposed). Model and noise
settings: docs/tire_forces.md.

**Fx per wheel** from the wheel's spin dynamics (the 8-DOF paper's wheel equation, Eq. 13 form)::

    Jw domega/dt = T_net - r_l Fx - rr Fz sign(omega),        r_l = r0 - Fz / kz (loaded radius)

with T_net the net wheel torque (drive minus brake, as the ECU estimates it: ``JointState.effort``) and r0 the
description's lever base per axle, moved by the rolling radius measured online once it is known
(:meth:`TireForceEstimator.set_lever_shift`). A linear
Kalman filter per wheel on the state (omega, Fx), Fx a random walk of intensity ``fx_rate_psd`` (N^2/s),
input the trapezoidal mean of the two torque samples of the interval, measurement the wheel speed::

    omega_k = omega_{k-1} + dt/Jw (T - r_l Fx_{k-1} - rr Fz sign(omega)) + w_omega,  Var w_omega = (dt/Jw)^2 s_T^2/2
    Fx_k    = Fx_{k-1} + w_F,                                                        Var w_F = q_F dt
    z_k     = omega_k + v,                                                           Var v = s_omega^2

Every estimate carries its filter variance P_FxFx and the lag-one correlation of the filter error
(rho = Cov(e_k, e_{k-1}) / sqrt(P_k P_{k-1}) from ``(I - K H) F P_{k-1}``), so a block average of consecutive
estimates gets its variance right (:func:`block_variance_factor`).

**Fz per wheel** from the static axle loads plus quasi-static load transfer from the IMU accelerations::

    Fz = m g {b, a} / (2 L)  -+ m h ax / (2 L)  -+ dF_lat
    dF_lat,front = m ay / c_f (b/L h_rc,f + kphi_f / (kphi_f + kphi_r) (h - h_rc))        (rear alike)

(front/rear, left/right; positive ay loads the right wheels; h_rc = roll-axis height at the CG). The elastic
(roll-moment) part is split by the roll stiffnesses: the calibrated ones once ``model_calibrator`` has them
(:meth:`TireForceEstimator.set_roll_stiffness`), else the vehicle's. Var(Fz) = IMU noise through the partial
derivatives + (``fz_rel_std`` Fz)^2 for the constants (mass, CG height, ...).

Vectorised over the four wheels in numba; bag/bench arrays go through :func:`estimate_fx` in one call.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from numba import njit

from vehcal_ros.estimation.sensing.torque_scale import TorqueScaleConfig, TorqueScaleEstimator
from vehcal_ros.records import GnssVelocity, ImuSample, TireForce, WheelSpeeds


# ------------------------------------------------------------------------------------------------------------
# constants
# ------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TireForceVehicle:
    """The vehicle constants the force estimator takes as known (SI units)."""

    mass: float = 2573.14            #: total mass, kg
    a: float = 1.6395                #: CG to front axle, m
    b: float = 1.7384                #: CG to rear axle, m
    h: float = 0.735                 #: CG height above ground, m
    track_front: float = 1.8194      #: m
    track_rear: float = 1.8194       #: m
    hrc_front: float = 0.334         #: roll-centre height above ground, front, m
    hrc_rear: float = 0.386          #: roll-centre height above ground, rear, m
    kphi_front: float = 37500.0      #: roll stiffness front, N m/rad (only the front/rear ratio is used)
    kphi_rear: float = 37500.0       #: roll stiffness rear, N m/rad
    wheel_inertia: tuple[float, float] = (7.788, 7.788)   #: spin inertia (front, rear), kg m^2
    r0: float = 0.4699               #: unloaded tire radius, m
    kz: tuple[float, float] = (441900.0, 441900.0)   #: tire vertical stiffness (front, rear), N/m: r_l = r0 - Fz/kz
    rr: float = 0.0037592            #: rolling-resistance lever, m (moment rr Fz)
    g: float = 9.81

    @classmethod
    def hmmwv(cls) -> TireForceVehicle:
        """The 14-DOF HMMWV of this package (data/hmmwv.yaml): mass, settled axle loads, CG height and the wheel
        and tire data of its model; roll centres from the 8-DOF paper (h - hrcf, h - hrcr). Interim source
        until the vehicle description (config/vehicles/hmmwv.yaml) is wired in."""
        return cls()

    @classmethod
    def from_description(cls, desc: object) -> TireForceVehicle:
        """From a :class:`~vehcal_ros.vehicle.description.VehicleDescription` (config/vehicles/*.yaml, or
        ``vehcal vehicle describe``): total mass and its CG from the sprung CG and the unsprung corners (at the
        loaded wheel-centre height), axle loads from the description's static loads, roll centres above ground
        ``h - hrc*``, the nominal roll stiffnesses and rolling-resistance lever."""
        d = desc
        # the force acts at the loaded radius r0 - Fz/kt - rolling_excess (tire.rolling_minus_loaded): r0 here is
        # the base of that lever, and of the wheel-centre height
        r0 = d.r0 - float(getattr(d, "rolling_excess", 0.0))
        m_tot = d.m + 2 * d.muf + 2 * d.mur
        f_front, f_rear = d.static_wheel_loads()
        L = d.a + d.b
        b_tot = 2 * L * f_front / (m_tot * d.g)
        r_f, r_r = r0 - f_front / d.ktf, r0 - f_rear / d.ktr
        h_tot = (d.m * d.h + 2 * d.muf * r_f + 2 * d.mur * r_r) / m_tot
        nominal = dict(getattr(d, "nominal", {}) or {})
        return cls(mass=m_tot, a=L - b_tot, b=b_tot, h=h_tot, track_front=d.cf, track_rear=d.cr,
                   hrc_front=d.h - d.hrcf, hrc_rear=d.h - d.hrcr,
                   kphi_front=float(nominal.get("kphi_f", 37500.0)), kphi_rear=float(nominal.get("kphi_r", 37500.0)),
                   wheel_inertia=(d.Jw_f, d.Jw_r), r0=r0, kz=(d.ktf, d.ktr), rr=float(nominal.get("rr", 0.0)),
                   g=d.g)

    def validate(self) -> None:
        checks = [
            (self.mass > 0, f"mass must be > 0 kg, got {self.mass}"),
            (self.a > 0 and self.b > 0, f"a, b must be > 0 m, got {self.a}, {self.b}"),
            (0 < self.h < 5, f"h must be in (0, 5) m, got {self.h}"),
            (self.track_front > 0 and self.track_rear > 0, "track_front, track_rear must be > 0 m"),
            (self.kphi_front > 0 and self.kphi_rear > 0, "kphi_front, kphi_rear must be > 0 N m/rad"),
            (min(self.wheel_inertia) > 0, f"wheel_inertia must be > 0 kg m^2, got {self.wheel_inertia}"),
            (0.1 <= self.r0 <= 2.0, f"r0 must be in [0.1, 2] m, got {self.r0}"),
            (min(self.kz) > 1e3, f"kz must be > 1e3 N/m, got {self.kz}"),
            (0 <= self.rr < 0.1, f"rr must be in [0, 0.1) m, got {self.rr}"),
        ]
        for ok, msg in checks:
            if not ok:
                raise ValueError(f"vehicle: {msg}")

    def static_loads(self) -> np.ndarray:
        """Static wheel loads FL, FR, RL, RR (N)."""
        L = self.a + self.b
        f, r = self.mass * self.g * self.b / (2 * L), self.mass * self.g * self.a / (2 * L)
        return np.array([f, f, r, r])


@dataclass(frozen=True)
class TireForceConfig:
    """Noise settings of the estimator (docs/tire_forces.md)."""

    vehicle: TireForceVehicle = field(default_factory=TireForceVehicle.hmmwv)
    wheel_speed_std: float = 0.05    #: rad/s, white noise of a wheel-speed sample
    torque_std: float = 20.0         #: N m, white noise of a net-torque sample (ECU estimate)
    fx_rate_psd: float = 1.0e5       #: N^2/s, random-walk intensity of Fx (how fast the filter lets Fx move)
    accel_std: float = 0.05          #: m/s^2, IMU acceleration noise
    fz_rel_std: float = 0.01         #: relative std of Fz from the constants (mass, CG, roll split)
    max_gap: float = 0.5             #: s, a longer gap between wheel-speed samples restarts the filter
    settle: int = 20                 #: filter steps after a (re)start before estimates are emitted
    imu_timeout: float = 0.5         #: s, an older IMU sample is not used for Fz
    #: learn the reported torques' scale from the vehicle's acceleration and correct Fx with it
    #: (estimation/sensing/torque_scale.py); None (the default): take the torques as reported
    torque_scale: TorqueScaleConfig | None = None

    def validate(self) -> None:
        self.vehicle.validate()
        checks = [
            (0 < self.wheel_speed_std <= 10, f"wheel_speed_std must be in (0, 10] rad/s, got {self.wheel_speed_std}"),
            (0 <= self.torque_std <= 1e4, f"torque_std must be in [0, 1e4] N m, got {self.torque_std}"),
            (0 < self.fx_rate_psd <= 1e12, f"fx_rate_psd must be in (0, 1e12] N^2/s, got {self.fx_rate_psd}"),
            (0 <= self.accel_std <= 10, f"accel_std must be in [0, 10] m/s^2, got {self.accel_std}"),
            (0 <= self.fz_rel_std <= 1, f"fz_rel_std must be in [0, 1], got {self.fz_rel_std}"),
            (0 < self.max_gap <= 10, f"max_gap must be in (0, 10] s, got {self.max_gap}"),
            (0 <= self.settle <= 10000, f"settle must be in [0, 10000] steps, got {self.settle}"),
            (0 < self.imu_timeout <= 10, f"imu_timeout must be in (0, 10] s, got {self.imu_timeout}"),
        ]
        for ok, msg in checks:
            if not ok:
                raise ValueError(msg)


# ------------------------------------------------------------------------------------------------------------
# Fx: the wheel-spin Kalman filter (numba, four wheels per call)
# ------------------------------------------------------------------------------------------------------------
@njit(cache=True, nogil=True)
def kf_init(x: np.ndarray, P: np.ndarray, omega: np.ndarray, torque: np.ndarray, fz: np.ndarray,
            k: np.ndarray) -> None:
    """(Re)start the filters of the four wheels: omega measured, Fx quasi-static (T - rr Fz) / r_l, wide P.

    ``k`` = [J_front, J_rear, r0_front, kz_front, rr, var_omega, var_torque, q_fx, kz_rear, r0_rear]."""
    for i in range(4):
        r = (k[2] - fz[i] / k[3]) if i < 2 else (k[9] - fz[i] / k[8])
        x[i, 0] = omega[i]
        x[i, 1] = (torque[i] - k[4] * fz[i] * math.tanh(omega[i] * r / 0.5)) / r
        P[i, 0, 0] = k[5]
        P[i, 0, 1] = 0.0
        P[i, 1, 0] = 0.0
        P[i, 1, 1] = 1.0e6


@njit(cache=True, nogil=True)
def kf_step(x: np.ndarray, P: np.ndarray, dt: float, omega: np.ndarray, torque_mean: np.ndarray,
            fz: np.ndarray, k: np.ndarray, fx_out: np.ndarray, var_out: np.ndarray, rho_out: np.ndarray) -> None:
    """One predict + update of the four wheels' filters (module docstring); writes Fx, Var(Fx) and the lag-one
    error correlation of Fx into the ``*_out`` arrays (4,)."""
    var_w, var_t, q = k[5], k[6], k[7]
    for i in range(4):
        J = k[0] if i < 2 else k[1]
        r = (k[2] - fz[i] / k[3]) if i < 2 else (k[9] - fz[i] / k[8])
        f01 = -dt * r / J
        # predict
        xp0 = x[i, 0] + f01 * x[i, 1] + dt / J * (torque_mean[i] - k[4] * fz[i] * math.tanh(x[i, 0] * r / 0.5))
        xp1 = x[i, 1]
        p00, p01, p11 = P[i, 0, 0], P[i, 0, 1], P[i, 1, 1]
        # F P (rows) and F P F^T + Q
        fp00 = p00 + f01 * p01
        fp01 = p01 + f01 * p11
        fp11 = p11
        pp00 = fp00 + fp01 * f01 + (dt / J) ** 2 * var_t * 0.5
        pp01 = fp01
        pp11 = fp11 + q * dt
        # update with z = omega
        s = pp00 + var_w
        k0 = pp00 / s
        k1 = pp01 / s
        innov = omega[i] - xp0
        x[i, 0] = xp0 + k0 * innov
        x[i, 1] = xp1 + k1 * innov
        n00 = pp00 - k0 * pp00
        n01 = pp01 - k0 * pp01
        n11 = pp11 - k1 * pp01
        # Cov(e_k, e_{k-1}) = (I - K H) F P_{k-1}: its (Fx, Fx) element
        c11 = fp11 - k1 * fp01
        rho_out[i] = c11 / math.sqrt(max(n11 * p11, 1e-300))
        P[i, 0, 0], P[i, 0, 1], P[i, 1, 0], P[i, 1, 1] = n00, n01, n01, n11
        fx_out[i] = x[i, 1]
        var_out[i] = n11


@njit(cache=True, nogil=True)
def _estimate_fx(t: np.ndarray, omega: np.ndarray, torque: np.ndarray, fz: np.ndarray, k: np.ndarray,
                 max_gap: float, fx: np.ndarray, var: np.ndarray, rho: np.ndarray) -> None:
    n = t.shape[0]
    x = np.zeros((4, 2))
    P = np.zeros((4, 2, 2))
    tm = np.empty(4)
    for j in range(n):
        if j == 0 or not (0.0 < t[j] - t[j - 1] <= max_gap):
            kf_init(x, P, omega[j], torque[j], fz[j], k)
            for i in range(4):
                fx[j, i] = x[i, 1]
                var[j, i] = P[i, 1, 1]
                rho[j, i] = 0.0
            continue
        for i in range(4):
            tm[i] = 0.5 * (torque[j - 1, i] + torque[j, i])
        kf_step(x, P, t[j] - t[j - 1], omega[j], tm, fz[j], k, fx[j], var[j], rho[j])


def kf_constants(config: TireForceConfig) -> np.ndarray:
    """The packed constants of :func:`kf_step`: [J_front, J_rear, r0_front, kz_front, rr, var_omega, var_torque,
    q_fx, kz_rear, r0_rear] (the lever base r0 per axle: the description's, until
    :meth:`TireForceEstimator.set_lever_shift` moves it)."""
    v = config.vehicle
    return np.array([v.wheel_inertia[0], v.wheel_inertia[1], v.r0, v.kz[0], v.rr, config.wheel_speed_std ** 2,
                     config.torque_std ** 2, config.fx_rate_psd, v.kz[1], v.r0], dtype=float)


def estimate_fx(t: np.ndarray, omega: np.ndarray, torque: np.ndarray, fz: np.ndarray,
                config: TireForceConfig | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Fx (N), Var(Fx) (N^2) and the lag-one error correlation, shapes (n, 4), of a whole record (bench, tests):
    the filter of :class:`TireForceEstimator` run in one numba call (restarts on gaps > ``max_gap``)."""
    config = config or TireForceConfig()
    t = np.ascontiguousarray(t, dtype=float)
    n = t.size
    arrs = [np.ascontiguousarray(np.broadcast_to(a, (n, 4)), dtype=float) for a in (omega, torque, fz)]
    fx, var, rho = np.empty((n, 4)), np.empty((n, 4)), np.empty((n, 4))
    _estimate_fx(t, *arrs, kf_constants(config), float(config.max_gap), fx, var, rho)
    return fx, var, rho


def block_variance_factor(rho: float, n: int) -> float:
    """Var(mean of n consecutive estimates) / (Var(one) / n) for an AR(1) error of lag-one correlation rho:
    1 + 2 sum_{j=1}^{n-1} (1 - j/n) rho^j."""
    if n <= 1:
        return 1.0
    rho = min(max(float(rho), 0.0), 0.999)
    j = np.arange(1, n)
    return float(1.0 + 2.0 * np.sum((1.0 - j / n) * rho ** j))


# ------------------------------------------------------------------------------------------------------------
# Fz: static loads + IMU load transfer
# ------------------------------------------------------------------------------------------------------------
def load_transfer_gains(v: TireForceVehicle, kphi_front: float | None = None,
                        kphi_rear: float | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(static (4,), dFz/dax (4,), dFz/day (4,)) per wheel FL, FR, RL, RR (module docstring)."""
    kf = v.kphi_front if kphi_front is None else kphi_front
    kr = v.kphi_rear if kphi_rear is None else kphi_rear
    L = v.a + v.b
    hrc = (v.hrc_front * v.b + v.hrc_rear * v.a) / L
    split_f = kf / (kf + kr)
    long = v.mass * v.h / (2 * L)
    lat_f = v.mass / v.track_front * (v.b / L * v.hrc_front + split_f * (v.h - hrc))
    lat_r = v.mass / v.track_rear * (v.a / L * v.hrc_rear + (1.0 - split_f) * (v.h - hrc))
    d_ax = np.array([-long, -long, long, long])
    d_ay = np.array([-lat_f, lat_f, -lat_r, lat_r])
    return v.static_loads(), d_ax, d_ay


def normal_loads(ax: np.ndarray | float, ay: np.ndarray | float, config: TireForceConfig | None = None,
                 kphi_front: float | None = None, kphi_rear: float | None = None
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Fz (N) and Var(Fz) (N^2) per wheel, shape (..., 4), from body accelerations ax, ay (m/s^2)."""
    config = config or TireForceConfig()
    st, gx, gy = load_transfer_gains(config.vehicle, kphi_front, kphi_rear)
    ax = np.asarray(ax, dtype=float)[..., None]
    ay = np.asarray(ay, dtype=float)[..., None]
    fz = st + gx * ax + gy * ay
    var = (gx ** 2 + gy ** 2) * config.accel_std ** 2 + (config.fz_rel_std * fz) ** 2
    return fz, var


# ------------------------------------------------------------------------------------------------------------
# streaming estimator (node and bag replay)
# ------------------------------------------------------------------------------------------------------------
ESTIMATOR_COUNTERS = ("estimated", "no_torque", "no_imu", "nonfinite", "out_of_order", "restarts", "settling")


class TireForceEstimator:
    """Wheel-speed (with ``torque``) and IMU records in, :class:`TireForce` records (with variances) out.

    ``add_imu`` keeps the latest accelerations; ``add_wheel_speeds`` steps the four filters and returns the four
    wheels' estimates at the wheel-speed stamp (an empty list while settling, without torque or IMU, or for a
    bad sample, each counted in ``counters``). A gap, a stamp going back or a non-finite sample restarts the
    filter. Per message: one numba call on preallocated arrays.
    """

    def __init__(self, config: TireForceConfig | None = None) -> None:
        self.config = config or TireForceConfig()
        self.config.validate()
        self._k = kf_constants(self.config)
        v = self.config.vehicle
        #: the lever base r0 per axle (front, rear), m: the description's until :meth:`set_lever_shift` (Python
        #: floats for the torque-scale regression's per-message arithmetic; the kernels read ``_k[2]``, ``_k[9]``)
        self._r0 = (float(v.r0), float(v.r0))
        self._x = np.zeros((4, 2))
        self._P = np.zeros((4, 2, 2))
        self._fx, self._var, self._rho = np.zeros(4), np.zeros(4), np.zeros(4)
        self._tm = np.zeros(4)
        self._t_last = -math.inf
        self._torque_last = np.zeros(4)
        self._steps = -1          # filter steps since the last (re)start; -1 = not started
        self._imu: ImuSample | None = None
        self.kphi: tuple[float, float] | None = None
        self.rr_calibrated: float | None = None
        self._gains = load_transfer_gains(self.config.vehicle)
        self.counters = dict.fromkeys(ESTIMATOR_COUNTERS, 0)
        self.last: list[TireForce] = []
        #: the reported torques' scale and offset (None: off)
        self.torque_scale = (TorqueScaleEstimator(v.mass, self.config.torque_scale)
                             if self.config.torque_scale is not None else None)
        self._grade = 0.0             # rad, road grade (uphill positive) from the GNSS velocity; 0 without one
        self._grade_t = -math.inf
        self._imu_prev: ImuSample | None = None   # the IMU sample before ``_imu`` (brackets a force step)
        #: the newest force step waiting for the IMU sample at or after its stamp (the regression's f_x is the IMU's
        #: interpolated to the step's stamp): (t, sum Fx, S_T, speed)
        self._pending: tuple[float, float, float, float] | None = None
        #: the sum of the wheels' squared toe (rad^2) at a time, for the regression's toe drag (the grip
        #: pipeline hands over its collector's :meth:`~vehcal_ros.estimation.grip.friction_samples.GripDataCollector.
        #: toe_squares`; None: no toe)
        self.toe_squares: Callable[[float], float] | None = None

    @property
    def lever_base(self) -> tuple[float, float]:
        """The unloaded radius (front, rear), m, that the spin equation's lever r0 - Fz/kz starts from, as the
        filter uses it: the description's ``r0``, moved by :meth:`set_lever_shift` once the rolling radius is
        measured."""
        return float(self._k[2]), float(self._k[9])

    def set_roll_stiffness(self, kphi_front: float, kphi_rear: float) -> bool:
        """Use calibrated roll stiffnesses (N m/rad) for the lateral load split; False (ignored) if not valid."""
        if not (math.isfinite(kphi_front) and math.isfinite(kphi_rear) and kphi_front > 0 and kphi_rear > 0):
            return False
        self.kphi = (float(kphi_front), float(kphi_rear))
        self._gains = load_transfer_gains(self.config.vehicle, *self.kphi)
        return True

    def set_rolling_resistance(self, rr: float) -> bool:
        """Use a calibrated rolling-resistance lever (m; moment rr Fz) in the spin equation; False if not valid."""
        if not (math.isfinite(rr) and 0.0 <= rr < 0.1):
            return False
        self.rr_calibrated = float(rr)
        self._k[4] = self.rr_calibrated
        return True

    def set_lever_shift(self, front: float, rear: float) -> bool:
        """Move each axle's lever base r0 by ``front`` / ``rear`` m (the loaded radius r0 - Fz/kz the force acts
        at): the rolling radius measured online minus the description's, at the static load
        (:meth:`~vehcal_ros.estimation.grip.pipeline.GripPipeline` hands it over once the radius is known). A
        radius error of the description (a tire size or a wear it does not state) moves the unloaded radius and
        so the lever by the same amount; a deflection error moves the lever 3x as much as the rolling radius
        (R_e = R0 - deflection/3), so it is corrected by a third. False (ignored) beyond 25 % of r0."""
        r0 = self.config.vehicle.r0
        if not (math.isfinite(front) and math.isfinite(rear) and max(abs(front), abs(rear)) <= 0.25 * r0):
            return False
        self._r0 = (r0 + float(front), r0 + float(rear))
        self._k[2], self._k[9] = self._r0
        return True

    def add_imu(self, rec: ImuSample) -> None:
        if math.isfinite(rec.t) and math.isfinite(rec.ax) and math.isfinite(rec.ay):
            if self._imu is None or rec.t >= self._imu.t:
                self._imu_prev, self._imu = self._imu, rec
                if self._pending is not None:
                    self._regress()

    def add_gnss(self, rec: GnssVelocity) -> None:
        """Keep the road grade the GNSS velocity shows, atan(v_up / v_horizontal) (a running mean over ~10
        records; records slower than 3 m/s are skipped): the torque-scale regression's grade (nothing while that
        is off)."""
        if self.torque_scale is None:
            return
        h = math.hypot(rec.ve, rec.vn)
        if not (math.isfinite(rec.t) and math.isfinite(rec.vu) and h >= 3.0):
            return
        grade = math.atan2(rec.vu, h)
        self._grade = grade if rec.t - self._grade_t > 2.0 else self._grade + 0.1 * (grade - self._grade)
        self._grade_t = rec.t

    def loads(self, ax: float, ay: float) -> tuple[np.ndarray, np.ndarray]:
        """Fz and Var(Fz) (4,) at accelerations ax, ay with the current roll split."""
        st, gx, gy = self._gains
        fz = st + gx * ax + gy * ay
        var = (gx * gx + gy * gy) * self.config.accel_std ** 2 + (self.config.fz_rel_std * fz) ** 2
        return fz, var

    def reset(self) -> None:
        self._steps = -1
        self._t_last = -math.inf

    def add_wheel_speeds(self, rec: WheelSpeeds) -> list[TireForce]:
        """The four wheels' forces at ``rec``'s stamp (module docstring)."""
        c = self.counters
        self.last = []
        torque = rec.torque
        if torque is None or len(torque) != 4:
            c["no_torque"] += 1
            return []
        omega = np.asarray(rec.omega, dtype=float)
        torque = np.asarray(torque, dtype=float)
        if not (math.isfinite(rec.t) and np.all(np.isfinite(omega)) and np.all(np.isfinite(torque))):
            c["nonfinite"] += 1
            return []
        imu = self._imu
        if imu is None or abs(rec.t - imu.t) > self.config.imu_timeout:
            c["no_imu"] += 1
            return []
        if rec.t <= self._t_last:
            c["out_of_order"] += 1
            if self._t_last - rec.t <= self.config.max_gap:
                return []          # a late or duplicate sample: skip it, keep the filter
        fz, fz_var = self.loads(imu.ax, imu.ay)
        dt = rec.t - self._t_last
        if self._steps < 0 or not (0.0 < dt <= self.config.max_gap):
            if self._steps >= 0:
                c["restarts"] += 1
            kf_init(self._x, self._P, omega, torque, fz, self._k)
            self._steps = 0
        else:
            np.add(self._torque_last, torque, out=self._tm)
            self._tm *= 0.5
            kf_step(self._x, self._P, dt, omega, self._tm, fz, self._k, self._fx, self._var, self._rho)
            self._steps += 1
        self._t_last = rec.t
        self._torque_last[:] = torque
        if self._steps < self.config.settle:
            c["settling"] += 1
            return []
        c["estimated"] += 1
        fy = self._lateral(imu.ay, fz)
        fx = [float(self._fx[i]) for i in range(4)]
        fx_var = [float(self._var[i]) for i in range(4)]
        if self.torque_scale is not None:
            self._scale_forces(rec.t, omega, torque, fz, fx, fx_var)
        self.last = [TireForce(t=rec.t, wheel=i, fx=fx[i], fy=float(fy[i]), fz=float(fz[i]),
                               fx_var=fx_var[i], fz_var=float(fz_var[i]), fx_rho=float(self._rho[i]))
                     for i in range(4)]
        return self.last

    def _scale_forces(self, t: float, omega: np.ndarray, torque: np.ndarray, fz: np.ndarray,
                      fx: list[float], fx_var: list[float]) -> None:
        """Hand this step to the torque-scale regression (estimation/sensing/torque_scale.py; :meth:`_regress` once the
        IMU sample at or after ``t`` is there), then correct ``fx`` (and its
        variance) in place by the learnt scale when the regression applies it (``TorqueScaleConfig.apply``):
        Fx_i += (k - 1) T_i / r_i. The offset B is learnt but not applied: a torque offset, an accelerometer bias
        and an IMU pitched on its mount give the same constant, and only the first is a force."""
        kz = self.config.vehicle.kz
        s_t = fx_sum = speed = 0.0
        over_r = [0.0] * 4
        for i in range(4):
            axle = 0 if i < 2 else 1
            r = self._r0[axle] - float(fz[i]) / kz[axle]
            over_r[i] = float(torque[i]) / r
            s_t += over_r[i]
            fx_sum += fx[i]
            speed += float(omega[i]) * r
        if self._pending is not None:   # its IMU sample never came: fed with the newest there is
            self._regress(force=True)
        self._pending = (t, fx_sum, s_t, 0.25 * speed)
        self._regress()
        dk, var_k = self.torque_scale.correction()
        if dk == 0.0:
            return
        for i in range(4):
            fx[i] += dk * over_r[i]
            fx_var[i] += var_k * over_r[i] * over_r[i]

    def _regress(self, force: bool = False) -> None:
        """Feed the pending force step to the regression with the specific force the tires' road-plane forces
        give at its stamp: the IMU's a_x with its body pitch and the road grade's share of gravity taken out,
        a_x + g (sin(pitch) + sin(grade)), interpolated between the IMU samples that bracket the stamp (the
        newest one when ``force``, or when it is the step's own). An IMU stamped after a step's wheel speeds
        arrives after them in a bag (and may live): pairing the step with the older sample lags f_x by one period
        and reads the scale ~2 % low on the sedan's launches."""
        t, fx_sum, s_t, speed = self._pending
        imu, prev = self._imu, self._imu_prev
        if imu is None:
            return
        if imu.t < t and not force:
            return   # wait for the IMU sample at or after the step
        g = self.config.vehicle.g
        grade = self._grade if t - self._grade_t <= 2.0 else 0.0
        if prev is not None and prev.t >= t:   # both after the step: the nearer one
            imu, prev = prev, None
        f_now = imu.ax + g * (math.sin(imu.pitch) + math.sin(grade))
        if prev is not None and prev.t < t < imu.t:
            w = (t - prev.t) / (imu.t - prev.t)
            f_prev = prev.ax + g * (math.sin(prev.pitch) + math.sin(grade))
            f_now = f_prev + w * (f_now - f_prev)
        self._pending = None
        toe_sq = self.toe_squares(t) if self.toe_squares is not None else 0.0
        self.torque_scale.add(t, f_now, fx_sum, s_t, speed, toe_sq)

    def _lateral(self, ay: float, fz: np.ndarray) -> np.ndarray:
        """Quasi-static lateral force per wheel (N): the axle's share m ay {b, a}/L split by load (for the
        combined-slip gate only)."""
        v = self.config.vehicle
        L = v.a + v.b
        front, rear = v.mass * ay * v.b / L, v.mass * ay * v.a / L
        sf, sr = max(fz[0] + fz[1], 1.0), max(fz[2] + fz[3], 1.0)
        return np.array([front * fz[0] / sf, front * fz[1] / sf, rear * fz[2] / sr, rear * fz[3] / sr])


__all__ = ["TireForceVehicle", "TireForceConfig", "TireForceEstimator", "estimate_fx", "normal_loads",
           "load_transfer_gains", "block_variance_factor", "kf_init", "kf_step", "kf_constants"]
