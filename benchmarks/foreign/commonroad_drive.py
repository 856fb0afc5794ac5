"""An everyday drive of a CommonRoad multi-body car, recorded as a rosbag2 of production sensors.

The car is not one of this project's models: ``vehicle_dynamics_mb`` of the independent CommonRoad vehicle
models (PyPI ``commonroad-vehicle-models``, module ``vehiclemodels``, BSD; Althoff & Wuersching, "CommonRoad:
Vehicle Models", 2020), a 29-state multi-body model with a PAC2002 magic-formula tire, parameter set 1 (Ford
Escort: ``T_se = 1``, all drive torque on the front axle, FWD) or 3 (VW Vanagon: ``T_se = 0``, all on the rear
axle, RWD). Its inputs are the steering velocity of the front wheels (rad/s) and the longitudinal acceleration
(m/s^2), which the model turns into a drive torque ``T_E = m R_w a`` (split front/rear by ``T_se``) or a brake
torque ``T_B = m R_w a`` (split by ``T_sb``); it has no rolling resistance and no aerodynamic drag.

Road friction. The road changes in time (all four wheels at once), by default dry 1.0 -> wet 0.6 -> snow 0.35 ->
dry 1.0 in equal parts of the drive. It acts on the tire through MF2002's friction scaling: with
``lambda_mu = mu_road / p_dx1_nominal`` (``p_dx1_nominal`` = 1.1739, the set's longitudinal peak factor),
``p_dx1 = lambda_mu p_dx1_nominal`` and ``p_dy1 = lambda_mu p_dy1_nominal`` (the longitudinal and lateral peak
factors; the slip stiffnesses ``p_kx1 Fz``, ``p_ky1 Fz`` and the shape factors stay, as a road's LMUX = LMUY
scaling does). Since the set's ``p_dx3 = 0`` (no camber effect on the longitudinal peak), the peak of the
pure-longitudinal Fx/Fz is then ``mu_road`` itself, and the lateral peak is ``0.894 mu_road`` (p_dy1/p_dx1).

Driver. A speed controller follows a reference speed made of cruise, gentle accelerations and brakings
(1-1.5 m/s^2 on a dry road; the driver is gentler on wet and snow: x (0.4 + 0.6 mu_road)), and a steering
controller follows a curvature programme of lane changes (3.5 m in 4-5 s) and bends (radius ~200 m): road-wheel
angle = L kappa + 0.05 s x (yaw-rate error), reached by a steering velocity of at most the model's 0.4 rad/s.
The last road part of a drive of 100 s or more starts with a stop-and-go (brake to a standstill, wait 3 s,
drive off). The seed varies the amplitudes (x 0.85-1.15) and the sensor noise.

Integration. ``scipy.integrate.solve_ivp`` (LSODA: it switches between Adams and BDF as the wheel-spin
dynamics get stiff at low speed) over each 10 ms control interval with the inputs held (rtol 1e-6). Two
interventions, both where the MB model leaves its dynamic branch: below 0.1 m/s it switches to a kinematic model
in which the tire slip is zero and the wheel spins are not tied to the speed (the brake torque then drives them
into the model's zero-spin clamp, a discontinuity no step-size control gets past), so there the wheel spins'
derivative is replaced by the car's ``a / R_w`` (they roll with it); and the car does not reverse (speed and
wheel spins clamped at 0 after each interval).

Recorded (``vehcal_ros.io.bags.write_bag``, mcap), production sensors only, no tire-force topic:

- ``WheelSpeeds`` 100 Hz: spin rates (rad/s) + N(0, 0.005) noise (``--encoder-teeth 48``: from a 48-tooth wheel
  read by edge timing, :class:`ToothEncoder`); ``torque`` (JointState.effort) = the net wheel
  torque the model applies, drive minus brake (``0.5 T_se T_E + 0.5 T_sb T_B`` on a front wheel, N m) x (1 + N(0,
  0.02)).
- ``ImuSample`` 100 Hz: accelerometer of the sprung body (specific force, +g on z at rest, gravity projected
  through roll and pitch) + N(0, 0.05) m/s^2; body rates (+ N(0, 0.002) rad/s); roll, pitch, yaw.

Axes: the model is written in SAE axes (x forward, y right, z down; its left wheels are at y = -T/2, a positive
yaw rate turns right, a positive steering angle steers right). Every record is in ROS axes (x forward, y left,
z up): lateral velocity, lateral acceleration, yaw angle and rate, pitch, the y position and the steering angle
change sign; roll (+ = right side down in both) and the longitudinal quantities do not.
- ``OdomSample`` 100 Hz: body-frame velocity at the CG + N(0, 0.05) m/s, yaw rate, pose.
- ``GnssVelocity`` 10 Hz: the car's ENU velocity (east = the model's x, north = its -y) + N(0, 0.05) m/s per axis
  (its own random stream), recorded 0.1 s after its stamp (the receiver's latency): the slips' speed reference.
- ``Controls`` 100 Hz: throttle = a/3 m/s^2, brake = -a/g (0..1, from the constrained acceleration input),
  steering = road-wheel angle x the spec sheet's steering ratio (rad of steering-wheel angle, + = left).
- ``GroundTruth`` 20 Hz: ``mu_road`` per wheel; ``mu_max`` per wheel = the peak over slip of the car's
  pure-longitudinal PAC2002 Fx(kappa)/Fz (``vehiclemodels.utils.tire_model.formula_longitudinal`` with the
  current friction scaling, at the wheel's current Fz and camber), maximised numerically; true slip (friction
  paper Eq. 3, (omega R_w - u_w)/max(omega R_w, u_w) with the model's wheel speed u_w), slip angle (ROS sign:
  atan of the wheel's lateral over longitudinal velocity in its heading), Fx (from the
  model's wheel-spin equation, (T - I_y_w omega_dot)/R_w) and Fz (the model's tire spring).

Usage::

    .venv/bin/python benchmarks/foreign/commonroad_drive.py --set 1 --seed 1 --out /tmp/cr1 \\
        [--duration 160] [--roads 1.0,0.6,0.35,1.0]
"""

