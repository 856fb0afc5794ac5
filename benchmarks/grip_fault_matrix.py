"""The grip estimate over time under one description error or sensor fault at a time (the error and fault matrix).

For each vehicle (hmmwv simulated with its description ``hmmwv_sim``, sedan with ``sedan``) and each row, the
``daily_driving`` scenario (the vehicle's own version) is simulated with the tire-force topic off and replayed
with ``force_source: estimated``; the belief in force is scored over time by ``grip_over_time.score_drive``
(inside, overstated, available, interval score, usable lower bound; per scope and pooled over the drive).

Rows (each alone; the simulator is untouched by description rows, the description by sensor rows):

* description errors, written into a copy of the shipped description the replay is given: sprung mass +-10 %,
  CG height +-5 cm, CG 5 cm rearwards / forwards (``cg.to_front_axle`` +-5 cm, ``to_rear_axle`` -+5 cm: the
  wheelbase kept), rolling radius +-1 % (``tire.unloaded_radius`` moved by 1 % of the mean static rolling radius
  r0 - Fz/kt of the two axles, so r0 - Fz/kt moves 1 %), wheel spin inertias +-20 %, steering ratio +-5 %;
* sensor faults, scenario sensor options (docs/simulator_io.md): wheel-torque offset +-5 % of the typical
  drive torque (measured on the clean drive: the median, over samples with throttle > 0.05, of the largest
  wheel torque), wheel-torque scale +-5 %, accelerometer bias 0.1 m/s^2 on x and y, wheel-speed encoder of 48
  teeth counted over 10 ms (steps of 13.09 rad/s), the IMU's stamps 20 ms late with +-5 ms uniform jitter, and
  the IMU mounted 1 deg off about y and z;
* road grade +-5 % (scenario ``road.grade``: the whole road rises, or falls, 5 % along +x, the direction of
  the drive; models/vehicle14/road.py), the description untouched.

Each row also reports the online rolling-radius scale k per axle at the end of the drive (the estimator's own
RollingRadiusEstimator run over the bag with the row's description): the figure that names a radius error on
/diagnostics.

``grip_fault_signatures.py`` reads the kept bags (``--bag-dir``) for the signals that name each row's doubtful input.

Usage:  python benchmarks/grip_fault_matrix.py [--vehicles hmmwv sedan] [--rows clean mass+10% ...]
        [--seeds 0] [--bag-dir DIR] [--jobs 1] [--json OUT] [--grip-param NAME=VALUE ...]
        python benchmarks/grip_fault_matrix.py --markdown OUT.json [...]   (the table of earlier runs)
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from grip_over_time import score_drive  # noqa: E402

from vehcal_ros.estimation.sensing.rolling_radius import RollingRadiusConfig, RollingRadiusEstimator  # noqa: E402
from vehcal_ros.io import bags  # noqa: E402
from vehcal_ros.io.scenarios import Scenario, load_scenario  # noqa: E402
from vehcal_ros.io.simulate import ScenarioRun  # noqa: E402
from vehcal_ros.records import Controls, WheelSpeeds  # noqa: E402
from vehcal_ros.vehicle.description import load_description, vehicle_path  # noqa: E402

DESCRIPTIONS = {"hmmwv": "hmmwv_sim", "sedan": "sedan"}
"""Shipped description of each simulated vehicle."""
TARGETS = {"inside": (">=", 0.80), "overstated": ("<=", 0.05)}
"""Per-row targets on the pooled over-time figures."""
TORQUE_FRACTION = 0.05
"""Wheel-torque offset as a fraction of the typical drive torque."""

DocEdit = Callable[[dict], None]


def _scale(path: str, factor: float) -> DocEdit:
    def edit(doc: dict) -> None:
        node = doc
        *parents, leaf = path.split(".")
        for p in parents:
            node = node[p]
        node[leaf] = float(node[leaf]) * factor
    return edit


def _shift(path: str, delta: float) -> DocEdit:
    def edit(doc: dict) -> None:
        node = doc
        *parents, leaf = path.split(".")
        for p in parents:
            node = node[p]
        node[leaf] = float(node[leaf]) + delta
    return edit


def _cg_longitudinal(delta: float) -> DocEdit:
    """CG ``delta`` m rearwards (to_front_axle + delta, to_rear_axle - delta; the wheelbase kept)."""
    def edit(doc: dict) -> None:
        doc["cg"]["to_front_axle"] = float(doc["cg"]["to_front_axle"]) + delta
        doc["cg"]["to_rear_axle"] = float(doc["cg"]["to_rear_axle"]) - delta
    return edit


def _spin_inertia(factor: float) -> DocEdit:
    def edit(doc: dict) -> None:
        for k in ("spin_inertia_front", "spin_inertia_rear"):
            doc["wheel"][k] = float(doc["wheel"][k]) * factor
    return edit


def _rolling_radius(fraction: float, desc_name: str) -> DocEdit:
    """r0 - Fz/kt moved by ``fraction`` of the mean static rolling radius of the two axles (a given
    ``tire.rolling_radius`` is scaled instead)."""
    def edit(doc: dict) -> None:
        tire = doc["tire"]
        if tire.get("rolling_radius") is not None:
            tire["rolling_radius"] = float(tire["rolling_radius"]) * (1.0 + fraction)
            return
        desc = load_description(desc_name)
        rf, rr = desc.rolling_radius_at(*desc.static_wheel_loads())
        tire["unloaded_radius"] = float(tire["unloaded_radius"]) + fraction * 0.5 * (rf + rr)
    return edit


def description_rows(desc_name: str) -> dict[str, DocEdit]:
    """Row name -> edit of the description document."""
    return {
        "mass+10%": _scale("mass.sprung", 1.10), "mass-10%": _scale("mass.sprung", 0.90),
        "cg_height+5cm": _shift("cg.height", 0.05), "cg_height-5cm": _shift("cg.height", -0.05),
        "cg_rearward5cm": _cg_longitudinal(0.05), "cg_forward5cm": _cg_longitudinal(-0.05),
        "radius+1%": _rolling_radius(0.01, desc_name), "radius-1%": _rolling_radius(-0.01, desc_name),
        "spin_inertia+20%": _spin_inertia(1.20), "spin_inertia-20%": _spin_inertia(0.80),
        "steer_ratio+5%": _scale("steering.ratio", 1.05), "steer_ratio-5%": _scale("steering.ratio", 0.95),
    }


def sensor_rows(typical_torque: float) -> dict[str, Callable[[Scenario], Scenario]]:
    """Row name -> the scenario with that sensor fault (``typical_torque``: N m, the typical drive torque)."""
    offset = TORQUE_FRACTION * typical_torque
    return {
        "torque_offset+5%": lambda s: s.with_sensor_fault("wheel_speeds", bias={"torque": offset}),
        "torque_offset-5%": lambda s: s.with_sensor_fault("wheel_speeds", bias={"torque": -offset}),
        "torque_scale+5%": lambda s: s.with_sensor_fault("wheel_speeds", torque_scale=1.05),
        "torque_scale-5%": lambda s: s.with_sensor_fault("wheel_speeds", torque_scale=0.95),
        "accel_bias0.1": lambda s: s.with_sensor_fault("imu", bias={"ax": 0.1, "ay": 0.1}),
        "encoder48x10ms": lambda s: s.with_sensor_fault("wheel_speeds", quantisation_teeth=48,
                                                        quantisation_window=0.01),
        "imu_stamp20ms+-5": lambda s: s.with_sensor_fault("imu", stamp_latency=0.02, stamp_jitter=0.005),
        "imu_misalign1deg": lambda s: s.with_sensor_fault("imu", misalignment_deg=(0.0, 1.0, 1.0)),
        "grade+5%": lambda s: s.with_grade(0.05),
        "grade-5%": lambda s: s.with_grade(-0.05),
    }


ROW_ORDER = ["clean", "mass+10%", "mass-10%", "cg_height+5cm", "cg_height-5cm", "cg_rearward5cm", "cg_forward5cm",
             "radius+1%", "radius-1%", "spin_inertia+20%", "spin_inertia-20%", "steer_ratio+5%", "steer_ratio-5%",
             "torque_offset+5%", "torque_offset-5%", "torque_scale+5%", "torque_scale-5%", "accel_bias0.1",
             "encoder48x10ms", "imu_stamp20ms+-5", "imu_misalign1deg", "grade+5%", "grade-5%"]


def base_scenario(vehicle: str, seed: int) -> Scenario:
    """The vehicle's daily drive with ``seed``, tire-force topic off (a production car)."""
    return load_scenario("daily_driving", vehicle=vehicle).with_seed(seed).without_sensor("tire_forces")


