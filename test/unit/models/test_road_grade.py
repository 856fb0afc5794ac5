"""Road grade of the 14-DOF simulator (models/vehicle14/road.py ``grade``): gravity tilted in the road frame, the
attitude and accelerometer referred to the level frame, the scenario key ``road.grade``."""

from __future__ import annotations

import math

import numpy as np
import pytest

from vehcal_ros.errors import InputError
from vehcal_ros.io.scenarios import parse_scenario
from vehcal_ros.models.vehicle14 import Hmmwv14, RoadMap

G = 9.81


def _sim(grade: float, speed: float) -> Hmmwv14:
    sim = Hmmwv14(road=RoadMap(grade=grade), dt=1e-3)
    sim.reset(speed=speed)
    return sim


def test_zero_grade_is_the_flat_road_bit_for_bit():
    a, b = Hmmwv14(dt=1e-3), _sim(0.0, 10.0)
    a.reset(speed=10.0)
    a.step(0.3, 0.0, 0.05, n_steps=300)
    b.step(0.3, 0.0, 0.05, n_steps=300)
    oa, ob = a.outputs(), b.outputs()
    for k, v in oa.items():
        assert np.array_equal(np.asarray(v), np.asarray(ob[k])), k


def test_coasting_uphill_decelerates_by_the_gravity_component():
    flat, up = _sim(0.0, 15.0), _sim(0.05, 15.0)
    for s in (flat, up):
        s.step(0.0, 0.0, 0.0, n_steps=500)   # settle the pitch from the reset
    u0 = (flat.outputs()["u"], up.outputs()["u"])
    for s in (flat, up):
        s.step(0.0, 0.0, 0.0, n_steps=2000)
    du = (flat.outputs()["u"] - u0[0], up.outputs()["u"] - u0[1])
    extra = (du[0] - du[1]) / 2.0   # m/s^2 of extra deceleration uphill
    # g sin(a) slows the whole mass, the wheels' spin inertia adds I / r^2 per wheel to what is slowed (the
    # HMMWV: 4 x 7.8 / 0.47^2 ~ 140 kg on ~2600 kg, 5 %); rolling resistance and drag differ by < 0.2 % (cos a)
    p = up.params
    m = p.total_mass
    spin = 4.0 * 7.78782 / 0.47**2
    expect = G * math.sin(math.atan(0.05)) * m / (m + spin)
    assert extra == pytest.approx(expect, rel=0.03)


def test_at_rest_the_accelerometer_and_attitude_see_the_grade():
    flat, up = _sim(0.0, 0.0), _sim(0.05, 0.0)
    for s in (flat, up):
        # held on a light brake (400 N m per wheel; it fades in below 1 rad/s, so the HMMWV creeps back at a
        # steady ~0.15 m/s: no acceleration, so the accelerometer reads gravity only)
        s.step(0.0, 0.1, 0.0, n_steps=3000)
    of, ou = flat.outputs(), up.outputs()
    a = math.atan(0.05)
    # nose up the slope is negative pitch (ZYX, z up); the suspension pitches a little more under the grade
    assert ou["pitch"] - of["pitch"] == pytest.approx(-a, abs=5e-3)
    # at rest the accelerometer reads minus gravity in the body axes: exactly -g sin(pitch) on x (level frame)
    assert ou["ax"] == pytest.approx(-G * math.sin(ou["pitch"]), abs=5e-3)
    assert ou["ax"] == pytest.approx(G * math.sin(a), abs=0.05)
    assert of["ax"] == pytest.approx(-G * math.sin(of["pitch"]), abs=5e-3)
    # the tires hold the slope's share of the weight: sum Fx = m g sin(a) (plus the creep's rolling resistance)
    assert float(np.sum(ou["fx"])) == pytest.approx(up.params.total_mass * G * math.sin(a), rel=0.03)


def test_scenario_road_grade():
    sc = parse_scenario({"name": "g", "duration": 1.0, "road": {"grade": -0.05}})
    assert sc.road.grade == -0.05 and sc.road.to_road_map().grade == -0.05
    assert parse_scenario({"name": "g", "duration": 1.0}).road.to_road_map().grade == 0.0
    assert sc.with_grade(0.03).road.grade == 0.03
    with pytest.raises(InputError, match=r"road\.grade"):
        parse_scenario({"name": "g", "duration": 1.0, "road": {"grade": 0.8}})
    with pytest.raises(ValueError, match="grade"):
        RoadMap(grade=1.0)
