"""``vehcal simulate SCENARIO --bag OUT``: run a scenario on the 14-DOF simulator and record a rosbag2.

SCENARIO is a YAML file or a built-in name (``daily_driving``, ``throttle_ramp``, ...). The bag is written
to a temporary directory beside OUT and renamed at the end, so an error leaves nothing half-written; an
existing OUT is never overwritten.
"""

from __future__ import annotations

import argparse


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("simulate", help="simulator -> rosbag2 (mcap default)",
                              description="Run a scenario on the 14-DOF simulator (HMMWV or sedan) and write a "
                                          "rosbag2.")
    p.add_argument("scenario", metavar="SCENARIO", help="scenario YAML file or built-in name (e.g. daily_driving)")
    p.add_argument("--bag", required=True, metavar="OUT", help="output bag directory (must not exist)")
    p.add_argument("--storage", choices=("mcap", "sqlite3"), default="mcap", help="rosbag2 storage (default mcap)")
    p.add_argument("--seed", type=int, default=None, help="sensor-noise seed (default: the scenario's)")
    p.add_argument("--duration", type=float, default=None, help="s of simulation (default: the scenario's)")
    p.add_argument("--no-tire-forces", action="store_true",
                   help="do not record /vehicle/tire_forces (a production car without force transducers)")
    p.add_argument("--vehicle", metavar="NAME|FILE", default=None,
                   help="simulated vehicle: hmmwv, sedan or a model file in the layout of hmmwv.yaml (default: "
                        "the scenario's, else hmmwv); a built-in scenario with a version for that vehicle "
                        "(sedan_<name>) runs that version")
    p.add_argument("--quiet", action="store_true", help="no summary line")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import os
    import shutil
    import tempfile
    from pathlib import Path

    from vehcal_ros.errors import InputError
    from vehcal_ros.io.bags import remove_bag, write_bag
    from vehcal_ros.io.scenarios import load_scenario
    from vehcal_ros.io.simulate import ScenarioRun

    out = Path(args.bag)
    if out.exists():
        raise InputError(f"--bag {out}: already exists; refusing to overwrite")
    if not out.parent.exists() and str(out.parent) not in ("", "."):
        raise InputError(f"--bag {out}: the parent directory {out.parent} does not exist")
    if args.seed is not None and not 0 <= args.seed < 2**32:
        raise InputError(f"--seed {args.seed}: must be in [0, 4294967295]")
    if args.duration is not None and not 0 < args.duration <= 86400:
        raise InputError(f"--duration {args.duration}: must be in (0, 86400] s")
    if args.vehicle is not None:
        from vehcal_ros.models.vehicle14 import vehicle_model_file

        vehicle_model_file(args.vehicle)  # a bad vehicle is one line before anything starts
    scenario = load_scenario(args.scenario, vehicle=args.vehicle)
    if args.seed is not None:
        scenario = scenario.with_seed(args.seed)
    if args.no_tire_forces:
        scenario = scenario.without_sensor("tire_forces")

    tmp_root = tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".partial", dir=str(out.parent or "."))
    tmp_bag = Path(tmp_root) / out.name
    try:
        import time

        t0 = time.monotonic()
        run_ = ScenarioRun(scenario, duration=args.duration)
        counts = write_bag(tmp_bag, run_, storage=args.storage)
        if out.exists():
            raise InputError(f"--bag {out}: appeared while simulating; refusing to overwrite")
        os.replace(tmp_bag, out)
        wall = time.monotonic() - t0
    finally:
        remove_bag(tmp_bag)
        shutil.rmtree(tmp_root, ignore_errors=True)
    if not args.quiet:
        total = sum(counts.values())
        print(f"vehcal simulate: wrote {out} ({args.storage}): scenario '{scenario.name}' on "
              f"{run_.sim.params.name}, "
              f"{run_.t:.2f} s simulated in {wall:.2f} s, {total} messages on {len(counts)} topics")
    return 0
