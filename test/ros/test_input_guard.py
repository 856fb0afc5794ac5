"""Input guard (estimation/sensing/input_guard.py), atomic writes under kill -9, non-UTF-8 files to the CLI, and the
nodes' runtime-parameter validation (array parameters, refused combinations leaving no pending state)."""

from __future__ import annotations

import math
import os
import signal
import time

import numpy as np
import pytest
import yaml

from vehcal_ros.estimation.sensing.input_guard import InputGuard
from vehcal_ros.records import Controls, ImuSample, OdomSample, TireForce, WheelSpeeds


def _odom(t: float, u: float = 15.0) -> OdomSample:
    return OdomSample(t=t, u=u, v=0.0, yaw_rate=0.0)


def test_implausible_and_nonfinite_values_refused_at_input() -> None:
    g = InputGuard(jump=1.0)
    assert g.check("tire_forces", TireForce(1.0, 0, 1e300, 0.0, 5000.0)) == "implausible"
    assert g.check("tire_forces", TireForce(1.0, 0, 2000.0, 0.0, math.inf)) == "nonfinite"
    assert g.check("wheel_speeds", WheelSpeeds(1.0, (30.0, 30.0, 1e300, 30.0))) == "implausible"
    assert g.check("odom", _odom(1.0, u=1e300)) == "implausible"
    assert g.check("imu", ImuSample(1.0, 0.0, 0.0, 0.0, 1e300, 0.0)) == "implausible"
    assert g.check("controls", Controls(1.0, 0.2, math.nan, 0.0)) == "nonfinite"
    # zero and negative speeds, zero and negative loads are plausible values (the gates downstream count them)
    assert g.check("odom", _odom(1.0, u=-3.0)) is None
    assert g.check("tire_forces", TireForce(1.0, 0, 0.0, 0.0, -10.0)) is None
    assert g.check("odom", _odom(0.0)) == "zero_stamp"


def test_stamps_duplicate_backwards_glitch_and_confirmed_jump() -> None:
    g = InputGuard(jump=1.0)
    for k in range(1, 50):
        assert g.check("odom", _odom(100.0 + 0.01 * k)) is None
    t = 100.49
    assert g.check("odom", _odom(t)) == "duplicate"
    assert g.check("odom", _odom(t - 0.2)) == "out_of_order"
    assert g.check("odom", _odom(t + 86400.0)) == "stamp_jump"     # one stamp a day ahead: a glitch, dropped
    assert g.check("odom", _odom(t + 0.01)) is None                # the stream goes on as before
    assert g.clock_jumps == 0
    assert g.check("odom", _odom(5.0)) == "stamp_jump"             # a restarted clock: first stamp held back
    assert g.check("odom", _odom(5.01)) is None                    # second on the new timeline: a real jump
    assert g.clock_jumps == 1
    assert g.check("wheel_speeds", WheelSpeeds(5.0, (1.0,) * 4)) is None   # a new stream starts anywhere


def test_lost_messages_counted_from_stamp_gaps() -> None:
    """Drop a known set of messages from a 100 Hz stream with +-10 % stamp jitter: the guard's count of lost
    messages must equal the number dropped (independent of how the guard estimates the period)."""
    rng = np.random.default_rng(5)
    g = InputGuard(jump=1.0, max_loss_gap=0.5)
    n = 3000
    dropped = set(rng.choice(np.arange(20, n), size=150, replace=False).tolist())
    dropped |= set(range(1000, 1004))                             # a burst of 4
    stamps = 50.0 + 0.01 * np.arange(n) + rng.uniform(-1e-3, 1e-3, n)
    for k in range(n):
        if k not in dropped:
            for w in range(4):
                assert g.check("tire_forces", TireForce(float(stamps[k]), w, 100.0, 0.0, 5000.0)) is None
    row = g.totals()["tire_forces"]
    assert row["lost"] == 4 * len(dropped)
    assert row["expected"] == 4 * n
    assert row["interruptions"] == 0
    # a topic that stops for 2 s and comes back: one interruption, no lost messages
    g2 = InputGuard()
    for k in range(100):
        g2.check("controls", Controls(10.0 + 0.01 * k, 0.0, 0.0, 0.0))
    reasons = [g2.check("controls", Controls(13.0 + 0.01 * k, 0.0, 0.0, 0.0)) for k in range(100)]
    assert reasons[0] == "stamp_jump" and not any(reasons[1:])   # the first stamp back waits for a second
    assert g2.totals()["controls"] == {"accepted": 199, "lost": 0, "expected": 199, "interruptions": 1}
    assert g2.clock_jumps == 0


