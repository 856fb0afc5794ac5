"""Batch throughput (inputs per minute): serial vs local processes vs a Dask LocalCluster (vehcal batch).

Inputs: ``--inputs`` brake CSVs (``--maneuvers`` straight-line maneuvers of 6 s each, 100 Hz, noisy), each
fitted by the batch task (:func:`vehcal_ros.commands.batch.calibrate_input`, brake fit at dt = 1 ms; one
thread per task). Times include the backend's start-up (process pool / cluster connection) because a batch
pays it; the Dask cluster itself (127.0.0.1, 2 worker processes, 1 thread each) is started before timing.

    .venv/bin/python benchmarks/bench_batch.py [--inputs 12] [--maneuvers 6] [--workers 2] [--json F]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

from vehcal_ros.commands.batch import run_batch
from vehcal_ros.estimation.brake_fit import synthetic_data, write_brake_csv


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--inputs", type=int, default=12)
    ap.add_argument("--maneuvers", type=int, default=6)
    ap.add_argument("--workers", type=int, default=2)
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
    rows = []
    with distributed.LocalCluster(host="127.0.0.1", processes=True, n_workers=args.workers, threads_per_worker=1,
                                  dashboard_address=None) as cluster:
        dask_spec = "dask://" + cluster.scheduler_address.removeprefix("tcp://")
        for name, spec in (("serial", "serial"), (f"local x{args.workers}", "local"), (f"dask x{args.workers}",
                                                                                      dask_spec)):
            t0 = time.perf_counter()
            s = run_batch(files, os.path.join(tmp, name.split()[0]), executor=spec, workers=args.workers,
                          progress=False)
            dt = time.perf_counter() - t0
            assert s.n_ok == len(files), [o.error for o in s.failed]
            rows.append({"backend": name, "seconds": dt, "inputs_per_minute": 60.0 * len(files) / dt})
    base = rows[0]["seconds"]
    print(f"{args.inputs} inputs x {args.maneuvers} maneuvers (brake fit, dt 1 ms); {os.cpu_count()} CPUs")
    print(f"{'backend':<12}{'seconds':>9}{'inputs/min':>12}{'speedup':>9}")
    for r in rows:
        print(f"{r['backend']:<12}{r['seconds']:>9.2f}{r['inputs_per_minute']:>12.1f}{base / r['seconds']:>9.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"inputs": args.inputs, "maneuvers": args.maneuvers, "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
