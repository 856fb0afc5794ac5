"""Held-out test of a calibrated 8-DOF model (8-DOF paper, Section 3.6 and its Table 9).

The vehicle (the 14-DOF simulator or a real one) drives a maneuver that was not used for calibration; the 8-DOF
model is set to the vehicle's measured state at ``t_start`` (1 s in the paper: the 8-DOF model has difficulties
starting from rest) and given the same driver inputs; the RMSE of each response against the measured data is
the paper's Table 9 (channels u, v, yaw angle, yaw rate, roll, roll rate, w_lf, w_rr).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

from vehcal_ros.models.vehicle_8dof import STATE_INDEX, Simulator8Dof, VehicleConstants, default_vehicle_constants
from vehcal_ros.records import Controls, ImuSample, OdomSample, WheelSpeeds

TABLE9_CHANNELS = ("u", "v", "psi", "yaw_rate", "roll", "roll_rate", "w_lf", "w_rr")
"""The paper's Table 9 rows, as names of :func:`records_to_table` columns."""

_STATE_OF = {"u": "u", "v": "v", "psi": "psi", "yaw_rate": "wz", "roll": "phi", "roll_rate": "wx",
             "w_lf": "w_lf", "w_rf": "w_rf", "w_lr": "w_lr", "w_rr": "w_rr"}


def records_to_table(records: Iterable[object], rate: float = 100.0) -> dict[str, np.ndarray]:
    """Resample odometry, IMU, wheel-speed and control records onto one grid (linear interpolation).

    Returns columns ``t, throttle, brake, steering, u, v, psi, yaw_rate, roll, roll_rate, w_lf, w_rf, w_lr,
    w_rr`` over the span every topic covers, and ``wheel_torque`` ``(n, 4)`` (N m, FL FR RL RR) when every
    wheel-speed record reports its net torque (``JointState.effort``). Yaw is unwrapped.
    """
    cols: dict[str, list[tuple[float, ...]]] = {"odom": [], "imu": [], "wheels": [], "controls": []}
    torque: list[tuple[float, ...]] = []
    torque_complete = True
    for r in records:
        if isinstance(r, OdomSample):
            cols["odom"].append((r.t, r.u, r.v, r.yaw, r.yaw_rate))
        elif isinstance(r, ImuSample):
            cols["imu"].append((r.t, r.roll, r.roll_rate))
        elif isinstance(r, WheelSpeeds):
            cols["wheels"].append((r.t, *np.asarray(r.omega, dtype=float)))
            if r.torque is None:
                torque_complete = False
            elif torque_complete:
                torque.append((r.t, *np.asarray(r.torque, dtype=float)))
        elif isinstance(r, Controls):
            cols["controls"].append((r.t, r.throttle, r.brake, r.steering))
    arrays = {}
    for key, rows in cols.items():
        if len(rows) < 2:
            raise ValueError(f"held-out test: too few {key} samples ({len(rows)})")
        a = np.asarray(sorted(rows), dtype=float)
        arrays[key] = a
    t0 = max(a[0, 0] for a in arrays.values())
    t1 = min(a[-1, 0] for a in arrays.values())
    t = np.arange(t0, t1 + 1e-9, 1.0 / rate)

    def col(key: str, j: int) -> np.ndarray:
        a = arrays[key]
        return np.interp(t, a[:, 0], a[:, j])

    odom = arrays["odom"]
    psi = np.interp(t, odom[:, 0], np.unwrap(odom[:, 3]))
    out = {"t": t, "throttle": col("controls", 1), "brake": col("controls", 2), "steering": col("controls", 3),
           "u": col("odom", 1), "v": col("odom", 2), "psi": psi, "yaw_rate": col("odom", 4),
           "roll": col("imu", 1), "roll_rate": col("imu", 2),
           "w_lf": col("wheels", 1), "w_rf": col("wheels", 2), "w_lr": col("wheels", 3), "w_rr": col("wheels", 4)}
    if torque_complete and len(torque) >= 2:
        a = np.asarray(sorted(torque), dtype=float)
        out["wheel_torque"] = np.column_stack([np.interp(t, a[:, 0], a[:, j]) for j in range(1, 5)])
    return out


def holdout_rmse(table: Mapping[str, np.ndarray], params: Mapping[str, float], t_start: float = 1.0,
                 dt: float = 0.005, channels: Iterable[str] = TABLE9_CHANNELS,
                 constants: VehicleConstants | None = None) -> dict[str, float]:
    """RMSE per channel of the 8-DOF model with ``params`` against ``table`` from ``t_start`` on (Table 9).

    ``constants``: the vehicle's 8-DOF constants and maps (``VehicleConstants.from_description``; default the
    HMMWV's); parameters ``params`` omits come from its nominal values. A ``wheel_torque`` column ``(n, 4)``
    (FL, FR, RL, RR, N m) in ``table`` drives the wheels instead of the maps when the description's
    ``torque_source`` is ``measured`` (the description decides, as in the calibration's stage set-up).
    """
    constants = constants or default_vehicle_constants()
    measured = constants.torque_source == "measured" and table.get("wheel_torque") is not None
    t = np.asarray(table["t"], dtype=float)
    keep = t >= t[0] + t_start - 1e-9
    t = t[keep]
    x0 = {"x": 0.0, "y": 0.0, "psi": 0.0}
    for name in ("u", "v", "roll", "roll_rate", "yaw_rate", "w_lf", "w_rf", "w_lr", "w_rr"):
        x0[_STATE_OF[name]] = float(np.asarray(table[name])[keep][0])
    sim = Simulator8Dof(x0, t - t[0], np.asarray(table["throttle"])[keep], np.asarray(table["brake"])[keep],
                        np.asarray(table["steering"])[keep], dt=dt, output_dt=float(t[1] - t[0]), n_out=t.size,
                        constants=constants,
                        wheel_torque=np.asarray(table["wheel_torque"])[keep] if measured else None)
    states = sim.run(dict(params))
    out = {}
    for ch in channels:
        model = states[:, STATE_INDEX[_STATE_OF[ch]]]
        data = np.asarray(table[ch], dtype=float)[keep]
        if ch == "psi":
            data = data - data[0]
        out[ch] = float(np.sqrt(np.mean((model - data) ** 2)))
    return out
