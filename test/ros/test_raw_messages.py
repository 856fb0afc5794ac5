"""Serialised sensor messages read by nodes/raw_messages.py give the very records rclpy's deserialisation and the
typed conversion give (or the same error), for random field values, odd names and frame ids, short and long
sequences, both byte orders' fallback, and bytes that end early."""

from __future__ import annotations

import random

import numpy as np
import pytest
from geometry_msgs.msg import TwistWithCovarianceStamped, WrenchStamped
from nav_msgs.msg import Odometry
from rclpy.serialization import serialize_message
from sensor_msgs.msg import FluidPressure, Imu, JointState, Joy

from vehcal_ros.nodes import conversions as C
from vehcal_ros.nodes import raw_messages

FR = C.frames()


def _messages(n: int, seed: int = 1) -> list[tuple[str, object]]:
    rng = random.Random(seed)

    def r() -> float:
        return rng.uniform(-1e3, 1e3)

    def stamp(m) -> None:
        m.header.stamp.sec = rng.randint(-2**31, 2**31 - 1)
        m.header.stamp.nanosec = rng.randint(0, 999_999_999)
        m.header.frame_id = rng.choice(["", "base_link", "wheel_fl", "wheel_rr", "ünï"])

    out: list[tuple[str, object]] = []
    for k in range(n):
        names = list(C.WHEELS) if k % 3 else rng.choice([["a", *C.WHEELS], ["wheel_fr", "wheel_fl", "wheel_rl",
                                                                            "wheel_rr"], ["wheel_fl"]])
        js = JointState(name=names, velocity=[r() for _ in range(len(names) - (k % 7 == 0))])
        if k % 2:
            js.effort = [r() for _ in names]
        if k % 5 == 0:
            js.position = [r() for _ in names]
        stamp(js)
        out.append(("wheel_speeds", js))
        w = WrenchStamped()
        stamp(w)
        w.header.frame_id = rng.choice([*C.WHEELS, "wheel_x"])
        w.wrench.force.x, w.wrench.force.y, w.wrench.force.z = r(), r(), r()
        w.wrench.torque.y = r()
        out.append(("tire_force", w))
        q = np.array([r(), r(), r(), r()])
        q = [float(x) for x in q / np.linalg.norm(q)]
        o = Odometry()
        stamp(o)
        o.child_frame_id = rng.choice(["", "base_link", "x" * rng.randint(1, 9)])
        o.pose.pose.position.x, o.pose.pose.position.y = r(), r()
        o.pose.pose.orientation.x, o.pose.pose.orientation.y, o.pose.pose.orientation.z = q[:3]
        o.pose.pose.orientation.w = q[3]
        o.twist.twist.linear.x, o.twist.twist.linear.y, o.twist.twist.angular.z = r(), r(), r()
        o.pose.covariance = [r() for _ in range(36)]
        out.append(("odom", o))
        i = Imu()
        stamp(i)
        i.orientation.x, i.orientation.y, i.orientation.z, i.orientation.w = q
        i.angular_velocity.x, i.angular_velocity.y, i.angular_velocity.z = r(), r(), r()
        i.linear_acceleration.x, i.linear_acceleration.y, i.linear_acceleration.z = r(), r(), r()
        out.append(("imu", i))
        j = Joy(axes=[float(np.float32(r())) for _ in range(rng.randint(0, 5))], buttons=[1] * rng.randint(0, 3))
        stamp(j)
        out.append(("controls", j))
        g = TwistWithCovarianceStamped()
        stamp(g)
        g.twist.twist.linear.x, g.twist.twist.linear.y, g.twist.twist.linear.z = r(), r(), r()
        g.twist.covariance = [abs(r()) if rng.random() < 0.9 else 0.0 for _ in range(36)]
        out.append(("gnss_velocity", g))
        joints = rng.sample(["engine", "gear", "axle_front", "axle_rear", "motor"], rng.randint(0, 4))
        d = JointState(name=joints, effort=[r() for _ in joints])
        if k % 3:
            d.position = [float(rng.randint(-1, 8)) for _ in joints]
        stamp(d)
        out.append(("drive_torque", d))
        b = FluidPressure(fluid_pressure=abs(r()) * 1e4, variance=abs(r()))
        stamp(b)
        b.header.frame_id = rng.choice(["front_axle", "rear_axle", "master_cylinder", ""])
        out.append(("brake_pressure", b))
    return out


def _outcome(convert, msg) -> tuple:
    try:
        return ("record", repr(convert(msg, FR)))
    except (ValueError, IndexError, KeyError, TypeError) as exc:
        return ("refused", type(exc).__name__, str(exc))


def test_raw_records_equal_the_typed_conversion() -> None:
    cases = _messages(200)
    refused = 0
    for name, msg in cases:
        typed = _outcome(getattr(C, f"msg_to_{name}"), msg)
        raw = _outcome(getattr(C, f"raw_to_{name}"), serialize_message(msg))
        assert raw == typed, (name, msg)
        refused += typed[0] == "refused"
    assert 0 < refused < len(cases) // 2   # the error paths were exercised too


def test_bytes_the_views_do_not_read_fall_back_to_rclpy_or_are_refused() -> None:
    w = WrenchStamped()
    w.header.frame_id = "wheel_rl"
    w.wrench.force.x, w.wrench.force.z = 1500.0, 5000.0
    data = serialize_message(w)
    want = _outcome(C.msg_to_tire_force, w)
    # a different encapsulation id: the view refuses it, rclpy reads it (same record) or refuses it (counted)
    with pytest.raises(raw_messages.Truncated):
        raw_messages.wrench_stamped(b"\x00\x0b" + data[2:])
    for cut in (0, 3, 10, len(data) - 1):
        out = _outcome(C.raw_to_tire_force, data[:cut])
        assert out[0] == "refused", (cut, out)
    assert _outcome(C.raw_to_tire_force, data) == want
