"""The grip pipeline's health reports (what the live node publishes on /diagnostics, as plain data): the inputs
status's counts and verdict, the vehicle-description status, the per-scope statuses and a failed cycle.

Known values: a fresh pipeline (nothing received), counted refusals, and a force estimator fed wheel speeds that
carry no torque (each one counted ``no_torque``).
"""

from __future__ import annotations

import math

import numpy as np

from vehcal_ros.diagnostic_levels import ERROR, OK, WARN
from vehcal_ros.estimation.grip.friction_samples import GATE_REASONS, ScopeData
from vehcal_ros.estimation.grip.parameters import PARAMS
from vehcal_ros.estimation.grip.pipeline import GripPipeline, pipeline_from_params
from vehcal_ros.records import WHEELS, ImuSample, WheelSpeeds


def _estimated() -> GripPipeline:
    """The pipeline of a grip_estimator with the declared defaults and ``force_source: estimated``."""
    values = {s.name: s.default for s in PARAMS}
    values.update(wheel_names=list(WHEELS), force_source="estimated")
    return pipeline_from_params(values)


def test_fresh_pipeline_reports_nothing_received_and_nothing_in_doubt():
    p = GripPipeline()   # measured forces, odometry speed reference, no online radius
    assert p.watched_inputs == ("wheel_speeds", "tire_forces", "odom")
    level, message, values = p.inputs_report()
    assert (level, message) == (OK, "receiving; 0 samples kept, 0 dropped")
    assert values == {**{f"dropped_{r}": 0 for r in GATE_REASONS}, "fill_front_axle": 0, "fill_rear_axle": 0,
                      "accepted": 0, "speed_reference": "odometry"}
    level, message, values = p.description_report()
    assert (level, message) == (OK, "no fact of the description and no sensor assumption is in doubt")
    assert values["doubtful"] == 0 and values["road_grade"] == 0.0
    assert all(math.isnan(values[k]) for k in ("accel_offset", "accel_offset_sd", "imu_mount_yaw_deg",
                                               "wheel_speed_scatter"))
    reports = p.reports()
    assert list(reports) == ["vehicle description", "front_axle", "rear_axle"]
    front = reports["front_axle"]
    assert (front.level, front.message) == (WARN, "waiting for data")
    assert front.values["n_fits"] == 0 and front.values["in_force_known"] is False


def test_refused_messages_are_counted_and_most_dropped_warns():
    p = GripPipeline()
    for topic, reason in (("tire_forces", "unknown_wheel"), ("tire_forces", "unknown_wheel"), ("odom", "implausible")):
        p.reject(topic, reason)
    assert (p.received["tire_forces"], p.received["odom"], p.received["wheel_speeds"]) == (2, 1, 0)
    level, message, values = p.inputs_report()
    assert (level, message) == (WARN, "most samples dropped (3 dropped, 0 kept)")
    assert (values["dropped_unknown_wheel"], values["dropped_implausible"], values["accepted"]) == (2, 1, 0)


def test_estimated_forces_report_their_counts_roll_split_and_a_missing_torque():
    p = _estimated()
    assert p.watched_inputs == ("wheel_speeds", "imu", "odom")
    assert GripPipeline(force_source="auto").watched_inputs == ("wheel_speeds", "odom")
    for k in range(20):   # wheel speeds without JointState.effort, the IMU alongside
        t = 10.0 + 0.01 * k
        p.add(ImuSample(t, roll=0.0, roll_rate=0.0, yaw_rate=0.0, ax=0.0, ay=0.0))
        p.add(WheelSpeeds(t, (20.0, 20.0, 20.0, 20.0)))
    values = p.inputs_report().values
    assert values["force_source"] == "estimated" and values["forces_no_torque"] == 20
    assert values["roll_split"] == "vehicle"
    assert (values["torque_scale"], values["torque_scale_applied"]) == (1.0, False)   # the prior, not applied
    assert (values["radius_scale_front"], values["radius_scale_rear"], values["radius_gnss_used"]) == (1.0, 1.0, 0)
    assert values["speed_reference"] == "gnss_imu"   # auto on the all-wheel-drive HMMWV
    level, message, values = p.description_report()
    assert level == WARN and values["doubtful"] == 1
    assert message.startswith("wheel torque: 20 of 20 wheel-speed samples carry none (JointState.effort empty)")
    # the calibrator's accepted roll stiffnesses split the lateral load transfer from now on
    assert p.use_model_parameters({"model.kphi_f": "150000.0", "model.kphi_r": "120000.0",
                                   "calibrated": "kphi_f,kphi_r"})
    assert p.inputs_report().values["roll_split"] == "calibrated"


def test_a_failed_cycle_marks_its_scopes_error_and_keeps_the_others():
    p = GripPipeline()
    empty = np.empty(0)
    p.cycle_failed([ScopeData(scope="rear_axle", t=empty, slip=empty, mu=empty)], "cycle failed: boom")
    assert (p.status["rear_axle"].level, p.status["rear_axle"].message) == (ERROR, "cycle failed: boom")
    assert (p.status["front_axle"].level, p.status["front_axle"].message) == (WARN, "waiting for data")
    p.cycle_failed(None, "snapshot failed: boom")
    assert {(st.level, st.message) for st in p.status.values()} == {(ERROR, "snapshot failed: boom")}
    assert p.reports()["front_axle"][:2] == (ERROR, "snapshot failed: boom")
