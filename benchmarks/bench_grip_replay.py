"""The grip estimator's share of a replay: its fits alone, serial, in this process (CPU seconds per fit).

    NUMBA_NUM_THREADS=1 .venv/bin/python benchmarks/bench_grip_replay.py --scenario daily_driving

The bag is read once as the serial replay reads it (the grip node's input guards, its timer every
``fit_period`` s, the ground truth kept per cycle) and the cycles' snapshots are cached (``--cache``; ``--fresh``
re-reads the bag, e.g. after a change to the sample construction); then one
``GripPipeline`` runs ``fit`` + ``commit`` on them in cycle order, exactly as ``vehcal replay --jobs 1`` does
(replay/serial.py, _replay_serial), timing each fit with the process CPU clock. Prints one line per sampled fit and a
summary row (date, load, CPU seconds of the fits, windows sampled / skipped, fits at max_steps, estimates
published, published 90 % intervals containing the true mu_max, CPU seconds per sampled fit and microseconds per
chain step (the fits' CPU over steps x chains: the log target plus the step's own work and the checks), the median
tempering exponent of the carried draws (grip_fit ``carry_reweight``)). ``--set NAME=VALUE`` overrides a grip_estimator
parameter (e.g. ``--set warm_steps=0``); ``--json OUT`` appends the row to a JSON list.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import pickle
import shlex
import sys
import time
from pathlib import Path

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_replay import add_bag_arguments, simulate  # noqa: E402  (the same cached bags and options)


def record_cycles(bag: Path, values: dict) -> list[tuple[float, list, dict]]:
    """(bag time, snapshots, true mu_max per scope) of every grip cycle with data, as the serial replay plans
    them (the snapshot depends on the data only, not on the fits)."""
    from vehcal_ros.estimation.grip.pipeline import FitOutcome
    from vehcal_ros.records import GroundTruth
    from vehcal_ros.replay.guards import replay_guards
    from vehcal_ros.replay.params import GRIP_NODE, frames_from, grip_pipeline_from, topic_map_from
    from vehcal_ros.replay.results import GripRecorder
    from vehcal_ros.replay.stream import Timer, stream_bag

    grip = grip_pipeline_from(values)
    frames = frames_from(values)
    recorder = GripRecorder(grip.collector.scopes(), frames.wheel_names)
    guards = replay_guards(values, None, grip.collector.reject)
    cycles: list[tuple[float, list, dict]] = []
    last_truth = [-float("inf")]

    def cycle(t_now: float) -> None:
        snaps = grip.snapshot()
        if snaps:
            cycles.append((t_now, snaps, recorder.truths()))
            grip.commit([FitOutcome(scope=d.scope, stamp=d.t_end, n_points=int(d.mu.size), excitation=0.0,
                                    error="planned") for d in snaps])

    def feed(topic, rec) -> None:
        if isinstance(rec, GroundTruth):
            last_truth[0] = recorder.add_truth(rec, last_truth[0])
            return
        if guards.lets_in(0, topic, rec):
            grip.add(rec)
        guards.fed(rec)

    tmap = topic_map_from({GRIP_NODE: values})
    st = stream_bag(bag, tmap, frames, [Timer(float(values["fit_period"]), cycle)], feed,
                    admit=guards.admit)
    cycle(st.t_end)  # the replay's final cycle
    return cycles


def run_fits(cycles: list, values: dict, verbose: bool) -> dict:
    """fit + commit of every cycle on one pipeline (the serial replay's order); per-fit CPU seconds."""
    from vehcal_ros.replay.params import grip_pipeline_from

    grip = grip_pipeline_from(values)
    cpu_fits, n_sampled, n_skipped, n_max, n_pub, n_in, steps, lams = 0.0, 0, 0, 0, 0, 0, [], []
    max_steps = grip.fit_config.max_steps
    for t_now, snaps, truths in cycles:
        c0 = time.process_time()
        outcomes = grip.fit(snaps)   # one call per cycle, as the replay (seeds seed + 1000 cycle + k)
        cpu_fits += time.process_time() - c0
        for o in outcomes:
            n_skipped += int(o.skipped)
            if o.estimate is not None:
                n_sampled += 1
                n_max += int(o.estimate.n_steps_used >= max_steps)
                steps.append(o.estimate.n_steps_used)
                lam = o.estimate.chains.extra.get("carry_lambda", float("nan"))
                if lam == lam:   # warm fits whose previous draws were reweighted to this window
                    lams.append(lam)
        updated = grip.commit(outcomes)
        for o in outcomes:
            e = o.estimate
            if e is None:
                continue
            pub = o.scope in updated
            truth = truths.get(o.scope, float("nan"))
            inside = e.mu_max_lower <= truth <= e.mu_max_upper
            n_pub += int(pub)
            n_in += int(pub and inside)
            if verbose:
                print(f"  t {t_now:6.1f} {o.scope:10s} steps {e.n_steps_used:6d} cpu {o.wall_s:5.2f}s "
                      f"rhat {e.r_hat_max:.3f} ess {e.ess_bulk_min:5.0f}/{e.ess_tail_min:5.0f} "
                      f"mu {e.mu_max_mean:.3f} [{e.mu_max_lower:.3f}, {e.mu_max_upper:.3f}] truth {truth:.3f} "
                      f"{'PUB' if pub else '   '}{' in' if pub and inside else ''}", flush=True)
    return {"cpu_s_fits": round(cpu_fits, 1), "windows": sum(len(s) for _, s, _ in cycles),
            "sampled": n_sampled, "skipped_pre_gate": n_skipped, "at_max_steps": n_max,
            "mean_steps": round(sum(steps) / max(1, len(steps))), "published": n_pub, "published_contain_truth": n_in,
            "cpu_s_per_sampled_fit": round(cpu_fits / max(1, n_sampled), 3),
            "us_per_chain_step": round(1e6 * cpu_fits / max(1, sum(steps) * grip.fit_config.n_chains), 2),
            "carry_lambda_median": round(float(np.median(lams)), 3) if lams else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_bag_arguments(ap)
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                    help="override a grip_estimator parameter (YAML value)")
    ap.add_argument("--quiet", action="store_true", help="summary row only")
    ap.add_argument("--fresh", action="store_true",
                    help="re-read the bag (the cached cycles come from the collector code that recorded them)")
    ap.add_argument("--json", type=Path, default=None, help="append the row to this JSON list")
    args = ap.parse_args()
    from vehcal_ros.replay.params import GRIP_NODE, resolve_params

    bag = args.bag if args.bag is not None else simulate(args.scenario, args.duration, args.cache)
    values = resolve_params(None)[GRIP_NODE]
    for kv in args.set:
        k, v = kv.split("=", 1)
        values[k] = yaml.safe_load(v)
    snap_file = args.cache / f"{Path(bag).name}.grip_cycles.pkl"
    if not args.fresh and snap_file.exists() and snap_file.stat().st_mtime > Path(bag).stat().st_mtime:
        cycles = pickle.loads(snap_file.read_bytes())
    else:
        cycles = record_cycles(bag, values)
        tmp = snap_file.with_suffix(".tmp")
        tmp.write_bytes(pickle.dumps(cycles))
        os.replace(tmp, snap_file)
    load0 = os.getloadavg()
    date = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    t0 = time.perf_counter()
    row = {"date": date, "load_before": [round(x, 2) for x in load0]}
    row.update(run_fits(cycles, values, not args.quiet))
    row.update({"wall_s": round(time.perf_counter() - t0, 1), "load_after": [round(x, 2) for x in os.getloadavg()],
                "numba_threads": os.environ.get("NUMBA_NUM_THREADS", "default"), "bag": str(bag),
                "command": "python benchmarks/bench_grip_replay.py " + shlex.join(sys.argv[1:])})
    print(json.dumps(row), flush=True)
    if args.json is not None:
        old = json.loads(args.json.read_text()) if args.json.exists() else []
        args.json.write_text(json.dumps(old + [row], indent=1) + "\n")


if __name__ == "__main__":
    main()
