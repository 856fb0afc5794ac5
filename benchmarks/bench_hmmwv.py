"""Benchmark: 14-DOF HMMWV simulator speed (simulated seconds per wall second) at 1 ms steps on one core.

Design target: >= 100x real time at 1 kHz. Runs a 20 s mixed maneuver (throttle ramp,
steering, braking) with the inputs updated every 10 ms, as the vehicle_simulator node does, for each
integrator; reports the best of ``--repeats`` runs (wall clock) and the CPU time of the process, and the
roofline row of the semi-implicit step (time per step vs this machine's measured FMA peak and the step's counted
floating-point work; see roofline.py).

    .venv/bin/python benchmarks/bench_hmmwv.py [--repeats 5] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time

from roofline import load_counts, machine_peaks, roofline_row

from vehcal_ros.models.vehicle14 import Hmmwv14


def maneuver(sim: Hmmwv14, seconds: float, chunk: int = 10, start: float = 0.0) -> None:
    """``seconds`` of the maneuver from time ``start`` (s), the inputs held for ``chunk`` steps."""
    n = int(round(seconds / (chunk * sim.dt)))
    k0 = int(round(start / (chunk * sim.dt)))
    for k in range(k0, k0 + n):
        t = k * chunk * sim.dt
        thr = min(0.5, 0.1 * t) if t < 10 else 0.0
        brk = 0.3 if t > 16 else 0.0
        st = 0.15 * math.sin(0.4 * t) if t > 5 else 0.0
        sim.step(thr, brk, st, chunk)


def bench(integrator: str, seconds: float, repeats: int) -> dict:
    sim = Hmmwv14(integrator=integrator)
    sim.reset(speed=5.0)
    maneuver(sim, 0.1)  # JIT warm-up (cached on disk after the first run)
    walls, cpus = [], []
    for _ in range(repeats):
        sim.reset(speed=5.0)
        w0, c0 = time.perf_counter(), time.process_time()
        maneuver(sim, seconds)
        walls.append(time.perf_counter() - w0)
        cpus.append(time.process_time() - c0)
    return {
        "integrator": integrator,
        "dt_s": sim.dt,
        "simulated_s": seconds,
        "best_wall_s": min(walls),
        "best_cpu_s": min(cpus),
        "real_time_factor_wall": seconds / min(walls),
        "real_time_factor_cpu": seconds / min(cpus),
        "us_per_step_wall": min(walls) / (seconds / sim.dt) * 1e6,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    res = [bench(i, a.seconds, a.repeats) for i in ("semi_implicit", "rk4")]
    load = os.getloadavg()[0]
    peaks = machine_peaks()
    counts = load_counts().get("14dof_semi_implicit")
    # per step: CPU time (the wall clock of a loaded machine counts other processes' time slices); streamed:
    # the inputs (4 doubles: throttle, brake, pitman angle, damper scale) once per 10-step chunk; the state, packed
    # parameters and work arrays (~22 KB) stay in L1
    ns_cpu = res[0]["best_cpu_s"] / (a.seconds / res[0]["dt_s"]) * 1e9
    res[0]["roofline"] = roofline_row(counts, ns_cpu, peaks, 32.0 / 10)
    for r in res:
        print(
            f"{r['integrator']:14s} dt={r['dt_s'] * 1e3:.1f} ms: "
            f"{r['real_time_factor_wall']:7.1f}x real time "
            f"(wall, best of {a.repeats}), {r['real_time_factor_cpu']:7.1f}x (CPU), "
            f"{r['us_per_step_wall']:.2f} us/step; load average {load:.2f}"
        )
    print("roofline (semi_implicit step):", json.dumps(res[0]["roofline"]))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"results": res, "load_average_1min": load, "cpus": os.cpu_count()}, f, indent=2)


if __name__ == "__main__":
    main()