class TorqueProbe:
    """Passes the run's items through and keeps the largest wheel torque (N m) at samples with throttle > 0.05."""

    def __init__(self, items: Iterable[tuple]) -> None:
        self.items = items
        self.throttle = 0.0
        self.torques: list[float] = []

    def __iter__(self) -> Iterator[tuple]:
        for item in self.items:
            rec = item[1]
            if isinstance(rec, Controls):
                self.throttle = rec.throttle
            elif isinstance(rec, WheelSpeeds) and rec.torque is not None and self.throttle > 0.05:
                self.torques.append(float(np.max(rec.torque)))
            yield item

    def typical(self) -> float:
        """Median of the kept torques, N m (nan if none)."""
        return float(np.median(self.torques)) if self.torques else math.nan


def simulate(scenario: Scenario, out: Path, probe: bool = False) -> tuple[float, float]:
    """The scenario into the bag ``out``: (wall s, typical drive torque N m or nan)."""
    t0 = time.perf_counter()
    items: Any = ScenarioRun(scenario)
    if probe:
        items = TorqueProbe(items)
    bags.write_bag(out, items)
    return time.perf_counter() - t0, items.typical() if probe else math.nan


def radius_scale(bag: Path, description: str) -> dict[str, list[float]]:
    """The online rolling-radius scale k and its SD per axle (front, rear) at the end of the bag, for the
    description (the estimator's RollingRadiusEstimator over the bag's records in stamp order)."""
    est = RollingRadiusEstimator(RollingRadiusConfig.from_description(load_description(description)))
    for _, rec in bags.read_bag(bag):
        est.add(rec)
    est.flush()
    return {"k": [float(x) for x in est.k], "sd": [float(x) for x in est.sd]}


