"""Tire forces from production sensors: the wheel-spin Kalman filter on a synthetic wheel with a known force, the
IMU load transfer against the 14-DOF simulator's true loads, the block variance of mu, force_source switching,
and the sensor/bag layer (net torque in JointState.effort, true forces in the ground truth)."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from slip_geometry import KT, R0, SYNTHETIC_GEOMETRY

from vehcal_ros.estimation.grip.friction_samples import GripDataCollector, GripSignalConfig
from vehcal_ros.estimation.grip.pipeline import GripPipeline
from vehcal_ros.estimation.sensing.tire_forces import (
    TireForceConfig,
    TireForceEstimator,
    TireForceVehicle,
    estimate_fx,
    normal_loads,
)
from vehcal_ros.records import GroundTruth, ImuSample, OdomSample, TireForce, WheelSpeeds

VEH = TireForceVehicle.hmmwv()
CFG = TireForceConfig()


@pytest.fixture(scope="module")
def sim_config() -> TireForceConfig:
    """The estimator's settings with the simulated HMMWV's description as ``vehcal vehicle describe`` derives
    it from the model file (what a user would have measured; no number copied by hand). Its ``nominal.rr`` is a
    prior midpoint, not the tire's: the rolling-resistance lever is the tire's QSY1 R0 (data sheet / coast-down;
    the calibrator refines it), read from the same model file."""
    from vehcal_ros.io.describe import describe_vehicle
    from vehcal_ros.models.vehicle14.params import load_simulator_params

    tire = load_simulator_params("hmmwv").tire
    veh = replace(TireForceVehicle.from_description(describe_vehicle("hmmwv")), rr=tire.qsy1 * tire.r0)
    return TireForceConfig(vehicle=veh)


# ------------------------------------------------------------------------------------------------ synthetic wheel
def synthetic_wheel(n: int = 3000, dt: float = 0.01, seed: int = 0, fz: float = 6000.0, lever_shift: float = 0.0):
    """A wheel whose spin omega(t) and tire force Fx(t) are chosen in closed form; the net torque that makes them
    consistent follows from the spin equation evaluated analytically (no integration, no filter code). The tire's
    unloaded radius is the description's plus ``lever_shift`` (m)."""
    t = np.arange(n) * dt
    J = VEH.wheel_inertia[0]
    r = VEH.r0 + lever_shift - fz / VEH.kz[0]
    omega = 30.0 + 4.0 * np.sin(0.4 * t) + 1.5 * np.sin(1.3 * t)          # rad/s
    domega = 1.6 * np.cos(0.4 * t) + 1.95 * np.cos(1.3 * t)               # its exact derivative
    fx = 600.0 + 400.0 * np.sin(0.7 * t + 0.3) + 150.0 * np.sin(2.1 * t)  # N, the known truth
    torque = J * domega + r * fx + VEH.rr * fz                            # omega > 0 throughout
    rng = np.random.default_rng(seed)
    om_meas = omega + CFG.wheel_speed_std * rng.standard_normal(n)
    tq_meas = torque + CFG.torque_std * rng.standard_normal(n)
    four = lambda a: np.repeat(a[:, None], 4, axis=1)  # noqa: E731 - same wheel on all four corners
    return t, four(om_meas), four(tq_meas), np.full((n, 4), fz), fx


def test_kalman_filter_recovers_a_known_force_within_its_own_variance() -> None:
    t, om, tq, fz, fx_true = synthetic_wheel()
    # the synthetic wheel sits on all four corners; rear and front share the inertia here
    fx, var, rho = estimate_fx(t, om, tq, fz, CFG)
    k = slice(100, None)  # after the filter settled
    z = (fx[k, 0] - fx_true[k]) / np.sqrt(var[k, 0])
    err = fx[k, 0] - fx_true[k]
    # the stated variance covers the error (the random-walk model is conservative for a smooth force) ...
    assert np.mean(np.abs(z) < 1.645) >= 0.90
    assert np.mean(np.abs(z) < 2.576) >= 0.99
    # ... but not absurdly so: the error is a real fraction of the stated SD
    assert 0.3 < np.sqrt(np.mean(z ** 2)) <= 1.1
    # no bias beyond what the correlated error allows: SE of the mean with n_eff from the filter's rho
    n_eff = err.size * (1 - rho[k, 0].mean()) / (1 + rho[k, 0].mean())
    assert abs(err.mean()) < 4.0 * err.std() / math.sqrt(n_eff)
    assert np.all((rho[k] > 0) & (rho[k] < 1))


