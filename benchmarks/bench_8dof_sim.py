"""Benchmark: one 11.5 s 8-DOF simulation at dt = 5 ms (design target <= 1 ms; paper Table 10:
0.37 s in Python) and batch throughput in particle-simulations per second.

Also prints the roofline row of the step (time per step vs this machine's measured FMA peak and the step's
counted floating-point work; see roofline.py).

Run: .venv/bin/python benchmarks/bench_8dof_sim.py [--repeat 200] [--particles 2000]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

import numpy as np
from roofline import load_counts, machine_peaks, roofline_row

from vehcal_ros.models.vehicle_8dof import Simulator8Dof, parameter_vector


def test_maneuver() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict]:
    """Inputs shaped like the paper's test maneuver (Fig. 27): throttle ramp, left step steer, right ramp steer,
    brake for the last 2 s; 11.5 s at 100 Hz."""
    t = np.arange(0.0, 11.5 + 1e-9, 0.01)
    throttle = np.interp(t, [0, 3.5, 3.51, 11.5], [0.2, 1.0, 0.0, 0.0])
    steering = np.interp(t, [0, 3.5, 3.6, 5.5, 8.5, 9.5, 11.5], [0, 0, 0.2, 0.2, -0.2, 0.0, 0.0])
    brake = np.interp(t, [0, 9.5, 9.6, 11.5], [0, 0, 0.5, 0.5])
    x0 = dict(u=5.0, v=0.0, phi=0.0, wx=0.0, wz=0.0, w_lf=10.7, w_lr=10.7, w_rf=10.7, w_rr=10.7)
    return t, throttle, brake, steering, x0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeat", type=int, default=300)
    ap.add_argument("--particles", type=int, default=2000)
    args = ap.parse_args()
    t, thr, br, st, x0 = test_maneuver()
    sim = Simulator8Dof(x0, t, thr, br, st, dt=0.005)
    p = parameter_vector({"Cxf": 10659, "Cxr": 10280, "Cyf": 44016, "Cyr": 54046, "kphi_f": 36245,
                          "kphi_r": 26439, "bphi_f": 3863, "bphi_r": 3863, "rr": 0.0131})
    t0 = time.perf_counter()
    x = sim.run(p)                      # includes numba compile on a cold cache
    first = time.perf_counter() - t0
    assert np.all(np.isfinite(x))
    times = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        sim.run(p)
        times.append(time.perf_counter() - t0)
    times = np.array(times) * 1e3
    rng = np.random.default_rng(0)
    batch = p * rng.uniform(0.8, 1.2, (args.particles, p.size))
    sim.run(batch[:4])
    t0, c0 = time.perf_counter(), time.process_time()
    sim.run(batch)
    tb, cb = time.perf_counter() - t0, time.process_time() - c0
    res = {
        "simulated_s": 11.5, "dt_s": 0.005, "steps": sim.inputs.shape[0],
        "single_run_ms_median": float(np.median(times)), "single_run_ms_p10": float(np.percentile(times, 10)),
        "single_run_ms_p90": float(np.percentile(times, 90)), "first_call_s": first,
        "batch_particles": args.particles, "batch_s": tb, "batch_cpu_s": cb, "particles_per_s": args.particles / tb,
        "particles_per_cpu_s": args.particles / cb,
        "target_ms": 1.0, "paper_table10_s": 0.37, "cpus": os.cpu_count(), "machine": platform.processor(),
        "load_average": os.getloadavg()[0],
    }
    # roofline: the median single run's time per step against this machine's measured peaks and the step's
    # executed floating-point operations (benchmarks/roofline.py, counted under valgrind)
    ns_step = float(np.median(times)) * 1e6 / sim.inputs.shape[0]
    # streamed per step: one input row (throttle, brake, steering: 24 B); run() also writes 96 B per output
    res["roofline"] = roofline_row(load_counts().get("8dof"), ns_step, machine_peaks(), 24.0)
    res["roofline"]["batch_ns_per_step_per_core"] = tb * 1e9 / (args.particles * sim.inputs.shape[0]) * (
        os.cpu_count() or 1)
    # the same from CPU time (all threads): what a core spends per step, independent of other processes' load
    res["roofline"]["batch_cpu_ns_per_step"] = cb * 1e9 / (args.particles * sim.inputs.shape[0])
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
