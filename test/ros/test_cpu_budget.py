"""The nodes' CPU budget: the process's CPU share on /diagnostics, a WARN above ``cpu_budget``, fit cycles shed
(postponed) under it while every input message is still taken.

* pure: the rolling share on fake clocks; the shedding schedule (stretch doubling to the maximum, halving back;
  off = nothing shed);
* over real Fast DDS (the node and a publisher node in this process, one executor): a grip_estimator with a
  large budget sheds nothing; set to 0.1 % at run time it WARNs, reports shed cycles and still counts every
  published input message as received; an out-of-range budget is refused naming the parameter and its range;
  the model_calibrator reports its CPU share too.
"""

from __future__ import annotations

import math

import pytest
from builtin_interfaces.msg import Time
from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import WrenchStamped
from nav_msgs.msg import Odometry
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.parameter import Parameter
from ros_util import spin_until, wait_for_match
from sensor_msgs.msg import JointState

from vehcal_ros.nodes.cpu_budget import MAX_STRETCH, CpuMeter, FitShedder, max_stretch_for

WHEELS = ("wheel_fl", "wheel_fr", "wheel_rl", "wheel_rr")


# ------------------------------------------------------------------------------------------------ pure
class FakeClocks:
    def __init__(self) -> None:
        self.wall = 0.0
        self.cpu = 0.0


def test_share_is_process_cpu_over_wall_time_per_window() -> None:
    c = FakeClocks()
    meter = CpuMeter((10.0, 60.0), cpu=lambda: c.cpu, wall=lambda: c.wall)
    assert math.isnan(meter.share(10.0))            # no history yet
    for _ in range(120):                            # 60 s at 0.5 s: 20 % of a core for 50 s, then 80 % for 10 s
        c.wall += 0.5
        c.cpu += 0.1 if c.wall <= 50.0 else 0.4
        meter.sample()
    assert meter.share(10.0) == pytest.approx(80.0)
    assert meter.share(60.0) == pytest.approx((50 * 0.2 + 10 * 0.8) / 60 * 100)
    assert meter.n_samples <= 60.0 / 0.25 + 2   # bounded by the longest window


def test_shedder_stretches_to_the_maximum_and_back() -> None:
    off = FitShedder(0.0)
    assert all(off.due(500.0) for _ in range(20)) and off.shed == 0   # no budget: nothing shed
    sh = FitShedder(5.0)
    runs = [sh.due(50.0) for _ in range(4 * MAX_STRETCH)]            # sustained pressure
    assert sh.stretch == MAX_STRETCH and sh.shed == runs.count(False)
    gaps = [i for i, r in enumerate(runs) if r]
    assert gaps and all(b - a == MAX_STRETCH for a, b in zip(gaps, gaps[1:]))   # a fit every MAX_STRETCH cycles
    assert not any(runs[:MAX_STRETCH - 1])                          # the first over-budget cycles are postponed
    ran_after = [sh.due(1.0) for _ in range(6)]                      # back under budget: halving to 1
    assert sh.stretch == 1 and all(ran_after[-2:])
    sh2 = FitShedder(5.0)
    sh2.overran()                                                    # an overrun is pressure, once
    assert not sh2.due(1.0) and sh2.stretch == 2 and sh2.overruns == 1
    assert sh2.due(math.nan) and sh2.stretch == 1                    # an unknown share is no pressure


def test_a_stretched_period_stays_inside_the_data_window() -> None:
    """A sample buffered just after a fit is still buffered at the next one: the shipped grip estimator (30 s window,
    5 s period) stretches to 5 x, 25 s; the calibrator (120 s, 5 s) to the cap; a window of one period not at all."""
    assert max_stretch_for(30.0, 5.0) == 5 and 5 * 5.0 < 30.0
    assert max_stretch_for(120.0, 5.0) == MAX_STRETCH
    assert max_stretch_for(5.0, 5.0) == 1 and max_stretch_for(31.0, 5.0) == 6
    sh = FitShedder(5.0, max_stretch_for(30.0, 5.0))
    runs = [sh.due(50.0) for _ in range(40)]
    gaps = [i for i, r in enumerate(runs) if r]
    assert gaps and max(b - a for a, b in zip(gaps, gaps[1:])) == 5


# ----------------------------------------------------------------------------------------------- over DDS
def _stamp(t: float) -> Time:
    sec = math.floor(t)
    return Time(sec=int(sec), nanosec=int((t - sec) * 1e9))


def _status(diags: list, name: str):
    for arr in reversed(diags):
        for st in arr.status:
            if st.name == name:
                return st, {kv.key: kv.value for kv in st.values}
    return None, {}


