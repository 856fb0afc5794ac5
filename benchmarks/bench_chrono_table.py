"""Benchmark: calibrate the three stages on the paper's Chrono HMMWV data and tabulate against the paper.

Each stage runs on its window (shared data/chrono_hmmwv/README.md) with the paper's Section 3.1 noise added
(fixed seed), 8 chains x 1000 draws, in the paper's order (longitudinal -> lateral -> rolling resistance, each
holding the earlier posterior means). Writes a markdown table of posterior means and 94 % HDIs beside the
paper's published means, and the sampling time beside the paper's.

Run: .venv/bin/python benchmarks/bench_chrono_table.py [--out benchmarks/chrono_table.md]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from bench_calibration import chrono_segment

from vehcal_ros.estimation.calibration import calibrate_stage

PAPER = {
    "longitudinal": ({"Cxf": 10659, "Cxr": 10280}, 9, 16069),
    "lateral": ({"Cyf": 44016, "Cyr": 54046, "kphi_f": 36245, "kphi_r": 26439, "bphi": 2 * 3863}, 22, 7343),
    "rolling_resistance": ({"rr": 0.013095}, 3, 2120),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--chains", type=int, default=8)
    ap.add_argument("--draws", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(Path(__file__).with_name("chrono_table.md")))
    args = ap.parse_args()
    known: dict[str, float] = {}
    rows = ["| stage | parameter | posterior mean | 94 % HDI | paper mean | diff | R-hat | bulk ESS |",
            "|---|---|---|---|---|---|---|---|"]
    timing = ["| stage | SMC stages (ours / paper) | sampling time s (ours / paper) | converged |",
              "|---|---|---|---|"]
    rmse = ["| stage | channel | prior mean-RMSE | posterior mean-RMSE |", "|---|---|---|---|"]
    dump = {}
    for i, stage in enumerate(PAPER):
        seg = chrono_segment(stage, args.seed + i)
        t0 = time.perf_counter()
        res = calibrate_stage(seg, stage, previous=known, n_chains=args.chains, n_draws=args.draws,
                              seed=args.seed + i)
        print(f"{stage}: {time.perf_counter() - t0:.1f} s", flush=True)
        known.update(res.posterior_means())
        paper, p_stages, p_time = PAPER[stage]
        for name, s in res.parameters.items():
            pm = paper.get(name)
            diff = f"{100 * (s['mean'] - pm) / pm:+.1f} %" if pm else ""
            rows.append(f"| {stage} | {name} | {s['mean']:.5g} | [{s['hdi_low']:.5g}, {s['hdi_high']:.5g}] | "
                        f"{pm if pm is not None else ''} | {diff} | {s['r_hat']:.4f} | {s['ess_bulk']:.0f} |")
        for ch, s in res.noise.items():
            rows.append(f"| {stage} | sigma_{ch} | {s['mean']:.4g} | [{s['hdi_low']:.4g}, {s['hdi_high']:.4g}] | "
                        f" | | {s['r_hat']:.4f} | {s['ess_bulk']:.0f} |")
        timing.append(f"| {stage} | {res.n_stages} / {p_stages} | {res.sampling_s:.1f} / {p_time} | "
                      f"{res.converged} |")
        for ch in res.rmse_posterior:
            rmse.append(f"| {stage} | {ch} | {res.rmse_prior[ch]:.4g} | {res.rmse_posterior[ch]:.4g} |")
        dump[stage] = res.to_dict()
    text = "\n".join(["## Posterior vs the paper's published means", "", *rows, "",
                      "## Sampling", "", *timing, "", "## Posterior predictive (paper Tables 3, 5, 7)", "", *rmse,
                      ""])
    Path(args.out).write_text(text)
    Path(args.out).with_suffix(".json").write_text(json.dumps(dump, indent=1))
    print(text)


if __name__ == "__main__":
    main()
