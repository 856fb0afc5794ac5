"""Held-out prediction per vehicle: the calibration a user gets from everyday driving, against the priors.

For each vehicle and seed, the user's path end to end, as the live calibrator runs it:

Every description is written from spec-sheet quantities (``benchmarks/spec_sheets/*.spec.yaml``,
``benchmarks/foreign/vehicles/cr_set*.spec.yaml`` -> ``vehcal vehicle from-spec``), fixed before any calibration
ran against it: its prior means are the baseline a user starts from (a description derived from the simulator's
own model file would start at the truth).

1. a daily drive is recorded: ``vehcal simulate daily_driving --vehicle V --seed S`` (the project's 14-DOF
   HMMWV and sedan) or ``benchmarks/foreign/commonroad_drive.py --set N --seed S`` (CommonRoad's multi-body
   model, parameter sets 1 and 3: cars the project did not build, described from a spec sheet);
2. ``vehcal replay BAG --vehicle DESCRIPTION --json`` runs the live nodes over it; its ``model_parameters`` (the
   description's nominal values with every accepted stage's posterior means) are the calibrated model;
3. a held-out maneuver never used for calibration is driven: the 14-DOF ``test_maneuver`` without sensor noise
   (the paper's Table 9 reference), or a 20 s dry-road CommonRoad drive of another seed (``100 + S``);
4. the 8-DOF model runs open loop from the measured state at 1 s (:func:`vehcal_ros.estimation.calibration.holdout
   .holdout_rmse`, the paper's Table 9 channels) with the description's prior means and with the calibrated
   values, on the same inputs (the description's torque source: maps, or the measured wheel torque); the
   calibrated model at the rolling radius the replay measured from free rolling and fitted with (the replay
   JSON's ``counters.calibration_rolling_radius``), the priors at the description's.

Criterion (per vehicle, over the seeds): the calibrated model's summed ratio ``sum_c mean RMSE_cal,c / mean
RMSE_prior,c`` is below the priors' (= number of channels), and on no channel is the mean paired difference
``RMSE_cal - RMSE_prior`` above one standard error of that mean (``sd / sqrt(n_seeds)``).

    PYTHONPATH=. .venv/bin/python benchmarks/bench_holdout_vehicles.py --work /tmp/holdout_vehicles \\
        --seeds 0 1 2 3 4 --out benchmarks/results/holdout_vehicles.md

Bags and replay JSONs are kept under ``--work`` and reused, so a re-run only recomputes the table.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import yaml

from vehcal_ros.estimation.calibration.holdout import TABLE9_CHANNELS, holdout_rmse, records_to_table
from vehcal_ros.io.bags import read_bag
from vehcal_ros.models.vehicle_8dof import VehicleConstants
from vehcal_ros.vehicle.description import load_description

ROOT = Path(__file__).resolve().parents[1]
FOREIGN = ROOT / "benchmarks" / "foreign"
SPEC = ROOT / "benchmarks" / "spec_sheets"
sys.path.insert(0, str(ROOT / "benchmarks"))
from bench_vehicle_calibration import noise_free_scenario  # noqa: E402

VEHICLES = {
    # name: (kind, simulated vehicle or CommonRoad set, description)
    "hmmwv": ("14dof", "hmmwv", str(SPEC / "hmmwv_sim_spec.yaml")),
    "sedan": ("14dof", "sedan", str(SPEC / "sedan_spec.yaml")),
    "cr_set1": ("commonroad", "1", str(FOREIGN / "vehicles" / "cr_set1.yaml")),
    "cr_set3": ("commonroad", "3", str(FOREIGN / "vehicles" / "cr_set3.yaml")),
}


def sh(cmd: list[str]) -> None:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    print(f"  {' '.join(cmd[1:4])} ... {time.perf_counter() - t0:.0f} s", flush=True)


def vehcal(*args: str) -> list[str]:
    return [sys.executable, "-m", "vehcal_ros.cli", *args]


def daily_bag(name: str, seed: int, work: Path) -> Path:
    kind, sim, _ = VEHICLES[name]
    bag = work / name / f"daily_seed{seed}"
    if not bag.exists():
        bag.parent.mkdir(parents=True, exist_ok=True)
        if kind == "14dof":
            sh(vehcal("simulate", "daily_driving", "--vehicle", sim, "--seed", str(seed), "--bag", str(bag),
                      "--quiet"))
        else:
            sh([sys.executable, str(FOREIGN / "commonroad_drive.py"), "--set", sim, "--seed", str(seed),
                "--out", str(bag), "--quiet"])
    return bag


def heldout_bag(name: str, seed: int, work: Path) -> Path:
    kind, sim, _ = VEHICLES[name]
    if kind == "14dof":   # noise-free: the same bag for every seed (the Table 9 reference)
        bag = work / name / "test_maneuver_clean"
        if not bag.exists():
            scen = noise_free_scenario("test_maneuver", sim, work / name)
            sh(vehcal("simulate", str(scen), "--vehicle", sim, "--bag", str(bag), "--quiet"))
        return bag
    bag = work / name / f"heldout_seed{100 + seed}"
    if not bag.exists():
        sh([sys.executable, str(FOREIGN / "commonroad_drive.py"), "--set", sim, "--seed", str(100 + seed),
            "--duration", "20", "--roads", "1.0", "--out", str(bag), "--quiet"])
    return bag


def params_file(name: str, settings: list[str], work: Path) -> tuple[Path | None, str]:
    """The replay's params file: the CommonRoad bags' (estimated tire forces) plus ``NODE.KEY=VALUE`` settings,
    and a tag naming the settings (the replay JSON's suffix)."""
    kind = VEHICLES[name][0]
    doc = yaml.safe_load((FOREIGN / "replay_estimated.yaml").read_text()) if kind == "commonroad" else {}
    for item in settings:
        key, _, value = item.partition("=")
        node, _, param = key.partition(".")
        doc.setdefault(f"/**/{node}", {}).setdefault("ros__parameters", {})[param] = yaml.safe_load(value)
    if not doc:
        return None, ""
    tag = "".join(f"_{k.replace('.', '-')}-{v}" for k, _, v in (x.partition("=") for x in settings))
    path = work / name / f"params{tag}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc))
    return path, tag


def calibrated(name: str, seed: int, work: Path, settings: list[str]) -> dict:
    _, _, desc = VEHICLES[name]
    params, tag = params_file(name, settings, work)
    out = work / name / f"replay_seed{seed}{tag}.json"
    if not out.exists():
        cmd = vehcal("replay", str(daily_bag(name, seed, work)), "--vehicle", desc, "--json", str(out), "--quiet")
        if params is not None:
            cmd += ["--params", str(params)]
        sh(cmd)
    doc = json.loads(out.read_text())
    accepted = sorted(s for s, c in doc["calibration"].items() if c.get("final") is not None)
    radius = (doc.get("counters") or {}).get("calibration_rolling_radius") or {}
    return {"parameters": doc["model_parameters"], "stages": accepted,
            "rolling_radius": radius.get("radius") if radius.get("used") else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vehicles", nargs="+", default=list(VEHICLES), choices=list(VEHICLES))
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    ap.add_argument("--work", type=Path, default=Path("/tmp/vehcal-bench-holdout"),
                    help="bags and fits (kept between runs; default /tmp/vehcal-bench-holdout)")
    ap.add_argument("--out", type=Path, default=None, help="also write the tables here (markdown)")
    ap.add_argument("--json", type=Path, default=None, help="also write the numbers here")
    ap.add_argument("--set", action="append", default=[], metavar="NODE.KEY=VALUE",
                    help="a replay parameter, e.g. model_calibrator.require_order=false (repeatable)")
    args = ap.parse_args()
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    lines, doc = [], {}
    for name in args.vehicles:
        print(name, flush=True)
        constants = VehicleConstants.from_description(VEHICLES[name][2])
        prior = constants.default_parameters()
        rows = []
        for seed in args.seeds:
            cal = calibrated(name, seed, args.work, args.set)
            table = records_to_table(rec for _, rec in read_bag(str(heldout_bag(name, seed, args.work))))
            params = {**prior, **{k: v for k, v in cal["parameters"].items() if k in prior and v is not None}}
            cal_constants = constants if cal["rolling_radius"] is None else VehicleConstants.from_description(
                load_description(VEHICLES[name][2]).with_rolling_radius(cal["rolling_radius"]))
            rows.append({"seed": seed, "stages": cal["stages"],
                         "prior": holdout_rmse(table, prior, t_start=1.0, constants=constants),
                         "calibrated": holdout_rmse(table, params, t_start=1.0, constants=cal_constants),
                         "rolling_radius": cal["rolling_radius"],
                         "parameters": {k: params[k] for k in sorted(params) if params[k] != prior[k]}})
        n = len(rows)
        summary, ratio, worse = {}, 0.0, []
        for c in TABLE9_CHANNELS:
            p = np.array([r["prior"][c] for r in rows])
            q = np.array([r["calibrated"][c] for r in rows])
            d = q - p
            se = float(d.std(ddof=1) / np.sqrt(n)) if n > 1 else float("nan")
            summary[c] = {"prior": float(p.mean()), "calibrated": float(q.mean()), "diff": float(d.mean()),
                          "se": se}
            ratio += float(q.mean() / p.mean()) if p.mean() > 0 else 1.0
            if d.mean() > se:
                worse.append(c)
        met = ratio < len(TABLE9_CHANNELS) and not worse
        doc[name] = {"rows": rows, "summary": summary, "summed_ratio": ratio, "worse": worse, "met": met}
        stages = ", ".join(f"seed {r['seed']}: {'+'.join(r['stages']) or 'none'}" for r in rows)
        lines += [f"### {name} (description `{Path(VEHICLES[name][2]).name}`)", "",
                  f"Stages accepted from the daily drive: {stages}.", "",
                  "| channel | priors | calibrated | calibrated - priors (+- 1 SE) |", "|---|---|---|---|"]
        for c in TABLE9_CHANNELS:
            s = summary[c]
            flag = " **worse**" if c in worse else ""
            lines.append(f"| {c} | {s['prior']:.4g} | {s['calibrated']:.4g} | {s['diff']:+.3g} +- {s['se']:.2g}"
                         f"{flag} |")
        lines += ["", f"Summed ratio calibrated / priors: {ratio:.2f} (priors {len(TABLE9_CHANNELS)}); channels worse "
                  f"by > 1 SE: {', '.join(worse) or 'none'} -> **{'met' if met else 'not met'}**", ""]
    wall = time.perf_counter() - t0
    head = [f"{started}, load average {load0:.1f} at the start, {os.getloadavg()[0]:.1f} at the end (2 cores); "
            f"{wall:.0f} s wall (including simulations and replays not already cached); seeds "
            f"{' '.join(map(str, args.seeds))}; replay settings {' '.join(args.set) or 'the shipped defaults'}; "
            "mean RMSE over the seeds.", ""]
    text = "\n".join(head + lines)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    if args.json:
        args.json.write_text(json.dumps(doc, indent=1, default=float) + "\n")


if __name__ == "__main__":
    main()
