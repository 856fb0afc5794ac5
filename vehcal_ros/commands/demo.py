"""``vehcal demo``: the README's main job, end to end on the built-in simulator, through the live ROS graph.

1. One process runs ``grip_estimator`` and ``model_calibrator`` (on sim time) and, one after the other, a
   ``vehicle_simulator`` for each of the 8-DOF paper's calibration maneuvers (throttle ramp, steering ramp,
   coast-down) and the daily-driving scenario (dry -> wet -> snow), faster than real time over Fast DDS on
   loopback. Between scenarios sim time runs on for a few calibration periods so pending stages are fitted.
2. A probe node records what a consumer sees: the grip estimates, the model parameters, the ground truth and
   the estimators' /diagnostics.
3. The paper's held-out test maneuver (its Fig. 27) is driven by the simulator, and the 8-DOF model with the
   calibrated parameters and with the prior means is compared with it (its Table 9 RMSE).
4. It prints the summary (true vs estimated mu_max per road patch with the excitation reached there; the
   calibrated parameters with 94 % HDIs; the Table 9 RMSE) and writes ``summary.json`` and an HTML report.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from vehcal_ros.errors import EstimationError, InputError

CALIBRATION_SCENARIOS = ("throttle_ramp", "steering_ramp", "coast_down")
GRIP_SCENARIO = "daily_driving"


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="the main job end to end on the built-in simulator (about 3-5 minutes)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="vehcal_demo", help="output directory (summary.json, report/)")
    p.add_argument("--params", default=None, help="params YAML (default: config/estimate.yaml)")
    p.add_argument("--grip-scenario", default=GRIP_SCENARIO, help="scenario for the grip estimate")
    p.add_argument("--realtime-factor", type=float, default=1.75,
                   help="simulator speed over real time for the grip scenario (1.75 on 2 cores leaves the grip chains "
                        "a fit every ~8 s of drive; the calibration maneuvers run at >= 2)")
    p.add_argument("--seed", type=int, default=0)
    from vehcal_ros.commands.vehicle_option import add_vehicle_argument
    add_vehicle_argument(p)
    p.set_defaults(func=run)


# ------------------------------------------------------------------------------------------------- probe
class _Probe:
    """Subscribes to what an MPC or planner would consume, and keeps it (decimated where it is dense)."""

    def __init__(self, node: Any, scopes: list[str]) -> None:
        from diagnostic_msgs.msg import DiagnosticArray
        from geometry_msgs.msg import Vector3Stamped
        from rosgraph_msgs.msg import Clock

        from vehcal_ros.nodes import conversions
        from vehcal_ros.nodes.common import latched_qos

        self.node = node
        self.offset = 0.0                   # sim time restarts with each scenario: keep one demo time axis
        self.grip: dict[str, list[tuple[float, float, float, float]]] = {s: [] for s in scopes}
        self.truth: list[tuple[float, np.ndarray, np.ndarray]] = []
        self.excitation: dict[str, list[tuple[float, float]]] = {s: [] for s in scopes}
        self.model_msgs: list[Any] = []
        self._last_truth = -1e9
        self._conv = conversions
        self.sim_state = "starting"
        for s in scopes:
            node.create_subscription(Vector3Stamped, f"/vehcal/grip/{s}", lambda m, s=s: self._on_grip(s, m),
                                     latched_qos())
        node.create_subscription(DiagnosticArray, "/vehcal/model_parameters", self.model_msgs.append,
                                 latched_qos())
        node.create_subscription(DiagnosticArray, "/vehicle/ground_truth", self._on_truth, 50)
        node.create_subscription(DiagnosticArray, "/diagnostics", self._on_diag, 50)
        self.clock_pub = node.create_publisher(Clock, "/clock", 10)

    def _t(self, stamp: Any) -> float:
        return self.offset + stamp.sec + 1e-9 * stamp.nanosec

    def _on_grip(self, scope: str, m: Any) -> None:
        self.grip[scope].append((self._t(m.header.stamp), m.vector.x, m.vector.y, m.vector.z))

    def _on_truth(self, m: Any) -> None:
        t = self._t(m.header.stamp)
        if t - self._last_truth < 0.25:
            return
        rec = self._conv.msg_to_ground_truth(m)
        if rec is not None:
            self._last_truth = t
            self.truth.append((self.offset + rec.t, np.asarray(rec.mu_road), np.asarray(rec.mu_max)))

    def _on_diag(self, m: Any) -> None:
        for st in m.status:
            if st.name.startswith("vehicle_simulator"):
                kv = {k.key: k.value for k in st.values}
                self.sim_state = kv.get("state", self.sim_state)
                continue
            if not st.name.startswith("grip_estimator: "):
                continue
            scope = st.name.split(": ", 1)[1]
            if scope in self.excitation:
                kv = {k.key: k.value for k in st.values}
                try:
                    self.excitation[scope].append((self._t(m.header.stamp), float(kv.get("excitation", "nan"))))
                except ValueError:
                    pass

    def tick_clock(self, t: float) -> None:
        from rosgraph_msgs.msg import Clock

        from vehcal_ros.nodes.common import sec_to_stamp

        self.clock_pub.publish(Clock(clock=sec_to_stamp(t)))


# -------------------------------------------------------------------------------------------- live part
def _wait(predicate, timeout: float, step: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return predicate()





def _live(params: dict[str, dict], grip_scenario: str, realtime_factor: float, seed: int,
          log: Any) -> dict[str, Any]:
    """Estimators (+ probe) in this process; each scenario's vehicle_simulator in its own process."""
    import subprocess
    import sys

    import rclpy
    from rclpy.context import Context
    from rclpy.experimental import EventsExecutor
    from rclpy.node import Node
    from rclpy.parameter import Parameter

    from vehcal_ros.commands.run import build_nodes

    context = Context()
    rclpy.init(context=context)
    # the fits run in the nodes' worker threads; the events executor costs the least per message
    executor = EventsExecutor(context=context)
    nodes = build_nodes(params, sim=None, context=context)
    for node in nodes:  # the estimators follow the simulator's /clock
        node.set_parameters([Parameter("use_sim_time", value=True)])
    grip_node, cal_node = nodes
    probe_node = Node("vehcal_demo_probe", context=context)
    probe = _Probe(probe_node, list(grip_node.pipeline.collector.scopes()))
    for n in (*nodes, probe_node):
        executor.add_node(n)
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set() and context.ok():
            executor.spin_once(timeout_sec=0.05)

    spinner = threading.Thread(target=spin, daemon=True)
    spinner.start()
    sim_values = {k: v for k, v in params.get("vehicle_simulator", {}).items()
                  if k not in ("scenario", "realtime_factor", "publish_clock", "seed", "wait_for_subscribers")}
    period = float(cal_node.values["calibration_period"])
    procs: list[subprocess.Popen] = []
    offsets: dict[str, float] = {}
    try:
        for k, name in enumerate((*CALIBRATION_SCENARIOS, grip_scenario)):
            t_wall = time.monotonic()
            probe.sim_state = "starting"
            args = [sys.executable, "-m", "vehcal_ros.nodes.vehicle_simulator", "--ros-args",
                    "-p", f"scenario:={name}", "-p", f"realtime_factor:={_factor(name, realtime_factor)}",
                    "-p", "publish_clock:=true", "-p", f"seed:={int(seed) + k}",
                    "-p", "wait_for_subscribers:=2", "-p", "wait_timeout:=60.0"]  # both estimators
            for key, value in sim_values.items():
                args += ["-p", f"{key}:={json.dumps(value) if not isinstance(value, str) else value}"]
            proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            procs.append(proc)
            ok = _wait(lambda p=proc: probe.sim_state in ("finished", "stopped", "diverged", "failed")
                       or p.poll() is not None, timeout=1800.0, step=0.2)
            state = probe.sim_state
            proc.send_signal(2)  # SIGINT: the node shuts down cleanly
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
            if not ok or state != "finished":
                err = (proc.stderr.read() if proc.stderr else "")[-400:]
                raise EstimationError(f"simulation of '{name}' did not finish ({state}): {err}")
            t_end = float(_scenario_duration(name))
            offsets[name] = probe.offset
            # sim time runs on (no new data) until the estimators have been idle for three cycle periods, so
            # windows that close at the end of the data are fitted (cycles are skipped while a fit runs)
            t, idle_since, deadline = t_end, t_end, time.monotonic() + 900.0
            while time.monotonic() < deadline:
                t += 0.1
                probe.tick_clock(t)
                time.sleep(0.01)
                if cal_node.busy or grip_node.busy:
                    idle_since = t
                elif t - idle_since >= 3 * period:
                    break
            log(f"  {name}: {t_end:.0f} s simulated in {time.monotonic() - t_wall:.0f} s; "
                + "; ".join(f"{s}: {st.message}" for s, st in cal_node.pipeline.status.items()))
            probe.offset += t + 1.0
        return {"probe": probe, "grip_status": dict(grip_node.pipeline.status),
                "calibration": {s: st for s, st in cal_node.pipeline.status.items()},
                "model": cal_node.pipeline.model_parameters(),
                "summaries": cal_node.pipeline.parameter_summaries(),
                "counters": {"grip": grip_node.pipeline.collector.counters,
                             "calibration": cal_node.pipeline.counters},
                "grip_data": {s: grip_node.pipeline.collector.snapshot(s)
                              for s in grip_node.pipeline.collector.scopes()},
                "grip_offset": offsets[grip_scenario]}
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
        stop.set()
        spinner.join(timeout=5.0)
        for n in (*nodes, probe_node):
            shutdown = getattr(n, "shutdown", None)
            if callable(shutdown):
                shutdown()
            n.destroy_node()
        executor.shutdown(timeout_sec=5.0)
        if context.ok():
            rclpy.shutdown(context=context)


