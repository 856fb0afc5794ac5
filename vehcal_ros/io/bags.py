"""rosbag2 files (mcap and sqlite3) read and written with ``rosbags`` — no rclpy.

Records (vehcal_ros/records.py) travel under the canonical topic names of docs/nodes.md
(``DEFAULT_TOPICS``); ``write_bag`` converts them to standard messages, ``read_bag`` converts back and yields
``(canonical_topic, record)`` in header-stamp order. The record <-> message code here is duck-typed over a
*type lookup* (``MsgTypes``), so ``nodes/conversions.py`` reuses it with rclpy's message classes: rosbags and
rclpy messages share field names, and every field is passed explicitly (rosbags needs all of them).

Message mapping (wheel names default to ``WHEELS``):

========================  ==============================  ==============================================
topic                     type                            content
========================  ==============================  ==============================================
/vehicle/wheel_speeds     sensor_msgs/JointState          name = wheel names, velocity rad/s, effort =
                                                          net wheel torque N m (empty when not reported)
/vehicle/imu              sensor_msgs/Imu                 orientation from roll, pitch, yaw; rates; accel.
/vehicle/tire_forces      geometry_msgs/WrenchStamped     one per wheel, frame_id = wheel name, force N
/vehicle/odom             nav_msgs/Odometry               pose x, y, yaw; twist in the body frame
/vehicle/controls         sensor_msgs/Joy                 axes [throttle, brake, steering] (indices config.)
/vehicle/ground_truth     diagnostic_msgs/DiagnosticArray mu_road_<wheel>, mu_max_<wheel>, slip_<wheel>,
                                                          slip_angle_<wheel>, fx_<wheel>, fz_<wheel> (true
                                                          tire forces, N), constant.<name>
/vehicle/gnss/vel         geometry_msgs/                  world-frame ENU velocity (linear x east, y north,
                          TwistWithCovarianceStamped      z up), frame_id = the antenna frame; covariance
                                                          diagonal std^2 on the linear axes, angular axes
                                                          not measured (zero twist, variance 1e6)
/vehicle/gnss/fix         sensor_msgs/NavSatFix           WGS-84 latitude, longitude (deg), ellipsoidal
                                                          altitude (m); position_covariance diagonal
                                                          (east, north, up) std_h^2, std_h^2, std_v^2 m^2,
                                                          position_covariance_type DIAGONAL_KNOWN (UNKNOWN
                                                          and zeros when no std); status FIX, service GPS;
                                                          frame_id = the antenna frame
/vehicle/drive_torque     sensor_msgs/JointState          CAN drive torque by joint name: engine (effort
                                                          N m), gear (position: engaged gear), axle_front,
                                                          axle_rear (effort N m); joints not reported are
                                                          left out
/vehicle/brake_pressure   sensor_msgs/FluidPressure       brake line pressure, Pa; frame_id front_axle or
                                                          rear_axle (any other: the master cylinder's)
/clock                    rosgraph_msgs/Clock             simulation time (written, not read back)
========================  ==============================  ==============================================

The GNSS velocity type is the one ``ublox_gps`` publishes (``fix_velocity``) and ``robot_localization``
reads; ``nmea_navsat_driver``'s ``vel`` is a TwistStamped with the same ENU axes but no covariance (relay it
into this type to use it). The header stamp is the measurement time, not the (later) arrival time.
"""

from __future__ import annotations

