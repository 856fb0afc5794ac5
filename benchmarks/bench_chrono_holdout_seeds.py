"""Held-out prediction table, HMMWV on the paper's Chrono data: priors, calibrated, the paper's means; 5 noise seeds.

The user's path: the three stages' windows (data/chrono_hmmwv/README.md) get the paper's Section 3.1 noise (seed
``3 s + k`` for stage k of longitudinal, lateral, rolling resistance and noise seed s; the initial state stays
noise-free, as the paper) and go through the CLI in the chain order (``vehcal_ros.estimation.calibration.stage_order``):

    vehcal calibrate rr.csv  --stage rolling_resistance --vehicle V --json rr.json
    vehcal calibrate acc.csv --stage longitudinal --vehicle V --model rr.json  --json lon.json
    vehcal calibrate ramp.csv --stage lateral     --vehicle V --model lon.json --json lat.json

Each seed's lat.json is scored on the held-out test 2 (benchmarks/chrono_holdout.py: the 8-DOF from the Chrono
state at 1.0 s to 11.6 s, RMSE per Table 9 channel against the noise-free data, wheel speeds as spin speeds),
beside the description's prior means (uniform midpoints) and the paper's posterior means run in the same code.
Per channel: mean and standard error (SD / sqrt(n)) of the calibrated RMSE over the seeds; the summed ratio is
sum over the 8 channels of RMSE / the paper's Table 9 RMSE (8.00 = the paper's own result).

Checks printed: (a) the calibrated summed ratio within 10 % of the paper's means' (same code, same description);
(b) on every channel, calibrated mean RMSE <= prior means' RMSE + 1 SE.

Run: ``PYTHONPATH=. NUMBA_NUM_THREADS=1 .venv/bin/python benchmarks/bench_chrono_holdout_seeds.py
[--vehicle hmmwv_chrono] [--order chain|paper] [--noise-model ar1|discrepancy|white]
[--seeds 0 1 2 3 4] [--out benchmarks/results/chrono_holdout_seeds.md]``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from chrono_holdout import PAPER_MEANS, PAPER_TABLE9, chrono_dir, prior_means, score, test2_table  # noqa: E402

from vehcal_ros.cli import main as vehcal  # noqa: E402
from vehcal_ros.estimation.calibration.fit import CHANNELS, CSV_COLUMNS, STAGE_NAMES, Segment  # noqa: E402
from vehcal_ros.estimation.calibration.holdout import TABLE9_CHANNELS  # noqa: E402
from vehcal_ros.estimation.calibration.noise_models import NOISE_MODEL_CHOICES  # noqa: E402
from vehcal_ros.estimation.calibration.stage_order import CHAIN_ORDER  # noqa: E402
from vehcal_ros.io.model_file import load_model_file  # noqa: E402

NOISE = dict(u=0.1, w_lf=1.0, w_lr=1.0, w_rf=1.0, w_rr=1.0, v=0.05, yaw_rate=0.02, roll=0.005, roll_rate=0.002)
"""The paper's Section 3.1 sensor noise (SD; m/s, rad/s, rad)."""
WINDOWS = {"longitudinal": ("acc.csv", "acc_test.txt", 100, 849),
           "lateral": ("simp_ramp.csv", "ramp_steer.txt", 700, 1069),
           "rolling_resistance": ("rr_1.csv", "rr_test.txt", 560, 1059)}
"""Stage: (CSV, driver file, first row, last row), the paper's calibration windows."""


def write_window(stage: str, seed: int, path: Path) -> None:
    """The stage's window with noise ``seed`` as a calibration CSV whose first row is noise-free."""
    csv, drv, a, b = WINDOWS[stage]
    clean = Segment.from_chrono(chrono_dir() / csv, chrono_dir() / drv, a, b)
    seg = clean.with_noise(NOISE, seed)
    cols = [seg.time, seg.throttle, seg.brake, seg.steering] + [seg.measured[c].copy() for c in CSV_COLUMNS[4:]]
    for j, c in enumerate(CSV_COLUMNS[4:]):
        cols[4 + j][0] = clean.initial_state[CHANNELS[c]]
    np.savetxt(path, np.column_stack(cols), delimiter=",", header=",".join(CSV_COLUMNS), comments="", fmt="%.10g")


