"""Sensor models of the simulated vehicle: rate, white noise, constant bias and latency per sensor.

The 14-DOF simulator's ``outputs()`` are turned into the neutral records of ``vehcal_ros/records.py`` (the
records a real vehicle's drivers would give after conversion). Each sensor samples at its own rate on the
simulation step grid; the record's stamp is the measurement time, and the record is released (published,
written to a bag) ``latency`` seconds later. Noise is zero-mean Gaussian with a per-channel standard deviation,
drawn from a per-sensor ``numpy.random.Generator`` seeded from ``(seed, sensor index)``, so enabling one sensor
never changes another sensor's noise. Noise levels of the 8-DOF paper (Section 3.1): u 0.1 m/s, wheel speeds
1 rad/s, v 0.05 m/s, yaw rate 0.02 rad/s, roll 0.005 rad, roll rate 0.002 rad/s.

The ``gnss`` sensor is a receiver's Doppler velocity in the world ENU frame (x east, y north, z up; the
simulator's world x, y and its yaw from x are taken as east, north and the ENU heading): 10 Hz, 0.05 m/s white
noise per axis and 0.1 s between the measurement and the message by default (``DEFAULT_SENSORS``), the typical
figures of a single-frequency receiver. The antenna is taken at the body's reference point (no lever arm).

The ``gnss_fix`` sensor is the same receiver's position (sensor_msgs/NavSatFix): the body's reference point
(x, y, z) of the simulator's world frame taken as (east, north, up) of the local ENU frame at the scenario's
geographic ``origin`` (WGS-84 latitude, longitude in degrees, ellipsoidal height in m; ``DEFAULT_ORIGIN``), plus
white noise per axis, converted to latitude, longitude and height (models/geodesy.py). Defaults: 10 Hz, 1.5 m
per horizontal axis and 3 m vertical standard deviation, 0.1 s latency: a single-frequency receiver without
corrections. The error is white (independent from fix to fix) unless the ``drift_std`` fault below adds the
slowly varying part a real receiver's error has (multipath, atmosphere: correlated over tens of seconds). On a
graded road the position is the road frame's (x along the road), not the level frame's. Its noise comes from its
own stream (sensor index 8), so adding it changed no other sensor's numbers.

Sensor faults (all off by default; a scenario without them gives bit-identical records). Each is a field of
``SensorSpec``:

* ``torque_scale`` (wheel_speeds): the wheel torque in ``JointState.effort`` is ``scale x true + bias + noise``
  (a mis-scaled ECU torque estimate; an additive torque offset is the existing ``bias: {torque: N m}``).
* ``quantisation_teeth`` / ``quantisation_window`` (wheel_speeds): an encoder wheel of N teeth whose edges are
  counted over a window T (default: one sampling period). Model: each wheel's angle theta is the trapezoidal
  integral of the true spin rate between samples (a random initial phase per wheel from its own stream); the
  edge count ``c = floor(theta N / 2 pi)``; the reported rate is ``(c(t) - c(t - T)) 2 pi / (N T)`` — steps of
  ``2 pi / (N T)`` rad/s (48 teeth over 10 ms: 13.09 rad/s), unbiased over time because no edge is lost between
  windows. The configured ``omega`` bias and noise are added after the encoder.
* ``misalignment_deg`` (imu): the IMU's axes are rotated from the body's by ``Rz(yaw) Ry(pitch) Rx(roll)``
  (degrees, given as [roll, pitch, yaw]); the rates and accelerations are the body vectors in the sensor axes
  (``R^T v``) and the attitude is the sensor frame's (``R_world_body R``), before bias and noise.
* ``stamp_latency`` / ``stamp_jitter`` (any sensor): the record's stamp runs late of its data by
  ``stamp_latency`` plus a jitter uniform in ``[-stamp_jitter, +stamp_jitter]`` s (a driver that stamps on
  arrival); the record is released no earlier than its stamp. The jitter comes from its own stream.
* An accelerometer bias is the existing ``bias: {ax: .., ay: ..}`` (m/s^2, in the sensor axes).
* ``drift_std`` / ``drift_tau`` (gnss_fix): a slowly varying position error per channel (east, north, up), a
  first-order Gauss-Markov process of stationary standard deviation ``drift_std`` (m) and correlation time
  ``drift_tau`` (s): ``b_k = phi b_(k-1) + sqrt(1 - phi^2) drift_std w_k``, ``phi = exp(-T / drift_tau)`` over the
  sampling period T, w_k standard normal, b_0 drawn from the stationary distribution; added before the white
  noise. The reported standard deviations (``std_h``, ``std_v``) then include it (root sum of squares). Its draws
  come from their own stream.

A production car's torque signals (both sensors off by default; the wheel speeds still carry each wheel's net
torque unless ``report_torque`` is false):

* ``drive_torque``: the CAN drive torque as a DriveTorque record: the map engine's torque at the gearbox input
  and the engaged gear (a vehicle with an engine map; NaN otherwise), and each axle's drive torque (the wheels'
  torque without the brakes'), with white noise per channel (``engine``, ``axle``, N m).
* ``brake_pressure``: the brake line pressure of each axle (two BrakePressure records), the brake pedal applied
  in the simulator's outputs (those of the wheel torques) times
  :data:`FULL_PEDAL_PRESSURE`, with white noise (``pressure``, Pa). A description's ``brakes.pressure_gain_*`` for
  the simulated vehicle is then its brake torque at full pedal over that pressure in bar.
* ``report_torque`` (wheel_speeds): false leaves ``JointState.effort`` empty, as on a car that reports no wheel
  torque.

No I/O and no rclpy here.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from vehcal_ros.models.geodesy import Geodetic, enu_to_geodetic
from vehcal_ros.records import (
    BrakePressure,
    Controls,
    DriveTorque,
    GnssFix,
    GnssVelocity,
    GroundTruth,
    ImuSample,
    OdomSample,
    Record,
    TireForce,
    WheelSpeeds,
)

SENSOR_CHANNELS: dict[str, tuple[str, ...]] = {
    "wheel_speeds": ("omega", "torque"),
    "imu": ("roll", "pitch", "yaw", "roll_rate", "pitch_rate", "yaw_rate", "ax", "ay", "az"),
    "tire_forces": ("fx", "fy", "fz"),
    "odom": ("u", "v", "yaw_rate", "x", "y", "yaw"),
    "controls": ("throttle", "brake", "steering"),
    "ground_truth": (),
    "clock": (),
    "gnss": ("ve", "vn", "vu"),
    "gnss_fix": ("east", "north", "up"),
    "drive_torque": ("engine", "axle"),
    "brake_pressure": ("pressure",),
}
"""Sensor name -> the channels that accept ``noise_std`` and ``bias`` (vector channels: each wheel alike).
``wheel_speeds.torque`` is the per-wheel net torque (drive minus brake, N m) in ``JointState.effort``, as an ECU
estimates it; its noise comes from its own random stream, so adding it never changes the wheel-speed noise."""

SENSOR_TOPICS: dict[str, str] = {
    "wheel_speeds": "/vehicle/wheel_speeds",
    "imu": "/vehicle/imu",
    "tire_forces": "/vehicle/tire_forces",
    "odom": "/vehicle/odom",
    "controls": "/vehicle/controls",
    "ground_truth": "/vehicle/ground_truth",
    "clock": "/clock",
    "gnss": "/vehicle/gnss/vel",
    "gnss_fix": "/vehicle/gnss/fix",
    "drive_torque": "/vehicle/drive_torque",
    "brake_pressure": "/vehicle/brake_pressure",
}
"""Sensor name -> canonical topic name (docs/nodes.md). Records travel with these names."""


@dataclass(frozen=True, slots=True)
class ClockTick:
    """``/clock`` (rosgraph_msgs/Clock): the simulation time, emitted like a sensor at the clock rate."""

    t: float


@dataclass(frozen=True)
class SensorSpec:
    """Settings of one sensor.

    rate: samples per second (Hz); the sampling period must be a whole number of simulation steps.
    noise_std: channel -> white-noise standard deviation (channel units: rad/s, m/s^2, N, m/s, rad, ...).
    bias: channel -> constant offset added to every sample (same units).
    latency: s between the measurement (the stamp) and its release (publication, bag log time).
    enabled: a disabled sensor produces nothing.
    Faults (module docstring; the defaults are none):
    torque_scale: wheel_speeds only, factor on the true wheel torque (1 = none).
    quantisation_teeth: wheel_speeds only, encoder teeth per revolution (0 = no quantisation).
    quantisation_window: s, the encoder's counting window (0 = one sampling period); a whole number of periods.
    misalignment_deg: imu only, (roll, pitch, yaw) of the sensor axes in the body axes, degrees.
    stamp_latency: s by which the stamp runs late of the data.
    stamp_jitter: s, half-width of the uniform jitter on the stamp.
    drift_std: gnss_fix only, channel -> stationary standard deviation of the Gauss-Markov position drift, m.
    drift_tau: gnss_fix only, s, the drift's correlation time.
    report_torque: wheel_speeds only; false: no net wheel torque in the records (JointState.effort empty).
    """

    rate: float
    noise_std: Mapping[str, float] = field(default_factory=dict)
    bias: Mapping[str, float] = field(default_factory=dict)
    latency: float = 0.0
    enabled: bool = True
    torque_scale: float = 1.0
    quantisation_teeth: int = 0
    quantisation_window: float = 0.0
    misalignment_deg: tuple[float, float, float] = (0.0, 0.0, 0.0)
    stamp_latency: float = 0.0
    stamp_jitter: float = 0.0
    drift_std: Mapping[str, float] = field(default_factory=dict)
    drift_tau: float = 60.0
    report_torque: bool = True

    @property
    def quantisation_step(self) -> float:
        """rad/s between the encoder's reported spin rates, ``2 pi / (N T)`` (0 without quantisation)."""
        if self.quantisation_teeth <= 0:
            return 0.0
        window = self.quantisation_window if self.quantisation_window > 0 else 1.0 / self.rate
        return 2.0 * math.pi / (self.quantisation_teeth * window)