import heapq
import math
import os
import shutil
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vehcal_ros.errors import InputError
from vehcal_ros.models.sensors import SENSOR_TOPICS, ClockTick
from vehcal_ros.records import (
    AXLE_FRAMES,
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

DEFAULT_TOPICS: dict[str, str] = dict(SENSOR_TOPICS)
"""Sensor key -> canonical topic name (``wheel_speeds`` -> ``/vehicle/wheel_speeds``, ..., ``clock``)."""

TOPIC_TYPES: dict[str, str] = {
    "/vehicle/wheel_speeds": "sensor_msgs/msg/JointState",
    "/vehicle/imu": "sensor_msgs/msg/Imu",
    "/vehicle/tire_forces": "geometry_msgs/msg/WrenchStamped",
    "/vehicle/odom": "nav_msgs/msg/Odometry",
    "/vehicle/controls": "sensor_msgs/msg/Joy",
    "/vehicle/ground_truth": "diagnostic_msgs/msg/DiagnosticArray",
    "/clock": "rosgraph_msgs/msg/Clock",
    "/vehicle/gnss/vel": "geometry_msgs/msg/TwistWithCovarianceStamped",
    "/vehicle/gnss/fix": "sensor_msgs/msg/NavSatFix",
    "/vehicle/drive_torque": "sensor_msgs/msg/JointState",
    "/vehicle/brake_pressure": "sensor_msgs/msg/FluidPressure",
}
"""Canonical topic -> message type (the order ranks records of equal stamp in ``read_bag``: new topics go last)."""

RECORD_TOPICS: dict[type, str] = {
    WheelSpeeds: "/vehicle/wheel_speeds", ImuSample: "/vehicle/imu", TireForce: "/vehicle/tire_forces",
    OdomSample: "/vehicle/odom", Controls: "/vehicle/controls", GroundTruth: "/vehicle/ground_truth",
    ClockTick: "/clock", GnssVelocity: "/vehicle/gnss/vel", GnssFix: "/vehicle/gnss/fix",
    DriveTorque: "/vehicle/drive_torque", BrakePressure: "/vehicle/brake_pressure",
}

DRIVE_JOINTS: tuple[str, ...] = ("engine", "gear", "axle_front", "axle_rear")
"""Joint names of ``/vehicle/drive_torque`` (the DriveTorque fields): ``gear`` carries its value in ``position``,
the others in ``effort``."""

GNSS_UNMEASURED_VARIANCE = 1.0e6
"""(rad/s)^2 on the angular diagonal of the GNSS twist covariance: a receiver does not measure rotation."""

NAVSAT_STATUS_FIX = 0
NAVSAT_SERVICE_GPS = 1
NAVSAT_COVARIANCE_UNKNOWN = 0
NAVSAT_COVARIANCE_DIAGONAL_KNOWN = 2
"""sensor_msgs/NavSatStatus and NavSatFix constants the GNSS fix conversion writes."""

GROUND_TRUTH_STATUS = "vehicle_simulator: ground_truth"
GROUND_TRUTH_HARDWARE_ID = "vehicle_simulator"
STORAGES = ("mcap", "sqlite3")


@dataclass(frozen=True)
class Frames:
    """Names written into / expected from messages.

    wheel_names: JointState names and WrenchStamped frame ids, in FL, FR, RL, RR order.
    axes: indices of (throttle, brake, steering) in Joy.axes.
    """

    wheel_names: tuple[str, ...] = WHEELS
    base_frame: str = "base_link"
    odom_frame: str = "odom"
    axes: tuple[int, int, int] = (0, 1, 2)
    gnss_frame: str = "gnss"


DEFAULT_FRAMES = Frames()


# ---------------------------------------------------------------------------------------------------------
# time and orientation
# ---------------------------------------------------------------------------------------------------------
def sec_to_ns(t: float) -> int:
    """Seconds -> integer nanoseconds (rounded)."""
    return int(round(float(t) * 1e9))


def split_ns(ns: int) -> tuple[int, int]:
    """Nanoseconds -> (sec, nanosec) with 0 <= nanosec < 1e9."""
    sec, nsec = divmod(int(ns), 1_000_000_000)
    return int(sec), int(nsec)


def stamp_sec(stamp: Any) -> float:
    """builtin_interfaces/Time -> seconds, exact to the nanosecond."""
    return (int(stamp.sec) * 1_000_000_000 + int(stamp.nanosec)) / 1e9


def quat_from_rpy(roll: float, pitch: float, yaw: float) -> tuple[float, float, float, float]:
    """ZYX (yaw, pitch, roll) Euler angles -> quaternion (x, y, z, w)."""
    cr, sr = math.cos(roll / 2), math.sin(roll / 2)
    cp, sp = math.cos(pitch / 2), math.sin(pitch / 2)
    cy, sy = math.cos(yaw / 2), math.sin(yaw / 2)
    return (sr * cp * cy - cr * sp * sy, cr * sp * cy + sr * cp * sy,
            cr * cp * sy - sr * sp * cy, cr * cp * cy + sr * sp * sy)


def rpy_from_quat(x: float, y: float, z: float, w: float) -> tuple[float, float, float]:
    """Quaternion (x, y, z, w) -> ZYX Euler angles (roll, pitch, yaw)."""
    n = math.sqrt(x * x + y * y + z * z + w * w)
    if n == 0.0:
        return 0.0, 0.0, 0.0
    x, y, z, w = x / n, y / n, z / n, w / n
    roll = math.atan2(2 * (w * x + y * z), 1 - 2 * (x * x + y * y))
    pitch = math.asin(max(-1.0, min(1.0, 2 * (w * y - z * x))))
    yaw = math.atan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z))
    return roll, pitch, yaw


