"""``vehcal replay BAG``: the estimators over a rosbag2 (mcap or sqlite3), on the bag's clock, as fast as possible.

Runs :func:`vehcal_ros.replay.serial.replay_bag` (the grip estimator's and the model calibrator's estimation objects,
built from the same params YAML as the nodes) and prints a summary table on stdout; progress (percent of the
bag's messages, rate) goes to stderr. ``--json`` writes the full result, ``--report`` the figures and
index.html, ``--record`` the outputs the nodes would have published, as a bag, ``--grip-map`` the grip in force
at each GNSS fix as GeoJSON with a CSV and a figure beside it (io/grip_map.py). Bad input (a missing, truncated
or foreign bag, no relevant topics, unexpected message types, a params file with an unknown key or a wrong
type) is one line on stderr and exit status 2, and nothing is written: all outputs are produced under
temporary names and renamed only when everything succeeded. rclpy is imported only because the node modules
declaring the parameters (PARAMS) import it, to validate the params file; no DDS participant is created.
"""

from __future__ import annotations

import argparse
import math
import sys

NODE_SPEC_MODULES = ("grip_estimator", "model_calibrator", "vehicle_simulator")


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "replay", help="estimators over a rosbag2, as fast as possible",
        description="Replay a rosbag2 (mcap or sqlite3) through the grip estimator and the model calibrator "
                    "on the bag's clock, deterministically (same bag + seed = same numbers).")
    p.add_argument("bag", metavar="BAG", help="bag directory, or its .mcap / .db3 file")
    p.add_argument("--json", metavar="OUT", help="write the result as JSON ('-' for stdout)")
    p.add_argument("--report", metavar="DIR", help="write figures and index.html into DIR (new or empty)")
    p.add_argument("--params", metavar="FILE", help="ROS 2 params YAML (default: the package's config/estimate.yaml)")
    p.add_argument("--remap", metavar="FROM:=TO", action="append", default=[],
                   help="read topic FROM (canonical name, sensor key, or the name the params give) from TO "
                        "in the bag; repeatable")
    p.add_argument("--seed", type=int, default=None, help="sampler seed (default: the params' seed)")
    p.add_argument("--record", metavar="OUT", help="write the estimator outputs to a new bag OUT")
    p.add_argument("--storage", choices=("mcap", "sqlite3"), default="mcap", help="storage of --record (default mcap)")
    p.add_argument("--grip-map", metavar="OUT.geojson",
                   help="write the grip in force at each GNSS fix (1 Hz) as GeoJSON, with OUT.csv and OUT.png "
                        "beside it (the bag needs /vehicle/gnss/fix)")
    p.add_argument("--no-calibration", action="store_true", help="run the grip estimator only")
    p.add_argument("--jobs", "-j", type=int, default=None, metavar="N",
                   help="worker processes for the fits (default: one per core; 1 = everything in one thread)")
    p.add_argument("--executor", default="local", metavar="SPEC",
                   help="where the fits run: local (processes, default), threads, serial or dask://HOST:PORT; "
                        "the numbers do not depend on it")
    p.add_argument("--state", metavar="FILE", default=None,
                   help="calibration state file (io/calibration_state.py; the live model_calibrator's state_file): "
                        "the calibrator starts from it, each stage carried forward (docs/fleet.md), and it is "
                        "rewritten with this bag's results and history entry; a missing file starts from the "
                        "priors. The replay then runs in one thread")
    p.add_argument("--vehicle-id", default=None, metavar="ID",
                   help="vehicle_id of --state (default: the bag's metadata custom_data vehicle_id, else the "
                        "vehicle description's name)")
    p.add_argument("--quiet", action="store_true", help="no progress and no summary")
    from vehcal_ros.commands.vehicle_option import add_vehicle_argument
    add_vehicle_argument(p)
    p.set_defaults(func=run)
    return p


def parse_remaps(items: list[str]) -> dict[str, str]:
    from vehcal_ros.errors import InputError

    out: dict[str, str] = {}
    for item in items:
        src, sep, dst = item.partition(":=")
        if not sep or not src or not dst:
            raise InputError(f"--remap {item!r}: expected FROM:=TO, e.g. /vehicle/imu:=/car/imu")
        if not dst.startswith("/"):
            raise InputError(f"--remap {item!r}: TO must be an absolute topic name")
        out[src] = dst
    return out


