"""Grip samples taken at a slip angle: the published sedan's front toe.

The published `sedan` (Chrono's data) has strong front bump steer: its front tires run at slip angles of
0.5-4 deg (toe-in growing as the front rises under traction) while they drive, and its Pac02 tire combines
longitudinal and lateral slip by the friction ellipse, so Fx(kappa) lies well below the pure-longitudinal curve
(57 % of it on the dry road). Known truth checked here:

1. the grip likelihood's friction ellipse (:func:`vehcal_ros.models.pacejka.combined`, written over the pure
   curve and its peak) against the simulator's tire (models/vehicle14/tires.py ``combined_forces``, Chrono's
   tan(beta) form, an independent code), and its slope against a finite difference;
2. the slip angle each friction sample carries (from the description's toe table at the front wheel travel
   L (pitch - pitch_at_rest), and the odometry) against the simulator's ground-truth slip angles;
3. a grip fit on the sedan's dry front samples (transducer forces, 40 s of its daily drive): with the slip
   angles its 90 % interval contains the true mu_max; without them (the old behaviour) it lies far below.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from vehcal_ros.estimation.grip.fit import GripConfig, GripEstimator
from vehcal_ros.estimation.grip.friction_samples import GripDataCollector, GripSignalConfig, slip_geometry
from vehcal_ros.estimation.grip.pipeline import vehicle_signal_config
from vehcal_ros.io.describe import describe_vehicle
from vehcal_ros.models import pacejka
from vehcal_ros.models.vehicle14 import Hmmwv14, RoadMap, load_simulator_params
from vehcal_ros.models.vehicle14.tires import combined_forces, fx_pure, peak_mu
from vehcal_ros.records import GroundTruth


@pytest.fixture(scope="module")
def description():
    return describe_vehicle("sedan")


def test_friction_ellipse_equals_the_simulators_tire(description):
    sim = Hmmwv14(load_simulator_params("sedan"), RoadMap.uniform(0.9))
    sim.reset(speed=0.0)
    tp = sim.tire_pack
    fz = float(sim.outputs()["fz"][0])   # the load describe took the lateral/longitudinal ratio at
    for mu_road in (0.3, 0.6, 0.9):
        d = peak_mu(tp, fz, mu_road)
        for kappa in (-0.01, 0.001, 0.005, 0.02, 0.05, 0.12):
            for alpha in (0.0, 0.004, 0.02, 0.07):
                lat_d = abs(math.sin(alpha)) / description.lateral_ratio / d
                f0 = fx_pure(tp, fz, kappa, mu_road) / fz
                h = 1e-6
                df0 = (fx_pure(tp, fz, kappa + h, mu_road) - fx_pure(tp, fz, kappa - h, mu_road)) / (2 * h * fz)
                got, slope = pacejka.combined(kappa, f0, df0, lat_d)
                truth = combined_forces(tp, fz, kappa, alpha, mu_road)[0] / fz
                assert got == pytest.approx(truth, rel=1e-5, abs=1e-7), (mu_road, kappa, alpha)
                fd = (combined_forces(tp, fz, kappa + h, alpha, mu_road)[0]
                      - combined_forces(tp, fz, kappa - h, alpha, mu_road)[0]) / (2 * h * fz)
                assert slope == pytest.approx(fd, rel=1e-4, abs=1e-4), (mu_road, kappa, alpha)


def _signal_config(description) -> GripSignalConfig:
    """The grip estimator's slip geometry from the description (as benchmarks/bench_tire_forces.py sets it), with
    the collector's friction-ellipse samples on (the pipeline fits an ellipse tire's samples as pure slip:
    grip_pipeline.vehicle_signal_config; these tests check the collector's slip angles and the fit's ellipse
    model themselves, against the odometry's true lateral velocity)."""
    d = description
    r0 = d.r0 - d.rolling_excess                 # the tire's R0; it rolls at R0 - deflection / 3
    cfg = GripSignalConfig(**{**slip_geometry(d), "radius_mode": "load", "r0": r0, "kt": 3.0 * d.ktf,
                              "kt_rear": 0.0}, max_lateral_mu=10.0)
    return dataclasses.replace(vehicle_signal_config(cfg, d), combined_slip="ellipse")


def _sedan_drive(description, grade: float = 0.0):
    """40 s of the sedan's daily drive (dry road, two accelerations) on a road of ``grade``, transducer forces on:
    the collector's front-axle samples and the ground truth."""
    from vehcal_ros.io.scenarios import load_scenario
    from vehcal_ros.io.simulate import ScenarioRun

    scenario = load_scenario("daily_driving", vehicle="sedan").with_seed(0).with_grade(grade)
    collector = GripDataCollector(_signal_config(description))
    truth = []
    for _, rec, _ in ScenarioRun(scenario, duration=40.0):
        if isinstance(rec, GroundTruth):
            truth.append(rec)
        else:
            collector.add(rec)
    collector.flush()
    return collector, truth


@pytest.fixture(scope="module")
def dry_drive(description):
    return _sedan_drive(description)