# ---------------------------------------------------------------------------------------------------------
# record -> message (duck-typed over a type lookup)
# ---------------------------------------------------------------------------------------------------------
class MsgTypes:
    """Message classes by full name (``sensor_msgs/msg/Imu``) plus the one representation difference:
    rclpy's ``byte`` fields are ``bytes``, rosbags' are ``int``."""

    def __init__(self, lookup: Callable[[str], type], byte_is_bytes: bool = False) -> None:
        self._lookup = lookup
        self._cache: dict[str, type] = {}
        self.byte_is_bytes = byte_is_bytes

    def __call__(self, name: str) -> type:
        cls = self._cache.get(name)
        if cls is None:
            cls = self._cache[name] = self._lookup(name)
        return cls

    def byte(self, value: int) -> Any:
        return bytes([int(value)]) if self.byte_is_bytes else int(value)

    def time(self, t: float | None = None, ns: int | None = None) -> Any:
        sec, nsec = split_ns(sec_to_ns(t) if ns is None else ns)
        return self("builtin_interfaces/msg/Time")(sec=sec, nanosec=nsec)

    def header(self, t: float, frame_id: str = "") -> Any:
        return self("std_msgs/msg/Header")(stamp=self.time(t), frame_id=frame_id)

    def vector3(self, x: float, y: float, z: float) -> Any:
        return self("geometry_msgs/msg/Vector3")(x=float(x), y=float(y), z=float(z))


def _f64(values: Iterable[float]) -> np.ndarray:
    return np.asarray(list(values), dtype=np.float64)


