"""Serialised sensor messages (the CDR bytes a ``raw=True`` subscription hands over) -> records.

The live nodes subscribe to their sensor topics with ``raw=True`` and read the few fields they use straight
from the bytes: rclpy's deserialisation builds every field of a message as Python objects (Odometry's two
36-element covariances as numpy arrays) and was the largest part of a message's cost in the nodes
(benchmarks/results/ingestion_profile.md). The bytes are read into light attribute views with the field names of the
ROS message (only the fields :func:`vehcal_ros.io.bags.msg_to_records` reads), and that same function makes the
record, so a live node, the typed conversion (``conversions.msg_to_*``) and bag replay give identical records.

Encodings read: plain CDR, XCDR1 (encapsulation 0x0000 / 0x0001, 8-byte primitives aligned to 8) and XCDR2
(0x0006 / 0x0007, aligned to at most 4), either byte order; alignment counts from the end of the 4-byte
encapsulation header. Bytes in any other encoding, or that end early, are deserialised by rclpy and converted
as before (:func:`decoder`), so nothing is lost to the shortcut.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from types import SimpleNamespace as _NS
from typing import Any

from vehcal_ros.io.bags import Frames, msg_to_records

# encapsulation id -> (byte order, largest alignment)
_ENCODINGS = {0x0000: (">", 8), 0x0001: ("<", 8), 0x0006: (">", 4), 0x0007: ("<", 4)}


class _Formats:
    """Precompiled struct layouts of one byte order."""

    def __init__(self, order: str) -> None:
        self.header = struct.Struct(order + "iII")      # stamp.sec, stamp.nanosec, frame_id length
        self.u32 = struct.Struct(order + "I")
        self.d3 = struct.Struct(order + "3d")
        self.d4 = struct.Struct(order + "4d")
        self.d6 = struct.Struct(order + "6d")
        self.d7 = struct.Struct(order + "7d")
        self.order = order


_FORMATS = {order: _Formats(order) for order in ("<", ">")}
_COV36 = 36 * 8
_COV9 = 9 * 8


class Truncated(ValueError):
    """The bytes end before the message does (or are no CDR this module reads)."""


def _start(data: bytes) -> tuple[_Formats, int]:
    """(layouts, largest alignment) of a serialised message's encapsulation header."""
    if len(data) < 4:
        raise Truncated("shorter than the encapsulation header")
    enc = _ENCODINGS.get((data[0] << 8) | data[1])
    if enc is None:
        raise Truncated(f"encapsulation 0x{data[0]:02x}{data[1]:02x} not read here")
    return _FORMATS[enc[0]], enc[1]


def _align(o: int, size: int, max_align: int) -> int:
    a = size if size < max_align else max_align
    return (o + a - 1) & -a


def _length(data: bytes, f: _Formats, o: int, max_align: int) -> tuple[int, int]:
    """A sequence's element count at payload offset ``o`` (aligned here): (count, offset of its first element)."""
    o = _align(o, 4, max_align)
    (n,) = f.u32.unpack_from(data, 4 + o)
    return n, o + 4


def _string(data: bytes, f: _Formats, o: int) -> tuple[str, int]:
    """A CDR string at payload offset ``o`` (4-aligned already): (text, offset after it)."""
    (n,) = f.u32.unpack_from(data, 4 + o)
    o += 4
    if n == 0 or 4 + o + n > len(data):
        raise Truncated("string runs past the end")
    return data[4 + o:4 + o + n - 1].decode(), o + n


def _header(data: bytes, f: _Formats) -> tuple[Any, int]:
    """std_msgs/Header at the payload start: (view with stamp.sec, stamp.nanosec, frame_id; offset after it)."""
    sec, nanosec, n = f.header.unpack_from(data, 4)
    if n == 0 or 16 + n > len(data):
        raise Truncated("frame_id runs past the end")
    fid = data[16:15 + n].decode()
    return _NS(stamp=_NS(sec=sec, nanosec=nanosec), frame_id=fid), 12 + n


def _doubles(data: bytes, f: _Formats, o: int, max_align: int) -> tuple[tuple[float, ...], int]:
    """A sequence<float64> at payload offset ``o``: (values, offset after it)."""
    n, o = _length(data, f, o, max_align)
    if n == 0:
        return (), o
    o = _align(o, 8, max_align)
    if 4 + o + 8 * n > len(data):
        raise Truncated("sequence runs past the end")
    return struct.unpack_from(f"{f.order}{n}d", data, 4 + o), o + 8 * n


def _vec(x: float, y: float, z: float) -> Any:
    return _NS(x=x, y=y, z=z)


def joint_state(data: bytes) -> Any:
    """sensor_msgs/JointState: header, name, position, velocity, effort."""
    f, m = _start(data)
    header, o = _header(data, f)
    count, o = _length(data, f, o, m)
    names = []
    for _ in range(count):
        o = _align(o, 4, m)
        name, o = _string(data, f, o)
        names.append(name)
    position, o = _doubles(data, f, o, m)
    velocity, o = _doubles(data, f, o, m)
    effort, o = _doubles(data, f, o, m)
    return _NS(header=header, name=names, position=position, velocity=velocity, effort=effort)


def wrench_stamped(data: bytes) -> Any:
    """geometry_msgs/WrenchStamped: header, wrench.force, wrench.torque."""
    f, m = _start(data)
    header, o = _header(data, f)
    o = _align(o, 8, m)
    fx, fy, fz, tx, ty, tz = f.d6.unpack_from(data, 4 + o)
    return _NS(header=header, wrench=_NS(force=_vec(fx, fy, fz), torque=_vec(tx, ty, tz)))


