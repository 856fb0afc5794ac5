"""``vehicle_simulator``: the 14-DOF vehicle (HMMWV or sedan, ``vehicle``) on a friction map, publishing what a
real vehicle would.

Runs a scenario (io/scenarios.py) with the loop of io/simulate.py in a worker thread, paced to
``realtime_factor``, and publishes the sensor topics of docs/nodes.md stamped with the
simulation time (the GNSS velocity ``vehicle/gnss/vel`` and position ``vehicle/gnss/fix`` too, published
``latency`` after their stamps like every sensor), ``/vehicle/ground_truth``, ``/clock`` (``publish_clock``)
and ``/diagnostics``.
With ``controls_source: topic`` the driver inputs come from ``/vehicle/controls`` instead of the scenario.
A diverging model gives an ERROR on /diagnostics and stops stepping; the node keeps running.
Reference: docs/simulator_io.md.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from rclpy.clock import Clock, ClockType
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import (
    DurabilityPolicy,
    HistoryPolicy,
    QoSProfile,
    ReliabilityPolicy,
    qos_profile_sensor_data,
)

from vehcal_ros.io.scenarios import load_scenario
from vehcal_ros.io.simulate import ScenarioRun, SimulationDiverged, make_model, run_scenario
from vehcal_ros.models.sensors import SENSOR_TOPICS
from vehcal_ros.nodes import conversions as conv
from vehcal_ros.nodes.common import (
    ERROR,
    OK,
    WARN,
    declare_params,
    diag_array,
    diag_status,
    make_set_callback,
    spin_node,
)
from vehcal_ros.parameters import ParamSpec
from vehcal_ros.records import WHEELS

NODE_NAME = "vehicle_simulator"


def _wheel_names_check(value: Any) -> str | None:
    names = list(value)
    if len(names) != 4 or len(set(names)) != 4 or not all(isinstance(n, str) and n for n in names):
        return f"parameter 'wheel_names' must be 4 distinct non-empty names (FL, FR, RL, RR), got {names}"
    return None


def _topic_check(name: str):
    def check(value: Any) -> str | None:
        text = str(value)
        if not text or text.endswith("/") or "//" in text or any(c.isspace() for c in text):
            return f"parameter '{name}' must be a topic name (relative or absolute), got {value!r}"
        return None
    return check


def default_topic(canonical: str) -> str:
    """The publisher's default name: relative (``vehicle/imu``, moved by a namespace) except ``/clock``."""
    return canonical if canonical == "/clock" else canonical.lstrip("/")


WAIT_TOPICS = ("/vehicle/wheel_speeds", "/vehicle/odom")
"""The topics ``wait_for_subscribers`` counts on: every estimator reads the wheel speeds and the odometry."""


PARAMS: tuple[ParamSpec, ...] = (
    ParamSpec("scenario", "daily_driving", "scenario YAML file or built-in name (config/scenarios)",
              read_only=True),
    ParamSpec("vehicle", "", "simulated vehicle: hmmwv, sedan, sedan_zero_bump_steer or a model file in the layout "
              "of hmmwv.yaml; empty = the scenario's (default hmmwv); a built-in scenario with a version for it "
              "(sedan_<name>) runs that", read_only=True),
    ParamSpec("realtime_factor", 1.0, "simulation speed over wall-clock speed; 1 = real time, 0 = as fast as "
              "possible", lo=0.0, hi=10000.0),
    ParamSpec("publish_clock", True, "publish /clock (rosgraph_msgs/Clock) for nodes with use_sim_time",
              read_only=True),
    ParamSpec("controls_source", "scenario", "driver inputs from the scenario or from the controls topic",
              choices=("scenario", "topic"), read_only=True),
    ParamSpec("controls_timeout", 0.5, "s of simulation time after which topic controls are stale "
              "(then throttle 0, brake 0, steering held)", lo=0.01, hi=60.0),
    ParamSpec("duration", 0.0, "s of simulation; 0 = the scenario's duration", lo=0.0, hi=1.0e6, read_only=True),
    ParamSpec("seed", -1, "sensor-noise seed; -1 = the scenario's seed", lo=-1, hi=2**31 - 1, read_only=True),
    ParamSpec("publish_tire_forces", True, "publish the tire-force topic (false: a production car without "
              "force transducers; the ground truth keeps the true forces)", read_only=True),
    ParamSpec("wait_for_subscribers", 0, "before stepping, wait until the wheel-speed and odometry topics have "
              "this many subscribers each (the estimators; 0 = start at once)", lo=0, hi=100, read_only=True),
    ParamSpec("wait_timeout", 30.0, "s to wait for subscribers before starting anyway", lo=0.0, hi=3600.0,
              read_only=True),
    ParamSpec("wheel_names", list(WHEELS), "JointState names / WrenchStamped frame ids, FL, FR, RL, RR",
              read_only=True, check=_wheel_names_check),
    ParamSpec("controls.throttle_axis", 0, "Joy axes index of the throttle", lo=0, hi=31, read_only=True),
    ParamSpec("controls.brake_axis", 1, "Joy axes index of the brake", lo=0, hi=31, read_only=True),
    ParamSpec("controls.steering_axis", 2, "Joy axes index of the steering", lo=0, hi=31, read_only=True),
    ParamSpec("frames.base", "base_link", "frame id of the vehicle body (IMU, JointState, Joy)", read_only=True),
    ParamSpec("frames.odom", "odom", "frame id of the odometry pose", read_only=True),
    ParamSpec("frames.gnss", "gnss", "frame id of the GNSS antenna (the velocity itself is in the world ENU "
              "frame; the fix is WGS-84 latitude, longitude, altitude)", read_only=True),
    ParamSpec("diagnostics_period", 1.0, "s (wall clock) between /diagnostics messages", lo=0.05, hi=60.0,
              read_only=True),
    *(ParamSpec(f"topics.{key}", default_topic(topic), f"topic of {key}", read_only=True,
                check=_topic_check(f"topics.{key}"))
      for key, topic in SENSOR_TOPICS.items()),
)


