"""Benchmark: the 14-DOF simulator's speed on the SEDAN (data/sedan.yaml) at 1 ms steps on one core.

The same 20 s mixed maneuver as bench_hmmwv.py (inputs updated every 10 ms, as the vehicle_simulator node does),
semi-implicit integrator, best of ``--repeats`` runs; the sedan adds the engine map and gearbox and the linearly
implicit wheel spin (two extra tire evaluations per wheel and step). Prints the HMMWV's figure measured in the
same process for comparison.

    .venv/bin/python benchmarks/bench_sedan.py [--seconds 2] [--repeats 30] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_hmmwv import maneuver  # noqa: E402

from vehcal_ros.models.vehicle14 import Hmmwv14  # noqa: E402


def bench(vehicle: str, seconds: float, repeats: int) -> dict:
    sim = Hmmwv14(vehicle)
    sim.reset(speed=5.0)
    maneuver(sim, 0.1)  # JIT warm-up (cached on disk after the first run)
    walls, cpus = [], []
    for _ in range(repeats):
        sim.reset(speed=5.0)
        w0, c0 = time.perf_counter(), time.process_time()
        maneuver(sim, seconds)
        walls.append(time.perf_counter() - w0)
        cpus.append(time.process_time() - c0)
    return {"vehicle": vehicle, "dt_s": sim.dt, "simulated_s": seconds, "implicit_spin": sim.implicit_spin,
            "real_time_factor_wall": seconds / min(walls), "real_time_factor_cpu": seconds / min(cpus),
            "us_per_step_wall": min(walls) / (seconds / sim.dt) * 1e6}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    load0 = os.getloadavg()[0]
    res = [bench(v, a.seconds, a.repeats) for v in ("sedan", "hmmwv")]
    load = os.getloadavg()[0]
    for r in res:
        print(f"{r['vehicle']:6s} semi_implicit dt={r['dt_s'] * 1e3:.1f} ms: {r['real_time_factor_wall']:7.1f}x real "
              f"time (wall, best of {a.repeats}), {r['real_time_factor_cpu']:7.1f}x (CPU), "
              f"{r['us_per_step_wall']:.2f} us/step; load average {load0:.2f} -> {load:.2f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"results": res, "load_average_1min": [load0, load], "cpus": os.cpu_count()}, f, indent=2)


if __name__ == "__main__":
    main()
