"""Driver-input maps shared by the 8-DOF model and the 14-DOF simulator (shared/DESIGN.md section 5).

From the 8-DOF paper's public code (papers/bayesian-calibration-8dof-vehicle-model.md, Section 2; constants in
reference/vehicle_8dof.yaml ``inputs``): a DC-motor-like powertrain through a 0.06 total gear ratio, torque
shared equally over the four wheels; brake torque up to 4000 N m per wheel opposing the spin; steering
input -1..1 to road-wheel angle by 0.6525249 rad.
"""

from __future__ import annotations

import numpy as np
from numba import njit

GEAR_RATIO = 0.06            # 0.3 gearbox x 0.2 conical gear
MAX_MOTOR_TORQUE = 1000.0    # N m at zero motor speed
MAX_MOTOR_SPEED = 2000.0     # rad/s where the torque reaches zero
MAX_BRAKE_TORQUE = 4000.0    # N m per wheel
STEERING_GAIN = 0.6525249    # rad of road-wheel angle per unit steering input


@njit(cache=True, nogil=True)
def drive_torque_per_wheel(throttle: float, mean_wheel_speed: float) -> float:
    """Drive torque at each of the four wheels (N m) for ``throttle`` in [0, 1].

    motor speed = wheel speed / 0.06; motor torque = (1000 - 1000 * motor speed / 2000) * throttle;
    wheel torque = motor torque / 0.06, shared over four wheels.
    """
    motor_speed = mean_wheel_speed / GEAR_RATIO
    motor_torque = (MAX_MOTOR_TORQUE - MAX_MOTOR_TORQUE * motor_speed / MAX_MOTOR_SPEED) * throttle
    return motor_torque / GEAR_RATIO / 4.0


@njit(cache=True, nogil=True)
def brake_torque(brake: float, wheel_speed: float) -> float:
    """Brake torque on one wheel (N m), opposing its spin: -sign(w) * brake * 4000."""
    if wheel_speed > 0.0:
        return -brake * MAX_BRAKE_TORQUE
    if wheel_speed < 0.0:
        return brake * MAX_BRAKE_TORQUE
    return 0.0


@njit(cache=True, nogil=True)
def road_wheel_angle(steering: float) -> float:
    """Road-wheel steer angle (rad) from the normalised steering input (-1..1, positive left)."""
    return steering * STEERING_GAIN


def interpolate_inputs(t_knots: np.ndarray, values: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Piecewise-linear driver inputs (the paper's driver files are linear between rows)."""
    return np.interp(t, t_knots, values)
