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
parameters ``model.cxf`` ... ``model.jd`` (set on each accepted recalibration, so ``/parameter_events`` announces
it); the params YAML at ``params_out``; ``/diagnostics`` (the pipeline's reports: ``calibration required`` at WARN,
naming the maneuvers still needed, until a stage is accepted). A fit failing its diagnostics is reported, not published.

Services (std_srvs): ``~/reset`` (Trigger: forget buffers and accepted stages), ``~/enable`` (SetBool: pause or
resume, state kept), ``~/calibrate`` (Trigger: fit the due stages now, answer with each outcome), ``~/save``
(Trigger: write ``params_out`` and ``state_file``). Persistence: ``state_file`` + ``vehicle_id``
(:class:`~vehcal_ros.io.calibration_state.StateFile`): restored and published at start, written after each
accepted fit. Parameters: ``PARAMS``, declared in :mod:`vehcal_ros.nodes.parameters`.
"""

from __future__ import annotations

from typing import Any

from diagnostic_msgs.msg import DiagnosticArray
from rclpy.parameter import Parameter

from vehcal_ros.atomic_files import remove_stale_temps, write_atomic
from vehcal_ros.diagnostic_levels import HealthReport
from vehcal_ros.errors import InputError
from vehcal_ros.estimation.calibration.parameters import MODEL_SPECS, OUTPUTS, check_combination
from vehcal_ros.estimation.calibration.pipeline import CalibrationPipeline, config_from, vehicle_overrides
from vehcal_ros.io.calibration_state import StateFile
from vehcal_ros.nodes import conversions
from vehcal_ros.nodes.common import declare_params, latched_qos, make_set_callback, spin_node
from vehcal_ros.nodes.parameters import MODEL_CALIBRATOR as PARAMS
from vehcal_ros.nodes.worker_node import WorkerNode
from vehcal_ros.replay.guards import calibration_guard

NODE_NAME = "model_calibrator"


class ModelCalibratorNode(WorkerNode):
    """Thin adapter: messages -> records -> CalibrationPipeline; worker-thread fits; publish model and health."""

    outputs = OUTPUTS
    diagnostics_prefix = NODE_NAME
    reset_message = "buffers and accepted stages cleared; calibration starts over from the priors"

    def __init__(self, node_name: str = NODE_NAME, **kwargs: Any) -> None:
        super().__init__(node_name, worker_name="calibration_fit", **kwargs)
        self.values = v = declare_params(self, PARAMS)
        try:
            self.pipeline = self._new_pipeline()
        except InputError as exc:
            raise ValueError(str(exc)) from None
        self.n_published = 0
        self.add_on_set_parameters_callback(make_set_callback(PARAMS, self._check_params))
        self._set_model_parameters(self.pipeline.model_values())   # the start-up model: the nominal values
        if v["params_out"]:
            remove_stale_temps(v["params_out"])   # left by a writer killed mid-write
        self.guard = calibration_guard(v)   # jump: clock_jump (as bag replay)
        self._subscribe_sensors()
        self._model_pub = self.create_publisher(DiagnosticArray, v["output_topic"], latched_qos())
        self.state = StateFile(v["state_file"], v["vehicle_id"], v.get("vehicle"))
        if self.state.restore(self.pipeline):
            self.get_logger().info(self.state.note)
        elif self.state.refused:
            self.get_logger().warning(self.state.note)
        self._create_services({"~/calibrate": self._on_calibrate, "~/save": self._on_save})
        self._start_schedule(v["calibration_period"])
        self.get_logger().info(f"calibrating stages {', '.join(v['stages'])} every {v['calibration_period']} s")
        if self.pipeline.calibrated():
            self._publish_model()   # the restored model at once (latched)
        if self.state.refused:
            self._publish_diagnostics()

    def _new_pipeline(self) -> CalibrationPipeline:
        """The pipeline from the current parameters (start-up and ``~/reset``); a WARN per parameter that
        overrides the vehicle description."""
        for warning in vehicle_overrides(self.values):
            self.get_logger().warning(warning)
        return CalibrationPipeline(config_from(self.values))

    def _check_combination(self, values: dict[str, Any]) -> None:
        check_combination(values)

    # ---------------------------------------------------------- services
    def _on_reset(self, request: Any, response: Any) -> Any:
        response = super()._on_reset(request, response)
        self._set_model_parameters(self.pipeline.model_values())   # the start-up model
        self.destroy_publisher(self._model_pub)   # a late joiner must not get the model from before the reset
        self._model_pub = self.create_publisher(DiagnosticArray, self.values["output_topic"], latched_qos())
        try:
            if self.state.start_over(lambda: self.pipeline, self._lock):   # the file's history goes too
                response.message += f"; {self.state.path} emptied"
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
            response.success, response.message = pipeline.calibrate_outcome(jobs, before)
        self._publish_diagnostics()
        return response

    def _on_save(self, request: Any, response: Any) -> Any:
        """Write the current model to ``params_out`` (and the accepted results to ``state_file``)."""
        out = self.values["params_out"]
        try:
            if out:
                with self._lock:
                    text = self.pipeline.params_yaml(self.values["params_node_name"])
                write_atomic(out, text)
            written = [path for path in (out, self.state.save(lambda: self.pipeline, self._lock)) if path]
        except OSError as exc:
            response.success, response.message = False, f"cannot write: {exc}"
            return response
        calibrated = ", ".join(sorted(self.pipeline.calibrated())) or "none"
        response.success = bool(written)
        response.message = (f"wrote {', '.join(written)} (calibrated: {calibrated}; defaults elsewhere)" if written
                            else "params_out and state_file are both empty: nothing written")
        return response

    # ----------------------------------------------------------- outputs
    def _publish(self, updated: list) -> None:
        try:
            self.state.save(lambda: self.pipeline, self._lock)
        except OSError as exc:
            self.get_logger().error(f"cannot write state_file {self.state.path}: {exc}")
        self._publish_model()
        self._publish_diagnostics()   # the new status at once (the ROS clock may have stopped)

    def _publish_model(self) -> None:
        """The model as the ``model.*`` parameters, in ``params_out`` and on ``output_topic``."""
        with self._lock:
            model = self.pipeline.model_values()
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

    def _set_model_parameters(self, values: dict[str, float]) -> None:
        results = self.set_parameters([Parameter(k, value=float(v)) for k, v in values.items()])
        bad = [r.reason for r in results if not r.successful]
        if bad:
            self.get_logger().warning(f"model parameters not set: {bad[0]}")

    def _reports(self) -> dict[str, HealthReport]:
        """The calibration status, with the state file's figures, then each stage's."""
        return self.pipeline.reports(self.state.report_values(), self.state.refused)


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