def _factor(name: str, grip_factor: float) -> float:
    """Simulator speed: the grip scenario at ``grip_factor``; the calibration maneuvers at least 2x real time
    (the calibrator only buffers them and fits after each one; 2x is what the estimator process keeps up with)."""
    return float(grip_factor) if name not in CALIBRATION_SCENARIOS else max(2.0, float(grip_factor))


def _scenario_duration(name: str) -> float:
    from vehcal_ros.io.scenarios import load_scenario

    return float(load_scenario(name).duration)


# ------------------------------------------------------------------------------------------------ summary
def _patches(truth: list[tuple[float, np.ndarray, np.ndarray]], wheels: tuple[int, ...], t0: float
             ) -> list[dict[str, Any]]:
    """Contiguous stretches of the grip scenario with the same road mu under ``wheels``."""
    out: list[dict[str, Any]] = []
    for t, mu_road, mu_max in truth:
        if t < t0:
            continue
        road = round(float(np.mean(mu_road[list(wheels)])), 3)
        peak = float(np.min(mu_max[list(wheels)]))
        if not out or out[-1]["mu_road"] != road:
            out.append({"mu_road": road, "t0": t, "t1": t, "truth": [peak]})
        else:
            out[-1]["t1"] = t
            out[-1]["truth"].append(peak)
    for p in out:
        p["mu_max_true"] = float(np.median(p.pop("truth")))
    return out