@pytest.mark.ros
def test_grip_node_budget_warns_and_sheds_fits_never_inputs(rclpy_context) -> None:
    from vehcal_ros.nodes.grip_estimator import GripEstimatorNode

    node = GripEstimatorNode(context=rclpy_context, parameter_overrides=[
        Parameter("fit_period", value=0.2), Parameter("diagnostics_period", value=0.2),
        Parameter("stale_timeout", value=30.0), Parameter("speed_reference", value="odometry"),
        Parameter("cpu_budget", value=800.0)])
    probe = Node("cpu_probe", context=rclpy_context)
    diags: list = []
    probe.create_subscription(DiagnosticArray, "/diagnostics", diags.append, 50)
    pw = probe.create_publisher(JointState, "/vehicle/wheel_speeds", 1000)
    po = probe.create_publisher(Odometry, "/vehicle/odom", 1000)
    pf = probe.create_publisher(WrenchStamped, "/vehicle/tire_forces", 4000)
    ex = SingleThreadedExecutor(context=rclpy_context)
    ex.add_node(node)
    ex.add_node(probe)
    sent = {"wheel_speeds": 0, "odom": 0, "tire_forces": 0}

    def feed(t0: float, steps: int) -> None:
        for k in range(steps):
            st = _stamp(t0 + 0.01 * k)
            js = JointState(name=list(WHEELS), velocity=[32.0 + 0.01 * (k % 7)] * 4)
            js.header.stamp = st
            pw.publish(js)
            od = Odometry()
            od.header.stamp = st
            od.twist.twist.linear.x = 15.0
            po.publish(od)
            for w in WHEELS:
                m = WrenchStamped()
                m.header.stamp, m.header.frame_id = st, w
                m.wrench.force.x, m.wrench.force.z = 1000.0 + 10.0 * (k % 50), 5000.0
                pf.publish(m)
            sent["wheel_speeds"] += 1
            sent["odom"] += 1
            sent["tire_forces"] += 4
            for _ in range(8):
                ex.spin_once(timeout_sec=0.0005)

    def all_received() -> bool:
        _, kv = _status(diags, "grip_estimator: inputs")
        return all(kv.get(f"received_{t}") == str(n) for t, n in sent.items())

    try:
        assert wait_for_match(ex, pw) and wait_for_match(ex, po) and wait_for_match(ex, pf)
        # without use_sim_time the node reads its ROS time as the system time (no rclpy Time per message)
        assert abs(node.ros_time() - node.get_clock().now().nanoseconds * 1e-9) < 0.05
        feed(100.0, 150)
        # a large budget: the share is reported, nothing shed, OK
        assert spin_until(ex, lambda: all_received() and _status(diags, "grip_estimator: cpu")[0] is not None
                          and math.isfinite(float(_status(diags, "grip_estimator: cpu")[1]["cpu_share_10s"])),
                          timeout=20.0), (sent, _status(diags, "grip_estimator: inputs")[1])
        st, kv = _status(diags, "grip_estimator: cpu")
        assert st.level == b"\x00" and kv["shed_cycles"] == "0" and kv["cpu_budget"] == "800", (st.message, kv)
        assert float(kv["cpu_share_10s"]) > 0.0 and "cpu_share_60s" in kv
        # out of range: refused, naming the parameter and the range
        for bad in (-1.0, 900.0):
            res = node.set_parameters([Parameter("cpu_budget", value=bad)])[0]
            assert not res.successful and "cpu_budget" in res.reason and "800" in res.reason, res.reason
        # a tiny budget at run time: WARN, fit cycles shed, every input still received
        assert node.set_parameters([Parameter("cpu_budget", value=0.1)])[0].successful
        feed(102.0, 150)
        assert spin_until(ex, lambda: all_received() and (s := _status(diags, "grip_estimator: cpu"))[0] is not None
                          and s[0].level == b"\x01" and int(s[1]["shed_cycles"]) >= 2, timeout=20.0), (
            sent, _status(diags, "grip_estimator: inputs")[1], _status(diags, "grip_estimator: cpu"))
        st, kv = _status(diags, "grip_estimator: cpu")
        assert "over budget" in st.message and "cpu_budget 0.1 %" in st.message, st.message
        assert int(kv["cycle_stretch"]) > 1 and float(kv["cycle_period_s"]) > 0.2
        inputs, ikv = _status(diags, "grip_estimator: inputs")
        assert all(ikv[f"lost_{t}"] == "0" for t in sent), ikv
    finally:
        node.shutdown()
        ex.shutdown()
        node.destroy_node()
        probe.destroy_node()


@pytest.mark.ros
def test_calibrator_reports_its_cpu_share(rclpy_context) -> None:
    from vehcal_ros.nodes.model_calibrator import ModelCalibratorNode

    node = ModelCalibratorNode(context=rclpy_context, parameter_overrides=[
        Parameter("diagnostics_period", value=0.2), Parameter("calibration_period", value=0.2),
        Parameter("cpu_budget", value=0.1)])
    probe = Node("cpu_probe_cal", context=rclpy_context)
    diags: list = []
    sub = probe.create_subscription(DiagnosticArray, "/diagnostics", diags.append, 50)
    ex = SingleThreadedExecutor(context=rclpy_context)
    ex.add_node(node)
    ex.add_node(probe)
    try:
        assert wait_for_match(ex, sub)
        assert spin_until(ex, lambda: (s := _status(diags, "model_calibrator: cpu"))[0] is not None
                          and math.isfinite(float(s[1]["cpu_share_10s"])) and s[0].level == b"\x01"
                          and int(s[1]["shed_cycles"]) >= 1, timeout=20.0), _status(diags, "model_calibrator: cpu")
    finally:
        node.shutdown()
        ex.shutdown()
        node.destroy_node()
        probe.destroy_node()


def test_budget_declared_once_and_validated() -> None:
    from vehcal_ros.nodes import grip_estimator, model_calibrator
    from vehcal_ros.nodes.worker_node import CPU_BUDGET

    for node in (grip_estimator, model_calibrator):
        assert [p for p in node.PARAMS if p.name == "cpu_budget"] == [CPU_BUDGET]
    assert CPU_BUDGET.validate(5.0) is None and CPU_BUDGET.validate(0.0) is None
    for bad in (-0.5, 800.5):
        assert CPU_BUDGET.validate(bad) == f"parameter 'cpu_budget' = {bad} is out of range [0.0, 800.0]"


@pytest.mark.ros
def test_startup_with_a_budget_out_of_range_exits_with_one_line() -> None:
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "vehcal_ros.nodes.model_calibrator", "--ros-args",
                           "-p", "cpu_budget:=900.0"], capture_output=True, text=True, timeout=60)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2 and "cpu_budget" in out and "Traceback" not in out, out