from __future__ import annotations

import argparse
import copy
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

HERE = Path(__file__).resolve().parent
VEHICLES = HERE / "vehicles"
G = 9.81                      # m/s^2, the MB model's gravity
DT = 0.01                     # s, control interval = sensor period
TRUTH_EVERY = 5               # control intervals per ground-truth sample (20 Hz)
GNSS_EVERY = 10               # control intervals per GNSS fix (10 Hz)
GNSS_LATENCY_STEPS = 10       # a fix is recorded 0.1 s after its stamp (the receiver's latency)
GNSS_STD = 0.05               # m/s per horizontal axis
GNSS_STREAM = 7               # seeds the GNSS noise's own random stream
THROTTLE_FULL = 3.0           # m/s^2 at throttle 1 (Controls record only)
KINEMATIC_SPEED = 0.1         # m/s, below it vehicle_dynamics_mb is kinematic
SETS = {1: "parameters_vehicle1", 3: "parameters_vehicle3"}
DEFAULT_ROADS = (1.0, 0.6, 0.35, 1.0)


def vehiclemodels_available() -> bool:
    """True when the CommonRoad vehicle models (``vehiclemodels``, requirements-test.txt) import."""
    try:
        import vehiclemodels.vehicle_dynamics_mb  # noqa: F401
    except ImportError:
        return False
    return True


def load_parameters(set_id: int) -> Any:
    """A private copy of CommonRoad parameter set ``set_id`` (1 or 3), SI units."""
    import importlib

    if set_id not in SETS:
        raise ValueError(f"--set {set_id}: expected one of {', '.join(map(str, SETS))}")
    module = importlib.import_module(f"vehiclemodels.{SETS[set_id]}")
    return copy.deepcopy(getattr(module, SETS[set_id])())


def spec_steering_ratio(set_id: int) -> float:
    """Steering ratio (steering-wheel / road-wheel angle) of the car's spec sheet (vehicles/cr_setN.spec.yaml)."""
    spec = yaml.safe_load((VEHICLES / f"cr_set{set_id}.spec.yaml").read_text(encoding="utf-8"))
    return float(spec["spec_sheet"]["steering_ratio"])


def drive_layout(p: Any) -> str:
    """FWD / RWD / AWD from the set's engine-torque split ``T_se`` (front fraction)."""
    return "FWD" if p.T_se >= 1.0 else ("RWD" if p.T_se <= 0.0 else f"AWD (front {p.T_se:g})")


