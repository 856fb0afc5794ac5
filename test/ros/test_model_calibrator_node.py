"""The model_calibrator node over real Fast DDS on loopback (node and a publisher node in this process, one
executor; the fit runs in the node's worker thread).

* a synthetic 8-DOF drive (coast-down) -> /vehcal/model_parameters, updated ``model.rr`` parameter, params YAML,
  and every published input message received while the worker ran;
* bad input (wheel speeds in rpm, too short, gaps and NaN, unexcited) -> the node keeps running, keeps its last
  good model and says why on /diagnostics; out-of-range parameters rejected; bad start-up parameter -> exit 2.
"""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest
import rclpy
import yaml
from calibration_drive import drive_records
from calibration_synthetic import TRUTH
from calibrator_probe import TOPICS, closed, publish
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.parameter import Parameter
from ros_util import spin_until, wait_for_match

from vehcal_ros.nodes.common import latched_qos
from vehcal_ros.nodes.model_calibrator import ModelCalibratorNode
from vehcal_ros.records import Controls, ImuSample, OdomSample, WheelSpeeds
from vehcal_ros.vehicle.description import load_description

pytestmark = pytest.mark.ros


def _overrides(tmp_path) -> list[Parameter]:
    return [Parameter("stages", value=["rolling_resistance"]), Parameter("n_chains", value=2),
            Parameter("n_draws", value=200), Parameter("min_ess", value=50.0), Parameter("max_r_hat", value=1.05),
            Parameter("calibration_period", value=0.3), Parameter("recalibration_period", value=0.0),
            Parameter("diagnostics_period", value=0.2), Parameter("stale_timeout", value=30.0),
            Parameter("params_out", value=str(tmp_path / "model.yaml"))]


@pytest.fixture()
def graph(rclpy_context, tmp_path):
    node = ModelCalibratorNode(context=rclpy_context, parameter_overrides=_overrides(tmp_path))
    probe = Node("probe", context=rclpy_context)
    received: dict[str, list] = {"model": [], "diag": []}
    probe.create_subscription(DiagnosticArray, "/vehcal/model_parameters", received["model"].append, latched_qos())
    probe.create_subscription(DiagnosticArray, "/diagnostics", received["diag"].append, 50)
    pubs = {cls: probe.create_publisher(msg, topic, 1000) for cls, (topic, msg) in TOPICS.items()}
    ex = SingleThreadedExecutor(context=rclpy_context)
    ex.add_node(node)
    ex.add_node(probe)
    assert all(wait_for_match(ex, p) for p in pubs.values())
    yield node, pubs, ex, received
    node.shutdown()
    ex.shutdown()
    node.destroy_node()
    probe.destroy_node()


def _stage_status(received: dict, stage: str = "rolling_resistance"):
    for arr in reversed(received["diag"]):
        for st in arr.status:
            if st.name.endswith(stage):
                return st
    return None


def _received_total(received: dict) -> int | None:
    """The input messages the node says it has received: the sum of the ``received_<topic>`` values of its newest
    ``inputs`` status on /diagnostics (None before one)."""
    st = _stage_status(received, "inputs")
    return None if st is None else sum(int(kv.value) for kv in st.values if kv.key.startswith("received_"))


