"""``model_calibrator``: staged Bayesian calibration of the 8-DOF model, live (docs/nodes.md, docs/calibration.md).

Subscribes (``qos_profile_sensor_data``, deeper queue): wheel speeds (sensor_msgs/JointState), IMU
(sensor_msgs/Imu), odometry (nav_msgs/Odometry) and controls (sensor_msgs/Joy), as serialised bytes
(``raw=True``). Callbacks only read them into records (:mod:`vehcal_ros.nodes.raw_messages`) and feed the
:class:`~vehcal_ros.estimation.calibration.pipeline.CalibrationPipeline`; a cycle on the ROS clock
(``use_sim_time`` is honoured; scheduling in :mod:`vehcal_ros.nodes.worker_node`) hands the next stage(s) with a
fresh qualifying segment to a worker thread (Unjhawala et al. 2023, doi:10.1115/1.4062199, Section 3: tempered
SMC, runs as chains); a cycle still running makes the next one skip (counted), never queue.

Outputs: ``vehcal/model_parameters`` (topic names are relative: a namespace moves them; diagnostic_msgs/
DiagnosticArray, reliable + transient local, silent until the first accepted stage: one status per calibrated
parameter and noise sigma with mean, std, hdi_low, hdi_high, r_hat, ess_bulk, ess_tail, stage, time); its own
parameters ``model.cxf`` ... ``model.rr`` (set on each accepted recalibration, so ``/parameter_events`` announces
it); the params YAML at ``params_out``; ``/diagnostics`` (``calibration required`` at WARN, naming the maneuvers
still needed, until a stage is accepted). A fit failing its diagnostics is reported and never published.

Services (std_srvs): ``~/reset`` (Trigger: forget buffers and accepted stages), ``~/enable`` (SetBool: pause or
resume, state kept), ``~/calibrate`` (Trigger: fit the due stages now, answer with each outcome), ``~/save``
(Trigger: write ``params_out`` and ``state_file``). Persistence: ``state_file`` + ``vehicle_id``
(:mod:`vehcal_ros.io.calibration_state`): restored and published at start, written after each accepted fit.
"""

from __future__ import annotations

import datetime as _dt
from typing import Any

from diagnostic_msgs.msg import DiagnosticArray
from nav_msgs.msg import Odometry
from rclpy.parameter import Parameter
from sensor_msgs.msg import Imu, JointState, Joy
from std_srvs.srv import Trigger

from vehcal_ros.atomic_files import remove_stale_temps
from vehcal_ros.errors import InputError
from vehcal_ros.estimation.calibration.parameters import PARAMS as ESTIMATION_PARAMS
from vehcal_ros.estimation.calibration.pipeline import (
    MODEL_PARAMETERS,
    CalibrationPipeline,
    config_from,
    vehicle_overrides,
    write_atomic,
)
from vehcal_ros.io import calibration_state
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
from vehcal_ros.replay.guards import calibration_guard

NODE_NAME = "model_calibrator"


_MODEL_UNITS = {"Cxf": "front longitudinal tire stiffness, N", "Cxr": "rear longitudinal tire stiffness, N",
                "Cyf": "front cornering stiffness, N/rad", "Cyr": "rear cornering stiffness, N/rad",
                "kphi_f": "front roll stiffness, N m/rad", "kphi_r": "rear roll stiffness, N m/rad",
                "bphi": "total roll damping (bphi_f = bphi_r = bphi/2), N m s/rad",
                "rr": "rolling resistance lever, m (T = -rr |Fz| sign(omega))",
                "Jd": "driveline spin inertia added to each driven wheel's (negative: the description's wheel "
                      "inertia was too high), kg m^2"}
MODEL_SPECS: tuple[ParamSpec, ...] = tuple(
    ParamSpec(f"model.{name.lower()}", 0.0, f"{_MODEL_UNITS[name]}: the latest accepted model (published); a "
              "start-up value other than 0 overrides the vehicle description's nominal value (0 = the description's)",
              -1e4 if name == "Jd" else 0.0, 1.0 if name == "rr" else 1e7)
    for name in MODEL_PARAMETERS)
"""Output parameters (read_only=False): the latest accepted model, the description's nominal values where not
calibrated yet; a start-up value other than 0 overrides the nominal value (with a WARN naming both; only ``Jd``
may be negative: the description's wheel inertia was too high)."""

