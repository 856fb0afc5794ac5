"""``vehcal run estimate``: the nodes of launch/estimate.launch.py in one process (the pip environment's launch).

    vehcal run estimate                                  # grip_estimator + model_calibrator, on a vehicle
    vehcal run estimate --sim daily_driving              # ... plus vehicle_simulator, on sim time
    vehcal run estimate --params my.yaml --duration 60 --namespace truck7

Parameters come from the same params YAML as the launch file (config/estimate.yaml by default), validated first:
an unknown key or a wrong type is one clear line and exit status 2 before any node starts. The nodes share an
EventsExecutor (as each node's main); Ctrl-C (or --duration, or the end of the simulated scenario) shuts them
down cleanly.
"""

from __future__ import annotations

import argparse
import importlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from vehcal_ros.errors import InputError

#: node name -> (module, class or factory); each module also exports PARAMS (its ParamSpec list)
NODES = {
    "grip_estimator": ("vehcal_ros.nodes.grip_estimator", "GripEstimatorNode"),
    "model_calibrator": ("vehcal_ros.nodes.model_calibrator", "ModelCalibratorNode"),
    "vehicle_simulator": ("vehcal_ros.nodes.vehicle_simulator", "VehicleSimulator"),
}


def default_params_file() -> Path:
    """The package's config/estimate.yaml (ament index, source tree or sys.prefix: io/resources.py)."""
    from vehcal_ros.replay.params import default_params_file as find

    return find()


def node_specs() -> dict[str, Any]:
    """Every node's declared parameters (imports the node modules, hence rclpy)."""
    return {name: importlib.import_module(module).PARAMS for name, (module, _) in NODES.items()}


def load_parameters(path: str | Path | None) -> dict[str, dict]:
    """Validated ``{node: {param: value}}`` (InputError names what is wrong): the package's
    config/estimate.yaml, then the given file's ``/**`` wildcard, then its node sections. ``vehcal run``,
    ``vehcal replay`` and ``vehcal demo`` resolve a partial params file the same way (``ros2 launch`` with
    ``params_file:=`` uses the given file alone over the declared defaults, as ROS does)."""
    from vehcal_ros.nodes.params_file import validate_params_file

    specs = node_specs()
    base = validate_params_file(default_params_file(), specs)
    if path is None or Path(path).resolve() == default_params_file().resolve():
        return base
    given = validate_params_file(path, specs)
    wildcard = given.get("/**", {})
    out = {}
    for node, node_specs_ in specs.items():
        names = {s.name for s in node_specs_}
        out[node] = {**base.get(node, {}), **{k: v for k, v in wildcard.items() if k in names},
                     **given.get(node, {})}
    return out


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="run the estimator nodes in one process",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("target", choices=["estimate"], help="what to run (the nodes of estimate.launch.py)")
    p.add_argument("--sim", metavar="SCENARIO", nargs="?", const="daily_driving", default=None,
                   help="also run vehicle_simulator with this scenario (name or YAML; default daily_driving); "
                        "the estimators then follow its /clock")
    p.add_argument("--params", metavar="FILE", default=None, help="params YAML (default: config/estimate.yaml)")
    p.add_argument("--duration", type=float, default=None, metavar="S",
                   help="stop after S seconds (simulated time with --sim, wall time otherwise)")
    p.add_argument("--realtime-factor", type=float, default=None, metavar="F",
                   help="simulator speed over real time (0 = as fast as possible)")
    p.add_argument("--namespace", default="", help="namespace of every node")
    from vehcal_ros.commands.vehicle_option import add_vehicle_argument
    add_vehicle_argument(p)
    p.add_argument("--executor", choices=("multi", "events"), default="events",
                   help="rclpy executor: events = the EventsExecutor (default; what every node's main uses: "
                        "benchmarks/bench_ingestion.py), multi = MultiThreadedExecutor")
    p.set_defaults(func=run)


def build_nodes(params: dict[str, dict], sim: str | None, context: Any, namespace: str = "",
                realtime_factor: float | None = None, duration: float | None = None) -> list[Any]:
    """Construct the nodes with their parameters as overrides (wildcard ``/**`` entries first)."""
    from rclpy.parameter import Parameter

    def overrides(name: str, extra: dict[str, Any]) -> list[Parameter]:
        values = {**params.get("/**", {}), **params.get(name, {}), **extra}
        known = {s.name for s in node_specs()[name]} | {"use_sim_time"}
        return [Parameter(k, value=v) for k, v in values.items() if k in known]

    nodes = []
    sim_time = {"use_sim_time": True} if sim else {}
    for name in ("grip_estimator", "model_calibrator"):
        module, cls = NODES[name]
        node_cls = getattr(importlib.import_module(module), cls)
        nodes.append(node_cls(context=context, namespace=namespace, parameter_overrides=overrides(name, sim_time)))
    if sim:
        from vehcal_ros.nodes.vehicle_simulator import build_node

        extra: dict[str, Any] = {"scenario": sim, "publish_clock": True}
        if realtime_factor is not None:
            extra["realtime_factor"] = float(realtime_factor)
        if duration is not None:
            extra["duration"] = float(duration)
        values = {p.name: p.value for p in overrides("vehicle_simulator", extra)}
        nodes.append(build_node(context=context, namespace=namespace or None, **values))
    return nodes


