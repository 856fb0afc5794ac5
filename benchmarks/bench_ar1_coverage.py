"""Benchmark: 90 % interval coverage on data the 8-DOF model generates with AR(1) residuals, for the AR(1)
likelihood (calibration.py Eq. A1) and the independent one (the paper's).

Each of ``--replicates`` replicates (seeds 1000, 1001, ...) draws the rolling-resistance stage's rr, sigma_u and
rho_u from the stage's prior (rho ~ U(-0.5, 0.999)), simulates the synthetic drive's coast-down with the 8-DOF
model and adds stationary AR(1) noise (test/ar1_coverage.py), then calibrates with each noise model (2 x 200
particles) and counts the central 90 % intervals that contain the drawn value. The test
(test/statistical/test_ar1_likelihood.py) accepts 171..188 of 200 for the AR(1) likelihood; its power calculation
is beside it.

Run: PYTHONPATH=. .venv/bin/python benchmarks/bench_ar1_coverage.py [--replicates 200]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "test"))

from ar1_coverage import replicate  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--replicates", type=int, default=200)
    ap.add_argument("--generator", choices=("ar1", "discrepancy"), default="ar1",
                    help="the noise model that generates the data (and is checked against the others)")
    args = ap.parse_args()
    load, c0 = os.getloadavg()[0], time.process_time()
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    models = ("ar1", "white") if args.generator == "ar1" else ("discrepancy", "ar1", "white")
    hits = {m: {"rr": 0} for m in models}
    hits[args.generator].update({"sigma_u": 0, "rho_u": 0})
    if args.generator == "discrepancy":
        hits["discrepancy"]["delta_u"] = 0
    high_rho = {m: [0, 0] for m in models}   # (hits, count) of rr where the drawn rho > 0.9
    for k in range(args.replicates):
        rep = replicate(1000 + k, noise_models=models, generator=args.generator)
        for m in models:
            for name in hits[m]:
                lo, hi = rep[m][name]
                hits[m][name] += lo <= rep["truth"][name] <= hi
            if rep["truth"]["rho_u"] > 0.9:
                lo, hi = rep[m]["rr"]
                high_rho[m][0] += lo <= rep["truth"]["rr"] <= hi
                high_rho[m][1] += 1
    n = args.replicates
    print(f"{started}, load average {load:.2f} -> {os.getloadavg()[0]:.2f}, {time.process_time() - c0:.0f} CPU s; "
          f"`PYTHONPATH=. .venv/bin/python benchmarks/bench_ar1_coverage.py --replicates {n} --generator "
          f"{args.generator}` (data from the {args.generator} model's prior)")
    print("| likelihood | rr | sigma_u | delta_u | rho_u | rr where rho > 0.9 |")
    print("|---|---|---|---|---|---|")
    for m in models:
        cells = [f"{hits[m][p]}/{n} ({100 * hits[m][p] / n:.1f} %)" if p in hits[m] else "-"
                 for p in ("rr", "sigma_u", "delta_u", "rho_u")]
        h, c = high_rho[m]
        print(f"| {m} | " + " | ".join(cells) + f" | {h}/{c} ({100 * h / max(c, 1):.0f} %) |")


if __name__ == "__main__":
    main()