FULL_PEDAL_PRESSURE = 1.5e7
"""Pa of brake line pressure at full pedal in the simulated car (150 bar: a passenger car's full braking; the
simulated brake torque is proportional to the pedal, so to this pressure)."""

DEFAULT_SENSORS: dict[str, SensorSpec] = {
    "wheel_speeds": SensorSpec(rate=100.0),
    "imu": SensorSpec(rate=100.0),
    "tire_forces": SensorSpec(rate=100.0),
    "odom": SensorSpec(rate=100.0),
    "controls": SensorSpec(rate=100.0),
    "ground_truth": SensorSpec(rate=100.0),
    "clock": SensorSpec(rate=100.0),
    "gnss": SensorSpec(rate=10.0, noise_std={"ve": 0.05, "vn": 0.05, "vu": 0.05}, latency=0.1),
    "gnss_fix": SensorSpec(rate=10.0, noise_std={"east": 1.5, "north": 1.5, "up": 3.0}, latency=0.1),
    "drive_torque": SensorSpec(rate=100.0, noise_std={"engine": 2.0, "axle": 10.0}, enabled=False),
    "brake_pressure": SensorSpec(rate=100.0, noise_std={"pressure": 0.5e5}, enabled=False),
}
"""Noise-free sensors at 100 Hz, the GNSS velocity at 10 Hz with 0.05 m/s per axis and 0.1 s latency, and the
GNSS position at 10 Hz with 1.5 m per horizontal axis, 3 m vertical and 0.1 s latency: the defaults a scenario's
``sensors`` section overrides field by field. The CAN torque signals (``drive_torque``, ``brake_pressure``,
100 Hz) are off unless a scenario turns them on; their white noise is a stated design assumption, not a measured
figure: 2 N m on the engine torque (a few times the 0.5 N m resolution such signals are sent with), 10 N m on an
axle's torque, 0.5 bar on the brake pressure. (``gnss``, ``gnss_fix`` and then these two are last:
the noise streams are seeded by the sensor's index, so adding them changed no other sensor's noise.)"""

