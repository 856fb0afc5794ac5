"""`vehcal run estimate --sim`: the launch file's nodes in one process against the simulator, over real DDS.

The test process is the consumer: it receives grip estimates and the model parameters, and the simulator's
ground truth, and checks the grip interval against the true mu_max under the front wheels. A bad params file
is one line and exit 2 before any node starts.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import Vector3Stamped
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from ros_util import spin_until, stop

from vehcal_ros.nodes import conversions
from vehcal_ros.nodes.grip_estimator import latched_qos

ROOT = Path(__file__).resolve().parents[1]
VEHCAL = [sys.executable, "-m", "vehcal_ros.cli"]

pytestmark = pytest.mark.ros


def _params(tmp_path: Path) -> Path:
    """config/estimate.yaml with quicker cycles (the same file format `vehcal run` reads)."""
    doc = yaml.safe_load((ROOT / "config" / "estimate.yaml").read_text())
    grip = doc["grip_estimator"]["ros__parameters"]
    grip.update({"fit_period": 3.0, "n_steps": 20000})
    cal = doc["model_calibrator"]["ros__parameters"]
    cal.update({"stages": ["longitudinal"], "calibration_period": 3.0, "n_chains": 4, "n_draws": 300,
                "max_r_hat": 1.1, "min_ess": 100.0})
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_run_estimate_sim_gives_grip_within_truth_and_model(tmp_path, rclpy_context) -> None:
    probe = Node("run_probe", context=rclpy_context)
    grip: list[Vector3Stamped] = []
    model: list[DiagnosticArray] = []
    truth: list[float] = []

    def on_truth(msg: DiagnosticArray) -> None:
        rec = conversions.msg_to_ground_truth(msg)
        if rec is not None:
            truth.append(float(np.mean(rec.mu_max[:2])))

    probe.create_subscription(Vector3Stamped, "/vehcal/grip/front_axle", grip.append, latched_qos())
    probe.create_subscription(DiagnosticArray, "/vehcal/model_parameters", model.append, latched_qos())
    probe.create_subscription(DiagnosticArray, "/vehicle/ground_truth", on_truth, 100)
    ex = SingleThreadedExecutor(context=rclpy_context)
    ex.add_node(probe)
    log = open(tmp_path / "run.log", "w")  # noqa: SIM115
    cmd = [*VEHCAL, "run", "estimate", "--sim", "daily_driving", "--params", str(_params(tmp_path)),
           "--duration", "45", "--realtime-factor", "2", "--executor", "events"]
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    try:
        done = spin_until(ex, lambda: proc.poll() is not None, timeout=250.0)
        spin_until(ex, lambda: bool(grip and model), timeout=5.0)
        assert done, (tmp_path / "run.log").read_text()[-3000:]
        assert proc.returncode == 0
        assert grip and model, (tmp_path / "run.log").read_text()[-3000:]
    finally:
        stop(proc)
        log.close()
    est = grip[-1]
    mu_true = float(np.median(truth))
    assert est.vector.y <= mu_true <= est.vector.z, (est.vector, mu_true)
    names = {st.name: {kv.key: kv.value for kv in st.values} for st in model[-1].status}
    for name in ("Cxf", "Cxr"):   # the 8-DOF slip stiffnesses have no exact 14-DOF counterpart: check the posterior
        s = names[name]
        assert np.isfinite(float(s["mean"])) and float(s["hdi_low"]) <= float(s["mean"]) <= float(s["hdi_high"])
        assert float(s["r_hat"]) <= 1.1


def test_run_estimate_rejects_bad_params_file(tmp_path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("grip_estimator:\n  ros__parameters:\n    n_chains: 8\n    no_such_key: 1\n")
    proc = subprocess.run([*VEHCAL, "run", "estimate", "--params", str(bad)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "no_such_key" in lines[0] and "unknown parameter" in lines[0]
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text("grip_estimator:\n  ros__parameters:\n    fit_period: 5\n")
    proc = subprocess.run([*VEHCAL, "run", "estimate", "--params", str(wrong)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2 and "fit_period" in proc.stderr and "floating-point" in proc.stderr