def grip_table(live: dict[str, Any]) -> list[dict[str, Any]]:
    """Per scope and road patch, the belief in force as the probe received it (every ``belief_period``): the
    share of the patch's messages whose interval holds the truth, overstates it (truth below the lower bound) or
    is unknown, and the last known belief of the patch. An axle's truth is the lower of its wheels'."""
    probe = live["probe"]
    rows = []
    for scope, wheels in (("front_axle", (0, 1)), ("rear_axle", (2, 3))):
        for p in _patches(probe.truth, wheels, live["grip_offset"]):
            msgs = [e for e in probe.grip.get(scope, []) if p["t0"] <= e[0] <= p["t1"]]
            exc = [x for t, x in probe.excitation.get(scope, []) if p["t0"] <= t <= p["t1"] and np.isfinite(x)]
            x = p["mu_max_true"]
            known = [e for e in msgs if np.isfinite(e[1])]
            row = {"scope": scope, "mu_road": p["mu_road"], "t0": p["t0"] - live["grip_offset"],
                   "t1": p["t1"] - live["grip_offset"], "mu_max_true": x,
                   "excitation": max(exc) if exc else float("nan"), "n_messages": len(msgs),
                   "inside": float(np.mean([lo <= x <= hi for _, _, lo, hi in msgs])) if msgs else float("nan"),
                   "overstated": float(np.mean([x < lo for _, _, lo, _ in msgs])) if msgs else float("nan"),
                   "available": len(known) / len(msgs) if msgs else float("nan")}
            if known:
                _, mean, lo, hi = known[-1]
                row.update({"mu_max_mean": mean, "mu_max_lower": lo, "mu_max_upper": hi})
            rows.append(row)
    return rows


def prior_means(vehicle: str) -> dict[str, float]:
    """Midpoints of the vehicle description's uniform priors (the 'prior mean' model of the paper's Tables 3, 5,
    7), bphi split equally; the description's nominal values elsewhere."""
    from vehcal_ros.estimation.calibration.pipeline import full_parameters
    from vehcal_ros.vehicle.description import derived_nominal, load_description

    return {**full_parameters(None, vehicle), **derived_nominal(load_description(vehicle).priors)}


