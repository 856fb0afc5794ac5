"""The estimators' std_srvs services over real DDS: ``~/reset``, ``~/enable`` on both nodes,
``~/calibrate`` and ``~/save`` on model_calibrator, and the calibrator's ``calibration required`` status.

* calibrator: calibration required (WARN, naming the coast-down and what the data gave) -> calibrate-now on an
  open coast-down answers with the accepted stage and publishes the model -> save writes a params YAML an MPC
  loads -> disabled: inputs ignored, no fit, model and state kept -> reset: buffers, stages, model parameters and
  state file back to the priors, and new data buffered again;
* grip_estimator: an estimate -> disabled: nothing buffered or published, estimate kept -> reset: buffers and
  estimates empty, a late joiner gets no estimate from before the reset, new data buffered again.
"""

from __future__ import annotations

import math

import pytest
import yaml
from calibration_drive import drive_records
from calibrator_probe import TOPICS, publish
from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import Vector3Stamped
from grip_probe import FAST, FakeVehicle, feed_good
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.parameter import Parameter
from ros_util import spin_until, wait_for_match
from std_srvs.srv import SetBool, Trigger

from vehcal_ros.io.calibration_state import read_state
from vehcal_ros.nodes.grip_estimator import GripEstimatorNode, latched_qos
from vehcal_ros.nodes.model_calibrator import ModelCalibratorNode

pytestmark = pytest.mark.ros


def call(ex, node: Node, srv_type, name: str, request=None, timeout: float = 120.0):
    client = node.create_client(srv_type, name)
    assert client.wait_for_service(timeout_sec=10.0), name
    future = client.call_async(request or srv_type.Request())
    assert spin_until(ex, future.done, timeout=timeout), name
    node.destroy_client(client)
    return future.result()


def status(diags: list, suffix: str):
    for arr in reversed(diags):
        for st in arr.status:
            if st.name.endswith(suffix):
                return st
    return None


def test_calibrator_services_calibrate_save_enable_reset(rclpy_context, tmp_path) -> None:
    out, state = tmp_path / "model.yaml", tmp_path / "state.json"
    node = ModelCalibratorNode(context=rclpy_context, parameter_overrides=[
        Parameter("stages", value=["rolling_resistance"]), Parameter("n_chains", value=2),
        Parameter("n_draws", value=200), Parameter("min_ess", value=50.0), Parameter("max_r_hat", value=1.05),
        Parameter("calibration_period", value=86400.0),     # no timer cycles: only ~/calibrate fits
        Parameter("recalibration_period", value=0.0), Parameter("diagnostics_period", value=0.2),
        Parameter("stale_timeout", value=60.0), Parameter("params_out", value=str(out)),
        Parameter("state_file", value=str(state)), Parameter("vehicle_id", value="truck7")])
    probe = Node("probe_services", context=rclpy_context)
    models: list = []
    diags: list = []
    probe.create_subscription(DiagnosticArray, "/vehcal/model_parameters", models.append, latched_qos())
    probe.create_subscription(DiagnosticArray, "/diagnostics", diags.append, 50)
    pubs = {cls: probe.create_publisher(msg, topic, 1000) for cls, (topic, msg) in TOPICS.items()}
    ex = SingleThreadedExecutor(context=rclpy_context)
    ex.add_node(node)
    ex.add_node(probe)
    name = "/model_calibrator"
    try:
        assert all(wait_for_match(ex, p) for p in pubs.values())
        # managed start-up: silent, and /diagnostics says what is still needed
        assert spin_until(ex, lambda: status(diags, "calibration") is not None, 10.0)
        st = status(diags, "calibration")
        assert st.level == b"\x01" and st.message.startswith("calibration required") and "coast-down" in st.message
        assert not models
        answer = call(ex, probe, Trigger, f"{name}/calibrate")
        assert not answer.success and "nothing to fit" in answer.message

        # a coast-down still going on (open window): calibrate now takes it as it is
        counts: dict = {}
        publish(pubs, ex, drive_records(seed=1, t0=100.0, duration=10.0), counts)
        total = sum(counts.values())
        assert spin_until(ex, lambda: node.pipeline.counters.n_received == total, 20.0)
        answer = call(ex, probe, Trigger, f"{name}/calibrate")
        assert answer.success and "rolling_resistance: accepted" in answer.message, answer.message
        assert spin_until(ex, lambda: models, 10.0)
        rr = node.get_parameter("model.rr").value
        kv = {k.key: k.value for s in models[-1].status if s.name == "rr" for k in s.values}
        assert float(kv["mean"]) == pytest.approx(rr)
        assert read_state(state, "truck7")["rolling_resistance"].parameters["rr"]["mean"] == pytest.approx(rr)
        assert spin_until(ex, lambda: status(diags, "calibration").level == b"\x00", 5.0)

        # save: a params YAML an MPC node loads
        out.unlink()
        answer = call(ex, probe, Trigger, f"{name}/save")
        assert answer.success and str(out) in answer.message and str(state) in answer.message
        doc = yaml.safe_load(out.read_text())
        assert doc["model_calibrator"]["ros__parameters"]["model"]["rr"] == pytest.approx(rr)

        # disabled: nothing buffered, no fit, the model kept; enabled again
        n_models, n_rx = len(models), node.pipeline.counters.n_received
        assert call(ex, probe, SetBool, f"{name}/enable", SetBool.Request(data=False)).success
        publish(pubs, ex, drive_records(seed=2, t0=200.0, duration=10.0), {})
        assert spin_until(ex, lambda: node.paused_messages >= 0.9 * total, 20.0), node.paused_messages
        answer = call(ex, probe, Trigger, f"{name}/calibrate")
        assert not answer.success and "paused" in answer.message
        assert node.pipeline.counters.n_received == n_rx and len(models) == n_models
        assert node.get_parameter("model.rr").value == rr and node.pipeline.status["rolling_resistance"].result
        assert spin_until(ex, lambda: "paused" in status(diags, "inputs").message, 5.0)
        assert call(ex, probe, SetBool, f"{name}/enable", SetBool.Request(data=True)).success

        # reset: back to the priors (buffers, stage, model parameters, state file), and data is taken again
        answer = call(ex, probe, Trigger, f"{name}/reset")
        assert answer.success, answer.message
        assert node.pipeline.status["rolling_resistance"].result is None and sum(node.pipeline.fill().values()) == 0
        assert node.get_parameter("model.rr").value == 0.0175
        assert read_state(state, "truck7") == {}
        assert spin_until(ex, lambda: status(diags, "calibration").message.startswith("calibration required"), 5.0)
        late: list = []
        probe.create_subscription(DiagnosticArray, "/vehcal/model_parameters", late.append, latched_qos())
        spin_until(ex, lambda: late, 2.0)
        assert not late                          # no model from before the reset for a late joiner
        publish(pubs, ex, drive_records(seed=3, t0=300.0, duration=3.0), {})
        assert spin_until(ex, lambda: node.pipeline.counters.n_received > 0, 10.0)
    finally:
        node.shutdown()
        ex.shutdown()
        node.destroy_node()
        probe.destroy_node()


