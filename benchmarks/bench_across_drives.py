"""Benchmark: do the calibration's intervals hold across drives? Five drives of one simulated vehicle.

The vehicle: the HMMWV on this project's 14-DOF simulator (``vehcal simulate``, a different model from the
8-DOF being calibrated, so the residuals carry model-form error as well as sensor noise). The five drives are
the lateral calibration maneuver (``steering_ramp``: throttle burst, coast, steering ramp) driven five ways:
steering ramp to 0.16, 0.18, 0.20, 0.22, 0.24 of the lock, the throttle held 3.0-4.0 s (so the ramp starts at
a different speed), each with its own sensor-noise seed. Each drive is calibrated on the paper's lateral window
(7.0-10.7 s) by ``calibrate_stage`` with the AR(1) residual model (the default) and with the independent one
(``noise_model="white"``), the other parameters at the description's nominal values, the pipeline's
``noise_prior_factor`` 10 (data with model-form error).

Per calibrated parameter and noise model, over the five posterior means ``m_i`` and sds ``s_i``:

* ``z_rms``: RMS over the 10 pairs of ``(m_i - m_j) / sqrt(s_i^2 + s_j^2)``; 1 when the intervals are as wide as
  the drive-to-drive scatter (target [0.7, 1.5]; above: intervals too narrow, below: too wide);
* ``width/sd``: median 90 % interval width (5-95 % quantiles) over the across-drive SD of the means (target
  <= 4; 3.29 for calibrated Gaussian intervals).

``--spread-parts N`` widens each fit as the calibrator's ``spread_parts`` does
(estimation/calibration/maneuver_spread.py: the spread between N parts of >= 1 s of its window) before the figures are
taken.

Run: ``PYTHONPATH=. .venv/bin/python benchmarks/bench_across_drives.py [--chains 4 --draws 500] [--work DIR]
[--spread-parts N] [--out benchmarks/across_drives]`` (writes ``<out>.json`` and ``<out>.md``).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

from vehcal_ros.cli import main as vehcal
from vehcal_ros.estimation.calibration import segments as sg
from vehcal_ros.estimation.calibration.fit import calibrate_stage
from vehcal_ros.estimation.calibration.maneuver_spread import DEFAULT_MIN_PART_S, part_bounds, part_spread, widened
from vehcal_ros.estimation.calibration.noise_models import NOISE_MODELS
from vehcal_ros.io.bags import read_bag
from vehcal_ros.resources import find_resource

STAGE = "lateral"
WINDOW = (7.0, 10.7)
DRIVES = [  # (steering amplitude of the lock, end of full throttle s, noise seed)
    (0.16, 3.0, 11), (0.18, 3.25, 12), (0.20, 3.5, 13), (0.22, 3.75, 14), (0.24, 4.0, 15)]


def drive_scenario(amplitude: float, hold_end: float, seed: int, work: Path) -> Path:
    """The ``steering_ramp`` scenario with its steering ramp to ``amplitude`` and full throttle to ``hold_end``."""
    doc = yaml.safe_load(Path(find_resource("config", "scenarios", "steering_ramp.yaml")).read_text())
    doc["name"] = f"steering_ramp_{amplitude:.2f}_{hold_end:.2f}"
    doc["seed"] = int(seed)
    doc["driver"]["throttle"] = [{"type": "ramp", "t0": 0.5, "t1": 1.5, "from": 0.0, "to": 1.0},
                                 {"type": "hold", "t0": 1.5, "t1": hold_end, "value": 1.0},
                                 {"type": "ramp", "t0": hold_end, "t1": hold_end + 0.5, "to": 0.0}]
    doc["driver"]["steering"] = [{"type": "ramp", "t0": 7.0, "t1": 10.7, "from": 0.0, "to": amplitude},
                                 {"type": "ramp", "t0": 10.7, "t1": 12.5, "to": 0.0}]
    path = work / f"{doc['name']}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def drive_segment(k: int, work: Path):
    """Simulate drive ``k`` (once) and cut the lateral window as ``vehcal calibrate --t-start --t-end`` does."""
    amp, hold, seed = DRIVES[k]
    bag = work / f"drive{k}"
    if not bag.exists():
        vehcal(["simulate", str(drive_scenario(amp, hold, seed, work)), "--bag", str(bag), "--quiet"])
    config = sg.SegmentConfig()
    r = sg.resample(sg.records_to_sources(read_bag(str(bag))), config.rate, config.max_gap,
                    config.yaw_rate_source)
    return sg.build_segment(r, WINDOW[0], WINDOW[1], config, source=f"drive {k}")


def spread_table(means: np.ndarray, sds: np.ndarray, widths: np.ndarray) -> dict[str, float]:
    """``z_rms`` and ``width/sd`` of one parameter from the drives' means, sds and 90 % widths."""
    z = [(means[i] - means[j]) / np.hypot(sds[i], sds[j]) for i, j in itertools.combinations(range(means.size), 2)]
    sd_means = float(np.std(means, ddof=1))
    return {"z_rms": float(np.sqrt(np.mean(np.square(z)))), "median_width90": float(np.median(widths)),
            "sd_of_means": sd_means, "width_over_sd": float(np.median(widths) / sd_means)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--draws", type=int, default=500)
    ap.add_argument("--work", type=Path, default=None, help="directory for the simulated bags (kept)")
    ap.add_argument("--noise-prior-factor", type=float, default=10.0,
                    help="x the paper's half-normal noise scales (the pipeline's default 10)")
    ap.add_argument("--initial-state", choices=("measured", "sampled"), default="measured",
                    help="the segment's fitted initial state held (as vehcal calibrate) or sampled (as the pipeline)")
    ap.add_argument("--models", default=",".join(NOISE_MODELS), help="noise models to compare (comma-separated)")
    ap.add_argument("--spread-parts", type=int, default=0,
                    help="widen each fit by the spread between this many parts of its window, as the pipeline's "
                         "spread_parts (estimation/calibration/maneuver_spread.py; 0: off)")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "across_drives")
    args = ap.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="across_drives_"))
    work.mkdir(parents=True, exist_ok=True)
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    load = os.getloadavg()
    c0, w0 = time.process_time(), time.perf_counter()
    models = tuple(args.models.split(","))
    fits: dict[str, list[dict]] = {m: [] for m in models}
    for k in range(len(DRIVES)):
        seg = drive_segment(k, work)
        for model in models:
            res = calibrate_stage(seg, STAGE, n_chains=args.chains, n_draws=args.draws, seed=k,
                                  noise_prior_factor=args.noise_prior_factor, noise_model=model, vehicle="hmmwv",
                                  initial_state=args.initial_state)
            if args.spread_parts:
                bounds = part_bounds(float(seg.time[0]), float(seg.time[-1]), args.spread_parts, DEFAULT_MIN_PART_S,
                                     dt=1.0 / sg.SegmentConfig().rate)
                res = widened(res, part_spread(seg, bounds, res, {}, vehicle="hmmwv"))
            flat = res.draws.reshape(-1, res.draws.shape[-1])
            q = {n: np.quantile(flat[:, j], [0.05, 0.95]).tolist() for j, n in enumerate(res.names)}
            fits[model].append({
                "drive": list(DRIVES[k]), "converged": res.converged,
                "parameters": {n: {"mean": s["mean"], "std": s["std"], "q05": q[n][0], "q95": q[n][1],
                                   "r_hat": s["r_hat"], "ess_bulk": s["ess_bulk"]} for n, s in res.parameters.items()},
                "sigma": {c: s["mean"] for c, s in res.noise.items()},
                "rho": {c: s["mean"] for c, s in res.residual_correlation.items()},
                "delta": {c: s["mean"] for c, s in res.discrepancy.items()},
                "maneuver_spread": res.maneuver_spread})
            print(f"drive {k} {model}: " + ", ".join(f"{n} {s['mean']:.5g} +- {s['std']:.3g}"
                                                     for n, s in res.parameters.items())
                  + ("; rho " + ", ".join(f"{c} {s['mean']:.3f}" for c, s in res.residual_correlation.items())
                     if res.residual_correlation else ""), flush=True)
    table: dict[str, dict[str, dict[str, float]]] = {}
    for model in models:
        table[model] = {}
        for name in fits[model][0]["parameters"]:
            p = [f["parameters"][name] for f in fits[model]]
            table[model][name] = spread_table(np.array([x["mean"] for x in p]), np.array([x["std"] for x in p]),
                                              np.array([x["q95"] - x["q05"] for x in p]))
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    meta = {"date": started, "load_average_start": [round(x, 2) for x in load],
            "load_average_end": [round(x, 2) for x in os.getloadavg()], "cpu_s": cpu, "wall_s": wall,
            "command": f"PYTHONPATH=. .venv/bin/python benchmarks/bench_across_drives.py --chains {args.chains} "
                       f"--draws {args.draws} --noise-prior-factor {args.noise_prior_factor:g} --models {args.models} "
                       f"--initial-state {args.initial_state}"
                       + (f" --spread-parts {args.spread_parts}" if args.spread_parts else ""),
            "drives": DRIVES, "stage": STAGE, "window_s": WINDOW}
    args.out.with_suffix(".json").write_text(json.dumps({"meta": meta, "table": table, "fits": fits}, indent=1))
    lines = [f"# Intervals across five drives ({STAGE} stage, 14-DOF HMMWV)", "",
             f"{meta['date']}, load average {load[0]:.2f} -> {os.getloadavg()[0]:.2f}, {cpu:.0f} CPU s, "
             f"{wall:.0f} s wall. `{meta['command']}`", "",
             "| parameter | noise model | z_rms (target 0.7-1.5) | median 90 % width | SD of the 5 means | width / SD "
             "(target <= 4) | means |", "|---|---|---|---|---|---|---|"]
    for name in table[models[0]]:
        for model in models:
            t = table[model][name]
            ms = ", ".join(f"{f['parameters'][name]['mean']:.5g}" for f in fits[model])
            ok = 0.7 <= t["z_rms"] <= 1.5 and t["width_over_sd"] <= 4.0
            lines.append(f"| {name} | {model} | {t['z_rms']:.2f} | {t['median_width90']:.4g} | "
                         f"{t['sd_of_means']:.4g} | {t['width_over_sd']:.2f} {'(both met)' if ok else ''} | {ms} |")
    for model in models:
        if fits[model][0]["rho"]:
            rho = {c: [round(f["rho"][c], 3) for f in fits[model]] for c in fits[model][0]["rho"]}
            lines += ["", f"{model}: AR(1) coefficients (posterior means per drive): "
                      + "; ".join(f"{c} {v}" for c, v in rho.items())]
        if fits[model][0].get("delta"):
            dl = {c: [float(f"{f['delta'][c]:.3g}") for f in fits[model]] for c in fits[model][0]["delta"]}
            sg_ = {c: [float(f"{f['sigma'][c]:.3g}") for f in fits[model]] for c in fits[model][0]["sigma"]}
            lines += ["", f"{model}: discrepancy sd delta per drive: " + "; ".join(f"{c} {v}" for c, v in dl.items())
                      + "; white noise sd: " + "; ".join(f"{c} {v}" for c, v in sg_.items())]
    text = "\n".join(lines) + "\n"
    args.out.with_suffix(".md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