def test_streaming_estimator_gives_the_batch_numbers() -> None:
    t, om, tq, fz, _ = synthetic_wheel(n=400)
    fz_row = normal_loads(0.0, 0.0, CFG)[0]
    fx_b, var_b, _ = estimate_fx(t, om, tq, np.broadcast_to(fz_row, om.shape), CFG)
    est = TireForceEstimator(CFG)
    got = {}
    for j in range(t.size):
        est.add_imu(ImuSample(t=t[j], roll=0.0, roll_rate=0.0, yaw_rate=0.0, ax=0.0, ay=0.0))
        for f in est.add_wheel_speeds(WheelSpeeds(t=t[j], omega=om[j], torque=tq[j])):
            got[(j, f.wheel)] = (f.fx, f.fx_var)
    assert est.counters["settling"] == CFG.settle and est.counters["estimated"] == t.size - CFG.settle
    for (j, i), (f, v) in got.items():
        assert f == pytest.approx(fx_b[j, i], rel=1e-12, abs=1e-9) and v == pytest.approx(var_b[j, i], rel=1e-12)


def test_a_measured_radius_moves_the_lever_to_the_tire_it_measured() -> None:
    # the tire is 3 cm larger than the description says: read at the description's lever every Fx comes out
    # r_true / r_desc (~7 %) too large; with the lever base moved by the 3 cm the known force is recovered
    shift = 0.03
    fz = normal_loads(0.0, 0.0, CFG)[0]   # the loads the streaming estimator takes at rest
    t, om, tq, _, fx_true = synthetic_wheel(n=1500, fz=float(fz[0]), lever_shift=shift)
    bias = {}
    for applied in (0.0, shift):
        est = TireForceEstimator(CFG)
        assert est.set_lever_shift(applied, applied)
        err = []
        for j in range(t.size):
            est.add_imu(ImuSample(t=t[j], roll=0.0, roll_rate=0.0, yaw_rate=0.0, ax=0.0, ay=0.0))
            for f in est.add_wheel_speeds(WheelSpeeds(t=t[j], omega=om[j], torque=tq[j])):
                if f.wheel == 0 and j >= 100:
                    err.append(f.fx - fx_true[j])
        bias[applied] = float(np.mean(err))
    r_desc = VEH.r0 - fz[0] / VEH.kz[0]
    expected = float(np.mean(fx_true[100:])) * shift / r_desc   # the unshifted lever's excess, N
    assert bias[0.0] == pytest.approx(expected, rel=0.15)
    assert abs(bias[shift]) < 0.1 * expected
    # a shift beyond a quarter of the radius is refused and changes nothing
    est = TireForceEstimator(CFG)
    assert not est.set_lever_shift(0.3 * VEH.r0, 0.0)
    assert est.lever_base == (VEH.r0, VEH.r0)


