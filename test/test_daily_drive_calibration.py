"""The user's path on an everyday drive calibrates the model: ``vehcal simulate daily_driving`` (the 14-DOF HMMWV,
seed 0, 160 s, no dedicated maneuvers) replayed by ``vehcal replay --vehicle hmmwv_sim`` with the shipped
parameters accepts all three calibration stages, each predicting its held-back part no worse than the model it
replaced.

A regression check, deterministic (one bag, one seed). With the shipped defaults (residual model ``auto``,
``require_order: false``; 2026-11-28) the rolling-resistance stage is accepted on the coast [35.2, 44.2] s, the
lateral stage on [16.2, 21.8] s, and the longitudinal stage on [87.2, 93.3] s: its 0.5 s mean acceleration spans
less than ``long_min_accel_range``, which applies only while rr is unknown (calibration_pipeline.
known_rr_accel_range); the fits run at the rolling radius the drive's free rolling shows (segments.
free_rolling_radius). benchmarks/holdout_vehicles.md has the held-out prediction of the spec-sheet descriptions."""

from __future__ import annotations

import json

import pytest

from vehcal_ros.cli import main

pytestmark = pytest.mark.slow


def test_daily_drive_calibrates_all_three_stages(tmp_path) -> None:
    bag, out = tmp_path / "daily", tmp_path / "replay.json"
    assert main(["simulate", "daily_driving", "--vehicle", "hmmwv", "--seed", "0", "--bag", str(bag), "--quiet"]) == 0
    assert main(["replay", str(bag), "--vehicle", "hmmwv_sim", "--json", str(out), "--quiet"]) == 0
    doc = json.loads(out.read_text())
    cal = doc["calibration"]
    accepted = {s for s, c in cal.items() if c["final"] is not None}
    assert accepted == {"longitudinal", "lateral", "rolling_resistance"}, {
        s: c["status"]["message"] for s, c in cal.items()}
    for stage in accepted:   # each accepted fit predicted its held-back part no worse than the model it replaced
        assert cal[stage]["holdout"]["passed"], (stage, cal[stage]["holdout"])
    radius = doc["counters"]["calibration_rolling_radius"]   # measured where the wheels roll freely
    assert radius["seconds"] >= 2.0 and radius["se"] < 1e-3 * radius["radius"]