# --------------------------------------------------------------------------------------------- atomic writes
def _write_forever(target) -> None:
    from vehcal_ros.atomic_files import write_atomic

    body = "1" * 20000
    k = 0
    while True:
        k += 1
        write_atomic(target, f"model_calibrator:\n  ros__parameters:\n    n: {k}\n    x: '{body}'\n")


def test_kill9_during_writes_leaves_complete_file_and_no_temp_files(tmp_path) -> None:
    """kill -9 a process writing params in a tight loop, 20 times at random moments: the target is always a
    complete YAML, and the next write removes every temporary file the killed writers left."""
    from vehcal_ros.atomic_files import write_atomic

    target = tmp_path / "model.yaml"
    rng = np.random.default_rng(0)
    for _ in range(20):
        pid = os.fork()
        if pid == 0:   # the writer (forked: no interpreter start-up per kill)
            try:
                _write_forever(target)
            finally:
                os._exit(1)
        deadline = time.monotonic() + 10.0
        while not target.exists() and time.monotonic() < deadline:
            time.sleep(0.002)
        time.sleep(float(rng.uniform(0.0, 0.02)))
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        doc = yaml.safe_load(target.read_text())
        assert doc["model_calibrator"]["ros__parameters"]["n"] >= 1
        assert len(doc["model_calibrator"]["ros__parameters"]["x"]) == 20000
    write_atomic(target, "model_calibrator:\n  ros__parameters:\n    n: 0\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.yaml"]