def _finish_fits(executor: Any, nodes: list[Any], stopped: Callable[[], bool], timeout: float = 600.0) -> None:
    """Keep spinning until no estimator has a fit in its worker thread (the last cycles' results get out), or a
    stop signal."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not stopped() and any(getattr(n, "busy", False) for n in nodes):
        executor.spin_once(timeout_sec=0.1)
    for _ in range(20):  # let the final publications go out
        executor.spin_once(timeout_sec=0.05)


def make_executor(kind: str, context: Any) -> Any:
    """The rclpy executor of ``--executor`` (fits run in the nodes' worker threads either way)."""
    from vehcal_ros.nodes.common import make_executor as node_executor

    return node_executor(context, kind)


def _print_status(nodes: list[Any]) -> None:
    """One line per estimator scope/stage: what it has and why not (the /diagnostics messages)."""
    for node in nodes:
        pipeline = getattr(node, "pipeline", None)
        for key, st in (getattr(pipeline, "status", None) or {}).items():
            print(f"vehcal run: {node.get_name()} {key}: {st.message}", flush=True)


def run(args: argparse.Namespace) -> int:
    if args.duration is not None and not args.duration > 0:
        raise InputError(f"--duration must be > 0 s, got {args.duration}")
    if args.realtime_factor is not None and args.realtime_factor < 0:
        raise InputError(f"--realtime-factor must be >= 0, got {args.realtime_factor}")
    from vehcal_ros.commands.vehicle_option import apply_vehicle
    params = load_parameters(args.params)
    vehicle = getattr(args, "vehicle", None)
    if args.sim:
        from vehcal_ros.io.scenarios import simulated_description

        # without --vehicle, the estimators describe the simulated vehicle (when it has a shipped description);
        # a bad scenario is one line before anything starts
        vehicle = vehicle or simulated_description(args.sim, params.get("vehicle_simulator", {}).get("vehicle"))
    params = apply_vehicle(params, vehicle)

    import rclpy
    from rclpy.context import Context
    from rclpy.executors import ExternalShutdownException
    from rclpy.signals import SignalHandlerOptions

    from vehcal_ros.nodes.common import stop_on_signals

    with stop_on_signals() as stop:
        context = Context()
        rclpy.init(context=context, signal_handler_options=SignalHandlerOptions.NO)
        nodes: list[Any] = []
        try:
            try:
                nodes = build_nodes(params, args.sim, context, args.namespace, args.realtime_factor, args.duration)
            except ValueError as exc:  # a node refused a parameter value
                raise InputError(str(exc)) from None
            executor = make_executor(args.executor, context)
            for node in nodes:
                executor.add_node(node)
            try:
                _spin(executor, nodes, args, stop.is_set, simulator=nodes[-1] if args.sim else None)
            except ExternalShutdownException:
                pass
            finally:
                if stop.is_set():
                    print("vehcal run: interrupted, shutting down", flush=True)
                _print_status(nodes)
                executor.shutdown(timeout_sec=5.0)
        finally:
            for node in reversed(nodes):
                shutdown = getattr(node, "shutdown", None)
                if callable(shutdown):
                    shutdown()
                node.destroy_node()
            if context.ok():
                rclpy.shutdown(context=context)
    return 0


def _spin(executor: Any, nodes: list[Any], args: argparse.Namespace, stopped: Callable[[], bool],
          simulator: Any) -> None:
    """Spin until a stop signal, the simulated scenario's end (its fits finished) or ``--duration``."""
    clock_node = nodes[0]
    print(f"vehcal run: {', '.join(n.get_name() for n in nodes)} running"
          f"{' on sim time' if simulator is not None else ''}; Ctrl-C to stop", flush=True)
    t_start = time.monotonic()
    t_sim0: float | None = None
    while clock_node.context.ok() and not stopped():
        executor.spin_once(timeout_sec=0.1)
        if simulator is not None and simulator.state in ("finished", "stopped", "diverged", "failed"):
            print(f"vehcal run: simulator {simulator.state}: {simulator.message}", flush=True)
            _finish_fits(executor, nodes, stopped)
            return
        if args.duration is not None:
            if simulator is None:
                if time.monotonic() - t_start >= args.duration:
                    return
            else:
                now = clock_node.get_clock().now().nanoseconds * 1e-9
                t_sim0 = now if t_sim0 is None and now > 0 else t_sim0
                if t_sim0 is not None and now - t_sim0 >= args.duration:
                    return
