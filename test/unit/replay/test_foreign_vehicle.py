"""A car this project did not build: a short CommonRoad multi-body drive (benchmarks/foreign/commonroad_drive.py,
parameter set 3, RWD) recorded as a bag of production sensors, its ground truth checked against the road, and
bag replay with estimated tire forces and the spec-sheet description (benchmarks/foreign/vehicles/cr_set3.yaml)
run over it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from vehcal_ros.io.bags import bag_topics, read_bag

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "benchmarks" / "foreign" / "commonroad_drive.py"
VEHICLE = ROOT / "benchmarks" / "foreign" / "vehicles" / "cr_set3.yaml"

pytestmark = pytest.mark.slow


def _drive_module():
    spec = importlib.util.spec_from_file_location("commonroad_drive", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("commonroad_drive", module)
    spec.loader.exec_module(module)
    return module


def test_commonroad_set3_drive_bag_truth_and_replay(tmp_path):
    pytest.importorskip("vehiclemodels", reason="the CommonRoad vehicle models (commonroad-vehicle-models, "
                        "requirements-test.txt) are not installed")
    crd = _drive_module()
    result = crd.simulate_drive(3, seed=2, duration=40.0, roads=(1.0, 0.6))
    assert result.summary["layout"] == "RWD"
    bag = tmp_path / "cr3_drive"
    counts = crd.write_drive_bag(bag, result)

    topics = bag_topics(bag)
    for topic in ("/vehicle/wheel_speeds", "/vehicle/imu", "/vehicle/odom", "/vehicle/controls",
                  "/vehicle/ground_truth"):
        assert topics[topic][1] == counts[topic] > 0, topic
    assert "/vehicle/tire_forces" not in topics          # production sensors only
    assert counts["/vehicle/wheel_speeds"] == pytest.approx(40.0 * 100, abs=2)

    # ground truth read back from the bag: on the dry first half the peak of the tire's pure-longitudinal
    # Fx/Fz equals the road's friction scale (1.0) within 2 %; on the wet half 0.6
    truth = [rec for topic, rec in read_bag(bag) if topic == "/vehicle/ground_truth"]
    t = np.array([g.t for g in truth])
    mu_max = np.array([g.mu_max for g in truth])
    mu_road = np.array([g.mu_road for g in truth])
    dry = t < 19.0
    assert np.all(mu_road[dry] == 1.0)
    np.testing.assert_allclose(mu_max[dry], 1.0, rtol=0.02)
    np.testing.assert_allclose(mu_max[t > 21.0], 0.6, rtol=0.02)
    wheel = [rec for topic, rec in read_bag(bag) if topic == "/vehicle/wheel_speeds"]
    torque = np.array([w.torque for w in wheel])
    assert np.abs(torque[:, :2]).max() > 0 and np.abs(torque[:, 2:]).max() > np.abs(torque[:, :2]).max()

    from vehcal_ros.replay.serial import replay_bag

    params = {"grip_estimator": {"force_source": "estimated", "vehicle": str(VEHICLE)}}
    res = replay_bag(bag, params=params, calibration=False, workers=1)
    assert res.n_messages > 0
