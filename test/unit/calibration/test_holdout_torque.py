"""The held-out test drives the wheels as the description says: measured wheel torque or the maps.

Known truth: a 6 s run of the 8-DOF model driven by a per-wheel torque trace (launch, then braking), recorded as
the records a bag gives (odometry, IMU, wheel speeds with ``torque``, controls at zero: no pedal map can make
that torque). ``records_to_table`` carries the torque as ``wheel_torque``; ``holdout_rmse`` with a description
whose ``torque_source`` is ``measured`` reproduces the run (RMSE of u below 1e-3 m/s: the same model, inputs
interpolated at 100 Hz onto a 5 ms grid), and with ``map`` (pedals at zero: coasting) misses u by metres per
second, because the description, not the data, decides what drives the wheels.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from vehcal_ros.estimation.calibration.holdout import holdout_rmse, records_to_table
from vehcal_ros.models.vehicle_8dof import STATE_INDEX, Simulator8Dof, VehicleConstants, default_vehicle_constants
from vehcal_ros.records import Controls, ImuSample, OdomSample, WheelSpeeds


def _records(constants: VehicleConstants) -> list:
    t = np.arange(0.0, 6.0 + 1e-9, 0.01)
    drive = np.where(t < 3.0, 900.0, -1500.0) * np.clip(t / 0.5, 0.0, 1.0)
    torque = np.column_stack([0.5 * drive, 0.5 * drive, 0.5 * drive, 0.5 * drive])   # FL FR RL RR, N m
    fz_f, fz_r = constants.static_wheel_loads()
    wf, wr = 8.0 / (constants.r0 - fz_f / constants.ktf), 8.0 / (constants.r0 - fz_r / constants.ktr)
    x0 = {"u": 8.0, "v": 0.0, "phi": 0.0, "wx": 0.0, "wz": 0.0, "w_lf": wf, "w_rf": wf, "w_lr": wr, "w_rr": wr}
    zero = np.zeros_like(t)
    x = Simulator8Dof(x0, t, zero, zero, zero, dt=0.005, output_dt=0.01, n_out=t.size, constants=constants,
                      wheel_torque=torque).run(constants.default_parameters())
    s = STATE_INDEX
    recs: list = []
    for k, tk in enumerate(t):
        recs.append(OdomSample(t=tk, x=x[k, s["x"]], y=x[k, s["y"]], yaw=x[k, s["psi"]], u=x[k, s["u"]],
                               v=x[k, s["v"]], yaw_rate=x[k, s["wz"]]))
        recs.append(ImuSample(t=tk, roll=x[k, s["phi"]], pitch=0.0, yaw=x[k, s["psi"]], roll_rate=x[k, s["wx"]],
                              pitch_rate=0.0, yaw_rate=x[k, s["wz"]], ax=0.0, ay=0.0, az=9.81))
        recs.append(WheelSpeeds(t=tk, omega=(x[k, s["w_lf"]], x[k, s["w_rf"]], x[k, s["w_lr"]], x[k, s["w_rr"]]),
                                torque=tuple(torque[k])))
        recs.append(Controls(t=tk, throttle=0.0, brake=0.0, steering=0.0))
    return recs


def test_measured_torque_drives_the_held_out_model_only_when_the_description_says_so() -> None:
    hmmwv = default_vehicle_constants()
    measured = replace(hmmwv, torque_source="measured")
    recs = _records(measured)
    table = records_to_table(recs)
    assert table["wheel_torque"].shape == (table["t"].size, 4)
    assert np.allclose(table["wheel_torque"][table["t"] > 1.0][:5], 0.5 * 900.0)
    params = measured.default_parameters()
    u_measured = holdout_rmse(table, params, constants=measured, channels=("u",))["u"]
    u_map = holdout_rmse(table, params, constants=hmmwv, channels=("u",))["u"]
    assert u_measured < 1e-3
    assert u_map > 1.0


def test_a_wheel_speed_record_without_torque_gives_no_torque_column() -> None:
    recs = _records(replace(default_vehicle_constants(), torque_source="measured"))
    first = next(k for k, r in enumerate(recs) if isinstance(r, WheelSpeeds))
    recs[first] = WheelSpeeds(t=recs[first].t, omega=recs[first].omega)
    assert "wheel_torque" not in records_to_table(recs)