def test_model_published_params_set_and_bad_input_reported(graph, tmp_path) -> None:
    node, pubs, ex, received = graph
    counts: dict[str, int] = {}
    publish(pubs, ex, closed(drive_records(seed=1, t0=100.0, duration=10.0)), counts)
    st = node.pipeline.status["rolling_resistance"]
    assert spin_until(ex, lambda: len(received["model"]) > 0, timeout=60.0), st.message
    arr = received["model"][-1]
    rr = next(s for s in arr.status if s.name == "rr")
    kv = {k.key: k.value for k in rr.values}
    assert set(kv) >= {"mean", "std", "hdi_low", "hdi_high", "r_hat", "ess_bulk", "ess_tail", "stage", "time"}
    assert kv["stage"] == "rolling_resistance"
    assert float(kv["hdi_low"]) < TRUTH["rr"] * 1.05 and float(kv["hdi_high"]) > TRUTH["rr"] * 0.95
    assert any(s.name == "rolling_resistance/sigma_u" for s in arr.status)
    assert node.get_parameter("model.rr").value == pytest.approx(float(kv["mean"]))
    assert node.get_parameter("model.cxf").value == 10300.0          # not calibrated: the default
    # the accepted fit's held-out RMSE next to its parameters on the stage's /diagnostics status
    assert spin_until(ex, lambda: (s := _stage_status(received)) is not None and any(
        k.key == "holdout_rmse_u" for k in s.values), timeout=10.0)
    diag = {k.key: k.value for k in _stage_status(received).values}
    assert float(diag["holdout_rmse_u"]) > 0 and float(diag["holdout_rmse_replaced_u"]) > 0
    assert diag["holdout_replaced"] == "nominal" and 0.0 <= float(diag["holdout_coverage_u"]) <= 1.0
    assert float(diag["holdout_t0"]) > float(diag["segment_t0"]) and "rr" in diag
    doc = yaml.safe_load((tmp_path / "model.yaml").read_text())
    assert doc["model_calibrator"]["ros__parameters"]["model"]["rr"] == pytest.approx(float(kv["mean"]))
    good_rr = node.get_parameter("model.rr").value
    n_models = len(received["model"])

    # more data while the worker may be fitting: nothing published is lost
    publish(pubs, ex, closed(drive_records(seed=2, t0=200.0, duration=10.0, wheel_scale=30.0 / math.pi)),
            counts)
    total = sum(counts.values())
    assert spin_until(ex, lambda: _received_total(received) == total, timeout=20.0), (total, node.pipeline.counters)

    # rpm wheel speeds: rejected by the plausibility check, model kept, reason on /diagnostics
    assert spin_until(ex, lambda: (s := _stage_status(received)) is not None and "rpm" in s.message, 30.0), \
        st.message
    assert st.result is not None and st.n_rejected >= 1

    # too short a coast
    publish(pubs, ex, closed(drive_records(seed=3, t0=300.0, duration=6.5)), counts)
    assert spin_until(ex, lambda: "too short" in _stage_status(received).message, 30.0), st.message

    # gaps and NaN in the coast: the NaN are counted, the window is cut
    recs = [r for r in drive_records(seed=4, t0=400.0, duration=10.0)
            if not (isinstance(r, OdomSample) and 406.0 < r.t < 406.3)]
    recs = [ImuSample(r.t, math.nan, r.roll_rate, r.yaw_rate, 0.0, 0.0) if isinstance(r, ImuSample)
            and 408.0 < r.t < 408.1 else r for r in recs]
    publish(pubs, ex, closed(recs), counts)
    assert spin_until(ex, lambda: "gap or NaN" in _stage_status(received).message, 30.0), st.message
    assert node.pipeline.counters.dropped["nonfinite"] >= 9

    # unexcited: steady speed, throttle released (no speed drop)
    flat = []
    for k in range(600):
        t = 500.0 + k / 100.0
        flat += [WheelSpeeds(t, np.full(4, 20.0)), ImuSample(t, 0.0, 0.0, 0.0, 0.0, 0.0),
                 OdomSample(t, 9.1, 0.0, 0.0), Controls(t, 0.0, 0.0, 0.0)]
    publish(pubs, ex, closed(flat), counts)
    assert spin_until(ex, lambda: "not excited" in _stage_status(received).message, 30.0), st.message

    inputs = next(s for s in reversed(received["diag"][-1].status) if s.name.endswith("inputs"))
    assert any(kv.key == "dropped_nonfinite" for kv in inputs.values)
    assert len(received["model"]) == n_models                      # nothing new published as the model
    assert node.get_parameter("model.rr").value == good_rr
    assert st.level == 0 and rclpy.ok(context=node.context)


def test_parameters_out_of_range_are_rejected(graph) -> None:
    node, *_ = graph
    res = node.set_parameters([Parameter("n_draws", value=5)])[0]
    assert not res.successful and "n_draws" in res.reason and "20" in res.reason
    res = node.set_parameters([Parameter("yaw_rate_source", value="gps")])[0]
    assert not res.successful and "yaw_rate_source" in res.reason
    res = node.set_parameters([Parameter("model.rr", value=-1.0)])[0]
    assert not res.successful and "model.rr" in res.reason
    res = node.set_parameters([Parameter("lat_min_speed", value=12.0)])[0]
    assert res.successful and node.pipeline.config.segments.lat_min_speed == 12.0
    # prior ranges: [lower, upper], named in the rejection; a valid one reaches the pipeline's stages
    # unset by default: the vehicle description's range and nominal values, published as the model in use
    assert list(node.get_parameter("prior.rr").value) == [] and node.pipeline.config.priors is None
    desc = load_description(node.values["vehicle"])
    assert node.get_parameter("model.rr").value == desc.nominal["rr"]
    assert node.get_parameter("model.kphi_f").value == desc.nominal["kphi_f"]
    for bad in ([0.03, 0.005], [0.001]):
        res = node.set_parameters([Parameter("prior.rr", value=bad)])[0]
        assert not res.successful and "'prior.rr'" in res.reason, res.reason
    res = node.set_parameters([Parameter("prior.rr", value=[0.001, 0.03])])[0]
    assert res.successful and node.pipeline.config.priors["rr"] == (0.001, 0.03)
    res = node.set_parameters([Parameter("prior.rr", value=[0.005, 0.03])])[0]
    assert res.successful and node.pipeline.config.priors["rr"] == (0.005, 0.03)
    res = node.set_parameters([Parameter("prior.rr", value=[])])[0]   # back to the description's
    assert res.successful and node.pipeline.config.priors is None


def test_startup_with_bad_parameter_exits_with_one_line() -> None:
    proc = subprocess.run([sys.executable, "-m", "vehcal_ros.nodes.model_calibrator", "--ros-args",
                           "-p", "n_chains:=0"], capture_output=True, text=True, timeout=60)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out
    assert "n_chains" in out and "Traceback" not in out and len(proc.stdout.strip().splitlines()) == 1
