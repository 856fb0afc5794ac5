"""kill -9 leaves no truncated file, and a restart comes back with the last accepted model.

* kill -9 during writes: a writer process rewrites a state file (io/calibration_state.py) and a params YAML
  (``write_atomic``) in a tight loop, with a version number in each, and is killed with SIGKILL at random times
  (fixed seed) KILLS times. After every kill both files parse and equal, byte for byte, the text of one whole
  version; the kills that landed mid-write left temporary files, and a real ``model_calibrator`` started on
  those files removes them and restores the last version's stage.
* kill -9 during a fit: the node in its own process over real DDS accepts a fit (state file and params YAML
  written), then starts a long one (n_draws raised at runtime) and is killed in it; the restarted node publishes
  the first model again at once (latched, every figure identical), both files are whole and no temp is left.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml
from calibration_drive import drive_records
from calibrator_probe import CalibratorProbe, closed, model_rr, publish
from crash_writer import SAVED_AT, params_text, version_state
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.parameter import Parameter
from ros_util import spawn, spin_until, stop, wait_for_match

from vehcal_ros.atomic_files import TEMP_PREFIX
from vehcal_ros.io.calibration_state import read_state, state_text
from vehcal_ros.nodes.grip_estimator import latched_qos

pytestmark = pytest.mark.ros

KILLS = 30


def _temps(directory) -> list[str]:
    return sorted(n for n in os.listdir(directory) if n.startswith(TEMP_PREFIX))


def test_kill_during_writes_leaves_whole_files_and_restart_cleans_temps(rclpy_context, tmp_path) -> None:
    state, params = tmp_path / "state.json", tmp_path / "model.yaml"
    rng = np.random.default_rng(14)
    writer = subprocess.Popen([sys.executable, str(Path(__file__).resolve().parents[1] / "crash_writer.py"),
                               str(state), str(params)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    mid_write = 0
    k = 0
    try:
        for _ in range(KILLS):
            writer.stdin.write(f"{k}\n")
            writer.stdin.flush()
            pid = int(writer.stdout.readline())
            time.sleep(float(rng.uniform(0.0, 0.05)))
            os.kill(pid, signal.SIGKILL)
            assert writer.stdout.readline().strip() == "reaped"
            # both files whole: each is exactly the text of one version
            stages = read_state(state, "truck7")
            v = int(round((stages["rolling_resistance"].parameters["rr"]["mean"] - 0.004) / 1e-6))
            assert state.read_text() == state_text(state, "truck7", version_state(v), now=SAVED_AT)
            doc = yaml.safe_load(params.read_text())
            w = doc["model_calibrator"]["ros__parameters"]["version"]
            assert params.read_text() == params_text(w)
            assert v >= k and w >= k and abs(v - w) <= 1
            mid_write += bool(_temps(tmp_path))
            k = max(v, w) + 1
    finally:
        writer.stdin.close()
        writer.wait(timeout=30)
    assert mid_write >= 1, "no kill landed inside a write"
    print(f"{KILLS} kills, {mid_write} left temporary files; {len(_temps(tmp_path))} temps now; last version {k - 1}")

    # a real node started on these files: temps removed, the last version's stage restored and published
    log = tmp_path / "node.log"
    probe = Node("probe_crash_writes", context=rclpy_context)
    ex = SingleThreadedExecutor(context=rclpy_context)
    ex.add_node(probe)
    models: list = []
    probe.create_subscription(DiagnosticArray, "/vehcal/model_parameters", models.append, latched_qos())
    expected_rr = read_state(state, "truck7")["rolling_resistance"].parameters["rr"]["mean"]
    proc = spawn(["-m", "vehcal_ros.nodes.model_calibrator", "--ros-args", "-p", f"state_file:={state}",
                  "-p", "vehicle_id:=truck7", "-p", f"params_out:={params}"], log_path=str(log))
    try:
        assert spin_until(ex, lambda: models, 60.0), log.read_text()[-2000:]
        assert float(model_rr(models[-1])["mean"]) == pytest.approx(expected_rr, rel=1e-12)
        assert _temps(tmp_path) == [], _temps(tmp_path)
    finally:
        stop(proc)
        probe.destroy_node()
    yaml.safe_load(params.read_text())


@pytest.mark.slow
def test_kill_during_fit_restarts_with_last_accepted_model(rclpy_context, tmp_path) -> None:
    from rclpy.parameter_client import AsyncParameterClient

    state, params = tmp_path / "truck7_state.json", tmp_path / "model.yaml"
    args = ["-m", "vehcal_ros.nodes.model_calibrator", "--ros-args", "-p", "stages:=[rolling_resistance]",
            "-p", "n_chains:=2", "-p", "n_draws:=200", "-p", "min_ess:=50.0", "-p", "max_r_hat:=1.05",
            "-p", "calibration_period:=0.3", "-p", "recalibration_period:=0.0", "-p", "diagnostics_period:=0.2",
            "-p", "stale_timeout:=60.0", "-p", f"state_file:={state}", "-p", "vehicle_id:=truck7",
            "-p", f"params_out:={params}"]
    cp = CalibratorProbe(rclpy_context, "probe_crash_fit")
    probe, ex, diags, models, pubs = cp.node, cp.ex, cp.diags, cp.models, cp.pubs
    proc = spawn(args, log_path=str(tmp_path / "run1.log"))
    try:
        assert all(wait_for_match(ex, p, timeout=60.0) for p in pubs.values())
        publish(pubs, ex, closed(drive_records(seed=2, t0=100.0, duration=10.0)), {})
        assert spin_until(ex, lambda: models, 120.0), (tmp_path / "run1.log").read_text()[-2000:]
        first = model_rr(models[-1])
        saved_state, saved_params = state.read_text(), params.read_text()
        # the next fit is long (4 x 20000 particles), on a second, more excited drive; kill -9 while it runs
        client = AsyncParameterClient(probe, "model_calibrator")
        assert client.wait_for_services(timeout_sec=30.0)
        future = client.set_parameters([Parameter("n_chains", value=4), Parameter("n_draws", value=20000)])
        assert spin_until(ex, future.done, 30.0) and all(r.successful for r in future.result().results)
        diags.clear()
        publish(pubs, ex, closed(drive_records(seed=1, t0=200.0, duration=10.0)), {})

        def busy() -> bool:
            return any(kv.key == "busy" and kv.value == "True" for arr in diags[-3:] for st in arr.status
                       if st.name == "model_calibrator: inputs" for kv in st.values)
        if not spin_until(ex, busy, 120.0):
            pytest.fail("no second fit: " + "; ".join(f"{st.name}: {st.message}" for st in diags[-1].status),
                        pytrace=False)
        ex.spin_once(timeout_sec=1.0)
        assert busy() and len(models) == 1
        proc.send_signal(signal.SIGKILL)                      # kill -9 during the fit
        proc.wait(timeout=10)
        assert state.read_text() == saved_state and params.read_text() == saved_params
        assert _temps(tmp_path) == []

        proc = spawn(args, log_path=str(tmp_path / "run2.log"))
        again: list = []
        probe.create_subscription(DiagnosticArray, "/vehcal/model_parameters", again.append, latched_qos())
        assert spin_until(ex, lambda: again, 60.0), (tmp_path / "run2.log").read_text()[-2000:]
        assert model_rr(again[-1]) == first                      # the last accepted model, every figure
        doc = json.loads(state.read_text())
        assert doc["vehicle_id"] == "truck7" and "rolling_resistance" in doc["stages"]
        assert _temps(tmp_path) == []
    finally:
        if proc.poll() is None:
            stop(proc)
        probe.destroy_node()