def holdout(model: dict[str, float], seed: int, vehicle: str) -> dict[str, dict[str, float]]:
    """RMSE per Table 9 channel on the simulated test maneuver: the description's prior means against the
    calibrated model, both in the 8-DOF with the description's constants."""
    from vehcal_ros.estimation.calibration.holdout import holdout_rmse, records_to_table
    from vehcal_ros.estimation.calibration.pipeline import full_parameters
    from vehcal_ros.io.scenarios import load_scenario
    from vehcal_ros.io.simulate import ScenarioRun
    from vehcal_ros.models.vehicle_8dof import VehicleConstants

    scenario = load_scenario("test_maneuver").with_seed(seed)
    table = records_to_table(r for _, r, _ in ScenarioRun(scenario))
    constants = VehicleConstants.from_description(vehicle)
    return {"prior_mean": holdout_rmse(table, prior_means(vehicle), constants=constants),
            "calibrated": holdout_rmse(table, full_parameters(model, vehicle), constants=constants)}


def _fmt(x: Any, spec: str = ".3f") -> str:
    try:
        return "nan" if x is None or not np.isfinite(float(x)) else format(float(x), spec)
    except (TypeError, ValueError):
        return str(x)


def render(summary: dict[str, Any]) -> str:
    lines = ["", "Grip in force per road patch (daily driving; the belief published every 0.5 s: its 90 % interval"
             " widened for the time and distance since its data, or unknown)",
             f"{'scope':<11} {'road mu':>7} {'t [s]':>13} {'excitation':>10} {'true mu_max':>11} "
             f"{'inside':>6} {'over':>5} {'known':>5}  {'last known belief [interval]':>28}"]
    for r in summary["grip"]:
        est = (f"{_fmt(r.get('mu_max_mean'))} [{_fmt(r.get('mu_max_lower'))}, {_fmt(r.get('mu_max_upper'))}]"
               if "mu_max_mean" in r else "unknown")
        lines.append(f"{r['scope']:<11} {r['mu_road']:>7.2f} {_fmt(r['t0'], '.0f'):>6}-{_fmt(r['t1'], '.0f'):<6} "
                     f"{_fmt(r['excitation'], '.2f'):>10} {_fmt(r['mu_max_true']):>11} "
                     f"{_fmt(r['inside'], '.2f'):>6} {_fmt(r['overstated'], '.2f'):>5} "
                     f"{_fmt(r['available'], '.2f'):>5}  {est:>28}")
    lines += ["", "Calibrated 8-DOF parameters (posterior mean, 94 % HDI, R-hat, bulk ESS)",
              f"{'parameter':<10} {'stage':<19} {'mean':>12} {'94 % HDI':>27} {'R-hat':>7} {'ESS':>7}"]
    for name, s in summary["parameters"].items():
        lines.append(f"{name:<10} {s.get('stage', ''):<19} {_fmt(s['mean'], '.5g'):>12} "
                     f"[{_fmt(s['hdi_low'], '.5g')}, {_fmt(s['hdi_high'], '.5g')}]".ljust(62)
                     + f" {_fmt(s.get('r_hat'), '.3f'):>7} {_fmt(s.get('ess_bulk'), '.0f'):>7}")
    h = summary["holdout"]
    lines += ["", "Held-out test maneuver (8-DOF paper Table 9): RMSE of the 8-DOF model vs the simulator",
              f"{'channel':<10} {'prior mean':>11} {'calibrated':>11} {'better':>7}"]
    for ch, prior in h["prior_mean"].items():
        cal = h["calibrated"][ch]
        lines.append(f"{ch:<10} {prior:>11.4f} {cal:>11.4f} {str(cal < prior):>7}")
    lines.append(f"\nelapsed {summary['elapsed_s']:.0f} s")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from vehcal_ros.commands.run import load_parameters

    out = Path(args.out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise InputError(f"--out {out}: exists and is not empty; choose another directory or remove it")
    from vehcal_ros.commands.vehicle_option import apply_vehicle
    from vehcal_ros.models.vehicle14.params import DEFAULT_MODEL
    from vehcal_ros.vehicle.description import simulated_vehicle_description

    # both estimators describe the vehicle the demo's simulator drives (its scenarios' default)
    params = apply_vehicle(load_parameters(args.params),
                           getattr(args, "vehicle", None) or simulated_vehicle_description(DEFAULT_MODEL))
    t0 = time.monotonic()

    def log(msg: str) -> None:
        print(msg, flush=True)

    log(f"vehcal demo: calibration maneuvers {', '.join(CALIBRATION_SCENARIOS)} then '{args.grip_scenario}', "
        "live over Fast DDS (the first run compiles the models: about a minute)")
    live = _live(params, args.grip_scenario, args.realtime_factor, args.seed, log)
    log("  held-out test maneuver (paper Fig. 27) ...")
    hold = holdout(live["model"], args.seed, params["model_calibrator"]["vehicle"])
    summary = {"grip": grip_table(live), "parameters": live["summaries"], "model": live["model"],
               "calibration_status": {s: {"level": st.level, "message": st.message}
                                      for s, st in live["calibration"].items()},
               "holdout": hold, "elapsed_s": time.monotonic() - t0}
    print(render(summary), flush=True)

    parent = out.parent if str(out.parent) else Path(".")
    parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=parent))
    try:
        (tmp / "summary.json").write_text(json.dumps(summary, indent=2, default=_json_default))
        (tmp / "summary.txt").write_text(render(summary) + "\n")
        _write_figures(tmp, live, summary)
        if out.exists():
            out.rmdir()
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    log(f"vehcal demo: wrote {out}/summary.json and {out}/index.html")
    return 0


