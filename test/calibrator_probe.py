"""Helpers for tests of the model_calibrator over real DDS: its input topics, a probe node for it, publishing a
drive's records and closing its coast-down, reading ``rr`` from a published model."""

from __future__ import annotations

from diagnostic_msgs.msg import DiagnosticArray
from nav_msgs.msg import Odometry
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from sensor_msgs.msg import Imu, JointState, Joy

from vehcal_ros.nodes import conversions
from vehcal_ros.nodes.common import latched_qos
from vehcal_ros.records import Controls, ImuSample, OdomSample, WheelSpeeds

TOPICS = {WheelSpeeds: ("/vehicle/wheel_speeds", JointState), ImuSample: ("/vehicle/imu", Imu),
          OdomSample: ("/vehicle/odom", Odometry), Controls: ("/vehicle/controls", Joy)}
"""The calibrator's input topic and message type for each record class."""


class CalibratorProbe:
    """A probe node for a model_calibrator in another process: publishers of its inputs (``pubs`` by record
    class), /diagnostics into ``diags``, the latched model into ``models``; ``ex`` spins the probe."""

    def __init__(self, context, name: str) -> None:
        self.node = Node(name, context=context)
        self.ex = SingleThreadedExecutor(context=context)
        self.ex.add_node(self.node)
        self.diags: list = []
        self.models: list = []
        self.node.create_subscription(DiagnosticArray, "/diagnostics", self.diags.append, 50)
        self.node.create_subscription(DiagnosticArray, "/vehcal/model_parameters", self.models.append,
                                      latched_qos())
        self.pubs = {cls: self.node.create_publisher(msg, topic, 1000) for cls, (topic, msg) in TOPICS.items()}


def publish(pubs, ex, records, counts: dict) -> None:
    """Publish ``records`` on ``pubs`` (by record class), spinning ``ex`` between, and count them by class name."""
    for k, rec in enumerate(records):
        pubs[type(rec)].publish(conversions.to_msg(rec))
        counts[type(rec).__name__] = counts.get(type(rec).__name__, 0) + 1
        if k % 4 == 3:
            for _ in range(6):
                ex.spin_once(timeout_sec=0.0005)


def closed(records: list) -> list:
    """The drive followed by 0.3 s of braking, which closes the coast-down (a window reaching the newest data
    is still open and not fitted)."""
    last = {type(r): r for r in records[-4:]}
    tail = []
    for k in range(1, 31):
        t = records[-1].t + k / 100.0
        w, i, o = last[WheelSpeeds], last[ImuSample], last[OdomSample]
        tail += [WheelSpeeds(t, w.omega), ImuSample(t, i.roll, i.roll_rate, i.yaw_rate, 0.0, 0.0),
                 OdomSample(t, o.u, o.v, o.yaw_rate), Controls(t, 0.0, 0.5, 0.0)]
    return records + tail


def model_rr(msg) -> dict[str, str]:
    """The ``rr`` status of a /vehcal/model_parameters message as its key -> value texts."""
    return {k.key: k.value for s in msg.status if s.name == "rr" for k in s.values}