def _drain(ex, received: list, quiet: float = 0.5, timeout: float = 5.0) -> None:
    """Spin until ``received`` has not grown for ``quiet`` s (bounded by ``timeout``): messages the node
    published before a service call must not be counted as published after it."""
    import time

    deadline = time.monotonic() + timeout
    n, since = len(received), time.monotonic()
    while time.monotonic() < deadline and time.monotonic() - since < quiet:
        ex.spin_once(timeout_sec=0.05)
        if len(received) != n:
            n, since = len(received), time.monotonic()


def test_grip_services_enable_and_reset(rclpy_context) -> None:
    node = GripEstimatorNode(context=rclpy_context, parameter_overrides=list(FAST))
    probe = Node("probe_grip_services", context=rclpy_context)
    grip: list = []
    probe.create_subscription(Vector3Stamped, "/vehcal/grip/front_axle", grip.append, latched_qos())
    vehicle = FakeVehicle(probe)
    ex = SingleThreadedExecutor(context=rclpy_context)
    ex.add_node(node)
    ex.add_node(probe)
    name = "/grip_estimator"
    try:
        assert wait_for_match(ex, vehicle.f) and wait_for_match(ex, vehicle.w) and wait_for_match(ex, vehicle.o)
        t = feed_good(vehicle, ex, 100.0, 4.0)
        assert spin_until(ex, lambda: any(math.isfinite(m.vector.x) for m in grip), 120.0), (
            node.pipeline.status["front_axle"].message)
        spin_until(ex, lambda: not node.busy, 60.0)
        _drain(ex, grip)                         # estimates already published are still on their way

        # disabled: messages ignored (nothing buffered), no estimate published, the estimate kept
        assert call(ex, probe, SetBool, f"{name}/enable", SetBool.Request(data=False)).success
        n_grip, fill = len(grip), node.pipeline.collector.fill()
        accepted = node.pipeline.collector.counters.accepted
        t = feed_good(vehicle, ex, t, 3.0, seed=4)
        assert spin_until(ex, lambda: node.paused_messages >= 1000, 10.0), node.paused_messages
        spin_until(ex, lambda: False, 1.5)       # cycles would be due (fit_period 0.5 s)
        assert len(grip) == n_grip and node.pipeline.collector.fill() == fill
        assert node.pipeline.collector.counters.accepted == accepted
        assert node.pipeline.status["front_axle"].estimate is not None
        assert call(ex, probe, SetBool, f"{name}/enable", SetBool.Request(data=True)).success

        # reset: empty and restarting; a late joiner is not handed the estimate from before
        answer = call(ex, probe, Trigger, f"{name}/reset")
        assert answer.success and "cleared" in answer.message
        assert all(n == 0 for n in node.pipeline.collector.fill().values())
        assert all(st.estimate is None for st in node.pipeline.status.values())
        late: list = []
        probe.create_subscription(Vector3Stamped, "/vehcal/grip/front_axle", late.append, latched_qos())
        spin_until(ex, lambda: late, 2.0)
        assert not late
        feed_good(vehicle, ex, t + 1.0, 0.5, seed=5)
        assert spin_until(ex, lambda: sum(node.pipeline.collector.fill().values()) > 0, 10.0)
    finally:
        node.shutdown()
        ex.shutdown()
        node.destroy_node()
        probe.destroy_node()
