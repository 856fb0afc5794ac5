"""Record <-> rclpy message conversion for every topic of docs/nodes.md (pure functions).

The conversion code itself lives in ``io/bags.py`` and is duck-typed over a message-type lookup; here it is
bound to rclpy's message classes (``RCLPY_TYPES``), so a live node and a bag replay decode the same way.
Frames: JointState names and WrenchStamped frame ids are the wheel names (configurable, FL, FR, RL, RR
order); Joy axes indices of (throttle, brake, steering) are configurable.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from vehcal_ros.io.bags import (
    DEFAULT_FRAMES,
    Frames,
    MsgTypes,
    diagnostic_array,
    float64_multiarray,
    msg_to_records,
    record_to_msg,
    stamp_sec,
    vector3_stamped,
)
from vehcal_ros.models.sensors import ClockTick
from vehcal_ros.nodes import raw_messages
from vehcal_ros.records import (
    WHEELS,
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


def _lookup(name: str) -> type:
    pkg, _, cls = name.split("/")
    return getattr(importlib.import_module(f"{pkg}.msg"), cls)


RCLPY_TYPES = MsgTypes(_lookup, byte_is_bytes=True)
"""rclpy message classes by full type name (``sensor_msgs/msg/Imu``)."""


def frames(wheel_names: Sequence[str] = WHEELS, axes: Sequence[int] = (0, 1, 2),
           base_frame: str = "base_link", odom_frame: str = "odom", gnss_frame: str = "gnss") -> Frames:
    """A ``Frames`` (wheel names, Joy axes, frame ids) from node parameters; ValueError when inconsistent."""
    names = tuple(str(w) for w in wheel_names)
    if len(names) != 4 or len(set(names)) != 4 or not all(names):
        raise ValueError(f"wheel_names must be 4 distinct non-empty names (FL, FR, RL, RR), got {list(names)}")
    ax = tuple(int(a) for a in axes)
    if len(ax) != 3 or len(set(ax)) != 3 or min(ax) < 0:
        raise ValueError(f"controls axes must be 3 distinct non-negative indices, got {list(ax)}")
    return Frames(wheel_names=names, axes=ax, base_frame=base_frame, odom_frame=odom_frame,  # type: ignore[arg-type]
                  gnss_frame=gnss_frame)


# -- record -> message -----------------------------------------------------------------------------------
def to_msg(rec: Record | ClockTick, fr: Frames = DEFAULT_FRAMES) -> Any:
    """The rclpy message of any record (WheelSpeeds, ImuSample, TireForce, OdomSample, Controls,
    GroundTruth, GnssVelocity, GnssFix, ClockTick)."""
    return record_to_msg(rec, RCLPY_TYPES, fr)


def wheel_speeds_to_msg(rec: WheelSpeeds, fr: Frames = DEFAULT_FRAMES) -> Any:
    """sensor_msgs/JointState: name = wheel names, velocity rad/s."""
    return to_msg(rec, fr)


def imu_to_msg(rec: ImuSample, fr: Frames = DEFAULT_FRAMES) -> Any:
    """sensor_msgs/Imu: orientation from (roll, pitch, yaw), body rates, accelerations."""
    return to_msg(rec, fr)


def tire_force_to_msg(rec: TireForce, fr: Frames = DEFAULT_FRAMES) -> Any:
    """geometry_msgs/WrenchStamped with header.frame_id = the wheel's name."""
    return to_msg(rec, fr)


def odom_to_msg(rec: OdomSample, fr: Frames = DEFAULT_FRAMES) -> Any:
    """nav_msgs/Odometry: pose (x, y, yaw) in the odom frame, twist in the body frame."""
    return to_msg(rec, fr)


def gnss_velocity_to_msg(rec: GnssVelocity, fr: Frames = DEFAULT_FRAMES) -> Any:
    """geometry_msgs/TwistWithCovarianceStamped: world-frame ENU velocity, std^2 on the linear diagonal."""
    return to_msg(rec, fr)


def gnss_fix_to_msg(rec: GnssFix, fr: Frames = DEFAULT_FRAMES) -> Any:
    """sensor_msgs/NavSatFix: WGS-84 latitude, longitude (deg), altitude (m); diagonal ENU covariance."""
    return to_msg(rec, fr)


def controls_to_msg(rec: Controls, fr: Frames = DEFAULT_FRAMES) -> Any:
    """sensor_msgs/Joy: axes[throttle, brake, steering] at the configured indices."""
    return to_msg(rec, fr)


def ground_truth_to_msg(rec: GroundTruth, fr: Frames = DEFAULT_FRAMES) -> Any:
    """diagnostic_msgs/DiagnosticArray with mu_road_<wheel>, mu_max_<wheel>, slip_<wheel>, ..."""
    return to_msg(rec, fr)


def clock_to_msg(t: float) -> Any:
    """rosgraph_msgs/Clock at simulation time ``t`` (s)."""
    return to_msg(ClockTick(t=t))


# -- message -> record -----------------------------------------------------------------------------------
def _one(topic: str, msg: Any, fr: Frames) -> Any:
    recs = msg_to_records(topic, msg, fr)
    return recs[0]


