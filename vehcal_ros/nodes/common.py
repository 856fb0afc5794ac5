"""Helpers shared by the rclpy nodes: declared parameters with ranges, diagnostics, stamps, ``main``.

Only ``nodes/`` (and the CLI's ``run`` verb) import rclpy. Every node declares its parameters from a list of
:class:`ParamSpec` (description, range, read-only flag), validates them at start-up and in an
``add_on_set_parameters_callback`` (the rejection names the parameter and the allowed range), and reports its
health on ``/diagnostics`` with :func:`diag_status`.
"""

from __future__ import annotations

import math
import signal
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import rclpy
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rcl_interfaces.msg import (
    FloatingPointRange,
    IntegerRange,
    ParameterDescriptor,
    SetParametersResult,
)
from rclpy.executors import ExternalShutdownException
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
from rclpy.signals import SignalHandlerOptions

from vehcal_ros.diagnostic_levels import ERROR, OK, STALE, WARN  # noqa: F401 - the nodes' levels, one definition
from vehcal_ros.parameters import ParamSpec, plain


def descriptor(spec: ParamSpec) -> ParameterDescriptor:
    """The rclpy descriptor of ``spec``: description, read-only flag, integer or floating-point range, choices."""
    # dynamic typing: rclpy's own type check would refuse a wrong type before our callback, with a message
    # naming neither the parameter nor what it takes; validate() checks the type instead
    d = ParameterDescriptor(name=spec.name, description=spec.description, read_only=spec.read_only,
                            dynamic_typing=True)
    if spec.lo is not None and spec.hi is not None:
        if isinstance(spec.default, bool):
            pass
        elif isinstance(spec.default, int):
            d.integer_range = [IntegerRange(from_value=int(spec.lo), to_value=int(spec.hi), step=0)]
        elif isinstance(spec.default, float):
            d.floating_point_range = [FloatingPointRange(from_value=float(spec.lo),
                                                         to_value=float(spec.hi), step=0.0)]
    if spec.choices:
        d.additional_constraints = "one of: " + ", ".join(spec.choices)
    return d


def declare_params(node: Node, specs: Sequence[ParamSpec]) -> dict[str, Any]:
    """Declare ``specs`` on ``node`` and return their values; raise ValueError naming a bad start-up value.

    Range checks are done here (not only by rclpy's descriptor) so the message is ours and names the range.
    """
    values: dict[str, Any] = {}
    for spec in specs:
        try:
            param = node.declare_parameter(spec.name, spec.default, descriptor(spec),
                                           ignore_override=False)
        except Exception as exc:  # rclpy raises InvalidParameterValueException on a range violation
            raise ValueError(f"parameter '{spec.name}': {exc}") from exc
        value = plain(param.value)
        problem = spec.validate(value)
        if problem:
            raise ValueError(problem)
        values[spec.name] = value
    return values


def make_set_callback(specs: Iterable[ParamSpec],
                      check: Callable[[dict[str, Any]], None] | None = None
                      ) -> Callable[[list[Parameter]], SetParametersResult]:
    """Build an ``add_on_set_parameters_callback`` that only validates: each value against ``specs``, then the
    changed values together with ``check`` (which refuses an inconsistent combination by raising ValueError; the
    change is then refused with its message). It changes no state: the node applies an accepted change in its
    post-set callback (:meth:`~vehcal_ros.nodes.worker_node.WorkerNode._post_set`).

    Parameters not in ``specs`` (e.g. ``use_sim_time``, published ``model.*`` values) pass through.
    """
    by_name = {s.name: s for s in specs}

    def callback(params: list[Parameter]) -> SetParametersResult:
        changed: dict[str, Any] = {}
        for p in params:
            spec = by_name.get(p.name)
            if spec is None:
                continue
            value = plain(p.value)
            problem = spec.validate(value)
            if problem:
                return SetParametersResult(successful=False, reason=problem)
            changed[p.name] = value
        if check is not None and changed:
            try:
                check(changed)  # may refuse a combination (e.g. lower >= upper bound) with ValueError
            except ValueError as exc:
                return SetParametersResult(successful=False, reason=str(exc))
        return SetParametersResult(successful=True, reason="")

    return callback


def sensor_qos(depth: int = 2000) -> QoSProfile:
    """qos_profile_sensor_data (best effort, volatile) with a deep queue: 2000 messages ride out 5 s of a 100 Hz
    stream of tire forces (4 per step) or 2 s at 1 kHz while the executor thread waits (a fit's Python-level steps
    hold the interpreter; a loaded machine deschedules the node). Small messages: a few MB at most."""
    qos = QoSProfile(depth=depth)
    qos.reliability = qos_profile_sensor_data.reliability
    qos.durability = qos_profile_sensor_data.durability
    qos.history = qos_profile_sensor_data.history
    return qos


def latched_qos() -> QoSProfile:
    """Reliable, transient-local, depth 1: a late subscriber still gets the newest estimate or model."""
    return QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)


