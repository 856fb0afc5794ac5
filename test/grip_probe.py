"""Helpers for tests of the grip_estimator over real DDS: fast sampler settings, a fake vehicle publishing in the
test's process, and feeding it samples of the synthetic tire curve."""

from __future__ import annotations

import math

import numpy as np
from builtin_interfaces.msg import Time
from geometry_msgs.msg import WrenchStamped
from nav_msgs.msg import Odometry
from rclpy.node import Node
from rclpy.parameter import Parameter
from sensor_msgs.msg import JointState
from synthetic_grip_publisher import WHEELS, magic_formula, slip_at_mu

FAST = [Parameter("fit_period", value=0.5), Parameter("n_chains", value=8), Parameter("n_steps", value=20000),
        Parameter("n_ml_starts", value=8), Parameter("stale_timeout", value=0.5),
        Parameter("diagnostics_period", value=0.2),
        Parameter("average_window", value=0.0),   # the fake vehicle sweeps the slip within 0.1 s
        Parameter("speed_reference", value="odometry")]   # the synthetic stream's odometry is its exact speed
"""grip_estimator parameter overrides for short fits on the fake vehicle's data."""


def stamp(t: float) -> Time:
    """A ROS time stamp of ``t`` seconds."""
    sec = math.floor(t)
    return Time(sec=int(sec), nanosec=int((t - sec) * 1e9))


class FakeVehicle:
    """Publishes one time step of wheel speeds, odometry and four tire forces per call (in this process)."""

    def __init__(self, node: Node) -> None:
        self.w = node.create_publisher(JointState, "/vehicle/wheel_speeds", 100)
        self.o = node.create_publisher(Odometry, "/vehicle/odom", 100)
        self.f = node.create_publisher(WrenchStamped, "/vehicle/tire_forces", 400)

    def step(self, t: float, slip: float, mu: float, u: float = 15.0, fz: float = 5000.0,
             omega: float | None = None) -> None:
        r_eff = 0.47 - fz / 326332.0 if math.isfinite(fz) else 0.45
        w = omega if omega is not None else (u / (1.0 - slip) / r_eff if u > 0 else 0.0)
        js = JointState(name=list(WHEELS), velocity=[float(w)] * 4)
        js.header.stamp = stamp(t)
        self.w.publish(js)
        od = Odometry()
        od.header.stamp = stamp(t)
        od.twist.twist.linear.x = float(u)
        self.o.publish(od)
        for name in WHEELS:
            m = WrenchStamped()
            m.header.stamp = stamp(t)
            m.header.frame_id = name
            m.wrench.force.x = float(mu * fz) if math.isfinite(fz) else float(mu)
            m.wrench.force.z = float(fz)
            self.f.publish(m)


def feed_good(vehicle: FakeVehicle, ex, t0: float, seconds: float, rate: float = 100.0, seed: int = 3) -> float:
    """Drive ``seconds`` of slip sweeps on the synthetic curve (with noise) from ``t0``; return the next time."""
    rng = np.random.default_rng(seed)
    s_lim = slip_at_mu(0.7)
    n = int(seconds * rate)
    for k in range(n):
        s = s_lim * ((k * 7) % 50) / 50.0
        vehicle.step(t0 + k / rate, s, float(magic_formula(np.array([s]))[0] + rng.normal(0, 0.0253)))
        drain(ex)
    return t0 + n / rate


def drain(ex, n: int = 12) -> None:
    """Let the executor take the callbacks of what was just published (keeps the sensor queues short)."""
    for _ in range(n):
        ex.spin_once(timeout_sec=0.0005)
