"""Driver-input maps shared by the 8-DOF model and the 14-DOF simulator (docs/simulator_model.md).

From the 8-DOF paper's public code (Unjhawala et al. 2023, doi:10.1115/1.4062199, Section 2; constants in
data/vehicle_8dof.yaml ``inputs``): a DC-motor-like powertrain through a 0.06 total gear ratio, torque
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


# ------------------------------------------------------------------------------------------------------------
# Any vehicle: the vehicle description's drive input, packed into the 8-DOF constants vector.
# Packed layout (from offset ``o`` of the constants vector, see vehicle_8dof.VehicleConstants.as_array):
#   o+0 kind (0 dc_motor, 1 engine_map), o+1 max_torque, o+2 max_speed, o+3 ratio, o+4 efficiency,
#   o+5 front_share, o+6 final_drive, o+7 n_map, o+8 n_gears, then n_map engine speeds (rad/s), n_map full-throttle
#   torques, n_map closed-throttle torques (N m), n_gears gear ratios, n_gears down-shift and n_gears up-shift
#   engine speeds (rad/s).
PT_DC_MOTOR = 0.0
PT_ENGINE_MAP = 1.0
PT_HEADER = 9


@njit(cache=True, nogil=True)
def _interp(x: float, k: np.ndarray, xs: int, ys: int, n: int) -> float:
    """Piecewise-linear ``y(x)`` of the table at ``k[xs:xs+n]``, ``k[ys:ys+n]``, held constant outside."""
    if x <= k[xs]:
        return k[ys]
    for i in range(1, n):
        if x <= k[xs + i]:
            x0 = k[xs + i - 1]
            return k[ys + i - 1] + (k[ys + i] - k[ys + i - 1]) * (x - x0) / (k[xs + i] - x0)
    return k[ys + n - 1]


@njit(cache=True, nogil=True)
def shift_gear(k: np.ndarray, o: int, gear: float, driven_speed: float) -> float:
    """Automatic gear after one shift decision (engine_map only): up above its up-shift speed, down below its
    down-shift speed (engine speed = driven wheels' mean speed / (gear ratio x final drive)); 0-based."""
    if k[o] != PT_ENGINE_MAP:
        return 0.0
    n_map = int(k[o + 7])
    n_g = int(k[o + 8])
    g = int(gear)
    gr = o + PT_HEADER + 3 * n_map
    w_e = driven_speed / (k[gr + g] * k[o + 6])
    if w_e > k[gr + 2 * n_g + g] and g < n_g - 1:
        g += 1
    elif w_e < k[gr + n_g + g] and g > 0:
        g -= 1
    return float(g)


@njit(cache=True, nogil=True)
def initial_gear(k: np.ndarray, o: int, driven_speed: float) -> float:
    """The lowest gear whose engine speed at ``driven_speed`` is below its up-shift speed."""
    if k[o] != PT_ENGINE_MAP:
        return 0.0
    g = 0.0
    for _ in range(int(k[o + 8])):
        g2 = shift_gear(k, o, g, driven_speed)
        if g2 <= g:
            break
        g = g2
    return g


@njit(cache=True, nogil=True)
def dc_motor_torque(k: np.ndarray, o: int, throttle: float, wheel_speed: float, share: float) -> float:
    """Drive torque at one wheel of the dc_motor powertrain (the paper), N m: the whole driveline's torque at
    the wheels times ``share`` (the axle's share / 2 for one wheel of an open differential):
    ``(T_max - T_max (w / ratio) / w_max) throttle / ratio x efficiency`` with ``w`` the speed passed in (the
    paper's code passes each wheel's own speed). The hot loops branch on the powertrain kind once per step and
    call this or :func:`engine_map_torque` directly (one function for both inlined the engine map's table search
    into every wheel's dc_motor path: 77 vs 70 ns per 8-DOF step, 2026-11-24)."""
    motor_speed = wheel_speed / k[o + 3]
    motor_torque = (k[o + 1] - k[o + 1] * motor_speed / k[o + 2]) * throttle
    return motor_torque / k[o + 3] * k[o + 4] * share


@njit(cache=True, nogil=True)
def engine_map_torque(k: np.ndarray, o: int, throttle: float, wheel_speed: float, gear: float,
                      share: float) -> float:
    """Drive torque at one wheel of the engine_map powertrain, N m: engine speed ``w / (gear x final drive)``,
    torque ``(1 - throttle) T_zero + throttle T_full`` from the map, times ``efficiency / (gear x final drive)``
    and ``share`` (as :func:`dc_motor_torque`)."""
    n_map = int(k[o + 7])
    base = o + PT_HEADER
    ratio = k[base + 3 * n_map + int(gear)] * k[o + 6]
    w_e = wheel_speed / ratio
    t_full = _interp(w_e, k, base, base + n_map, n_map)
    t_zero = _interp(w_e, k, base, base + 2 * n_map, n_map)
    return ((1.0 - throttle) * t_zero + throttle * t_full) / ratio * k[o + 4] * share


def pack_powertrain(kind: str, *, max_torque: float = 0.0, max_speed: float = 1.0, ratio: float = 1.0,
                    efficiency: float = 1.0, front_share: float = 0.5, final_drive: float = 1.0,
                    engine_speed=(), torque_full=(), torque_zero=(), gear_ratios=(), shift_down=(),
                    shift_up=()) -> np.ndarray:
    """The packed powertrain block (layout above); ``kind`` ``none`` (measured wheel torque, no map) packs as a
    DC motor of zero torque."""
    head = [PT_ENGINE_MAP if kind == "engine_map" else PT_DC_MOTOR, max_torque, max_speed, ratio, efficiency,
            front_share, final_drive, float(len(engine_speed)), float(len(gear_ratios))]
    return np.array(head + list(engine_speed) + list(torque_full) + list(torque_zero) + list(gear_ratios)
                    + list(shift_down) + list(shift_up), dtype=float)