# ------------------------------------------------------------------------------------------------ road
@dataclass(frozen=True)
class Roads:
    """Road friction in time: ``values`` in equal consecutive parts of ``duration`` (s)."""

    values: tuple[float, ...]
    duration: float

    def index(self, t: float) -> int:
        """Part of the drive at time ``t`` (s)."""
        return min(int(t / self.duration * len(self.values)), len(self.values) - 1)

    def mu(self, t: float) -> float:
        """Road friction scale (peak mu of the pure-longitudinal curve) at time ``t`` (s)."""
        return self.values[self.index(t)]


class FrictionScaling:
    """MF2002 friction scaling of the set's PAC2002 tire: ``p_dx1``, ``p_dy1`` x ``mu_road / p_dx1_nominal``."""

    def __init__(self, tire: Any) -> None:
        self.tire = tire
        self.p_dx1 = float(tire.p_dx1)
        self.p_dy1 = float(tire.p_dy1)
        self.mu_road = math.nan

    def set(self, mu_road: float) -> None:
        """Scale the (shared) tire parameters in place for a road of peak friction ``mu_road``."""
        if mu_road != self.mu_road:
            lam = mu_road / self.p_dx1
            self.tire.p_dx1 = lam * self.p_dx1
            self.tire.p_dy1 = lam * self.p_dy1
            self.mu_road = mu_road


def longitudinal_peak(tire: Any, fz: float, gamma: float = 0.0) -> float:
    """Peak over slip of the pure-longitudinal PAC2002 Fx(kappa)/Fz (traction side) at load ``fz`` (N) and
    camber ``gamma`` (rad), with the tire's current parameters: a grid over kappa in [0, 0.6], then a bounded
    scalar search around the best grid point (``formula_longitudinal`` of vehiclemodels, whose kappa = -s)."""
    from scipy.optimize import minimize_scalar
    from vehiclemodels.utils.tire_model import formula_longitudinal

    if fz <= 1.0:
        return math.nan
    grid = np.linspace(0.0, 0.6, 61)
    vals = [formula_longitudinal(-k, gamma, fz, tire) / fz for k in grid]
    i = int(np.argmax(vals))
    lo, hi = grid[max(i - 1, 0)], grid[min(i + 1, len(grid) - 1)]
    res = minimize_scalar(lambda k: -formula_longitudinal(-k, gamma, fz, tire) / fz, bounds=(lo, hi),
                          method="bounded", options={"xatol": 1e-6})
    return float(max(-res.fun, vals[i]))


# ------------------------------------------------------------------------------------------------ driver
@dataclass
class Programme:
    """Reference speed (m/s) and curvature (1/m) on the 10 ms grid, the speed's feed-forward acceleration."""

    t: np.ndarray
    v_ref: np.ndarray
    a_ff: np.ndarray
    kappa: np.ndarray
    stops: list[tuple[float, float]] = field(default_factory=list)