def write_description(desc_name: str, edit: DocEdit, out: Path) -> Path:
    """A copy of the shipped description with ``edit`` applied, validated by loading it."""
    doc = yaml.safe_load(vehicle_path(desc_name).read_text(encoding="utf-8"))
    edit(doc)
    out.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    load_description(out)
    return out


def verdict(figures: dict) -> str:
    """The targets a row misses, or 'ok'."""
    miss = [f"{k} {figures[k]:.2f}" for k, (op, v) in TARGETS.items()
            if not (figures[k] >= v if op == ">=" else figures[k] <= v)]
    return "ok" if not miss else "MISS " + ", ".join(miss)


def named(doubts: list[str] | None) -> str:
    """What the grip estimator's ``vehicle description`` status names at the end of the drive, by its subject
    (the text before the first colon): "-" for nothing, "?" for a run that did not record it."""
    if doubts is None:
        return "?"
    return "; ".join(d.split(":")[0] for d in doubts) or "-"


def markdown_table(results: list[dict]) -> str:
    """The rows of one or more JSON outputs as a markdown table (row, vehicle, seed, pooled figures, k, verdict)."""
    out = ["| row | vehicle | seed | inside | overstated | available | interval score | usable lower | k front | "
           "k rear | verdict | named on /diagnostics |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    rows = [r for res in results for r in res["rows"]]
    order = {name: i for i, name in enumerate(ROW_ORDER)}
    rows.sort(key=lambda r: (r["vehicle"], order.get(r["row"], 99), r["seed"]))
    for r in rows:
        d, k = r["drive"], r["radius"]["k"]
        out.append(f"| {r['row']} | {r['vehicle']} | {r['seed']} | {d['inside']:.2f} | {d['overstated']:.2f} | "
                   f"{d['available']:.2f} | {d['interval_score']:.3f} | {d['usable_lower']:.2f} | {k[0]:.4f} | "
                   f"{k[1]:.4f} | {r['verdict']} | {named(r.get('doubtful'))} |")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vehicles", nargs="+", default=["hmmwv", "sedan"], choices=sorted(DESCRIPTIONS))
    ap.add_argument("--rows", nargs="+", default=ROW_ORDER, choices=ROW_ORDER)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--bag-dir", default=None, help="keep the simulated bags here (reused when present)")
    ap.add_argument("--jobs", type=int, default=1, help="replay worker processes")
    ap.add_argument("--json", default=None)
    ap.add_argument("--grip-param", action="append", default=[], metavar="NAME=VALUE",
                    help="a grip_estimator parameter for every row's replay (e.g. torque_scale_learning=true)")
    ap.add_argument("--markdown", nargs="+", default=None, metavar="JSON",
                    help="print the rows of these JSON outputs as a markdown table and exit")
    args = ap.parse_args()
    extra = {}
    for item in args.grip_param:
        name, _, value = item.partition("=")
        extra[name.strip()] = yaml.safe_load(value)
    if args.markdown:
        print(markdown_table([json.loads(Path(f).read_text()) for f in args.markdown]))
        return 0
    load_before = os.getloadavg()[0]
    rows: list[dict] = []
    print(f"{'row':18} {'vehicle':7} {'seed':>4} {'inside':>6} {'over':>5} {'avail':>5} {'IS':>6} {'usable':>6} "
          f"{'k_front':>8} {'k_rear':>7}  verdict", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.bag_dir) if args.bag_dir else Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        for vehicle in args.vehicles:
            desc_name = DESCRIPTIONS[vehicle]
            desc_edits = description_rows(desc_name)
            for seed in args.seeds:
                clean_bag = root / f"{vehicle}_clean_{seed}"
                typical_file = root / f"{vehicle}_clean_{seed}.torque.json"
                if clean_bag.exists() and typical_file.exists():
                    typical = json.loads(typical_file.read_text())["typical_drive_torque"]
                else:
                    if clean_bag.exists():
                        bags.remove_bag(clean_bag)
                    _, typical = simulate(base_scenario(vehicle, seed), clean_bag, probe=True)
                    typical_file.write_text(json.dumps({"typical_drive_torque": typical}))
                faults = sensor_rows(typical)
                for row in args.rows:
                    t0 = time.perf_counter()
                    description, bag, fault = desc_name, clean_bag, {}
                    if row in desc_edits:
                        description = str(write_description(desc_name, desc_edits[row],
                                                            root / f"{vehicle}_{row}.yaml"))
                    elif row in faults:
                        scenario = faults[row](base_scenario(vehicle, seed))
                        bag = root / f"{vehicle}_{row}_{seed}"
                        if not bag.exists():
                            simulate(scenario, bag)
                        spec = {k: scenario.sensors[k] for k in ("wheel_speeds", "imu")}
                        fault = {k: {"bias": dict(s.bias), "torque_scale": s.torque_scale,
                                     "quantisation_teeth": s.quantisation_teeth,
                                     "quantisation_window": s.quantisation_window,
                                     "misalignment_deg": list(s.misalignment_deg), "stamp_latency": s.stamp_latency,
                                     "stamp_jitter": s.stamp_jitter} for k, s in spec.items()}
                        fault["road_grade"] = scenario.road.grade
                    r = score_drive(bag, description, "estimated", seed, args.jobs, extra)
                    k = radius_scale(bag, description)
                    d = r["drive"]
                    v = verdict(d)
                    print(f"{row:18} {vehicle:7} {seed:4d} {d['inside']:6.2f} {d['overstated']:5.2f} "
                          f"{d['available']:5.2f} {d['interval_score']:6.3f} {d['usable_lower']:6.2f} "
                          f"{k['k'][0]:8.4f} {k['k'][1]:7.4f}  {v}  {'; '.join(r['doubtful'])}", flush=True)
                    rows.append({"row": row, "vehicle": vehicle, "seed": seed, "description": description,
                                 "fault": fault, "typical_drive_torque": typical, "drive": d,
                                 "per_scope": r["per_scope"], "radius": k, "verdict": v,
                                 "doubtful": r["doubtful"],
                                 "replay_wall_s": r["replay_wall_s"], "wall_s": time.perf_counter() - t0})
                    if row in faults and not args.bag_dir:
                        bags.remove_bag(bag)
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    load_after = os.getloadavg()[0]
    print(f"daily_driving, force_source estimated; date {stamp}; load (1 min) before {load_before:.2f}, "
          f"after {load_after:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"scenario": "daily_driving", "forces": "estimated",
                                               "targets": TARGETS, "date": stamp, "grip_params": extra,
                                               "load": [load_before, load_after], "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