DEFAULT_ORIGIN = Geodetic(latitude=43.0722, longitude=-89.4008, altitude=270.0)
"""Geographic origin of a scenario that names none (WGS-84, deg, deg, m): Madison, Wisconsin, where Project
Chrono's HMMWV model comes from. The simulator's world (x, y, z) are (east, north, up) about it."""


def period_steps(rate: float, dt: float) -> int:
    """Sampling period in simulation steps; ValueError when 1/rate is not a whole number of steps of ``dt``."""
    n = 1.0 / (rate * dt)
    k = int(round(n))
    if k < 1 or abs(n - k) > 1e-6 * max(1.0, n):
        raise ValueError(f"1/rate = {1.0 / rate:.6g} s is not a whole number of steps of dt = {dt:.6g} s")
    return k


def _rot_zyx(roll: float, pitch: float, yaw: float) -> np.ndarray:
    """Rotation matrix Rz(yaw) Ry(pitch) Rx(roll) (angles in rad)."""
    cr, sr, cp, sp, cy, sy = (math.cos(roll), math.sin(roll), math.cos(pitch), math.sin(pitch), math.cos(yaw),
                              math.sin(yaw))
    return np.array([[cy * cp, cy * sp * sr - sy * cr, cy * sp * cr + sy * sr],
                     [sy * cp, sy * sp * sr + cy * cr, sy * sp * cr - cy * sr],
                     [-sp, cp * sr, cp * cr]])