def diag_status(name: str, hardware_id: str, level: int | bytes, message: str,
                values: dict[str, Any] | None = None) -> DiagnosticStatus:
    """A DiagnosticStatus with key/values rendered as strings (floats with 6 significant digits)."""
    level_byte = level if isinstance(level, bytes) else bytes([int(level)])
    status = DiagnosticStatus(name=name, hardware_id=hardware_id, level=level_byte, message=message)
    for k, v in (values or {}).items():
        if isinstance(v, float):
            text = f"{v:.6g}"
        else:
            text = str(v)
        status.values.append(KeyValue(key=str(k), value=text))
    return status


def diag_array(node: Node, statuses: Sequence[DiagnosticStatus]) -> DiagnosticArray:
    msg = DiagnosticArray()
    msg.header.stamp = node.get_clock().now().to_msg()
    msg.status = list(statuses)
    return msg


def stamp_to_sec(stamp: Any) -> float:
    """builtin_interfaces/Time -> seconds (float)."""
    return float(stamp.sec) + 1e-9 * float(stamp.nanosec)


def sec_to_stamp(t: float) -> Any:
    from builtin_interfaces.msg import Time

    sec = math.floor(t)
    nanosec = int(round((t - sec) * 1e9))
    if nanosec >= 1_000_000_000:
        sec, nanosec = sec + 1, nanosec - 1_000_000_000
    return Time(sec=int(sec), nanosec=nanosec)


def make_executor(context: Any = None, kind: str = "events") -> Any:
    """The executor every node's ``main`` (and ``vehcal run``) spins on.

    ``events`` (default): rclpy's EventsExecutor (``rclpy.experimental``), which dispatches each message from
    the middleware's event queue instead of rebuilding a wait set per wake-up; measured in
    benchmarks/bench_ingestion.py it takes every message at 1 kHz per topic where the MultiThreadedExecutor lost
    most of them at 100 Hz (ros2/rclpy#1223, #1452). The slow fits run in each node's own worker thread, so the
    executor's callbacks never wait for them. ``multi``: the MultiThreadedExecutor (the inputs keep their own
    mutually exclusive group).
    """
    if kind == "events":
        from rclpy.experimental import EventsExecutor

        return EventsExecutor(context=context)
    if kind == "multi":
        from rclpy.executors import MultiThreadedExecutor

        return MultiThreadedExecutor(context=context)
    raise ValueError(f"executor must be 'events' or 'multi', got {kind!r}")


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
"""What ``ros2 launch`` and Ctrl-C send (SIGINT, then SIGTERM when a node is slow to go)."""


@contextmanager
def stop_on_signals() -> Iterator[threading.Event]:
    """SIGINT and SIGTERM set the returned event instead of raising ``KeyboardInterrupt``.

    Python runs a signal handler between two bytecodes of the main thread, which is also where the executor runs
    the subscription and timer callbacks. A handler that raised would interrupt a callback halfway (the executor
    logs it as a FATAL callback exception) and rclpy's own handler shuts the context down under a publish in
    flight; so rclpy is initialised without its handlers (``SignalHandlerOptions.NO``) and the spin loop polls
    this event between callbacks. The previous handlers come back on exit. Outside the main thread (where Python
    cannot install a handler) the event is only set by the caller.
    """
    stop = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return
    previous = {sig: signal.signal(sig, lambda _sig, _frame: stop.set()) for sig in STOP_SIGNALS}
    try:
        yield stop
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def spin_node(node_factory: Callable[[], Node], args: Sequence[str] | None = None) -> int:
    """The few lines of every node's ``main``: init, spin on the EventsExecutor, clean shutdown.

    Shutdown order (SIGINT or SIGTERM, see :func:`stop_on_signals`): the spin loop ends between two callbacks,
    the node cancels a fit in flight and joins its worker thread (nothing is published once it is closing), then
    the executor, the node and the context are destroyed.
    """
    node = None
    executor = None
    with stop_on_signals() as stop:
        rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)
        try:
            node = node_factory()
            executor = make_executor(node.context)
            executor.add_node(node)
            while rclpy.ok(context=node.context) and not stop.is_set():
                # spin_once in a loop: this rclpy's EventsExecutor.spin() neither fires timers nor returns on
                # shutdown; the 0.1 s timeout bounds the reaction to a signal
                executor.spin_once(timeout_sec=0.1)
        except ExternalShutdownException:
            pass
        except ValueError as exc:  # bad start-up parameter: one clear line, non-zero exit
            print(f"error: {exc}")
            return 2
        finally:
            if node is not None:
                shutdown = getattr(node, "shutdown", None)
                if callable(shutdown):
                    shutdown()
            if executor is not None:
                executor.shutdown(timeout_sec=5.0)
            if node is not None:
                node.destroy_node()
            if rclpy.ok():
                rclpy.shutdown()
    return 0
