"""The vehicle's speed over ground from GNSS velocity and the IMU: the slip ratio's independent speed reference.

The slip ratio s = (omega R - v) / max(omega R, v) compares the wheel's rolling speed with the speed of the wheel
centre over the ground. That speed must come from something a production vehicle has and that the wheels do not
drive: an automated vehicle's GNSS receiver (Doppler velocity, ~0.05 m/s per axis at 10 Hz, ~0.1 s late) and its
IMU. This module fuses the two with the standard loosely coupled GNSS/INS velocity filter along the body's
x axis (e.g. Groves, *Principles of GNSS, Inertial, and Multisensor Integrated Navigation Systems*, 2nd ed.,
ch. 14; Gustafsson, *Statistical Sensor Fusion*, ch. 8):

    state   x = (u, b)                  u: longitudinal speed (m/s), b: accelerometer offset (m/s^2)
    process u_k = u_{k-1} + (a_k - b_{k-1}) dt_k + w_u,   Var(w_u) = (sigma_a dt_k)^2
            b_k = b_{k-1} + w_b,                           Var(w_b) = q_b dt_k
    measure z = sqrt(|v_gnss|^2 - v^2) = u + e,            Var(e) = sigma_gnss^2

a is the body's longitudinal acceleration from the IMU, a = f_x + g sin(theta) + r v: the specific force f_x
(sensor_msgs/Imu linear_acceleration.x) less gravity along the body's x axis, with theta the IMU orientation's
pitch (REP-103: positive nose down; it holds the road grade and the body's pitch), plus the centripetal term.
The lateral speed at the centre of mass is the kinematic one, v = r l_r (no slip angle at the rear axle,
``rear_distance`` l_r from the description), with r the IMU's yaw rate. The offset b holds what remains: the
accelerometer's bias, a mounting misalignment (1 deg of pitch is 0.17 m/s^2) and the pitch's error. It drifts as a
random walk of ``bias_walk`` (m/s^2 per sqrt(s)). With ``use_pitch`` False (an IMU without orientation) b also
holds the grade and the body's pitch, and ``bias_walk`` must be wide enough to follow them (a 5 % grade that
starts over 10 s changes b by 0.5 m/s^2 in 10 s).

The GNSS velocity refers to its header stamp t_g, but arrives ~0.1 s later: the filter keeps the IMU steps of the
last ``history`` seconds, rewinds to t_g, applies the update there and propagates forward again (the exact
answer of a linear filter with a delayed measurement). An estimate at time t is released only once a GNSS stamp
>= t has been applied, so every released speed has seen the GNSS data up to its time (a lag of the GNSS latency
plus one GNSS period, ~0.2 s). Each released sample carries its variance P_uu (m/s)^2.

A two-wheel-drive car, with GNSS or without, has the classic reference of slip-based friction estimation too
(Gustafsson, "Slip-based tire-road friction estimation", Automatica 33(6), 1997; the ABS reference speed): its
undriven wheels, which roll freely while the driver does not brake. :func:`undriven_axle_speed` turns their rolling
speeds omega_i R_i into u for the driven wheels' slips. The undriven wheels' radius law is the driven wheels', so a
radius error common to the tires (wear, pressure, a description off by 1 %) cancels in those slips; the undriven
wheels' own slips need GNSS (estimation/grip/friction_samples.py).

Plain floats and preallocated lists; no numpy per sample, no rclpy.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from vehcal_ros.records import GnssVelocity, ImuSample

SPEED_REFERENCES = ("odometry", "gnss_imu", "undriven_wheels")
"""Where the slips' vehicle speed comes from: the odometry topic (its twist, as published), GNSS velocity fused
with the IMU (:class:`GnssImuSpeed`), or the undriven wheels of a two-wheel-drive car (:func:`undriven_axle_speed`)."""
SPEED_REFERENCE_CHOICES = ("auto", *SPEED_REFERENCES)
"""What the ``speed_reference`` parameter takes: ``auto`` is :func:`resolve_speed_reference`'s choice."""


