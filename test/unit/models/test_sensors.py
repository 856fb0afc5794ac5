"""Sensor models and the simulation loop: rates, noise std (chi-square bounds), bias, latency, divergence."""

from __future__ import annotations

import math
import threading
import time
from dataclasses import replace

import numpy as np
import pytest
from scipy import stats

from vehcal_ros.errors import InputError
from vehcal_ros.io.scenarios import parse_scenario
from vehcal_ros.io.simulate import ScenarioRun, SimulationDiverged, run_scenario
from vehcal_ros.models.sensors import ClockTick, SensorSpec, SensorSuite
from vehcal_ros.records import (
    Controls,
    GnssVelocity,
    GroundTruth,
    ImuSample,
    OdomSample,
    TireForce,
    WheelSpeeds,
)


class StandIn:
    """Tiny point-mass stand-in with the Hmmwv14 interface (test only): u' = 3 throttle - 8 brake - 0.1."""

    def __init__(self, dt: float = 1e-3, speed: float = 0.0, diverge_at: float | None = None,
                 nan_at: float | None = None) -> None:
        self.dt, self.t, self.u, self.x, self.yaw = dt, 0.0, speed, 0.0, 0.0
        self.diverge_at, self.nan_at = diverge_at, nan_at
        self.steer = 0.0

    def step(self, throttle, brake, steering, n_steps=1):
        for _ in range(n_steps):
            if self.diverge_at is not None and self.t >= self.diverge_at - 1e-12:
                raise FloatingPointError("state blew up")
            self.u = max(0.0, self.u + self.dt * (3.0 * throttle - 8.0 * brake - 0.1))
            self.x += self.dt * self.u
            self.t += self.dt
        self.steer = steering

    def outputs(self):
        u = float("nan") if self.nan_at is not None and self.t >= self.nan_at else self.u
        w = np.full(4, u / 0.47)
        return {"t": self.t, "x": self.x, "y": 0.0, "z": 0.0, "roll": 0.01, "pitch": 0.0, "yaw": self.yaw,
                "u": u, "v": 0.0, "w": 0.0, "p": 0.0, "q": 0.0, "r": 0.0, "ax": 0.0, "ay": 0.0, "az": 9.81,
                "omega": w, "fx": np.zeros(4), "fy": np.zeros(4), "fz": np.full(4, 2000.0 * 9.81 / 4),
                "slip": np.zeros(4), "slip_angle": np.zeros(4), "rolling_radius": np.full(4, 0.47),
                "mu_road": np.full(4, 0.9), "mu_max": np.full(4, 0.9), "steer_angle": np.full(2, self.steer)}


def _scenario(sensors: dict | None = None, duration: float = 2.0, **extra):
    return parse_scenario({"name": "unit", "duration": duration, "sensors": sensors or {}, **extra})


def _collect(scenario, model=None, **kw):
    run = ScenarioRun(scenario, model=model or StandIn(scenario.dt, scenario.initial.speed), **kw)
    return run, list(run)


def test_rates_and_stamps():
    sc = _scenario({"wheel_speeds": {"rate": 200}, "imu": {"rate": 100}, "odom": {"rate": 50},
                    "tire_forces": {"rate": 20}, "controls": {"rate": 10}, "ground_truth": {"rate": 5},
                    "clock": {"rate": 1000}, "gnss": {"rate": 10, "latency": 0.0}}, duration=2.0)
    _, items = _collect(sc)
    by = {}
    for topic, rec, t_rel in items:
        by.setdefault(topic, []).append(rec)
        assert t_rel == rec.t  # no latency
    expect = {"/vehicle/wheel_speeds": 200, "/vehicle/imu": 100, "/vehicle/odom": 50, "/vehicle/tire_forces": 20,
              "/vehicle/controls": 10, "/vehicle/ground_truth": 5, "/clock": 1000, "/vehicle/gnss/vel": 10}
    types = {"/vehicle/wheel_speeds": WheelSpeeds, "/vehicle/imu": ImuSample, "/vehicle/odom": OdomSample,
             "/vehicle/tire_forces": TireForce, "/vehicle/controls": Controls,
             "/vehicle/ground_truth": GroundTruth, "/clock": ClockTick, "/vehicle/gnss/vel": GnssVelocity}
    for topic, rate in expect.items():
        recs = by[topic]
        per_stamp = 4 if topic == "/vehicle/tire_forces" else 1
        assert len(recs) == per_stamp * (2 * rate + 1), topic
        assert all(isinstance(r, types[topic]) for r in recs)
        stamps = np.unique([r.t for r in recs])
        assert np.allclose(np.diff(stamps), 1.0 / rate, atol=1e-9)
        assert stamps[0] == 0.0 and stamps[-1] == pytest.approx(2.0)
    forces = by["/vehicle/tire_forces"]
    assert [f.wheel for f in forces[:4]] == [0, 1, 2, 3]