def test_bad_samples_are_skipped_and_counted() -> None:
    est = TireForceEstimator(replace(CFG, settle=0))
    imu = ImuSample(t=0.0, roll=0.0, roll_rate=0.0, yaw_rate=0.0, ax=0.0, ay=0.0)
    assert est.add_wheel_speeds(WheelSpeeds(0.0, np.full(4, 20.0), np.zeros(4))) == []   # no IMU yet
    est.add_imu(imu)
    assert est.add_wheel_speeds(WheelSpeeds(0.0, np.full(4, 20.0))) == []                # no torque
    assert est.add_wheel_speeds(WheelSpeeds(0.0, np.full(4, np.nan), np.zeros(4))) == []  # NaN
    assert len(est.add_wheel_speeds(WheelSpeeds(0.0, np.full(4, 20.0), np.zeros(4)))) == 4
    assert est.add_wheel_speeds(WheelSpeeds(0.0, np.full(4, 20.0), np.zeros(4))) == []   # duplicate stamp
    est.add_imu(replace(imu, t=2.0))
    assert len(est.add_wheel_speeds(WheelSpeeds(2.0, np.full(4, 20.0), np.zeros(4)))) == 4   # gap: restart
    c = est.counters
    assert (c["no_imu"], c["no_torque"], c["nonfinite"], c["out_of_order"], c["restarts"]) == (1, 1, 1, 1, 1)
    with pytest.raises(ValueError, match="torque_std"):
        TireForceEstimator(replace(CFG, torque_std=-1.0))


# ---------------------------------------------------------------------------- block variance of mu (collector)
def test_block_mean_mu_variance_matches_correlated_errors() -> None:
    """Estimated forces whose Fx errors are AR(1) with the stated variance and correlation: the z-scores of the
    collector's 0.1 s block means of mu, with its mu_var, have unit SD (an independent simulation of the errors,
    not the collector's formula)."""
    rng = np.random.default_rng(3)
    n, sd, rho, fz, mu_true = 6000, 60.0, 0.7, 6000.0, 0.1
    e = np.empty(n)
    e[0] = sd * rng.standard_normal()
    for k in range(1, n):
        e[k] = rho * e[k - 1] + sd * math.sqrt(1 - rho ** 2) * rng.standard_normal()
    c = GripDataCollector(GripSignalConfig(**SYNTHETIC_GEOMETRY, scope="wheel", window=3600.0, capacity=100000))
    u, r_eff = 15.0, R0 - fz / KT
    for k in range(n):
        t = 10.0 + 0.01 * k
        c.add(WheelSpeeds(t, np.full(4, u / (1 - 0.01) / r_eff)))
        c.add(OdomSample(t, u, 0.0, 0.0))
        c.add_tire_force(TireForce(t, 0, (mu_true * fz) + e[k], 0.0, fz, fx_var=sd ** 2, fz_var=0.0, fx_rho=rho),
                         estimated=True)
    c.flush()
    d = c.snapshot("wheel_fl")
    assert d.mu.size > 500
    z = (d.mu - mu_true) / np.sqrt(d.mu_var)
    assert 0.85 < np.std(z) < 1.15
    # transducer samples: no mu variance
    c2 = GripDataCollector(GripSignalConfig(**SYNTHETIC_GEOMETRY, scope="wheel", average_window=0.0))
    c2.add(WheelSpeeds(10.0, np.full(4, 32.0)))
    c2.add(OdomSample(10.0, 15.0, 0.0, 0.0))
    c2.add(TireForce(10.0, 0, 600.0, 0.0, 6000.0))
    assert c2.snapshot("wheel_fl").mu_var.tolist() == [0.0]


# ------------------------------------------------------------------------------- the 14-DOF simulator's forces
@pytest.fixture(scope="module")
def sim_records():
    """26 s of daily driving (launch, cruise, a lane change, braking) from the 14-DOF simulator, all records."""
    from vehcal_ros.io.scenarios import load_scenario
    from vehcal_ros.io.simulate import ScenarioRun

    scenario = load_scenario("daily_driving")
    return [(topic, rec) for topic, rec, _ in ScenarioRun(scenario, duration=26.0)]