def resolve_speed_reference(choice: str, driven: tuple[bool, bool]) -> str:
    """The speed reference of ``choice`` for a vehicle whose (front, rear) axles are ``driven``: ``auto`` is
    ``undriven_wheels`` where an axle is undriven (its driven wheels' slips then carry the free-rolling wheels'
    small white error instead of the GNSS/IMU filter's persistent one; benchmarks/README_grip_over_time.md) and
    ``gnss_imu`` on an all-wheel-drive vehicle; any other choice stands."""
    if choice != "auto":
        return choice
    return "gnss_imu" if all(driven) else "undriven_wheels"


def undriven_axle_speed(rolling: Sequence[float], heading: Sequence[float], x: Sequence[float],
                        y: Sequence[float], r: float, v: float) -> float:
    """The body's longitudinal speed u (m/s) from free-rolling wheels: their rolling speeds omega_i R_i (m/s),
    headings (rad: steering and toe, + left), positions (x_i, y_i) from the centre of mass (m, y left), yaw rate
    r (rad/s) and lateral speed v (m/s). A free-rolling wheel's centre moves along its heading at omega_i R_i,

        omega_i R_i = (u - r y_i) cos(h_i) + (v + r x_i) sin(h_i),

    so each wheel gives u_i = (omega_i R_i - (v + r x_i) sin(h_i)) / cos(h_i) + r y_i, and u is their mean (on an
    unsteered axle the r y_i terms cancel between the left and right wheel)."""
    total = 0.0
    for w, h, xi, yi in zip(rolling, heading, x, y, strict=True):
        total += (w - (v + r * xi) * math.sin(h)) / math.cos(h) + r * yi
    return total / len(rolling)


