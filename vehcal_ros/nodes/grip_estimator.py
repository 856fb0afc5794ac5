"""``grip_estimator``: the tire-road friction potential, live (docs/nodes.md, docs/grip.md).

Subscribes (``qos_profile_sensor_data``, deeper queue): wheel speeds (sensor_msgs/JointState), tire forces
(geometry_msgs/WrenchStamped, one per wheel), odometry (nav_msgs/Odometry) and, for the steering angle, controls
(sensor_msgs/Joy). The sensor subscriptions take the serialised bytes (``raw=True``); callbacks only read them into
records (:mod:`vehcal_ros.nodes.raw_messages`) and feed the
:class:`~vehcal_ros.estimation.grip.pipeline.GripPipeline`; a timer hands a snapshot to a worker thread that
runs Algorithm 1 of the friction paper; a cycle still running makes the next one skip (counted), never queue
(scheduling: :mod:`vehcal_ros.nodes.worker_node`).

Publishes ``<output_prefix>/grip/<scope>`` (geometry_msgs/Vector3Stamped: x = mu_max mean, y/z = credible
interval), ``<output_prefix>/grip_age/<scope>`` (x age, y distance, z road-change probability),
``<output_prefix>/grip_curve/<scope>`` (std_msgs/Float64MultiArray: rows slip, q05, q50, q95) and ``/diagnostics``
(the pipeline's reports). The outputs are reliable + transient-local so a late-joining MPC gets the last estimate,
and silent until a scope's first valid estimate. Topic names are relative (a namespace moves them).

Services (std_srvs): ``~/reset`` (Trigger: forget buffers and estimates, e.g. after a tire change or a known
surface change), ``~/enable`` (SetBool: pause or resume estimation, state kept).

Without force transducers (``force_source: estimated``, or ``auto`` while the tire-force topic is silent) the
forces come from the wheel speeds' net torque (``JointState.effort``) and the IMU (``imu_topic``) through
:class:`~vehcal_ros.estimation.sensing.tire_forces.TireForceEstimator`; the calibrated roll stiffnesses on
``model_parameters_topic`` set its lateral load split; ``publish_estimated_forces`` publishes its forces on
``estimated_forces_topic`` (geometry_msgs/WrenchStamped per wheel, frame_id = wheel) to plot against a transducer.
Parameters: ``PARAMS``, declared in :mod:`vehcal_ros.nodes.parameters`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import TwistWithCovarianceStamped, Vector3Stamped, WrenchStamped
from std_msgs.msg import Float64MultiArray

from vehcal_ros.diagnostic_levels import ERROR, OK, WARN
from vehcal_ros.estimation.grip.parameters import check_combination, theta_order_problem
from vehcal_ros.estimation.grip.pipeline import fit_config_from, pipeline_from_params, signal_config_from
from vehcal_ros.nodes import conversions
from vehcal_ros.nodes.common import declare_params, latched_qos, make_set_callback, sensor_qos, spin_node
from vehcal_ros.nodes.parameters import GRIP_ESTIMATOR as PARAMS
from vehcal_ros.nodes.worker_node import WorkerNode
from vehcal_ros.replay.guards import grip_guard
from vehcal_ros.vehicle.description import load_description

NODE_NAME = "grip_estimator"


class GripEstimatorNode(WorkerNode):
    """Thin adapter: messages -> records -> GripPipeline; worker-thread fits; publish estimates and health."""

    diagnostics_prefix = NODE_NAME

    def __init__(self, node_name: str = NODE_NAME, **kwargs: Any) -> None:
        super().__init__(node_name, worker_name="grip_fit", **kwargs)
        self.values = v = declare_params(self, PARAMS)
        problem = theta_order_problem(v)
        if problem:
            raise ValueError(problem)
        self._scope_pubs: dict[str, dict[str, Any]] = {}   # scope -> output kind -> latched publisher
        self._new_pipeline()
        self.add_on_set_parameters_callback(make_set_callback(PARAMS, self._check_params))
        self.guard = grip_guard(v)   # jump: the collector's own restart threshold (as bag replay)
        # wheel speeds, odometry, controls and the IMU (load transfer of estimated forces, and with any force source
        # the body pitch that sets the front wheels' toe of a description with bump steer), the tire forces (four
        # messages per time step) and the GNSS velocity of the speed reference (GNSS/IMU)
        sensors = [(WrenchStamped, v["tire_forces_topic"], self._on_force, sensor_qos(4 * 2000))]
        if v["radius_learning"] or v["speed_reference"] != "odometry":
            sensors.append((TwistWithCovarianceStamped, v["gnss_topic"], self._on_gnss, sensor_qos()))
        self._subscribe_sensors(sensors)
        self._force_pub = None
        if v["force_source"] != "measured":
            self.create_subscription(DiagnosticArray, v["model_parameters_topic"], self._on_model, latched_qos(),
                                     callback_group=self.inputs_group)
            if v["publish_estimated_forces"]:
                self._force_pub = self.create_publisher(WrenchStamped, v["estimated_forces_topic"], 10)

        self._belief_t = -math.inf   # data time of the last published belief
        self._create_services()
        self._start_schedule(v["fit_period"])
        self._add_periodic(v["belief_period"], self._publish_beliefs)   # jump-aware, checked on every message
        self.get_logger().info(f"estimating grip per {v['scope']} on scopes {', '.join(self._scope_pubs)}")

    def _new_pipeline(self) -> Any:
        """The pipeline from the current parameters (start-up and ``~/reset``; a WARN per parameter that overrides
        the vehicle description) and its scopes' latched ``grip``, ``grip_age`` and ``grip_curve`` publishers,
        silent until the scope's first valid estimate: made anew so a late joiner is not handed an estimate from
        before a reset."""
        self.pipeline = pipeline_from_params(self.values, load_description(self.values["vehicle"]))
        for warning in self.pipeline.config_warnings:
            self.get_logger().warning(warning)
        for pub in (pub for pubs in self._scope_pubs.values() for pub in pubs.values()):
            self.destroy_publisher(pub)
        prefix = self.values["output_prefix"].rstrip("/")
        self._scope_pubs = {scope: {kind: self.create_publisher(cls, f"{prefix}/{kind}/{scope}", latched_qos())
                                 for kind, cls in (("grip", Vector3Stamped), ("grip_age", Vector3Stamped),
                                                   ("grip_curve", Float64MultiArray))}
                         for scope in self.pipeline.collector.scopes()}
        return self.pipeline

    def _check_combination(self, values: dict[str, Any]) -> None:
        check_combination(values, self.pipeline.fit_config)

    # ------------------------------------------------------------ inputs
    def _on_wheels(self, data: bytes) -> None:
        super()._on_wheels(data)
        forces = self.pipeline.force_estimator.last if self.pipeline.force_estimator is not None else ()
        if self._force_pub is not None and forces:
            for f in forces:
                self._force_pub.publish(conversions.tire_force_to_msg(f, self._frames))

    def _on_gnss(self, data: bytes) -> None:
        self._feed("gnss", conversions.raw_to_gnss_velocity, data)

    def _on_force(self, data: bytes) -> None:
        self._feed("tire_forces", conversions.raw_to_tire_force, data)

    def _on_model(self, msg: DiagnosticArray) -> None:
        for status in msg.status:
            if status.name == "model":
                with self._lock:
                    self.pipeline.use_model_parameters({kv.key: kv.value for kv in status.values})

    # ----------------------------------------------------------- outputs
    def _publish(self, updated: list) -> None:
        for scope in updated:
            self._publish_estimate(scope)

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
        self._scope_pubs[scope]["grip_curve"].publish(curve_message(est))

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
        self._scope_pubs[scope]["grip"].publish(conversions.grip_to_msg(b.t, scope, b.mean, b.lower, b.upper))
        self._scope_pubs[scope]["grip_age"].publish(conversions.grip_to_msg(b.t, scope, b.age, b.distance, b.p_change))


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