def test_load_transfer_matches_the_simulators_true_loads(sim_records, sim_config) -> None:
    imu = {round(r.t, 6): r for _, r in sim_records if isinstance(r, ImuSample)}
    truth = [r for _, r in sim_records if isinstance(r, GroundTruth)]
    t = np.array([g.t for g in truth])
    ax = np.array([imu[round(g.t, 6)].ax for g in truth])
    ay = np.array([imu[round(g.t, 6)].ay for g in truth])
    fz_true = np.array([g.fz for g in truth])
    fz, var = normal_loads(ax, ay, sim_config)
    # at rest (first 0.5 s): the static loads of the constants = the simulator's settled loads within 1 %
    np.testing.assert_allclose(fz[t < 0.5].mean(0), fz_true[t < 0.5].mean(0), rtol=0.01)
    # the excitation is real: loads move by several hundred N (longitudinal and lateral transfer)
    assert np.ptp(fz_true[:, 0]) > 500 and np.ptp(fz_true[:, 0] - fz_true[:, 1]) > 300
    err = fz - fz_true
    assert np.sqrt(np.mean((err / fz_true) ** 2)) < 0.015
    # the stated variance covers the error (3 sigma nearly everywhere)
    assert np.mean(np.abs(err) < 3 * np.sqrt(var)) > 0.99


def test_estimated_fx_matches_the_simulators_true_forces(sim_records, sim_config) -> None:
    est = TireForceEstimator(sim_config)
    truth = {round(r.t, 6): r for _, r in sim_records if isinstance(r, GroundTruth)}
    err, sd = [], []
    for _, rec in sim_records:
        if isinstance(rec, ImuSample):
            est.add_imu(rec)
        elif isinstance(rec, WheelSpeeds):
            assert rec.torque is not None
            for f in est.add_wheel_speeds(rec):
                err.append(f.fx - truth[round(rec.t, 6)].fx[f.wheel])
                sd.append(math.sqrt(f.fx_var))
    err, sd = np.array(err), np.array(sd)
    assert err.size > 8000
    assert abs(err.mean()) < 10.0               # N
    assert np.sqrt(np.mean(err ** 2)) < 60.0    # N (Fx spans ~ +-1500 N here)
    assert np.mean(np.abs(err) < 1.645 * sd) > 0.88


def test_force_source_switching(sim_records) -> None:
    """auto feeds the transducer while its topic is alive and the estimates after it falls silent; measured
    never uses the estimator; estimated ignores the transducer."""
    cut = 15.0
    records = [rec for topic, rec in sim_records if not (isinstance(rec, TireForce) and rec.t > cut)]
    pipes = {src: GripPipeline(force_source=src) for src in ("measured", "estimated", "auto")}
    sources = []
    for rec in records:
        for p in pipes.values():
            p.add(rec)
        if isinstance(rec, WheelSpeeds) and rec.t in (10.0, 20.0):
            sources.append(pipes["auto"].active_force_source)
    rec_m, rec_e, rec_a = (pipes[s].collector.counters.received for s in ("measured", "estimated", "auto"))
    n_ws = sum(isinstance(r, WheelSpeeds) for r in records)
    assert pipes["measured"].force_estimator is None and rec_m["tire_forces_estimated"] == 0
    assert rec_e["tire_forces"] == 0 and rec_e["tire_forces_estimated"] == 4 * (n_ws - CFG.settle - 1)
    assert sources == ["measured", "estimated"]
    # auto: estimates only after the transducer went silent (cut + force_timeout)
    n_after = sum(isinstance(r, WheelSpeeds) and r.t > cut + 0.5 + 1e-9 for r in records)
    assert rec_a["tire_forces_estimated"] == 4 * n_after
    assert rec_a["tire_forces"] == rec_m["tire_forces"]
    # estimated friction samples carry a variance, measured ones none
    fill = {s: p.collector.snapshot("front_axle") for s, p in pipes.items()}
    assert fill["measured"].mu.size > 20 and np.all(fill["measured"].mu_var == 0)
    assert fill["estimated"].mu.size > 20 and np.all(fill["estimated"].mu_var > 0)
    with pytest.raises(ValueError, match="force_source"):
        GripPipeline(force_source="guess")