def test_noise_std_within_chi_square_bounds_and_bias():
    sigma = {"u": 0.1, "v": 0.05, "yaw_rate": 0.02}
    sc = _scenario({"odom": {"rate": 1000, "noise_std": sigma, "bias": {"yaw_rate": 0.01}},
                    "wheel_speeds": {"rate": 1000, "noise_std": 1.0, "bias": 0.5}}, duration=4.0, seed=7)
    _, items = _collect(sc, StandIn(speed=10.0))
    odom = [r for tp, r, _ in items if tp == "/vehicle/odom"]
    n = len(odom)
    true_u = np.array([10.0 - 0.1 * r.t for r in odom])  # the stand-in decelerates at 0.1 m/s^2
    resid = {"u": np.array([r.u for r in odom]) - true_u, "v": np.array([r.v for r in odom]),
             "yaw_rate": np.array([r.yaw_rate for r in odom]) - 0.01}
    lo, hi = stats.chi2.ppf([0.0005, 0.9995], n - 1)
    for k, s in sigma.items():
        stat = (n - 1) * np.var(resid[k], ddof=1) / s**2
        assert lo < stat < hi, (k, stat, lo, hi)
        assert abs(resid[k].mean()) < 4 * s / math.sqrt(n), k  # bias removed -> zero mean
    ws = np.array([r.omega for tp, r, _ in items if tp == "/vehicle/wheel_speeds"])
    true_w = np.array([10.0 - 0.1 * r.t for r in odom])[:, None] / 0.47
    res = ws - true_w - 0.5
    m = res.size
    lo, hi = stats.chi2.ppf([0.0005, 0.9995], m - 1)
    assert lo < (m - 1) * np.var(res, ddof=1) < hi
    assert abs(res.mean()) < 4 / math.sqrt(m)
    # the four wheels get independent noise
    assert abs(np.corrcoef(res[:, 0], res[:, 1])[0, 1]) < 0.1


def test_latency_delays_release_not_stamp():
    sc = _scenario({"imu": {"rate": 100, "latency": 0.0125}, "odom": {"rate": 100, "latency": 0.0}}, duration=1.0)
    run, items = _collect(sc)
    imu = [(rec.t, t_rel) for tp, rec, t_rel in items if tp == "/vehicle/imu"]
    assert len(imu) == 101  # records measured near the end are still released after the end
    for t, t_rel in imu:
        assert t_rel - t == pytest.approx(0.013, abs=1e-9)  # 12.5 ms rounded up to the 1 ms step grid
    rel = [t_rel for _, _, t_rel in items]
    assert rel == sorted(rel)  # released in time order
    imu_stamps = [t for t, _ in imu]
    assert imu_stamps == sorted(imu_stamps)


def test_seed_determinism_and_sensor_independence():
    base = {"odom": {"rate": 100, "noise_std": 0.1}, "imu": {"rate": 100, "noise_std": {"yaw_rate": 0.02}}}
    a = [r for tp, r, _ in _collect(_scenario(base, seed=3))[1] if tp == "/vehicle/odom"]
    b = [r for tp, r, _ in _collect(_scenario(base, seed=3))[1] if tp == "/vehicle/odom"]
    c = [r for tp, r, _ in _collect(_scenario(base, seed=4))[1] if tp == "/vehicle/odom"]
    no_imu = {**base, "imu": {"enabled": False}}
    d = [r for tp, r, _ in _collect(_scenario(no_imu, seed=3))[1] if tp == "/vehicle/odom"]
    assert a == b == d
    assert a != c


