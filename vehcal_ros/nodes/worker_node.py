"""The part ``grip_estimator`` and ``model_calibrator`` share: inputs fed under a lock, one worker thread for
the slow fits, estimation cycles and diagnostics on the ROS clock, and the input-health figures.

Scheduling. A cycle is due every ``period`` seconds of the node's ROS clock (sim time under
``use_sim_time``); so are the diagnostics and any work a node adds (:meth:`WorkerNode._add_periodic`, e.g. the
grip belief). Due-ness is checked by a ROS timer *and* on every incoming message: under sim time the
timers of rclpy's ``EventsExecutor`` can fire tens of seconds late and then in bursts (its timers manager does
not follow the /clock topic; ros2/rclcpp#2457), and a live estimator must not depend on that. A check costs one
clock read and a comparison. A clock that goes back (simulation restart, bag loop) restarts the period.
A cycle hands its snapshot to the single worker thread; while a fit runs, further due cycles are skipped and
counted, never queued.

Diagnostics. Every ``diagnostics_period`` the node publishes ``<node>: inputs`` (per-topic rates, the stamp
accounting of the input guard, the scheduling counts, then the pipeline's ``inputs_report``), the statuses of the
pipeline's ``reports`` (``<node>: <name>``) and ``<node>: cpu``. The pipelines build their statuses as plain data
(:class:`~vehcal_ros.diagnostic_levels.HealthReport`); the node converts them to ``diagnostic_msgs``.

CPU budget (``cpu_budget``, percent of one core; 0 = off). The node measures its process's CPU share (rolling
10 s and 60 s means, all threads of the process: :mod:`vehcal_ros.nodes.cpu_budget`) and reports it on the
``<node>: cpu`` status of /diagnostics, WARN while the 10 s share exceeds the budget. Over the budget, or after
an overrun, the node sheds fit cycles first (postponed, the period stretched up to 8 times and kept shorter than
the node's data window), never ingestion:
every message is still converted, checked and buffered. Only the live node does this; bag replay runs every
cycle on its data time (a starvation-free live run).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from diagnostic_msgs.msg import DiagnosticArray
from nav_msgs.msg import Odometry
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.clock import Clock, ClockType
from rclpy.node import Node
from rclpy.qos import QoSProfile
from sensor_msgs.msg import FluidPressure, Imu, JointState, Joy
from std_srvs.srv import SetBool, Trigger

from vehcal_ros.diagnostic_levels import HealthReport
from vehcal_ros.estimation.sensing.input_guard import InputGuard
from vehcal_ros.nodes import conversions
from vehcal_ros.nodes.common import ERROR, OK, WARN, diag_array, diag_status, sensor_qos
from vehcal_ros.nodes.cpu_budget import PRESSURE_WINDOW, CpuMeter, FitShedder, max_stretch_for
from vehcal_ros.nodes.parameters import CPU_BUDGET
from vehcal_ros.parameters import plain


class Periodic:
    """Due every ``period`` s of a clock that may jump (a jump back restarts the period)."""

    def __init__(self, period: float, now: float) -> None:
        self.period = float(period)
        self.last = float(now)

    def due(self, now: float) -> bool:
        if now < self.last:            # the clock went back: start over from here
            self.last = now
            return False
        if now - self.last >= self.period * (1.0 - 1e-9):
            self.last = now
            return True
        return False


class WorkerNode(Node):
    """Base of the estimator nodes (see the module docstring). Subclasses set ``pipeline`` (add / reject,
    snapshot / fit / commit, reconfigure, cycle_failed and the health reports), :attr:`diagnostics_prefix` and
    ``values`` (their parameters), implement :meth:`_publish` and :meth:`_new_pipeline`, and feed records with
    :meth:`_feed`."""

    outputs: frozenset[str] = frozenset()
    """Parameters the node writes itself (its published results): never applied by :meth:`_post_set`."""

    diagnostics_prefix: str = ""
    """The node's name at the head of its ``/diagnostics`` status names (``<prefix>: inputs``)."""

    reset_message: str = "buffers and estimates cleared; estimation starts over"
    """The answer of a successful ``~/reset``."""

    def __init__(self, node_name: str, *, worker_name: str, **kwargs: Any) -> None:
        super().__init__(node_name, **kwargs)
        # ROS time without /clock is the system time (rcl's fallback, CLOCK_REALTIME): _now() then reads it directly
        self._sim_time = bool(self.get_parameter("use_sim_time").value)
        self.add_post_set_parameters_callback(self._post_set)
        self._lock = threading.Lock()           # guards the pipeline (inputs, snapshots, commits)
        self._tick_lock = threading.Lock()      # one scheduler check at a time
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix=worker_name)
        self._future: Future | None = None
        self.skipped_cycles = 0
        self._last_arrival: dict[str, float] = {}
        self._count_at_diag: dict[str, int] = {}
        self._diag_time = self._now()
        self._cycle_clock: Periodic | None = None
        self._periodic: list[tuple[Periodic, Callable[[], None]]] = []   # further work on the ROS clock (_tick)
        self._diag_clock: Periodic | None = None
        self.inputs_group = MutuallyExclusiveCallbackGroup()
        self.guard = InputGuard()               # subclasses set its jump threshold from their parameters
        self._lost_at_diag: dict[str, int] = {}
        self._closing = False
        self.enabled = True                     # ~/enable: False pauses inputs and cycles, state kept
        self.paused_messages = 0                # messages ignored while disabled
        self._diag_wall = time.monotonic()      # wall time of the last /diagnostics (fallback timer)
        self.fed_messages = 0                   # messages handed to the pipeline (the nodes' _feed)
        self._fed_at_cycle = 0                  # ... when the last cycle ran (a stopped clock: no cycle without news)
        self._ros_at_fallback = float("nan")    # ROS time at the last fallback check (a stopped clock repeats it)
        self._ros_moved_wall = time.monotonic() # wall time when a fallback check last saw the ROS clock move
        self.services_group = MutuallyExclusiveCallbackGroup()
        self.cpu = CpuMeter()                   # the process's CPU share (nodes.cpu_budget)
        self.shedder = FitShedder()             # budget set from the parameter in _start_schedule
        self._diag_pub = self.create_publisher(DiagnosticArray, "/diagnostics", 10)

    # ------------------------------------------------------------ scheduling
    def _start_schedule(self, cycle_period: float) -> None:
        """Cycle (every ``cycle_period`` s) and diagnostics (``diagnostics_period``) clocks, checked by ROS timers
        and by every message (module docstring). ``clock_stall_timeout`` (s of wall time; 0 = 2 diagnostics
        periods): a ROS clock standing still this long means the data ended (the end of a simulated scenario or a
        bag). ``window`` (s): how long the node's buffers keep a sample; a shed cycle period stays shorter
        (:func:`~vehcal_ros.nodes.cpu_budget.max_stretch_for`)."""
        diagnostics_period, stall_timeout = self.values["diagnostics_period"], self.values["clock_stall_timeout"]
        data_window = self.values["window"]
        now = self._now()
        self.shedder.budget = float(self.values["cpu_budget"])
        self.shedder.max_stretch = max_stretch_for(data_window, cycle_period)
        self._cycle_clock = Periodic(cycle_period, now)
        self._diag_clock = Periodic(diagnostics_period, now)
        timers = MutuallyExclusiveCallbackGroup()
        self.create_timer(min(cycle_period, diagnostics_period), lambda: self._on_timer(self._tick),
                          callback_group=timers)
        # /diagnostics keep flowing when the ROS clock stops (the end of a simulated scenario or a bag): a
        # steady-clock timer publishes them when the ROS-clock schedule has not for 2 periods of wall time, and
        # runs one cycle on data that arrived after the last one (the clock stopped before it was due)
        stall = stall_timeout if stall_timeout > 0.0 else 2.0 * diagnostics_period
        self.create_timer(diagnostics_period,
                          lambda: self._on_timer(lambda: self._diagnostics_fallback(2.0 * diagnostics_period, stall)),
                          callback_group=timers, clock=Clock(clock_type=ClockType.STEADY_TIME))

    def _add_periodic(self, period: float, work: Callable[[], None]) -> None:
        """Run ``work`` every ``period`` s of the ROS clock, checked with the cycle (on the timer and on every
        message: a clock that jumps back restarts the period, and a late timer does not delay it)."""
        self._periodic.append((Periodic(period, self._now()), work))

    def _check_params(self, changed: dict[str, Any]) -> None:
        """On-set (:func:`~vehcal_ros.nodes.common.make_set_callback`): refuse (ValueError) a change whose
        combination with the other values is inconsistent (:meth:`_check_combination`). The :attr:`outputs` are
        written by the node after start-up: setting them checks nothing."""
        inputs = {k: v for k, v in changed.items() if k not in self.outputs}
        if inputs:
            self._check_combination({**self.values, **inputs})

    def _check_combination(self, values: dict[str, Any]) -> None:
        """Raise ValueError naming the problem when ``values`` (all the node's parameters) do not go together."""

    def _post_set(self, params: list) -> None:
        """Post-set: the values were validated by the node's on-set callback (:func:`~vehcal_ros.nodes.common.
        make_set_callback`) and are applied here. The node's own parameters (:attr:`outputs` excepted) update
        :attr:`values`, then the subclass reconfigures its pipeline from them (:meth:`_reconfigure`); a new
        ``cpu_budget`` takes effect at the next due cycle; ``use_sim_time`` switches :meth:`_now` between the ROS
        clock and the system time."""
        changed = {p.name: plain(p.value) for p in params
                   if p.name in getattr(self, "values", {}) and p.name not in self.outputs}
        for p in params:
            if p.name == CPU_BUDGET.name:
                self.shedder.budget = float(p.value)
            elif p.name == "use_sim_time":
                self._sim_time = bool(p.value)
        if changed:
            self.values.update(changed)
            self._reconfigure(changed)

    def _reconfigure(self, changed: dict[str, Any]) -> None:
        """Apply accepted parameter changes (``changed``, already in :attr:`values`) to the pipeline."""
        with self._lock:
            self.pipeline.reconfigure(self.values)

    def _on_timer(self, work: Callable[[], None]) -> None:
        """A timer's work, unless the node is going down: an external shutdown of the context can come while the
        executor still runs a timer, whose publish then fails; that is the end of the node, not an error."""
        if self._closing or not self.context.ok():
            return
        try:
            work()
        except Exception:
            if self._closing or not self.context.ok():
                return
            raise

    def _tick(self, now: float | None = None) -> None:
        if self._cycle_clock is None or self._closing or not self._tick_lock.acquire(blocking=False):
            return
        try:
            now = self._now() if now is None else now
            if self._cycle_clock.due(now):
                self._on_cycle()
            if self._diag_clock.due(now):
                self._publish_diagnostics()
                self._diag_wall = time.monotonic()
            for clock, work in self._periodic:
                if clock.due(now):
                    work()
        finally:
            self._tick_lock.release()

    def _diagnostics_fallback(self, after: float, stall: float) -> None:
        """/diagnostics when the ROS-clock schedule has not published them for ``after`` s of wall time; and,
        once the ROS clock has stood still for ``stall`` s of wall time, one cycle on the data fed since the last."""
        if time.monotonic() - self._diag_wall < after or not self._tick_lock.acquire(blocking=False):
            return
        try:
            now, wall = self._now(), time.monotonic()
            if now != self._ros_at_fallback:
                self._ros_at_fallback, self._ros_moved_wall = now, wall
            stopped = wall - self._ros_moved_wall >= stall
            if stopped and self.fed_messages != self._fed_at_cycle and not self.busy:
                self._on_cycle()
            self._publish_diagnostics()
            self._diag_wall = time.monotonic()
        finally:
            self._tick_lock.release()

    def _now(self) -> float:
        """The node's ROS time, s. Without ``use_sim_time`` that is the system time, read without building an rclpy
        Time (called for every message)."""
        if not self._sim_time:
            return time.time_ns() * 1e-9
        return self.get_clock().now().nanoseconds * 1e-9

    def ros_time(self) -> float:
        """The node's ROS time, s, as its schedule and input arrivals read it: sim time under ``use_sim_time``,
        else the system time (seconds since the epoch)."""
        return self._now()

    @property
    def last_cycle_time(self) -> float:
        """ROS time, s, at which the newest estimation cycle came due: the schedule's start until the first one
        does, the time the schedule restarted from after the clock went back, NaN before the schedule starts. A
        due cycle may still be skipped (a fit running) or shed (CPU budget): see ``skipped_cycles`` and
        ``shedder``."""
        return self._cycle_clock.last if self._cycle_clock is not None else float("nan")

    @property
    def busy(self) -> bool:
        """True while a fit runs in the worker thread."""
        return self._future is not None and not self._future.done()

    # ------------------------------------------------------------------ inputs
    def _inputs(self) -> tuple[Callable[[Any], None], Callable[[str, str], None]]:
        """(feed, reject) of the node's pipeline: where an accepted record goes, where a refused one is counted."""
        return self.pipeline.add, self.pipeline.reject

    def _feed(self, topic: str, convert: Callable[[Any, Any], Any], msg: Any) -> None:
        """One serialised message of ``topic``: counted and ignored while paused (~/enable false: nothing
        buffered, state kept), else :meth:`_convert_and_feed` into the pipeline."""
        if not self.enabled:
            self.paused_messages += 1
            return
        self.fed_messages += 1
        feed, reject = self._inputs()
        self._convert_and_feed(topic, convert, msg, feed, reject)

    def _on_wheels(self, data: bytes) -> None:
        self._feed("wheel_speeds", conversions.raw_to_wheel_speeds, data)

    def _on_imu(self, data: bytes) -> None:
        self._feed("imu", conversions.raw_to_imu, data)

    def _on_odom(self, data: bytes) -> None:
        self._feed("odom", conversions.raw_to_odom, data)

    def _on_controls(self, data: bytes) -> None:
        self._feed("controls", conversions.raw_to_controls, data)

    def _on_drive_torque(self, data: bytes) -> None:
        self._feed("drive_torque", conversions.raw_to_drive_torque, data)

    def _on_brake_pressure(self, data: bytes) -> None:
        self._feed("brake_pressure", conversions.raw_to_brake_pressure, data)

    def _subscribe_sensors(self, extra: Iterable[tuple[type, str, Callable[[bytes], None], QoSProfile]] = ()) -> None:
        """Subscribe to the vehicle topics both estimators read (``wheel_speeds_topic``, ``imu_topic``,
        ``odom_topic``, ``controls_topic``), to the node's ``extra`` ones ((message type, topic, callback, QoS) each)
        and, for a pipeline that takes the wheel torque from CAN signals (the description's ``torque_source`` engine
        or axle), to the drive-torque and brake-pressure topics (the pressure's queue holds two messages per time
        step, one per axle): as serialised bytes (``raw=True``: nodes/raw_messages.py reads them without rclpy's
        message objects) in the inputs group, read with the input conventions of the parameters (wheel names, Joy
        axes)."""
        v, qos = self.values, sensor_qos()
        self._frames = conversions.frames(v["wheel_names"], v["controls_axes"])
        topics = [(JointState, v["wheel_speeds_topic"], self._on_wheels, qos), (Imu, v["imu_topic"], self._on_imu, qos),
                  (Odometry, v["odom_topic"], self._on_odom, qos), (Joy, v["controls_topic"], self._on_controls, qos),
                  *extra]
        if self.pipeline.can is not None:
            topics += [(JointState, v["drive_torque_topic"], self._on_drive_torque, qos),
                       (FluidPressure, v["brake_pressure_topic"], self._on_brake_pressure, sensor_qos(2 * 2000))]
        for cls, topic, callback, depth in topics:
            self.create_subscription(cls, topic, callback, depth, callback_group=self.inputs_group, raw=True)

    def _convert_and_feed(self, topic: str, convert: Callable[[Any, Any], Any], msg: Any,
                          feed: Callable[[Any], None], reject: Callable[[str, str], None]) -> None:
        """msg -> record -> :class:`InputGuard` -> ``feed(record)`` under the lock. A message that cannot be
        converted (unknown wheel name, JointState shorter than its names, Joy without the configured axes) or that
        the guard refuses (non-finite, implausible, bad stamp) goes to ``reject(topic, reason)``, never raised."""
        now = self._now()
        self._last_arrival[topic] = now
        try:
            record = convert(msg, self._frames)
        except (ValueError, IndexError, KeyError, TypeError):
            with self._lock:
                reject(topic, "unknown_wheel" if topic == "tire_forces" else f"malformed_{topic}")
        else:
            with self._lock:
                reason = self.guard.check(topic, record)
                if reason is None:
                    feed(record)
                else:
                    reject(topic, reason)
        self._tick(now)

    # ------------------------------------------------------------------- cycle
    def _on_cycle(self) -> None:
        if self._closing or not self.enabled:
            return
        if self.busy:
            self.skipped_cycles += 1
            self.shedder.overran()
            return
        if not self.shedder.due(self.cpu.share(PRESSURE_WINDOW) if self.shedder.enabled else float("nan")):
            return   # shed for CPU (counted): the data stay buffered for the next cycle that runs
        try:
            with self._lock:
                jobs = self._snapshot()
                self._fed_at_cycle = self.fed_messages
        except Exception as exc:  # never take the node down on odd data; say so on /diagnostics
            self.get_logger().error(f"snapshot failed: {exc!r}")
            with self._lock:
                self.pipeline.cycle_failed(None, f"snapshot failed: {exc!r}")
            return
        if jobs:
            try:
                self._future = self._worker.submit(self._run, jobs)
            except RuntimeError:   # shutting down (the worker refuses new work): the cycle is simply not run
                return

    def _run(self, jobs: list) -> None:
        try:
            self._fit_and_commit(jobs)
        except Exception as exc:  # a worker must never take the node down; report and keep the last result
            if self._closing or not self.context.ok():
                return   # the node is going down under a fit: nothing to report to
            self.get_logger().error(f"cycle failed: {exc!r}")
            with self._lock:
                self.pipeline.cycle_failed(jobs, f"cycle failed: {exc!r}")

    def _snapshot(self) -> list:
        """Copies of the data worth a fit (called under the lock): the pipeline's ``snapshot()``."""
        return self.pipeline.snapshot()

    def _fit_and_commit(self, jobs: list) -> None:
        """Fit (worker thread, without the lock), commit under the lock, then :meth:`_publish` what changed.
        A ``~/reset`` during the fit replaced the pipeline: the outcome is dropped. A fit that ends after
        ``~/enable false`` is committed (it used data from before the pause) but not published: a disabled node
        publishes nothing."""
        pipeline = self.pipeline
        outcomes = pipeline.fit(jobs)
        with self._lock:
            if pipeline is not self.pipeline:
                return
            updated = pipeline.commit(outcomes)
        if updated and self.enabled and not self._closing and self.context.ok():
            self._publish(updated)

    def _publish(self, updated: list) -> None:
        """Publish the results the last commit changed (scopes or stages)."""
        raise NotImplementedError

    def _publish_diagnostics(self) -> None:
        """One ``/diagnostics`` array (module docstring): the inputs status (:meth:`_inputs_status`), the
        pipeline's statuses (:meth:`_reports`) and the CPU status (:meth:`_cpu_status`)."""
        now = self._now()
        hw = self.get_fully_qualified_name()
        prefix = self.diagnostics_prefix
        with self._lock:
            statuses = [self._inputs_status(prefix, hw, now)]
            statuses += [diag_status(f"{prefix}: {name}", hw, *report) for name, report in self._reports().items()]
        statuses.append(self._cpu_status(prefix, hw))
        self._diag_pub.publish(diag_array(self, statuses))

    def _reports(self) -> dict[str, HealthReport]:
        """The pipeline's statuses after the inputs status, by name (called under the lock)."""
        return self.pipeline.reports()

    # ---------------------------------------------------------------- services
    def _create_services(self, triggers: Mapping[str, Callable[[Any, Any], Any]] | None = None) -> None:
        """``~/reset`` (std_srvs/Trigger) and ``~/enable`` (std_srvs/SetBool), shared by both estimators, and the
        node's own std_srvs/Trigger services (``triggers``: name -> handler)."""
        self.create_service(Trigger, "~/reset", self._on_reset, callback_group=self.services_group)
        self.create_service(SetBool, "~/enable", self._on_enable, callback_group=self.services_group)
        for name, handler in (triggers or {}).items():
            self.create_service(Trigger, name, handler, callback_group=self.services_group)

    def _on_reset(self, request: Any, response: Any) -> Any:
        with self._lock:
            old = self.pipeline
            self.pipeline = self._new_pipeline()
            self.skipped_cycles = 0
        old.cancel.set()   # a fit running on the old pipeline would be dropped anyway: stop it
        response.success, response.message = True, self.reset_message
        self.get_logger().info(f"reset: {response.message}")
        self._publish_diagnostics()
        return response

    def _on_enable(self, request: Any, response: Any) -> Any:
        self.enabled = bool(request.data)
        response.success = True
        response.message = ("estimation enabled" if self.enabled else
                            "estimation paused: inputs ignored, no fits, buffers and estimates kept")
        self.get_logger().info(response.message)
        self._publish_diagnostics()
        return response

    def _new_pipeline(self) -> Any:
        """A fresh pipeline from the current parameters (``~/reset``; called under the lock)."""
        raise NotImplementedError

    # ------------------------------------------------------------- diagnostics
    def _inputs_status(self, prefix: str, hw: str, now: float) -> Any:
        """The ``<prefix>: inputs`` status (called under the lock): per-topic rates (Hz), the stamp accounting
        (:meth:`_input_health`), ``skipped_cycles``, ``busy`` and ``enabled``, then the pipeline's own values
        (``inputs_report``). Its level and message are the pipeline's unless the node is paused or a watched topic
        is silent or losing data (:meth:`_input_status`)."""
        pipeline = self.pipeline
        rates, stale, accounting, losing = self._input_health(pipeline.received, pipeline.watched_inputs, now)
        report = pipeline.inputs_report()
        values = {f"rate_{topic}_hz": rate for topic, rate in rates.items()}
        values.update(accounting)
        values.update({"skipped_cycles": self.skipped_cycles, "busy": self.busy, "enabled": self.enabled})
        values.update(report.values)
        level, message = self._input_status(stale, losing) or (report.level, report.message)
        return diag_status(f"{prefix}: inputs", hw, level, message, values)

    def _cpu_status(self, node_name: str, hw: str) -> Any:
        """The ``<node>: cpu`` status: the process's CPU share (percent of one core, rolling means over 10 s and
        60 s), the budget, the fit cycles shed and the effective cycle period; WARN while the 10 s share exceeds the
        budget."""
        shares = self.cpu.shares()
        sh = self.shedder
        share = shares[PRESSURE_WINDOW]
        period = self._cycle_clock.period if self._cycle_clock is not None else float("nan")
        values = {f"cpu_share_{w:g}s": v for w, v in shares.items()}
        values.update({"cpu_budget": sh.budget, "shed_cycles": sh.shed, "cycle_stretch": sh.stretch,
                       "cycle_period_s": sh.stretch * period, "cpu_threads": "process (all threads)"})
        text = f"{share:.1f} % of one core over {PRESSURE_WINDOW:g} s"
        if sh.over(share):
            level = WARN
            message = (f"over budget: {text} > cpu_budget {sh.budget:g} %; fit cycles shed (period {sh.stretch} x "
                       f"{period:g} s, {sh.shed} shed), inputs never shed")
        elif sh.stretch > 1:
            level, message = OK, f"{text}; fit period still stretched {sh.stretch} x ({sh.shed} shed)"
        else:
            level = OK
            message = text + (f" (budget {sh.budget:g} %)" if sh.enabled else " (no budget)")
        return diag_status(f"{node_name}: cpu", hw, level, message, values)

    def _input_status(self, stale: list[str], losing: list[str]) -> tuple[int, str] | None:
        """The inputs' status when it overrides the node's own checks: paused (OK), or silent / losing topics
        (WARN); None when the inputs are healthy."""
        if not self.enabled:
            return OK, f"paused (~/enable false): {self.paused_messages} messages ignored"
        problems = ([f"no data on: {', '.join(stale)}"] if stale else []) + (
            [f"data lost on: {', '.join(losing)}"] if losing else [])
        return (WARN, "; ".join(problems)) if problems else None

    def _input_health(self, received: Mapping[str, int], watched: tuple[str, ...], now: float
                      ) -> tuple[dict[str, float], list[str], dict[str, Any], list[str]]:
        """Per-topic input rates (Hz since the last diagnostics), the watched topics silent for longer than
        ``stale_timeout``, the stamp accounting as diagnostic values (received, expected from the stamps, lost,
        interruptions per topic; confirmed clock jumps) and the topics that lost data since the last diagnostics,
        with how much (call under the lock)."""
        period = max(now - self._diag_time, 1e-9)
        self._diag_time = now
        rates = {}
        for topic, count in received.items():
            rates[topic] = (count - self._count_at_diag.get(topic, 0)) / period
            self._count_at_diag[topic] = count
        stale = [t for t in watched if now - self._last_arrival.get(t, -1e18) > self.values["stale_timeout"]]
        values: dict[str, Any] = {f"received_{t}": n for t, n in received.items()}
        losing = []
        for topic, row in self.guard.totals().items():
            values[f"expected_{topic}"] = row["expected"]
            values[f"lost_{topic}"] = row["lost"]
            values[f"interruptions_{topic}"] = row["interruptions"]
            new = row["lost"] - self._lost_at_diag.get(topic, 0)
            self._lost_at_diag[topic] = row["lost"]
            if new > 0:
                losing.append(f"{topic} ({new} messages missing from the stamps)")
        values["clock_jumps"] = self.guard.clock_jumps
        return rates, stale, values, losing

    def shutdown(self) -> None:
        """Stop scheduling, cancel a fit in flight (the pipeline's ``cancel`` event: an SMC fit stops at its next
        round and yields nothing, a grip fit stops extending its chains; nothing is published), join the worker.
        Called before the executor and the context go down (nodes.common.spin_node)."""
        self._closing = True
        self.pipeline.cancel.set()
        self._worker.shutdown(wait=True, cancel_futures=True)


__all__ = ["Periodic", "WorkerNode", "ERROR"]