def _wrap(a: float) -> float:
    """Angle wrapped to [-pi, pi) (rad)."""
    return (a + math.pi) % (2.0 * math.pi) - math.pi


def latency_steps(latency: float, dt: float) -> int:
    """Latency rounded up to whole simulation steps (a record is released at the first step at or after it)."""
    return int(math.ceil(latency / dt - 1e-9)) if latency > 0 else 0


class SensorSuite:
    """All sensors of one run: samples ``sim.outputs()`` when due, holds records until their latency passed.

    Usage per simulation step ``n`` (time ``n * dt``): ``measure(n, outputs, controls)`` then
    ``release(n)`` -> list of ``(topic, record)`` to publish now. ``next_event(n)`` is the next step at which
    anything is due, so a caller may step the model in batches in between. ``constants`` (true model
    constants) ride on the first ground-truth record and then once per simulated second (empty otherwise).
    """

    def __init__(self, specs: Mapping[str, SensorSpec], dt: float, seed: int = 0,
                 constants: Mapping[str, float] | None = None, origin: Geodetic = DEFAULT_ORIGIN) -> None:
        unknown = sorted(set(specs) - set(SENSOR_CHANNELS))
        if unknown:
            raise ValueError(f"unknown sensor(s): {', '.join(unknown)}")
        self.dt = float(dt)
        self.origin = origin
        self.specs = {k: specs[k] for k in SENSOR_CHANNELS if k in specs and specs[k].enabled}
        self.constants = dict(constants or {})
        self._period = {k: period_steps(s.rate, dt) for k, s in self.specs.items()}
        self._latency = {k: latency_steps(s.latency, dt) for k, s in self.specs.items()}
        names = list(SENSOR_CHANNELS)
        self._rng = {k: np.random.default_rng([int(seed), names.index(k)]) for k in self.specs}
        self._rng_torque = np.random.default_rng([int(seed), names.index("wheel_speeds"), 1])
        self._pending: list[tuple[int, int, str, object]] = []
        self._seq = 0
        self._next_constants = -math.inf
        self._std = {k: np.array([float(s.noise_std.get(c, 0.0)) for c in SENSOR_CHANNELS[k]] or [0.0])
                     for k, s in self.specs.items()}
        self._bias = {k: np.array([float(s.bias.get(c, 0.0)) for c in SENSOR_CHANNELS[k]] or [0.0])
                      for k, s in self.specs.items()}
        # faults: their own streams, created only when configured (the noise streams above are untouched)
        self._rng_stamp = {k: np.random.default_rng([int(seed), names.index(k), 2])
                           for k, s in self.specs.items() if s.stamp_jitter > 0}
        ws = self.specs.get("wheel_speeds")
        self._encoder: dict[str, object] | None = None
        if ws is not None and ws.quantisation_teeth > 0:
            period = self._period["wheel_speeds"] * self.dt
            window = ws.quantisation_window if ws.quantisation_window > 0 else period
            m = window / period
            if abs(m - round(m)) > 1e-6 or round(m) < 1:
                raise ValueError(f"wheel_speeds.quantisation_window = {window:g} s is not a whole number of "
                                 f"sampling periods ({period:g} s)")
            rng = np.random.default_rng([int(seed), names.index("wheel_speeds"), 3])
            pitch = 2.0 * math.pi / ws.quantisation_teeth
            self._encoder = {"teeth": ws.quantisation_teeth, "m": int(round(m)), "window": int(round(m)) * period,
                             "period": period, "phase": rng.uniform(0.0, pitch, 4), "theta": None, "omega": None,
                             "counts": []}
        fix = self.specs.get("gnss_fix")
        self._drift: dict[str, object] | None = None
        if fix is not None and any(float(fix.drift_std.get(c, 0.0)) > 0.0 for c in SENSOR_CHANNELS["gnss_fix"]):
            if not fix.drift_tau > 0.0:
                raise ValueError(f"gnss_fix.drift_tau = {fix.drift_tau!r} s must be > 0")
            rng = np.random.default_rng([int(seed), names.index("gnss_fix"), 4])
            sd = np.array([float(fix.drift_std.get(c, 0.0)) for c in SENSOR_CHANNELS["gnss_fix"]])
            phi = math.exp(-self._period["gnss_fix"] * self.dt / float(fix.drift_tau))
            self._drift = {"rng": rng, "sd": sd, "phi": phi, "b": sd * rng.standard_normal(3)}
        imu = self.specs.get("imu")
        self._misalign = (_rot_zyx(*(math.radians(float(a)) for a in imu.misalignment_deg))
                          if imu is not None and any(float(a) != 0.0 for a in imu.misalignment_deg) else None)

    def time(self, step: int) -> float:
        """Stamp of simulation step ``step`` (s), rounded to the nanosecond."""
        return round(step * self.dt, 9)

    def due(self, step: int) -> list[str]:
        """Sensors that sample at ``step``."""
        return [k for k, p in self._period.items() if step % p == 0]

    def next_event(self, step: int) -> int:
        """First step > ``step`` at which a sensor samples or a held record is released."""
        nxt = min((step // p + 1) * p for p in self._period.values()) if self._period else step + 1
        if self._pending:
            nxt = min(nxt, max(self._pending[0][0], step + 1))
        return nxt

    def measure(self, step: int, out: Mapping[str, object], controls: tuple[float, float, float]) -> None:
        """Sample every sensor due at ``step`` from the model outputs ``out`` and the applied controls."""
        t = self.time(step)
        for key in self.due(step):
            spec = self.specs[key]
            release = step + self._latency[key]
            stamp = t
            if spec.stamp_latency != 0.0 or spec.stamp_jitter > 0.0:
                late = spec.stamp_latency
                if spec.stamp_jitter > 0.0:
                    late += spec.stamp_jitter * (2.0 * float(self._rng_stamp[key].random()) - 1.0)
                stamp = round(t + late, 9)
                release = max(release, step + latency_steps(late, self.dt))
            for rec in self._records(key, stamp, out, controls):
                self._seq += 1
                heapq.heappush(self._pending, (release, self._seq, SENSOR_TOPICS[key], rec))

    def release(self, step: int) -> list[tuple[str, object]]:
        """Records whose release step is <= ``step``, in release then measurement order."""
        ready = []
        while self._pending and self._pending[0][0] <= step:
            _, _, topic, rec = heapq.heappop(self._pending)
            ready.append((topic, rec))
        return ready

    def pending(self) -> int:
        """Number of records measured but not yet released."""
        return len(self._pending)

    def _constants_now(self, t: float) -> dict[str, float]:
        """The true constants ride on the first ground-truth record and then once per simulated second."""
        if not self.constants or t < self._next_constants - 1e-9:
            return {}
        self._next_constants = math.floor(t + 1e-9) + 1.0
        return dict(self.constants)

    # -- record builders ---------------------------------------------------------------------------------
    def _noisy(self, key: str, values: np.ndarray) -> np.ndarray:
        """``values`` (channels x ...) + per-channel bias + per-channel white noise (one draw per element,
        only for sensors with any noise, so the stream is fixed by the sensor's settings)."""
        std, bias = self._std[key], self._bias[key]
        shape = (-1,) + (1,) * (values.ndim - 1)
        v = values + bias.reshape(shape)
        if std.any():
            v += std.reshape(shape) * self._rng[key].standard_normal(values.shape)
        return v

    def _encoder_rates(self, omega: np.ndarray) -> np.ndarray:
        """Spin rates (rad/s, 4) an edge-counting encoder reports for the true rates ``omega`` at this sample
        (module docstring): the angle advances by the trapezoid of the true rates over the sampling period."""
        enc = self._encoder
        assert enc is not None
        teeth, m, period = enc["teeth"], enc["m"], enc["period"]
        if enc["theta"] is None:   # as if the wheel had turned at this rate before the first sample
            theta = enc["phase"] + 0.0 * omega
            enc["counts"] = [np.floor((theta - j * omega * period) * teeth / (2.0 * math.pi)) for j in range(m, 0, -1)]
        else:
            theta = enc["theta"] + 0.5 * (enc["omega"] + omega) * period
        enc["theta"], enc["omega"] = theta, omega.copy()
        count = np.floor(theta * teeth / (2.0 * math.pi))
        counts = enc["counts"]
        rate = (count - counts[0]) * 2.0 * math.pi / (teeth * enc["window"])
        counts.pop(0)
        counts.append(count)
        return rate

    def _misaligned(self, raw: np.ndarray) -> np.ndarray:
        """IMU channels (roll, pitch, yaw, p, q, r, ax, ay, az) of a sensor whose axes are rotated by the
        misalignment from the body's: vectors ``R^T v``, attitude of ``R_world_body R`` (angles kept continuous
        with the body's: the difference is wrapped)."""
        rm = self._misalign
        out = raw.copy()
        out[3:6] = rm.T @ raw[3:6]
        out[6:9] = rm.T @ raw[6:9]
        rw = _rot_zyx(float(raw[0]), float(raw[1]), float(raw[2])) @ rm
        pitch = -math.asin(max(-1.0, min(1.0, float(rw[2, 0]))))
        roll = math.atan2(float(rw[2, 1]), float(rw[2, 2]))
        yaw = math.atan2(float(rw[1, 0]), float(rw[0, 0]))
        out[0] = raw[0] + _wrap(roll - raw[0])
        out[1] = raw[1] + _wrap(pitch - raw[1])
        out[2] = raw[2] + _wrap(yaw - raw[2])
        return out

    def _gnss(self, t: float, out: Mapping[str, object]) -> GnssVelocity:
        """World-frame (ENU) velocity of the body: the body velocity (u, v, w) rotated by the ZYX attitude
        (yaw, pitch, roll), plus per-axis noise and bias; ``std`` reports the configured horizontal noise."""
        cr, sr = math.cos(float(out["roll"])), math.sin(float(out["roll"]))
        cp, sp = math.cos(float(out["pitch"])), math.sin(float(out["pitch"]))
        cy, sy = math.cos(float(out["yaw"])), math.sin(float(out["yaw"]))
        u, v, w = float(out["u"]), float(out["v"]), float(out.get("w", 0.0))
        ve = cy * cp * u + (cy * sp * sr - sy * cr) * v + (cy * sp * cr + sy * sr) * w
        vn = sy * cp * u + (sy * sp * sr + cy * cr) * v + (sy * sp * cr - cy * sr) * w
        vu = -sp * u + cp * sr * v + cp * cr * w
        e, n, z = self._noisy("gnss", np.array([ve, vn, vu])).tolist()
        std = self._std["gnss"]
        return GnssVelocity(t=t, ve=e, vn=n, vu=z, std=math.sqrt(0.5 * (std[0] ** 2 + std[1] ** 2)))

    def _gnss_fix(self, t: float, out: Mapping[str, object]) -> GnssFix:
        """The receiver's position: world (x, y, z) as ENU (east, north, up) about the origin, plus the drift
        (when configured), per-axis noise and bias, as WGS-84 latitude, longitude (deg) and ellipsoidal height
        (m); ``std_h`` reports the configured horizontal error (root mean square of east and north, drift and
        noise), ``std_v`` the vertical."""
        pos = np.array([float(out["x"]), float(out["y"]), float(out.get("z", 0.0))])
        std = self._std["gnss_fix"]
        drift = self._drift
        if drift is not None:   # the Gauss-Markov drift (module docstring): this sample's state, then the next
            pos = pos + drift["b"]
            phi = drift["phi"]
            drift["b"] = phi * drift["b"] + math.sqrt(1.0 - phi * phi) * drift["sd"] * drift["rng"].standard_normal(3)
            std = np.sqrt(std**2 + drift["sd"] ** 2)
        e, n, u = self._noisy("gnss_fix", pos).tolist()
        lat, lon, alt = enu_to_geodetic(e, n, u, self.origin)
        return GnssFix(t=t, latitude=lat, longitude=lon, altitude=alt,
                       std_h=math.sqrt(0.5 * (std[0] ** 2 + std[1] ** 2)), std_v=float(std[2]))

    def _records(self, key: str, t: float, out: Mapping[str, object],
                 controls: tuple[float, float, float]) -> list[Record | ClockTick]:
        if key == "wheel_speeds":
            std, bias = self._std[key], self._bias[key]
            omega = np.array(out["omega"], dtype=float)
            if self._encoder is not None:
                omega = self._encoder_rates(omega)
            omega = omega + bias[0]
            if std[0]:
                omega += std[0] * self._rng[key].standard_normal(4)
            torque = out.get("wheel_torque") if self.specs[key].report_torque else None
            if torque is not None:
                torque = np.array(torque, dtype=float).reshape(4)
                scale = self.specs[key].torque_scale
                if scale != 1.0:
                    torque = scale * torque
                torque = torque + bias[1]
                if std[1]:
                    torque += std[1] * self._rng_torque.standard_normal(4)
            return [WheelSpeeds(t=t, omega=omega, torque=torque)]
        if key == "imu":
            raw = np.array([out["roll"], out["pitch"], out["yaw"], out["p"], out["q"], out["r"],
                            out["ax"], out["ay"], out["az"]], dtype=float)
            if self._misalign is not None:
                raw = self._misaligned(raw)
            v = self._noisy(key, raw).tolist()
            return [ImuSample(t=t, roll=v[0], roll_rate=v[3], yaw_rate=v[5], ax=v[6], ay=v[7], az=v[8],
                              pitch=v[1], yaw=v[2], pitch_rate=v[4])]
        if key == "tire_forces":
            f = self._noisy(key, np.array([out["fx"], out["fy"], out["fz"]], dtype=float).reshape(3, 4)).tolist()
            return [TireForce(t=t, wheel=i, fx=f[0][i], fy=f[1][i], fz=f[2][i]) for i in range(4)]
        if key == "odom":
            v = self._noisy(key, np.array([out["u"], out["v"], out["r"], out["x"], out["y"], out["yaw"]],
                                          dtype=float)).tolist()
            return [OdomSample(t=t, u=v[0], v=v[1], yaw_rate=v[2], x=v[3], y=v[4], yaw=v[5])]
        if key == "controls":
            th, br, st = self._noisy(key, np.array(controls, dtype=float)).tolist()
            return [Controls(t=t, throttle=min(1.0, max(0.0, th)), brake=min(1.0, max(0.0, br)),
                             steering=min(1.0, max(-1.0, st)))]
        if key == "ground_truth":
            return [GroundTruth(t=t, mu_road=np.array(out["mu_road"], dtype=float).reshape(4),
                                slip=np.array(out["slip"], dtype=float).reshape(4),
                                slip_angle=np.array(out["slip_angle"], dtype=float).reshape(4),
                                mu_max=np.array(out["mu_max"], dtype=float).reshape(4),
                                constants=self._constants_now(t),
                                fx=np.array(out["fx"], dtype=float).reshape(4) if "fx" in out else None,
                                fz=np.array(out["fz"], dtype=float).reshape(4) if "fz" in out else None)]
        if key == "clock":
            return [ClockTick(t=t)]
        if key == "gnss":
            return [self._gnss(t, out)]
        if key == "gnss_fix":
            return [self._gnss_fix(t, out)]
        if key == "drive_torque":
            if "brake_torque" not in out:   # a model without the drive/brake split (a test stand-in)
                return []
            brake = np.asarray(out["brake_torque"], dtype=float)
            drive = np.asarray(out["wheel_torque"], dtype=float) - brake
            std, bias = self._std[key], self._bias[key]   # channels (engine, axle): the axles share the second
            v = np.array([out.get("engine_torque", math.nan), drive[0] + drive[1], drive[2] + drive[3]])
            v += bias[[0, 1, 1]]
            if std.any():
                v += std[[0, 1, 1]] * self._rng[key].standard_normal(3)
            v = v.tolist()
            gear = float(out["gear"]) if "engine_torque" in out else math.nan
            return [DriveTorque(t=t, engine=v[0], gear=gear, axle_front=v[1], axle_rear=v[2])]
        if key == "brake_pressure":
            if "brake_pedal" not in out:
                return []
            p = float(out["brake_pedal"]) * FULL_PEDAL_PRESSURE   # the pedal the outputs' brake torque is of
            std, bias = float(self._std[key][0]), float(self._bias[key][0])
            rng = self._rng[key]
            return [BrakePressure(t=t, axle=a, pressure=p + bias + (std * float(rng.standard_normal()) if std else 0.0))
                    for a in (0, 1)]
        raise ValueError(f"unknown sensor {key!r}")  # pragma: no cover - guarded in __init__