SHIPPED_DIFFERENT = {
    "wait_for_subscribers": (2, "launched with the two estimators, the simulator waits for them to subscribe, so no "
                                "sensor message is published before they listen; a test or a script that builds "
                                "the node alone starts at once with the default"),
    "wait_timeout": (120.0, "the estimators' first import compiles numba kernels on a fresh install (about a "
                            "minute); the default is enough where they are warm"),
}
"""Parameters whose value in config/estimate.yaml differs from the declared default: ``{name: (shipped value,
reason)}``. tools/param_reference.py writes these values with their reasons into the file; the parameter-drift
test (test/install/test_param_docs.py) checks every other shipped value equals its default."""

SENSOR_QOS = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=100, reliability=ReliabilityPolicy.RELIABLE,
                        durability=DurabilityPolicy.VOLATILE)
"""Reliable publishers: matched by reliable and by best-effort (``qos_profile_sensor_data``) subscribers."""


class VehicleSimulator(Node):
    """The simulator node; ``build_node(**overrides)`` makes one in-process (parameter overrides).

    ``model_factory(scenario)`` replaces the default 14-DOF model (any object with the Hmmwv14 interface).
    """

    def __init__(self, model_factory: Any = None, context: Any = None, namespace: str | None = None,
                 **overrides: Any) -> None:
        self._model_factory = model_factory
        super().__init__(NODE_NAME, context=context, namespace=namespace,
                         parameter_overrides=[Parameter(k, value=v) for k, v in overrides.items()])
        p = declare_params(self, PARAMS)
        self.params = p
        self.add_on_set_parameters_callback(make_set_callback(PARAMS))
        self.add_post_set_parameters_callback(self._post_set)
        try:
            self.frames = conv.frames(p["wheel_names"], (p["controls.throttle_axis"], p["controls.brake_axis"],
                                                         p["controls.steering_axis"]),
                                      p["frames.base"], p["frames.odom"], p["frames.gnss"])
        except ValueError as exc:
            raise ValueError(f"parameters wheel_names/controls.*_axis: {exc}") from None
        if p["vehicle"]:
            from vehcal_ros.models.vehicle14 import vehicle_model_file

            vehicle_model_file(p["vehicle"])  # InputError (a ValueError): one line, exit 2
        scenario = load_scenario(p["scenario"], vehicle=p["vehicle"] or None)  # InputError: one line, exit 2
        if p["seed"] >= 0:
            scenario = scenario.with_seed(p["seed"])
        if not p["publish_tire_forces"]:
            scenario = scenario.without_sensor("tire_forces")
        self.scenario = scenario
        self.realtime_factor = float(p["realtime_factor"])
        self.controls_timeout = float(p["controls_timeout"])
        self.from_topic = p["controls_source"] == "topic"

        self._topic = {SENSOR_TOPICS[k]: p[f"topics.{k}"] for k in SENSOR_TOPICS}
        self._pubs: dict[str, Any] = {}
        for key, canonical in SENSOR_TOPICS.items():
            if key == "clock" and not p["publish_clock"]:
                continue
            if key == "controls" and self.from_topic:
                continue  # we subscribe to it instead
            if not scenario.sensors.get(key) or not scenario.sensors[key].enabled:
                continue
            msg_type = type(conv.to_msg(_EXAMPLES[key]))
            qos = SENSOR_QOS if key != "clock" else QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
            self._pubs[canonical] = self.create_publisher(msg_type, self._topic[canonical], qos)
        from diagnostic_msgs.msg import DiagnosticArray

        self._diag_pub = self.create_publisher(DiagnosticArray, "/diagnostics", 10)
        self._last_controls: tuple[float, tuple[float, float, float]] | None = None
        self._controls_lock = threading.Lock()
        self._stale = False
        if self.from_topic:
            from sensor_msgs.msg import Joy

            self.create_subscription(Joy, self._topic["/vehicle/controls"], self._on_controls,
                                     qos_profile_sensor_data)

        self.state = "waiting"
        self.message = "waiting to start"
        self.start_warning = ""
        self._run: ScenarioRun | None = None
        self._wall_start: float | None = None
        self._rate_mark = (time.monotonic(), 0.0)
        self._achieved = 0.0
        self._stop = threading.Event()
        self._worker = threading.Thread(target=self._work, name="vehicle_simulator", daemon=True)
        steady = Clock(clock_type=ClockType.STEADY_TIME)
        self.create_timer(float(p["diagnostics_period"]), self._publish_diagnostics, clock=steady)
        self._worker.start()

    # -- parameters / inputs -------------------------------------------------------------------------------
    def _post_set(self, params: list) -> None:
        """Post-set (validated on set): the pace and the controls timeout change while the scenario runs."""
        for p in params:
            if p.name == "realtime_factor":
                self.realtime_factor = float(p.value)
            elif p.name == "controls_timeout":
                self.controls_timeout = float(p.value)

    def _on_controls(self, msg: Any) -> None:
        try:
            rec = conv.msg_to_controls(msg, self.frames)
        except ValueError as exc:
            self.get_logger().warning(f"ignoring controls message: {exc}", throttle_duration_sec=5.0)
            return
        run = self._run
        t_now = run.t if run is not None else 0.0
        with self._controls_lock:
            self._last_controls = (t_now, (rec.throttle, rec.brake, rec.steering))

    def _controls_at(self, t: float) -> tuple[float, float, float] | None:
        with self._controls_lock:
            last = self._last_controls
        if last is None:
            self._stale = True
            return None
        t_rx, (th, br, st) = last
        self._stale = t - t_rx > self.controls_timeout
        return (0.0, 0.0, st) if self._stale else (th, br, st)

    # -- worker ----------------------------------------------------------------------------------------------
    def _wait_for_subscribers(self) -> None:
        n = int(self.params["wait_for_subscribers"])
        if n <= 0:
            return
        timeout = float(self.params["wait_timeout"])
        deadline = time.monotonic() + timeout
        pubs = {t: self._pubs[t] for t in WAIT_TOPICS if t in self._pubs}
        self.message = f"waiting for {n} subscriber(s) on {', '.join(p.topic_name for p in pubs.values())}"
        while not self._stop.is_set() and time.monotonic() < deadline:
            if all(pub.get_subscription_count() >= n for pub in pubs.values()):
                return
            self._stop.wait(0.05)
        if not self._stop.is_set():
            counts = ", ".join(f"{p.topic_name} {p.get_subscription_count()}" for p in pubs.values())
            self.start_warning = f"started after waiting {timeout:g} s for {n} subscriber(s) ({counts})"
            self._log("warning", self.start_warning)

    def _log(self, level: str, text: str) -> None:
        """Log unless the context is shut down (the worker may finish after Ctrl-C closed it)."""
        if self.context.ok():
            getattr(self.get_logger(), level)(text)

    def _publish_record(self, topic: str, rec: Any) -> None:
        pub = self._pubs.get(topic)
        if pub is not None:
            pub.publish(conv.to_msg(rec, self.frames))

    def _on_start(self, run: ScenarioRun) -> None:
        self._run = run
        self._wall_start = time.monotonic()
        self._rate_mark = (self._wall_start, 0.0)
        self.state, self.message = "running", f"running scenario '{self.scenario.name}'"

    def _work(self) -> None:
        duration = float(self.params["duration"]) or None
        try:
            self.state, self.message = "loading", "building the model (the first run compiles it: up to a minute)"
            model = self._model_factory(self.scenario) if self._model_factory is not None else make_model(
                self.scenario)
            self.state, self.message = "waiting", "waiting to start"
            self._wait_for_subscribers()
            if self._stop.is_set():
                return
            summary = run_scenario(self.scenario, self._publish_record, lambda: self.realtime_factor, model=model,
                                   controls_source=self._controls_at if self.from_topic else None,
                                   stop=self._stop, duration=duration, on_start=self._on_start)
        except SimulationDiverged as exc:
            self.state, self.message = "diverged", str(exc)
            self._log("error", str(exc))
        except Exception as exc:  # keep the node alive and say why it stopped
            self.state, self.message = "failed", f"{exc.__class__.__name__}: {exc}"
            self._log("error", f"simulation failed: {self.message}")
        else:
            self.state = "stopped" if summary.stopped else "finished"
            self.message = (f"scenario '{summary.scenario}' {self.state} at t = {summary.t_end:.3f} s "
                            f"({summary.realtime_factor:.1f}x real time)")
            self._log("info", self.message)
        if self.context.ok():
            self._publish_diagnostics()

    # -- diagnostics -------------------------------------------------------------------------------------------
    def _publish_diagnostics(self) -> None:
        run = self._run
        t = run.t if run is not None else 0.0
        now = time.monotonic()
        if self.state == "running":
            w0, s0 = self._rate_mark
            if now - w0 > 1e-3:
                self._achieved = (t - s0) / (now - w0)
            self._rate_mark = (now, t)
        level = {"diverged": ERROR, "failed": ERROR}.get(self.state, OK)
        message = self.message
        if self.start_warning and level == OK:
            level, message = WARN, f"{message}; {self.start_warning}"
        if self.from_topic and self._stale and self.state == "running":
            level, message = WARN, "no fresh controls on the controls topic: throttle 0, brake 0"
        values = {"scenario": self.scenario.name, "state": self.state, "sim_time": float(t),
                  "realtime_factor_target": self.realtime_factor, "realtime_factor_achieved": float(self._achieved),
                  "steps": run.steps if run is not None else 0, "controls_source": self.params["controls_source"]}
        if run is not None:
            for topic, n in sorted(run.counts.items()):
                values[f"records{topic}"] = n
        status = diag_status(f"{NODE_NAME}: simulation", self.get_fully_qualified_name(), level, message, values)
        try:
            self._diag_pub.publish(diag_array(self, [status]))
        except Exception:  # the context may be shutting down
            pass

    def shutdown(self) -> None:
        """Stop stepping and join the worker (called by ``spin_node`` and by in-process users)."""
        self._stop.set()
        if self._worker.is_alive():
            self._worker.join(timeout=5.0)


