"""Each wheel's net torque from a production car's CAN signals (no rclpy).

A production car reports no per-wheel torque. Its CAN bus carries the engine's torque and the engaged gear (or,
on an electric axle, the drive torque per axle) and the brake line pressure. With the vehicle description's
``torque_source`` ``engine`` or ``axle``, :class:`CanWheelTorque` turns the newest of these signals into the net
torque of each wheel (drive minus brake, N m, positive forward) that the force estimator and the calibration
take from ``JointState.effort`` on a car that reports it:

* drive, ``engine``: the torque at the driven axles is T_e eta / (i_g i_f) for gear g (``powertrain.gear_ratios``
  and ``final_drive`` are output/input speeds, so torque grows by their inverse; eta ``powertrain.efficiency``),
  shared between the axles by ``driveline.front_share``; 0 in neutral (gear 0). The engine torque is taken as
  the ECU reports it at the gearbox input: a torque converter's multiplication while it slips is not modelled,
  and a gear shift's torque interruption shows only as fast as the signals report it.
* drive, ``axle``: the reported torque of each driven axle.
* an open differential splits an axle's drive torque equally between its wheels.
* brake: the line pressure of the wheel's axle (or the master cylinder's, for both axles) times
  ``brakes.pressure_gain_front`` / ``_rear`` (N m per bar), opposing the wheel's spin (none at standstill).

A wheel-speed sample gets a torque only when the newest drive sample and the newest brake pressure of each axle
are within ``max_age`` seconds of its stamp; otherwise it goes on without torque and is counted (``stale_drive``,
``stale_brake``), as is a reverse gear or a gear beyond the description's (``unknown_gear``) or a drive sample
without a driven axle's torque (``missing_axle``): the force estimator then counts it as ``no_torque``. Plain
Python on scalars, a few microseconds per sample.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from vehcal_ros.records import BrakePressure, DriveTorque, WheelSpeeds
from vehcal_ros.vehicle.description import BAR_PA, CAN_TORQUE_SOURCES

CAN_COUNTERS = ("drive_samples", "brake_samples", "converted", "stale_drive", "stale_brake", "unknown_gear",
                "missing_axle")
"""Counts of :class:`CanWheelTorque`: CAN samples taken, wheel-speed samples given a torque, and those left
without one, by reason."""


@dataclass(frozen=True)
class CanTorqueConfig:
    """What turns the CAN signals into wheel torque (from the vehicle description, :meth:`from_description`).

    drive: ``engine`` or ``axle`` (the description's ``torque_source``).
    gear_ratios: output/input speed per forward gear; final_drive: differential output/input speed.
    efficiency: the driveline's, on the engine torque.
    front_share: fraction of the drive torque on the front axle (``engine``).
    driven: (front, rear) driven axles: ``axle`` needs their torques (an undriven axle's is 0 when not sent).
    brake_gain: N m of brake torque per wheel per Pa of line pressure, (front, rear).
    max_age: s, the newest drive and brake samples must be this close to a wheel-speed stamp.
    """

    drive: str
    gear_ratios: tuple[float, ...] = ()
    final_drive: float = 1.0
    efficiency: float = 1.0
    front_share: float = 0.0
    driven: tuple[bool, bool] = (True, True)
    brake_gain: tuple[float, float] = (0.0, 0.0)
    max_age: float = 0.05

    @classmethod
    def from_description(cls, desc, max_age: float = 0.05) -> CanTorqueConfig | None:
        """The conversion of a :class:`~vehcal_ros.vehicle.description.VehicleDescription` whose torque source is
        ``engine`` or ``axle``; None for the other sources (the wheel torque comes with the wheel speeds or from
        the pedal maps)."""
        if desc.torque_source not in CAN_TORQUE_SOURCES:
            return None
        return cls(drive=desc.torque_source, gear_ratios=tuple(desc.gear_ratios), final_drive=desc.final_drive,
                   efficiency=desc.efficiency, front_share=desc.front_share,
                   driven=desc.driven,
                   brake_gain=(desc.brake_gain_front / BAR_PA, desc.brake_gain_rear / BAR_PA), max_age=max_age)


class CanWheelTorque:
    """CAN drive-torque and brake-pressure records in (:meth:`add`); wheel-speed records out with their wheels'
    net torque (:meth:`fill`). Counters in ``counters`` (:data:`CAN_COUNTERS`)."""

    def __init__(self, config: CanTorqueConfig) -> None:
        self.config = config
        self._drive: DriveTorque | None = None
        self._pressure_t = [-math.inf, -math.inf]   # stamp of each axle's newest pressure
        self._pressure = [0.0, 0.0]                 # Pa
        self.counters: dict[str, int] = dict.fromkeys(CAN_COUNTERS, 0)

    def add(self, rec: DriveTorque | BrakePressure) -> None:
        """Keep the newest drive sample, and each axle's newest brake pressure (a master-cylinder pressure, axle
        -1, stands for both)."""
        if isinstance(rec, DriveTorque):
            self.counters["drive_samples"] += 1
            if self._drive is None or rec.t >= self._drive.t:
                self._drive = rec
            return
        self.counters["brake_samples"] += 1
        axles = (0, 1) if rec.axle < 0 else (rec.axle,)
        for a in axles:
            if rec.t >= self._pressure_t[a]:
                self._pressure_t[a] = rec.t
                self._pressure[a] = rec.pressure

    def route(self, record: object) -> object | None:
        """What a pipeline fed ``record`` goes on with: None for a CAN record (kept here), a wheel-speed record with
        its wheels' net torque (:meth:`fill`), any other record unchanged."""
        if isinstance(record, (DriveTorque, BrakePressure)):
            self.add(record)
            return None
        if isinstance(record, WheelSpeeds):
            return self.fill(record)
        return record

    def axle_drive(self, drive: DriveTorque) -> tuple[float, float] | None:
        """(front, rear) drive torque at the axles, N m, of one drive sample; None when the gear is unknown
        (``engine``) or a driven axle's torque is not in the sample (``axle``)."""
        c = self.config
        if c.drive == "axle":
            out = []
            for torque, driven in ((drive.axle_front, c.driven[0]), (drive.axle_rear, c.driven[1])):
                if not math.isfinite(torque):
                    if driven:
                        return None
                    torque = 0.0
                out.append(torque)
            return out[0], out[1]
        gear = drive.gear
        if not math.isfinite(gear) or not math.isfinite(drive.engine):
            return None
        g = int(round(gear))
        if g == 0:
            return 0.0, 0.0
        if not 1 <= g <= len(c.gear_ratios):
            return None
        total = drive.engine * c.efficiency / (c.gear_ratios[g - 1] * c.final_drive)
        return total * c.front_share, total * (1.0 - c.front_share)

    def fill(self, rec: WheelSpeeds) -> WheelSpeeds:
        """``rec`` with each wheel's net torque from the newest CAN signals (``rec`` itself, without torque, when
        they are too old or the gear is unknown; counted)."""
        c, n = self.config, self.counters
        drive = self._drive
        t = rec.t
        if drive is None or abs(t - drive.t) > c.max_age:
            n["stale_drive"] += 1
            return WheelSpeeds(t=t, omega=rec.omega)
        pt = self._pressure_t
        if abs(t - pt[0]) > c.max_age or abs(t - pt[1]) > c.max_age:
            n["stale_brake"] += 1
            return WheelSpeeds(t=t, omega=rec.omega)
        axle = self.axle_drive(drive)
        if axle is None:
            n["unknown_gear" if c.drive == "engine" else "missing_axle"] += 1
            return WheelSpeeds(t=t, omega=rec.omega)
        n["converted"] += 1
        om = rec.omega
        torque = []
        for i in range(4):
            a = 0 if i < 2 else 1
            brake = c.brake_gain[a] * self._pressure[a]
            w = float(om[i])
            torque.append(0.5 * axle[a] - (brake if w > 0.0 else -brake if w < 0.0 else 0.0))
        return WheelSpeeds(t=t, omega=om, torque=tuple(torque))


__all__ = ["CAN_COUNTERS", "CanTorqueConfig", "CanWheelTorque"]
