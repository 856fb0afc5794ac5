"""Replay speed: ``vehcal replay --vehicle hmmwv_sim`` of a simulated HMMWV drive, default settings, x real time.

    .venv/bin/python benchmarks/bench_replay.py --scenario daily_driving            # the 160 s daily drive
    .venv/bin/python benchmarks/bench_replay.py --scenario long_drive --duration 900  # a 15 min long drive
    .venv/bin/python benchmarks/bench_replay.py --bag BAG --jobs 1                    # any bag, serial schedule

The bag is simulated once (``vehcal simulate``) and kept under ``--cache`` (default /tmp/vehcal-bench-bags).
Prints one row per run: date (UTC), load average before/after, bag seconds, messages, wall seconds, x real time,
CPU seconds of this process and its workers (psutil, when installed), grip fits / calibration fits, the
command. ``--json OUT`` appends the rows to a JSON list. The machine may be shared: the load is part of the
figure.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def simulate(scenario: str, duration: float | None, cache: Path) -> Path:
    """The bag of ``scenario`` (cut at ``duration`` s), simulated once into ``cache``."""
    name = scenario if duration is None else f"{scenario}_{duration:g}s"
    bag = cache / name
    if bag.exists():
        return bag
    cache.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "vehcal_ros.cli", "simulate", scenario, "--bag", str(bag)]
    if duration is not None:
        cmd += ["--duration", f"{duration:g}"]
    print("simulating:", shlex.join(cmd), flush=True)
    subprocess.run(cmd, check=True, cwd=ROOT)
    return bag


def cpu_seconds() -> float | None:
    """User + system CPU seconds of this process and every live descendant (worker pools), or None."""
    try:
        import psutil
    except ImportError:
        return None
    me = psutil.Process()
    total = sum(me.cpu_times()[:2])
    for child in me.children(recursive=True):
        try:
            total += sum(child.cpu_times()[:2])
        except psutil.Error:
            pass
    return total


class CoreUse:
    """Samples, every ``period`` s in a thread, the CPU seconds of this process tree and of the whole machine:
    how many cores the replay kept busy over time, and what the other processes took (the machine is shared)."""

    def __init__(self, period: float = 1.0) -> None:
        import threading

        self.period, self.rows = period, []   # (wall s, tree CPU-s, machine busy CPU-s)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def _machine_busy() -> float:
        import psutil

        t = psutil.cpu_times()
        return float(t.user + t.nice + t.system + getattr(t, "irq", 0.0) + getattr(t, "softirq", 0.0))

    def _sample(self) -> None:
        self.rows.append((time.perf_counter(), cpu_seconds() or 0.0, self._machine_busy()))

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            self._sample()

    def __enter__(self) -> CoreUse:
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    def summary(self, marks: dict[str, float]) -> dict:
        """Mean cores busy (this replay / other processes), the share of wall time this replay kept fewer than
        1.5 cores busy, and per tenth of the wall time the replay's cores (the shape of the idle phases)."""
        import numpy as np

        a = np.asarray(self.rows)
        if a.shape[0] < 3:
            return {}
        dtw = np.diff(a[:, 0])
        ours = np.diff(a[:, 1]) / dtw
        others = np.clip(np.diff(a[:, 2]) / dtw - ours, 0.0, None)
        t = a[1:, 0] - a[0, 0]
        wall = float(a[-1, 0] - a[0, 0])
        tenths = [round(float(np.average(ours[(t > wall * k / 10) & (t <= wall * (k + 1) / 10)] if np.any(
            (t > wall * k / 10) & (t <= wall * (k + 1) / 10)) else [np.nan])), 2) for k in range(10)]
        return {"cores_busy_mean": round(float(np.sum(ours * dtw) / wall), 2),
                "others_cores_mean": round(float(np.sum(others * dtw) / wall), 2),
                "wall_share_below_1.5_cores": round(float(np.sum(dtw[ours < 1.5]) / wall), 2),
                "cores_by_tenth_of_wall": tenths,
                **{k: round(v - a[0, 0], 1) for k, v in marks.items() if not k.startswith("_")}}


def bench_params(vehicle: str) -> dict:
    """The shipped parameters (config/estimate.yaml) with both estimators' ``vehicle`` set, as ``vehcal replay BAG
    --vehicle V`` runs them."""
    from vehcal_ros.commands.vehicle_option import apply_vehicle
    from vehcal_ros.replay.params import resolve_params

    return apply_vehicle(resolve_params(None), vehicle)


