"""Grip-fit accuracy on the friction paper's simulated case (Section 4.1), in the form of its Fig. 14.

True theta = (15.4, 1.60, 0.871, -1.09, 0, 0), noise sigma = 2.53e-2. Training set: 100 slips uniform in
[0, s_lim], s_lim = slip at which the noise-free curve reaches the friction limit (0.3, 0.45, 0.6), and the
whole curve s in [0, 0.4]. Over ``--seeds`` noise seeds, per limit: ML-only mu_max median relative error,
MCMC posterior-mean mu_max median relative error with the post-hoc and/or the truncated physical prior, coverage
of the 90 % credible interval, median interval width, share of fits converged by the project rule (split R-hat
<= 1.01, bulk and tail ESS >= 400 on B..s_v, sigma, mu_max). Default GripConfig otherwise; ``--max-steps``
sets the extension limit (120000 = the node's live setting).

    NUMBA_NUM_THREADS=1 .venv/bin/python benchmarks/bench_grip_accuracy.py --seeds 50 --limits 0.3 \
        --modes truncated --jobs 2
"""

from __future__ import annotations

import argparse
import json
import os
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

TRUE_THETA = np.array([15.4, 1.60, 0.871, -1.09, 0.0, 0.0])
SIGMA = 2.53e-2
LIMITS = (0.3, 0.45, 0.6, None)  # None: whole curve, s in [0, 0.4]
N_POINTS = 100


def make_data(limit: float | None, seed: int) -> tuple[np.ndarray, np.ndarray]:
    from vehcal_ros.models.pacejka import mf_curve, slip_at_friction

    s_lim = 0.4 if limit is None else slip_at_friction(TRUE_THETA, limit)
    rng = np.random.default_rng(10_000 + seed)
    s = rng.uniform(0.0, s_lim, N_POINTS)
    mu = mf_curve(s, TRUE_THETA) + SIGMA * rng.standard_normal(N_POINTS)
    return s, mu


