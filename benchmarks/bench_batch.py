"""Batch throughput (inputs per minute): serial vs local processes vs a Dask LocalCluster (vehcal batch).

Inputs: ``--inputs`` brake CSVs (``--maneuvers`` straight-line maneuvers of 6 s each, 100 Hz, noisy), each
fitted by the batch task (:func:`vehcal_ros.commands.batch.calibrate_input`, brake fit at dt = 1 ms; one
thread per task). Times include the backend's start-up (process pool / cluster connection) because a batch
pays it; the Dask cluster itself (127.0.0.1, 2 worker processes, 1 thread each) is started before timing.
``run_batch`` starts a fresh local pool per batch: the first task of each worker pays the worker's imports
and numba cache loading, so the first task times are printed next to the median task. Backends alternate over
``--repeat`` rounds; times are minima. The load average and the CPU used by other processes meanwhile (in
cores, sampled with psutil) are printed.

    .venv/bin/python benchmarks/bench_batch.py [--inputs 12] [--maneuvers 6] [--workers 2] [--repeat 2] [--json F]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import threading
import time

import numpy as np
import psutil

from vehcal_ros.commands.batch import run_batch
from vehcal_ros.estimation.calibration.brake_fit import synthetic_data, write_brake_csv


class OtherLoad:
    """CPU used by processes other than this benchmark and its descendants, in cores, sampled by a thread.

    Descendants are re-listed every ``period`` s (a local pool's workers live only during its batch); CPU a
    process spends after its last sample is not seen, an error of at most ``period`` core-seconds per process.
    """

    def __init__(self, period: float = 0.2) -> None:
        self.period = period
        self.first: dict[int, float] = {}
        self.last: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def _busy() -> float:
        t = psutil.cpu_times()
        return sum(t) - t.idle - getattr(t, "iowait", 0.0)

    def _sample(self, first: bool = False) -> None:
        me = psutil.Process()
        for pr in [me, *me.children(recursive=True)]:
            try:
                c = pr.cpu_times()
            except psutil.Error:
                continue
            v = c.user + c.system
            self.first.setdefault(pr.pid, v if first else 0.0)
            self.last[pr.pid] = v

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            self._sample()

    def __enter__(self) -> OtherLoad:
        self.t0, self.busy0 = time.perf_counter(), self._busy()
        self._sample(first=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()
        wall = time.perf_counter() - self.t0
        own = sum(self.last[p] - self.first[p] for p in self.last)
        self.cores = max(0.0, self._busy() - self.busy0 - own) / max(wall, 1e-9)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--inputs", type=int, default=12)
    ap.add_argument("--maneuvers", type=int, default=6)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    import distributed

    tmp = tempfile.mkdtemp(prefix="vehcal_bench_batch_")
    files = []
    for i in range(args.inputs):
        f = os.path.join(tmp, f"vehicle{i:02d}.csv")
        mv = synthetic_data(args.maneuvers, seed=100 + i, known_x0=False)
        write_brake_csv(f, mv)
        files.append(f)
    run_batch(files[:1], os.path.join(tmp, "warm"), executor="serial", progress=False)  # numba caches
    load_before = "/".join(f"{v:.2f}" for v in os.getloadavg())
    print(f"load average before: {load_before}", flush=True)
    best: dict[str, dict] = {}
    with distributed.LocalCluster(host="127.0.0.1", processes=True, n_workers=args.workers, threads_per_worker=1,
                                  dashboard_address=None) as cluster:
        dask_spec = "dask://" + cluster.scheduler_address.removeprefix("tcp://")
        backends = (("serial", "serial"), (f"local x{args.workers}", "local"), (f"dask x{args.workers}", dask_spec))
        for _ in range(args.repeat):
            for name, spec in backends:
                out = os.path.join(tmp, name.split()[0])
                shutil.rmtree(out, ignore_errors=True)
                with OtherLoad() as other:
                    t0 = time.perf_counter()
                    s = run_batch(files, out, executor=spec, workers=args.workers, progress=False)
                    dt = time.perf_counter() - t0
                assert s.n_ok == len(files), [o.error for o in s.failed]
                tasks = [float(o.elapsed_s) for o in s.outcomes]
                # the first task of each worker (tasks 0..workers-1 start together) pays its imports and numba
                # cache loading; compare with the median task
                first = tasks[:args.workers] if spec != "serial" else tasks[:1]
                row = {"backend": name, "seconds": dt, "inputs_per_minute": 60.0 * len(files) / dt,
                       "other_cores": other.cores, "first_tasks_s": first, "median_task_s": float(np.median(tasks))}
                print(f"  {name}: {dt:.2f} s; first task(s) {', '.join(f'{x:.2f}' for x in first)} s, median task "
                      f"{row['median_task_s']:.2f} s (other processes {other.cores:.2f} cores)", flush=True)
                if dt < best.get(name, {"seconds": float("inf")})["seconds"]:
                    best[name] = row
    load_after = "/".join(f"{v:.2f}" for v in os.getloadavg())
    base = best["serial"]["seconds"]
    rows = list(best.values())
    for r in rows:
        r["speedup"] = base / r["seconds"]
    print(f"{args.inputs} inputs x {args.maneuvers} maneuvers (brake fit, dt 1 ms); {os.cpu_count()} CPUs; "
          f"load average before {load_before}, after {load_after}; min of {args.repeat}")
    print(f"{'backend':<12}{'seconds':>9}{'inputs/min':>12}{'speedup':>9}{'other':>7}{'first task(s) s':>18}")
    for r in rows:
        print(f"{r['backend']:<12}{r['seconds']:>9.2f}{r['inputs_per_minute']:>12.1f}{r['speedup']:>9.2f}"
              f"{r['other_cores']:>7.2f}{'/'.join(f'{x:.2f}' for x in r['first_tasks_s']):>18}")
    shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"inputs": args.inputs, "maneuvers": args.maneuvers, "workers": args.workers,
                       "load_before": load_before, "load_after": load_after, "rows": rows},
                      f, indent=2)


if __name__ == "__main__":
    main()