# ------------------------------------------------------------------------------------------------------ CLI
def test_non_utf8_files_to_the_cli_one_line_exit_2(tmp_path, capsys) -> None:
    from vehcal_ros.cli import main

    bad_csv = tmp_path / "bad.csv"
    bad_csv.write_bytes(b"time,throttle\n\xff\xfe\x00\x01\n")
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_bytes(b"grip_estimator:\n  ros__parameters:\n    seed: \xff\xfe\n")
    bag = tmp_path / "bag"
    bag.mkdir()
    for argv in (["calibrate", str(bad_csv), "--stage", "lateral"], ["replay", str(bag), "--params", str(bad_yaml)]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "UTF-8" in err and "Traceback" not in err, err


# ------------------------------------------------------------------------------------------ parameters
@pytest.mark.ros
def test_runtime_parameters_arrays_and_no_pending_state(rclpy_context) -> None:
    """Over the nodes' parameter services: double arrays (rclpy hands them as array.array) are accepted when
    valid; a refused combination leaves nothing behind (later valid changes go through); wrong types and
    out-of-range values are refused naming the parameter and the range."""
    from rcl_interfaces.msg import Parameter as ParamMsg
    from rcl_interfaces.msg import ParameterType, ParameterValue
    from rcl_interfaces.srv import SetParameters
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.node import Node
    from rclpy.parameter import Parameter
    from ros_util import spin_until

    from vehcal_ros.nodes.grip_estimator import GripEstimatorNode
    from vehcal_ros.nodes.model_calibrator import ModelCalibratorNode

    grip = GripEstimatorNode(context=rclpy_context, node_name="grip_params_test")
    cal = ModelCalibratorNode(context=rclpy_context, node_name="cal_params_test")
    probe = Node("params_probe", context=rclpy_context)
    ex = SingleThreadedExecutor(context=rclpy_context)
    for n in (grip, cal, probe):
        ex.add_node(n)

    def value(v) -> ParameterValue:
        if isinstance(v, bool):
            return ParameterValue(type=ParameterType.PARAMETER_BOOL, bool_value=v)
        if isinstance(v, int):
            return ParameterValue(type=ParameterType.PARAMETER_INTEGER, integer_value=v)
        if isinstance(v, float):
            return ParameterValue(type=ParameterType.PARAMETER_DOUBLE, double_value=v)
        if isinstance(v, str):
            return ParameterValue(type=ParameterType.PARAMETER_STRING, string_value=v)
        if all(isinstance(x, str) for x in v):
            return ParameterValue(type=ParameterType.PARAMETER_STRING_ARRAY, string_array_value=list(v))
        if all(isinstance(x, int) and not isinstance(x, bool) for x in v):
            return ParameterValue(type=ParameterType.PARAMETER_INTEGER_ARRAY, integer_array_value=list(v))
        return ParameterValue(type=ParameterType.PARAMETER_DOUBLE_ARRAY, double_array_value=[float(x) for x in v])

    clients = {name: probe.create_client(SetParameters, f"/{name}/set_parameters")
               for name in ("grip_params_test", "cal_params_test")}

    def set_param(node: str, name: str, v) -> tuple[bool, str]:
        cli = clients[node]
        assert spin_until(ex, cli.service_is_ready, 15.0)
        fut = cli.call_async(SetParameters.Request(parameters=[ParamMsg(name=name, value=value(v))]))
        assert spin_until(ex, fut.done, 15.0)
        r = fut.result().results[0]
        return r.successful, r.reason

    try:
        ok, why = set_param("grip_params_test", "theta_lower", [5.0, 1.2, 0.05, -2.7, -0.01, -0.05])
        assert ok, why
        upper_b = grip.values["theta_upper"][0]
        assert grip.values["theta_lower"][0] == 5.0 and grip.pipeline.fit_config.bounds[0] == (5.0, upper_b)
        ok, why = set_param("grip_params_test", "theta_lower", [upper_b + 10.0, 1.2, 0.05, -2.7, -0.01, -0.05])
        assert not ok and "theta_lower" in why and "theta_upper" in why
        ok, why = set_param("grip_params_test", "n_chains", 3)
        assert ok, why                                           # the refused bounds left nothing pending
        ok, why = set_param("grip_params_test", "theta_upper", ["a", "b"])
        assert not ok and "theta_upper" in why
        ok, why = set_param("grip_params_test", "n_chains", "eight")
        assert not ok and "n_chains" in why
        ok, why = set_param("grip_params_test", "n_chains", 1000)
        assert not ok and "n_chains" in why and "256" in why

        ok, why = set_param("cal_params_test", "prior.cxf", [5000.0, 20000.0])
        assert ok, why
        assert cal.pipeline.config.priors["Cxf"] == (5000.0, 20000.0)
        ok, why = set_param("cal_params_test", "prior.cxf", [1000, 50000])   # integers for a double array
        assert not ok and "prior.cxf" in why and "1000.0" in why
        assert cal.get_parameter("prior.cxf").type_ == Parameter.Type.DOUBLE_ARRAY   # its type is kept
        assert cal.values["prior.cxf"] == [5000.0, 20000.0]
        ok, why = set_param("cal_params_test", "min_duration", 20.0)   # > max_duration 10: a refused combination
        assert not ok and "min_duration" in why
        ok, why = set_param("cal_params_test", "n_chains", 3)
        assert ok, why
        ok, why = set_param("cal_params_test", "max_duration", 15.0)
        assert ok, why
        assert cal.values["min_duration"] == 2.0 and cal.pipeline.config.segments.max_duration == 15.0
        ok, why = set_param("cal_params_test", "n_draws", 5)
        assert not ok and "n_draws" in why and "20" in why
    finally:
        for n in (grip, cal):
            n.shutdown()
        ex.shutdown()
        for n in (grip, cal, probe):
            n.destroy_node()


@pytest.mark.ros
def test_calibrator_restart_removes_temp_files_of_a_killed_writer(tmp_path, rclpy_context) -> None:
    """A calibrator killed while writing params_out leaves a temp file; the next start removes it and keeps the
    last complete params file as it was."""
    from rclpy.parameter import Parameter

    from vehcal_ros.nodes.model_calibrator import ModelCalibratorNode

    target = tmp_path / "model.yaml"
    target.write_text("model_calibrator:\n  ros__parameters:\n    model.cxf: 12000.0\n")
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)                      # a pid that no longer runs: its temp file is stale
    stale = tmp_path / f".tmp_model.yaml.{pid}.abc123.yaml"
    stale.write_text("model_calibrator:\n  ros__par")
    node = ModelCalibratorNode(context=rclpy_context, parameter_overrides=[Parameter("params_out", value=str(target))])
    try:
        assert not stale.exists()
        assert yaml.safe_load(target.read_text())["model_calibrator"]["ros__parameters"]["model.cxf"] == 12000.0
    finally:
        node.shutdown()
        node.destroy_node()


