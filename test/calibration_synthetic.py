"""Synthetic calibration data: the paper's three maneuvers simulated by the 8-DOF model with known parameters,
plus the paper's Section 3.1 noise. Shared by the calibration tests (not a test module itself)."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from vehcal_ros.estimation.calibration.fit import CHANNELS, CSV_COLUMNS, Segment
from vehcal_ros.models.vehicle_8dof import Simulator8Dof

CHRONO = Path(__file__).resolve().parents[1] / "data" / "chrono_hmmwv"
"""The paper's Chrono runs, vendored in the repository (data/chrono_hmmwv/README.md, BSD-3-Clause)."""

TRUTH = dict(Cxf=10659.0, Cxr=10280.0, Cyf=44016.0, Cyr=54046.0, kphi_f=36245.0, kphi_r=26439.0,
             bphi_f=3863.0, bphi_r=3863.0, rr=0.0131)
"""Known parameters (the paper's published posterior means, so the synthetic data look like the Chrono runs)."""
TRUTH_SAMPLED = {**TRUTH, "bphi": TRUTH["bphi_f"] + TRUTH["bphi_r"]}
NOISE = dict(u=0.1, w_lf=1.0, w_lr=1.0, w_rf=1.0, w_rr=1.0, v=0.05, yaw_rate=0.02, roll=0.005, roll_rate=0.002)
"""Noise standard deviations of the paper's Section 3.1 (SI units)."""

MANEUVERS = {
    # stage: (Chrono CSV, driver file, first row, last row, integration step) per data/chrono_hmmwv/README.md
    "longitudinal": ("acc.csv", "acc_test.txt", 100, 849, 0.005),
    "lateral": ("simp_ramp.csv", "ramp_steer.txt", 700, 1069, 0.01),
    "rolling_resistance": ("rr_1.csv", "rr_test.txt", 560, 1059, 0.01),
}


def require_chrono() -> Path:
    if not CHRONO.is_dir():
        raise FileNotFoundError(f"the vendored Chrono data are missing at {CHRONO}")
    return CHRONO


def synthetic_segment(stage: str, seed: int = 1, noise: bool = True,
                      params: dict | None = None) -> tuple[Segment, Segment]:
    """(noisy segment, noise-free segment) of ``stage``'s maneuver: Chrono initial state and driver inputs,
    responses from the 8-DOF model with ``TRUTH`` (``params`` replacing some of it)."""
    base = require_chrono()
    csv, drv, a, b, dt = MANEUVERS[stage]
    ch = Segment.from_chrono(base / csv, base / drv, a, b)
    sim = Simulator8Dof(ch.initial_state, ch.time, ch.throttle, ch.brake, ch.steering, dt=dt,
                        output_dt=0.01, n_out=ch.time.size)
    x = sim.run({**TRUTH, **(params or {})})
    clean = Segment.from_arrays(ch.time, ch.throttle, ch.brake, ch.steering,
                                {c: x[:, i] for c, i in CHANNELS.items()}, ch.initial_state, f"synthetic {stage}")
    return (clean.with_noise(NOISE, seed) if noise else clean), clean


def write_csv(path: Path, seg: Segment, transform=None) -> Path:
    """``seg`` as the calibration CSV of ``vehcal calibrate`` (CSV_COLUMNS); ``transform`` edits the rows first."""
    cols = {"time": seg.time, "throttle": seg.throttle, "brake": seg.brake, "steering": seg.steering,
            **seg.measured}
    rows = np.column_stack([cols[c] for c in CSV_COLUMNS])
    if transform is not None:
        rows = transform(rows)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(CSV_COLUMNS)
        w.writerows(rows.tolist())
    return path
