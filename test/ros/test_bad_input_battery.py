"""Bad input over real DDS against running nodes: a clean drive interleaved with every kind of garbage.

``grip_estimator`` runs from its console ``main`` in its own process (EventsExecutor, sim time driven by this
test's /clock); ``model_calibrator`` runs in this process. One publisher sends a 20 s synthetic drive (known
Pacejka curve, fixed seed) at 100 Hz per topic and, between its steps, NaN/inf in every converted field, zero
and negative speeds, Fz 0 and negative, 1e300 bursts, stamps backwards / duplicated / zero / a day ahead,
unknown wheel names, JointState shorter than its names or empty, Joy with too few axes, and a topic (controls)
that stops for 2 s and comes back. Data go in chunks, each acknowledged by the nodes' received counts, so
nothing is lost to queue overflow. Then the grip node's clock passes ``fit_period`` once: its single cycle fits
all it kept.

Asserted: both nodes alive and /diagnostics continuous; every garbage message counted under its reason (exact
counts); the grip estimates equal, to the last bit, those of a GripPipeline fed only the clean drive in this
process; the calibrator's buffers equal those of a CalibrationPipeline fed only the messages that must pass;
runtime parameter changes of wrong type or out of range refused naming the parameter; SIGINT during a fit ends
the node cleanly (exit 0, no "cannot schedule new futures" / "context is invalid" / traceback); kill -9 during a
fit and a restart come back cleanly.
"""

from __future__ import annotations

import math
import signal

import numpy as np
import pytest
from builtin_interfaces.msg import Time
from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import Vector3Stamped, WrenchStamped
from nav_msgs.msg import Odometry
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from ros_util import spawn, spin_until, stop
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import Imu, JointState, Joy
from synthetic_grip_publisher import WHEELS, magic_formula, slip_at_mu

from vehcal_ros.estimation.calibration.pipeline import CalibrationPipeline, config_from
from vehcal_ros.estimation.grip.pipeline import pipeline_from_params
from vehcal_ros.nodes import conversions
from vehcal_ros.nodes.grip_estimator import PARAMS as GRIP_PARAMS
from vehcal_ros.nodes.grip_estimator import latched_qos, sensor_qos
from vehcal_ros.nodes.model_calibrator import ModelCalibratorNode

pytestmark = [pytest.mark.ros, pytest.mark.slow]

GRIP_OVERRIDES = {"fit_period": 3600.0, "diagnostics_period": 0.05, "average_window": 0.0, "n_chains": 8,
                  "n_steps": 20000, "n_ml_starts": 8, "stale_timeout": 1000.0, "seed": 7,
                  # the test's clock stands still while it computes (long on a loaded machine): not "data ended"
                  "clock_stall_timeout": 600.0,
                  "speed_reference": "odometry"}   # the synthetic stream's odometry is its exact speed
RATE, SECONDS, T0 = 100.0, 20.0, 500.0
FZ, SPEED = 5000.0, 15.0
R_EFF = 0.47 - FZ / 326332.0


def _stamp(t: float) -> Time:
    sec = math.floor(t)
    return Time(sec=int(sec), nanosec=int(round((t - sec) * 1e9)))


class Vehicle:
    """Publishers of every vehicle topic; counts what it sent per topic; keeps the clean messages."""

    def __init__(self, node: Node) -> None:
        qos = sensor_qos()
        self.pubs = {"wheel_speeds": node.create_publisher(JointState, "/vehicle/wheel_speeds", qos),
                     "tire_forces": node.create_publisher(WrenchStamped, "/vehicle/tire_forces", qos),
                     "odom": node.create_publisher(Odometry, "/vehicle/odom", qos),
                     "imu": node.create_publisher(Imu, "/vehicle/imu", qos),
                     "controls": node.create_publisher(Joy, "/vehicle/controls", qos)}
        self.clock = node.create_publisher(Clock, "/clock", 10)
        self.sent = dict.fromkeys(self.pubs, 0)
        self.clean: list[tuple[str, object]] = []       # (topic, message) of the clean drive, in order
        self.plausible: list[tuple[str, object]] = []   # odd but physical messages the calibrator must keep

    def send(self, topic: str, msg, clean: bool = False, plausible: bool = False) -> None:
        self.pubs[topic].publish(msg)
        self.sent[topic] += 1
        if clean:
            self.clean.append((topic, msg))
        if clean or plausible:
            self.plausible.append((topic, msg))

    def step(self, t: float, slip: np.ndarray, mu: np.ndarray, *, u: float = SPEED, fz: float = FZ,
             controls: bool = True, clean: bool = False, plausible: bool = False, forces: bool = True) -> None:
        st = _stamp(t)
        js = JointState(name=list(WHEELS), velocity=[float(w) for w in u / (1.0 - slip) / R_EFF])
        js.header.stamp = st
        self.send("wheel_speeds", js, clean, plausible)
        od = Odometry()
        od.header.stamp = st
        od.pose.pose.orientation.w = 1.0
        od.twist.twist.linear.x = float(u)
        self.send("odom", od, clean, plausible)
        imu = Imu()
        imu.header.stamp = st
        imu.orientation.w = 1.0
        imu.linear_acceleration.z = 9.81
        self.send("imu", imu, clean, plausible)
        if controls:
            joy = Joy(axes=[0.2, 0.0, 0.0])
            joy.header.stamp = st
            self.send("controls", joy, clean, plausible)
        if forces:
            for i, name in enumerate(WHEELS):
                w = WrenchStamped()
                w.header.stamp = st
                w.header.frame_id = name
                w.wrench.force.x = float(mu[i] * fz)
                w.wrench.force.z = float(fz)
                self.send("tire_forces", w, clean)


