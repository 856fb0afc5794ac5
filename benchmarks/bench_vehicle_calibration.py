"""Benchmark: calibrate the 8-DOF model of any vehicle from its simulated maneuvers, stages chained across files,
and test it on the held-out test maneuver against the description's prior means.

Steps (all through the CLI, as a user would; needs the simulator's vehicle support, ``vehcal simulate --vehicle``):

    vehcal simulate {throttle_ramp,steering_ramp,coast_down,test_maneuver} --vehicle V --bag DIR/<name>
    vehcal calibrate DIR/throttle_ramp --stage longitudinal --vehicle V --json lon.json
    vehcal calibrate DIR/steering_ramp --stage lateral --vehicle V --model lon.json --json lat.json
    vehcal calibrate DIR/coast_down --stage rolling_resistance --vehicle V --model lat.json --json rr.json

then the held-out Table 9 RMSE on ``test_maneuver`` (the 8-DOF model started from the measured state at 1 s,
estimation/calibration/holdout.py) for the calibrated parameters (rr.json carries all three stages) and for the
prior means (the description's nominal values: the midpoints of its prior ranges unless the file sets them).

Run: PYTHONPATH=. .venv/bin/python benchmarks/bench_vehicle_calibration.py --vehicle sedan --work DIR
     [--chains 4 --draws 500] [--skip-simulate] [--skip-calibrate]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import yaml

from vehcal_ros.cli import main as vehcal
from vehcal_ros.estimation.calibration.holdout import TABLE9_CHANNELS, holdout_rmse, records_to_table
from vehcal_ros.io.bags import read_bag
from vehcal_ros.io.model_file import load_model_file
from vehcal_ros.io.scenarios import vehicle_scenario_name
from vehcal_ros.models.vehicle_8dof import VehicleConstants
from vehcal_ros.resources import find_resource

MANEUVERS = ("throttle_ramp", "steering_ramp", "coast_down", "test_maneuver")
CHAIN = (("longitudinal", "throttle_ramp", None, "lon.json"), ("lateral", "steering_ramp", "lon.json", "lat.json"),
         ("rolling_resistance", "coast_down", "lat.json", "rr.json"))


def noise_free_scenario(name: str, vehicle: str, work: Path) -> Path:
    """A copy of the vehicle's version of scenario ``name`` with every sensor's noise and bias set to zero."""
    scen = vehicle_scenario_name(name, vehicle)
    doc = yaml.safe_load(Path(find_resource("config", "scenarios", f"{scen}.yaml")).read_text())
    for sensor in (doc.get("sensors") or {}).values():
        if isinstance(sensor, dict):
            sensor.pop("bias", None)
            sensor["noise_std"] = 0.0
    doc["name"] = f"{doc['name']}_clean"
    out = work / f"{scen}_clean.yaml"
    out.write_text(yaml.safe_dump(doc))
    return out


def run(argv: list[str]) -> None:
    t0 = time.perf_counter()
    rc = vehcal(argv)
    print(f"vehcal {' '.join(argv)}: rc {rc}, {time.perf_counter() - t0:.0f} s", flush=True)
    if rc:
        raise SystemExit(rc)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--vehicle", default="sedan")
    ap.add_argument("--work", default="/tmp/vehcal-bench-vehicle-calibration",
                    help="bags and fits (default /tmp/vehcal-bench-vehicle-calibration)")
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--draws", type=int, default=500)
    ap.add_argument("--draws-lateral", type=int, default=None,
                    help="draws of the lateral stage (default --draws; the front/rear roll-stiffness split of one "
                         "steering ramp needs more)")
    ap.add_argument("--out", default=None, help="also write the summary here (benchmarks/vehicle_calibration_*.md)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--noise-prior-factor", type=float, default=10.0)
    ap.add_argument("--skip-simulate", action="store_true")
    ap.add_argument("--skip-calibrate", action="store_true")
    args = ap.parse_args()
    work = Path(args.work)
    bags = work / "bags"
    bags.mkdir(parents=True, exist_ok=True)
    if not args.skip_simulate:
        for m in MANEUVERS:
            run(["simulate", m, "--vehicle", args.vehicle, "--bag", str(bags / m), "--seed", str(args.seed)])
    clean = bags / "test_maneuver_clean"
    if not clean.exists():   # the same test maneuver without sensor noise: the Table 9 comparison's reference
        run(["simulate", str(noise_free_scenario("test_maneuver", args.vehicle, work)), "--vehicle", args.vehicle,
             "--bag", str(clean), "--seed", str(args.seed)])
    t0, c0 = time.perf_counter(), time.process_time()
    if not args.skip_calibrate:
        for stage, bag, model, out in CHAIN:
            draws = args.draws_lateral if stage == "lateral" and args.draws_lateral else args.draws
            argv = ["calibrate", str(bags / bag), "--stage", stage, "--vehicle", args.vehicle, "--chains",
                    str(args.chains), "--draws", str(draws), "--seed", str(args.seed), "--json", str(work / out),
                    "--noise-prior-factor", str(args.noise_prior_factor)]
            if model:
                argv += ["--model", str(work / model)]
            run(argv)
    constants = VehicleConstants.from_description(args.vehicle)
    prior = constants.default_parameters()
    calibrated = {**prior, **load_model_file(work / "rr.json")}
    r_prior, r_cal = {}, {}
    for key, bag in (("clean", clean), ("noisy", bags / "test_maneuver")):
        table = records_to_table(rec for _, rec in read_bag(str(bag)))
        r_prior[key] = holdout_rmse(table, prior, t_start=1.0, constants=constants)
        r_cal[key] = holdout_rmse(table, calibrated, t_start=1.0, constants=constants)
    stages = {s: json.loads((work / out).read_text()) for s, _, _, out in CHAIN}
    load = os.getloadavg()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    lines = [f"vehicle {args.vehicle}, {args.chains} chains x {args.draws} draws (lateral "
             f"{args.draws_lateral or args.draws}), seed {args.seed}, noise prior factor {args.noise_prior_factor:g}, "
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average {load[0]:.1f} (2 cores, shared); "
             f"calibration {wall:.0f} s wall, {cpu:.0f} CPU s", "",
             "| stage | converged | max R-hat | min bulk ESS | initial gear | parameter means |",
             "|---|---|---|---|---|---|"]
    for s, doc in stages.items():
        means = ", ".join(f"{k} {v['mean']:.4g}" for k, v in doc["parameters"].items())
        summ = [*doc["parameters"].values(), *doc["noise"].values()]
        lines.append(f"| {s} | {doc['converged']} | {max(v['r_hat'] for v in summ):.4f} | "
                     f"{min(v['ess_bulk'] for v in summ):.0f} | {doc.get('smc', {}).get('initial_gear')} | {means} |")
    lines += ["", "Held-out test maneuver, 8-DOF from the measured state at 1 s; RMSE against the noise-free run (the "
              "reference) and against the noisy bag (sensor noise u 0.1 m/s, w 1 rad/s dominates it)", "",
              "| channel | prior means (noise-free) | calibrated (noise-free) | better | prior means (noisy) | "
              "calibrated (noisy) |", "|---|---|---|---|---|---|"]
    for c in TABLE9_CHANNELS:
        pc, cc, pn, cn = r_prior["clean"][c], r_cal["clean"][c], r_prior["noisy"][c], r_cal["noisy"][c]
        lines.append(f"| {c} | {pc:.4g} | {cc:.4g} | {cc < pc} | {pn:.4g} | {cn:.4g} |")
    n_better = sum(r_cal["clean"][c] < r_prior["clean"][c] for c in TABLE9_CHANNELS)
    lines.append(f"\ncalibrated better than the prior means on {n_better} of {len(TABLE9_CHANNELS)} Table 9 channels "
                 "(noise-free reference)")
    text = "\n".join(lines)
    (work / "summary.md").write_text(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
