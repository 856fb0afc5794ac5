"""Live soak: the estimator nodes fed by the vehicle simulator for a long drive, memory and health sampled.

``grip_estimator`` and ``model_calibrator`` run from their ``main`` (as the launch file starts them) on sim time;
``vehicle_simulator`` drives the ``long_drive`` scenario (excitation all the way through) in real time for
``--minutes``. Every ``--sample`` seconds this script reads each process's resident memory (/proc VmRSS) and keeps
what the nodes say on /diagnostics (buffer fills, received/lost counts, fits); at the end it prints, per node,
RSS at the start / peak / end, the largest buffer fill, the /diagnostics periods (wall clock, median and
longest gap) and the fits published.

Run::

    ROS_DOMAIN_ID=28 .venv/bin/python benchmarks/soak_live.py --minutes 15 --json benchmarks/results/soak_live.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "test"))
from ros_util import stop_all  # noqa: E402  (the tests' subprocess stop)


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=15.0)
    ap.add_argument("--sample", type=float, default=10.0, help="s between memory samples")
    ap.add_argument("--scenario", default="long_drive")
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("--log-dir", default=None)
    args = ap.parse_args()
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    log_dir = Path(args.log_dir or f"/tmp/soak_live_{os.getpid()}")
    log_dir.mkdir(parents=True, exist_ok=True)

    import rclpy
    from diagnostic_msgs.msg import DiagnosticArray
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.node import Node

    procs: dict[str, subprocess.Popen] = {}
    for name in ("grip_estimator", "model_calibrator"):
        procs[name] = subprocess.Popen(
            [sys.executable, "-m", f"vehcal_ros.nodes.{name}", "--ros-args", "-p", "use_sim_time:=true"],
            stdout=open(log_dir / f"{name}.log", "w"), stderr=subprocess.STDOUT)  # noqa: SIM115
    procs["vehicle_simulator"] = subprocess.Popen(
        [sys.executable, "-m", "vehcal_ros.nodes.vehicle_simulator", "--ros-args", "-p", f"scenario:={args.scenario}",
         "-p", "realtime_factor:=1.0", "-p", f"duration:={args.minutes * 60.0}", "-p", "publish_clock:=true",
         "-p", "wait_for_subscribers:=2", "-p", "wait_timeout:=120.0"],
        stdout=open(log_dir / "vehicle_simulator.log", "w"), stderr=subprocess.STDOUT)  # noqa: SIM115

    rclpy.init()
    probe = Node("soak_probe")
    diags: dict[str, list[tuple[float, dict[str, str], int]]] = {}

    def on_diag(msg) -> None:
        now = time.monotonic()
        for st in msg.status:
            kv = {v.key: v.value for v in st.values}
            diags.setdefault(st.name, []).append((now, kv, st.level[0] if isinstance(st.level, bytes) else st.level))

    probe.create_subscription(DiagnosticArray, "/diagnostics", on_diag, 100)
    ex = SingleThreadedExecutor()
    ex.add_node(probe)
    samples: list[dict] = []
    t0 = time.monotonic()
    try:
        next_sample = t0
        while procs["vehicle_simulator"].poll() is None and time.monotonic() - t0 < args.minutes * 60.0 + 300.0:
            ex.spin_once(timeout_sec=0.2)
            if time.monotonic() >= next_sample:
                row = {"t": round(time.monotonic() - t0, 1), "load": os.getloadavg()[0]}
                for name, p in procs.items():
                    if p.poll() is None:
                        row[f"rss_{name}"] = round(rss_mib(p.pid), 1)
                samples.append(row)
                next_sample += args.sample
        t_end = time.monotonic()
        while time.monotonic() - t_end < 5.0:
            ex.spin_once(timeout_sec=0.2)
    finally:
        alive = {name: p.poll() is None for name, p in procs.items()}
        stop_all(procs.values(), timeout=30.0)
        probe.destroy_node()
        rclpy.shutdown()

    result: dict = {"minutes": args.minutes, "scenario": args.scenario,
                    "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                    "wall_s": round(t_end - t0, 1), "alive_at_end": alive,
                    "exit_codes": {n: p.returncode for n, p in procs.items()}, "nodes": {}, "samples": samples}
    for name in ("grip_estimator", "model_calibrator"):
        key = f"rss_{name}"
        rss = [s[key] for s in samples if key in s]
        inputs = diags.get(f"{name}: inputs", [])
        times = [t for t, _, _ in inputs]
        gaps = [b - a for a, b in zip(times, times[1:])]
        fills = {}
        for _, kv, _ in inputs:
            for k, v in kv.items():
                if k.startswith("fill_"):
                    fills.setdefault(k, []).append(float(v))
        last = inputs[-1][1] if inputs else {}
        result["nodes"][name] = {
            "rss_mib_first": rss[0] if rss else None,
            "rss_mib_at_2min": next((s[key] for s in samples if key in s and s["t"] >= 120), None),
            "rss_mib_peak": max(rss) if rss else None, "rss_mib_last": rss[-1] if rss else None,
            "diag_messages": len(inputs),
            "diag_period_median_s": round(statistics.median(gaps), 3) if gaps else None,
            "diag_period_max_s": round(max(gaps), 3) if gaps else None,
            "fill_max": {k: max(v) for k, v in fills.items()},
            "fill_last": {k: v[-1] for k, v in fills.items()},
            "last_inputs": {k: v for k, v in last.items() if k.startswith(("received_", "lost_", "expected_",
                                                                         "dropped_", "clock_jumps"))},
            "warn_share": round(sum(1 for _, _, lvl in inputs if lvl >= 1) / max(len(inputs), 1), 3),
            "stages_or_scopes": {n.split(": ", 1)[1]: {k: kv.get(k) for k in ("n_fits", "n_failed", "mu_max")}
                                 for n, rows in diags.items() if n.startswith(f"{name}: ") and n != f"{name}: inputs"
                                 for _, kv, _ in rows[-1:]},
        }
    print(json.dumps({k: v for k, v in result.items() if k != "samples"}, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
