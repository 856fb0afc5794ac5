"""Tire forces from production sensors: accuracy of the estimated Fx/Fz and the grip intervals.

1. Simulates a scenario (default ``daily_driving``) with the tire-force topic OFF (``vehcal simulate
   --no-tire-forces``: wheel speeds with the net torque in ``JointState.effort``, IMU, odometry, controls and
   the ground truth, which keeps the true Fx/Fz per wheel) into a bag.
2. Streams the bag's wheel-speed and IMU records through
   :class:`~vehcal_ros.estimation.sensing.tire_forces.TireForceEstimator` (the path the grip estimator and
   bag replay take) and compares the estimated Fx/Fz with the simulator's true forces at the same stamps:
   bias and RMS per wheel (moving samples, u >= 3 m/s), and how well the stated variances describe the errors
   (SD of the z-scores of 0.1 s block means, the friction samples the grip fit sees).
3. ``vehcal replay`` of the bag with ``force_source: estimated``: per published grip estimate whether its 90 %
   interval contains the true mu_max (at most the first estimate after a road change may miss).

The estimator's vehicle constants are the description ``vehcal vehicle describe VEHICLE`` derives from the
simulator's model file (what a user would measure), with the rolling-resistance lever of its tire data
(QSY1 R0; describe writes a prior midpoint there). For the replay the grip estimator's slip geometry (axle
positions, track, rolling radius, steering gain) comes from the same description, as a user's params file would,
and so do the toe tables, wheel rates, pitch at rest and the tire's combined-slip law that
give each friction sample its wheel heading and slip angle (the replay's ``vehicle`` parameter is that file).

Usage:  python benchmarks/bench_tire_forces.py [--vehicle hmmwv|sedan] [--scenario daily_driving] [--seed 0]
        [--torque-noise 20] [--skip-replay] [--json OUT] [--bag DIR]
Prints the figures and one markdown row for benchmarks/README_tire_forces.md (with date and load).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from vehcal_ros.estimation.grip.friction_samples import WHEELS
from vehcal_ros.estimation.sensing.tire_forces import (
    TireForceConfig,
    TireForceEstimator,
    TireForceVehicle,
    block_variance_factor,
)
from vehcal_ros.io import bags
from vehcal_ros.io.scenarios import load_scenario
from vehcal_ros.io.simulate import ScenarioRun
from vehcal_ros.records import GroundTruth, ImuSample, OdomSample, WheelSpeeds
from vehcal_ros.replay.serial import replay_bag


def simulate(scenario_name: str, vehicle: str, seed: int, out: Path) -> float:
    scenario = load_scenario(scenario_name, vehicle=vehicle).with_seed(seed).without_sensor("tire_forces")
    t0 = time.perf_counter()
    bags.write_bag(out, ScenarioRun(scenario))
    return time.perf_counter() - t0


def force_accuracy(bag: Path, config: TireForceConfig, block: int = 10) -> dict:
    """Estimated vs true Fx/Fz per wheel (see the module docstring)."""
    est = TireForceEstimator(config)
    truth: dict[float, GroundTruth] = {}
    u_at: dict[float, float] = {}
    rows = []
    for _, rec in bags.read_bag(bag):
        if isinstance(rec, GroundTruth):
            truth[round(rec.t, 6)] = rec
        elif isinstance(rec, OdomSample):
            u_at[round(rec.t, 6)] = rec.u
        elif isinstance(rec, ImuSample):
            est.add_imu(rec)
        elif isinstance(rec, WheelSpeeds):
            for f in est.add_wheel_speeds(rec):
                rows.append((rec.t, f.wheel, f.fx, f.fz, f.fx_var, f.fz_var, f.fx_rho))
    a = np.array(rows)
    keep = []
    tf, tz, u = [], [], []
    for r in a:
        g = truth.get(round(r[0], 6))
        keep.append(g is not None and g.fx is not None)
        tf.append(g.fx[int(r[1])] if keep[-1] else np.nan)
        tz.append(g.fz[int(r[1])] if keep[-1] else np.nan)
        u.append(u_at.get(round(r[0], 6), np.nan))
    a = a[np.array(keep)]
    tf, tz, u = (np.array(x)[np.array(keep)] for x in (tf, tz, u))
    moving = u >= 3.0
    out: dict = {"n_samples": int(moving.sum()), "wheels": {}}
    for i, w in enumerate(WHEELS):
        m = moving & (a[:, 1] == i)
        ex, ez = a[m, 2] - tf[m], a[m, 3] - tz[m]
        # block means of `block` consecutive samples (the collector's 0.1 s friction samples)
        nb = ex.size // block
        bx = ex[: nb * block].reshape(nb, block).mean(1)
        vx = a[m, 4][: nb * block].reshape(nb, block).mean(1)
        rho = a[m, 6][: nb * block].reshape(nb, block).mean(1)
        vb = vx * np.array([block_variance_factor(r, block) for r in rho]) / block
        mu_true = tf[m] / tz[m]
        mu_est = a[m, 2] / a[m, 3]
        bmu = (mu_est - mu_true)[: nb * block].reshape(nb, block).mean(1)
        out["wheels"][w] = {
            "fx_bias": float(ex.mean()), "fx_rms": float(np.sqrt(np.mean(ex ** 2))),
            "fx_sd_stated": float(np.sqrt(a[m, 4].mean())),
            "fx_block_rms": float(np.sqrt(np.mean(bx ** 2))), "fx_block_sd_stated": float(np.sqrt(vb.mean())),
            "fx_block_z_sd": float(np.std(bx / np.sqrt(vb))),
            "fz_bias": float(ez.mean()), "fz_rms": float(np.sqrt(np.mean(ez ** 2))),
            "fz_sd_stated": float(np.sqrt(a[m, 5].mean())),
            "fz_rel_rms": float(np.sqrt(np.mean((ez / tz[m]) ** 2))),
            "mu_block_bias": float(bmu.mean()), "mu_block_rms": float(np.sqrt(np.mean(bmu ** 2))),
        }
    out["counters"] = dict(est.counters)
    return out


def description_file(vehicle: str, out: Path) -> tuple[Path, TireForceVehicle, dict]:
    """``vehcal vehicle describe VEHICLE`` with the tire's rolling-resistance lever, as a file; the force
    estimator's constants; the grip estimator's slip-geometry parameters from the same description."""
    import dataclasses

    import yaml

    from vehcal_ros.io.describe import describe_vehicle
    from vehcal_ros.models.vehicle14.params import load_simulator_params
    from vehcal_ros.vehicle.description import to_document

    desc = describe_vehicle(vehicle)
    tire = load_simulator_params(vehicle).tire
    desc = dataclasses.replace(desc, nominal={**desc.nominal, "rr": tire.qsy1 * tire.r0})
    out.write_text(yaml.safe_dump(to_document(desc), sort_keys=False))
    # the force estimator's lever base r0 - rolling_minus_loaded is the tire's unloaded radius R0 (describe writes
    # r0 such that r0 - Fz/kz is the free-rolling radius, and the difference to the loaded radius apart)
    veh = TireForceVehicle.from_description(desc)
    # slip: the simulator's tires roll at R0 - deflection / 3 (models/vehicle14/tires.py): kt = 3 kz
    geometry = {"wheelbase_front": veh.a, "wheelbase_rear": veh.b, "track": 0.5 * (veh.track_front + veh.track_rear),
                "r0": veh.r0, "kt": 3.0 * veh.kz[0], "steering_gain": desc.steer_gain}
    return out, veh, geometry


def grip_coverage(bag: Path, seed: int, grip_params: dict, jobs: int = 1) -> dict:
    """``vehcal replay`` with force_source estimated: coverage of the published 90 % intervals. ``jobs`` 1 runs
    the fits in this process, so the CPU seconds are measured (the numbers do not depend on it)."""
    t0, c0 = time.perf_counter(), time.process_time()
    params = {"grip_estimator": {"force_source": "estimated", **grip_params}}
    res = replay_bag(bag, params=params, seed=seed, calibration=False, workers=jobs)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    rows, n_in, n_all, n_excused, n_first = [], 0, 0, 0, 0
    for scope, s in res.grip.items():
        last_truth = None
        for k in range(s.t.size):
            truth = s.truth[k]
            inside = bool(s.lower[k] <= truth <= s.upper[k])
            first_of_scope = last_truth is None
            first_after_change = first_of_scope or abs(truth - last_truth) > 0.05
            last_truth = truth
            n_all += 1
            n_in += inside
            n_excused += (not inside) and first_after_change
            n_first += (not inside) and first_of_scope
            rows.append({"scope": scope, "t": float(s.t[k]), "truth": float(truth), "mean": float(s.mean[k]),
                         "lower": float(s.lower[k]), "upper": float(s.upper[k]), "inside": inside,
                         "first_after_change": first_after_change, "first_of_scope": first_of_scope})
    return {"n_estimates": n_all, "n_inside": n_in, "coverage": n_in / n_all if n_all else float("nan"),
            "misses_first_after_change": n_excused, "misses_first_of_scope": n_first,
            "coverage_excusing_first": (n_in + n_excused) / n_all if n_all else float("nan"),
            # the allowance read strictly: a scope's first estimate is not "after a road change"
            "coverage_strict": (n_in + n_excused - n_first) / n_all if n_all else float("nan"),
            "replay_wall_s": wall, "replay_cpu_s": cpu if jobs == 1 else float("nan"), "estimates": rows,
            "per_road": per_road(rows),
            "surface_changes_detected": res.counters.get("grip_surface_changes"),
            "samples_accepted": res.counters.get("grip_samples_accepted")}


def per_road(rows: list[dict]) -> dict[str, str]:
    """'inside / published' per scope and true mu_max (rounded to 0.05: one road patch each)."""
    out: dict[str, list[int]] = {}
    for r in rows:
        key = f"{r['scope']} mu {round(r['truth'] * 20) / 20:.2f}"
        k = out.setdefault(key, [0, 0])
        k[0] += r["inside"]
        k[1] += 1
    return {key: f"{a}/{b}" for key, (a, b) in sorted(out.items())}


def extra_params(items: list[str]) -> dict:
    """``NAME=VALUE`` pairs (values parsed as YAML) as a dict."""
    import yaml

    out = {}
    for item in items:
        name, _, value = item.partition("=")
        out[name.strip()] = yaml.safe_load(value)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vehicle", default="hmmwv",
                    help="simulated vehicle (hmmwv, sedan, sedan_zero_bump_steer or a model file)")
    ap.add_argument("--scenario", default="daily_driving", help="scenario (its <vehicle>_ version if it exists)")
    ap.add_argument("--torque-noise", type=float, default=None,
                    help="the estimator's torque_noise, N m (default: the scenario's wheel_speeds.torque noise)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--skip-replay", action="store_true")
    ap.add_argument("--grip-param", action="append", default=[], metavar="NAME=VALUE",
                    help="extra grip_estimator parameter for the replay (YAML value), e.g. surface_change_threshold=0")
    ap.add_argument("--jobs", type=int, default=1, help="replay worker processes (1: in this process, CPU s measured)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--bag", default=None, metavar="DIR",
                    help="keep the simulated bag here, or reuse it if it exists (same vehicle, scenario and seed)")
    args = ap.parse_args()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        bag = Path(args.bag) if args.bag else Path(tmp) / "drive"
        scenario = load_scenario(args.scenario, vehicle=args.vehicle)
        spec = scenario.sensors["wheel_speeds"]
        torque_noise = args.torque_noise if args.torque_noise is not None else float(spec.noise_std.get("torque", 0.0))
        omega_noise = float(spec.noise_std.get("omega", 0.0)) or 1e-3
        desc_path, veh, geometry = description_file(args.vehicle, Path(tmp) / "vehicle.yaml")
        sim_s = simulate(args.scenario, args.vehicle, args.seed, bag) if not bag.exists() else 0.0
        done = "reused" if sim_s == 0.0 else "simulated"
        print(f"{done} {scenario.name} on {args.vehicle} (seed {args.seed}, tire-force topic off) in {sim_s:.1f} s;"
              f" estimator: torque_noise {torque_noise} N m, wheel_speed_noise {omega_noise} rad/s")
        config = TireForceConfig(vehicle=veh, torque_std=torque_noise, wheel_speed_std=omega_noise)
        acc = force_accuracy(bag, config)
        print(f"force estimates: {acc['n_samples']} moving samples; counters {acc['counters']}")
        print("wheel     Fx bias  Fx RMS  (stated SD)  Fx 0.1s-block RMS (stated)  z-SD |  Fz bias  Fz RMS "
              "(stated SD)  Fz rel RMS | mu block bias  RMS")
        for w, r in acc["wheels"].items():
            print(f"{w:8s} {r['fx_bias']:8.1f} {r['fx_rms']:7.1f}  ({r['fx_sd_stated']:6.1f})   "
                  f"{r['fx_block_rms']:10.1f} ({r['fx_block_sd_stated']:6.1f})      {r['fx_block_z_sd']:4.2f} | "
                  f"{r['fz_bias']:8.1f} {r['fz_rms']:7.1f} ({r['fz_sd_stated']:6.1f})   "
                  f"{100 * r['fz_rel_rms']:5.2f} % |"
                  f"  {r['mu_block_bias']:+.4f}  {r['mu_block_rms']:.4f}")
        cov = None
        if not args.skip_replay:
            cov = grip_coverage(bag, args.seed, {"vehicle": str(desc_path), "torque_noise": torque_noise,
                                                 "wheel_speed_noise": omega_noise, **geometry,
                                                 **extra_params(args.grip_param)}, jobs=args.jobs)
            print(f"replay (force_source estimated): {cov['n_estimates']} published estimates, "
                  f"{cov['n_inside']} intervals contain the true mu_max ({100 * cov['coverage']:.1f} %); misses "
                  f"that are the first estimate after a road change: {cov['misses_first_after_change']} (of them "
                  f"a scope's first estimate: {cov['misses_first_of_scope']}); coverage excusing them "
                  f"{100 * cov['coverage_excusing_first']:.1f} %, excusing only those after a true change "
                  f"{100 * cov['coverage_strict']:.1f} %; "
                  f"replay {cov['replay_wall_s']:.0f} s wall, {cov['replay_cpu_s']:.0f} CPU s")
            print(f"per road patch: {cov['per_road']}; road changes detected (estimated times, s): "
                  f"{cov['surface_changes_detected']}")
            for r in cov["estimates"]:
                flag = "" if r["inside"] else ("  MISS (first of scope)" if r["first_of_scope"] else
                                               "  MISS (first after change)" if r["first_after_change"] else "  MISS")
                print(f"  {r['scope']:10s} t {r['t']:6.1f}  true {r['truth']:.3f}  est {r['mean']:.3f} "
                      f"[{r['lower']:.3f}, {r['upper']:.3f}]{flag}")
    load_after = os.getloadavg()
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    print(f"date {stamp}; load average (1 min) before {load_before[0]:.2f}, after {load_after[0]:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"scenario": args.scenario, "vehicle": args.vehicle,
                                               "grip_params": extra_params(args.grip_param),
                                               "seed": args.seed, "date": stamp,
                                               "load": [load_before[0], load_after[0]], "forces": acc,
                                               "grip": cov}, indent=1,
                                              default=lambda o: o.item() if hasattr(o, "item") else str(o)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
