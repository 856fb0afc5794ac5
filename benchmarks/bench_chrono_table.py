"""Benchmark: calibrate the three stages on the paper's Chrono HMMWV data, chained across files as the paper does,
tabulate against the paper, and score the held-out Chrono test 2 (Section 3.6, Table 9).

Each stage's window (shared data/chrono_hmmwv/README.md) gets the paper's Section 3.1 noise (fixed seed; the
first row, the initial state, stays noise-free as in the paper) and is written as a calibration CSV. Then, through
the CLI exactly as a user would:

    vehcal calibrate acc.csv --stage longitudinal --json lon.json
    vehcal calibrate ramp.csv --stage lateral --model lon.json --json lat.json          (chained)
    vehcal calibrate rr.csv --stage rolling_resistance --model lat.json --json rr.json  (chained)

and, for comparison, the lateral and rolling-resistance stages without ``--model`` (each file with the other
parameters at their defaults: what the CLI did before ``--model``). Each chain's final parameters are scored on the
held-out test 2 (benchmarks/chrono_holdout.py: RMSE per Table 9 channel, noise-free Chrono data, and the summed
ratio to the paper's published Table 9), beside the paper's own posterior means and the prior means.

Run: cd benchmarks && PYTHONPATH=.. ../.venv/bin/python bench_chrono_table.py --test-dir DIR
     [--out results/chrono_table.md] [--vehicle hmmwv_chrono --order rr-first]   (the chain that closes the test-2 gap)
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np
from bench_calibration import chrono_segment
from chrono_holdout import PAPER_MEANS, PAPER_TABLE9, prior_means, score, test2_table

from vehcal_ros.cli import main as vehcal
from vehcal_ros.estimation.calibration.fit import CHANNELS, CSV_COLUMNS, Segment
from vehcal_ros.estimation.calibration.holdout import TABLE9_CHANNELS
from vehcal_ros.io.model_file import load_model_file

PAPER = {
    "longitudinal": ({"Cxf": 10659, "Cxr": 10280}, 9, 16069),
    "lateral": ({"Cyf": 44016, "Cyr": 54046, "kphi_f": 36245, "kphi_r": 26439, "bphi": 2 * 3863}, 22, 7343),
    "rolling_resistance": ({"rr": 0.013095}, 3, 2120),
}


def write_csv(seg: Segment, clean: Segment, path: Path) -> None:
    """A calibration CSV of ``seg`` whose first row is ``clean``'s (the noise-free initial state)."""
    cols = [seg.time, seg.throttle, seg.brake, seg.steering] + [seg.measured[c].copy() for c in CSV_COLUMNS[4:]]
    for j, c in enumerate(CSV_COLUMNS[4:]):
        cols[4 + j][0] = clean.initial_state[CHANNELS[c]]
    np.savetxt(path, np.column_stack(cols), delimiter=",", header=",".join(CSV_COLUMNS), comments="", fmt="%.10g")