def _json_default(obj: Any) -> Any:
    if isinstance(obj, (np.floating, np.integer)):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    return str(obj)


def _write_figures(root: Path, live: dict[str, Any], summary: dict[str, Any]) -> None:
    """mu_max over time vs truth, the friction data of each scope, the calibration stage plots, index.html."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from vehcal_ros.io.calibration_plots import write_report as write_stage_report
    from vehcal_ros.io.grip_plots import plot_grip_fit

    probe, off = live["probe"], live["grip_offset"]
    figs: list[str] = []
    fig, ax = plt.subplots(figsize=(9, 4.5))
    tt = np.array([t for t, _, _ in probe.truth if t >= off]) - off
    for scope, wheels, color in (("front_axle", (0, 1), "C0"), ("rear_axle", (2, 3), "C1")):
        e = np.array([x for x in probe.grip.get(scope, []) if x[0] >= off])
        if e.size:   # the belief in force: a step with its band (unknown: the band spans 0 to the prior's top)
            ax.fill_between(e[:, 0] - off, e[:, 2], e[:, 3], step="post", color=color, alpha=0.18,
                            label=f"{scope} in force (90 % interval)")
            ax.step(e[:, 0] - off, e[:, 1], where="post", color=color, lw=1.6, label=f"{scope} mean in force")
        truth = np.array([np.min(m[list(wheels)]) for t, _, m in probe.truth if t >= off])
        if truth.size:
            ax.plot(tt, truth, "-", color=color, alpha=0.6, label=f"{scope} true mu_max")
    ax.set_xlabel("time in the grip scenario [s]")
    ax.set_ylabel("mu_max")
    ax.set_ylim(0, 1.6)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(root / "mu_max.png", dpi=110)
    plt.close(fig)
    figs.append("mu_max.png")
    for scope, st in live["grip_status"].items():
        data = live["grip_data"].get(scope)
        if st.estimate is None or data is None or data.slip.size == 0:
            continue
        plot_grip_fit(root / f"grip_{scope}.png", data.slip, data.mu, st.estimate,
                      title=f"{scope}: friction data of the last window and posterior")
        figs.append(f"grip_{scope}.png")
    stage_figs: dict[str, list[str]] = {}
    for stage, st in live["calibration"].items():
        segment = getattr(st, "result_data", None)
        if st.result is None or segment is None:
            continue
        paths = write_stage_report(segment, st.result, str(root / "calibration" / stage))
        stage_figs[stage] = [str(Path(p).relative_to(root)) for p in paths]
    html = ["<!doctype html><html><head><meta charset='utf-8'><title>vehcal demo</title>",
            "<style>body{font-family:sans-serif;margin:2em}pre{background:#f4f4f4;padding:1em}"
            "img{max-width:900px;display:block;margin:1em 0}</style></head><body>",
            "<h1>vehcal_ros demo</h1><pre>", render(summary).replace("&", "&amp;").replace("<", "&lt;"), "</pre>"]
    html += [f"<img src='{f}' alt='{f}'>" for f in figs]
    for stage, paths in stage_figs.items():
        html.append(f"<h2>calibration: {stage}</h2>")
        html += [f"<img src='{p}' alt='{p}'>" for p in paths]
    html.append("</body></html>")
    (root / "index.html").write_text("\n".join(html), encoding="utf-8")
