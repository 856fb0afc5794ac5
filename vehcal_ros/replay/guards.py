"""What a bag replay lets into each estimator: the live nodes'
:class:`~vehcal_ros.estimation.sensing.input_guard.InputGuard` on the bag's records in *arrival* order.

A live node checks each message when it arrives (``WorkerNode._convert_and_feed``); a rosbag2 recorder writes
messages in the order it received them, so the bag's own order is the arrival order. :func:`vehcal_ros.io.bags.
read_bag` then sorts records by header stamp (within its reorder window) — after which a record stamped behind
its stream would sit in its sorted place and look fine. So the guards run on the records before that sorting
(``read_bag(admit=...)``), with the node's constructor arguments from the node's parameters, and each refusal is
counted in the estimator's pipeline under the node's reason (``collector.reject`` / ``CalibrationPipeline.reject``),
exactly as the node counts it. A record only some estimators refuse is kept for the others
(:meth:`ArrivalGuards.lets_in`). Nothing here imports rclpy.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from vehcal_ros.estimation.grip.pipeline import signal_config_from
from vehcal_ros.estimation.sensing.input_guard import REASONS, InputGuard
from vehcal_ros.io import bags
from vehcal_ros.records import GroundTruth
from vehcal_ros.vehicle.description import CAN_TORQUE_SOURCES, load_description

CALIBRATOR_TOPICS = ("wheel_speeds", "imu", "odom", "controls")
"""Sensor keys the ``model_calibrator`` always subscribes to (:func:`calibrator_topics`)."""

CAN_TOPIC_KEYS = ("drive_torque", "brake_pressure")
"""Sensor keys of a production car's CAN torque signals (estimation/sensing/can_torque.py)."""


def can_topics(values: Mapping[str, Any]) -> tuple[str, ...]:
    """:data:`CAN_TOPIC_KEYS` when the node's vehicle description (``vehicle``) takes the wheel torque from them
    (``torque_source`` engine or axle), as the nodes subscribe; else none."""
    vehicle = load_description(values.get("vehicle") or None)
    return CAN_TOPIC_KEYS if vehicle.torque_source in CAN_TORQUE_SOURCES else ()


def calibrator_topics(values: Mapping[str, Any]) -> tuple[str, ...]:
    """Sensor keys the ``model_calibrator`` subscribes to: :data:`CALIBRATOR_TOPICS` and :func:`can_topics`."""
    return CALIBRATOR_TOPICS + can_topics(values)


def grip_topics(values: Mapping[str, Any]) -> tuple[str, ...]:
    """Sensor keys the ``grip_estimator`` subscribes to: always the IMU (the front toe's wheel travel, the estimated
    forces' load transfer, the yaw rate of the undriven-wheel reference); the GNSS velocity for the slips' speed
    reference (``speed_reference`` gnss_imu, and undriven_wheels for the undriven axle) and the online rolling
    radius (``radius_learning``); the CAN torque topics (:func:`can_topics`)."""
    base = ("wheel_speeds", "tire_forces", "odom", "controls", "imu")
    if values.get("radius_learning", True) or values.get("speed_reference", "odometry") != "odometry":
        base += ("gnss",)
    return base + can_topics(values)


def grip_guard(values: Mapping[str, Any]) -> InputGuard:
    """The grip node's guard: a stamp jump is the collector's own restart threshold (``max_gap``)."""
    return InputGuard(jump=signal_config_from(values).max_gap)


def calibration_guard(values: Mapping[str, Any]) -> InputGuard:
    """The calibrator node's guard: a stamp jump is its ``clock_jump`` parameter."""
    return InputGuard(jump=float(values.get("clock_jump", 1.0)))