def programme(duration: float, roads: Roads, seed: int, v0: float = 15.0) -> Programme:
    """The everyday drive (module doc): per road part a 20 s cycle of cruise, acceleration, lane change, braking,
    bend, small acceleration and braking; a stop-and-go at the start of the last part of a drive >= 100 s."""
    rng = np.random.default_rng(seed + 7919)
    n = int(round(duration / DT)) + 1
    t = np.arange(n) * DT
    a_ff = np.zeros(n)
    kappa = np.zeros(n)
    stop_hold = np.zeros(n, dtype=bool)
    stops: list[tuple[float, float]] = []

    def put_accel(t0: float, t1: float, a: float) -> None:
        a_ff[(t >= t0) & (t < t1)] = a

    def put_lane_change(t0: float, T: float, A: float, v: float) -> None:
        m = (t >= t0) & (t < t0 + T)
        tau = (t[m] - t0) / T
        kappa[m] += A * 2.0 * math.pi / T ** 2 * np.sin(2.0 * math.pi * tau) / max(v, 5.0) ** 2

    def put_bend(t0: float, ramp: float, hold: float, k: float) -> None:
        knots = [t0, t0 + ramp, t0 + ramp + hold, t0 + 2 * ramp + hold]
        kappa[:] += k * np.interp(t, knots, [0.0, 1.0, 1.0, 0.0], left=0.0, right=0.0)

    part = duration / len(roads.values)
    for j, mu in enumerate(roads.values):
        start, end = j * part, (j + 1) * part
        gentle = 0.4 + 0.6 * min(mu, 1.0)
        c = start
        if j == len(roads.values) - 1 and duration >= 100.0 and end - start >= 30.0:
            a_stop = 1.5 * gentle
            t_brake = v0 / a_stop
            put_accel(c + 1.0, c + 1.0 + t_brake, -a_stop)
            stops.append((c + 1.0 + t_brake, c + 4.0 + t_brake))
            stop_hold[(t >= c + 1.0 + t_brake) & (t < c + 4.0 + t_brake)] = True
            put_accel(c + 4.0 + t_brake, c + 4.0 + 2 * t_brake, a_stop)
            c += 5.0 + 2 * t_brake
        while c + 20.0 <= end + 1e-9:
            s = rng.uniform(0.85, 1.15, size=6)
            a = 1.5 * gentle * s[0]
            put_accel(c + 2.0, c + 5.0, a)                                  # accelerate 3 s
            put_lane_change(c + 5.5, 4.5 * s[1], 3.5 * (1 if rng.random() < 0.5 else -1), v0 + 3 * a)
            put_accel(c + 10.0, c + 13.0, -a * s[2])                        # brake 3 s
            put_bend(c + 12.5, 1.5, 3.0, (1 if rng.random() < 0.5 else -1) / (200.0 * s[3]))
            put_accel(c + 14.5, c + 16.5, 0.8 * a * s[4])                   # small acceleration
            put_accel(c + 17.0, c + 19.0, -(3.0 * a * (1 - s[2]) + 1.6 * a * s[4]) / 2.0)  # back to v0
            c += 20.0
    v_ref = v0 + np.concatenate(([0.0], np.cumsum(a_ff[:-1]) * DT))
    v_ref = np.maximum(v_ref, 0.0)
    v_ref[stop_hold] = 0.0
    return Programme(t=t, v_ref=v_ref, a_ff=a_ff, kappa=kappa, stops=stops)


# --------------------------------------------------------------------------------------------- the drive
@dataclass
class DriveResult:
    """Records (``(topic, record)`` in time order) and a summary of the drive."""

    records: list[tuple[str, Any]]
    summary: dict[str, Any]