OUTPUTS = frozenset(spec.name for spec in MODEL_SPECS)
"""Parameters the node writes (the model it publishes): read at start-up only, never applied on a later set."""


PARAMS: tuple[ParamSpec, ...] = (
    ParamSpec("wheel_speeds_topic", "vehicle/wheel_speeds", "sensor_msgs/JointState, rad/s", read_only=True),
    ParamSpec("imu_topic", "vehicle/imu", "sensor_msgs/Imu (roll, roll rate, yaw rate)", read_only=True),
    ParamSpec("odom_topic", "vehicle/odom", "nav_msgs/Odometry, body-frame twist (u, v, yaw rate)", read_only=True),
    ParamSpec("controls_topic", "vehicle/controls", "sensor_msgs/Joy [throttle, brake, steering]", read_only=True),
    ParamSpec("output_topic", "vehcal/model_parameters", "diagnostic_msgs/DiagnosticArray of the calibrated model",
              read_only=True),
    *FRAMES,
    *ESTIMATION_PARAMS,
    ParamSpec("params_out", "", "path of the params YAML written on each recalibration ('' = none)"),
    ParamSpec("params_node_name", "model_calibrator", "node name at the top of the params YAML"),
    ParamSpec("state_file", "", "state file (JSON, or YAML for .yaml/.yml): accepted results restored at start, "
              "written after each accepted fit and on ~/save ('' = none)", read_only=True),
    ParamSpec("vehicle_id", "default", "the vehicle this calibrator's state file belongs to (a file written for "
              "another id is refused)", read_only=True,
              check=lambda v: None if str(v).strip() else "parameter 'vehicle_id' must not be empty"),
    ParamSpec("calibration_period", 5.0, "time between calibration cycles, s (ROS clock)", 0.05, 86400.0,
              read_only=True),
    *HEALTH,
    *CAN_TOPICS,
    *MODEL_SPECS,
)

MANEUVERS = {"longitudinal": "straight throttle ramp", "lateral": "steering at speed",
             "rolling_resistance": "coast-down"}
"""What a driver does to give each stage its data (named in the ``calibration required`` status)."""