@dataclass(frozen=True)
class SpeedReferenceConfig:
    """Settings of :class:`GnssImuSpeed` (SI units)."""

    accel_std: float = 0.05        #: m/s^2, white noise of one IMU a_x sample
    bias_walk: float = 0.01        #: m/s^2 per sqrt(s), random walk of the offset b
    use_pitch: bool = True         #: remove gravity along x with the IMU's pitch (False: b carries it)
    gravity: float = 9.81          #: m/s^2
    bias_prior_std: float = 0.5    #: m/s^2, the offset's SD before any GNSS data
    gnss_std: float = 0.05         #: m/s per axis, used when a GNSS record reports no accuracy
    rear_distance: float = field(kw_only=True)  #: m, centre of mass to the rear axle (v = r l_r; the vehicle's)
    history: float = 1.0           #: s of IMU steps kept for delayed GNSS updates (must exceed the latency)
    max_step: float = 0.1          #: s; a larger gap between IMU samples, or a stamp this much older than the
    #: newest (the clock went back), restarts the filter
    min_speed: float = 0.5         #: m/s; slower GNSS fixes are skipped (their direction is noise)

    def validate(self) -> None:
        """Raise ValueError naming the field and its allowed range."""
        checks = [
            (0.0 <= self.accel_std <= 10.0, f"accel_std must be in [0, 10] m/s^2, got {self.accel_std}"),
            (0.0 < self.gravity <= 20.0, f"gravity must be in (0, 20] m/s^2, got {self.gravity}"),
            (0.0 < self.bias_walk <= 5.0, f"bias_walk must be in (0, 5] m/s^2/sqrt(s), got {self.bias_walk}"),
            (0.0 < self.bias_prior_std <= 10.0, f"bias_prior_std must be in (0, 10] m/s^2, got {self.bias_prior_std}"),
            (0.0 < self.gnss_std <= 5.0, f"gnss_std must be in (0, 5] m/s, got {self.gnss_std}"),
            (0.0 <= self.rear_distance <= 10.0, f"rear_distance must be in [0, 10] m, got {self.rear_distance}"),
            (0.2 <= self.history <= 10.0, f"history must be in [0.2, 10] s, got {self.history}"),
            (0.0 < self.max_step <= 1.0, f"max_step must be in (0, 1] s, got {self.max_step}"),
            (0.0 <= self.min_speed <= 10.0, f"min_speed must be in [0, 10] m/s, got {self.min_speed}"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)


@dataclass(frozen=True, slots=True)
class ReferenceSpeed:
    """One released estimate: body-frame speeds at the IMU stamp ``t`` (s)."""

    t: float
    u: float       #: m/s, longitudinal speed over ground
    v: float       #: m/s, lateral speed (kinematic, r l_r)
    r: float       #: rad/s, yaw rate (IMU)
    u_var: float   #: (m/s)^2, the filter's variance of u


class _Step:
    """One IMU step of the filter's history: its input and the state after it."""

    __slots__ = ("t", "a", "r", "u", "b", "puu", "pub", "pbb")

    def __init__(self, t: float, a: float, r: float) -> None:
        self.t, self.a, self.r = t, a, r
        self.u = self.b = self.puu = self.pub = self.pbb = math.nan


class GnssImuSpeed:
    """Longitudinal speed over ground from IMU a_x and delayed GNSS velocity (module docstring)."""

    def __init__(self, config: SpeedReferenceConfig) -> None:
        self.config = config
        self.config.validate()
        self._steps: deque[_Step] = deque()
        self._released_t = -math.inf    # newest stamp released
        self._gnss_t = -math.inf        # newest GNSS stamp applied
        self.initialised = False
        self.counters = {"gnss_used": 0, "gnss_late": 0, "gnss_slow": 0, "gnss_nonfinite": 0,
                         "imu_nonfinite": 0, "imu_out_of_order": 0, "restarts": 0}

    # ----------------------------------------------------------------- input
    def add_imu(self, rec: ImuSample) -> list[ReferenceSpeed]:
        """One IMU sample: propagate the state to its stamp. Returns the estimates released (none: an IMU
        sample alone never releases; GNSS does)."""
        c = self.config
        t, r = rec.t, rec.yaw_rate
        a = rec.ax + r * r * c.rear_distance
        if c.use_pitch:
            a += c.gravity * math.sin(rec.pitch)
        if not (math.isfinite(t) and math.isfinite(a) and math.isfinite(r)):
            self.counters["imu_nonfinite"] += 1
            return []
        steps = self._steps
        if steps:
            last = steps[-1].t
            if t < last - c.max_step or t - last > c.max_step:   # the clock went back (a restarted simulator or
                self.restart()                                   # bag: a new time base), or a gap in the IMU
            elif t <= last:
                self.counters["imu_out_of_order"] += 1
                return []
        step = _Step(t, a, r)
        if steps and self.initialised:
            self._propagate(steps[-1], step)
        steps.append(step)
        while steps and t - steps[0].t > c.history:
            steps.popleft()
        return []

    def add_gnss(self, rec: GnssVelocity) -> list[ReferenceSpeed]:
        """One GNSS velocity at its header stamp: update the state there, propagate to the newest IMU step and
        release the estimates up to the GNSS stamp."""
        c = self.config
        t = rec.t
        if not (math.isfinite(t) and math.isfinite(rec.ve) and math.isfinite(rec.vn)):
            self.counters["gnss_nonfinite"] += 1
            return []
        steps = self._steps
        if not steps or t < steps[0].t or t <= self._gnss_t:
            self.counters["gnss_late"] += 1
            return []
        speed = rec.speed
        if speed < c.min_speed:
            self.counters["gnss_slow"] += 1
            return []
        i = self._index_at(t)   # steps[i].t <= t < steps[i + 1].t (or i the newest)
        v = steps[i].r * c.rear_distance
        z = math.sqrt(max(speed * speed - v * v, 0.0))
        sd = rec.std if rec.std > 0.0 else c.gnss_std
        if not self.initialised:
            self._initialise(i, t, z, sd * sd)
        else:
            self._update(i, t, z, sd * sd)
        self.counters["gnss_used"] += 1
        self._gnss_t = t
        return self._release(t)

    def restart(self) -> None:
        """Forget the state (a gap in the IMU, or the clock went back)."""
        self._steps.clear()
        self._released_t = -math.inf
        self._gnss_t = -math.inf
        self.initialised = False
        self.counters["restarts"] += 1

    @property
    def offset(self) -> tuple[float, float] | None:
        """(b, SD of b) of the newest step, m/s^2: the learnt accelerometer offset; None before the first fix."""
        if not self.initialised or not self._steps:
            return None
        s = self._steps[-1]
        return (s.b, math.sqrt(max(s.pbb, 0.0))) if math.isfinite(s.b) else None

    # -------------------------------------------------------------- filter
    def _index_at(self, t: float) -> int:
        steps = self._steps
        lo, hi = 0, len(steps) - 1
        while lo < hi:   # the last step with stamp <= t
            mid = (lo + hi + 1) // 2
            if steps[mid].t <= t:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def _propagate(self, prev: _Step, step: _Step) -> None:
        """Time update from ``prev`` to ``step`` with the step's acceleration (module docstring)."""
        c = self.config
        dt = step.t - prev.t
        step.u = prev.u + (step.a - prev.b) * dt
        step.b = prev.b
        # P' = F P F^T + Q, F = [[1, -dt], [0, 1]]
        step.puu = prev.puu - 2.0 * dt * prev.pub + dt * dt * prev.pbb + (c.accel_std * dt) ** 2
        step.pub = prev.pub - dt * prev.pbb
        step.pbb = prev.pbb + c.bias_walk * c.bias_walk * dt

    def _initialise(self, i: int, t: float, z: float, r: float) -> None:
        """Start the state at the first GNSS fix: u = z at step i (the stamps are within one IMU period)."""
        steps = self._steps
        s = steps[i]
        s.u, s.b = z, 0.0
        s.puu, s.pub, s.pbb = r, 0.0, self.config.bias_prior_std ** 2
        for k in range(i + 1, len(steps)):
            self._propagate(steps[k - 1], steps[k])
        for k in range(i):
            steps[k].u = math.nan   # before the first fix: nothing to release
        self._released_t = steps[i].t - 1e-9
        self.initialised = True

    def _update(self, i: int, t: float, z: float, r: float) -> None:
        """Measurement update at stamp t between steps i and i+1, then propagate the later steps again."""
        steps = self._steps
        s = steps[i]
        if math.isnan(s.u):
            self._initialise(i, t, z, r)
            return
        # the state at t: part of the next step's acceleration
        nxt = steps[i + 1] if i + 1 < len(steps) else None
        frac_dt = t - s.t
        a_next = nxt.a if nxt is not None else s.a
        u = s.u + (a_next - s.b) * frac_dt
        puu = s.puu - 2.0 * frac_dt * s.pub + frac_dt * frac_dt * s.pbb
        pub = s.pub - frac_dt * s.pbb
        pbb = s.pbb
        innov_var = puu + r
        ku, kb = puu / innov_var, pub / innov_var
        innov = z - u
        u, b = u + ku * innov, s.b + kb * innov
        puu, pub, pbb = (1.0 - ku) * puu, (1.0 - ku) * pub, pbb - kb * pub
        # back to the step's stamp (the update moved the state at t; carry it to s.t by the inverse drift)
        s.u = u - (a_next - b) * frac_dt
        s.b = b
        s.puu, s.pub, s.pbb = puu, pub, pbb
        for k in range(i + 1, len(steps)):
            self._propagate(steps[k - 1], steps[k])

    def _release(self, t_gnss: float) -> list[ReferenceSpeed]:
        """The estimates at IMU stamps in (last released, t_gnss]."""
        out: list[ReferenceSpeed] = []
        lr = self.config.rear_distance
        for s in self._steps:
            if s.t <= self._released_t or math.isnan(s.u):
                continue
            if s.t > t_gnss:
                break
            out.append(ReferenceSpeed(s.t, s.u, s.r * lr, s.r, max(s.puu, 0.0)))
        if out:
            self._released_t = out[-1].t
        return out
