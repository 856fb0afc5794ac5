"""Grip-fit speed: adaptive Metropolis proposals per second per core, and one in-vehicle fit.

In-vehicle settings (DESIGN section 7): 8 chains x 20 000 steps, 100 points, one core (NUMBA_NUM_THREADS=1,
set here before numba is imported). Target: <= 1 s per fit.

    .venv/bin/python benchmarks/bench_grip_speed.py [--repeats 5]
"""

from __future__ import annotations

import os

os.environ.setdefault("NUMBA_NUM_THREADS", "1")

import argparse  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

TRUE_THETA = np.array([15.4, 1.60, 0.871, -1.09, 0.0, 0.0])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    from vehcal_ros.estimation.grip_fit import GripConfig, GripEstimator
    from vehcal_ros.inference.adaptive_metropolis import run_grip_chains
    from vehcal_ros.inference.least_squares import DEFAULT_BOUNDS
    from vehcal_ros.models.pacejka import mf_curve, slip_at_friction

    rows = []
    for label, s_lim in (("mu<=0.3", slip_at_friction(TRUE_THETA, 0.3)), ("whole curve", 0.4)):
        rng = np.random.default_rng(7)
        s = rng.uniform(0, s_lim, 100)
        mu = mf_curve(s, TRUE_THETA) + 0.0253 * rng.standard_normal(100)
        b = np.asarray(DEFAULT_BOUNDS)
        S0 = np.diag(np.sqrt([7, 0.43, 0.3, 0.3, 0.005, 0.01]))
        for trunc in (None, 0.1):
            run_grip_chains(s, mu, TRUE_THETA, S0, b, 0.0253, 200, 100, 1, max_peak_slip=trunc, seed=0)  # compile
            best = np.inf
            for r in range(args.repeats):
                res = run_grip_chains(s, mu, np.tile(TRUE_THETA, (8, 1)), S0, b, 0.0253, 20_000, 10_000, 10,
                                      max_peak_slip=trunc, seed=r)
                best = min(best, res.elapsed_s)
            rows.append((f"chains only, {label}, {'truncated' if trunc else 'untruncated'}", best,
                         8 * 20_000 / best))
        GripEstimator(GripConfig(n_steps=200)).fit(s, mu)  # compile/warm the whole path
        fits = []
        cpu = []
        for r in range(args.repeats):
            c0 = time.process_time()
            e = GripEstimator(GripConfig(seed=r)).fit(s, mu)
            cpu.append(time.process_time() - c0)
            fits.append((e.elapsed_s, e.elapsed_ml_s, e.elapsed_mcmc_s))
        f = np.array(fits)
        i = int(np.argmin(f[:, 0]))
        rows.append((f"full fit (ML {f[i, 1]:.2f} s + MCMC {f[i, 2]:.2f} s + post), {label}", f[i, 0],
                     8 * 20_000 / f[i, 2]))
        rows.append((f"full fit median of {args.repeats}, {label}", float(np.median(f[:, 0])), float("nan")))
        rows.append((f"full fit CPU time (process_time) min, {label}", float(np.min(cpu)), float("nan")))
    print(f"NUMBA_NUM_THREADS={os.environ['NUMBA_NUM_THREADS']}, 8 chains x 20000 steps, 100 points, "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"{'case':<62} {'time (s)':>9} {'proposals/s':>12}")
    for name, t, rate in rows:
        print(f"{name:<62} {t:>9.3f} {rate:>12.3g}")


if __name__ == "__main__":
    main()