def _examples() -> dict[str, Any]:
    import numpy as np

    from vehcal_ros.models.sensors import ClockTick
    from vehcal_ros.records import (
        BrakePressure,
        Controls,
        DriveTorque,
        GnssFix,
        GnssVelocity,
        GroundTruth,
        ImuSample,
        OdomSample,
        TireForce,
        WheelSpeeds,
    )

    z = np.zeros(4)
    return {"wheel_speeds": WheelSpeeds(0.0, z), "imu": ImuSample(0.0, 0.0, 0.0, 0.0, 0.0, 0.0),
            "tire_forces": TireForce(0.0, 0, 0.0, 0.0, 0.0), "odom": OdomSample(0.0, 0.0, 0.0, 0.0),
            "controls": Controls(0.0, 0.0, 0.0, 0.0), "ground_truth": GroundTruth(0.0, z, z, z, z),
            "clock": ClockTick(0.0), "gnss": GnssVelocity(0.0, 0.0, 0.0),
            "gnss_fix": GnssFix(0.0, 0.0, 0.0, 0.0), "drive_torque": DriveTorque(0.0, axle_front=0.0),
            "brake_pressure": BrakePressure(0.0, 0, 0.0)}


_EXAMPLES = _examples()


def build_node(model_factory: Any = None, context: Any = None, namespace: str | None = None,
               **overrides: Any) -> VehicleSimulator:
    """A ``VehicleSimulator`` with parameter overrides (``build_node(scenario="throttle_ramp")``); rclpy
    must be initialised (``context``: a non-default rclpy context). Call ``node.shutdown()`` before
    destroying it."""
    return VehicleSimulator(model_factory=model_factory, context=context, namespace=namespace, **overrides)


def main(args: list[str] | None = None) -> int:
    return spin_node(VehicleSimulator, args)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