def chain(seed: int, work: Path, vehicle: str, order: tuple[str, ...], chains: int, draws: int,
          noise_model: str | None = None) -> dict:
    """Calibrate the three stages through the CLI in ``order``, each with ``--model`` of the previous one;
    ``noise_model``: the CLI's ``--noise-model`` (None: the CLI's default)."""
    model = None
    out = {}
    for stage in order:
        csv = work / f"{stage}_{seed}.csv"
        write_window(stage, 3 * seed + STAGE_NAMES.index(stage), csv)
        js = work / f"{stage}_{seed}.json"
        argv = ["calibrate", str(csv), "--stage", stage, "--vehicle", vehicle, "--json", str(js), "--chains",
                str(chains), "--draws", str(draws), "--seed", str(seed)]
        if model is not None:
            argv += ["--model", str(model)]
        if noise_model is not None:
            argv += ["--noise-model", noise_model]
        if vehcal(argv):
            raise SystemExit(f"vehcal {' '.join(argv)} failed")
        out[stage] = json.loads(js.read_text())
        model = js
    out["final"] = load_model_file(model)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--vehicle", default="hmmwv_chrono")
    ap.add_argument("--order", choices=("chain", "paper"), default="chain",
                    help="chain: rolling_resistance -> longitudinal -> lateral (the CLI's); paper: longitudinal -> "
                         "lateral -> rolling_resistance")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument("--chains", type=int, default=8)
    ap.add_argument("--draws", type=int, default=1000)
    ap.add_argument("--noise-model", choices=NOISE_MODEL_CHOICES, default=None,
                    help="the likelihood's residual model (vehcal calibrate --noise-model; default: the CLI's)")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "chrono_holdout_seeds.md"))
    args = ap.parse_args()
    order = CHAIN_ORDER if args.order == "chain" else STAGE_NAMES
    work = Path(tempfile.mkdtemp(prefix="vehcal_holdout_"))
    load0, t0, c0 = os.getloadavg(), time.perf_counter(), time.process_time()
    tab, raw = test2_table(), test2_table(spin=False)
    runs = []
    for s in args.seeds:
        res = chain(s, work, args.vehicle, order, args.chains, args.draws, args.noise_model)
        rmse, ratio = score(res["final"], tab, args.vehicle)
        rmse_raw, ratio_raw = score(res["final"], raw, args.vehicle)
        runs.append({"seed": s, "params": res["final"], "rmse": rmse, "ratio": ratio, "rmse_raw": rmse_raw,
                     "ratio_raw": ratio_raw, "converged": all(res[st]["converged"] for st in order)})
        print(f"seed {s}: ratio {ratio:.3f} " + json.dumps({k: round(v, 4) for k, v in rmse.items()}), flush=True)
    fixed = {"prior means": prior_means(args.vehicle), "the paper's means": PAPER_MEANS}
    fixed_scores = {k: score(p, tab, args.vehicle) for k, p in fixed.items()}
    fixed_raw = {k: score(p, raw, args.vehicle) for k, p in fixed.items()}
    n = len(runs)

    def mean_se(key: str, ch: str | None = None) -> tuple[float, float]:
        x = np.array([r[key] if ch is None else r[key][ch] for r in runs])
        return float(x.mean()), float(x.std(ddof=1) / np.sqrt(n)) if n > 1 else 0.0

    head = "| parameters | " + " | ".join(TABLE9_CHANNELS) + " | summed ratio |"
    sep = "|---|" + "---|" * (len(TABLE9_CHANNELS) + 1)

    def table_rows(fixed: dict, rmse: str, ratio: str) -> tuple[list, float]:
        """The fixed parameter sets' rows and the calibrated row (mean +- SE); its cells and mean summed ratio."""
        for k, (r, s) in fixed.items():
            lines.append(f"| {k} | " + " | ".join(f"{r[c]:.4g}" for c in TABLE9_CHANNELS) + f" | {s:.3f} |")
        cells = [mean_se(rmse, c) for c in TABLE9_CHANNELS]
        m, se = mean_se(ratio)
        lines.append(f"| calibrated ({n} seeds) | " + " | ".join(f"{a:.4g} +- {b:.2g}" for a, b in cells)
                     + f" | {m:.3f} +- {se:.3f} |")
        return cells, m

    lines = [f"Run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, vehicle {args.vehicle}, order "
             f"{' -> '.join(order)}, noise model {args.noise_model or 'the CLI default'}, "
             f"{args.chains} chains x {args.draws} draws, noise seeds {args.seeds}, load "
             f"average {load0[0]:.1f} -> {os.getloadavg()[0]:.1f} (2 cores, shared), "
             f"{time.perf_counter() - t0:.0f} s wall, {time.process_time() - c0:.0f} CPU s.", "",
             "## Held-out Chrono test 2, wheel speeds as spin speeds (RMSE; calibrated: mean +- SE over the seeds)",
             "", head, sep,
             "| paper's Table 9 (its code, its posterior) | " + " | ".join(f"{PAPER_TABLE9[c]:.3g}"
                                                                       for c in TABLE9_CHANNELS) + " | 8.00 |"]
    cells, m = table_rows(fixed_scores, "rmse", "ratio")
    prior_r = fixed_scores["prior means"][0]
    worse = [c for (a, b), c in zip(cells, TABLE9_CHANNELS, strict=True) if a > prior_r[c] + b]
    paper_s = fixed_scores["the paper's means"][1]
    lines += ["", f"* (a) calibrated summed ratio {m:.3f} vs the paper's means {paper_s:.3f} in the same code: "
              f"{100 * (m - paper_s) / paper_s:+.1f} % ({'met' if m <= 1.10 * paper_s else 'NOT met'}, <= +10 %).",
              f"* (b) channels where calibrated > prior means + 1 SE: {', '.join(worse) if worse else 'none'} "
              f"({'met' if not worse else 'NOT met'}).",
              f"* all stages converged in every seed: {all(r['converged'] for r in runs)}.", "",
              "## The same, raw wheel-speed columns (global-frame projection, the paper's Table 9 convention)", "",
              head, sep]
    table_rows(fixed_raw, "rmse_raw", "ratio_raw")
    lines += ["", "## Calibrated means per seed", "", "| seed | " + " | ".join(
        ("rr", "Cxf", "Cxr", "Cyf", "Cyr", "kphi_f", "kphi_r", "bphi_f")) + " | summed ratio |", "|---|" + "---|" * 9]
    for r in runs:
        p = r["params"]
        vals = " | ".join(f"{p[k]:.0f}" for k in ("Cxf", "Cxr", "Cyf", "Cyr", "kphi_f", "kphi_r", "bphi_f"))
        lines.append(f"| {r['seed']} | {p['rr']:.5f} | {vals} | {r['ratio']:.3f} |")
    text = "\n".join(lines) + "\n"
    Path(args.out).write_text(text)
    Path(args.out).with_suffix(".json").write_text(json.dumps(
        {"vehicle": args.vehicle, "order": list(order), "noise_model": args.noise_model, "runs": runs,
         "fixed": {k: {"rmse": r, "ratio": s} for k, (r, s) in fixed_scores.items()}}, indent=1))
    print(text)


if __name__ == "__main__":
    main()
