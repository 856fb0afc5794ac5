"""model_calibrator's state file across restarts, the node in its own process over real DDS.

* kill -9 after an accepted fit, restart: the same model is published at once (latched), before any new data;
* a state file for another vehicle_id and a truncated one are refused with the reason on /diagnostics (WARN),
  the node starts from the priors and keeps running;
* the file format's own checks (io/calibration_state.py), without ROS.
"""

from __future__ import annotations

import json
import signal
import time

import pytest
from calibration_drive import drive_records
from calibrator_probe import TOPICS, closed, model_rr, publish
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from ros_util import spawn, spin_until, stop, wait_for_match

from vehcal_ros.io.calibration_state import StateRefused, read_state
from vehcal_ros.nodes.grip_estimator import latched_qos

pytestmark = pytest.mark.ros

ARGS = ["-p", "stages:=[rolling_resistance]", "-p", "n_chains:=2", "-p", "n_draws:=200", "-p", "min_ess:=50.0",
        "-p", "max_r_hat:=1.05", "-p", "calibration_period:=0.3", "-p", "recalibration_period:=0.0",
        "-p", "diagnostics_period:=0.2", "-p", "stale_timeout:=60.0"]


def start(state, vehicle_id: str, log):
    return spawn(["-m", "vehcal_ros.nodes.model_calibrator", "--ros-args", *ARGS, "-p", f"state_file:={state}",
                  "-p", f"vehicle_id:={vehicle_id}"], log_path=str(log))


def _calibration_status(diags: list):
    for arr in reversed(diags):
        for st in arr.status:
            if st.name == "model_calibrator: calibration":
                return st
    return None


