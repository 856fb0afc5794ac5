"""Grip over time on the vehicle zoo: random vehicles the estimator was not developed on, described from their
spec sheets only.

For each zoo vehicle (benchmarks/zoo/vehicles/<name>/: model file, scenario, spec sheet): simulate its drive on the
14-DOF simulator with the tire-force topic off (production sensors: wheel speeds with ECU torque, IMU, odometry,
GNSS velocity, controls), write the description from its spec sheet (vehcal_ros/vehicle/spec_sheet.py: nothing
else about the vehicle), replay with ``force_source: estimated`` and the shipped defaults, and score the belief in
force over time (vehcal_ros/estimation/grip/scoring.py). Prints one row per vehicle and the pooled figures.

Usage:  python benchmarks/zoo/run_zoo.py [--only zoo_03 zoo_07] [--bag-dir DIR] [--json OUT] [--seed 0]
        [--grip-param NAME=VALUE ...]
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import sys
import tempfile
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from grip_over_time import score_drive, verdict  # noqa: E402

from vehcal_ros.estimation.grip.scoring import pooled_scores  # noqa: E402
from vehcal_ros.io import bags  # noqa: E402
from vehcal_ros.io.scenarios import load_scenario  # noqa: E402
from vehcal_ros.io.simulate import ScenarioRun  # noqa: E402
from vehcal_ros.vehicle.spec_sheet import description_yaml_from_spec  # noqa: E402

VEHICLES = HERE / "vehicles"


def vehicles(only: list[str]) -> list[Path]:
    """The zoo's vehicle folders (sorted), or the named ones."""
    found = sorted(p for p in VEHICLES.iterdir() if p.is_dir() and (p / "spec_sheet.yaml").exists())
    return [p for p in found if not only or p.name in only]


def description_file(folder: Path, out: Path) -> Path:
    """The vehicle description written from the folder's spec sheet alone."""
    spec = yaml.safe_load((folder / "spec_sheet.yaml").read_text())
    out.write_text(description_yaml_from_spec(spec, header=f"# from {folder.name}/spec_sheet.yaml\n"))
    return out


def simulate(folder: Path, seed: int, bag: Path) -> None:
    scenario = load_scenario(folder / "scenario.yaml").with_seed(seed).without_sensor("tire_forces")
    bags.write_bag(bag, ScenarioRun(scenario))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", default=[])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--bag-dir", default=None)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--grip-param", action="append", default=[], metavar="NAME=VALUE")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    extra = {k.strip(): yaml.safe_load(v) for k, _, v in (p.partition("=") for p in args.grip_param)}
    load_before = os.getloadavg()[0]
    rows, per_vehicle = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.bag_dir) if args.bag_dir else Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        print(f"{'vehicle':8} {'drive':5} {'inside':>6} {'over':>5} {'avail':>5} {'IS':>6} {'usable':>6}  verdict")
        for folder in vehicles(args.only):
            spec = yaml.safe_load((folder / "spec_sheet.yaml").read_text())["spec_sheet"]
            bag = root / f"{folder.name}_{args.seed}"
            if not bag.exists():
                simulate(folder, args.seed, bag)
            desc = description_file(folder, Path(tmp) / f"{folder.name}.yaml")
            r = score_drive(bag, str(desc), "estimated", args.seed, args.jobs, extra)
            d = r["drive"]
            per_vehicle[folder.name] = r["per_scope"]
            print(f"{folder.name:8} {spec['drive']:5} {d['inside']:6.2f} {d['overstated']:5.2f} {d['available']:5.2f} "
                  f"{d['interval_score']:6.3f} {d['usable_lower']:6.2f}  {verdict(d, None)}", flush=True)
            rows.append({"vehicle": folder.name, "layout": spec["drive"], "mass": spec["mass"], **r})
    pooled = pooled_scores({f"{v}/{s}": f for v, scopes in per_vehicle.items() for s, f in scopes.items()})
    worst = max((row["drive"]["overstated"] for row in rows), default=float("nan"))
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    print(f"pooled over {len(rows)} vehicles: inside {pooled['inside']:.3f}, overstated {pooled['overstated']:.3f}, "
          f"available {pooled['available']:.3f} (fitted {pooled['available_fit']:.3f}), "
          f"interval score {pooled['interval_score']:.3f}, usable lower "
          f"{pooled['usable_lower']:.3f}; worst vehicle overstated {worst:.3f}")
    print(f"date {stamp}; load (1 min) before {load_before:.2f}, after {os.getloadavg()[0]:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"date": stamp, "seed": args.seed, "grip_params": extra,
                                               "pooled": pooled, "runs": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
