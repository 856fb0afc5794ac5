"""Benchmark: lateral calibration stage, 8 chains x 1000 draws (design target: <= 60 s on 2 cores,
R-hat < 1.01, bulk ESS > 400; the paper's PyMC SMC took 7343 s).

Data: the paper's Chrono HMMWV ramp-steer run (shared data/chrono_hmmwv, rows 700-1069) with the paper's
Section 3.1 noise added (fixed seed). Run: .venv/bin/python benchmarks/bench_calibration.py [--chains 8 --draws 1000]

``--kernel``: instead, the stage's log likelihood alone (the 8-DOF batch kernel, no bound) on 2000 prior draws,
best of 7 CPU timings: microseconds per simulation and nanoseconds per integration step (use
``NUMBA_NUM_THREADS=1`` for one core's figure).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from vehcal_ros.estimation.calibration.fit import Segment, StageProblem, base_parameters, calibrate_stage, stage_spec

CHRONO = Path(__file__).resolve().parents[1] / "data" / "chrono_hmmwv"
NOISE = dict(u=0.1, w_lf=1.0, w_lr=1.0, w_rf=1.0, w_rr=1.0, v=0.05, yaw_rate=0.02, roll=0.005, roll_rate=0.002)
WINDOWS = {  # stage: (csv, driver file, first row, last row) per data/chrono_hmmwv/README.md
    "longitudinal": ("acc.csv", "acc_test.txt", 100, 849),
    "lateral": ("simp_ramp.csv", "ramp_steer.txt", 700, 1069),
    "rolling_resistance": ("rr_1.csv", "rr_test.txt", 560, 1059),
}


def chrono_segment(stage: str, seed: int = 0) -> Segment:
    """The stage's Chrono window with the paper's noise (the initial state stays noise-free, as the paper)."""
    if not CHRONO.is_dir():
        sys.exit(f"the vendored Chrono data are missing at {CHRONO}")
    csv, drv, a, b = WINDOWS[stage]
    return Segment.from_chrono(CHRONO / csv, CHRONO / drv, a, b).with_noise(NOISE, seed)


def kernel_timing(seed: int = 0, n: int = 2000, repeats: int = 7) -> dict:
    """CPU time of the lateral stage's log likelihood on ``n`` prior draws (best of ``repeats``)."""
    spec = stage_spec("lateral")
    problem = StageProblem(chrono_segment("lateral", seed), spec, base_parameters(spec, None))
    theta = problem.prior.sample(np.random.default_rng(1), n)
    problem.log_likelihood(theta[:10])   # numba cache warm
    best = float("inf")
    for _ in range(repeats):
        c0 = time.process_time()
        problem.log_likelihood(theta)
        best = min(best, time.process_time() - c0)
    steps = problem.sim.steps_per_run
    return {"what": "lateral log likelihood, prior draws", "draws": n, "steps_per_run": steps,
            "us_per_simulation": best / n * 1e6, "ns_per_step": best / n / steps * 1e9,
            "numba_threads": os.environ.get("NUMBA_NUM_THREADS", "all"), "load_average": os.getloadavg()[0],
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--chains", type=int, default=8)
    ap.add_argument("--draws", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--kernel", action="store_true", help="time the stage's log likelihood alone")
    args = ap.parse_args()
    if args.kernel:
        print(json.dumps(kernel_timing(args.seed), indent=2))
        return
    seg = chrono_segment("lateral", args.seed)
    # warm the numba cache so the timing is the sampler's
    calibrate_stage(seg, "lateral", n_chains=1, n_draws=50, seed=99, predictive_draws=2)
    load0 = os.getloadavg()[0]
    t0, c0 = time.perf_counter(), time.process_time()
    res = calibrate_stage(seg, "lateral", n_chains=args.chains, n_draws=args.draws, seed=args.seed)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    summ = {**res.parameters, **{f"sigma_{k}": v for k, v in res.noise.items()}}
    out = {
        "stage": "lateral", "chains": args.chains, "draws": args.draws, "wall_s": wall, "cpu_s": cpu,
        "sampling_s": res.sampling_s, "smc_stages": res.n_stages, "evaluations": res.smc["n_evaluations"],
        "evaluation_equivalents": round(res.smc["evaluation_equivalents"]),
        "mutation_steps_chain0": res.smc["mutation_steps"][0],
        "converged": res.converged, "max_r_hat": max(s["r_hat"] for s in summ.values()),
        "min_ess_bulk": min(s["ess_bulk"] for s in summ.values()), "target_s": 30.0, "paper_pymc_s": 7343,
        "min_ess_bulk_per_cpu_s": min(s["ess_bulk"] for s in summ.values()) / cpu,
        "cpus": os.cpu_count(), "load_average_before_after": [load0, os.getloadavg()[0]],
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "posterior_mean": {k: s["mean"] for k, s in summ.items()},
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