class ModelCalibratorNode(WorkerNode):
    """Thin adapter: messages -> records -> CalibrationPipeline; worker-thread fits; publish model and health."""

    outputs = OUTPUTS

    def __init__(self, node_name: str = NODE_NAME, **kwargs: Any) -> None:
        super().__init__(node_name, worker_name="calibration_fit", **kwargs)
        self.values = declare_params(self, PARAMS)
        try:
            self.pipeline = self._new_pipeline()
        except InputError as exc:
            raise ValueError(str(exc)) from None
        self.n_published = 0
        self.add_on_set_parameters_callback(make_set_callback(PARAMS, self._check_params))
        self._set_model_parameters(self._model_values())   # the start-up model: the description's nominal values
        v = self.values
        self._frames = conversions.frames(v["wheel_names"], v["controls_axes"])
        self.guard = calibration_guard(v)   # jump: clock_jump (as bag replay)
        if v["params_out"]:
            remove_stale_temps(v["params_out"])   # left by a writer killed mid-write

        qos = sensor_qos()
        group = self.inputs_group
        # serialised bytes (raw=True), read by nodes/raw_messages.py without rclpy's message objects
        for cls, topic, callback in ((JointState, v["wheel_speeds_topic"], self._on_wheels),
                                     (Imu, v["imu_topic"], self._on_imu), (Odometry, v["odom_topic"], self._on_odom),
                                     (Joy, v["controls_topic"], self._on_controls)):
            self.create_subscription(cls, topic, callback, qos, callback_group=group, raw=True)
        if self.pipeline.can is not None:   # the wheel torque from CAN signals (torque_source engine or axle)
            self._subscribe_can(v, qos, sensor_qos(2 * 2000))
        self._model_pub = self.create_publisher(DiagnosticArray, v["output_topic"], latched_qos())
        self._diag_pub = self.create_publisher(DiagnosticArray, "/diagnostics", 10)
        self.state_note = ""          # what happened to the state file at start (shown on /diagnostics)
        self.state_refused = ""       # why it was refused ("" = not refused)
        self._state_before: dict = {}     # the stages restored at start (their history entries are theirs)
        self._state_history: list = []   # the state file's drives before this run (io/calibration_state.py)
        self._drive = "live " + _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        self._restore_state()
        self._create_services()
        self.create_service(Trigger, "~/calibrate", self._on_calibrate, callback_group=self.services_group)
        self.create_service(Trigger, "~/save", self._on_save, callback_group=self.services_group)
        self._start_schedule(v["calibration_period"], v["diagnostics_period"], v["clock_stall_timeout"],
                             v["window"])
        self.get_logger().info(f"calibrating stages {', '.join(v['stages'])} every {v['calibration_period']} s")
        if self.pipeline.calibrated():
            self._publish_model()   # the restored model at once (latched)
        if self.state_refused:
            self._publish_diagnostics()

    # ------------------------------------------------------- persistence
    def _restore_state(self) -> None:
        """Read ``state_file`` back (module docstring of :mod:`vehcal_ros.io.calibration_state`)."""
        path, vid = self.values["state_file"], self.values["vehicle_id"]
        if not path:
            return
        remove_stale_temps(path)   # left by a writer killed mid-write (the file itself is whole: write_atomic)
        try:
            doc = calibration_state.read_state_document(path, vid, vehicle=self.values.get("vehicle"))
        except FileNotFoundError:
            self.state_note = f"no state file at {path} yet: starting from the priors"
        except (calibration_state.StateRefused, OSError) as exc:
            self.state_refused = getattr(exc, "reason", str(exc))
            self.state_note = f"state file {path} refused: {self.state_refused}; starting from the priors"
            self.get_logger().warning(self.state_note)
        else:
            saved, self._state_before, self._state_history = doc.stages, dict(doc.stages), list(doc.history)
            stages = calibration_state.restore_into(self.pipeline, saved, note=f"restored from {path}",
                                                    history=doc.history)
            self.state_note = (f"restored {', '.join(stages)} from {path}" if stages else
                               f"state file {path} holds no accepted stage: starting from the priors")
            self.get_logger().info(self.state_note)

    def _save_state(self) -> str | None:
        """Write the accepted results to ``state_file`` (atomic); return the path written, None if none is set."""
        path = self.values["state_file"]
        if not path:
            return None
        with self._lock:
            stages = calibration_state.stages_from(self.pipeline, self._drive, self._state_before)
            entry = calibration_state.pipeline_drive_entry(self.pipeline, self._drive, self._state_before, stages)
        history = self._state_history
        if stages:   # this run's drive entry (replaced on every save of the run)
            history = calibration_state.with_entry(history, entry)
        calibration_state.write_state(path, self.values["vehicle_id"], stages, vehicle=self.values.get("vehicle"),
                                      history=history)
        return path

    # ---------------------------------------------------------- services
    def _new_pipeline(self) -> Any:
        """The pipeline from the current parameters (start-up and ``~/reset``); a WARN per parameter that
        overrides the vehicle description."""
        for warning in vehicle_overrides(self.values):
            self.get_logger().warning(warning)
        return CalibrationPipeline(config_from(self.values))

    def _reset_message(self) -> str:
        return "buffers and accepted stages cleared; calibration starts over from the priors"

    def _on_reset(self, request: Any, response: Any) -> Any:
        response = super()._on_reset(request, response)
        self._set_model_parameters(self._model_values())   # the start-up model
        self.destroy_publisher(self._model_pub)   # a late joiner must not get the model from before the reset
        self._model_pub = self.create_publisher(DiagnosticArray, self.values["output_topic"], latched_qos())
        self._state_before, self._state_history = {}, []   # starts over: the file's history goes too
        try:
            if self._save_state():
                response.message += f"; {self.values['state_file']} emptied"
        except OSError as exc:
            response.message += f"; cannot write state_file: {exc}"
        return response

    def _on_calibrate(self, request: Any, response: Any) -> Any:
        """Run the due stages now on the buffered data (windows still open are taken as they are) and answer
        with each stage's outcome."""
        if not self.enabled:
            response.success, response.message = False, "paused (~/enable false): nothing fitted"
            return response
        if self.busy:
            response.success, response.message = False, "a calibration cycle is running; call again when it ends"
            return response
        with self._lock:
            pipeline = self.pipeline
            jobs = pipeline.snapshot(final=True)
            before = {s: st.result for s, st in pipeline.status.items()}
        if jobs:
            self._future = self._worker.submit(self._run, jobs)
            self._future.result()
        if pipeline is not self.pipeline:
            response.success, response.message = False, "reset during the fit: its outcome was dropped"
            return response
        with self._lock:
            stages = [job.stage for job in jobs] or list(pipeline.config.stages)
            accepted = {s for s in stages if pipeline.status[s].result is not before[s]}
            lines = [f"{s}: {'accepted' if s in accepted else 'not accepted'}: {pipeline.status[s].message}"
                     for s in stages]
        response.success = bool(jobs) and accepted == set(stages)
        response.message = ("fitted " if jobs else "nothing to fit; ") + " | ".join(lines)
        self._publish_diagnostics()
        return response

    def _on_save(self, request: Any, response: Any) -> Any:
        """Write the current model to ``params_out`` (and the accepted results to ``state_file``)."""
        written = []
        try:
            out = self.values["params_out"]
            if out:
                with self._lock:
                    text = self.pipeline.params_yaml(self.values["params_node_name"])
                write_atomic(out, text)
                written.append(out)
            state = self._save_state()
            if state:
                written.append(state)
        except OSError as exc:
            response.success, response.message = False, f"cannot write: {exc}"
            return response
        if not written:
            response.success, response.message = False, "params_out and state_file are both empty: nothing written"
        else:
            cal = self.pipeline.calibrated()
            response.success = True
            response.message = (f"wrote {', '.join(written)} (calibrated: {', '.join(sorted(cal)) or 'none'}; "
                                "defaults elsewhere)")
        return response

    # ------------------------------------------------------------ inputs
    def _inputs(self) -> tuple[Any, Any]:
        return self.pipeline.add, self.pipeline.reject

    def _check_params(self, changed: dict[str, Any]) -> None:
        """On-set: refuse (ValueError) a change whose combination with the other values is inconsistent. The
        ``model.*`` parameters are outputs after start-up (:data:`OUTPUTS`): setting them checks nothing."""
        inputs = {k: v for k, v in changed.items() if k not in OUTPUTS}
        if not inputs:
            return
        try:
            config_from({**self.values, **inputs})
        except InputError as exc:
            raise ValueError(str(exc)) from None

    def _reconfigure(self, changed: dict[str, Any]) -> None:
        with self._lock:
            self.pipeline.reconfigure(self.values)

    # ------------------------------------------------------------- cycle
    def _publish(self, updated: list) -> None:
        try:
            self._save_state()
        except OSError as exc:
            self.get_logger().error(f"cannot write state_file {self.values['state_file']}: {exc}")
        self._publish_model()
        self._publish_diagnostics()   # the new status at once (the ROS clock may have stopped)

    def _cycle_failed(self, jobs: list | None, message: str) -> None:
        stages = [job.stage for job in jobs] if jobs is not None else list(self.pipeline.config.stages)
        for stage in stages:
            st = self.pipeline.status[stage]
            st.level, st.message = ERROR, message

    def _publish_model(self) -> None:
        with self._lock:
            model = self._model_values()
            statuses = self.pipeline.model_statuses(self.get_fully_qualified_name())
            text = self.pipeline.params_yaml(self.values["params_node_name"])
            path = self.values["params_out"]
        if not self.context.ok():
            return
        self._set_model_parameters(model)
        if path:
            try:
                write_atomic(path, text)
            except OSError as exc:
                self.get_logger().error(f"cannot write params_out {path}: {exc}")
        # parameters and file first, so a consumer woken by the message finds them updated
        self._model_pub.publish(conversions.diagnostics_to_msg(self._now(), statuses))
        self.n_published += 1

    def _model_values(self) -> dict[str, float]:
        """The pipeline's model (accepted values, nominal ones elsewhere) as ``model.<name>`` parameters."""
        return {f"model.{k.lower()}": v for k, v in self.pipeline.model_parameters().items()}

    def _set_model_parameters(self, values: dict[str, float]) -> None:
        results = self.set_parameters([Parameter(k, value=float(v)) for k, v in values.items()])
        bad = [r.reason for r in results if not r.successful]
        if bad:
            self.get_logger().warning(f"model parameters not set: {bad[0]}")

    # ------------------------------------------------------- diagnostics
    def _calibration_status(self, hw: str) -> Any:
        """``calibration required`` (WARN) while no stage has an accepted result, naming the maneuvers still
        needed and what the newest data gave for each; OK with the calibrated stages otherwise (under the lock)."""
        stages = self.pipeline.config.stages
        done = [s for s in stages if self.pipeline.status[s].result is not None]
        values: dict[str, Any] = {"calibrated_stages": ",".join(done), "vehicle_id": self.values["vehicle_id"],
                                  "state_file": self.values["state_file"], "state": self.state_note}
        if self.state_refused:
            values["state_refused"] = self.state_refused
        needed = [s for s in stages if s not in done]
        for s in needed:
            st = self.pipeline.status[s]
            values[f"seen_{s}"] = st.last_reason or st.message
        if not done:
            text = "; ".join(f"{MANEUVERS[s]} ({s}: {values[f'seen_{s}']})" for s in needed)
            message = f"calibration required: {text}"
            if self.state_refused:
                message = f"state file refused ({self.state_refused}); {message}"
            return diag_status(f"{NODE_NAME}: calibration", hw, WARN, message, values)
        message = f"calibrated: {', '.join(done)}"
        if needed:
            message += f"; still needed: {', '.join(MANEUVERS[s] for s in needed)}"
        level = WARN if self.state_refused else OK
        if self.state_refused:
            message += f"; state file refused at start ({self.state_refused})"
        return diag_status(f"{NODE_NAME}: calibration", hw, level, message, values)

    def _publish_diagnostics(self) -> None:
        now = self._now()
        hw = self.get_fully_qualified_name()
        statuses = []
        with self._lock:
            c = self.pipeline.counters
            rates, stale, accounting, losing = self._input_health(c.received, tuple(c.received), now)
            values: dict[str, Any] = {f"rate_{topic}_hz": rates[topic] for topic in c.received}
            values.update(accounting)
            values.update({f"dropped_{k}": n for k, n in c.dropped.items()})
            values.update({f"fill_{k}": n for k, n in self.pipeline.fill().items()})
            values.update({"buffer_restarts": c.clock_jumps, "skipped_cycles": self.skipped_cycles,
                           "busy": self.busy})
            if self.pipeline.can is not None:   # the wheel torque from CAN signals (estimation/sensing/can_torque.py)
                values.update({f"can_{k}": n for k, n in self.pipeline.can.counters.items()})
            values["enabled"] = self.enabled
            inputs = self._input_status(stale, losing)
            if inputs is not None:
                level, message = inputs
            elif c.n_dropped > 0.5 * max(c.n_received, 1):
                level, message = WARN, f"most samples dropped ({c.n_dropped} of {c.n_received})"
            else:
                level, message = OK, f"receiving; {c.n_received} samples, {c.n_dropped} dropped"
            statuses.append(diag_status(f"{NODE_NAME}: inputs", hw, level, message, values))
            statuses.append(self._calibration_status(hw))
            for stage in self.pipeline.config.stages:
                st = self.pipeline.status[stage]
                statuses.append(diag_status(f"{NODE_NAME}: {stage}", hw, st.level, st.message,
                                            self.pipeline.stage_report(stage)))
        statuses.append(self._cpu_status(NODE_NAME, hw))
        self._diag_pub.publish(diag_array(self, statuses))


def build_node(context: Any = None, **overrides: Any) -> ModelCalibratorNode:
    """The node with parameter overrides given as keywords (``model.cxf`` as ``model__cxf``), e.g. for
    ``vehcal run``: ``build_node(ctx, n_draws=300, params_out="/tmp/model.yaml")``."""
    params = [Parameter(k.replace("__", "."), value=v) for k, v in overrides.items()]
    return ModelCalibratorNode(context=context, parameter_overrides=params)


def main(args: list[str] | None = None) -> int:
    return spin_node(ModelCalibratorNode, args)


__all__ = ["ModelCalibratorNode", "PARAMS", "MODEL_SPECS", "build_node", "config_from", "main"]

if __name__ == "__main__":
    raise SystemExit(main())
