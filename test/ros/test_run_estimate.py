"""`vehcal run estimate`: a bad params file is one line and exit 2 before any node starts; live against the
simulator over DDS, the published grip and model parameters contain the simulator's truth.
"""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
VEHCAL = [sys.executable, "-m", "vehcal_ros.cli"]

pytestmark = pytest.mark.ros


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


# ---------------------------------------------------------------------------------------------------------------
# live, end to end: `vehcal run estimate --sim` over DDS against the simulator's truth
# ---------------------------------------------------------------------------------------------------------------
RR_TIRE = 0.008 * 0.4699   # the simulator's tire: rolling-resistance lever QSY1 R0 (vehcal_ros/data/hmmwv.yaml), m
#: The 8-DOF rr is an effective lever: it also takes the coast-down losses the 8-DOF model lacks and the other
#: wheel radius and masses of the richer model, so its posterior (a few 1e-5 wide) concentrates on the
#: model's pseudo-true value, not on the tire's QSY1 R0, and that value depends on the description's constants.
#: With the simulated HMMWV's description (hmmwv_sim, what `run --sim` gives the estimators) it is 0.0044-0.0045
#: (+17 to +20 %) on the fleet benchmark's daily drives (benchmarks/results/carry_forward.md) and 0.0045 here; with the
#: 8-DOF paper's HMMWV constants 0.0039-0.0041 (+4 to +9 %). The test asks the published HDI to lie within this
#: model-form band around QSY1 R0.
RR_MODEL_FORM = 0.25
#: 90 % -> 99.9 % interval about the mean for a near-Gaussian posterior: z_0.9995 / z_0.95 = 3.29 / 1.645
WIDEN = 2.0


def _live_params(tmp_path) -> Path:
    """config/estimate.yaml with a calibrator limited to the coast-down stage (the short scenario has no lateral
    maneuver) and a simulator that waits for the test's probe."""
    import yaml

    params = yaml.safe_load((ROOT / "config" / "estimate.yaml").read_text())
    cal = params["/**/model_calibrator"]["ros__parameters"]
    cal.update({"stages": ["rolling_resistance"], "require_order": False, "n_draws": 500, "min_ess": 200.0,
                "min_ess_tail": 200.0})
    params["/**/vehicle_simulator"]["ros__parameters"].update({"wait_for_subscribers": 2, "wait_timeout": 60.0})
    path = tmp_path / "live.yaml"
    path.write_text(yaml.safe_dump(params))
    return path


@pytest.mark.slow
def test_run_estimate_sim_publishes_grip_and_model_within_truth(tmp_path, rclpy_context) -> None:
    """`vehcal run estimate --sim accel_coast` in another process; a probe node receives over DDS what an MPC
    would: every published mu_max interval (90 %), widened to 99.9 % (WIDEN), must contain the simulator's true
    mu_max, and the
    calibrated rolling resistance's 94 % HDI must lie within the model-form band around the tire's QSY1 R0
    (RR_MODEL_FORM)."""
    from diagnostic_msgs.msg import DiagnosticArray
    from geometry_msgs.msg import Vector3Stamped
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.node import Node
    from ros_util import spawn, spin_until, stop, wait_for_match

    from vehcal_ros.nodes.common import latched_qos
    from vehcal_ros.nodes.conversions import msg_to_ground_truth

    params = _live_params(tmp_path)
    probe = Node("probe_run_sim", context=rclpy_context)
    grip: dict[str, list] = {"front_axle": [], "rear_axle": []}
    model: list = []
    truth: list[float] = []

    def on_truth(m) -> None:
        rec = msg_to_ground_truth(m)
        if rec is not None:
            truth.append(float(rec.mu_max.mean()))

    subs = [probe.create_subscription(Vector3Stamped, f"/vehcal/grip/{s}", grip[s].append, 10) for s in grip]
    subs.append(probe.create_subscription(DiagnosticArray, "/vehcal/model_parameters", model.append, latched_qos()))
    probe.create_subscription(DiagnosticArray, "/vehicle/ground_truth", on_truth, 10)
    ex = SingleThreadedExecutor(context=rclpy_context)
    ex.add_node(probe)
    proc = spawn(["-m", "vehcal_ros.cli", "run", "estimate", "--sim", str(ROOT / "config" / "scenarios" /
                                                                          "accel_coast.yaml"),
                  "--params", str(params), "--executor", "events", "--realtime-factor", "1.0"],
                 log_path=str(tmp_path / "run.log"))
    try:
        assert wait_for_match(ex, subs[0], timeout=60.0), (tmp_path / "run.log").read_text()[-2000:]
        spin_until(ex, lambda: proc.poll() is not None, timeout=400.0)
        spin_until(ex, lambda: False, timeout=2.0)
        log = (tmp_path / "run.log").read_text()
        assert proc.returncode == 0, log[-3000:]
        assert truth, log[-2000:]
        mu_true = float(np.median(truth))
        estimates = [e for s in grip for e in grip[s] if math.isfinite(e.vector.x)]   # unknowns left out
        hits = [e.vector.y <= mu_true <= e.vector.z for e in estimates]
        print("published grip (scope, mean, lower, upper) vs truth", round(mu_true, 3),
              [(e.header.frame_id, round(e.vector.x, 3), round(e.vector.y, 3), round(e.vector.z, 3))
               for e in estimates])
        assert model, log[-3000:]
        rr = {kv.key: kv.value for st in model[-1].status if st.name == "rr" for kv in st.values}
        assert rr, [st.name for st in model[-1].status]
        lo, hi = float(rr["hdi_low"]), float(rr["hdi_high"])
        assert (1 - RR_MODEL_FORM) * RR_TIRE <= lo <= hi <= (1 + RR_MODEL_FORM) * RR_TIRE, (rr, RR_TIRE)
        assert float(rr["r_hat"]) <= 1.01
        # every published estimate passed the convergence rule (the node withholds the others); on this drive
        # both axles publish (replay of the same scenario: 4 front, 3 rear)
        assert estimates, "no grip estimate published: " + " | ".join(
            ln for ln in log.splitlines() if "grip_estimator" in ln and "not published" in ln)[-2000:]
        # Each published 90 % interval, widened about its mean to 99.9 % (half-widths x z_0.9995 / z_0.95 = 2.0 for
        # a near-Gaussian posterior), must contain the truth: whatever the correlation between consecutive
        # windows, the chance that any of n calibrated intervals misses is <= n x 0.1 % (union bound). The 90 %
        # intervals themselves miss now and then (expected misses n x 0.1, more clustered when the windows
        # overlap; seen: 1 of 10 here, 2 of 12 on CI's machine): their coverage is shown by simulation-based
        # calibration (benchmarks/bench_grip_sbc.py: the live design, 200 sets; test_grip_sbc.py: the paper design),
        # not by one run.
        wide = [e.vector.x - WIDEN * (e.vector.x - e.vector.y) <= mu_true
                <= e.vector.x + WIDEN * (e.vector.z - e.vector.x) for e in estimates]
        assert all(wide), (mu_true, sum(hits), [(e.header.frame_id, round(e.vector.x, 3), round(e.vector.y, 3),
                                                  round(e.vector.z, 3)) for e in estimates])
    finally:
        if proc.poll() is None:
            stop(proc)
