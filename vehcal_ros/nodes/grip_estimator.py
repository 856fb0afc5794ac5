"""``grip_estimator``: the tire-road friction potential, live (docs/nodes.md, docs/grip.md).

Subscribes (``qos_profile_sensor_data``, deeper queue): wheel speeds (sensor_msgs/JointState), tire forces
(geometry_msgs/WrenchStamped, one per wheel), odometry (nav_msgs/Odometry) and, for the steering angle, controls
(sensor_msgs/Joy). The sensor subscriptions take the serialised bytes (``raw=True``); callbacks only read them into
records (:mod:`vehcal_ros.nodes.raw_messages`) and feed the
:class:`~vehcal_ros.estimation.grip.pipeline.GripPipeline`; a timer hands a snapshot to a worker thread that
runs Algorithm 1 of the friction paper; a cycle still running makes the next one skip (counted), never queue
(scheduling: :mod:`vehcal_ros.nodes.worker_node`).

Publishes ``<output_prefix>/grip/<scope>`` (geometry_msgs/Vector3Stamped: x = mu_max mean, y/z = credible
interval), ``<output_prefix>/grip_curve/<scope>`` (std_msgs/Float64MultiArray: rows slip, q05, q50, q95) and
``/diagnostics``. Both outputs are reliable + transient-local so a late-joining MPC gets the last estimate, and
silent until a scope's first valid estimate. Topic names are relative (a namespace moves them).

Services (std_srvs): ``~/reset`` (Trigger: forget buffers and estimates, e.g. after a tire change or a known
surface change), ``~/enable`` (SetBool: pause or resume estimation, state kept).

Without force transducers (``force_source: estimated``, or ``auto`` while the tire-force topic is silent) the
forces come from the wheel speeds' net torque (``JointState.effort``) and the IMU (``imu_topic``) through
:class:`~vehcal_ros.estimation.sensing.tire_forces.TireForceEstimator`; the calibrated roll stiffnesses on
``model_parameters_topic`` set its lateral load split; ``publish_estimated_forces`` publishes its forces on
``estimated_forces_topic`` (geometry_msgs/WrenchStamped per wheel, frame_id = wheel) to plot against a transducer.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import TwistWithCovarianceStamped, Vector3Stamped, WrenchStamped
from nav_msgs.msg import Odometry
from sensor_msgs.msg import Imu, JointState, Joy
from std_msgs.msg import Float64MultiArray

from vehcal_ros.estimation.grip.parameters import PARAMS as ESTIMATION_PARAMS
from vehcal_ros.estimation.grip.parameters import theta_order_problem
from vehcal_ros.estimation.grip.pipeline import (
    fit_config_from,
    pipeline_from_params,
    signal_config_from,
)
from vehcal_ros.nodes import conversions
from vehcal_ros.nodes.common import (
    ERROR,
    OK,
    WARN,
    declare_params,
    diag_array,
    diag_status,
    latched_qos,
    make_set_callback,
    sensor_qos,
    spin_node,
)
from vehcal_ros.nodes.worker_node import CAN_TOPICS, FRAMES, HEALTH, WorkerNode
from vehcal_ros.parameters import ParamSpec
from vehcal_ros.replay.guards import grip_guard
from vehcal_ros.vehicle.description import load_description

NODE_NAME = "grip_estimator"


PARAMS: tuple[ParamSpec, ...] = (
    ParamSpec("wheel_speeds_topic", "vehicle/wheel_speeds", "sensor_msgs/JointState, rad/s", read_only=True),
    ParamSpec("tire_forces_topic", "vehicle/tire_forces", "geometry_msgs/WrenchStamped per wheel (frame_id = wheel)",
              read_only=True),
    ParamSpec("odom_topic", "vehicle/odom", "nav_msgs/Odometry, body-frame twist", read_only=True),
    ParamSpec("controls_topic", "vehicle/controls", "sensor_msgs/Joy driver inputs (for the steering angle)",
              read_only=True),
    ParamSpec("output_prefix", "vehcal", "prefix of the grip and grip_curve output topics (relative: under the "
              "namespace)", read_only=True),
    *FRAMES,
    *ESTIMATION_PARAMS,
    ParamSpec("fit_period", 5.0, "time between estimation cycles, s (ROS clock)", 0.05, 3600.0, read_only=True),
    ParamSpec("belief_period", 0.5, "period of the grip belief in force on grip/<scope> and grip_age/<scope>, s "
              "(ROS clock; published while data arrive)", 0.01, 60.0, read_only=True),
    ParamSpec("gnss_topic", "vehicle/gnss/vel", "geometry_msgs/TwistWithCovarianceStamped, ENU velocity of a GNSS "
              "receiver: the speed reference of the slips (speed_reference gnss_imu) and of the online rolling "
              "radius", read_only=True),
    ParamSpec("imu_topic", "vehicle/imu", "sensor_msgs/Imu (load transfer; pitch for the toe of the bump steer)",
              read_only=True),
    ParamSpec("model_parameters_topic", "vehcal/model_parameters", "the calibrator's model (calibrated roll "
              "stiffnesses split the lateral load transfer)", read_only=True),
    ParamSpec("publish_estimated_forces", False, "publish the estimated forces (WrenchStamped per wheel)",
              read_only=True),
    ParamSpec("estimated_forces_topic", "vehcal/tire_forces_estimated", "topic of the estimated forces",
              read_only=True),
    *HEALTH,
    *CAN_TOPICS,
)


class GripEstimatorNode(WorkerNode):
    """Thin adapter: messages -> records -> GripPipeline; worker-thread fits; publish estimates and health."""

    def __init__(self, node_name: str = NODE_NAME, **kwargs: Any) -> None:
        super().__init__(node_name, worker_name="grip_fit", **kwargs)
        self.values = declare_params(self, PARAMS)
        problem = theta_order_problem(self.values)
        if problem:
            raise ValueError(problem)
        self.pipeline = self._build_pipeline()
        self.add_on_set_parameters_callback(make_set_callback(PARAMS, self._check_params))
        self._frames = conversions.frames(self.values["wheel_names"], self.values["controls_axes"])
        self.guard = grip_guard(self.values)   # jump: the collector's own restart threshold (as bag replay)

        qos = sensor_qos()
        v = self.values
        group = self.inputs_group
        # sensor topics: serialised bytes (raw=True), read by nodes/raw_messages.py without rclpy's message objects
        self.create_subscription(JointState, v["wheel_speeds_topic"], self._on_wheels, qos, callback_group=group,
                                 raw=True)
        self.create_subscription(WrenchStamped, v["tire_forces_topic"], self._on_force, sensor_qos(4 * 2000),
                                 callback_group=group, raw=True)   # four messages per time step
        self.create_subscription(Odometry, v["odom_topic"], self._on_odom, qos, callback_group=group, raw=True)
        self.create_subscription(Joy, v["controls_topic"], self._on_controls, qos, callback_group=group, raw=True)
        self._force_pub = None
        # the IMU: load transfer of estimated forces, and (any force source) the body pitch that sets the front
        # wheels' toe of a description with bump steer (estimation/grip/friction_samples.py)
        self.create_subscription(Imu, v["imu_topic"], self._on_imu, qos, callback_group=group, raw=True)
        if self.pipeline.can is not None:   # the wheel torque from CAN signals (torque_source engine or axle)
            self._subscribe_can(v, qos, sensor_qos(2 * 2000))
        if v["radius_learning"] or v["speed_reference"] != "odometry":   # the speed reference (GNSS/IMU)
            self.create_subscription(TwistWithCovarianceStamped, v["gnss_topic"], self._on_gnss, qos,
                                     callback_group=group, raw=True)
        if v["force_source"] != "measured":
            self.create_subscription(DiagnosticArray, v["model_parameters_topic"], self._on_model, latched_qos(),
                                     callback_group=group)
            if v["publish_estimated_forces"]:
                self._force_pub = self.create_publisher(WrenchStamped, v["estimated_forces_topic"], 10)

        self._grip_pub: dict[str, Any] = {}
        self._curve_pub: dict[str, Any] = {}
        self._age_pub: dict[str, Any] = {}
        self._belief_t = -math.inf   # data time of the last published belief
        self._make_output_publishers()
        self._diag_pub = self.create_publisher(DiagnosticArray, "/diagnostics", 10)
        self._create_services()
        self._start_schedule(v["fit_period"], v["diagnostics_period"], v["clock_stall_timeout"], v["window"])
        self._add_periodic(v["belief_period"], self._publish_beliefs)   # jump-aware, checked on every message
        self.get_logger().info(f"estimating grip per {v['scope']} on scopes {', '.join(self._grip_pub)}")

    def _make_output_publishers(self) -> None:
        """Latched grip and curve publishers per scope; silent until the scope's first valid estimate. Made anew
        on ``~/reset`` so a late joiner is not handed an estimate from before it."""
        for pub in (*self._grip_pub.values(), *self._curve_pub.values(), *self._age_pub.values()):
            self.destroy_publisher(pub)
        prefix = self.values["output_prefix"].rstrip("/")
        scopes = self.pipeline.collector.scopes()
        self._grip_pub = {s: self.create_publisher(Vector3Stamped, f"{prefix}/grip/{s}", latched_qos())
                          for s in scopes}
        self._curve_pub = {s: self.create_publisher(Float64MultiArray, f"{prefix}/grip_curve/{s}", latched_qos())
                           for s in scopes}
        self._age_pub = {s: self.create_publisher(Vector3Stamped, f"{prefix}/grip_age/{s}", latched_qos())
                         for s in scopes}

    def _build_pipeline(self) -> Any:
        """The pipeline from the current parameters (start-up and ``~/reset``)."""
        pipeline = pipeline_from_params(self.values, load_description(self.values["vehicle"]))
        for warning in pipeline.config_warnings:
            self.get_logger().warning(warning)
        return pipeline

    def _new_pipeline(self) -> Any:
        pipeline = self._build_pipeline()
        self.pipeline = pipeline
        self._make_output_publishers()
        return pipeline

    # ------------------------------------------------------------ inputs
    def _inputs(self) -> tuple[Any, Any]:
        return self.pipeline.add, self.pipeline.collector.reject

    def _on_wheels(self, data: bytes) -> None:
        super()._on_wheels(data)
        forces = self.pipeline.force_estimator.last if self.pipeline.force_estimator is not None else ()
        if self._force_pub is not None and forces:
            for f in forces:
                self._force_pub.publish(conversions.tire_force_to_msg(f, self._frames))

    def _on_gnss(self, data: bytes) -> None:
        self._feed("gnss", conversions.raw_to_gnss_velocity, data)

    def _on_model(self, msg: DiagnosticArray) -> None:
        for status in msg.status:
            if status.name == "model":
                with self._lock:
                    self.pipeline.use_model_parameters({kv.key: kv.value for kv in status.values})

    def _on_force(self, data: bytes) -> None:
        self._feed("tire_forces", conversions.raw_to_tire_force, data)

    def _check_params(self, changed: dict[str, Any]) -> None:
        """On-set: refuse (ValueError) a change whose combination with the other values is inconsistent."""
        proposed = {**self.values, **changed}
        problem = theta_order_problem(proposed)
        if problem:
            raise ValueError(problem)
        fit_config_from(proposed, self.pipeline.fit_config)   # ValueError: refused

    def _reconfigure(self, changed: dict[str, Any]) -> None:
        with self._lock:
            self.pipeline.reconfigure(self.values)

    # ------------------------------------------------------------- cycle
    def _publish(self, updated: list) -> None:
        for scope in updated:
            self._publish_estimate(scope)

    def _cycle_failed(self, snapshots: list | None, message: str) -> None:
        scopes = [d.scope for d in snapshots] if snapshots is not None else list(self.pipeline.status)
        for scope in scopes:
            st = self.pipeline.status[scope]
            st.level, st.message = ERROR, message

    def _publish_estimate(self, scope: str) -> None:
        """A new estimate is in force: the belief at its data's newest sample (the fit itself: no time, no
        distance since), and its curve; the cadence publications then carry it forward."""
        st = self.pipeline.status[scope]
        est = st.estimate
        if est is None or not self.context.ok():
            return
        with self._lock:
            belief = self.pipeline.belief(scope, st.estimate_stamp)
        self._publish_belief(scope, belief)
        self._curve_pub[scope].publish(curve_message(est))

    def _publish_beliefs(self) -> None:
        """Every ``belief_period``: the belief in force of each scope at the newest data time (the last estimate
        widened by the road-change hazard, or unknown), while data arrive (estimation/grip/belief.py)."""
        if not self.enabled or self._closing:
            return
        with self._lock:
            t = self.pipeline.data_time()
            if not math.isfinite(t) or t == self._belief_t:   # no new data (a clock that went back is new data)
                return
            self._belief_t = t
            for scope in self.pipeline.watch_beliefs(t):
                self.get_logger().warning(f"{scope}: {self.pipeline.status[scope].message}")
            beliefs = {s: self.pipeline.belief(s, t) for s in self.pipeline.status}
        for scope, belief in beliefs.items():
            self._publish_belief(scope, belief)

    def _publish_belief(self, scope: str, b: Any) -> None:
        """``grip/<scope>``: x mean (NaN unknown), y lower (0 unknown), z upper; ``grip_age/<scope>``: x age s,
        y distance m, z probability of a road change since the data; both stamped with the belief's time."""
        if not self.context.ok():
            return
        self._grip_pub[scope].publish(conversions.grip_to_msg(b.t, scope, b.mean, b.lower, b.upper))
        self._age_pub[scope].publish(conversions.grip_to_msg(b.t, scope, b.age, b.distance, b.p_change))

    # ------------------------------------------------------- diagnostics
    def _publish_diagnostics(self) -> None:
        now = self._now()
        hw = self.get_fully_qualified_name()
        statuses = []
        with self._lock:
            counters = self.pipeline.collector.counters
            watched = {"measured": ("wheel_speeds", "tire_forces", "odom"),
                       "estimated": ("wheel_speeds", "imu", "odom"),
                       "auto": ("wheel_speeds", "odom")}[self.values["force_source"]]
            rates, stale, accounting, losing = self._input_health(counters.received, watched, now)
            values = {f"rate_{t}_hz": r for t, r in rates.items()}
            values.update(accounting)
            values.update({f"dropped_{k}": n for k, n in counters.dropped.items()})
            values.update({f"fill_{s}": n for s, n in self.pipeline.collector.fill().items()})
            values.update({"accepted": counters.accepted, "skipped_cycles": self.skipped_cycles, "busy": self.busy})
            est = self.pipeline.force_estimator
            if est is not None:
                values["force_source"] = self.pipeline.active_force_source
                values.update({f"forces_{k}": n for k, n in est.counters.items()})
                values["roll_split"] = "calibrated" if est.kphi is not None else "vehicle"
                if est.torque_scale is not None:
                    ts = est.torque_scale
                    values.update({"torque_scale": ts.scale, "torque_scale_sd": ts.scale_sd,
                                   "torque_scale_applied": ts.learnt and ts.config.apply,
                                   "torque_offset_force": ts.offset, "toe_drag": ts.toe_drag})
            can = self.pipeline.can
            if can is not None:   # the wheel torque from CAN signals (estimation/sensing/can_torque.py)
                values.update({f"can_{k}": n for k, n in can.counters.items()})
            values["enabled"] = self.enabled
            radius = self.pipeline.radius
            if radius is not None:
                (kf, kr), (sf, sr) = radius.k, radius.sd
                values.update({"radius_scale_front": kf, "radius_scale_rear": kr, "radius_scale_sd_front": sf,
                               "radius_scale_sd_rear": sr, "radius_gate": self.pipeline.collector.radius_gate,
                               "radius_gnss_used": radius.used.get("gnss", 0)})
            values["speed_reference"] = self.pipeline.collector.config.speed_reference   # auto's choice
            speed = self.pipeline.collector.speed
            if speed is not None:   # the GNSS/IMU speed reference's own counts (estimation/sensing/speed_reference.py)
                values.update({f"speed_{k}": n for k, n in speed.counters.items()})
            inputs = self._input_status(stale, losing)
            if inputs is not None:
                level, message = inputs
            elif counters.n_dropped and counters.n_dropped > counters.accepted:
                level, message = WARN, f"most samples dropped ({counters.n_dropped} dropped, {counters.accepted} kept)"
            else:
                level, message = OK, f"receiving; {counters.accepted} samples kept, {counters.n_dropped} dropped"
            statuses.append(diag_status(f"{NODE_NAME}: inputs", hw, level, message, values))
            doubts = self.pipeline.doubtful_assumptions()
            offset = self.pipeline.collector.speed.offset if self.pipeline.collector.speed is not None else None
            statuses.append(diag_status(
                f"{NODE_NAME}: vehicle description", hw, WARN if doubts else OK,
                "; ".join(doubts) if doubts else "no fact of the description and no sensor assumption is in doubt",
                {"doubtful": len(doubts), "accel_offset": offset[0] if offset else math.nan,
                 "accel_offset_sd": offset[1] if offset else math.nan,
                 "road_grade": self.pipeline.collector.grade, "imu_mount_yaw_deg": self.pipeline.imu_mount.angle_deg,
                 "wheel_speed_scatter": (self.pipeline.radius.wheel_speed_scatter()
                                         if self.pipeline.radius is not None else math.nan)}))
            for scope, st in self.pipeline.status.items():
                kv = self.pipeline.scope_report(scope)
                statuses.append(diag_status(f"{NODE_NAME}: {scope}", hw, st.level, st.message, kv))
        statuses.append(self._cpu_status(NODE_NAME, hw))
        self._diag_pub.publish(diag_array(self, statuses))


def curve_message(est: Any) -> Float64MultiArray:
    """Rows slip, q05, q50, q95 over the estimate's slip grid, with labelled layout dims."""
    rows = np.vstack([est.curve_slip, est.curve_q05, est.curve_q50, est.curve_q95])
    return conversions.grip_curve_to_msg(rows, labels=("slip,q05,q50,q95", "slip_grid"))


def main(args: list[str] | None = None) -> int:
    return spin_node(GripEstimatorNode, args)


__all__ = ["GripEstimatorNode", "PARAMS", "main", "curve_message", "OK", "WARN", "ERROR", "fit_config_from",
           "signal_config_from"]

if __name__ == "__main__":
    raise SystemExit(main())
