"""grip_estimator with ``force_source: estimated`` over real Fast DDS on loopback: wheel speeds with the net
torque in JointState.effort (or, on a production car, the CAN axle torque and brake pressure) and an IMU in, the
estimated forces out on ``vehcal/tire_forces_estimated`` (WrenchStamped per wheel); the calibrator's model
message sets the lateral load split."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import yaml
from builtin_interfaces.msg import Time
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from geometry_msgs.msg import WrenchStamped
from nav_msgs.msg import Odometry
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.parameter import Parameter
from ros_util import spin_until, wait_for_match
from sensor_msgs.msg import FluidPressure, Imu, JointState

from vehcal_ros.estimation.sensing.tire_forces import TireForceVehicle
from vehcal_ros.io.scenarios import can_description
from vehcal_ros.nodes.grip_estimator import GripEstimatorNode, latched_qos
from vehcal_ros.records import WHEELS
from vehcal_ros.vehicle.description import load_description, to_document

pytestmark = pytest.mark.ros
VEH = TireForceVehicle.from_description(load_description("hmmwv"))   # the node's default `vehicle`
FX_TRUE = 450.0   # N on every wheel, steady: omega constant, torque = r Fx + rr Fz


def _stamp(t: float) -> Time:
    sec = math.floor(t)
    return Time(sec=int(sec), nanosec=int(round((t - sec) * 1e9)))


def _publish_step(pub_i, pub_w, pub_o, t: float, rng: np.random.Generator, effort=None) -> None:
    """One 10 ms step of the steady drive: a level IMU, the wheels at 30 rad/s (with ``effort`` N m per wheel plus
    20 N m noise when given) and the body speed of a 0.46 m wheel."""
    imu = Imu()
    imu.header.stamp = _stamp(t)
    imu.orientation.w = 1.0
    pub_i.publish(imu)
    js = JointState(name=list(WHEELS), velocity=(30.0 + 0.05 * rng.standard_normal(4)).tolist())
    if effort is not None:
        js.effort = (effort + 20.0 * rng.standard_normal(4)).tolist()
    js.header.stamp = _stamp(t)
    pub_w.publish(js)
    od = Odometry()
    od.header.stamp = _stamp(t)
    od.twist.twist.linear.x = 30.0 * 0.46
    pub_o.publish(od)


def _harness(rclpy_context, node):
    """A probe node beside ``node``: the estimated forces and /diagnostics collected, publishers of the wheel
    speeds, IMU and odometry, and an executor spinning both."""
    h = SimpleNamespace(probe=Node("probe", context=rclpy_context), got=[], diag=[])
    h.probe.create_subscription(WrenchStamped, "/vehcal/tire_forces_estimated", h.got.append, 400)
    h.probe.create_subscription(DiagnosticArray, "/diagnostics", h.diag.append, 50)
    h.pub_w = h.probe.create_publisher(JointState, "/vehicle/wheel_speeds", 100)
    h.pub_i = h.probe.create_publisher(Imu, "/vehicle/imu", 100)
    h.pub_o = h.probe.create_publisher(Odometry, "/vehicle/odom", 100)
    h.ex = SingleThreadedExecutor(context=rclpy_context)
    h.ex.add_node(node)
    h.ex.add_node(h.probe)
    return h


def test_estimated_forces_published_and_roll_split_taken(rclpy_context) -> None:
    node = GripEstimatorNode(context=rclpy_context, parameter_overrides=[
        Parameter("force_source", value="estimated"), Parameter("publish_estimated_forces", value=True),
        Parameter("diagnostics_period", value=0.2)])
    h = _harness(rclpy_context, node)
    probe, got, diag, ex = h.probe, h.got, h.diag, h.ex
    pub_w, pub_i, pub_o = h.pub_w, h.pub_i, h.pub_o
    pub_m = probe.create_publisher(DiagnosticArray, "/vehcal/model_parameters", latched_qos())
    try:
        assert all(wait_for_match(ex, p) for p in (pub_w, pub_i, pub_o, pub_m))
        fz = VEH.static_loads()
        kz = np.repeat(VEH.kz, 2)
        torque = (VEH.r0 - fz / kz) * FX_TRUE + VEH.rr * fz
        rng = np.random.default_rng(0)
        n = 150
        for k in range(n):
            _publish_step(pub_i, pub_w, pub_o, 50.0 + 0.01 * k, rng, effort=torque)
            for _ in range(8):
                ex.spin_once(timeout_sec=0.0005)
        assert spin_until(ex, lambda: len(got) >= 4 * (n - 40), timeout=15.0), len(got)
        assert {m.header.frame_id for m in got} == set(WHEELS)
        last = {m.header.frame_id: m for m in got}
        for i, w in enumerate(WHEELS):
            assert last[w].wrench.force.x == pytest.approx(FX_TRUE, abs=60.0)   # ~3 stated SD of one estimate
            assert last[w].wrench.force.z == pytest.approx(fz[i], rel=1e-9)      # ax = ay = 0: the static load

        st = DiagnosticStatus(name="model", values=[KeyValue(key="model.kphi_f", value="60000.0"),
                                                    KeyValue(key="model.kphi_r", value="40000.0"),
                                                    KeyValue(key="calibrated", value="kphi_f,kphi_r,Cyf,Cyr")])
        pub_m.publish(DiagnosticArray(status=[st]))
        est = node.pipeline.force_estimator
        assert spin_until(ex, lambda: est.kphi == (60000.0, 40000.0), timeout=10.0)

        def source_reported() -> bool:
            for arr in reversed(diag):
                for s in arr.status:
                    if s.name.endswith("inputs"):
                        kv = {v.key: v.value for v in s.values}
                        return kv.get("force_source") == "estimated" and kv.get("roll_split") == "calibrated"
            return False
        assert spin_until(ex, source_reported, timeout=10.0)
        # the shipped speed reference (auto: GNSS/IMU on this all-wheel-drive vehicle) reports its choice and its own
        # counts; every IMU sample taken is counted
        kv = next({v.key: v.value for v in s.values} for arr in reversed(diag) for s in arr.status
                  if s.name.endswith("inputs"))
        assert kv["speed_reference"] == "gnss_imu"
        assert kv["speed_gnss_used"] == "0" and kv["speed_imu_nonfinite"] == "0"   # no GNSS was published
        assert n - 40 <= int(kv["received_imu"]) <= n
    finally:
        node.shutdown()
        ex.shutdown()
        node.destroy_node()
        probe.destroy_node()


def test_a_car_without_wheel_torque_takes_it_from_its_can_signals(rclpy_context, tmp_path) -> None:
    """The same steady drive on a production car: no effort in the wheel speeds; the CAN axle torque
    (``/vehicle/drive_torque``) and the master cylinder's brake pressure (``/vehicle/brake_pressure``) through a
    description whose ``torque_source`` is ``axle``. The node subscribes to them, counts them on /diagnostics
    and estimates the same forces."""
    desc = tmp_path / "hmmwv_can.yaml"
    desc.write_text(yaml.safe_dump(to_document(can_description("hmmwv", "axle"))))
    node = GripEstimatorNode(context=rclpy_context, parameter_overrides=[
        Parameter("force_source", value="estimated"), Parameter("publish_estimated_forces", value=True),
        Parameter("diagnostics_period", value=0.2), Parameter("vehicle", value=str(desc))])
    h = _harness(rclpy_context, node)
    probe, got, diag, ex = h.probe, h.got, h.diag, h.ex
    pub_w, pub_i, pub_o = h.pub_w, h.pub_i, h.pub_o
    pub_d = probe.create_publisher(JointState, "/vehicle/drive_torque", 100)
    pub_b = probe.create_publisher(FluidPressure, "/vehicle/brake_pressure", 100)
    try:
        assert all(wait_for_match(ex, p) for p in (pub_w, pub_i, pub_o, pub_d, pub_b))
        fz = VEH.static_loads()
        kz = np.repeat(VEH.kz, 2)
        torque = (VEH.r0 - fz / kz) * FX_TRUE + VEH.rr * fz   # per wheel: each axle's CAN torque is twice it
        rng = np.random.default_rng(0)
        n = 150
        for k in range(n):
            t = 50.0 + 0.01 * k
            drive = JointState(name=["axle_front", "axle_rear"],
                               effort=[2.0 * torque[0] + 20.0 * rng.standard_normal(),
                                       2.0 * torque[2] + 20.0 * rng.standard_normal()])
            drive.header.stamp = _stamp(t)
            pub_d.publish(drive)
            brake = FluidPressure(fluid_pressure=0.0)
            brake.header.stamp = _stamp(t)
            brake.header.frame_id = "master_cylinder"
            pub_b.publish(brake)
            _publish_step(pub_i, pub_w, pub_o, t, rng)
            for _ in range(10):
                ex.spin_once(timeout_sec=0.0005)
        assert spin_until(ex, lambda: len(got) >= 4 * (n - 40), timeout=15.0), len(got)
        last = {m.header.frame_id: m for m in got}
        for w in WHEELS:
            assert last[w].wrench.force.x == pytest.approx(FX_TRUE, abs=60.0)   # ~3 stated SD of one estimate

        def can_counts() -> dict[str, str]:
            for arr in reversed(diag):
                for s in arr.status:
                    if s.name.endswith("inputs"):
                        return {v.key: v.value for v in s.values if v.key.startswith("can_")}
            return {}
        assert spin_until(ex, lambda: int(can_counts().get("can_converted", 0)) >= n - 40, timeout=10.0)
        kv = can_counts()
        assert int(kv["can_drive_samples"]) >= n - 40 and int(kv["can_brake_samples"]) >= n - 40
    finally:
        node.shutdown()
        ex.shutdown()
        node.destroy_node()
        probe.destroy_node()