def _wheel_geometry(x: Sequence[float], p: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(Fz, wheel longitudinal speed u_w, slip angle, camber) of FL, FR, RL, RR as vehicle_dynamics_mb computes
    them (N, m/s, rad, rad)."""
    c13, s13, c18, s18 = math.cos(x[13]), math.sin(x[13]), math.cos(x[18]), math.sin(x[18])
    fz = np.array([(x[16] + p.R_w * (c13 - 1) - 0.5 * p.T_f * s13) * p.K_zt,
                   (x[16] + p.R_w * (c13 - 1) + 0.5 * p.T_f * s13) * p.K_zt,
                   (x[21] + p.R_w * (c18 - 1) - 0.5 * p.T_r * s18) * p.K_zt,
                   (x[21] + p.R_w * (c18 - 1) + 0.5 * p.T_r * s18) * p.K_zt])
    d = x[2]
    uw = np.array([(x[3] + 0.5 * p.T_f * x[5]) * math.cos(d) + (x[10] + p.a * x[5]) * math.sin(d),
                   (x[3] - 0.5 * p.T_f * x[5]) * math.cos(d) + (x[10] + p.a * x[5]) * math.sin(d),
                   x[3] + 0.5 * p.T_r * x[5], x[3] - 0.5 * p.T_r * x[5]])
    uw = np.maximum(uw, 0.0)
    if abs(x[3]) < KINEMATIC_SPEED:
        alpha = np.zeros(4)
    else:
        vf = x[10] + p.a * x[5] - x[14] * (p.R_w - x[16])
        vr = x[10] - p.b * x[5] - x[19] * (p.R_w - x[21])
        alpha = np.array([math.atan(vf / (x[3] + 0.5 * p.T_f * x[5])) - d,
                          math.atan(vf / (x[3] - 0.5 * p.T_f * x[5])) - d,
                          math.atan(vr / (x[3] + 0.5 * p.T_r * x[5])), math.atan(vr / (x[3] - 0.5 * p.T_r * x[5]))])
    zs = [(p.h_s - p.R_w + x[16] - x[11]) / math.cos(x[6]) - p.h_s + p.R_w + p.a * x[8] + 0.5 * (x[6] - x[13]) * p.T_f,
          (p.h_s - p.R_w + x[16] - x[11]) / math.cos(x[6]) - p.h_s + p.R_w + p.a * x[8] - 0.5 * (x[6] - x[13]) * p.T_f,
          (p.h_s - p.R_w + x[21] - x[11]) / math.cos(x[6]) - p.h_s + p.R_w - p.b * x[8] + 0.5 * (x[6] - x[18]) * p.T_r,
          (p.h_s - p.R_w + x[21] - x[11]) / math.cos(x[6]) - p.h_s + p.R_w - p.b * x[8] - 0.5 * (x[6] - x[18]) * p.T_r]
    gamma = np.array([x[6] + p.D_f * zs[0] + p.E_f * zs[0] ** 2, x[6] - p.D_f * zs[1] - p.E_f * zs[1] ** 2,
                      x[6] + p.D_r * zs[2] + p.E_r * zs[2] ** 2, x[6] - p.D_r * zs[3] - p.E_r * zs[3] ** 2])
    return fz, uw, alpha, gamma


def wheel_torques(p: Any, accel: float) -> np.ndarray:
    """Net torque on FL, FR, RL, RR (N m) that vehicle_dynamics_mb applies for the (constrained) acceleration
    input ``accel`` (m/s^2): drive ``T_E = m R_w a`` (a > 0) split by T_se, brake ``T_B = m R_w a`` (a < 0) by T_sb."""
    te, tb = (p.m * p.R_w * accel, 0.0) if accel > 0 else (0.0, p.m * p.R_w * accel)
    front = 0.5 * p.T_sb * tb + 0.5 * p.T_se * te
    rear = 0.5 * (1 - p.T_sb) * tb + 0.5 * (1 - p.T_se) * te
    return np.array([front, front, rear, rear])


class ToothEncoder:
    """Wheel-speed sensor of ``teeth`` teeth per revolution read by edge timing (as an ABS controller does):
    the speed at a sample is the mean over the tooth edges of the last sample period, (edges - 1) x 2 pi / teeth
    over the time between the first and the last (edge times on a 1 us capture timer); with fewer than two edges
    in the period, one tooth pitch over the last two edges' spacing; 0 after 0.5 s without an edge. The wheel
    angle is integrated from the spin rates at the samples (trapezoid), edge times interpolated in between."""

    def __init__(self, teeth: int, n_wheels: int = 4) -> None:
        self.pitch = 2.0 * math.pi / teeth          # rad per tooth
        self.angle = np.zeros(n_wheels)             # rad
        self.edges: list[list[float]] = [[] for _ in range(n_wheels)]
        self.t: float | None = None
        self.omega: np.ndarray | None = None

    def measure(self, t: float, omega: np.ndarray) -> np.ndarray:
        """The sensor's spin rates (rad/s) at time ``t`` (s) for true spin rates ``omega`` (rad/s)."""
        if self.t is not None:
            dt = t - self.t
            new = self.angle + 0.5 * (self.omega + omega) * dt
            for i in range(len(new)):
                first, last = math.floor(self.angle[i] / self.pitch) + 1, math.floor(new[i] / self.pitch)
                span = new[i] - self.angle[i]
                for j in range(first, last + 1):
                    te = self.t + (j * self.pitch - self.angle[i]) / span * dt
                    self.edges[i].append(round(te * 1e6) / 1e6)
                del self.edges[i][:-64]
            self.angle = new
            period = dt
        else:
            period = DT
        self.t, self.omega = t, omega.copy()
        out = np.zeros(len(omega))
        for i, e in enumerate(self.edges[i] for i in range(len(omega))):
            recent = [x for x in e if x > t - period]
            if len(recent) >= 2 and recent[-1] > recent[0]:
                out[i] = (len(recent) - 1) * self.pitch / (recent[-1] - recent[0])
            elif len(e) >= 2 and t - e[-1] < 0.5 and e[-1] > e[-2]:
                out[i] = self.pitch / (e[-1] - e[-2])
        return out


def simulate_drive(set_id: int, seed: int = 0, duration: float = 160.0,
                   roads: Sequence[float] = DEFAULT_ROADS, progress: bool = False,
                   encoder_teeth: int = 0) -> DriveResult:
    """Drive CommonRoad parameter set ``set_id`` for ``duration`` s on ``roads`` (module doc); the records of
    the production sensors and the ground truth, in time order. ``encoder_teeth`` > 0: wheel speeds from a
    toothed wheel read by edge timing (:class:`ToothEncoder`) instead of the spin rates themselves."""
    from scipy.integrate import solve_ivp
    from vehiclemodels.init_mb import init_mb
    from vehiclemodels.utils.acceleration_constraints import acceleration_constraints
    from vehiclemodels.vehicle_dynamics_mb import vehicle_dynamics_mb

    from vehcal_ros.records import Controls, GnssVelocity, GroundTruth, ImuSample, OdomSample, WheelSpeeds

    if duration < 5.0:
        raise ValueError(f"--duration {duration}: expected at least 5 s")
    if not roads or not all(0.05 <= float(m) <= 1.5 for m in roads):
        raise ValueError(f"--roads {list(roads)}: expected values in [0.05, 1.5]")
    if encoder_teeth < 0:
        raise ValueError(f"--encoder-teeth {encoder_teeth}: expected 0 (off) or a tooth count")
    encoder = ToothEncoder(encoder_teeth) if encoder_teeth else None
    p = load_parameters(set_id)
    ratio = spec_steering_ratio(set_id)
    road = Roads(tuple(float(m) for m in roads), float(duration))
    friction = FrictionScaling(p.tire)
    prog = programme(duration, road, seed)
    rng = np.random.default_rng(seed)
    gnss_rng = np.random.default_rng([seed, GNSS_STREAM])   # its own stream: the other sensors' noise unchanged
    gnss_pending: list[tuple[int, Any]] = []                 # (release step, record): the receiver's latency
    L = p.a + p.b
    x = np.array(init_mb([0.0, 0.0, 0.0, float(prog.v_ref[0]), 0.0, 0.0, 0.0], p), dtype=float)
    records: list[tuple[str, Any]] = []
    used = []            # |Fx/Fz| of each wheel at each truth sample
    n_steps = len(prog.t) - 1
    wall0 = time.perf_counter()
    max_speed_err = 0.0
    nfev = 0

    def rhs(_t: float, y: np.ndarray, u: list[float]) -> list[float]:
        f = vehicle_dynamics_mb(list(y), u, p)
        if abs(y[3]) < KINEMATIC_SPEED:                  # kinematic branch: the wheels roll with the car
            f[23:27] = [f[3] / p.R_w] * 4
        return f

    for k in range(n_steps + 1):
        tk = float(prog.t[k])
        friction.set(road.mu(tk))
        v = float(x[3])
        # --- driver: speed and curvature controllers (inputs held for the next 10 ms)
        if prog.v_ref[k] <= 0.0 and v < 1.0:             # stopping / standing: no reversing
            a_cmd = -max(0.8 * v, 0.3) if v > 0.005 else 0.0
        else:
            a_cmd = float(np.clip(prog.a_ff[k] + 0.8 * (prog.v_ref[k] - v), -3.0, 2.5))
        kap = float(prog.kappa[k])
        delta_cmd = L * kap + 0.05 * (kap * v - float(x[5]))
        steer_rate = float(np.clip((delta_cmd - x[2]) / 0.1, -0.4, 0.4))
        u = [steer_rate, a_cmd]
        a_applied = acceleration_constraints(v, a_cmd, p.longitudinal)
        max_speed_err = max(max_speed_err, abs(prog.v_ref[k] - v)) if tk > 1.0 else max_speed_err
        # --- sensors at tk (state x, inputs u)
        f = np.asarray(vehicle_dynamics_mb(list(x), u, p), dtype=float)
        torque = wheel_torques(p, a_applied)
        omega = x[23:27].copy()
        noise = rng.standard_normal(16)
        omega_sensor = encoder.measure(tk, omega) if encoder is not None else omega
        records.append(("/vehicle/wheel_speeds", WheelSpeeds(
            t=tk, omega=omega_sensor + 0.005 * noise[0:4], torque=torque * (1.0 + 0.02 * noise[4:8]))))
        # the model is written in SAE axes (x forward, y RIGHT, z down: its "left" wheel sits at y = -T/2 and
        # speeds up in a bend with positive yaw rate, i.e. a right turn); ROS (x forward, y left, z up) flips y
        # and z: lateral velocity, yaw angle and rate, lateral acceleration, pitch and the steering angle change
        # sign, roll (about the shared x axis) does not
        roll, pitch = float(x[6]), -float(x[8])
        ax_body = f[3] - x[5] * x[10] if abs(v) >= KINEMATIC_SPEED else f[3]
        ay_body = -(f[10] + x[5] * x[3])                 # ROS lateral acceleration of the sprung body
        ax_imu = ax_body - G * math.sin(pitch)
        ay_imu = ay_body + G * math.sin(roll) * math.cos(pitch)
        az_imu = G * math.cos(roll) * math.cos(pitch) - f[12]   # the model's z points down
        records.append(("/vehicle/imu", ImuSample(
            t=tk, roll=roll, roll_rate=float(x[7]) + 0.002 * noise[8], yaw_rate=-float(x[5]) + 0.002 * noise[9],
            ax=ax_imu + 0.05 * noise[10], ay=ay_imu + 0.05 * noise[11], az=az_imu + 0.05 * noise[12],
            pitch=pitch, yaw=-float(x[4]), pitch_rate=-float(x[9]))))
        records.append(("/vehicle/odom", OdomSample(
            t=tk, u=v + 0.05 * noise[13], v=-float(x[10]) + 0.05 * noise[14], yaw_rate=-float(x[5]),
            x=float(x[0]), y=-float(x[1]), yaw=-float(x[4]))))
        records.append(("/vehicle/controls", Controls(
            t=tk, throttle=float(np.clip(a_applied / THROTTLE_FULL, 0.0, 1.0)),
            brake=float(np.clip(-a_applied / G, 0.0, 1.0)), steering=-float(x[2]) * ratio)))
        if k % GNSS_EVERY == 0:   # ENU velocity of the car (ROS yaw -x[4], lateral speed -x[10])
            yaw, vy = -float(x[4]), -float(x[10])
            ve = v * math.cos(yaw) - vy * math.sin(yaw) + GNSS_STD * gnss_rng.standard_normal()
            vn = v * math.sin(yaw) + vy * math.cos(yaw) + GNSS_STD * gnss_rng.standard_normal()
            gnss_pending.append((k + GNSS_LATENCY_STEPS, GnssVelocity(t=tk, ve=ve, vn=vn, std=GNSS_STD)))
        while gnss_pending and gnss_pending[0][0] <= k:
            records.append(("/vehicle/gnss/vel", gnss_pending.pop(0)[1]))
        if k % TRUTH_EVERY == 0:
            fz, uw, alpha, gamma = _wheel_geometry(x, p)
            fx = (torque - p.I_y_w * f[23:27]) / p.R_w
            roll_speed = p.R_w * omega
            den = np.maximum(np.maximum(roll_speed, uw), 1e-6)
            slip = np.where(np.maximum(roll_speed, uw) > 0.1, (roll_speed - uw) / den, 0.0)
            mu_max = np.array([longitudinal_peak(p.tire, float(fz[i]), float(gamma[i])) for i in range(4)])
            mu_road = np.full(4, friction.mu_road)
            records.append(("/vehicle/ground_truth", GroundTruth(
                t=tk, mu_road=mu_road, slip=slip, slip_angle=-alpha, mu_max=mu_max, fx=fx, fz=fz)))
            if v > 3.0:
                used.append(np.abs(fx / fz))
        if k == n_steps:
            break
        # --- integrate 10 ms with the inputs held
        sol = solve_ivp(rhs, (tk, tk + DT), x, method="LSODA", args=(u,), rtol=1e-6, atol=1e-8)
        if not sol.success or not np.all(np.isfinite(sol.y[:, -1])):
            raise RuntimeError(f"set {set_id}: integration failed at t = {tk:.2f} s ({sol.message})")
        nfev += sol.nfev
        x = sol.y[:, -1].copy()
        x[23:27] = np.maximum(x[23:27], 0.0)            # the model forbids negative wheel spin
        if x[3] < 0.0:                                   # the car does not reverse
            x[3] = 0.0
        if progress and k % 2000 == 0:
            print(f"  t {tk:6.1f} s  v {v:5.2f} m/s  mu_road {friction.mu_road:.2f}  "
                  f"wall {time.perf_counter() - wall0:5.1f} s", file=sys.stderr)
    used_arr = np.array(used) if used else np.zeros((0, 4))
    summary = {
        "set": set_id, "layout": drive_layout(p), "T_se": float(p.T_se), "T_sb": float(p.T_sb),
        "duration_s": duration, "roads": list(road.values), "seed": seed, "steering_ratio": ratio,
        "encoder_teeth": encoder_teeth,
        "friction_scaling": {"p_dx1_nominal": friction.p_dx1, "p_dy1_nominal": friction.p_dy1},
        "stops": prog.stops, "wall_s": round(time.perf_counter() - wall0, 1), "rhs_evaluations": nfev,
        "max_speed_error_m_s": round(max_speed_err, 3),
        "mu_used_abs_fx_over_fz": {
            "p50": np.round(np.percentile(used_arr, 50, axis=0), 3).tolist() if used else [],
            "p95": np.round(np.percentile(used_arr, 95, axis=0), 3).tolist() if used else [],
            "max": np.round(used_arr.max(axis=0), 3).tolist() if used else [],
            "fraction_below_0.3": np.round((used_arr < 0.3).mean(axis=0), 3).tolist() if used else []},
    }
    return DriveResult(records=records, summary=_plain(summary))


def _plain(value: Any) -> Any:
    """``value`` with numpy scalars as floats and tuples as lists (for YAML / JSON)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def write_drive_bag(path: str | Path, result: DriveResult) -> dict[str, int]:
    """Write the drive's records to a new mcap bag at ``path``; message counts per topic."""
    from vehcal_ros.io.bags import write_bag

    return write_bag(path, result.records, storage="mcap")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--set", type=int, choices=sorted(SETS), required=True, help="CommonRoad parameter set")
    ap.add_argument("--seed", type=int, default=0, help="programme amplitudes and sensor noise")
    ap.add_argument("--out", required=True, metavar="BAG", help="new bag directory (mcap)")
    ap.add_argument("--duration", type=float, default=160.0, metavar="S", help="drive length, s (default 160)")
    ap.add_argument("--roads", default=",".join(map(str, DEFAULT_ROADS)), metavar="MU,MU,...",
                    help="road friction in equal consecutive parts of the drive (default 1.0,0.6,0.35,1.0)")
    ap.add_argument("--encoder-teeth", type=int, default=0, metavar="N",
                    help="wheel speeds from an N-tooth wheel read by edge timing (e.g. 48; default 0: the spin rates)")
    ap.add_argument("--quiet", action="store_true", help="no progress on stderr")
    args = ap.parse_args(argv)
    if not vehiclemodels_available():
        print("commonroad_drive: the CommonRoad vehicle models are not installed "
              "(pip install -r requirements-test.txt)", file=sys.stderr)
        return 2
    try:
        roads = [float(r) for r in args.roads.split(",") if r.strip()]
    except ValueError:
        print(f"commonroad_drive: --roads {args.roads!r}: expected comma-separated numbers", file=sys.stderr)
        return 2
    if Path(args.out).exists():
        print(f"commonroad_drive: {args.out} exists; give a new bag path", file=sys.stderr)
        return 2
    try:
        result = simulate_drive(args.set, args.seed, args.duration, roads, progress=not args.quiet,
                                encoder_teeth=args.encoder_teeth)
    except ValueError as exc:
        print(f"commonroad_drive: {exc}", file=sys.stderr)
        return 2
    counts = write_drive_bag(args.out, result)
    print(yaml.safe_dump({**result.summary, "bag": str(args.out), "messages": counts}, sort_keys=False,
                         default_flow_style=None, width=120), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