def run_once(bag: Path, jobs: int | None, executor: str, calibration: bool, params: dict) -> dict:
    from vehcal_ros.inference.executors import make_executor
    from vehcal_ros.replay.serial import replay_bag

    load0 = os.getloadavg()
    date = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    ex = None
    marks: dict[str, float] = {}

    def progress(p) -> None:   # wall time at which the bag was read (parallel); the last progress line
        marks["_line"] = f"{p.done_t:.1f} of {p.t_last:.1f} s, {p.speed:.2f}x, {p.time_left:.0f} s left; {p.detail}"
        if p.read_t > marks.get("_read_t", -float("inf")) and not p.finished:
            marks["_read_t"], marks["bag_read_at_s"] = p.read_t, time.perf_counter()
    if executor != "serial" and jobs != 1:
        # the pool is made here so its workers' CPU time can be read before it closes
        n = jobs or os.cpu_count() or 1
        ex = make_executor(executor, max_workers=n + (1 if calibration else 0))
    try:
        with CoreUse() as use:
            c0 = cpu_seconds()
            t0 = time.perf_counter()
            res = replay_bag(bag, params, workers=jobs, executor=ex if ex is not None else "serial",
                             calibration=calibration, progress=progress)
            wall = time.perf_counter() - t0
            c1 = cpu_seconds()
    finally:
        if ex is not None:
            ex.shutdown(wait=True)
    cnt = res.counters
    return {
        "date": date,
        "load_before": [round(x, 2) for x in load0], "load_after": [round(x, 2) for x in os.getloadavg()],
        "bag": str(bag), "bag_s": round(res.bag_duration_s, 2), "messages": res.n_messages,
        "wall_s": round(wall, 2), "x_real_time": round(res.bag_duration_s / wall, 3),
        "cpu_s": None if c0 is None or c1 is None else round(c1 - c0, 1),
        "jobs": jobs or os.cpu_count(), "executor": executor if jobs != 1 else "serial",
        "grip_cycles": cnt.get("grip_cycles"), "grip_fits": sum(cnt.get("grip_fits", {}).values()),
        "calibration_cycles": cnt.get("calibration_cycles"),
        "calibration_fits": sum(cnt.get("calibration_fits", {}).values()) if calibration else 0,
        "calibration_confirmed": sum(cnt.get("calibration_confirmed", {}).values()) if calibration else 0,
        "published": {s: int(g.t.size) for s, g in res.grip.items()},
        "core_use": use.summary(marks),
    }


def plan_only(bag: Path) -> dict:
    """Read the bag and plan the grip cycles as the replay does, without fitting (every fit returns at once):
    the streaming part's cost and the fits a replay would run, per bag second."""
    from concurrent.futures import Executor, Future

    from vehcal_ros.estimation.grip.pipeline import FitOutcome
    from vehcal_ros.records import GroundTruth
    from vehcal_ros.replay.parallel import GripScheduler
    from vehcal_ros.replay.params import GRIP_NODE, frames_from, grip_pipeline_from, resolve_params, topic_map_from
    from vehcal_ros.replay.results import GripRecorder
    from vehcal_ros.replay.stream import Timer, stream_bag

    class NoFit(Executor):
        def submit(self, fn, /, *args, **kwargs):
            data = args[3]
            fut: Future = Future()
            fut.set_result(FitOutcome(scope=data.scope, stamp=data.t_end, n_points=int(data.mu.size),
                                      excitation=0.0, error="not fitted (plan only)"))
            return fut

    load0 = os.getloadavg()
    date = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    values = resolve_params(None)[GRIP_NODE]
    frames = frames_from(values)
    grip = grip_pipeline_from(values)
    sched = GripScheduler(values, grip, GripRecorder(grip.collector.scopes(), frames.wheel_names), NoFit())
    tmap = topic_map_from({GRIP_NODE: values})

    def feed(_topic, rec):
        if not isinstance(rec, GroundTruth):
            sched.add(rec)

    c0, t0 = cpu_seconds(), time.perf_counter()
    st = stream_bag(bag, tmap, frames, [Timer(float(values["fit_period"]), sched.plan)], feed)
    sched.plan(st.t_end)
    wall, c1 = time.perf_counter() - t0, cpu_seconds()
    bag_s = st.t_end - st.t_start
    return {"date": date, "load_before": [round(x, 2) for x in load0],
            "load_after": [round(x, 2) for x in os.getloadavg()], "bag": str(bag), "bag_s": round(bag_s, 2),
            "messages": st.n, "plan_only": True, "wall_s": round(wall, 2), "x_real_time": round(bag_s / wall, 2),
            "cpu_s": None if c0 is None else round(c1 - c0, 1), "grip_cycles": len(sched.cycles),
            "grip_fits": sched.n_fits, "grip_fits_per_min": round(60.0 * sched.n_fits / bag_s, 2)}


