"""Fleet throughput: ``vehcal batch --fleet`` on a real Dask LocalCluster (127.0.0.1) with 1 and 2 workers, checked
against serial chained ``vehcal replay --state`` runs.

Bags (simulated once, cached under ``--cache``): the built-in daily_driving scenario, sensor seeds ``--seeds``, for
three vehicles (simulated vehicle -> vehicle description): ``hmmwv`` -> ``hmmwv_sim`` (``--hmmwv-duration`` s),
``sedan`` -> ``sedan`` and ``sedan_zero_bump_steer`` -> ``sedan_zero_bump_steer`` (``--duration`` s each). Every
vehicle's bags form one chain (carry-forward through its state file); the params file is ``--params`` (default
benchmarks/fleet_bench.params.yaml: every stage, fewer samples than config/estimate.yaml).

Runs, in this order, each in a fresh output directory: every chain serially through ``vehcal replay BAG --state
FILE`` (one process per bag; first, so that numba's on-disk cache is compiled, on a fresh install, before the
timed fleet runs rather than inside the 1-worker one), then the fleet on a LocalCluster with 1 worker, then with 2
workers (processes, one thread each; the cluster is started before the clock). Figures:

* throughput: bag-seconds per wall-second and bags per minute, per run (wall: the ``vehcal batch`` process,
  start to exit, including its imports and the workers' first imports and numba cache loads);
* speedup of 2 workers over 1, and its bound from the chains: the 2-worker wall cannot be below the longest chain's
  summed in-task time (the critical path) nor half the summed in-task time;
* scheduler overhead per task: (a) 200 empty tasks submitted one after another to the 1-worker cluster
  (submit -> result, median and mean), (b) in the 1-worker fleet run, (wall - summed in-task time) / bags
  (includes the batch process's start-up, result and summary writes);
* CPU-seconds per bag-hour: CPU of the benchmark's descendants (the batch process and the cluster's workers and
  scheduler, psutil) during the run, per hour of bag time; the CPU other processes used meanwhile (cores) is
  printed beside it (the machine is shared);
* equality: each bag's ``calibration`` and ``model_parameters`` and each vehicle's state file of both fleet runs
  against the serial chains (wall-clock fields removed).

    .venv/bin/python benchmarks/bench_fleet.py [--cache DIR] [--seeds 1 2 3 4] [--duration 120]
        [--hmmwv-duration 120] [--work DIR] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_batch import OtherLoad  # noqa: E402

ROOT = HERE.parent
VEHCAL = str(Path(sys.executable).with_name("vehcal"))
VEHICLES = (("hmmwv", "hmmwv", "hmmwv_sim"), ("sedan", "sedan", "sedan"),
            ("sedan_zbs", "sedan_zero_bump_steer", "sedan_zero_bump_steer"))
"""(vehicle_id, simulated vehicle, vehicle description)."""
WALL_FIELDS = ("elapsed_s", "sampling_s", "realtime_factor", "bag", "last_fit_s", "saved_at", "wall_s")


def _load() -> str:
    return "/".join(f"{v:.2f}" for v in os.getloadavg())


def _stamp() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())


def simulate(cache: Path, seeds: list[int], durations: dict[str, float]) -> dict[str, list[Path]]:
    """The bags of every vehicle (simulated into ``cache`` when missing): vehicle_id -> bag paths, seed order."""
    cache.mkdir(parents=True, exist_ok=True)
    out: dict[str, list[Path]] = {}
    for vid, sim, _ in VEHICLES:
        for s in seeds:
            bag = cache / f"{sim}_s{s}_d{durations[vid]:g}"
            if not bag.exists():
                part = bag.with_name(bag.name + ".partial")
                shutil.rmtree(part, ignore_errors=True)
                subprocess.run([VEHCAL, "simulate", "daily_driving", "--vehicle", sim, "--seed", str(s),
                                "--duration", str(durations[vid]), "--bag", str(part), "--quiet"], check=True)
                part.rename(bag)
            out.setdefault(vid, []).append(bag)
    return out


def _strip(o):
    if isinstance(o, dict):
        return {k: _strip(v) for k, v in o.items() if k not in WALL_FIELDS}
    if isinstance(o, list):
        return [_strip(v) for v in o]
    return o


def empty_task(x: int) -> int:
    return x


def scheduler_overhead(client, n: int = 200) -> dict:
    """Submit -> result round trip of ``n`` empty tasks, one after another (s)."""
    client.submit(empty_task, -1, pure=False).result()
    times = []
    for i in range(n):
        t = time.perf_counter()
        client.submit(empty_task, i, pure=False).result()
        times.append(time.perf_counter() - t)
    return {"n": n, "median_s": statistics.median(times), "mean_s": statistics.fmean(times)}


def run_fleet(fleet: Path, out: Path, spec: str, seed: int) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    load0, t0s = _load(), _stamp()
    with OtherLoad() as other:
        t = time.perf_counter()
        r = subprocess.run([VEHCAL, "batch", "--fleet", str(fleet), "--out", str(out), "--executor", spec,
                            "--seed", str(seed)], capture_output=True, text=True)
        wall = time.perf_counter() - t
    own = sum(other.last[p] - other.first[p] for p in other.last)
    if r.returncode != 0:
        print(r.stdout[-3000:], r.stderr[-3000:], file=sys.stderr)
        raise SystemExit(f"vehcal batch failed ({r.returncode})")
    summary = json.loads((out / "summary.json").read_text())
    return {"started": t0s, "load_before": load0, "load_after": _load(), "wall_s": wall, "cpu_s": own,
            "other_cores": other.cores, "summary_elapsed_s": summary["elapsed_s"],
            "in_task_s": {o["vehicle_id"] + "/" + o["drive"]: o["elapsed_s"] for o in summary["inputs"]},
            "n_failed": summary["n_failed"]}


def run_serial(bags_by_vehicle: dict[str, list[Path]], params: Path, out: Path, seed: int) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    load0, t0s = _load(), _stamp()
    desc = {vid: d for vid, _, d in VEHICLES}
    with OtherLoad() as other:
        t = time.perf_counter()
        for vid, bags_ in bags_by_vehicle.items():
            (out / vid).mkdir()
            for bag in bags_:
                subprocess.run([VEHCAL, "replay", str(bag), "--params", str(params), "--vehicle", desc[vid],
                                "--seed", str(seed), "--state", str(out / vid / "state.json"), "--vehicle-id", vid,
                                "--quiet", "--json", str(out / vid / f"{bag.name}.json")], check=True)
        wall = time.perf_counter() - t
    own = sum(other.last[p] - other.first[p] for p in other.last)
    return {"started": t0s, "load_before": load0, "load_after": _load(), "wall_s": wall, "cpu_s": own,
            "other_cores": other.cores}


def compare(bags_by_vehicle: dict[str, list[Path]], a: Path, b: Path) -> list[str]:
    """Differences between two output directories (fleet layout): [] when every bag's calibration,
    model_parameters and every state file agree."""
    diffs = []
    for vid, bags_ in bags_by_vehicle.items():
        for bag in bags_:
            da = json.loads((a / vid / f"{bag.name}.json").read_text())
            db = json.loads((b / vid / f"{bag.name}.json").read_text())
            for key in ("calibration", "model_parameters"):
                if _strip(da.get(key)) != _strip(db.get(key)):
                    diffs.append(f"{vid}/{bag.name}: {key}")
        sa = json.loads((a / vid / "state.json").read_text())
        sb = json.loads((b / vid / "state.json").read_text())
        if _strip(sa) != _strip(sb):
            diffs.append(f"{vid}: state.json")
    return diffs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cache", default="/tmp/vehcal-bench-fleet", help="simulated bags (kept between runs)")
    ap.add_argument("--work", default=None, help="output directories (default: <cache>/runs)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4])
    ap.add_argument("--duration", type=float, default=120.0, help="s of each sedan bag")
    ap.add_argument("--hmmwv-duration", type=float, default=120.0,
                    help="s of each HMMWV bag (60 s of daily_driving excite no HMMWV longitudinal fit)")
    ap.add_argument("--params", default=str(HERE / "fleet_bench.params.yaml"))
    ap.add_argument("--seed", type=int, default=1, help="sampler seed of every replay")
    ap.add_argument("--skip-serial", action="store_true", help="no serial vehcal replay --state reference")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    import distributed

    from vehcal_ros.io.fleet import bag_start  # noqa: F401  (the package imports before any clock)

    cache = Path(args.cache)
    work = Path(args.work) if args.work else cache / "runs"
    work.mkdir(parents=True, exist_ok=True)
    durations = {vid: (args.hmmwv_duration if sim == "hmmwv" else args.duration) for vid, sim, _ in VEHICLES}
    t = time.perf_counter()
    bags_by_vehicle = simulate(cache, args.seeds, durations)
    print(f"bags: {sum(map(len, bags_by_vehicle.values()))} ({time.perf_counter() - t:.0f} s to simulate or find)",
          flush=True)
    bag_s = {vid: durations[vid] * len(b) for vid, b in bags_by_vehicle.items()}
    total_bag_s = sum(bag_s.values())
    n_bags = sum(map(len, bags_by_vehicle.values()))
    params = Path(args.params).resolve()
    fleet = work / "fleet.yaml"
    lines = [f"params: {params}", "vehicles:"]
    for vid, _, desc in VEHICLES:
        lines.append(f"  {vid}: {{vehicle: {desc}, bags: [{', '.join(str(b) for b in bags_by_vehicle[vid])}]}}")
    fleet.write_text("\n".join(lines) + "\n")
    res: dict = {"bags": n_bags, "bag_seconds": total_bag_s, "bag_seconds_per_vehicle": bag_s,
                 "params": str(params), "seeds": args.seeds, "runs": {}}
    if not args.skip_serial:
        s = run_serial(bags_by_vehicle, params, work / "serial", args.seed)
        s.update(bag_s_per_wall_s=total_bag_s / s["wall_s"], cpu_s_per_bag_hour=s["cpu_s"] / (total_bag_s / 3600.0))
        res["runs"]["serial_replay"] = s
        print(f"serial vehcal replay --state chains [{s['started']}, load {s['load_before']} -> {s['load_after']}]: "
              f"wall {s['wall_s']:.1f} s, CPU {s['cpu_s']:.0f} s = {s['cpu_s_per_bag_hour']:.0f} CPU-s per "
              "bag-hour", flush=True)
    for n in (1, 2):
        with distributed.LocalCluster(host="127.0.0.1", processes=True, n_workers=n, threads_per_worker=1,
                                      dashboard_address=None) as cl, distributed.Client(cl) as client:
            spec = "dask://" + cl.scheduler_address.removeprefix("tcp://")
            if n == 1:
                res["empty_task"] = scheduler_overhead(client)
                print(f"empty task round trip on 1 worker: median {1e3 * res['empty_task']['median_s']:.2f} ms, "
                      f"mean {1e3 * res['empty_task']['mean_s']:.2f} ms ({_stamp()}, load {_load()})", flush=True)
            r = run_fleet(fleet, work / f"dask{n}", spec, args.seed)
        in_task = sum(r["in_task_s"].values())
        chains = {vid: sum(v for k, v in r["in_task_s"].items() if k.startswith(vid + "/")) for vid in bag_s}
        r.update(in_task_total_s=in_task, chain_in_task_s=chains,
                 bag_s_per_wall_s=total_bag_s / r["wall_s"], bags_per_min=60.0 * n_bags / r["wall_s"],
                 cpu_s_per_bag_hour=r["cpu_s"] / (total_bag_s / 3600.0),
                 overhead_per_task_s=(r["wall_s"] - in_task) / n_bags if n == 1 else None)
        res["runs"][f"dask{n}"] = r
        print(f"dask {n} worker(s) [{r['started']}, load {r['load_before']} -> {r['load_after']}, other processes "
              f"{r['other_cores']:.2f} cores]: wall {r['wall_s']:.1f} s, {r['bag_s_per_wall_s']:.2f} bag-s per "
              f"wall-s, {r['bags_per_min']:.2f} bags/min, CPU {r['cpu_s']:.0f} s = {r['cpu_s_per_bag_hour']:.0f} "
              f"CPU-s per bag-hour; in-task sum {in_task:.1f} s, chains "
              + ", ".join(f"{k} {v:.0f} s" for k, v in chains.items()), flush=True)
        if n == 1:
            print(f"  overhead per task in the fleet run ((wall - in-task) / bags): {r['overhead_per_task_s']:.2f} s",
                  flush=True)
    r1, r2 = res["runs"]["dask1"], res["runs"]["dask2"]
    cp = max(r1["chain_in_task_s"].values())
    bound = r1["in_task_total_s"] / max(cp, r1["in_task_total_s"] / 2)
    res["speedup_2_vs_1"] = r1["wall_s"] / r2["wall_s"]
    res["critical_path_s"] = cp
    res["speedup_bound_from_chains"] = bound
    print(f"speedup 2 vs 1 workers: {res['speedup_2_vs_1']:.2f}x (target >= 1.8x; the chains allow at most "
          f"{bound:.2f}x: longest chain {cp:.0f} s of {r1['in_task_total_s']:.0f} s in-task, 1-worker times)",
          flush=True)
    res["dask1_vs_dask2_differences"] = compare(bags_by_vehicle, work / "dask1", work / "dask2")
    print(f"dask1 vs dask2: {len(res['dask1_vs_dask2_differences'])} differences "
          f"{res['dask1_vs_dask2_differences'][:5]}", flush=True)
    if not args.skip_serial:
        for n in (1, 2):
            res[f"dask{n}_vs_serial_differences"] = compare(bags_by_vehicle, work / f"dask{n}", work / "serial")
        print(f"differences vs the serial chains: dask1 {len(res['dask1_vs_serial_differences'])}, dask2 "
              f"{len(res['dask2_vs_serial_differences'])} {res['dask2_vs_serial_differences'][:5]}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2) + "\n")


if __name__ == "__main__":
    main()