def msg_to_wheel_speeds(msg: Any, fr: Frames = DEFAULT_FRAMES) -> WheelSpeeds:
    """JointState -> WheelSpeeds (by joint name; ValueError names a missing wheel)."""
    return _one("/vehicle/wheel_speeds", msg, fr)


def msg_to_imu(msg: Any, fr: Frames = DEFAULT_FRAMES) -> ImuSample:
    """Imu -> ImuSample (roll, pitch, yaw from the orientation quaternion)."""
    return _one("/vehicle/imu", msg, fr)


def msg_to_tire_force(msg: Any, fr: Frames = DEFAULT_FRAMES) -> TireForce:
    """WrenchStamped -> TireForce (wheel from header.frame_id; ValueError for an unknown frame)."""
    return _one("/vehicle/tire_forces", msg, fr)


def msg_to_odom(msg: Any, fr: Frames = DEFAULT_FRAMES) -> OdomSample:
    """Odometry -> OdomSample (body-frame twist, planar pose)."""
    return _one("/vehicle/odom", msg, fr)


def msg_to_gnss_velocity(msg: Any, fr: Frames = DEFAULT_FRAMES) -> GnssVelocity:
    """TwistWithCovarianceStamped -> GnssVelocity (ENU velocity; std from the linear covariance diagonal)."""
    return _one("/vehicle/gnss/vel", msg, fr)


def msg_to_gnss_fix(msg: Any, fr: Frames = DEFAULT_FRAMES) -> GnssFix:
    """NavSatFix -> GnssFix (std_h, std_v from the covariance diagonal; 0 when its type is unknown)."""
    return _one("/vehicle/gnss/fix", msg, fr)


def msg_to_controls(msg: Any, fr: Frames = DEFAULT_FRAMES) -> Controls:
    """Joy -> Controls (axes at the configured indices)."""
    return _one("/vehicle/controls", msg, fr)


def msg_to_drive_torque(msg: Any, fr: Frames = DEFAULT_FRAMES) -> DriveTorque:
    """JointState -> DriveTorque (joints engine, gear, axle_front, axle_rear; ValueError when it has none)."""
    return _one("/vehicle/drive_torque", msg, fr)


def msg_to_brake_pressure(msg: Any, fr: Frames = DEFAULT_FRAMES) -> BrakePressure:
    """FluidPressure -> BrakePressure (the axle from frame_id)."""
    return _one("/vehicle/brake_pressure", msg, fr)


# -- serialised message (a raw=True subscription's bytes) -> record -------------------------------------------
def _deserialize(data: bytes, type_name: str) -> Any:
    """rclpy's deserialisation (the fallback of :mod:`vehcal_ros.nodes.raw_messages` for bytes it does not read)."""
    from rclpy.serialization import deserialize_message

    return deserialize_message(data, _lookup(type_name))


raw_to_wheel_speeds = raw_messages.decoder("/vehicle/wheel_speeds", _deserialize)
raw_to_imu = raw_messages.decoder("/vehicle/imu", _deserialize)
raw_to_tire_force = raw_messages.decoder("/vehicle/tire_forces", _deserialize)
raw_to_odom = raw_messages.decoder("/vehicle/odom", _deserialize)
raw_to_gnss_velocity = raw_messages.decoder("/vehicle/gnss/vel", _deserialize)
raw_to_controls = raw_messages.decoder("/vehicle/controls", _deserialize)
raw_to_drive_torque = raw_messages.decoder("/vehicle/drive_torque", _deserialize)
raw_to_brake_pressure = raw_messages.decoder("/vehicle/brake_pressure", _deserialize)


def msg_to_ground_truth(msg: Any, fr: Frames = DEFAULT_FRAMES) -> GroundTruth | None:
    """DiagnosticArray -> GroundTruth (None when no status carries ground-truth keys)."""
    recs = msg_to_records("/vehicle/ground_truth", msg, fr)
    return recs[0] if recs else None


def msg_to_clock(msg: Any) -> float:
    """Clock -> seconds."""
    return stamp_sec(msg.clock)


def msg_to_record(topic: str, msg: Any, fr: Frames = DEFAULT_FRAMES) -> Record | None:
    """Any vehicle topic (canonical name) -> its record (None for a DiagnosticArray without ground truth)."""
    recs = msg_to_records(topic, msg, fr)
    return recs[0] if recs else None


# -- output topics -----------------------------------------------------------------------------------------
def grip_to_msg(t: float, scope: str, mean: float, lower: float, upper: float) -> Any:
    """``/vehcal/grip/<scope>`` Vector3Stamped: x = mu_max mean, y = lower, z = upper; frame_id = scope."""
    return vector3_stamped(RCLPY_TYPES, t, scope, mean, lower, upper)


def grip_curve_to_msg(rows: np.ndarray, labels: Sequence[str] = ("quantity", "slip_grid")) -> Any:
    """``/vehcal/grip_curve/<scope>`` Float64MultiArray of rows (slip, q05, q50, q95) x slip grid."""
    return float64_multiarray(RCLPY_TYPES, rows, labels)


def diagnostics_to_msg(t: float, statuses: Sequence[tuple[str, str, int, str, Mapping[str, Any]]]) -> Any:
    """DiagnosticArray from (name, hardware_id, level, message, values) tuples (full-precision floats)."""
    return diagnostic_array(RCLPY_TYPES, t, statuses)