def chains(bag: Path, params: dict) -> dict:
    """The serial schedule (one process) with every fit's CPU time: the work each independent chain of the
    parallel replay carries (each grip scope's fits run one after another; the calibrator's fits one after
    another; the main process reads the bag once, plans the grip cycles and keeps the calibrator's buffers and
    snapshots), hence the least wall time two idle cores can reach,
    max(total / 2, longest chain). Run it with NUMBA_NUM_THREADS=1 for one core's CPU seconds."""
    from vehcal_ros.estimation.calibration import pipeline as cp
    from vehcal_ros.estimation.grip import pipeline as gp
    from vehcal_ros.replay.serial import replay_bag

    per: dict[str, float] = {}
    grip_fit, cal_fit = gp.GripPipeline.fit, cp.CalibrationPipeline.fit

    def timed_grip(self, snaps):
        out = []
        for d in snaps:
            c0 = time.process_time()
            out += grip_fit(self, [d])
            per[f"grip {d.scope}"] = per.get(f"grip {d.scope}", 0.0) + time.process_time() - c0
        return out

    def timed_cal(self, jobs):
        c0 = time.process_time()
        out = cal_fit(self, jobs)
        per["calibration fits"] = per.get("calibration fits", 0.0) + time.process_time() - c0
        return out

    load0 = os.getloadavg()
    date = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    gp.GripPipeline.fit, cp.CalibrationPipeline.fit = timed_grip, timed_cal
    try:
        c0, t0 = time.process_time(), time.perf_counter()
        res = replay_bag(bag, params, workers=1)
        total, wall = time.process_time() - c0, time.perf_counter() - t0
    finally:
        gp.GripPipeline.fit, cp.CalibrationPipeline.fit = grip_fit, cal_fit
    rest = total - sum(per.values())   # reading, planning, the calibrator's buffers and snapshots: the main process
    chain = {k: v for k, v in per.items() if k.startswith("grip")}
    chain["calibration fits (checks + SMC)"] = per.get("calibration fits", 0.0)
    chain["main (read once, plan grip, calibrator buffers + snapshots)"] = rest
    work = sum(chain.values())
    longest = max(chain.values())
    bound = max(work / 2, longest)
    return {"date": date, "load_before": [round(x, 2) for x in load0],
            "load_after": [round(x, 2) for x in os.getloadavg()], "bag": str(bag),
            "bag_s": round(res.bag_duration_s, 2), "serial_cpu_s": round(total, 1), "serial_wall_s": round(wall, 1),
            "chains_cpu_s": {k: round(v, 1) for k, v in chain.items()}, "parallel_work_cpu_s": round(work, 1),
            "two_core_bound_wall_s": round(bound, 1),
            "two_core_bound_x_real_time": round(res.bag_duration_s / bound, 2),
            "bound_by": "longest chain" if longest > work / 2 else "total work"}


def add_bag_arguments(ap: argparse.ArgumentParser) -> None:
    """The bag source options shared by the replay benchmarks: a scenario simulated into the cache (default
    daily_driving), or a bag."""
    src = ap.add_mutually_exclusive_group()
    src.add_argument("--scenario", default="daily_driving",
                     help="built-in scenario to simulate (daily_driving, the default; long_drive, ...)")
    src.add_argument("--bag", type=Path, help="an existing bag")
    ap.add_argument("--duration", type=float, default=None, help="s, cut the scenario (default: its duration)")
    ap.add_argument("--cache", type=Path, default=Path("/tmp/vehcal-bench-bags"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_bag_arguments(ap)
    ap.add_argument("--jobs", type=int, default=None, help="worker processes (default: one per core; 1 = serial)")
    ap.add_argument("--executor", default="local", help="local | threads | serial | dask://HOST:PORT")
    ap.add_argument("--no-calibration", action="store_true")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--plan-only", action="store_true",
                    help="read and plan the grip cycles without fitting (streaming cost, fits per bag minute)")
    ap.add_argument("--chains", action="store_true",
                    help="serial run with each fit's CPU time: the parallel replay's chains and its 2-core bound")
    ap.add_argument("--json", type=Path, default=None, help="append the rows to this JSON list")
    ap.add_argument("--vehicle", default="hmmwv_sim",
                    help="both estimators' vehicle description (default: the simulated HMMWV's, hmmwv_sim)")
    args = ap.parse_args()
    bag = args.bag if args.bag is not None else simulate(args.scenario, args.duration, args.cache)
    command = "python benchmarks/bench_replay.py " + shlex.join(sys.argv[1:])
    rows = []
    for _ in range(args.repeat):
        if args.plan_only or args.chains:
            row = plan_only(bag) if args.plan_only else chains(bag, bench_params(args.vehicle))
            row["command"] = command
            rows.append(row)
            print(json.dumps(row), flush=True)
            continue
        row = run_once(bag, args.jobs, args.executor, not args.no_calibration, bench_params(args.vehicle))
        row["command"] = command
        rows.append(row)
        print(json.dumps(row), flush=True)
        print(f"{row['date']}  load {row['load_before'][0]:.1f}->{row['load_after'][0]:.1f}  {row['bag_s']:.0f} s bag "
              f"in {row['wall_s']:.1f} s = {row['x_real_time']:.2f}x real time, CPU {row['cpu_s']} s, "
              f"{row['grip_fits']} grip fits, {row['calibration_fits']} calibration fits ({row['jobs']} jobs, "
              f"{row['executor']})", flush=True)
    if args.json is not None:
        old = json.loads(args.json.read_text()) if args.json.exists() else []
        args.json.write_text(json.dumps(old + rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
