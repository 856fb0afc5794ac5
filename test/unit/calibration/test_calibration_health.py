"""The calibration pipeline's health reports and service answers (what the live node publishes on /diagnostics and
answers on ``~/calibrate``, as plain data): the inputs status, ``calibration required`` and its state-file
figures, a failed cycle, a calibrate-now outcome and the model as ``model.<name>`` parameters.

Known values: a fresh pipeline on the HMMWV description (nothing received, its nominal model), counted refusals,
and the stages of test/data/calibration_state_v1.json (longitudinal and rolling resistance) restored into it.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from vehcal_ros.diagnostic_levels import ERROR, OK, WARN
from vehcal_ros.estimation.calibration.pipeline import MODEL_PARAMETERS, CalibrationPipeline
from vehcal_ros.io import calibration_state as cs
from vehcal_ros.records import WheelSpeeds

V1_STATE = Path(__file__).resolve().parents[2] / "data" / "calibration_state_v1.json"
WAITING = ("calibration required: straight throttle ramp (longitudinal: waiting for data); steering at speed "
           "(lateral: waiting for data); coast-down (rolling_resistance: waiting for data)")


def _restored() -> CalibrationPipeline:
    p = CalibrationPipeline()
    assert cs.restore_into(p, cs.read_state_document(V1_STATE, "truck7").stages, note="restored") == [
        "longitudinal", "rolling_resistance"]
    return p


def test_inputs_report_counts_and_warns_when_most_records_are_dropped():
    p = CalibrationPipeline()
    assert p.watched_inputs == ("wheel_speeds", "imu", "odom", "controls")
    assert p.inputs_report() == (OK, "receiving; 0 samples, 0 dropped", {
        "dropped_nonfinite": 0, "dropped_out_of_order": 0, "dropped_duplicate": 0, "dropped_undecodable": 0,
        "fill_wheel_speeds": 0, "fill_imu": 0, "fill_odom": 0, "fill_controls": 0, "buffer_restarts": 0})
    p.add(WheelSpeeds(1.0, (10.0, 10.0, 10.0, 10.0)))
    p.reject("imu", "implausible")
    level, message, values = p.inputs_report()
    assert (level, message) == (OK, "receiving; 2 samples, 1 dropped")   # half dropped: not most
    assert values["dropped_implausible"] == 1 and values["fill_wheel_speeds"] == 1
    p.reject("imu", "implausible")
    assert p.inputs_report()[:2] == (WARN, "most samples dropped (2 of 3)")
    assert p.received == {"wheel_speeds": 1, "imu": 2, "odom": 0, "controls": 0}


def test_calibration_required_names_the_maneuvers_and_the_state_file():
    p = CalibrationPipeline()
    state = {"vehicle_id": "truck7", "state_file": "/var/state.json", "state": "no state file yet"}
    level, message, values = p.calibration_report(state)
    assert (level, message) == (WARN, WAITING)
    assert list(values) == ["calibrated_stages", "vehicle_id", "state_file", "state", "seen_longitudinal",
                            "seen_lateral", "seen_rolling_resistance"]
    assert values["calibrated_stages"] == "" and values["seen_lateral"] == "waiting for data"
    level, message, values = p.calibration_report(state, refused="corrupt or truncated")
    assert (level, message) == (WARN, f"state file refused (corrupt or truncated); {WAITING}")
    assert values["state_refused"] == "corrupt or truncated"


def test_calibrated_stages_turn_the_status_ok_unless_the_state_file_was_refused():
    p = _restored()
    assert p.calibration_report() == (OK, "calibrated: longitudinal, rolling_resistance; still needed: steering at "
                                          "speed", {"calibrated_stages": "longitudinal,rolling_resistance",
                                                    "seen_lateral": "waiting for data"})
    level, message, _ = p.calibration_report(refused="written for vehicle_id 'truck9'")
    assert level == WARN and message.endswith("; state file refused at start (written for vehicle_id 'truck9')")
    reports = p.reports({"vehicle_id": "truck7"})
    assert list(reports) == ["calibration", "longitudinal", "lateral", "rolling_resistance"]
    assert reports["calibration"].values["vehicle_id"] == "truck7"
    assert reports["lateral"][:2] == (WARN, "waiting for data")
    assert reports["rolling_resistance"].values["rr"] == pytest.approx(0.013416, abs=5e-7)   # the saved mean


def test_calibrate_outcome_names_each_stage_accepted_or_not():
    p = CalibrationPipeline()
    before = {s: st.result for s, st in p.status.items()}
    assert p.calibrate_outcome([], before) == (False, "nothing to fit; longitudinal: not accepted: waiting for "
                                                      "data | lateral: not accepted: waiting for data | "
                                                      "rolling_resistance: not accepted: waiting for data")
    assert cs.restore_into(p, cs.read_state_document(V1_STATE, "truck7").stages, note="restored")
    ok, message = p.calibrate_outcome([SimpleNamespace(stage="rolling_resistance")], before)
    assert ok and message == f"fitted rolling_resistance: accepted: {p.status['rolling_resistance'].message}"
    ok, message = p.calibrate_outcome([SimpleNamespace(stage="rolling_resistance"), SimpleNamespace(stage="lateral")],
                                      before)
    assert not ok and message.endswith(" | lateral: not accepted: waiting for data")


def test_a_failed_cycle_marks_its_stages_error_and_keeps_their_results():
    p = _restored()
    p.cycle_failed([SimpleNamespace(stage="lateral")], "cycle failed: boom")
    assert (p.status["lateral"].level, p.status["lateral"].message) == (ERROR, "cycle failed: boom")
    assert p.status["longitudinal"].level == OK
    p.cycle_failed(None, "snapshot failed: boom")
    assert {(st.level, st.message) for st in p.status.values()} == {(ERROR, "snapshot failed: boom")}
    assert set(p.calibrated().values()) == {"longitudinal", "rolling_resistance"}


def test_model_values_are_the_model_parameters_by_their_parameter_names():
    values = CalibrationPipeline().model_values()
    assert list(values) == [f"model.{n.lower()}" for n in MODEL_PARAMETERS]
    # the HMMWV description's nominal values (config/vehicles/hmmwv.yaml)
    assert (values["model.cxf"], values["model.cyf"], values["model.kphi_f"], values["model.bphi"],
            values["model.rr"], values["model.jd"]) == (10300.0, 50000.0, 37500.0, 15000.0, 0.0175, 0.0)
    assert _restored().model_values()["model.rr"] == pytest.approx(0.013416, abs=5e-7)
