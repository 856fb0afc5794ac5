"""The slips' speed reference against the simulator's true slips: GNSS/IMU fusion vs the odometry twist.

For each vehicle (the simulated HMMWV and sedan, daily drive, seed 0, the first ``--duration`` s) the grip
collector's 0.1 s block slips per wheel (``speed_reference`` gnss_imu and odometry; braking kept as measured)
are compared with the simulator's true slip averaged over the same block. Printed per wheel: blocks, mean error,
SD of the error, and the RMS of the error standardised by the block's stated slip variance (1 = the stated
noise is right). The simulator's odometry is the true velocity plus white noise, which a production car does not
have; GNSS (10 Hz, 0.05 m/s, 0.1 s late) and the IMU it does.

Usage: .venv/bin/python benchmarks/bench_speed_reference.py [--duration 120]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from vehcal_ros.estimation.grip.friction_samples import GripDataCollector
from vehcal_ros.estimation.grip.pipeline import signal_config_from, vehicle_signal_config
from vehcal_ros.io.scenarios import load_scenario
from vehcal_ros.io.simulate import ScenarioRun
from vehcal_ros.records import GroundTruth
from vehcal_ros.replay.params import resolve_params
from vehcal_ros.vehicle.description import load_description

VEHICLES = {"hmmwv": "hmmwv_sim", "sedan": "sedan"}   # simulated vehicle -> its shipped description


def slip_errors(vehicle: str, reference: str, duration: float) -> list[tuple[str, int, float, float, float]]:
    """(wheel, blocks, mean error, SD of the error, RMS of the standardised error) per wheel."""
    desc = load_description(VEHICLES[vehicle])
    values = {**resolve_params(None)["grip_estimator"], "speed_reference": reference, "braking": "keep",
              "scope": "wheel"}
    collector = GripDataCollector(vehicle_signal_config(signal_config_from(values, desc), desc))
    truth = []
    for _, rec, _ in ScenarioRun(load_scenario("daily_driving", vehicle=vehicle).with_seed(0), duration=duration):
        if isinstance(rec, GroundTruth):
            truth.append((rec.t, *rec.slip))
        else:
            collector.add(rec)
    collector.flush()
    g = np.array(truth)
    out = []
    for i, wheel in enumerate(collector.scopes()):
        d = collector.snapshot(wheel)
        rows = [g[(g[:, 0] >= t - 0.05) & (g[:, 0] < t + 0.05), 1 + i] for t in d.t]
        has = np.array([r.size > 0 for r in rows])
        err = d.slip[has] - np.array([r.mean() for r, h in zip(rows, has) if h])
        z = err / np.sqrt(d.slip_var[has])
        out.append((wheel, int(err.size), float(err.mean()), float(err.std()), float(np.sqrt(np.mean(z * z)))))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=120.0, help="s of each drive")
    args = ap.parse_args()
    load = os.getloadavg()[0]
    print("| vehicle | reference | wheel | blocks | mean error | SD | standardised RMS |")
    print("|---|---|---|---|---|---|---|")
    for vehicle in VEHICLES:
        for reference in ("gnss_imu", "odometry"):
            for wheel, n, mean, sd, zrms in slip_errors(vehicle, reference, args.duration):
                print(f"| {vehicle} | {reference} | {wheel} | {n} | {mean:+.5f} | {sd:.5f} | {zrms:.2f} |")
    print(f"\ndaily_driving seed 0, first {args.duration:.0f} s; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
          f"load (1 min) {load:.1f} -> {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
