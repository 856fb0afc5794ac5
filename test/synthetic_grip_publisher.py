"""A stand-in vehicle for the grip node tests: publishes wheel speeds, tire forces and odometry from a known
Pacejka curve (friction paper Eq. 5) at a fixed rate over real DDS, in its own process.

The slip ratio sweeps a triangle wave between 0 and the slip where the noise-free curve reaches ``--mu-limit``;
mu = f(s, theta) + N(0, sigma^2); Fz is constant; the wheel speed follows from Eq. (3) with R = r0 - Fz/kt (the
node's default load-dependent radius). Run: python test/synthetic_grip_publisher.py --duration 30
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
import rclpy
from geometry_msgs.msg import WrenchStamped
from nav_msgs.msg import Odometry
from rclpy.node import Node
from sensor_msgs.msg import JointState

THETA = (15.4, 1.60, 0.871, -1.09, 0.0, 0.0)   # friction paper Section 4.1
WHEELS = ("wheel_fl", "wheel_fr", "wheel_rl", "wheel_rr")


def magic_formula(s: np.ndarray, theta=THETA) -> np.ndarray:
    B, C, D, E, sh, sv = theta
    x = s + sh
    return D * np.sin(C * np.arctan(B * x - E * (B * x - np.arctan(B * x)))) + sv


def slip_at_mu(mu_limit: float, theta=THETA) -> float:
    grid = np.linspace(0.0, 0.4, 40001)
    mu = magic_formula(grid, theta)
    above = np.nonzero(mu >= mu_limit)[0]
    return float(grid[above[0]]) if above.size else 0.4


def stamp(t: float):
    from builtin_interfaces.msg import Time

    sec = math.floor(t)
    return Time(sec=int(sec), nanosec=int((t - sec) * 1e9))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate", type=float, default=200.0)
    ap.add_argument("--duration", type=float, default=60.0)
    ap.add_argument("--mu-limit", type=float, default=0.6)
    ap.add_argument("--sigma", type=float, default=0.0253)
    ap.add_argument("--speed", type=float, default=15.0)
    ap.add_argument("--fz", type=float, default=5000.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--period", type=float, default=4.0, help="slip sweep period, s")
    args = ap.parse_args()

    rclpy.init()
    node = Node("synthetic_vehicle")
    pub_w = node.create_publisher(JointState, "/vehicle/wheel_speeds", 50)
    pub_f = node.create_publisher(WrenchStamped, "/vehicle/tire_forces", 200)
    pub_o = node.create_publisher(Odometry, "/vehicle/odom", 50)
    # wait until the estimator is there (matched), with a timeout
    deadline = time.monotonic() + 30.0
    while time.monotonic() < deadline and min(pub_w.get_subscription_count(), pub_f.get_subscription_count(),
                                              pub_o.get_subscription_count()) == 0:
        rclpy.spin_once(node, timeout_sec=0.05)

    rng = np.random.default_rng(args.seed)
    s_max = slip_at_mu(args.mu_limit)
    r_eff = 0.47 - args.fz / 326332.0
    dt = 1.0 / args.rate
    t0 = 1000.0
    n = int(args.duration * args.rate)
    wall0 = time.monotonic()
    for k in range(n):
        t = t0 + k * dt
        phase = (k * dt / args.period) % 1.0
        tri = 2 * phase if phase < 0.5 else 2 * (1 - phase)
        s = tri * s_max * np.ones(4) * rng.uniform(0.8, 1.0, 4)
        mu = magic_formula(s) + rng.normal(0.0, args.sigma, 4)
        omega = args.speed / (1.0 - s) / r_eff
        hdr = stamp(t)
        js = JointState()
        js.header.stamp = hdr
        js.name = list(WHEELS)
        js.velocity = [float(w) for w in omega]
        pub_w.publish(js)
        od = Odometry()
        od.header.stamp = hdr
        od.header.frame_id = "odom"
        od.child_frame_id = "base_link"
        od.twist.twist.linear.x = args.speed
        pub_o.publish(od)
        for i, name in enumerate(WHEELS):
            w = WrenchStamped()
            w.header.stamp = hdr
            w.header.frame_id = name
            w.wrench.force.x = float(mu[i] * args.fz)
            w.wrench.force.z = args.fz
            pub_f.publish(w)
        # pace at the given rate against wall time
        lag = wall0 + (k + 1) * dt - time.monotonic()
        if lag > 0:
            time.sleep(lag)
    node.destroy_node()
    rclpy.shutdown()


if __name__ == "__main__":
    main()