def odometry(data: bytes) -> Any:
    """nav_msgs/Odometry: header, child_frame_id, pose.pose, twist.twist (covariances skipped)."""
    f, m = _start(data)
    header, o = _header(data, f)
    o = _align(o, 4, m)
    child, o = _string(data, f, o)
    o = _align(o, 8, m)
    px, py, pz, qx, qy, qz, qw = f.d7.unpack_from(data, 4 + o)
    o += 7 * 8 + _COV36
    lx, ly, lz, ax, ay, az = f.d6.unpack_from(data, 4 + o)
    pose = _NS(position=_vec(px, py, pz), orientation=_NS(x=qx, y=qy, z=qz, w=qw))
    twist = _NS(linear=_vec(lx, ly, lz), angular=_vec(ax, ay, az))
    return _NS(header=header, child_frame_id=child, pose=_NS(pose=pose), twist=_NS(twist=twist))


def imu(data: bytes) -> Any:
    """sensor_msgs/Imu: header, orientation, angular_velocity, linear_acceleration (covariances skipped)."""
    f, m = _start(data)
    header, o = _header(data, f)
    o = _align(o, 8, m)
    qx, qy, qz, qw = f.d4.unpack_from(data, 4 + o)
    o += 4 * 8 + _COV9
    wx, wy, wz = f.d3.unpack_from(data, 4 + o)
    o += 3 * 8 + _COV9
    ax, ay, az = f.d3.unpack_from(data, 4 + o)
    return _NS(header=header, orientation=_NS(x=qx, y=qy, z=qz, w=qw), angular_velocity=_vec(wx, wy, wz),
               linear_acceleration=_vec(ax, ay, az))


def joy(data: bytes) -> Any:
    """sensor_msgs/Joy: header, axes (buttons skipped)."""
    f, m = _start(data)
    header, o = _header(data, f)
    n, o = _length(data, f, o, m)
    if 4 + o + 4 * n > len(data):
        raise Truncated("axes run past the end")
    axes = struct.unpack_from(f"{f.order}{n}f", data, 4 + o)
    return _NS(header=header, axes=axes)


def twist_with_covariance_stamped(data: bytes) -> Any:
    """geometry_msgs/TwistWithCovarianceStamped: header, twist.twist, twist.covariance."""
    f, m = _start(data)
    header, o = _header(data, f)
    o = _align(o, 8, m)
    lx, ly, lz, ax, ay, az = f.d6.unpack_from(data, 4 + o)
    o += 6 * 8
    cov = struct.unpack_from(f"{f.order}36d", data, 4 + o)
    twist = _NS(linear=_vec(lx, ly, lz), angular=_vec(ax, ay, az))
    return _NS(header=header, twist=_NS(twist=twist, covariance=cov))


def fluid_pressure(data: bytes) -> Any:
    """sensor_msgs/FluidPressure: header, fluid_pressure, variance."""
    f, m = _start(data)
    header, o = _header(data, f)
    o = _align(o, 8, m)
    if 4 + o + 16 > len(data):
        raise Truncated("pressure runs past the end")
    pressure, variance = struct.unpack_from(f"{f.order}2d", data, 4 + o)
    return _NS(header=header, fluid_pressure=pressure, variance=variance)


VIEWS: dict[str, tuple[Callable[[bytes], Any], str]] = {
    "/vehicle/wheel_speeds": (joint_state, "sensor_msgs/msg/JointState"),
    "/vehicle/tire_forces": (wrench_stamped, "geometry_msgs/msg/WrenchStamped"),
    "/vehicle/odom": (odometry, "nav_msgs/msg/Odometry"),
    "/vehicle/imu": (imu, "sensor_msgs/msg/Imu"),
    "/vehicle/controls": (joy, "sensor_msgs/msg/Joy"),
    "/vehicle/gnss/vel": (twist_with_covariance_stamped, "geometry_msgs/msg/TwistWithCovarianceStamped"),
    "/vehicle/drive_torque": (joint_state, "sensor_msgs/msg/JointState"),
    "/vehicle/brake_pressure": (fluid_pressure, "sensor_msgs/msg/FluidPressure"),
}
"""Canonical topic -> (view of its serialised message, its ROS type)."""


def decoder(topic: str, deserialize: Callable[[bytes, str], Any]) -> Callable[[bytes, Frames], Any]:
    """``convert(data, frames) -> record`` for the serialised messages of canonical ``topic``: the view, then
    ``msg_to_records``; bytes the view cannot read go through ``deserialize(data, type_name)`` (rclpy's) and
    the same ``msg_to_records``. ValueError/IndexError as the typed conversion raises them (the node counts
    the message as malformed)."""
    view, type_name = VIEWS[topic]

    def convert(data: bytes, frames: Frames) -> Any:
        try:
            msg = view(data)
        except (Truncated, struct.error, UnicodeDecodeError):
            try:
                msg = deserialize(data, type_name)
            except Exception as exc:   # rclpy raises its own error types on bytes it cannot read
                raise ValueError(f"cannot deserialise {type_name}: {exc}") from None
        return msg_to_records(topic, msg, frames)[0]

    convert.__doc__ = f"Serialised {type_name} -> its record (``{topic}``)."
    return convert


__all__ = ["VIEWS", "Truncated", "decoder", "fluid_pressure", "imu", "joint_state", "joy", "odometry",
           "twist_with_covariance_stamped", "wrench_stamped"]