def calibrate(csv: Path, stage: str, out: Path, args, model: Path | None = None) -> dict:
    argv = [str(csv), "--stage", stage, "--json", str(out), "--chains", str(args.chains), "--draws",
            str(args.draws), "--seed", str(args.seed), "--vehicle", args.vehicle]
    if model is not None:
        argv += ["--model", str(model)]
    t0 = time.perf_counter()
    rc = vehcal(["calibrate", *argv])
    if rc:
        raise SystemExit(f"vehcal calibrate {' '.join(argv)} failed ({rc})")
    print(f"{stage}{' --model ' + model.name if model else ''}: {time.perf_counter() - t0:.1f} s", flush=True)
    return json.loads(out.read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--chains", type=int, default=8)
    ap.add_argument("--draws", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--test-dir", default=None, help="folder with test_2.csv and test_set.txt (chrono_holdout.py)")
    ap.add_argument("--vehicle", default="hmmwv", help="vehicle description (name or file): hmmwv (default: the "
                    "paper's 8-DOF numbers) or hmmwv_chrono (the Chrono HMMWV's rotating inertia)")
    ap.add_argument("--order", choices=("paper", "rr-first"), default="paper",
                    help="chain order: the paper's (default), or rolling resistance -> longitudinal -> lateral")
    ap.add_argument("--work", default=None, help="folder for the CSV and JSON files (default: a temp folder)")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "chrono_table.md"))
    args = ap.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="vehcal_chrono_"))
    work.mkdir(parents=True, exist_ok=True)
    csvs = {}
    for i, stage in enumerate(PAPER):
        csvs[stage] = work / f"{stage}.csv"
        write_csv(chrono_segment(stage, args.seed + i), chrono_segment(stage, args.seed + i), csvs[stage])
    if args.order == "paper":   # longitudinal (rr held at 0.0175) -> lateral -> rolling resistance
        lon = calibrate(csvs["longitudinal"], "longitudinal", work / "lon.json", args)
        lat = calibrate(csvs["lateral"], "lateral", work / "lat.json", args, model=work / "lon.json")
        rr = calibrate(csvs["rolling_resistance"], "rolling_resistance", work / "rr.json", args,
                       model=work / "lat.json")
        last = work / "rr.json"
    else:   # coast-down first: the throttle ramp's fit then sees the calibrated rr instead of the held 0.0175
        rr = calibrate(csvs["rolling_resistance"], "rolling_resistance", work / "rr.json", args)
        lon = calibrate(csvs["longitudinal"], "longitudinal", work / "lon.json", args, model=work / "rr.json")
        lat = calibrate(csvs["lateral"], "lateral", work / "lat.json", args, model=work / "lon.json")
        last = work / "lat.json"
    lat0 = calibrate(csvs["lateral"], "lateral", work / "lat_unchained.json", args)
    rr0 = rr if args.order == "rr-first" else calibrate(csvs["rolling_resistance"], "rolling_resistance",
                                                          work / "rr_unchained.json", args)
    chained = load_model_file(last)
    unchained = {**load_model_file(work / "lon.json"), **{k: v for k, v in load_model_file(
        work / "lat_unchained.json").items() if k[:2] in ("Cy", "kp", "bp")}, "rr": load_model_file(
        work / ("rr.json" if args.order == "rr-first" else "rr_unchained.json"))["rr"]}
    rows = ["| stage | parameter | chained mean | 94 % HDI | unchained mean | paper mean | chained vs paper | R-hat "
            "| bulk ESS |", "|---|---|---|---|---|---|---|---|---|"]
    timing = ["| stage | SMC stages (ours / paper) | sampling time s (ours / paper) | converged |",
              "|---|---|---|---|"]
    for stage, res, res0 in (("longitudinal", lon, lon), ("lateral", lat, lat0), ("rolling_resistance", rr, rr0)):
        paper, p_stages, p_time = PAPER[stage]
        for name, s in res["parameters"].items():
            pm = paper.get(name)
            diff = f"{100 * (s['mean'] - pm) / pm:+.1f} %" if pm else ""
            rows.append(f"| {stage} | {name} | {s['mean']:.5g} | [{s['hdi_low']:.5g}, {s['hdi_high']:.5g}] | "
                        f"{res0['parameters'][name]['mean']:.5g} | {pm} | {diff} | {s['r_hat']:.4f} | "
                        f"{s['ess_bulk']:.0f} |")
        for ch, s in res["noise"].items():
            rows.append(f"| {stage} | sigma_{ch} | {s['mean']:.4g} | [{s['hdi_low']:.4g}, {s['hdi_high']:.4g}] | "
                        f"{res0['noise'][ch]['mean']:.4g} | | | {s['r_hat']:.4f} | {s['ess_bulk']:.0f} |")
        timing.append(f"| {stage} | {res['n_stages']} / {p_stages} | {res['sampling_s']:.1f} / {p_time} | "
                      f"{res['converged']} |")
    table = test2_table(args.test_dir)
    hold = ["| parameters | " + " | ".join(TABLE9_CHANNELS) + " | summed ratio to Table 9 |",
            "|---|" + "---|" * (len(TABLE9_CHANNELS) + 1),
            "| paper's Table 9 (its code, its posterior) | " + " | ".join(f"{PAPER_TABLE9[c]:.3g}"
                                                                       for c in TABLE9_CHANNELS) + " | 8.00 |"]
    scores = {}
    for label, params in (("chained across files (--model)", chained), ("unchained (defaults)", unchained),
                          ("the paper's posterior means", PAPER_MEANS), ("prior means", prior_means())):
        r, s = score(params, table, args.vehicle)
        scores[label] = {"rmse": r, "ratio_sum": s, "params": params}
        hold.append(f"| {label} | " + " | ".join(f"{r[c]:.4g}" for c in TABLE9_CHANNELS) + f" | {s:.2f} |")
    load = os.getloadavg()
    text = "\n".join([
        f"Run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, vehicle {args.vehicle}, order {args.order}, "
        f"{args.chains} chains x {args.draws} draws, "
        f"seed {args.seed}, load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} (2 cores, shared).", "",
        "## Posterior vs the paper's published means", "", *rows, "",
        "## Sampling (chained run)", "", *timing, "",
        "## Held-out Chrono test 2 (paper Section 3.6, Table 9): RMSE from 1.0 s to 11.6 s, noise-free data, wheel "
        "speeds as spin speeds (chrono_holdout.py)", "",
        *hold, ""])
    Path(args.out).write_text(text)
    Path(args.out).with_suffix(".json").write_text(json.dumps(
        {"longitudinal": lon, "lateral": lat, "rolling_resistance": rr, "lateral_unchained": lat0,
         "rolling_resistance_unchained": rr0, "holdout_test2": scores}, indent=1))
    print(text)


if __name__ == "__main__":
    main()