def record_to_msg(rec: Any, T: MsgTypes, frames: Frames = DEFAULT_FRAMES) -> Any:
    """Build the message of ``rec`` (any record of signals.py, or ``ClockTick``)."""
    if isinstance(rec, WheelSpeeds):
        omega = np.asarray(rec.omega, dtype=np.float64).reshape(-1)
        effort = _f64([]) if rec.torque is None else np.asarray(rec.torque, dtype=np.float64).reshape(-1).copy()
        return T("sensor_msgs/msg/JointState")(header=T.header(rec.t, frames.base_frame),
                                               name=list(frames.wheel_names), position=_f64([]),
                                               velocity=omega.copy(), effort=effort)
    if isinstance(rec, ImuSample):
        qx, qy, qz, qw = quat_from_rpy(rec.roll, rec.pitch, rec.yaw)
        return T("sensor_msgs/msg/Imu")(
            header=T.header(rec.t, frames.base_frame),
            orientation=T("geometry_msgs/msg/Quaternion")(x=qx, y=qy, z=qz, w=qw),
            orientation_covariance=np.zeros(9), angular_velocity=T.vector3(rec.roll_rate, rec.pitch_rate, rec.yaw_rate),
            angular_velocity_covariance=np.zeros(9), linear_acceleration=T.vector3(rec.ax, rec.ay, rec.az),
            linear_acceleration_covariance=np.zeros(9))
    if isinstance(rec, TireForce):
        return T("geometry_msgs/msg/WrenchStamped")(
            header=T.header(rec.t, frames.wheel_names[rec.wheel]),
            wrench=T("geometry_msgs/msg/Wrench")(force=T.vector3(rec.fx, rec.fy, rec.fz),
                                                 torque=T.vector3(0.0, 0.0, 0.0)))
    if isinstance(rec, OdomSample):
        qx, qy, qz, qw = quat_from_rpy(0.0, 0.0, rec.yaw)
        pose = T("geometry_msgs/msg/Pose")(position=T("geometry_msgs/msg/Point")(x=float(rec.x), y=float(rec.y), z=0.0),
                                           orientation=T("geometry_msgs/msg/Quaternion")(x=qx, y=qy, z=qz, w=qw))
        twist = T("geometry_msgs/msg/Twist")(linear=T.vector3(rec.u, rec.v, 0.0),
                                             angular=T.vector3(0.0, 0.0, rec.yaw_rate))
        return T("nav_msgs/msg/Odometry")(
            header=T.header(rec.t, frames.odom_frame), child_frame_id=frames.base_frame,
            pose=T("geometry_msgs/msg/PoseWithCovariance")(pose=pose, covariance=np.zeros(36)),
            twist=T("geometry_msgs/msg/TwistWithCovariance")(twist=twist, covariance=np.zeros(36)))
    if isinstance(rec, Controls):
        axes = np.zeros(max(frames.axes) + 1, dtype=np.float32)
        axes[frames.axes[0]], axes[frames.axes[1]], axes[frames.axes[2]] = rec.throttle, rec.brake, rec.steering
        return T("sensor_msgs/msg/Joy")(header=T.header(rec.t, frames.base_frame), axes=axes,
                                        buttons=np.zeros(0, dtype=np.int32))
    if isinstance(rec, GroundTruth):
        values: dict[str, float] = {}
        for i, w in enumerate(frames.wheel_names):
            values[f"mu_road_{w}"] = rec.mu_road[i]
            values[f"mu_max_{w}"] = rec.mu_max[i]
            values[f"slip_{w}"] = rec.slip[i]
            values[f"slip_angle_{w}"] = rec.slip_angle[i]
            if rec.fx is not None:
                values[f"fx_{w}"] = rec.fx[i]
            if rec.fz is not None:
                values[f"fz_{w}"] = rec.fz[i]
        for k, v in rec.constants.items():
            values[f"constant.{k}"] = v
        status = diagnostic_status(T, GROUND_TRUTH_STATUS, GROUND_TRUTH_HARDWARE_ID, 0, "simulation ground truth",
                                   values)
        return T("diagnostic_msgs/msg/DiagnosticArray")(header=T.header(rec.t, frames.base_frame), status=[status])
    if isinstance(rec, GnssVelocity):
        var = float(rec.std) ** 2
        cov = np.zeros(36)
        cov[0] = cov[7] = cov[14] = var
        cov[21] = cov[28] = cov[35] = GNSS_UNMEASURED_VARIANCE
        twist = T("geometry_msgs/msg/Twist")(linear=T.vector3(rec.ve, rec.vn, rec.vu),
                                             angular=T.vector3(0.0, 0.0, 0.0))
        return T("geometry_msgs/msg/TwistWithCovarianceStamped")(
            header=T.header(rec.t, frames.gnss_frame),
            twist=T("geometry_msgs/msg/TwistWithCovariance")(twist=twist, covariance=cov))
    if isinstance(rec, GnssFix):
        cov = np.zeros(9)
        known = rec.std_h > 0.0 and rec.std_v > 0.0
        if known:
            cov[0] = cov[4] = float(rec.std_h) ** 2
            cov[8] = float(rec.std_v) ** 2
        return T("sensor_msgs/msg/NavSatFix")(
            header=T.header(rec.t, frames.gnss_frame),
            status=T("sensor_msgs/msg/NavSatStatus")(status=int(rec.status), service=NAVSAT_SERVICE_GPS),
            latitude=float(rec.latitude), longitude=float(rec.longitude), altitude=float(rec.altitude),
            position_covariance=cov,
            position_covariance_type=NAVSAT_COVARIANCE_DIAGONAL_KNOWN if known else NAVSAT_COVARIANCE_UNKNOWN)
    if isinstance(rec, DriveTorque):
        joints = [(j, getattr(rec, j)) for j in DRIVE_JOINTS if math.isfinite(getattr(rec, j))]
        position = [v if j == "gear" else 0.0 for j, v in joints]
        effort = [0.0 if j == "gear" else v for j, v in joints]
        return T("sensor_msgs/msg/JointState")(header=T.header(rec.t, frames.base_frame),
                                               name=[j for j, _ in joints], position=_f64(position),
                                               velocity=_f64([]), effort=_f64(effort))
    if isinstance(rec, BrakePressure):
        frame = AXLE_FRAMES[rec.axle] if rec.axle >= 0 else "master_cylinder"
        return T("sensor_msgs/msg/FluidPressure")(header=T.header(rec.t, frame),
                                                  fluid_pressure=float(rec.pressure), variance=0.0)
    if isinstance(rec, ClockTick):
        return T("rosgraph_msgs/msg/Clock")(clock=T.time(rec.t))
    raise TypeError(f"no message conversion for {type(rec).__name__}")


def diagnostic_status(T: MsgTypes, name: str, hardware_id: str, level: int, message: str,
                      values: Mapping[str, Any]) -> Any:
    """DiagnosticStatus with full-precision (``repr``) floats so values read back exactly."""
    kv = T("diagnostic_msgs/msg/KeyValue")
    vals = [kv(key=str(k), value=repr(float(v)) if isinstance(v, (float, np.floating)) else str(v))
            for k, v in values.items()]
    return T("diagnostic_msgs/msg/DiagnosticStatus")(level=T.byte(level), name=name, message=message,
                                                     hardware_id=hardware_id, values=vals)


def diagnostic_array(T: MsgTypes, t: float, statuses: Sequence[tuple[str, str, int, str, Mapping[str, Any]]]) -> Any:
    """DiagnosticArray from (name, hardware_id, level, message, values) tuples."""
    return T("diagnostic_msgs/msg/DiagnosticArray")(
        header=T.header(t), status=[diagnostic_status(T, *s) for s in statuses])


