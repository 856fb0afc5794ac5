"""Table 1 of the parallel-estimation paper for this project: serial vs parallel finite-difference least squares.

Problem: the brake problem of :mod:`vehcal_ros.estimation.brake_fit` (4 coefficients from u and the four wheel
speeds) on ``--maneuvers`` straight-line maneuvers of 6 s, integrated at ``--dt`` (default 0.1 ms, the
"expensive, realistic" residual: one evaluation = maneuvers x 60 000 8-DOF steps). Per solver (trf, lm,
forward differences; trf central): r(p*), evaluations, wall time serial and on ``--workers`` local processes,
speedup. Two parallel layouts: "segmented" (every evaluation split into one task per maneuver, trial points
included) and "paper" (the paper's layout: the client evaluates trial points itself, only the Jacobian columns
go to the workers; its speedup is bounded by (1 + n) / (1 + ceil(n / workers)) per iteration = 5/3 here).

    .venv/bin/python benchmarks/bench_parallel_jacobian.py [--workers 2] [--dt 1e-4] [--maneuvers 8] [--repeat 3]
        [--json F]

Times are the minimum over ``--repeat`` runs (the machine is shared; the minimum is the least disturbed run).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

import numpy as np

from vehcal_ros.estimation.brake_fit import FIT_NAMES, TRUE_PARAMETERS, BrakeResidual, fit_brake, synthetic_data
from vehcal_ros.inference.executors import make_executor


class WholeResidual:
    """The brake residual as one unsegmented callable (the paper's layout)."""

    def __init__(self, res: BrakeResidual) -> None:
        self.res = res
        self.names = res.names

    def __call__(self, p: np.ndarray) -> np.ndarray:
        return self.res(p)


def _warm(ex, res, n_rounds: int = 2) -> None:
    """Start the workers and load the numba caches there (not timed: a long-lived pool pays this once)."""
    p = np.array([TRUE_PARAMETERS[n] for n in FIT_NAMES])
    for _ in range(n_rounds):
        [f.result() for f in [ex.submit(res.segment, p, k) for k in range(res.n_segments)]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--executor", default="local", help="local (processes) or threads (numba kernels release the GIL)")
    ap.add_argument("--dt", type=float, default=1e-4)
    ap.add_argument("--maneuvers", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3, help="runs per case, serial and parallel alternating; min time")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    def timed(fn, *a, **kw):
        """min wall time over --repeat runs (robust to other load on a shared machine); last result."""
        best, out = float("inf"), None
        for _ in range(args.repeat):
            out = fn(*a, **kw)
            best = min(best, out.wall_time_s)
        return out, best

    t0 = time.perf_counter()
    mv = synthetic_data(args.maneuvers, seed=7, dt=args.dt)
    res = BrakeResidual(mv, dt=args.dt)
    p_true = np.array([TRUE_PARAMETERS[n] for n in FIT_NAMES])
    res(p_true)  # compile/load caches in this process
    t_eval = []
    for _ in range(5):
        t1 = time.perf_counter()
        res(p_true)
        t_eval.append(time.perf_counter() - t1)
    steps = sum(res._sim(k).inputs.shape[0] for k in range(res.n_segments))
    print(f"data: {args.maneuvers} maneuvers x 6 s, dt {args.dt * 1e3:g} ms, {steps} 8-DOF steps per evaluation, "
          f"{res(p_true).size} residuals; one evaluation {np.median(t_eval) * 1e3:.1f} ms "
          f"(set-up {time.perf_counter() - t0:.1f} s)")
    rows = []
    cases = [("trf", "forward"), ("lm", "forward"), ("trf", "central")]
    with make_executor(args.executor, args.workers) as ex:
        _warm(ex, res)
        for method, diff in cases:
            ser, t_ser = timed(fit_brake, mv, residual=res, method=method, diff=diff)
            par, t_par = timed(fit_brake, mv, residual=res, method=method, diff=diff, executor=ex)
            assert np.array_equal(ser.x, par.x), "parallel and serial estimates differ"
            row = {"method": method, "diff": diff, "layout": "segmented", "r_p0": None, "r_pstar": ser.cost,
                   "x": ser.x.tolist(), "ci_lower": ser.ci_lower.tolist(), "ci_upper": ser.ci_upper.tolist(),
                   "n_evals": ser.n_residual_evals, "n_jac": ser.n_jacobian_evals, "nfev": ser.nfev,
                   "t_seq": t_ser, "t_par": t_par, "speedup": t_ser / t_par}
            rows.append(row)
            if method == "trf" and diff == "forward":
                whole = WholeResidual(res)
                from vehcal_ros.estimation.brake_fit import BOUNDS, START
                from vehcal_ros.inference.least_squares.parallel import parallel_least_squares

                lb = np.array([BOUNDS[n][0] for n in FIT_NAMES])
                ub = np.array([BOUNDS[n][1] for n in FIT_NAMES])
                p0 = np.array([START[n] for n in FIT_NAMES])
                s2, ts2 = timed(parallel_least_squares, whole, p0, (lb, ub), method=method, names=FIT_NAMES)
                p2, tp2 = timed(parallel_least_squares, whole, p0, (lb, ub), method=method, names=FIT_NAMES,
                                executor=ex)
                assert np.array_equal(s2.x, p2.x)
                rows.append({"method": method, "diff": diff, "layout": "paper", "r_pstar": s2.cost,
                             "x": s2.x.tolist(), "n_evals": s2.n_residual_evals, "n_jac": s2.n_jacobian_evals,
                             "nfev": s2.nfev, "t_seq": ts2, "t_par": tp2, "speedup": ts2 / tp2})
    r0 = 0.5 * float(np.sum(res(np.array([4000.0, 4000.0, 10300.0, 10300.0])) ** 2))
    print(f"r(p0) = {r0:.1f} at p0 = model defaults; truth {p_true.tolist()}; r(truth) = "
          f"{0.5 * float(np.sum(res(p_true) ** 2)):.1f}")
    hdr = (f"{'solver':<12}{'layout':<11}{'r(p*)':>10}{'n_eval':>8}{'n_jac':>7}{'t_seq s':>9}{'t_par s':>9}"
           f"{'speedup':>9}")
    print(hdr)
    for r in rows:
        print(f"{r['method'] + '/' + r['diff'][:3]:<12}{r['layout']:<11}{r['r_pstar']:>10.1f}{r['n_evals']:>8d}"
              f"{r['n_jac']:>7d}{r['t_seq']:>9.2f}{r['t_par']:>9.2f}{r['speedup']:>9.2f}")
    best = rows[0]
    print("p* (trf): " + ", ".join(f"{n} {v:.1f} [{lo:.1f}, {hi:.1f}]" for n, v, lo, hi in
                                    zip(FIT_NAMES, best["x"], best["ci_lower"], best["ci_upper"])))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": platform.platform(), "cpus": os.cpu_count(), "workers": args.workers,
                       "dt": args.dt, "maneuvers": args.maneuvers, "eval_ms": float(np.median(t_eval) * 1e3),
                       "r_p0": r0, "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
