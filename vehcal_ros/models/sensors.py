"""Sensor models of the simulated vehicle: rate, white noise, constant bias and latency per sensor.

The 14-DOF simulator's ``outputs()`` are turned into the neutral records of ``estimation/signals.py`` (the
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

No I/O and no rclpy here.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from vehcal_ros.estimation.signals import (
    Controls,
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
}
"""Sensor name -> canonical topic name (shared/DESIGN.md section 4). Records travel with these names."""


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
    """

    rate: float
    noise_std: Mapping[str, float] = field(default_factory=dict)
    bias: Mapping[str, float] = field(default_factory=dict)
    latency: float = 0.0
    enabled: bool = True


DEFAULT_SENSORS: dict[str, SensorSpec] = {
    "wheel_speeds": SensorSpec(rate=100.0),
    "imu": SensorSpec(rate=100.0),
    "tire_forces": SensorSpec(rate=100.0),
    "odom": SensorSpec(rate=100.0),
    "controls": SensorSpec(rate=100.0),
    "ground_truth": SensorSpec(rate=100.0),
    "clock": SensorSpec(rate=100.0),
    "gnss": SensorSpec(rate=10.0, noise_std={"ve": 0.05, "vn": 0.05, "vu": 0.05}, latency=0.1),
}
"""Noise-free sensors at 100 Hz, and the GNSS velocity at 10 Hz with 0.05 m/s per axis and 0.1 s latency: the
defaults a scenario's ``sensors`` section overrides field by field. (``gnss`` is last: the noise streams are
seeded by the sensor's index, so adding it changed no other sensor's noise.)"""


def period_steps(rate: float, dt: float) -> int:
    """Sampling period in simulation steps; ValueError when 1/rate is not a whole number of steps of ``dt``."""
    n = 1.0 / (rate * dt)
    k = int(round(n))
    if k < 1 or abs(n - k) > 1e-6 * max(1.0, n):
        raise ValueError(f"1/rate = {1.0 / rate:.6g} s is not a whole number of steps of dt = {dt:.6g} s")
    return k


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
                 constants: Mapping[str, float] | None = None) -> None:
        unknown = sorted(set(specs) - set(SENSOR_CHANNELS))
        if unknown:
            raise ValueError(f"unknown sensor(s): {', '.join(unknown)}")
        self.dt = float(dt)
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
            for rec in self._records(key, t, out, controls):
                self._seq += 1
                heapq.heappush(self._pending, (step + self._latency[key], self._seq, SENSOR_TOPICS[key], rec))

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

    def _records(self, key: str, t: float, out: Mapping[str, object],
                 controls: tuple[float, float, float]) -> list[Record | ClockTick]:
        if key == "wheel_speeds":
            std, bias = self._std[key], self._bias[key]
            omega = np.array(out["omega"], dtype=float) + bias[0]
            if std[0]:
                omega += std[0] * self._rng[key].standard_normal(4)
            torque = out.get("wheel_torque")
            if torque is not None:
                torque = np.array(torque, dtype=float).reshape(4) + bias[1]
                if std[1]:
                    torque += std[1] * self._rng_torque.standard_normal(4)
            return [WheelSpeeds(t=t, omega=omega, torque=torque)]
        if key == "imu":
            v = self._noisy(key, np.array([out["roll"], out["pitch"], out["yaw"], out["p"], out["q"], out["r"],
                                           out["ax"], out["ay"], out["az"]], dtype=float)).tolist()
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
        raise ValueError(f"unknown sensor {key!r}")  # pragma: no cover - guarded in __init__