def vector3_stamped(T: MsgTypes, t: float, frame_id: str, x: float, y: float, z: float) -> Any:
    """geometry_msgs/Vector3Stamped (the grip output: x mean, y lower, z upper)."""
    return T("geometry_msgs/msg/Vector3Stamped")(header=T.header(t, frame_id), vector=T.vector3(x, y, z))


def float64_multiarray(T: MsgTypes, rows: np.ndarray, labels: Sequence[str] = ("row", "column")) -> Any:
    """std_msgs/Float64MultiArray of a 2-D array (row-major) with labelled dimensions."""
    a = np.atleast_2d(np.asarray(rows, dtype=np.float64))
    dim = T("std_msgs/msg/MultiArrayDimension")
    layout = T("std_msgs/msg/MultiArrayLayout")(
        dim=[dim(label=labels[0], size=a.shape[0], stride=a.size), dim(label=labels[1], size=a.shape[1],
                                                                       stride=a.shape[1])],
        data_offset=0)
    return T("std_msgs/msg/Float64MultiArray")(layout=layout, data=a.reshape(-1).copy())


# ---------------------------------------------------------------------------------------------------------
# message -> record (duck-typed: works on rosbags and rclpy messages alike)
# ---------------------------------------------------------------------------------------------------------
def msg_to_records(topic: str, msg: Any, frames: Frames = DEFAULT_FRAMES) -> list[Record]:
    """Records of one message on canonical ``topic``; ValueError names what is missing or unexpected."""
    if topic == "/vehicle/wheel_speeds":
        names = msg.name
        vel = msg.velocity
        if len(vel) != len(names):
            raise ValueError(f"JointState has {len(names)} names but {len(vel)} velocities")
        eff = msg.effort
        has_torque = len(eff) == len(names)
        if list(names[:4]) == list(frames.wheel_names):   # the usual layout: no search, no array per message
            omega = (float(vel[0]), float(vel[1]), float(vel[2]), float(vel[3]))
            torque = (float(eff[0]), float(eff[1]), float(eff[2]), float(eff[3])) if has_torque else None
        else:
            names = list(names)
            for w in frames.wheel_names:
                if w not in names:
                    raise ValueError(f"JointState has no joint named {w!r} (names: {', '.join(names) or 'none'})")
            idx = [names.index(w) for w in frames.wheel_names]
            omega = tuple(float(vel[i]) for i in idx)
            torque = tuple(float(eff[i]) for i in idx) if has_torque else None
        return [WheelSpeeds(t=stamp_sec(msg.header.stamp), omega=omega, torque=torque)]
    if topic == "/vehicle/imu":
        o = msg.orientation
        roll, pitch, yaw = rpy_from_quat(o.x, o.y, o.z, o.w)
        av, la = msg.angular_velocity, msg.linear_acceleration
        return [ImuSample(t=stamp_sec(msg.header.stamp), roll=roll, roll_rate=float(av.x), yaw_rate=float(av.z),
                          ax=float(la.x), ay=float(la.y), az=float(la.z), pitch=pitch, yaw=yaw,
                          pitch_rate=float(av.y))]
    if topic == "/vehicle/tire_forces":
        fid = msg.header.frame_id
        if fid not in frames.wheel_names:
            raise ValueError(f"WrenchStamped frame_id {fid!r} is not a wheel name ({', '.join(frames.wheel_names)})")
        f = msg.wrench.force
        return [TireForce(t=stamp_sec(msg.header.stamp), wheel=frames.wheel_names.index(fid), fx=float(f.x),
                          fy=float(f.y), fz=float(f.z))]
    if topic == "/vehicle/odom":
        q = msg.pose.pose.orientation
        _, _, yaw = rpy_from_quat(q.x, q.y, q.z, q.w)
        tw = msg.twist.twist
        p = msg.pose.pose.position
        return [OdomSample(t=stamp_sec(msg.header.stamp), u=float(tw.linear.x), v=float(tw.linear.y),
                           yaw_rate=float(tw.angular.z), x=float(p.x), y=float(p.y), yaw=yaw)]
    if topic == "/vehicle/controls":
        axes = list(msg.axes)
        if len(axes) <= max(frames.axes):
            raise ValueError(f"Joy has {len(axes)} axes; need indices {frames.axes} (throttle, brake, steering)")
        i, j, k = frames.axes
        return [Controls(t=stamp_sec(msg.header.stamp), throttle=float(axes[i]), brake=float(axes[j]),
                         steering=float(axes[k]))]
    if topic == "/vehicle/gnss/vel":
        lin = msg.twist.twist.linear
        cov = msg.twist.covariance
        var = 0.5 * (float(cov[0]) + float(cov[7]))
        return [GnssVelocity(t=stamp_sec(msg.header.stamp), ve=float(lin.x), vn=float(lin.y), vu=float(lin.z),
                             std=math.sqrt(var) if var > 0.0 and math.isfinite(var) else 0.0)]
    if topic == "/vehicle/gnss/fix":
        cov = msg.position_covariance
        known = int(msg.position_covariance_type) != NAVSAT_COVARIANCE_UNKNOWN
        var_h, var_v = 0.5 * (float(cov[0]) + float(cov[4])), float(cov[8])
        return [GnssFix(t=stamp_sec(msg.header.stamp), latitude=float(msg.latitude), longitude=float(msg.longitude),
                        altitude=float(msg.altitude),
                        std_h=math.sqrt(var_h) if known and var_h > 0.0 and math.isfinite(var_h) else 0.0,
                        std_v=math.sqrt(var_v) if known and var_v > 0.0 and math.isfinite(var_v) else 0.0,
                        status=int(msg.status.status))]
    if topic == "/vehicle/ground_truth":
        return [r for s in msg.status if (r := _ground_truth(msg, s, frames)) is not None]
    if topic == "/vehicle/drive_torque":
        names, pos, eff = list(msg.name), msg.position, msg.effort
        values = {}
        for i, name in enumerate(names):
            if name == "gear":
                if i < len(pos):
                    values["gear"] = float(pos[i])
            elif name in DRIVE_JOINTS and i < len(eff):
                values[name] = float(eff[i])
        if not values:
            raise ValueError(f"JointState has none of the drive joints {', '.join(DRIVE_JOINTS)} "
                             f"(names: {', '.join(names) or 'none'})")
        return [DriveTorque(t=stamp_sec(msg.header.stamp), **values)]
    if topic == "/vehicle/brake_pressure":
        fid = msg.header.frame_id
        return [BrakePressure(t=stamp_sec(msg.header.stamp), axle=AXLE_FRAMES.index(fid) if fid in AXLE_FRAMES else -1,
                              pressure=float(msg.fluid_pressure))]
    raise ValueError(f"no record conversion for topic {topic!r}")


