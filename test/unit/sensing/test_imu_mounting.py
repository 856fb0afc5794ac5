"""The IMU's mounting yaw from ordinary driving (estimation/sensing/imu_mounting.py) and its naming on /diagnostics.

Synthetic straight drive: 200 s at 10-20 m/s with launches and brakings (f_x = +-1.5 m/s^2 over 8 s and 13 s
periods), the body's lateral specific force u r plus a 2 % crossfall (0.196 m/s^2) and lane-keeping yaw rates of
+-0.01 rad/s, seen by an IMU turned psi on its mount (f_x' = f_x cos psi + f_y sin psi, f_y' = -f_x sin psi +
f_y cos psi) with 0.05 m/s^2 white noise per axis and 0.005 rad/s on the yaw rate, at 100 Hz; GNSS speed at
10 Hz with 0.05 m/s noise.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from vehcal_ros.estimation.sensing.imu_mounting import ImuYawMount
from vehcal_ros.records import GnssVelocity, ImuSample


def synthetic_drive(seed: int, psi_deg: float, duration: float = 200.0):
    rng = np.random.default_rng(seed)
    dt = 0.01
    t = np.arange(int(round(duration / dt))) * dt
    fx = 1.0 * np.sin(2 * np.pi * t / 8.0) + 0.5 * np.sin(2 * np.pi * t / 13.0)
    u = 15.0 + np.cumsum(fx) * dt
    r = 0.01 * np.sin(2 * np.pi * t / 17.0)
    fy = u * r + 9.81 * 0.02
    psi = math.radians(psi_deg)
    fx_m = fx * math.cos(psi) + fy * math.sin(psi) + 0.05 * rng.standard_normal(t.size)
    fy_m = -fx * math.sin(psi) + fy * math.cos(psi) + 0.05 * rng.standard_normal(t.size)
    r_m = r + 0.005 * rng.standard_normal(t.size)
    out: list[object] = []
    for i in range(t.size):
        ti = round(float(t[i]), 9)
        if i % 10 == 0:
            out.append(GnssVelocity(t=ti, ve=float(u[i] + 0.05 * rng.standard_normal()),
                                    vn=float(0.05 * rng.standard_normal()), std=0.05))
        out.append(ImuSample(t=ti, roll=0.0, roll_rate=0.0, yaw_rate=float(r_m[i]), ax=float(fx_m[i]),
                             ay=float(fy_m[i])))
    return out


def _run(records) -> ImuYawMount:
    m = ImuYawMount()
    for rec in records:
        if isinstance(rec, ImuSample):
            m.add_imu(rec)
        else:
            m.add_gnss(rec)
    return m


def test_mounting_yaw_is_recovered_with_an_honest_standard_error():
    """Over 10 seeds each of psi = 0 and 1 deg, z = (slope + sin psi) / se must look N(0, 1): sum z^2 within the
    two-sided 0.1 % bounds of chi-square(20) (6.0, 45.3). Power: an SE understated 2x gives 4 chi-square(20),
    below 45.3 with probability 6 % (94 % power). And the 1 deg mounting is told apart from 0 on every seed (the
    naming rule, > sin 0.5 deg and > 3 SE)."""
    z = []
    for psi in (0.0, 1.0):
        for seed in range(10):
            m = _run(synthetic_drive(seed, psi))
            z.append((m.slope + math.sin(math.radians(psi))) / m.slope_se)
            if psi:
                assert abs(m.slope) > max(math.sin(math.radians(0.5)), 3.0 * m.slope_se), (seed, m.slope)
                assert abs(m.angle_deg - psi) < 0.3
            else:
                assert abs(m.slope) < math.sin(math.radians(0.5))
    z = np.asarray(z)
    lo, hi = stats.chi2.ppf([0.0005, 0.9995], z.size)
    assert lo < float(z @ z) < hi, z


def test_a_named_mounting_turns_the_samples_back():
    """Once named, a sample of a pure 2 m/s^2 forward acceleration seen by the IMU turned 1 deg (f_x' = 2 cos psi,
    f_y' = -2 sin psi) is turned back to (2, 0) within the estimate's error (0.3 deg: 0.01 m/s^2 sideways); an
    aligned IMU's samples pass unchanged (the same object)."""
    psi = math.radians(1.0)
    seen = ImuSample(t=0.0, roll=0.0, roll_rate=0.0, yaw_rate=0.0, ax=2.0 * math.cos(psi), ay=-2.0 * math.sin(psi))
    m = _run(synthetic_drive(0, 1.0))
    assert m.named
    back = m.corrected(seen)
    assert back.ax == pytest.approx(2.0, abs=1e-4) and abs(back.ay) < 0.01
    aligned = _run(synthetic_drive(0, 0.0))
    assert not aligned.named and aligned.corrected(seen) is seen


def test_the_grip_pipeline_names_the_mounting():
    """The wiring: a grip pipeline fed the misaligned drive names the IMU's mounting on /diagnostics' vehicle
    description status (doubtful_assumptions); the aligned one does not."""
    from vehcal_ros.estimation.grip.pipeline import pipeline_from_params
    from vehcal_ros.nodes.grip_estimator import PARAMS
    from vehcal_ros.vehicle.description import load_description

    values = {p.name: p.default for p in PARAMS}
    for psi, named in ((1.0, True), (0.0, False)):
        pipeline = pipeline_from_params(values, load_description("hmmwv"))
        for rec in synthetic_drive(0, psi):
            pipeline.add(rec)
        doubts = [d for d in pipeline.doubtful_assumptions() if d.startswith("IMU mounting yaw")]
        assert bool(doubts) == named, doubts
        if named:
            assert "+1.0" in doubts[0] or "+0.9" in doubts[0], doubts