def _garbage(veh: Vehicle, t: float, case: str, expected: dict[str, dict[str, int]]) -> None:
    """Publish one garbage case at stamp ``t`` (between two clean steps); add what each node must count."""
    g, c = expected["grip"], expected["cal"]
    s = np.full(4, 0.01)
    mu = magic_formula(s)

    def count(d: dict, reason: str, n: int = 1) -> None:
        d[reason] = d.get(reason, 0) + n

    if case == "nonfinite":
        for bad in (math.nan, math.inf, -math.inf):
            for i in range(4):
                js = JointState(name=list(WHEELS), velocity=[30.0] * 4)
                js.velocity[i] = bad
                js.header.stamp = _stamp(t)
                veh.send("wheel_speeds", js)
                count(g, "nonfinite"), count(c, "nonfinite")
            for field in ("x", "y", "z"):
                w = WrenchStamped()
                w.header.stamp, w.header.frame_id = _stamp(t), WHEELS[0]
                w.wrench.force.z = FZ
                setattr(w.wrench.force, field, bad)
                veh.send("tire_forces", w)
                count(g, "nonfinite")
            for path in ("twist.twist.linear.x", "twist.twist.linear.y", "twist.twist.angular.z",
                         "pose.pose.position.x", "pose.pose.position.y", "pose.pose.orientation.z"):
                od = Odometry()
                od.header.stamp = _stamp(t)
                od.pose.pose.orientation.w = 1.0
                od.twist.twist.linear.x = SPEED
                obj = od
                *head, last = path.split(".")
                for part in head:
                    obj = getattr(obj, part)
                setattr(obj, last, bad)
                veh.send("odom", od)
                count(g, "nonfinite"), count(c, "nonfinite")
            for path in ("angular_velocity.x", "angular_velocity.z", "linear_acceleration.x",
                         "linear_acceleration.y", "orientation.x"):
                imu = Imu()
                imu.header.stamp = _stamp(t)
                imu.orientation.w = 1.0
                part, field = path.split(".")
                setattr(getattr(imu, part), field, bad)
                veh.send("imu", imu)
                count(g, "nonfinite"), count(c, "nonfinite")   # the grip node reads the IMU too (pitch, toe)
            for i in range(3):
                joy = Joy(axes=[0.2, 0.0, 0.0])
                joy.axes[i] = bad
                joy.header.stamp = _stamp(t)
                veh.send("controls", joy)
                count(g, "nonfinite"), count(c, "nonfinite")
    elif case == "zero_speed":          # standstill, then reversing: physical, counted by the grip gates
        veh.step(t, np.zeros(4), mu, u=0.0, controls=False, plausible=True)
        count(g, "low_speed", 4)
    elif case == "negative_speed":
        veh.step(t, np.zeros(4), mu, u=-5.0, controls=False, plausible=True)
        count(g, "low_speed", 4)
    elif case in ("fz_zero", "fz_negative"):
        veh.step(t, s, mu, fz=0.0 if case == "fz_zero" else -FZ, controls=False, plausible=True)
        count(g, "low_load", 4)
    elif case == "huge":                # a 3-step burst of Fx = 1e300, and 1e300 on every other topic
        for k in range(3):
            for name in WHEELS:
                w = WrenchStamped()
                w.header.stamp, w.header.frame_id = _stamp(t + 0.001 * k), name
                w.wrench.force.x, w.wrench.force.z = 1e300, FZ
                veh.send("tire_forces", w)
                count(g, "implausible")
        js = JointState(name=list(WHEELS), velocity=[1e300] * 4)
        js.header.stamp = _stamp(t)
        veh.send("wheel_speeds", js)
        od = Odometry()
        od.header.stamp = _stamp(t)
        od.pose.pose.orientation.w = 1.0
        od.twist.twist.linear.x = 1e300
        veh.send("odom", od)
        imu = Imu()
        imu.header.stamp = _stamp(t)
        imu.orientation.w = 1.0
        imu.angular_velocity.z = 1e300
        veh.send("imu", imu)
        joy = Joy(axes=[1e30, 0.0, 0.0])   # float32 axes: 1e300 would arrive as inf
        joy.header.stamp = _stamp(t)
        veh.send("controls", joy)
        count(g, "implausible", 4)       # wheel speeds, odometry, IMU, controls
        count(c, "implausible", 4)       # wheel speeds, odometry, IMU, controls
    elif case in ("backwards", "zero_stamp", "day_ahead"):
        ts = {"backwards": t - 0.5, "zero_stamp": 0.0, "day_ahead": t + 86400.0}[case]
        reason = {"backwards": "out_of_order", "zero_stamp": "zero_stamp", "day_ahead": "stamp_jump"}[case]
        veh.step(ts, s, mu)
        count(g, reason, 8)              # wheel speeds, odometry, IMU, controls, 4 forces
        count(c, reason, 4)              # wheel speeds, odometry, IMU, controls
    elif case == "names":
        w = WrenchStamped()
        w.header.stamp, w.header.frame_id = _stamp(t), "wheel_xx"
        w.wrench.force.z = FZ
        veh.send("tire_forces", w)
        count(g, "unknown_wheel")
        for js in (JointState(name=["a", "b", "c", "d"], velocity=[1.0] * 4),        # unknown names
                   JointState(name=list(WHEELS), velocity=[30.0, 30.0]),              # shorter than its names
                   JointState()):                                                     # empty
            js.header.stamp = _stamp(t)
            veh.send("wheel_speeds", js)
            count(g, "malformed_wheel_speeds"), count(c, "malformed_wheel_speeds")
        joy = Joy(axes=[0.2, 0.0])
        joy.header.stamp = _stamp(t)
        veh.send("controls", joy)
        count(g, "malformed_controls"), count(c, "malformed_controls")
    else:
        raise ValueError(case)