def _ground_truth(msg: Any, status: Any, frames: Frames) -> GroundTruth | None:
    vals = {kv.key: kv.value for kv in status.values}
    if not any(k.startswith("mu_road_") for k in vals):
        return None
    arrays = {}
    for key in ("mu_road", "mu_max", "slip", "slip_angle", "fx", "fz"):
        a = np.full(len(frames.wheel_names), np.nan)
        for i, w in enumerate(frames.wheel_names):
            name = f"{key}_{w}"
            if name in vals:
                a[i] = float(vals[name])
        arrays[key] = a
    consts = {k[len("constant."):]: float(v) for k, v in vals.items() if k.startswith("constant.")}
    forces = {k: arrays[k] if np.any(np.isfinite(arrays[k])) else None for k in ("fx", "fz")}
    return GroundTruth(t=stamp_sec(msg.header.stamp), mu_road=arrays["mu_road"], slip=arrays["slip"],
                       slip_angle=arrays["slip_angle"], mu_max=arrays["mu_max"], constants=consts, **forces)


# ---------------------------------------------------------------------------------------------------------
# writing
# ---------------------------------------------------------------------------------------------------------
def typestore():
    """The rosbags type store of the newest ROS 2 distribution it knows (Kilted when available)."""
    from rosbags.typesys import Stores, get_typestore

    store = getattr(Stores, "ROS2_KILTED", None) or Stores.ROS2_JAZZY
    return get_typestore(store)


def rosbags_types(store: Any = None) -> MsgTypes:
    """``MsgTypes`` over a rosbags type store (default: ``typestore()``)."""
    store = store or typestore()
    return MsgTypes(lambda name: store.types[name], byte_is_bytes=False)