def test_suite_rejects_bad_config():
    with pytest.raises(ValueError, match="unknown sensor"):
        SensorSuite({"radar": SensorSpec(rate=10)}, dt=1e-3)
    with pytest.raises(ValueError, match="whole number of steps"):
        SensorSuite({"imu": SensorSpec(rate=300)}, dt=1e-3)


def test_divergence_stops_with_time_and_scenario():
    sc = _scenario({"odom": {"rate": 100}}, duration=2.0)
    emitted = []
    with pytest.raises(SimulationDiverged, match=r"scenario 'unit': the model diverged at t = 0\.500 s"):
        for item in ScenarioRun(sc, model=StandIn(diverge_at=0.5)):
            emitted.append(item)
    assert emitted and max(rec.t for _, rec, _ in emitted) < 0.5 + 1e-9
    got = []
    with pytest.raises(SimulationDiverged, match=r"at t = 0\.300 s \(output 'u' is not finite\)"):
        run_scenario(sc, lambda tp, rec: got.append(rec), model=StandIn(nan_at=0.3))
    assert all(np.isfinite(r.u) for r in got if isinstance(r, OdomSample))
    assert max(r.t for r in got) < 0.3


def test_speed_controller_tracks_target():
    sc = _scenario({"odom": {"rate": 10}}, duration=12.0,
                   driver={"speed_control": {"target": [{"type": "ramp", "t0": 0, "t1": 4, "to": 10}],
                                             "kp": 0.5, "ki": 0.2}})
    _, items = _collect(sc)
    odom = {round(r.t, 3): r.u for tp, r, _ in items if tp == "/vehicle/odom"}
    assert odom[12.0] == pytest.approx(10.0, abs=0.05)
    ctl = [r for tp, r, _ in items if tp == "/vehicle/controls"]
    assert max(c.throttle for c in ctl) <= 1.0 and all(c.brake == 0.0 for c in ctl if c.t < 4)


def test_controls_source_and_stop():
    sc = _scenario({"controls": {"rate": 100}}, duration=5.0,
                   driver={"throttle": [{"type": "step", "t0": 0, "value": 1.0}]})
    calls = []

    def source(t):
        calls.append(t)
        return None if t < 1.0 else (0.2, 0.0, 5.0)  # steering clipped to 1

    stop = threading.Event()
    got = []

    def on_record(tp, rec):
        got.append(rec)
        if rec.t >= 2.0:
            stop.set()

    summary = run_scenario(sc, on_record, model=StandIn(), controls_source=source, stop=stop)
    assert summary.stopped and summary.t_end == pytest.approx(2.0)
    ctl = [r for r in got if isinstance(r, Controls)]
    assert ctl[0].throttle == 0.0 and ctl[-1].throttle == 0.2 and ctl[-1].steering == 1.0
    assert np.allclose(np.diff(calls), 0.01)


def test_realtime_pacing():
    sc = _scenario({"clock": {"rate": 100}}, duration=0.5)
    t0 = time.monotonic()
    summary = run_scenario(sc, lambda *a: None, realtime_factor=5.0, model=StandIn())
    wall = time.monotonic() - t0
    assert 0.095 <= wall < 1.0
    assert summary.realtime_factor == pytest.approx(5.0, rel=0.2)
    fast = run_scenario(sc, lambda *a: None, realtime_factor=0.0, model=StandIn())
    assert fast.wall_s < wall


def test_scenario_rate_must_fit_dt():
    with pytest.raises(InputError, match=r"scenario.sensors.imu.rate: 1/rate = 0.0015 s"):
        _scenario({"imu": {"rate": 1 / 0.0015}})
    sc = _scenario(duration=1.0)
    assert replace(sc, seed=5).seed == 5