def replay_guards(grip_values: Mapping[str, Any], cal_values: Mapping[str, Any] | None,
                  grip_reject: Callable[[str, str], None] | None = None,
                  cal_reject: Callable[[str, str], None] | None = None) -> ArrivalGuards:
    """The guards of the nodes a replay runs (grip first, then the calibrator when ``cal_values`` is given).
    A replay (serial or parallel) reads the bag once and feeds both estimators from that one stream, so both see
    the records and ticks the live nodes would; a ``reject`` of None counts an estimator's refusals only here
    (``refused``)."""
    guards = ArrivalGuards()
    guards.add(grip_guard(grip_values), grip_topics(grip_values), grip_reject)
    if cal_values is not None:
        guards.add(calibration_guard(cal_values), calibrator_topics(cal_values), cal_reject)
    return guards


_SENSOR_KEY = {canonical: key for key, canonical in bags.DEFAULT_TOPICS.items()}


class ArrivalGuards:
    """One guard per estimator fed from one bag stream (module docstring). ``admit`` goes to ``read_bag``;
    ``lets_in(k, rec)`` tells the feed whether estimator ``k`` (in the order added) takes an admitted record."""

    def __init__(self) -> None:
        self.members: list[tuple[InputGuard, frozenset[str], Callable[[str, str], None]]] = []
        self.refused: list[dict[str, int]] = []
        self._split: dict[int, tuple[bool, ...]] = {}   # id(record) -> per-estimator verdicts, when they differ

    def add(self, guard: InputGuard, topics: tuple[str, ...], reject: Callable[[str, str], None] | None) -> int:
        """An estimator subscribed to ``topics`` (sensor keys), counting refusals with ``reject(topic, reason)``
        (None: counted here only, in ``refused``)."""
        self.members.append((guard, frozenset(topics), reject))
        self.refused.append({})
        return len(self.members) - 1

    def admit(self, canonical: str, rec: Any) -> bool:
        """In arrival order: check ``rec`` against the guard of every estimator subscribed to its topic; False
        when one refused it and none took it (a record nobody subscribes to passes, as before the guards)."""
        if isinstance(rec, GroundTruth):
            return True    # replay-only reference, no node reads it
        key = _SENSOR_KEY.get(canonical, canonical)
        verdicts = []
        for k, (guard, topics, reject) in enumerate(self.members):
            if key not in topics:
                verdicts.append(None)
                continue
            reason = guard.check(key, rec)
            if reason is not None:
                if reject is not None:
                    reject(key, reason)
                self.refused[k][reason] = self.refused[k].get(reason, 0) + 1
            verdicts.append(reason is None)
        if False not in verdicts:
            return True
        if True in verdicts:
            self._split[id(rec)] = tuple(bool(v) for v in verdicts)   # read_bag keeps rec alive until fed
            return True
        return False

    def lets_in(self, k: int, canonical: str, rec: Any) -> bool:
        """Whether estimator ``k`` takes ``rec``, a record ``admit`` let through (False for a topic it does not
        subscribe to)."""
        if _SENSOR_KEY.get(canonical, canonical) not in self.members[k][1]:
            return False
        verdicts = self._split.get(id(rec))
        return True if verdicts is None else verdicts[k]

    def fed(self, rec: Any) -> None:
        """``rec`` went to every estimator that takes it: forget its verdicts."""
        if self._split:
            self._split.pop(id(rec), None)


def refusal_summary(counters: Mapping[str, Any]) -> str:
    """One line of a replay report: the messages each node's input guard refused, by reason ('' if none)."""
    parts = []
    for node, key in (("grip_estimator", "grip_samples_dropped"), ("model_calibrator", "calibration_samples_dropped")):
        dropped = counters.get(key) or {}
        got = [f"{r} {dropped[r]}" for r in REASONS if dropped.get(r)]
        if got:
            parts.append(f"{node}: {', '.join(got)}")
    return f"refused at input (as the live nodes): {'; '.join(parts)}" if parts else ""


__all__ = ["ArrivalGuards", "CALIBRATOR_TOPICS", "CAN_TOPIC_KEYS", "calibration_guard", "calibrator_topics",
           "can_topics", "grip_guard", "grip_topics", "refusal_summary", "replay_guards"]