class BagWriter:
    """A rosbag2 writer (context manager): records and arbitrary messages, one connection per topic.

    ``write_record(topic, record, log_time)`` converts a record (``topic`` = canonical name, renamed by
    ``topics``); ``write_message(topic, msgtype, msg, stamp_ns)`` writes any rosbags message (e.g. node
    outputs: Vector3Stamped, Float64MultiArray, DiagnosticArray). ``path`` must not exist yet.
    """

    def __init__(self, path: str | os.PathLike, storage: str = "mcap", *, topics: Mapping[str, str] | None = None,
                 frames: Frames = DEFAULT_FRAMES) -> None:
        from rosbags.rosbag2 import StoragePlugin, Writer

        if storage not in STORAGES:
            raise InputError(f"storage {storage!r} is not one of {', '.join(STORAGES)}")
        self.path = Path(path)
        if self.path.exists():
            raise InputError(f"{self.path}: already exists; refusing to overwrite")
        self.store = typestore()
        self.types = rosbags_types(self.store)
        self.frames = frames
        self.rename = _topic_rename(topics)
        plugin = StoragePlugin.MCAP if storage == "mcap" else StoragePlugin.SQLITE3
        self._writer = Writer(self.path, version=Writer.VERSION_LATEST, storage_plugin=plugin)
        self._conns: dict[tuple[str, str], Any] = {}
        self.counts: dict[str, int] = {}

    def __enter__(self) -> BagWriter:
        self._writer.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self._writer.close()

    def write_message(self, topic: str, msgtype: str, msg: Any, stamp_ns: int) -> None:
        key = (topic, msgtype)
        conn = self._conns.get(key)
        if conn is None:
            conn = self._conns[key] = self._writer.add_connection(topic, msgtype, typestore=self.store)
        self._writer.write(conn, int(stamp_ns), self.store.serialize_cdr(msg, msgtype))
        self.counts[topic] = self.counts.get(topic, 0) + 1

    def write_record(self, topic: str | None, rec: Any, log_time: float | None = None) -> None:
        canonical = RECORD_TOPICS.get(type(rec))
        if canonical is None:
            raise TypeError(f"cannot write a {type(rec).__name__} to a bag")
        out_topic = self.rename.get(topic or canonical, topic or canonical)
        msg = record_to_msg(rec, self.types, self.frames)
        self.write_message(out_topic, TOPIC_TYPES[canonical], msg, sec_to_ns(rec.t if log_time is None else log_time))


def _topic_rename(topics: Mapping[str, str] | None) -> dict[str, str]:
    """Normalise a {sensor key or canonical topic: actual topic} mapping to {canonical: actual}."""
    out: dict[str, str] = {}
    for k, v in (topics or {}).items():
        canonical = DEFAULT_TOPICS.get(k, k)
        if canonical not in TOPIC_TYPES:
            raise InputError(f"topic map: {k!r} is not a known topic (known: {', '.join(TOPIC_TYPES)})")
        if not isinstance(v, str) or not v.startswith("/"):
            raise InputError(f"topic map: {k!r} -> {v!r} must be an absolute topic name")
        out[canonical] = v
    return out


def write_bag(path: str | os.PathLike, records: Iterable[tuple], storage: str = "mcap",
              topics: Mapping[str, str] | None = None, frames: Frames = DEFAULT_FRAMES) -> dict[str, int]:
    """Write ``(topic, record)`` or ``(topic, record, log_time_s)`` items to a new bag; return counts per topic.

    ``topics`` renames canonical topics (``{"/vehicle/imu": "/car/imu"}`` or ``{"imu": "/car/imu"}``).
    The log time defaults to the record's stamp; the simulator passes the release time (stamp + latency).
    """
    with BagWriter(path, storage, topics=topics, frames=frames) as w:
        for item in records:
            if len(item) == 3:
                w.write_record(item[0], item[1], item[2])
            else:
                w.write_record(item[0], item[1])
        return dict(w.counts)


def write_topic_messages(path: str | os.PathLike, messages: Iterable[tuple[str, str, Any, int]],
                         storage: str = "mcap") -> dict[str, int]:
    """Write ``(topic, msgtype, rosbags_msg, stamp_ns)`` items (e.g. recorded node outputs) to a new bag."""
    with BagWriter(path, storage) as w:
        for topic, msgtype, msg, stamp_ns in messages:
            w.write_message(topic, msgtype, msg, stamp_ns)
        return dict(w.counts)


def remove_bag(path: str | os.PathLike) -> None:
    """Delete a bag directory (or file) if present."""
    p = Path(path)
    if p.is_dir():
        shutil.rmtree(p, ignore_errors=True)
    elif p.exists():
        p.unlink()


# ---------------------------------------------------------------------------------------------------------
# reading
# ---------------------------------------------------------------------------------------------------------
def _open_reader(path: Path):
    from rosbags.highlevel import AnyReader

    if not path.exists():
        raise InputError(f"no such bag: {path}")
    target = path
    if path.is_file() and path.suffix in (".mcap", ".db3") and (path.parent / "metadata.yaml").exists():
        target = path.parent
    if target.is_dir():
        looks_like_bag = (target / "metadata.yaml").exists()
    else:
        looks_like_bag = target.suffix in (".mcap", ".db3")
    try:
        reader = AnyReader([target], default_typestore=typestore())
        reader.open()
    except Exception as exc:  # rosbags raises several error types for non-bags and damaged files
        if looks_like_bag:
            raise InputError(f"{path}: truncated or corrupt bag ({_short(exc)})") from None
        raise InputError(f"{path}: not a rosbag2 bag (expected a directory with metadata.yaml, or an "
                         f".mcap/.db3 file): {_short(exc)}") from None
    return reader


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{exc.__class__.__name__}: {text[0] if text else ''}".rstrip(": ")