def test_restart_restores_model_and_bad_files_are_refused(rclpy_context, tmp_path) -> None:
    state = tmp_path / "truck7_state.json"
    probe = Node("probe_persistence", context=rclpy_context)
    ex = SingleThreadedExecutor(context=rclpy_context)
    ex.add_node(probe)
    diags: list = []
    probe.create_subscription(DiagnosticArray, "/diagnostics", diags.append, 50)
    pubs = {cls: probe.create_publisher(msg, topic, 1000) for cls, (topic, msg) in TOPICS.items()}
    proc = start(state, "truck7", tmp_path / "run1.log")
    try:
        models: list = []
        probe.create_subscription(DiagnosticArray, "/vehcal/model_parameters", models.append, latched_qos())
        assert all(wait_for_match(ex, p, timeout=60.0) for p in pubs.values()), (tmp_path / "run1.log").read_text()
        publish(pubs, ex, closed(drive_records(seed=1, t0=100.0, duration=10.0)), {})
        assert spin_until(ex, lambda: models, 120.0), (tmp_path / "run1.log").read_text()[-2000:]
        first = model_rr(models[-1])
        assert state.is_file()
        live = json.loads(state.read_text())   # version 2: this run's drive in the history
        assert live["version"] == 2 and [h["drive"][:5] for h in live["history"]] == ["live "]
        assert live["history"][0]["stages"]["rolling_resistance"]["status"] == "fitted"
        proc.send_signal(signal.SIGKILL)                      # kill -9 after the accepted fit
        proc.wait(timeout=10)

        # restart: the same model at once, with no new data
        t0 = time.monotonic()
        proc = start(state, "truck7", tmp_path / "run2.log")
        again: list = []
        probe.create_subscription(DiagnosticArray, "/vehcal/model_parameters", again.append, latched_qos())
        assert spin_until(ex, lambda: again, 60.0), (tmp_path / "run2.log").read_text()[-2000:]
        restart_s = time.monotonic() - t0
        assert model_rr(again[-1]) == first                     # every figure, as text, identical
        assert restart_s < 60.0
        stop(proc)
        good = state.read_text()

        # refused files: reason on /diagnostics, priors, the node keeps running
        doc = json.loads(good)
        cases = {"vehicle_id": json.dumps({**doc, "vehicle_id": "truck8"}),   # another version: the unit test
                 "truncated": good[: len(good) // 2]}
        for k, (reason, text) in enumerate(cases.items()):
            state.write_text(text)
            diags.clear()
            proc = start(state, "truck7", tmp_path / f"bad{k}.log")
            refused = lambda: (st := _calibration_status(diags)) is not None and "refused" in st.message  # noqa: E731
            assert spin_until(ex, refused, 60.0), (tmp_path / f"bad{k}.log").read_text()[-2000:]
            st = _calibration_status(diags)
            assert st.level == b"\x01" and reason in st.message and "calibration required" in st.message, st.message
            kv = {v.key: v.value for v in st.values}
            assert reason in kv["state_refused"]
            n = len(diags)
            assert spin_until(ex, lambda n=n: len(diags) > n + 3, 10.0) and proc.poll() is None   # still running
            stop(proc)
            assert state.read_text() == text                  # a refused file is left as it was
    finally:
        if proc.poll() is None:
            stop(proc)
        probe.destroy_node()


def test_state_file_format_checks(tmp_path) -> None:
    from vehcal_ros.io.calibration_state import StageState, write_state

    summ = {"mean": 0.004, "std": 1e-4, "hdi_low": 0.0038, "hdi_high": 0.0042, "r_hat": 1.002, "ess_bulk": 800.0,
            "ess_tail": 700.0}
    stage = StageState({"rr": dict(summ)}, {"u": {**summ, "mean": 0.1}}, True, (20.5, 30.5), 1.2)
    for name in ("s.json", "s.yaml"):
        write_state(tmp_path / name, "truck7", {"rolling_resistance": stage})
        assert read_state(tmp_path / name, "truck7") == {"rolling_resistance": stage}
    write_state(tmp_path / "v.json", "truck7", {"rolling_resistance": stage}, vehicle="hmmwv")
    assert read_state(tmp_path / "v.json", "truck7", vehicle="hmmwv") == {"rolling_resistance": stage}
    with pytest.raises(StateRefused, match="vehicle description 'hmmwv', this node uses 'sedan'"):
        read_state(tmp_path / "v.json", "truck7", vehicle="sedan")
    with pytest.raises(FileNotFoundError):
        read_state(tmp_path / "none.json", "truck7")
    good = json.loads((tmp_path / "s.json").read_text())
    bad = {"expected a mapping": "[1, 2]", "not a vehcal_ros": json.dumps({"format": "x"}),
           "incompatible version 3": json.dumps({**good, "version": 3}),
           "written for vehicle_id 'truck8'": json.dumps({**good, "vehicle_id": "truck8"}),
           "unknown stage": json.dumps({"format": "vehcal_ros/calibration_state", "version": 1, "vehicle_id": "a",
                                        "stages": {"yaw": {}}}),
           "ess_bulk missing": (tmp_path / "s.json").read_text().replace('"ess_bulk"', '"ess"')}
    for reason, text in bad.items():
        (tmp_path / "b.json").write_text(text)
        with pytest.raises(StateRefused, match=reason):
            read_state(tmp_path / "b.json", "a" if "unknown" in reason else "truck7")


def test_state_file_keeps_the_predictive_check_and_reads_files_without_it(tmp_path) -> None:
    from vehcal_ros.estimation.calibration.pipeline import CalibrationPipeline, CalibrationPipelineConfig
    from vehcal_ros.io.calibration_state import StageState, restore_into, write_state

    summ = {"mean": 0.013, "std": 1e-4, "hdi_low": 0.0128, "hdi_high": 0.0132, "r_hat": 1.002, "ess_bulk": 800.0,
            "ess_tail": 700.0}
    holdout = {"segment": [29.0, 30.5], "fitted": [20.5, 28.99], "passed": True, "replaced": "nominal",
               "rmse_candidate": {"u": 0.101}, "rmse_replaced": {"u": 0.12}, "coverage": {"u": 0.9},
               "message": "held-back [29.00, 30.50] s: ..."}
    new = StageState({"rr": dict(summ)}, {"u": {**summ, "mean": 0.1}}, True, (20.5, 30.5), 1.2, holdout)
    for name in ("h.json", "h.yaml"):
        write_state(tmp_path / name, "truck7", {"rolling_resistance": new})
        assert read_state(tmp_path / name, "truck7") == {"rolling_resistance": new}
    # a file written before the check existed: no 'holdout' key; read, restored without a check
    doc = json.loads((tmp_path / "h.json").read_text())
    del doc["stages"]["rolling_resistance"]["holdout"]
    (tmp_path / "old.json").write_text(json.dumps(doc))
    old = read_state(tmp_path / "old.json", "truck7")["rolling_resistance"]
    assert old.holdout is None and old.parameters == new.parameters
    p = CalibrationPipeline(CalibrationPipelineConfig(stages=("rolling_resistance",)))
    assert restore_into(p, {"rolling_resistance": old}, note="restored") == ["rolling_resistance"]
    assert p.status["rolling_resistance"].result_holdout is None
    assert restore_into(p, read_state(tmp_path / "h.json", "truck7"), note="restored") == ["rolling_resistance"]
    st = p.status["rolling_resistance"]
    assert st.result_holdout == holdout and "held-out RMSE u 0.101 vs 0.12 nominal" in st.message
    doc["stages"]["rolling_resistance"]["holdout"] = [1, 2]
    (tmp_path / "bad.json").write_text(json.dumps(doc))
    with pytest.raises(StateRefused, match="'holdout' must be a mapping"):
        read_state(tmp_path / "bad.json", "truck7")
