"""Carry-forward check: after a vehicle's 4 chained drives, does the carried 90 % interval hold a 5th drive's own
estimate, does the carried model predict a held-out maneuver as well as one drive's, and does the drift flag fire on
a load change (and only then)?

Input: a ``vehcal batch --fleet`` output directory (``--chain-dir``, default the 1-worker run of
benchmarks/bench_fleet.py) whose ``<vehicle_id>/state.json`` holds each vehicle's state after its 4 drives
(daily_driving, sensor seeds 1-4). Per vehicle (simulated vehicle -> description, as in bench_fleet.py):

* drive 5: daily_driving with sensor seed ``--seed5``, replayed alone (no state) -> its single-drive estimate
  (each accepted stage's posterior mean) and replayed from the 4-drive state (a copy) -> drift flags of drive 5
  (io/fleet_summary.py ``vehicle_summary`` on the resulting history; expected: none);
* the same drive on the simulated vehicle with ``--load-change`` more chassis mass (a copy of the simulator's model
  file, vehcal_ros/data/<vehicle>.yaml, ``chassis.mass`` scaled), replayed from the 4-drive state -> drift flags
  (expected: at least one);
* coverage: per parameter in the 4-drive state, the carried 90 % interval ``m -+ 1.645 s_c`` with
  ``s_c = carry_forward.prior_sd(m, s, 0, drift, tau^2)`` (elapsed 0: every simulated bag starts at t = 0, so the
  drift model's floor, 2 % of the mean, is its whole allowance; ``tau^2`` the spread between windows of the state's
  history, carry_forward.window_spread) against drive 5's single-drive mean;
* held-out: the noise-free test_maneuver of the simulated vehicle, ``holdout.holdout_rmse`` (Table 9 channels, the
  8-DOF from the measured state at 1 s) with the description's nominal parameters updated by (a) the 4-drive state's
  means, (b) drive 5's single-drive means, (c) nothing (prior means); summed RMSE ratio to the prior means.

Prints a markdown table (``--out FILE`` also writes it) and ``--json OUT``.

    .venv/bin/python benchmarks/bench_carry_forward.py [--cache DIR] [--chain-dir DIR] [--vehicles sedan ...]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_fleet import VEHICLES  # noqa: E402
from bench_vehicle_calibration import noise_free_scenario  # noqa: E402

ROOT = HERE.parent
VEHCAL = str(Path(sys.executable).with_name("vehcal"))
Z90 = 1.6448536269514722


def _load() -> str:
    return "/".join(f"{v:.2f}" for v in os.getloadavg())


def _sim(cache: Path, scenario: str, vehicle: str, seed: int, duration: float | None, name: str) -> Path:
    bag = cache / name
    if not bag.exists():
        part = cache / (name + ".partial")
        shutil.rmtree(part, ignore_errors=True)
        argv = [VEHCAL, "simulate", scenario, "--vehicle", vehicle, "--seed", str(seed), "--bag", str(part), "--quiet"]
        if duration:
            argv += ["--duration", str(duration)]
        subprocess.run(argv, check=True)
        part.rename(bag)
    return bag


def _replay(bag: Path, params: Path, desc: str, vid: str, seed: int, out_json: Path, state: Path | None,
            state4: Path | None = None) -> dict:
    """``vehcal replay`` of ``bag`` (from a copy of ``state4`` at ``state`` when given); an existing ``out_json``
    (an earlier run of this script) is read instead."""
    if out_json.exists():
        return json.loads(out_json.read_text())
    if state is not None:
        shutil.copy(state4, state)
    argv = [VEHCAL, "replay", str(bag), "--params", str(params), "--vehicle", desc, "--seed", str(seed), "--quiet",
            "--json", str(out_json), "--vehicle-id", vid]
    if state is not None:
        argv += ["--state", str(state)]
    subprocess.run(argv, check=True)
    return json.loads(out_json.read_text())


def _fitted_means(doc: dict) -> dict[str, float]:
    """Each accepted stage's posterior means of a replay JSON."""
    out = {}
    for body in (doc.get("calibration") or {}).values():
        if isinstance(body, dict) and body.get("final"):
            out.update({k: float(v["mean"]) for k, v in (body["final"].get("parameters") or {}).items()})
    return out


def _model(means: dict[str, float]) -> dict[str, float]:
    """8-DOF parameters from calibrated means: the lateral stage's total roll damping ``bphi`` split evenly into
    ``bphi_f`` and ``bphi_r`` (as ``CalibrationResult.posterior_means``)."""
    out = dict(means)
    if "bphi" in out:
        out["bphi_f"] = out["bphi_r"] = 0.5 * out.pop("bphi")
    return out