def bag_span(path: str | os.PathLike) -> tuple[float, float]:
    """(first, last) message time of a bag in s, from its metadata (log times: for progress estimates)."""
    reader = _open_reader(Path(path))
    try:
        return float(reader.start_time) * 1e-9, float(reader.end_time) * 1e-9
    finally:
        reader.close()


def bag_topics(path: str | os.PathLike) -> dict[str, tuple[str, int]]:
    """Topic -> (message type, message count) of a bag."""
    reader = _open_reader(Path(path))
    try:
        out: dict[str, tuple[str, int]] = {}
        for c in reader.connections:
            prev = out.get(c.topic, (c.msgtype, 0))
            out[c.topic] = (c.msgtype, prev[1] + int(c.msgcount))
        return out
    finally:
        reader.close()


def read_bag(path: str | os.PathLike, topic_map: Mapping[str, str] | None = None, *,
             frames: Frames = DEFAULT_FRAMES, reorder_window: float = 1.0,
             admit: Callable[[str, Record], bool] | None = None) -> Iterator[tuple[str, Record]]:
    """Yield ``(canonical_topic, record)`` from a bag in header-stamp order (ties: canonical topic order).

    topic_map: {sensor key or canonical topic: topic in the bag}, e.g. ``{"imu": "/car/imu"}``.
    reorder_window: s; records are sorted by stamp within this window (it must cover the largest latency
    between a message's stamp and its position in the bag). ``/clock`` is not read back.
    InputError: not a bag, truncated or corrupt, no relevant topics, or a relevant topic with an unexpected
    or undecodable message type (named).
    admit: called with ``(canonical_topic, record)`` in the bag's own order (the order the recorder received
    the messages: a live subscriber's arrival order) before the stamp reordering; records it returns False for
    are dropped (a bag replay's input guards, :mod:`vehcal_ros.replay.guards`).
    """
    path = Path(path)
    rename = _topic_rename(topic_map)
    wanted = {rename.get(c, c): c for c in TOPIC_TYPES if c != "/clock"}  # bag topic -> canonical
    reader = _open_reader(path)
    try:
        conns = []
        for c in reader.connections:
            canonical = wanted.get(c.topic)
            if canonical is None:
                continue
            expected = TOPIC_TYPES[canonical]
            if c.msgtype != expected:
                raise InputError(f"{path}: topic {c.topic} has message type {c.msgtype}, expected {expected}")
            conns.append(c)
        if not conns:
            have = ", ".join(f"{c.topic} ({c.msgtype})" for c in reader.connections) or "none"
            raise InputError(f"{path}: no relevant topics (looked for {', '.join(wanted)}); the bag has: {have}")
        # equal stamps: canonical topic order, then bag order (so topic names and storage do not matter)
        rank = {c: k for k, c in enumerate(TOPIC_TYPES)}
        heap: list[tuple[float, int, int, str, Record]] = []
        seq = 0
        newest = -math.inf
        it = reader.messages(connections=conns)
        while True:
            try:
                item = next(it)
            except StopIteration:
                break
            except InputError:
                raise
            except Exception as exc:
                raise InputError(f"{path}: truncated or corrupt bag ({_short(exc)})") from None
            conn, _, raw = item
            canonical = wanted[conn.topic]
            try:
                msg = reader.deserialize(raw, conn.msgtype)
            except Exception as exc:
                raise InputError(f"{path}: cannot decode a {conn.msgtype} message on {conn.topic} "
                                 f"({_short(exc)})") from None
            try:
                recs = msg_to_records(canonical, msg, frames)
            except ValueError as exc:
                raise InputError(f"{path}: topic {conn.topic}: {exc}") from None
            for rec in recs:
                if admit is not None and not admit(canonical, rec):
                    continue
                seq += 1
                heapq.heappush(heap, (rec.t, rank[canonical], seq, canonical, rec))
                newest = max(newest, rec.t)
            while heap and heap[0][0] <= newest - reorder_window:
                *_, topic, rec = heapq.heappop(heap)
                yield topic, rec
        while heap:
            *_, topic, rec = heapq.heappop(heap)
            yield topic, rec
    finally:
        reader.close()