@pytest.mark.ros
def test_lost_messages_reported_warn_on_diagnostics(rclpy_context) -> None:
    """A stream with holes in its stamps (every 10th odometry message never sent): the grip node's inputs status
    counts the missing messages per topic and turns WARN naming the topic."""
    from diagnostic_msgs.msg import DiagnosticArray
    from nav_msgs.msg import Odometry
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.node import Node
    from rclpy.parameter import Parameter
    from ros_util import spin_until, wait_for_match
    from sensor_msgs.msg import JointState

    from vehcal_ros.nodes.common import sec_to_stamp
    from vehcal_ros.nodes.grip_estimator import GripEstimatorNode, sensor_qos

    node = GripEstimatorNode(context=rclpy_context, node_name="grip_loss_test", parameter_overrides=[
        Parameter("diagnostics_period", value=0.1), Parameter("stale_timeout", value=100.0)])
    probe = Node("loss_probe", context=rclpy_context)
    diags: list = []
    probe.create_subscription(DiagnosticArray, "/diagnostics", diags.append, 50)
    pub_o = probe.create_publisher(Odometry, "/vehicle/odom", sensor_qos())
    pub_w = probe.create_publisher(JointState, "/vehicle/wheel_speeds", sensor_qos())
    ex = SingleThreadedExecutor(context=rclpy_context)
    ex.add_node(node)
    ex.add_node(probe)
    try:
        assert wait_for_match(ex, pub_o) and wait_for_match(ex, pub_w)
        sent_missing = 0
        for k in range(300):
            t = 100.0 + 0.01 * k
            js = JointState(name=["wheel_fl", "wheel_fr", "wheel_rl", "wheel_rr"], velocity=[30.0] * 4)
            js.header.stamp = sec_to_stamp(t)
            pub_w.publish(js)
            if k % 10 == 5 and k > 50:
                sent_missing += 1
            else:
                od = Odometry()
                od.header.stamp = sec_to_stamp(t)
                od.twist.twist.linear.x = 15.0
                pub_o.publish(od)
            ex.spin_once(timeout_sec=0.0)
            ex.spin_once(timeout_sec=0.0)

        def inputs():
            for arr in reversed(diags):
                for st in arr.status:
                    if st.name == "grip_estimator: inputs" and st.hardware_id.endswith("grip_loss_test"):
                        return st
            return None

        def lost(topic: str) -> int:
            st = inputs()
            return int(next((kv.value for kv in st.values if kv.key == f"lost_{topic}"), -1)) if st else -1

        assert spin_until(ex, lambda: lost("odom") == sent_missing, 30.0), (lost("odom"), sent_missing)
        assert lost("wheel_speeds") == 0
        assert spin_until(ex, lambda: any(st.level == b"\x01" and "data lost on: odom" in st.message
                                          for arr in diags for st in arr.status), 10.0)
    finally:
        node.shutdown()
        ex.shutdown()
        node.destroy_node()
        probe.destroy_node()