def _changed_model(sim: str, kind: str, change: float, work: Path) -> Path:
    """A copy of the simulator's model file with ``kind`` = ``load``: chassis mass x (1 + change), or ``tire``: the
    Pac02 slip stiffness coefficients PKX1 and PKY1 x (1 - change) (a softer tire)."""
    src = ROOT / "vehcal_ros" / "data" / f"{sim}.yaml"
    doc = yaml.safe_load(src.read_text())
    if kind == "load":
        doc["chassis"]["mass"] = float(doc["chassis"]["mass"]) * (1.0 + change)
    else:
        pac = doc["tires"]["pac02"]
        pac["longitudinal"]["PKX1"] = float(pac["longitudinal"]["PKX1"]) * (1.0 - change)
        pac["lateral"]["PKY1"] = float(pac["lateral"]["PKY1"]) * (1.0 - change)
    out = work / f"{sim}_{kind}{change:g}.yaml"
    out.write_text(yaml.safe_dump(doc, sort_keys=False))
    return out


def _flags(state: Path, drive: str) -> list[dict]:
    from vehcal_ros.io.fleet_summary import vehicle_summary

    hist = json.loads(state.read_text())["history"]
    return [f for f in vehicle_summary(hist)["drift_flags"] if f["drive"] == drive]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cache", default="/tmp/vehcal-bench-fleet")
    ap.add_argument("--chain-dir", default=None, help="fleet output after 4 drives (default <cache>/runs/dask1)")
    ap.add_argument("--vehicles", nargs="+", default=[v[0] for v in VEHICLES])
    ap.add_argument("--seed5", type=int, nargs="+", default=[5], help="sensor seeds of drive 5 (one run each)")
    ap.add_argument("--duration", type=float, default=120.0)
    ap.add_argument("--hmmwv-duration", type=float, default=120.0)
    ap.add_argument("--load-change", type=float, default=0.2, help="relative chassis mass change (default +20 %%)")
    ap.add_argument("--tire-change", type=float, default=0.3,
                    help="relative slip-stiffness drop of the changed tire (default 0.3: PKX1, PKY1 x 0.7)")
    ap.add_argument("--params", default=str(HERE / "fleet_bench.params.yaml"))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default=None)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    from vehcal_ros.estimation.calibration.carry_forward import DEFAULT_DRIFT, prior_sd, window_spread
    from vehcal_ros.estimation.calibration.holdout import TABLE9_CHANNELS, holdout_rmse, records_to_table
    from vehcal_ros.io.bags import read_bag
    from vehcal_ros.io.calibration_state import windows_of
    from vehcal_ros.models.vehicle_8dof import VehicleConstants

    cache = Path(args.cache)
    chain = Path(args.chain_dir) if args.chain_dir else cache / "runs" / "dask1"
    work = cache / "carry_forward"
    work.mkdir(parents=True, exist_ok=True)
    params = Path(args.params).resolve()
    t0, start, load0 = time.perf_counter(), time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), _load()
    res: dict = {"started": start, "load_before": load0, "runs": []}
    lines = ["| vehicle | drive 5 seed | parameter | carried mean (90 % interval) | drive 5 alone | inside |",
             "|---|---|---|---|---|---|"]
    hold_lines = ["| vehicle | drive 5 seed | held-out sum of RMSE / prior RMSE (8 channels): carried 4 drives | "
                  "drive 5 alone | drift flags on drive 5: same vehicle | + load | + tire change | drive 5 statuses "
                  "(same / load / tire) |", "|---|---|---|---|---|---|---|---|"]
    n_in = n_all = 0
    changes = {"load": args.load_change, "tire": args.tire_change}
    for seed5 in args.seed5:
        for vid, sim, desc in VEHICLES:
            if vid not in args.vehicles:
                continue
            dur = args.hmmwv_duration if sim == "hmmwv" else args.duration
            state4 = chain / vid / "state.json"
            if not state4.is_file():
                sys.exit(f"bench_carry_forward: {state4} not found: run benchmarks/bench_fleet.py --cache {cache} "
                         "first (its 1-worker fleet chain is this benchmark's input), or give --chain-dir")
            st = json.loads(state4.read_text())
            d5 = _sim(cache, "daily_driving", sim, seed5, dur, f"{sim}_s{seed5}_d{dur:g}")
            scen = ROOT / "config" / "scenarios" / ("sedan_daily_driving.yaml" if sim.startswith("sedan")
                                                    else "daily_driving.yaml")
            has_file = (ROOT / "vehcal_ros" / "data" / f"{sim}.yaml").exists()   # a variant: no file to change
            tag = f"s{seed5}_{vid}"
            alone = _replay(d5, params, desc, vid, args.seed, work / f"{tag}_alone.json", None)
            flags = {"same": None, "load": None, "tire": None}
            statuses = {}
            for kind in ("same", "load", "tire"):
                if kind == "same":
                    bag = d5
                elif not has_file:
                    continue
                else:
                    model = _changed_model(sim, kind, changes[kind], work)
                    bag = _sim(cache, str(scen), str(model), seed5, dur, f"{model.stem}_s{seed5}_d{dur:g}")
                name = kind if kind == "same" else f"{kind}{changes[kind]:g}"
                state = work / f"{tag}_{name}.state.json"
                _replay(bag, params, desc, vid, args.seed, work / f"{tag}_{name}.json", state, state4)
                flags[kind] = _flags(state, bag.name)
                last = json.loads(state.read_text())["history"][-1]
                statuses[kind] = {k: b.get("status") for k, b in (last.get("stages") or {}).items()}
            m5 = _fitted_means(alone)
            cover, carried = {}, {}
            for stage, body in (st.get("stages") or {}).items():
                spread = window_spread(windows_of(st.get("history") or [], stage))
                for p, summ in (body.get("parameters") or {}).items():
                    m, sd = float(summ["mean"]), float(summ["std"])
                    sc = prior_sd(m, sd, 0.0, DEFAULT_DRIFT, spread.get(p, 0.0))
                    carried[p] = m
                    if p not in m5:
                        continue
                    inside = abs(m5[p] - m) <= Z90 * sc
                    cover[p] = {"carried_mean": m, "carried_sd": sc, "alone": m5[p], "inside": inside}
                    n_in += inside
                    n_all += 1
                    lines.append(f"| {vid} | {seed5} | {p} | {m:.5g} ({m - Z90 * sc:.5g} .. {m + Z90 * sc:.5g}) | "
                                 f"{m5[p]:.5g} | {'yes' if inside else 'no'} |")
            tm = _sim(cache, str(noise_free_scenario("test_maneuver", sim, work)), sim, 0, None, f"{sim}_test_clean")
            table = records_to_table(rec for _, rec in read_bag(str(tm)))
            const = VehicleConstants.from_description(desc)
            prior = const.default_parameters()
            r = {k: holdout_rmse(table, {**prior, **_model(upd)}, t_start=1.0, constants=const)
                 for k, upd in (("carried", carried), ("alone", m5), ("prior", {}))}
            ratio = {k: sum(r[k][c] / r["prior"][c] for c in TABLE9_CHANNELS) for k in r}

            def show(fl):
                return "not run (no model file)" if fl is None else \
                    f"{len(fl)}" + (f" ({', '.join(f['parameter'] or f['stage'] + ' check' for f in fl)})"
                                    if fl else "")

            def stat(kind, statuses=statuses):
                return "/".join(f"{k[:3]} {v}" for k, v in statuses[kind].items()) if kind in statuses else "-"

            hold_lines.append(f"| {vid} | {seed5} | {ratio['carried']:.3f} | {ratio['alone']:.3f}"
                              f"{' (nothing fitted)' if not m5 else ''} | {show(flags['same'])} | "
                              f"{show(flags['load'])} | {show(flags['tire'])} | {stat('same')}; {stat('load')}; "
                              f"{stat('tire')} |")
            res["runs"].append({"vehicle": vid, "seed5": seed5, "coverage": cover, "holdout_rmse": r,
                                "holdout_ratio_sum": ratio, "drift_flags": flags, "statuses": statuses,
                                "carried_parameters": sorted(carried), "alone_parameters": sorted(m5)})
            print(hold_lines[-1], flush=True)
    res.update(inside=n_in, compared=n_all, wall_s=time.perf_counter() - t0, load_after=_load())
    text = "\n".join([f"Carry-forward check, {start}, load {load0} -> {res['load_after']} (`uptime`, 2 shared "
                      f"cores), {res['wall_s']:.0f} s wall (earlier runs' replays reused when present); params "
                      f"{params.name}, sampler seed {args.seed}, drive 5 sensor seeds {args.seed5}, load change "
                      f"+{100 * args.load_change:.0f} % chassis mass, tire change PKX1 and PKY1 x "
                      f"{1 - args.tire_change:.2f}; one 4-drive chain per vehicle (sensor seeds 1-4).", "", *lines, "",
                      f"inside the carried 90 % interval: {n_in} of {n_all} (parameter, drive 5 seed) pairs", "",
                      *hold_lines, ""])
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2, default=str) + "\n")

if __name__ == "__main__":
    main()
