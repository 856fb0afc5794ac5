"""Tire-shape prior: interval width and coverage of mu_max with and without it, when the shape stays and when it
changes between surfaces (SBC-style: the truth drawn per trial).

Per trial: a tire theta_1 from the physical prior of bench_grip_sbc (uniform Table 3, peak slip <= 0.1,
mu_max >= 0.2, |f(0)| <= 0.05); a well-excited drive on surface 1 (100 slips uniform up to the peak slip, the
paper's noise) is fitted without a shape prior and gives the learnt prior the pipeline would use
(GripPipeline.learnt_shape_prior: Gaussian on y = (B C D, C, E), 4 x the posterior covariance). Surface 2 has
the peak D scaled by U(0.35, 0.8) and:

* ``stays``: the same B C D, C, E (B follows from B C D / (C D));
* ``changes``: B C D x U(0.6, 1.4), C and E redrawn from the prior (a different tire or a very different road).

Surface 2 is seen at low excitation (the paper's design of bench_grip_sbc ``paper``) and fitted with and
without the learnt prior; the 90 % mu_max interval's coverage and width are compared.

    NUMBA_NUM_THREADS=1 .venv/bin/python benchmarks/bench_grip_shape_prior.py --trials 40 --jobs 2
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

from bench_grip_sbc import SIGMA_PAPER, draw_theta, simulate  # noqa: E402

INFLATION = 4.0


def surface2(theta1: np.ndarray, case: str, rng: np.random.Generator, b: np.ndarray) -> np.ndarray | None:
    from vehcal_ros.models.pacejka import mf, peak, peak_slip_at_most

    th = theta1.copy()
    th[2] = theta1[2] * rng.uniform(0.35, 0.8)
    bcd = theta1[0] * theta1[1] * theta1[2]
    if case == "changes":
        bcd *= rng.uniform(0.6, 1.4)
        th[1] = rng.uniform(*b[1])
        th[3] = rng.uniform(*b[3])
    th[0] = bcd / (th[1] * th[2])
    ok = (np.all(th >= b[:, 0]) and np.all(th <= b[:, 1]) and peak_slip_at_most(th, 0.1)
          and peak(th)[0] >= 0.2 and abs(mf(0.0, *th)) <= 0.05)
    return th if ok else None


def one(args: tuple) -> dict:
    case, k, seed = args
    from vehcal_ros.errors import EstimationError
    from vehcal_ros.estimation.grip.fit import GripConfig, GripEstimator
    from vehcal_ros.estimation.grip.ml_fit import TABLE3_BOUNDS
    from vehcal_ros.models.pacejka import mf_curve, peak

    rng = np.random.default_rng([seed, k])
    b = np.asarray(TABLE3_BOUNDS, dtype=float)
    while True:
        th1 = draw_theta(rng, b)
        th2 = surface2(th1, case, rng, b)
        if th2 is not None:
            break
    s1 = rng.uniform(0.0, peak(th1)[1], 100)
    mu1 = mf_curve(s1, th1) + SIGMA_PAPER * rng.standard_normal(100)
    d2 = simulate("paper", th2, rng)
    out = {"k": k, "case": case, "theta1": th1.tolist(), "theta2": th2.tolist(), "mu_max2": float(peak(th2)[0])}
    try:
        e1 = GripEstimator(GripConfig.paper_case(seed=k)).fit(s1, mu1)
        prior = (tuple(e1.shape_mean), tuple(map(tuple, INFLATION * e1.shape_cov)))
        for label, sp in (("without", None), ("with", prior)):
            e = GripEstimator(GripConfig.paper_case(seed=k + 1, shape_prior=sp)).fit(d2["slip"], d2["mu"])
            out[label] = {"mean": e.mu_max.mean, "lower": e.mu_max.lower, "upper": e.mu_max.upper,
                          "converged": e.converged, "n_steps_used": e.n_steps_used}
    except EstimationError as exc:
        out["failed"] = str(exc)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=40)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "figures"))
    args = ap.parse_args()
    t0 = time.perf_counter()
    load0 = os.getloadavg()
    tasks = [(case, k, args.seed) for case in ("stays", "changes") for k in range(args.trials)]
    if args.jobs > 1:
        with ProcessPoolExecutor(args.jobs) as ex:
            results = list(ex.map(one, tasks))
    else:
        results = [one(t) for t in tasks]
    from scipy.stats import binom

    rows = {}
    for case in ("stays", "changes"):
        rs = [r for r in results if r["case"] == case and "failed" not in r]
        row = {"n": len(rs), "n_failed": sum(1 for r in results if r["case"] == case and "failed" in r)}
        for label in ("without", "with"):
            cov = [r[label]["lower"] <= r["mu_max2"] <= r[label]["upper"] for r in rs]
            row[label] = {"coverage90": float(np.mean(cov)),
                          "median_width90": float(np.median([r[label]["upper"] - r[label]["lower"] for r in rs])),
                          "median_rel_err": float(np.median([abs(r[label]["mean"] / r["mu_max2"] - 1) for r in rs])),
                          "converged_share": float(np.mean([r[label]["converged"] for r in rs]))}
        n = max(len(rs), 1)
        row["band90"] = [float(binom.ppf(0.025, n, 0.9) / n), float(binom.ppf(0.975, n, 0.9) / n)]
        rows[case] = row
    summ = {"rows": rows, "wall_s": time.perf_counter() - t0, "load_start": load0, "load_end": os.getloadavg(),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "inflation": INFLATION}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "grip_shape_prior.json").write_text(json.dumps({"summary": summ, "results": results}, indent=1))
    print(json.dumps(summ, indent=1))


if __name__ == "__main__":
    # one core per fit; set here, not at import, so importing this module (the fast SBC test) changes nothing
    os.environ.setdefault("NUMBA_NUM_THREADS", "1")
    main()
