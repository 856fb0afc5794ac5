"""Grip-fit accuracy on the friction paper's simulated case (Section 4.1), in the form of its Fig. 14.

True theta = (15.4, 1.60, 0.871, -1.09, 0, 0), noise sigma = 2.53e-2. Training set: 100 slips uniform in
[0, s_lim], s_lim = slip at which the noise-free curve reaches the friction limit (0.3, 0.45, 0.6), and the
whole curve s in [0, 0.4]. Over ``--seeds`` noise seeds, per limit: ML-only mu_max median relative error,
MCMC posterior-mean mu_max median relative error with the post-hoc and the truncated physical prior, coverage
of the 90 % credible interval, median interval width. Default GripConfig otherwise (in-vehicle settings).

    NUMBA_NUM_THREADS=1 .venv/bin/python benchmarks/bench_grip_accuracy.py --seeds 50 [--jobs 2]
"""

from __future__ import annotations

import argparse
import json
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
    limit, seed = args
    from vehcal_ros.errors import EstimationError
    from vehcal_ros.estimation.grip_fit import GripConfig, GripEstimator
    from vehcal_ros.inference.least_squares import multistart_fit
    from vehcal_ros.models.pacejka import peak

    s, mu = make_data(limit, seed)
    out = {"limit": limit, "seed": seed}
    out["ml"] = float(peak(multistart_fit(s, mu, n_starts=GripConfig().n_ml_starts, rng=seed).theta)[0])
    for mode in ("posthoc", "truncated"):
        try:
            e = GripEstimator(GripConfig(prior_mode=mode, seed=seed)).fit(s, mu)
        except EstimationError as exc:  # e.g. the post-hoc prior removed every draw: counted as a failure
            out[mode] = {"mean": float("nan"), "lower": float("nan"), "upper": float("nan"), "r_hat_max": float("nan"),
                         "mu_max_r_hat": float("nan"), "converged": False, "removed": 1.0, "elapsed_s": float("nan"),
                         "failed": str(exc)}
            continue
        out[mode] = {"mean": e.mu_max.mean, "lower": e.mu_max.lower, "upper": e.mu_max.upper,
                     "r_hat_max": e.r_hat_max, "mu_max_r_hat": e.mu_max_r_hat, "converged": e.converged,
                     "removed": e.share_removed_by_prior, "elapsed_s": e.elapsed_s, "failed": ""}
    out["true"] = float(peak(TRUE_THETA)[0])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=50)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--out", default=str(Path(__file__).parent / "figures"))
    args = ap.parse_args()
    tasks = [(lim, sd) for lim in LIMITS for sd in range(args.seeds)]
    t0 = time.perf_counter()
    if args.jobs > 1:
        with ProcessPoolExecutor(args.jobs) as ex:
            results = list(ex.map(one, tasks))
    else:
        results = [one(t) for t in tasks]
    wall = time.perf_counter() - t0
    true = results[0]["true"]
    rows = []
    for lim in LIMITS:
        rs = [r for r in results if r["limit"] == lim]
        ml = np.array([r["ml"] for r in rs])
        row = {"limit": "all (s<=0.4)" if lim is None else f"mu<={lim}", "n": len(rs),
               "ml_med_rel_err": float(np.median(np.abs(ml / true - 1)))}
        for mode in ("posthoc", "truncated"):
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
                "med_r_hat_max": float(np.nanmedian([r[mode]["r_hat_max"] for r in rs])),
                "med_mu_max_r_hat": float(np.nanmedian([r[mode]["mu_max_r_hat"] for r in rs])),
                "med_removed": float(np.median([r[mode]["removed"] for r in rs])),
                "med_fit_s": float(np.nanmedian([r[mode]["elapsed_s"] for r in rs])),
            }
        rows.append(row)
    print(f"true mu_max = {true:.4f}; {args.seeds} seeds; wall {wall:.0f} s")
    hdr = ("limit", "ML err", "posthoc err", "cov90", "width", "truncated err", "cov90", "width",
           "conv(ph/tr)", "Rhat med(ph/tr)", "removed", "failed(ph/tr)")
    print(" | ".join(hdr))
    for r in rows:
        p, t = r["posthoc"], r["truncated"]
        print(f"{r['limit']:>12} | {r['ml_med_rel_err']:.3f} | {p['med_rel_err']:.3f} | {p['coverage90']:.2f} | "
              f"{p['med_width']:.3f} | {t['med_rel_err']:.3f} | {t['coverage90']:.2f} | {t['med_width']:.3f} | "
              f"{p['converged_share']:.2f}/{t['converged_share']:.2f} | {p['med_r_hat_max']:.2f}/"
              f"{t['med_r_hat_max']:.2f} | {p['med_removed']:.2f} | {p['failures']}/{t['failures']}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "grip_accuracy.json").write_text(json.dumps({"rows": rows, "results": results, "wall_s": wall},
                                                       indent=1))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = np.arange(len(LIMITS))
    labels = [r["limit"] for r in rows]
    fig, (a1, a2) = plt.subplots(2, 1, figsize=(7, 6), sharex=True)
    for key, lab, mk in (("ml", "ML", "s"), ("posthoc", "MCMC, post-hoc prior", "o"),
                         ("truncated", "MCMC, truncated prior", "^")):
        vals = [np.array([r[key] if key == "ml" else r[key]["mean"] for r in results if r["limit"] == lim])
                for lim in LIMITS]
        med = np.array([np.nanmedian(v) for v in vals])
        q1 = np.array([np.nanquantile(v, 0.25) for v in vals])
        q3 = np.array([np.nanquantile(v, 0.75) for v in vals])
        off = {"ml": -0.1, "posthoc": 0.0, "truncated": 0.1}[key]
        a1.errorbar(x + off, med, yerr=[med - q1, q3 - med], fmt=mk + "-", capsize=3, label=lab)
        a2.plot(x + off, [np.median(np.where(np.isnan(v), np.inf, np.abs(v / true - 1))) * 100 for v in vals],
                mk + "-", label=lab)
    a1.axhline(true, color="r", lw=1, label="true mu_max")
    a1.set_ylabel("mu_max (median, IQR over seeds)")
    a1.legend(fontsize=8)
    a2.axhline(10, color="k", ls=":", lw=1)
    a2.set_ylabel("median rel. error (%)")
    a2.set_xticks(x, labels)
    a2.set_xlabel("training set")
    fig.suptitle(f"Grip fit, simulated case (paper Sec. 4.1), {args.seeds} seeds")
    fig.tight_layout()
    fig.savefig(out / "grip_accuracy.png", dpi=110)
    print(f"wrote {out / 'grip_accuracy.png'} and {out / 'grip_accuracy.json'}")


if __name__ == "__main__":
    main()