def _duplicate_last_step(veh: Vehicle, expected: dict) -> None:
    """Send the last clean step again (same stamps): duplicates on every stream."""
    step = veh.clean[-8:]
    assert [tp for tp, _ in step] == ["wheel_speeds", "odom", "imu", "controls", *["tire_forces"] * 4]
    for topic, msg in step:
        veh.send(topic, msg)
    expected["grip"]["duplicate"] = expected["grip"].get("duplicate", 0) + 8
    expected["cal"]["duplicate"] = expected["cal"].get("duplicate", 0) + 4


class Probe:
    def __init__(self, node: Node) -> None:
        self.diag: dict[str, dict[str, str]] = {}
        self.n_diag: dict[str, int] = {}
        self.grip: dict[str, list] = {"front_axle": [], "rear_axle": []}
        node.create_subscription(DiagnosticArray, "/diagnostics", self._on_diag, 50)
        for scope, got in self.grip.items():
            node.create_subscription(Vector3Stamped, f"/vehcal/grip/{scope}", got.append, latched_qos())

    def _on_diag(self, msg) -> None:
        for st in msg.status:
            self.diag[st.name] = {**{kv.key: kv.value for kv in st.values}, "_message": st.message}
            self.n_diag[st.name] = self.n_diag.get(st.name, 0) + 1

    def value(self, name: str, key: str, default: float = -1.0) -> float:
        return float(self.diag.get(name, {}).get(key, default))


def _grip_values() -> dict:
    values = {s.name: s.default for s in GRIP_PARAMS}
    values.update(GRIP_OVERRIDES)
    return values