def test_calibrated_roll_stiffness_changes_the_lateral_split() -> None:
    p = GripPipeline(force_source="estimated")
    est = p.force_estimator
    fz0, _ = est.loads(0.0, 2.0)
    assert not p.use_model_parameters({"model.kphi_f": "90000", "model.kphi_r": "30000", "calibrated": "Cxf,Cxr"})
    assert p.use_model_parameters({"model.kphi_f": "90000", "model.kphi_r": "30000",
                                   "calibrated": "Cxf,Cxr,Cyf,Cyr,kphi_f,kphi_r,bphi"})
    fz1, _ = est.loads(0.0, 2.0)
    # more front roll stiffness: more of the elastic transfer on the front axle, the total unchanged
    assert fz1[1] - fz1[0] > fz0[1] - fz0[0] and fz1[3] - fz1[2] < fz0[3] - fz0[2]
    assert fz1.sum() == pytest.approx(fz0.sum())
    assert (fz1[1] - fz1[0]) * VEH.track_front + (fz1[3] - fz1[2]) * VEH.track_rear == pytest.approx(
        2 * VEH.mass * 2.0 * VEH.h)   # total roll moment m ay h, whatever the split


# ------------------------------------------------------------------------------------ sensor and bag layers
def test_torque_and_true_forces_survive_a_bag(tmp_path, sim_records) -> None:
    from vehcal_ros.io import bags

    recs = [(tp, r) for tp, r in sim_records if isinstance(r, (WheelSpeeds, GroundTruth)) and r.t < 2.0]
    bags.write_bag(tmp_path / "b", ((tp, r, r.t) for tp, r in recs))
    back = [r for _, r in bags.read_bag(tmp_path / "b")]
    ws = [r for r in back if isinstance(r, WheelSpeeds)]
    gt = [r for r in back if isinstance(r, GroundTruth)]
    orig_ws = [r for _, r in recs if isinstance(r, WheelSpeeds)]
    orig_gt = [r for _, r in recs if isinstance(r, GroundTruth)]
    assert len(ws) == len(orig_ws) and len(gt) == len(orig_gt)
    np.testing.assert_array_equal(ws[5].torque, orig_ws[5].torque)
    np.testing.assert_array_equal(gt[5].fx, orig_gt[5].fx)
    np.testing.assert_array_equal(gt[5].fz, orig_gt[5].fz)


def test_torque_noise_has_its_own_stream() -> None:
    from vehcal_ros.models.sensors import SensorSpec, SensorSuite

    out = {"omega": np.full(4, 10.0), "wheel_torque": np.full(4, 100.0)}
    a = SensorSuite({"wheel_speeds": SensorSpec(100.0, {"omega": 0.1})}, 0.01, seed=1)
    b = SensorSuite({"wheel_speeds": SensorSpec(100.0, {"omega": 0.1, "torque": 5.0}, {"torque": 3.0})}, 0.01, seed=1)
    for s in (a, b):
        s.measure(0, out, (0.0, 0.0, 0.0))
    ra, rb = a.release(0)[0][1], b.release(0)[0][1]
    np.testing.assert_array_equal(ra.omega, rb.omega)      # adding torque noise leaves the wheel-speed noise
    np.testing.assert_array_equal(ra.torque, np.full(4, 100.0))
    assert np.all(rb.torque != 103.0) and abs(np.mean(rb.torque) - 103.0) < 4 * 5.0 / 2


def test_lever_is_the_loaded_radius_of_the_description():
    """tire.rolling_minus_loaded moves the spin equation's lever (and the wheel-centre height) from the rolling
    radius r0 - Fz/kt to the loaded radius: r0 - rolling_excess is the lever base."""
    import dataclasses

    from vehcal_ros.vehicle.description import load_description

    desc = load_description("sedan")
    plain = TireForceVehicle.from_description(dataclasses.replace(desc, rolling_excess=0.0))
    moved = TireForceVehicle.from_description(dataclasses.replace(desc, rolling_excess=0.01))
    assert moved.r0 == pytest.approx(plain.r0 - 0.01, abs=1e-12)
    assert moved.h < plain.h