def node_specs() -> dict[str, tuple]:
    """Declared parameters per node (importing a node module pulls in rclpy: only for --params validation)."""
    import importlib

    specs = {}
    for name in NODE_SPEC_MODULES:
        try:
            module = importlib.import_module(f"vehcal_ros.nodes.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"vehcal_ros.nodes.{name}":
                raise
            continue
        specs[name] = tuple(module.PARAMS)
    return specs


def load_params(path: str) -> dict[str, dict]:
    """Validate ``path`` against the nodes' PARAMS; return complete values per node: declared defaults, then
    the package's config/estimate.yaml, then the file's ``/**`` wildcard and node sections (as ``vehcal run``
    and :func:`vehcal_ros.replay.params.resolve_params` resolve it)."""
    from vehcal_ros.commands.run import load_parameters

    specs = node_specs()
    given = load_parameters(path)
    return {node: {**{s.name: s.default for s in node_specs_}, **given.get(node, {})}
            for node, node_specs_ in specs.items()}


class Progress:
    """Bag time replayed, speed (x real time) and time left, on stderr (carriage returns on a terminal, else
    every 10 %)."""

    def __init__(self, stream=sys.stderr) -> None:
        self.stream = stream
        self.tty = bool(getattr(stream, "isatty", lambda: False)())
        self.last_decile = -1

    def __call__(self, p) -> None:
        pct = 100.0 * p.fraction
        left = "-" if not math.isfinite(p.time_left) else _duration(p.time_left)
        line = (f"vehcal replay: {pct:5.1f} % (bag t {p.done_t - p.t_first:.1f} of {p.t_last - p.t_first:.1f} s, "
                f"{p.speed:.1f}x real time, {left} left; {p.n_messages}/{p.total} messages read"
                + (f"; {p.detail}" if p.detail else "") + ")")
        if self.tty:
            self.stream.write("\r\033[K" + line + ("\n" if p.finished else ""))
        else:
            decile = int(pct // 10)
            if decile == self.last_decile and not p.finished:
                return
            self.last_decile = decile
            self.stream.write(line + "\n")
        self.stream.flush()


def _duration(s: float) -> str:
    s = int(round(s))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


def print_summary(result, out) -> None:
    from vehcal_ros.replay.guards import refusal_summary

    r = result
    rate = r.bag_duration_s / r.elapsed_s if r.elapsed_s > 0 else float("nan")
    print(f"vehcal replay: {r.bag}: {r.n_messages} messages, {r.bag_duration_s:.1f} s of bag time in "
          f"{r.elapsed_s:.1f} s ({rate:.1f}x real time), seed {r.seed}, "
          f"{r.counters.get('grip_cycles', 0)} grip cycles", file=out)
    refused = refusal_summary(r.counters)
    if refused:
        print(f"  {refused}", file=out)
    for doubt in r.counters.get("grip_doubtful_assumptions", []):
        print(f"  doubtful: {doubt}", file=out)
    print(f"  {'scope':<14}{'estimates':>10}{'mu_max':>9}{'lower':>9}{'upper':>9}{'truth':>9}  status", file=out)
    for scope, g in r.grip.items():
        if g.t.size:
            vals = f"{g.mean[-1]:>9.3f}{g.lower[-1]:>9.3f}{g.upper[-1]:>9.3f}{g.truth[-1]:>9.3f}"
        else:
            vals = f"{'-':>9}{'-':>9}{'-':>9}{'-':>9}"
        level = {0: "OK", 1: "WARN", 2: "ERROR"}.get(g.level, str(g.level))
        print(f"  {scope:<14}{g.t.size:>10}{vals}  {level}: {g.message}", file=out)
    if r.calibration:
        print(f"  {'stage':<20}{'parameter':<12}{'mean':>12}{'std':>11}{'hdi_3%':>12}{'hdi_97%':>12}{'r_hat':>8}"
              f"{'ess_bulk':>10}", file=out)
        for stage, c in r.calibration.items():
            if c.final is None:
                print(f"  {stage:<20}(none: {c.message})", file=out)
                continue
            for name, s in c.final.parameters.items():
                print(f"  {stage:<20}{name:<12}{s['mean']:>12.5g}{s['std']:>11.3g}{s['hdi_low']:>12.5g}"
                      f"{s['hdi_high']:>12.5g}{s['r_hat']:>8.4f}{s['ess_bulk']:>10.0f}", file=out)
            print(f"  {stage:<20}{c.n_fits} fits, {c.n_confirmed} windows confirmed the model without a fit",
                  file=out)
    if r.calibration_note:
        print(f"  note: {r.calibration_note}", file=out)


def _check_outputs(args) -> None:
    from pathlib import Path

    from vehcal_ros.errors import InputError

    for flag, value in (("--json", args.json), ("--report", args.report), ("--record", args.record)):
        if not value or value == "-":
            continue
        p = Path(value)
        parent = p.parent if str(p.parent) else Path(".")
        if not parent.is_dir():
            raise InputError(f"{flag} {p}: the parent directory {parent} does not exist")
        if flag == "--record" and p.exists():
            raise InputError(f"--record {p}: already exists; refusing to overwrite")
        if flag == "--report" and p.exists() and (not p.is_dir() or any(p.iterdir())):
            raise InputError(f"--report {p}: exists and is not empty; refusing to overwrite")
        if flag == "--json" and p.is_dir():
            raise InputError(f"--json {p}: is a directory")
    if args.grip_map:
        p = Path(args.grip_map)
        if p.suffix.lower() not in (".geojson", ".json"):
            raise InputError(f"--grip-map {p}: must end in .geojson (the .csv and .png go beside it)")
        parent = p.parent if str(p.parent) else Path(".")
        if not parent.is_dir():
            raise InputError(f"--grip-map {p}: the parent directory {parent} does not exist")


def _write_json(doc: dict, path: str) -> None:
    import json

    from vehcal_ros.atomic_files import write_atomic

    write_atomic(path, json.dumps(doc, indent=1, allow_nan=False) + "\n")


def _state_input(args: argparse.Namespace, params: dict) -> tuple[str | None, str]:
    """(--state's text or None when the file does not exist yet, the vehicle_id) for ``vehcal replay --state``."""
    from pathlib import Path

    from vehcal_ros.errors import InputError
    from vehcal_ros.io.fleet import bag_vehicle_id

    p = Path(args.state)
    if p.is_dir() or not (p.parent if str(p.parent) else Path(".")).is_dir():
        raise InputError(f"--state {p}: not a file path in an existing directory")
    vehicle = params.get("model_calibrator", {}).get("vehicle") or "hmmwv"
    vehicle_id = args.vehicle_id or bag_vehicle_id(args.bag) or Path(str(vehicle)).stem
    try:
        text = p.read_text(encoding="utf-8") if p.exists() else None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"--state {p}: cannot read it ({exc})") from None
    return text, vehicle_id


def run(args: argparse.Namespace) -> int:
    import json
    import os
    import shutil

    from vehcal_ros.errors import InputError
    from vehcal_ros.replay.outputs import record_outputs
    from vehcal_ros.replay.params import default_params_file
    from vehcal_ros.replay.serial import replay_bag

    remap = parse_remaps(args.remap)
    if args.seed is not None and not 0 <= args.seed < 2**31:
        raise InputError(f"--seed {args.seed}: must be in [0, 2147483647]")
    _check_outputs(args)
    from vehcal_ros.commands.vehicle_option import apply_vehicle
    params = apply_vehicle(load_params(args.params or default_params_file()), getattr(args, "vehicle", None))
    progress = None if args.quiet else Progress(sys.stderr)
    if args.jobs is not None and args.jobs < 1:
        raise InputError(f"--jobs {args.jobs}: must be >= 1")
    state_text = None
    if args.state:
        state_text, vehicle_id = _state_input(args, params)
        from vehcal_ros.replay.fleet import replay_with_state

        result, state_text, _ = replay_with_state(args.bag, params, vehicle_id, state_text, seed=args.seed,
                                                  state_label=args.state, topic_map=remap, progress=progress,
                                                  calibration=not args.no_calibration)
    else:
        result = replay_bag(args.bag, params, topic_map=remap, seed=args.seed, progress=progress,
                            calibration=not args.no_calibration, workers=args.jobs, executor=args.executor)

    created: list[str] = []
    try:
        if args.report:
            from vehcal_ros.replay.reports import write_report

            write_report(args.report, result)
            created.append(args.report)
        if args.record:
            record_outputs(result, args.record, storage=args.storage)
            created.append(args.record)
        if args.grip_map:
            if not result.grip_by_place:
                raise InputError(f"--grip-map {args.grip_map}: the bag has no usable GNSS fix "
                                 f"(sensor_msgs/NavSatFix on /vehicle/gnss/fix, or --remap gnss_fix:=TOPIC)")
            from vehcal_ros.io.grip_map import write_grip_map

            created += [str(p) for p in write_grip_map(result.grip_by_place, args.grip_map)]
        if args.json and args.json != "-":
            _write_json(result.to_dict(), args.json)
        if args.state and state_text is not None:   # last: the state file changes only when all else is written
            from vehcal_ros.atomic_files import write_atomic

            write_atomic(args.state, state_text)
    except BaseException:
        for path in created:
            if os.path.isdir(path):
                shutil.rmtree(path, ignore_errors=True)
            elif os.path.isfile(path) and path != args.record:
                os.unlink(path)
        raise
    if args.json == "-":
        json.dump(result.to_dict(), sys.stdout, indent=1, allow_nan=False)
        print()
    if not args.quiet:
        print_summary(result, sys.stderr if args.json == "-" else sys.stdout)
    return 0