@pytest.mark.parametrize("grade", [0.0, 0.05])
def test_sample_slip_angles_match_the_simulators(grade, dry_drive, description):
    """On a level road and uphill 5 %: the IMU's pitch holds the grade, which the collector takes out (read at the
    start, standing, then followed with the GNSS climb angle; otherwise it would read as 0.13 m of front travel,
    far up the bump-steer table: 4 deg of slip-angle error on the graded drive's first samples)."""
    collector, truth = dry_drive if grade == 0.0 else _sedan_drive(description, grade)
    data = collector.snapshot("front_axle")
    assert data.t.size > 150
    t = np.array([g.t for g in truth])
    sin_true = np.abs(np.sin(np.array([g.slip_angle[:2] for g in truth]))).mean(axis=1)
    # each friction sample: the block mean over the 0.1 s around its stamp (both front wheels alike: toe
    # symmetric, the lane change is outside these samples' steering gate)
    inside = data.t + 0.05 <= t[-1]
    block = np.array([sin_true[(t >= tb - 0.05) & (t < tb + 0.05)].mean() for tb in data.t[inside]])
    got = data.lat[inside] * description.lateral_ratio
    assert np.median(block) > math.sin(math.radians(0.5))          # the scrub is there: ~0.5-4 deg
    err = got - block
    # toe from pitch: the rear-axle travel is neglected (~0.1 deg rms measured); the odometry noise averages out
    assert abs(float(np.median(err))) < math.sin(math.radians(0.1))
    assert float(np.sqrt(np.mean(err ** 2))) < math.sin(math.radians(0.3))
    big = block > math.sin(math.radians(2.0))
    assert big.sum() > 20
    if grade == 0.0:   # each large angle within 15 %
        assert np.all(np.abs(err[big]) < 0.15 * block[big])
    # (on the grade the front wheels run at 2.5-4 deg of toe, where the bump-steer table is twice as steep, so the
    # pitch's and the grade's noise weigh twice as much per sample: the median and the RMS above are the check)


@pytest.mark.slow
def test_fit_with_slip_angles_contains_the_true_mu_max(dry_drive):
    collector, truth = dry_drive
    data = collector.snapshot("front_axle")
    mu_max = float(np.mean([g.mu_max[:2] for g in truth if g.fz is not None]))   # ~0.90 (dry)
    cfg = GripConfig()
    idx = np.unique(np.round(np.linspace(0, data.t.size - 1, 100)).astype(int))   # as GripPipeline.max_fit_points
    args = (data.slip[idx], data.mu[idx])
    new = GripEstimator(cfg).fit(*args, slip_var=data.slip_var[idx], lateral=data.lat[idx]).mu_max
    old = GripEstimator(cfg).fit(*args, slip_var=data.slip_var[idx]).mu_max
    assert new.lower <= mu_max <= new.upper, (new, mu_max)
    assert old.upper < mu_max, (old, mu_max)   # the pure-slip fit of the scrubbed samples: far too low


def test_mf2002_weighting_equals_the_simulators_tire():
    """The HMMWV's Pac02 combines by the MF2002 weighting functions: the weight grip_signals divides each
    sample's friction by (coefficients from `vehcal vehicle describe`) equals Fx / Fx0 of the simulator's tire
    (models/vehicle14/tires.py, an independent code) over slips, slip angles, roads and loads; and it is 1 at zero
    slip angle. The describe'd description reads back (combined_slip mf and its 5 coefficients)."""
    from vehcal_ros.estimation.grip.friction_samples import combined_weight

    desc = describe_vehicle("hmmwv")
    assert desc.combined_slip == "mf" and len(desc.combined_coefficients) == 5
    sim = Hmmwv14(load_simulator_params("hmmwv"), RoadMap.uniform(0.9))
    sim.reset(speed=0.0)
    tp = sim.tire_pack
    fz0 = float(sim.outputs()["fz"][0])
    for fz in (0.7 * fz0, fz0):   # REX2 dfz (0.0017 dfz) is left out: within 1e-3 at +-30 % load
        for mu_road in (0.3, 0.9):
            for kappa in (-0.02, 0.001, 0.01, 0.04):
                for alpha in (0.0, 0.005, -0.0185, 0.03):
                    truth = combined_forces(tp, fz, kappa, alpha, mu_road)[0] / fx_pure(tp, fz, kappa, mu_road)
                    got = combined_weight(desc.combined_coefficients, kappa, alpha)
                    assert got == pytest.approx(truth, rel=1e-3), (fz, mu_road, kappa, alpha)
    assert combined_weight(desc.combined_coefficients, 0.01, 0.0) == 1.0
    assert combined_weight(desc.combined_coefficients, 0.0, math.radians(1.06)) < 0.98   # the front's static toe


@pytest.mark.parametrize("vehicle", ["sedan", "sedan_zero_bump_steer"])
def test_shipped_toe_and_tire_fields_are_describes(vehicle):
    """The shipped descriptions' suspension section and combined-slip fields come from `vehcal vehicle describe`
    (to its 7 significant digits), not typed by hand."""
    from vehcal_ros.vehicle.description import load_description

    shipped, described = load_description(vehicle), describe_vehicle(vehicle)
    for name in ("combined_slip", "lateral_ratio", "pitch_at_rest", "wheel_rate_f", "wheel_rate_r"):
        assert getattr(shipped, name) == getattr(described, name), name
    for name in ("toe_front", "toe_rear"):
        np.testing.assert_allclose(getattr(shipped, name), getattr(described, name), rtol=1e-6, atol=1e-9)
