"""Pac02 tire of the 14-DOF HMMWV and the road friction map: friction truth for the grip estimator's tests."""

from __future__ import annotations

import numpy as np
import pytest

from vehcal_ros.models.vehicle14 import Hmmwv14, RoadMap, RoadPatch
from vehcal_ros.models.vehicle14.tires import combined_forces, fx_pure, fy_pure, peak_mu


@pytest.fixture(scope="module")
def sim() -> Hmmwv14:
    return Hmmwv14(road=RoadMap.uniform(0.6))


def test_drive_and_brake_samples_lie_on_the_true_curve(sim):
    """(s, Fx/Fz) of each wheel while accelerating and braking straight lie on tire_mu_curve at that instant,
    times the combined-slip weighting G_xalpha of the wheel's small toe slip angle (static toe 0.4-0.6 deg per
    wheel; G_xalpha = 0.97-1.0 there)."""
    tp = sim.tire_pack
    sim.reset(speed=8.0)
    pts = []
    for k in range(300):  # 3 s: full throttle, then hard braking
        thr, brk = (0.8, 0.0) if k < 150 else (0.0, 0.35)
        sim.step(thr, brk, 0.0, 10)
        o = sim.outputs()
        for w in range(4):
            s, a, fz, mu = o["slip"][w], o["slip_angle"][w], o["fz"][w], o["mu_road"][w]
            if o["u"] > 3.0 and abs(s) > 0.005:
                curve = sim.tire_mu_curve(w, np.array([s]))[0]
                g = combined_forces(tp, fz, s, a, mu)[0] / fx_pure(tp, fz, s, mu)
                pts.append((s, o["fx"][w] / fz, curve * g, abs(a), 1.0 - g))
    pts = np.array(pts)
    assert len(pts) > 200 and pts[:, 3].max() < 0.03  # straight line: toe and load transfer only
    assert pts[:, 0].max() > 0.02 and pts[:, 0].min() < -0.02  # both traction and braking covered
    assert pts[:, 4].max() < 0.05  # the weighting is a small correction (<= 3 %)
    np.testing.assert_allclose(pts[:, 1], pts[:, 2], rtol=2e-3, atol=1e-4)


def test_mu_max_truth_is_the_curve_peak(sim):
    sim.reset(speed=10.0)
    sim.step(0.2, 0.0, 0.0, 50)
    o = sim.outputs()
    s = np.linspace(-1.0, 1.0, 40001)
    for w in range(4):
        curve = sim.tire_mu_curve(w, s)
        assert abs(curve.max() - o["mu_max"][w]) < 1e-6
        assert abs(o["mu_road"][w] - 0.6) < 1e-15
        assert 0.55 < o["mu_max"][w] < 0.65  # load sensitivity around the reference load


@pytest.mark.parametrize("mu", [0.9, 0.6, 0.3, 0.1])
def test_road_mu_is_the_peak_at_the_reference_load(sim, mu):
    tp = sim.tire_pack
    fz_ref = sim.params.total_mass * sim.params.gravity / 4.0
    s = np.linspace(0.0, 1.0, 100001)
    peak = max(fx_pure(tp, fz_ref, x, mu) for x in s[::10]) / fz_ref
    assert abs(peak - mu) < 1e-5
    assert abs(peak_mu(tp, fz_ref, mu) - mu) < 1e-12


def test_combined_slip_reduces_fx_and_fy(sim):
    tp = sim.tire_pack
    fz = 6300.0
    fx = [combined_forces(tp, fz, 0.05, a, 0.9)[0] for a in (0.0, 0.02, 0.05, 0.1, 0.2)]
    assert fx[0] == pytest.approx(fx_pure(tp, fz, 0.05, 0.9), rel=1e-3)
    assert all(a > b for a, b in zip(fx, fx[1:]))
    fy = [abs(combined_forces(tp, fz, k, 0.05, 0.9)[1]) for k in (0.0, 0.05, 0.1, 0.2)]
    assert fy[0] == pytest.approx(abs(fy_pure(tp, fz, 0.05, 0.9)), rel=2e-2)
    assert all(a > b for a, b in zip(fy, fy[1:]))
    assert fy_pure(tp, fz, 0.05, 0.9) < 0.0  # ISO sign: Fy ~ -C alpha


def test_patches_change_mu_under_each_contact():
    road = RoadMap(
        (RoadPatch(10.0, 30.0, -50.0, 50.0, 0.3, "snow"), RoadPatch(20.0, 30.0, -50.0, 0.0, 0.1, "ice")),
        default_mu=0.9,
    )
    assert road.mu_at(5.0, 0.0) == 0.9 and road.mu_at(15.0, 1.0) == 0.3
    assert road.mu_at(25.0, -1.0) == 0.1 and road.mu_at(25.0, 1.0) == 0.3  # last patch wins
    sim = Hmmwv14(road=road)
    sim.reset(speed=15.0, x=0.0)
    seen = set()
    for _ in range(200):
        sim.step(0.05, 0.0, 0.0, 10)
        o = sim.outputs()
        for w in range(4):
            seen.add(round(float(o["mu_road"][w]), 3))
        # front contacts reach the patch first
        if o["x"] > 9.0 and o["x"] < 9.5:
            assert o["mu_road"][0] == 0.3 and o["mu_road"][2] == 0.9
    assert {0.9, 0.3, 0.1} <= seen


@pytest.mark.parametrize(
    "kw, field",
    [
        (dict(x0=0, x1=1, y0=0, y1=1, mu=-0.1), "mu"),
        (dict(x0=1, x1=0, y0=0, y1=1, mu=0.5), "x1"),
        (dict(x0=0, x1=1, y0=0, y1=0, mu=0.5), "y1"),
        (dict(x0=0, x1=float("nan"), y0=0, y1=1, mu=0.5), "x1"),
    ],
)
def test_patch_validation_names_the_field(kw, field):
    with pytest.raises(ValueError, match=f"'{field}'"):
        RoadPatch(**kw)


def test_road_map_validation():
    with pytest.raises(ValueError, match="'default_mu'"):
        RoadMap((), default_mu=-1.0)
    bounds, mus, default = RoadMap((RoadPatch(0, 1, 2, 3, 0.5),), 0.8).arrays()
    assert bounds.shape == (1, 4) and mus.tolist() == [0.5] and default.tolist() == [0.8]