def one(args: tuple) -> dict:
    limit, seed, modes, max_steps = args
    from vehcal_ros.errors import EstimationError
    from vehcal_ros.estimation.grip.fit import GripConfig, GripEstimator
    from vehcal_ros.estimation.grip.ml_fit import multistart_fit
    from vehcal_ros.models.pacejka import peak

    s, mu = make_data(limit, seed)
    out = {"limit": limit, "seed": seed}
    out["ml"] = float(peak(multistart_fit(s, mu, n_starts=GripConfig.paper_case().n_ml_starts, rng=seed).theta)[0])
    for mode in modes:
        try:
            e = GripEstimator(GripConfig.paper_case(prior_mode=mode, seed=seed, max_steps=max_steps)).fit(s, mu)
        except EstimationError as exc:  # e.g. the post-hoc prior removed every draw: counted as a failure
            out[mode] = {"mean": float("nan"), "lower": float("nan"), "upper": float("nan"), "r_hat_max": float("nan"),
                         "mu_max_r_hat": float("nan"), "converged": False, "removed": 1.0, "elapsed_s": float("nan"),
                         "failed": str(exc)}
            continue
        out[mode] = {"mean": e.mu_max.mean, "lower": e.mu_max.lower, "upper": e.mu_max.upper,
                     "r_hat_max": e.r_hat_max, "mu_max_r_hat": e.mu_max_r_hat, "converged": e.converged,
                     "ess_bulk_min": e.ess_bulk_min, "ess_tail_min": e.ess_tail_min, "n_steps_used": e.n_steps_used,
                     "prior_dominated": e.prior_dominated,
                     "removed": e.share_removed_by_prior, "elapsed_s": e.elapsed_s, "failed": ""}
    out["true"] = float(peak(TRUE_THETA)[0])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=50)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--limits", default="0.3,0.45,0.6,all", help="comma list of mu limits, 'all' = whole curve")
    ap.add_argument("--modes", default="posthoc,truncated")
    ap.add_argument("--max-steps", type=int, default=120_000)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "figures"))
    args = ap.parse_args()
    limits = [None if x == "all" else float(x) for x in args.limits.split(",")]
    modes = tuple(args.modes.split(","))
    tasks = [(lim, sd, modes, args.max_steps) for lim in limits for sd in range(args.seeds)]
    load0 = os.getloadavg()
    t0 = time.perf_counter()
    if args.jobs > 1:
        with ProcessPoolExecutor(args.jobs) as ex:
            results = list(ex.map(one, tasks))
    else:
        results = [one(t) for t in tasks]
    wall = time.perf_counter() - t0
    true = results[0]["true"]
    rows = []
    for lim in limits:
        rs = [r for r in results if r["limit"] == lim]
        ml = np.array([r["ml"] for r in rs])
        row = {"limit": "all (s<=0.4)" if lim is None else f"mu<={lim}", "n": len(rs),
               "ml_med_rel_err": float(np.median(np.abs(ml / true - 1)))}
        for mode in modes:
            m = np.array([r[mode]["mean"] for r in rs])
            lo = np.array([r[mode]["lower"] for r in rs])
            hi = np.array([r[mode]["upper"] for r in rs])
            failed = np.isnan(m)
            # a failed fit counts as an infinite error and a miss
            row[mode] = {
                "failures": int(failed.sum()),
                "med_rel_err": float(np.median(np.where(failed, np.inf, np.abs(m / true - 1)))),
                "coverage90": float(np.mean((lo <= true) & (true <= hi))),
                "med_width": float(np.nanmedian(hi - lo)),
                "median_mean": float(np.nanmedian(m)),
                "converged_share": float(np.mean([r[mode]["converged"] for r in rs])),
                "prior_dominated_share": float(np.mean([r[mode].get("prior_dominated", False) for r in rs])),
                "max_r_hat_max": float(np.nanmax([r[mode]["r_hat_max"] for r in rs])),
                "min_ess_bulk": float(np.nanmin([r[mode].get("ess_bulk_min", np.nan) for r in rs])),
                "min_ess_tail": float(np.nanmin([r[mode].get("ess_tail_min", np.nan) for r in rs])),
                "med_steps": float(np.nanmedian([r[mode].get("n_steps_used", np.nan) for r in rs])),
                "max_steps_used": float(np.nanmax([r[mode].get("n_steps_used", np.nan) for r in rs])),
                "med_removed": float(np.median([r[mode]["removed"] for r in rs])),
                "med_fit_s": float(np.nanmedian([r[mode]["elapsed_s"] for r in rs])),
            }
        rows.append(row)
    print(f"true mu_max = {true:.4f}; {args.seeds} seeds; wall {wall:.0f} s; load {load0[0]:.1f} -> "
          f"{os.getloadavg()[0]:.1f}")
    for r in rows:
        for mode in modes:
            x = r[mode]
            print(f"{r['limit']:>12} {mode:>9} | ML err {r['ml_med_rel_err']:.3f} | err {x['med_rel_err']:.3f} | "
                  f"cov90 {x['coverage90']:.2f} | width {x['med_width']:.3f} | converged {x['converged_share']:.2f} "
                  f"| R-hat max {x['max_r_hat_max']:.4f} | ESS min bulk {x['min_ess_bulk']:.0f} tail "
                  f"{x['min_ess_tail']:.0f} | steps med {x['med_steps']:.0f} max {x['max_steps_used']:.0f} | "
                  f"failed {x['failures']}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "grip_accuracy.json").write_text(json.dumps({"rows": rows, "results": results, "wall_s": wall,
                                                        "load_start": load0, "load_end": os.getloadavg(),
                                                        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())},
                                                       indent=1))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for j, mode in enumerate(modes):
        for i, lim in enumerate(limits):
            rs = [r for r in results if r["limit"] == lim]
            y = np.array([r[mode]["mean"] for r in rs])
            lo = np.array([r[mode]["lower"] for r in rs])
            hi = np.array([r[mode]["upper"] for r in rs])
            x = i + 0.3 * j + np.linspace(-0.12, 0.12, len(rs))
            ax.errorbar(x, y, yerr=[y - lo, hi - y], fmt="o", ms=2, lw=0.6, color=f"C{j}",
                        label=f"{mode}: posterior mean, 90 % interval" if i == 0 else None)
    ax.axhline(true, color="r", lw=1, label="true mu_max")
    ax.set_xticks(np.arange(len(limits)), [r["limit"] for r in rows])
    ax.set_ylabel("mu_max")
    ax.legend(fontsize=8)
    ax.set_title(f"Grip fit, paper's simulated case (Sec. 4.1), {args.seeds} noise seeds")
    fig.tight_layout()
    fig.savefig(out / "grip_accuracy.png", dpi=110)
    print(f"wrote {out / 'grip_accuracy.png'} and {out / 'grip_accuracy.json'}")


if __name__ == "__main__":
    main()
