"""Neutral, rclpy-free records of the vehicle topics (docs/nodes.md).

Nodes convert ROS messages to these records, bag replay converts rosbags messages to them, the simulator
produces them: the estimators only ever see these. Stamps ``t`` are seconds from the message header (never
arrival time). Units are SI; angles in rad; body frame x forward, y left, z up.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

WHEELS: tuple[str, str, str, str] = ("wheel_fl", "wheel_fr", "wheel_rl", "wheel_rr")
"""Default wheel names, in the order used by every array indexed by wheel (FL, FR, RL, RR)."""

FRONT = (0, 1)
REAR = (2, 3)


@dataclass(frozen=True, slots=True)
class WheelSpeeds:
    """``/vehicle/wheel_speeds`` (sensor_msgs/JointState): spin rates in rad/s, ordered as ``WHEELS``; ``torque``
    the net wheel torque (drive minus brake, N m, ``JointState.effort``) when the vehicle reports it."""

    t: float
    omega: np.ndarray | tuple[float, ...]  # (4,) rad/s (a tuple from message conversion: no array per message)
    torque: np.ndarray | tuple[float, ...] | None = None  # (4,) N m, or None when effort is not published


@dataclass(frozen=True, slots=True)
class ImuSample:
    """``/vehicle/imu`` (sensor_msgs/Imu): roll from the orientation, body rates and accelerations."""

    t: float
    roll: float          # rad
    roll_rate: float     # rad/s (angular_velocity.x)
    yaw_rate: float      # rad/s (angular_velocity.z)
    ax: float            # m/s^2 (linear_acceleration.x)
    ay: float            # m/s^2
    az: float = 9.81     # m/s^2
    pitch: float = 0.0   # rad
    yaw: float = 0.0     # rad
    pitch_rate: float = 0.0


@dataclass(frozen=True, slots=True)
class TireForce:
    """``/vehicle/tire_forces`` (geometry_msgs/WrenchStamped, one per wheel): tire-frame forces in N."""

    t: float
    wheel: int           # index into WHEELS
    fx: float            # longitudinal
    fy: float            # lateral
    fz: float            # normal load
    fx_var: float = 0.0  # N^2, variance of an estimated fx (0 = measured by a transducer)
    fz_var: float = 0.0  # N^2, variance of an estimated fz
    fx_rho: float = 0.0  # lag-one correlation of consecutive estimates' fx errors (estimation/sensing/tire_forces.py)


@dataclass(frozen=True, slots=True)
class OdomSample:
    """``/vehicle/odom`` (nav_msgs/Odometry): body-frame twist and planar pose."""

    t: float
    u: float             # m/s, longitudinal speed (twist.linear.x)
    v: float             # m/s, lateral speed (twist.linear.y)
    yaw_rate: float      # rad/s (twist.angular.z)
    x: float = 0.0       # m, pose
    y: float = 0.0
    yaw: float = 0.0


@dataclass(frozen=True, slots=True)
class GnssVelocity:
    """``/vehicle/gnss/vel`` (geometry_msgs/TwistWithCovarianceStamped): the GNSS receiver's velocity over ground
    in the world ENU frame (x east, y north, z up), as ``ublox_gps`` publishes on ``fix_velocity`` and the
    ROS 2 ``nmea_navsat_driver`` on ``vel`` (there a TwistStamped without covariance). Doppler velocity is
    independent of the wheels: neither the rolling radius nor wheel slip enters it, which makes it the speed
    reference of the rolling-radius estimator (estimation/sensing/rolling_radius.py). ``t`` is the measurement time
    (header stamp); the message itself arrives some 0.05-0.2 s later (receiver latency)."""

    t: float
    ve: float            # m/s, east (twist.linear.x)
    vn: float            # m/s, north (twist.linear.y)
    vu: float = 0.0      # m/s, up (twist.linear.z)
    std: float = 0.0     # m/s, 1-sigma per horizontal axis as reported (sqrt of the covariance diagonal; 0 = unknown)

    @property
    def speed(self) -> float:
        """Speed along the path, m/s: the norm of the ENU velocity, climb included. On a grade theta the
        horizontal speed is cos(theta) of it, 0.12 % less on a 5 % grade: as the slip's speed reference that
        would be a slip offset the size of everyday slips. A receiver that reports no vertical velocity (0) gives
        the horizontal speed."""
        return math.hypot(self.ve, self.vn, self.vu)


@dataclass(frozen=True, slots=True)
class GnssFix:
    """``/vehicle/gnss/fix`` (sensor_msgs/NavSatFix): the GNSS receiver's position, WGS-84 latitude and longitude
    in degrees and ellipsoidal height in m, as ``ublox_gps`` and ``nmea_navsat_driver`` publish on ``fix``.
    ``t`` is the measurement time (header stamp). ``std_h``: m, 1-sigma per horizontal axis as reported (the
    square root of the mean of the covariance's east and north variances); ``std_v``: m, 1-sigma of the height;
    both 0 when the message does not report a covariance (``position_covariance_type`` unknown). ``status``: the
    NavSatStatus (-1 no fix, 0 fix, 1 SBAS-augmented, 2 ground-based augmentation)."""

    t: float
    latitude: float      # deg, north positive
    longitude: float     # deg, east positive
    altitude: float      # m above the WGS-84 ellipsoid
    std_h: float = 0.0   # m, horizontal 1-sigma per axis (0 = unknown)
    std_v: float = 0.0   # m, vertical 1-sigma (0 = unknown)
    status: int = 0      # NavSatStatus.status

    @property
    def has_fix(self) -> bool:
        """A position the receiver stands by (status >= 0, finite latitude and longitude)."""
        return self.status >= 0 and math.isfinite(self.latitude) and math.isfinite(self.longitude)


@dataclass(frozen=True, slots=True)
class Controls:
    """``/vehicle/controls`` (sensor_msgs/Joy): normalised driver inputs as in the 8-DOF paper."""

    t: float
    throttle: float      # 0..1
    brake: float         # 0..1
    steering: float      # + = left, in the vehicle description's steering units (normalised -1..1 or rad)


@dataclass(frozen=True, slots=True)
class DriveTorque:
    """``/vehicle/drive_torque`` (sensor_msgs/JointState): the drive torque a production car reports on its CAN
    bus, by joint name: ``engine`` (effort: the engine's torque at the gearbox input, N m), ``gear`` (position:
    the engaged gear, 1..n forward, 0 neutral, < 0 reverse), ``axle_front`` / ``axle_rear`` (effort: the drive
    torque at that axle's differential output, N m; an electric axle's motor torque times its reduction). A
    joint the message does not carry is NaN. Which of them the estimators use is the vehicle description's
    ``torque_source`` (``engine`` or ``axle``; estimation/sensing/can_torque.py)."""

    t: float
    engine: float = math.nan       # N m
    gear: float = math.nan         # engaged gear number
    axle_front: float = math.nan   # N m, both front wheels together
    axle_rear: float = math.nan    # N m, both rear wheels together


AXLE_FRAMES: tuple[str, str] = ("front_axle", "rear_axle")
"""``header.frame_id`` of a brake pressure measured per axle; any other frame id is one pressure for both axles
(the master cylinder's)."""


@dataclass(frozen=True, slots=True)
class BrakePressure:
    """``/vehicle/brake_pressure`` (sensor_msgs/FluidPressure): brake line pressure in Pa, per axle
    (``axle`` 0 front, 1 rear: frame ids :data:`AXLE_FRAMES`) or the master cylinder's for both (``axle`` -1).
    The description's ``brakes.pressure_gain_front`` / ``_rear`` turn it into brake torque per wheel."""

    t: float
    axle: int            # 0 front, 1 rear, -1 both
    pressure: float      # Pa


@dataclass(frozen=True, slots=True)
class GroundTruth:
    """``/vehicle/ground_truth`` (simulator only): true road friction and slips under each wheel."""

    t: float
    mu_road: np.ndarray                       # (4,) peak friction coefficient of the road under each wheel
    slip: np.ndarray                          # (4,) longitudinal slip ratio, Eq. (3) of the friction paper
    slip_angle: np.ndarray                    # (4,) rad
    mu_max: np.ndarray                        # (4,) peak of the true mu(s) curve under each wheel
    constants: dict[str, float] = field(default_factory=dict)  # true model constants (e.g. Cyf) if known
    fx: np.ndarray | None = None              # (4,) N, true longitudinal tire force (None if not recorded)
    fz: np.ndarray | None = None              # (4,) N, true normal load


Record = (WheelSpeeds | ImuSample | TireForce | OdomSample | Controls | GroundTruth | GnssVelocity | GnssFix
          | DriveTorque | BrakePressure)


def wheel_index(name: str, names: tuple[str, ...] = WHEELS) -> int:
    """Index of ``name`` in ``names``; ValueError naming the known wheels otherwise."""
    try:
        return names.index(name)
    except ValueError:
        raise ValueError(f"unknown wheel name {name!r}; expected one of {', '.join(names)}") from None