def test_bad_input_battery_over_dds(tmp_path, rclpy_context) -> None:
    args = ["-m", "vehcal_ros.nodes.grip_estimator", "--ros-args", "-p", "use_sim_time:=true"]
    for k, v in GRIP_OVERRIDES.items():
        args += ["-p", f"{k}:={v}"]
    log = tmp_path / "grip.log"
    grip_proc = spawn(args, log_path=str(log))
    from rclpy.parameter import Parameter

    cal = ModelCalibratorNode(context=rclpy_context, parameter_overrides=[
        Parameter("diagnostics_period", value=0.2), Parameter("stale_timeout", value=1000.0),
        Parameter("calibration_period", value=1000.0)])
    probe_node = Node("battery_probe", context=rclpy_context)
    probe = Probe(probe_node)
    veh = Vehicle(probe_node)
    ex = SingleThreadedExecutor(context=rclpy_context)
    ex.add_node(probe_node)
    ex.add_node(cal)
    clock_t = [1.0]

    def tick(dt: float = 0.06) -> None:   # just over the grip node's diagnostics period (sim time)
        clock_t[0] += dt
        veh.clock.publish(Clock(clock=_stamp(clock_t[0])))


    def acknowledged() -> bool:
        tick()
        ex.spin_once(timeout_sec=0.02)
        grip_ok = all(probe.value("grip_estimator: inputs", f"received_{t}") >= n
                      for t, n in veh.sent.items() if t != "imu")
        cal_ok = all(cal.pipeline.counters.received.get(t, 0) >= n for t, n in veh.sent.items() if t != "tire_forces")
        return grip_ok and cal_ok

    try:
        assert spin_until(ex, lambda: all(p.get_subscription_count() >= (2 if t != "tire_forces" else 1)
                                          for t, p in veh.pubs.items()), 60.0), "nodes did not subscribe"
        assert spin_until(ex, lambda: (tick(), "grip_estimator: inputs" in probe.diag)[1], 60.0), log.read_text()

        expected: dict[str, dict[str, int]] = {"grip": {}, "cal": {}}
        rng = np.random.default_rng(11)
        s_max = slip_at_mu(0.6)
        n_steps = int(SECONDS * RATE)
        garbage_at = {300: "nonfinite", 420: "zero_speed", 540: "negative_speed", 660: "fz_zero",
                      780: "fz_negative", 900: "huge", 1020: "backwards", 1140: "zero_stamp", 1260: "day_ahead",
                      1380: "names"}
        controls_gap = range(1600, 1800)                   # controls stop for 2 s and come back
        n_diag_before = dict(probe.n_diag)
        for k in range(n_steps):
            t = T0 + k / RATE
            phase = (k / RATE / 4.0) % 1.0
            s = (2 * phase if phase < 0.5 else 2 * (1 - phase)) * s_max * rng.uniform(0.8, 1.0, 4)
            mu = magic_formula(s) + rng.normal(0.0, 0.0253, 4)
            veh.step(t, s, mu, controls=k not in controls_gap, clean=True)
            if k in garbage_at:
                _garbage(veh, t + 0.005, garbage_at[k], expected)
            if k == 1500:
                _duplicate_last_step(veh, expected)
            if k % 40 == 39:
                assert spin_until(ex, acknowledged, 60.0), (veh.sent, probe.diag.get("grip_estimator: inputs"),
                                                            cal.pipeline.counters)
        assert grip_proc.poll() is None, log.read_text()[-3000:]
        # /diagnostics never stopped while the garbage went in
        n_diag = probe.n_diag["grip_estimator: inputs"] - n_diag_before.get("grip_estimator: inputs", 0)
        assert n_diag >= 50, n_diag

        # every garbage message counted under its reason (the clean drive drops nothing)
        gd = probe.diag["grip_estimator: inputs"]
        got = {k[len("dropped_"):]: int(v) for k, v in gd.items() if k.startswith("dropped_") and int(v)}
        assert got == expected["grip"], (got, expected["grip"])
        assert int(gd["interruptions_controls"]) == 1 and int(gd["lost_tire_forces"]) == 0
        cal_got = {k: v for k, v in cal.pipeline.counters.dropped.items() if v}
        assert cal_got == expected["cal"], (cal_got, expected["cal"])

        # the calibrator's buffers hold exactly what a pipeline fed only the acceptable messages holds
        ref_cal = CalibrationPipeline(config_from(cal.values))
        for topic, msg in sorted(veh.plausible, key=lambda tm: conversions.stamp_sec(tm[1].header.stamp)):
            if topic != "tire_forces":
                ref_cal.add(conversions.msg_to_record(f"/vehicle/{topic}", msg))
        for name, buf in cal.pipeline.buffers.items():
            np.testing.assert_array_equal(buf.array(), ref_cal.buffers[name].array(), err_msg=name)

        # the grip node's one cycle: its estimates equal those of a pipeline fed only the clean drive
        assert all(probe.value(f"grip_estimator: {s}", "n_fits", 0) + probe.value(f"grip_estimator: {s}", "n_failed", 0)
                   == 0 for s in probe.grip), "a cycle ran before all the data were in"
        tick(3600.0)
        assert spin_until(ex, lambda: (tick(0.05), all(probe.value(f"grip_estimator: {s}", "n_fits", 0)
                                                      + probe.value(f"grip_estimator: {s}", "n_failed", 0) >= 1
                                                      for s in probe.grip))[1], 180.0), probe.diag
        ref = pipeline_from_params(_grip_values())
        for topic, msg in veh.clean:
            if topic != "imu":
                ref.add(conversions.msg_to_record(f"/vehicle/{topic}", msg))
        ref.run_cycle()
        spin_until(ex, lambda: False, 1.0)
        for scope, got_msgs in probe.grip.items():
            st = ref.status[scope]
            assert int(probe.value(f"grip_estimator: {scope}", "n_fits", 0)) == st.n_fits, (scope, st.message)
            if st.estimate is not None:
                assert got_msgs, (scope, probe.diag[f"grip_estimator: {scope}"])
                v = got_msgs[-1].vector   # the belief in force at the data's end: the estimate as fitted
                e = st.estimate
                assert (v.x, v.y, v.z) == (e.mu_max_mean, e.mu_max_lower, e.mu_max_upper), (
                    scope, probe.diag[f"grip_estimator: {scope}"], e.n_points, e.converged, e.n_steps_used,
                    e.warm_started, [(m.vector.x, m.vector.y, m.vector.z) for m in got_msgs])
            else:   # the belief is published as unknown (mean NaN, lower bound 0)
                assert all(math.isnan(m.vector.x) and m.vector.y == 0.0 for m in got_msgs), scope
        assert any(math.isfinite(m.vector.x) for msgs in probe.grip.values() for m in msgs), (
            "no estimate published: the comparison above compared nothing")

        # SIGINT while a fit runs: a clean exit, none of the shutdown races
        for k in range(300):
            t = T0 + SECONDS + k / RATE
            phase = (k / RATE / 4.0) % 1.0
            s = (2 * phase if phase < 0.5 else 2 * (1 - phase)) * s_max * np.ones(4)
            veh.step(t, s, magic_formula(s))
            if k % 20 == 19:
                assert spin_until(ex, acknowledged, 60.0)
        tick(3600.0)
        spin_until(ex, lambda: False, 0.5)
        grip_proc.send_signal(signal.SIGINT)
        assert grip_proc.wait(timeout=60) == 0
        text = log.read_text()
        for bad in ("cannot schedule new futures", "context is invalid", "Traceback", "cycle failed"):
            assert bad not in text, text[-3000:]

        # kill -9 during a fit, then a restart comes back and takes data
        grip_proc = spawn(args, log_path=str(tmp_path / "grip2.log"))
        probe.diag.pop("grip_estimator: inputs", None)
        assert spin_until(ex, lambda: (tick(), "grip_estimator: inputs" in probe.diag)[1], 60.0)
        for k in range(600):
            t = T0 + SECONDS + 10.0 + k / RATE
            s = 0.5 * s_max * np.ones(4) * (1 + (k % 7) / 7)
            veh.step(t, s, magic_formula(s))
            if k % 20 == 19:
                spin_until(ex, lambda: (tick(0.02), False)[1], 0.05)
        tick(3600.0)
        spin_until(ex, lambda: False, 0.5)
        grip_proc.send_signal(signal.SIGKILL)
        grip_proc.wait(timeout=30)
        grip_proc = spawn(args, log_path=str(tmp_path / "grip3.log"))
        probe.diag.pop("grip_estimator: inputs", None)
        assert spin_until(ex, lambda: (tick(), "grip_estimator: inputs" in probe.diag)[1], 60.0)
        # the restarted node takes data: keep driving until it has received 100 steps of tire forces (messages
        # sent before its subscriptions matched the publisher are lost by DDS, not by the node)
        steps = iter(range(100_000))

        def drive_and_count() -> bool:
            k = next(steps)
            veh.step(T0 + SECONDS + 20.0 + k / RATE, np.full(4, 0.01), magic_formula(np.full(4, 0.01)))
            tick()
            return (probe.value("grip_estimator: inputs", "received_tire_forces") or 0) >= 400

        assert spin_until(ex, drive_and_count, 60.0)
        assert grip_proc.poll() is None
        assert "Traceback" not in (tmp_path / "grip3.log").read_text()
    finally:
        stop(grip_proc, timeout=30.0)
        cal.shutdown()
        ex.shutdown()
        cal.destroy_node()
        probe_node.destroy_node()
