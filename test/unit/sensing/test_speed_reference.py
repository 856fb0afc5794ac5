"""The slips' speed reference from GNSS velocity and the IMU (estimation/sensing/speed_reference.py), against known
truth.

Synthetic drives have an exact speed profile u(t); the IMU reads its derivative plus gravity along a road grade,
a constant accelerometer bias and white noise; the GNSS receiver reads u with white noise, 0.1 s late. The
filter must track u within the accuracy it states, learn the bias, and give the same answer whether the late
GNSS messages arrive late or on time. On the simulated HMMWV the slips computed with this reference must match
the simulator's true slips.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from vehcal_ros.estimation.sensing.speed_reference import GnssImuSpeed, SpeedReferenceConfig
from vehcal_ros.records import GnssVelocity, ImuSample

G = 9.81


def _drive(seed: int, duration: float = 120.0, bias: float = 0.1, grade: float = 0.05):
    """(t, u, imu records, gnss records): speed 10 -> 20 m/s and back in smooth swings, a grade ramp in the middle;
    the IMU's pitch is the grade (REP-103: nose down positive, so an uphill grade is a negative pitch)."""
    rng = np.random.default_rng(seed)
    t = np.round(np.arange(0.0, duration, 0.01), 6)
    u = 15.0 + 5.0 * np.sin(2 * np.pi * t / 40.0) + 1.0 * np.sin(2 * np.pi * t / 7.0)
    dudt = 5.0 * 2 * np.pi / 40.0 * np.cos(2 * np.pi * t / 40.0) + 2 * np.pi / 7.0 * np.cos(2 * np.pi * t / 7.0)
    theta = -grade * np.clip((t - 40.0) / 10.0, 0.0, 1.0) * (t < 90.0)   # uphill from 40 s to 90 s
    ax = dudt - G * np.sin(theta) + bias + 0.05 * rng.standard_normal(t.size)
    imu = [ImuSample(t=float(tk), roll=0.0, roll_rate=0.0, yaw_rate=0.0, ax=float(a), ay=0.0, pitch=float(th))
           for tk, a, th in zip(t, ax, theta)]
    k = np.arange(0, t.size, 10)
    # the receiver's ENU velocity on the grade: u cos(grade angle) east, u sin(grade angle) up
    gnss = [GnssVelocity(t=float(t[i]), ve=float(u[i] * math.cos(theta[i]) + 0.05 * rng.standard_normal()),
                         vn=float(0.05 * rng.standard_normal()),
                         vu=float(-u[i] * math.sin(theta[i]) + 0.05 * rng.standard_normal()), std=0.05) for i in k]
    return t, u, imu, gnss


def _run(imu, gnss, latency: float, f: GnssImuSpeed | None = None):
    """Feed the records in arrival order (a GNSS message arrives ``latency`` s after its stamp) to ``f`` (None: a
    new filter)."""
    f = f if f is not None else GnssImuSpeed(SpeedReferenceConfig(rear_distance=1.5))
    out, j = [], 0
    for rec in imu:
        f.add_imu(rec)
        while j < len(gnss) and gnss[j].t + latency <= rec.t + 1e-9:
            out += f.add_gnss(gnss[j])
            j += 1
    return f, out


def test_tracks_the_true_speed_within_its_stated_accuracy() -> None:
    t, u, imu, gnss = _drive(seed=3)
    f, out = _run(imu, gnss, latency=0.1)
    ts = np.array([s.t for s in out])
    err = np.array([s.u for s in out]) - np.interp(ts, t, u)
    sd = np.sqrt([s.u_var for s in out])
    late = ts > 10.0
    # the error is correlated over ~1 s, so ~100 independent values over 110 s: the RMS of err / sd is within
    # +-0.3 of 1 at that count (chi^2 with ~100 dof: sd of the RMS ~ 1/sqrt(200) = 0.07; 0.3 leaves room for the
    # correlation estimate being rough)
    z = err[late] / sd[late]
    assert 0.6 < math.sqrt(np.mean(z * z)) < 1.4
    assert np.sqrt(np.mean(err[late] ** 2)) < 0.03          # m/s: ~0.2 % slip at 15 m/s
    assert f.counters["gnss_used"] == len(gnss) - 1   # the last fix would arrive after the drive


def test_learns_the_accelerometer_bias_and_the_grade() -> None:
    t, u, imu, gnss = _drive(seed=4, bias=0.15, grade=0.05)
    f, out = _run(imu, gnss, latency=0.1)
    assert f.offset is not None
    bias, bias_sd = f.offset
    assert bias == pytest.approx(0.15, abs=5 * bias_sd + 0.01)
    ts = np.array([s.t for s in out])
    err = np.array([s.u for s in out]) - np.interp(ts, t, u)
    on_grade = (ts > 50.0) & (ts < 90.0)
    # the grade leaves no speed offset: the pitch carries it, and the reference is the speed along the path (the
    # horizontal speed is cos(grade angle) of it: -0.019 m/s here at 15 m/s on 5 %)
    assert abs(err[on_grade].mean()) < 0.01


def test_late_gnss_gives_the_on_time_answer() -> None:
    """The delayed update (rewind, update, propagate again) equals the filter fed each GNSS fix on time."""
    _, _, imu, gnss = _drive(seed=5, duration=30.0)
    _, late = _run(imu, gnss, latency=0.1)
    _, on_time = _run(imu, gnss, latency=0.0)
    a = {round(s.t, 6): s.u for s in late}
    b = {round(s.t, 6): s.u for s in on_time}
    common = sorted(set(a) & set(b))
    assert len(common) > 2500
    assert max(abs(a[k] - b[k]) for k in common) < 1e-9


def test_bad_records_are_counted_not_fatal() -> None:
    f = GnssImuSpeed(SpeedReferenceConfig(rear_distance=1.5))
    f.add_imu(ImuSample(t=0.0, roll=0.0, roll_rate=0.0, yaw_rate=0.0, ax=math.nan, ay=0.0))
    f.add_gnss(GnssVelocity(t=0.0, ve=math.inf, vn=0.0))
    f.add_imu(ImuSample(t=0.01, roll=0.0, roll_rate=0.0, yaw_rate=0.0, ax=0.0, ay=0.0))
    f.add_imu(ImuSample(t=0.005, roll=0.0, roll_rate=0.0, yaw_rate=0.0, ax=0.0, ay=0.0))
    assert f.counters["imu_nonfinite"] == 1 and f.counters["gnss_nonfinite"] == 1
    assert f.counters["imu_out_of_order"] == 1
    with pytest.raises(ValueError, match="gnss_std"):
        SpeedReferenceConfig(gnss_std=0.0, rear_distance=1.5).validate()


def test_a_clock_that_goes_back_restarts_the_filter() -> None:
    """A restarted simulator or bag: the second drive's stamps start at 0 again after 60 s of the first. The filter
    starts a new time base at once (one restart) and releases the second drive's speeds from its first GNSS fixes
    on, as accurate as the first drive's, instead of dropping every sample as out of order until the stamps pass
    the first drive's newest."""
    _, _, imu, gnss = _drive(seed=6, duration=60.0)
    f, _ = _run(imu, gnss, latency=0.1)
    t2, u2, imu2, gnss2 = _drive(seed=7, duration=20.0)
    _, second = _run(imu2, gnss2, latency=0.1, f=f)
    assert f.counters["restarts"] == 1 and f.counters["imu_out_of_order"] == 0
    ts = np.array([s.t for s in second])
    assert ts.size > 1900 and ts[0] < 0.2 and ts[-1] > 19.7   # 100 Hz from the first fix on
    err = np.array([s.u for s in second]) - np.interp(ts, t2, u2)
    assert np.sqrt(np.mean(err[ts > 10.0] ** 2)) < 0.03


def test_slips_on_the_simulated_hmmwv_match_the_true_slips_within_their_stated_noise() -> None:
    """The grip collector with ``speed_reference`` gnss_imu on 120 s of the HMMWV's daily drive (seed 0, the
    simulator's GNSS: 10 Hz, 0.05 m/s, 0.1 s late) against the simulator's true slip per 0.1 s block. The speed
    error is correlated over ~1 s (10 blocks), so ~30 independent values per wheel: the RMS of the standardised
    error has a sampling SD of ~1/sqrt(60) = 0.13, and [0.7, 1.4] is ~3 SD either side of 1."""
    from vehcal_ros.estimation.grip.friction_samples import GripDataCollector
    from vehcal_ros.estimation.grip.pipeline import signal_config_from, vehicle_signal_config
    from vehcal_ros.io.scenarios import load_scenario
    from vehcal_ros.io.simulate import ScenarioRun
    from vehcal_ros.replay.params import resolve_params
    from vehcal_ros.vehicle.description import load_description

    desc = load_description("hmmwv_sim")
    values = {**resolve_params(None)["grip_estimator"], "braking": "keep", "scope": "wheel"}
    collector = GripDataCollector(vehicle_signal_config(signal_config_from(values, desc), desc))
    assert collector.config.speed_reference == "gnss_imu"   # the shipped auto on an all-wheel-drive vehicle
    truth = []
    for _, rec, _ in ScenarioRun(load_scenario("daily_driving", vehicle="hmmwv").with_seed(0), duration=120.0):
        if type(rec).__name__ == "GroundTruth":
            truth.append((rec.t, *rec.slip))
        else:
            collector.add(rec)
    collector.flush()
    g = np.array(truth)
    for i, wheel in enumerate(collector.scopes()):
        d = collector.snapshot(wheel)
        rows = [g[(g[:, 0] >= t - 0.05) & (g[:, 0] < t + 0.05), 1 + i] for t in d.t]
        has = np.array([r.size > 0 for r in rows])   # the block centre lies within the simulated time
        true = np.array([r.mean() for r, h in zip(rows, has) if h])
        err = d.slip[has] - true
        z = err / np.sqrt(d.slip_var[has])
        assert d.slip.size > 200, wheel
        assert 0.7 < math.sqrt(np.mean(z * z)) < 1.4, wheel
        assert np.sqrt(np.mean(err * err)) < 0.0025, wheel   # ~1/4 of an everyday slip


@pytest.mark.parametrize("bias, named", [(0.0, False), (0.15, True), (-0.15, True)])
def test_an_accelerometer_offset_is_named_on_diagnostics(bias: float, named: bool) -> None:
    """The grip pipeline names the IMU among its doubtful assumptions when the speed filter learns an offset of
    0.15 m/s^2 (3x ACCEL_DOUBT; its SD after 60 s is ~0.014, so the offset is 10 SD from 0 and 7 SD above the
    threshold), and not for a clean IMU (a false alarm needs a 3.5-SD excursion above 0.05 m/s^2)."""
    from vehcal_ros.estimation.grip.pipeline import pipeline_from_params
    from vehcal_ros.replay.params import resolve_params

    _, _, imu, gnss = _drive(seed=6, duration=60.0, bias=bias)
    pipe = pipeline_from_params({**resolve_params(None)["grip_estimator"], "vehicle": "hmmwv_sim",
                                 "force_source": "measured"})
    j = 0
    for rec in imu:
        pipe.add(rec)
        while j < len(gnss) and gnss[j].t + 0.1 <= rec.t + 1e-9:
            pipe.add(gnss[j])
            j += 1
    doubts = [d for d in pipe.doubtful_assumptions() if d.startswith("IMU")]
    assert bool(doubts) == named, doubts
    if named:
        b, sd = (float(x) for x in re.search(r"offset of ([-+.0-9]+) m/s\^2 \(SD ([.0-9]+)\)", doubts[0]).groups())
        assert abs(b - bias) < 4.0 * sd, doubts


def test_undriven_wheels_reference_on_the_simulated_sedan() -> None:
    """``speed_reference`` undriven_wheels (the shipped ``auto`` there) on 120 s of the front-driven sedan's daily
    drive (seed 0): the driven front wheels' block slips against the simulator's true slips, within their stated
    noise (the rear wheels' speed noise and the free-rolling slip's REFERENCE_SLIP_SD; about independent between
    blocks): over the ~70 blocks of both front wheels the RMS of the standardised error has a sampling SD of
    ~1/sqrt(2 x 70) = 0.085, and [0.7, 1.4] is ~3.5 SD below and ~4.5 SD above 1 (seed 0 reads 0.86-0.89: the stated
    variance is on the safe side). No front sample is taken while the driver brakes (the rear wheels then slip too).
    The rear wheels' slips take the GNSS/IMU reference; fed the same drive without its GNSS messages they give no
    slip samples (theirs is the reference's own) and their friction counts toward floor beliefs. An all-wheel-drive
    vehicle is refused by name."""
    from vehcal_ros.estimation.grip.friction_samples import REFERENCE_BRAKE, GripDataCollector
    from vehcal_ros.estimation.grip.pipeline import signal_config_from, vehicle_signal_config
    from vehcal_ros.io.scenarios import load_scenario
    from vehcal_ros.io.simulate import ScenarioRun
    from vehcal_ros.replay.params import resolve_params
    from vehcal_ros.vehicle.description import load_description

    desc = load_description("sedan")
    assert desc.driven_axles == ("front",)
    values = {**resolve_params(None)["grip_estimator"], "braking": "keep", "scope": "wheel"}
    config = vehicle_signal_config(signal_config_from(values, desc), desc)
    assert config.speed_reference == "undriven_wheels"   # the shipped auto on a two-wheel-drive vehicle
    collector, no_gnss = GripDataCollector(config), GripDataCollector(config)
    truth, brake = [], []
    for _, rec, _ in ScenarioRun(load_scenario("daily_driving", vehicle="sedan").with_seed(0), duration=120.0):
        name = type(rec).__name__
        if name == "GroundTruth":
            truth.append((rec.t, *rec.slip))
            continue
        if name == "Controls":
            brake.append((rec.t, rec.brake))
        collector.add(rec)
        if name != "GnssVelocity":
            no_gnss.add(rec)
    collector.flush()
    no_gnss.flush()
    g, b = np.array(truth), np.array(brake)

    def standardised_errors(data, i: int) -> np.ndarray:
        rows = [g[(g[:, 0] >= t - 0.05) & (g[:, 0] < t + 0.05), 1 + i] for t in data.t]
        has = np.array([r.size > 0 for r in rows])
        err = data.slip[has] - np.array([r.mean() for r, h in zip(rows, has) if h])
        assert np.sqrt(np.mean(err * err)) < 0.0015, data.scope
        return err / np.sqrt(data.slip_var[has])

    for source in (collector, no_gnss):
        z = []
        for i, wheel in enumerate(source.scopes()[:2]):
            d = source.snapshot(wheel)
            assert d.slip.size > 25, wheel
            z.append(standardised_errors(d, i))
            braked = [t for t in d.t if (b[(b[:, 0] >= t - 0.1) & (b[:, 0] <= t + 0.1), 1] > REFERENCE_BRAKE).all()]
            assert not braked, (wheel, braked[:5])
        z = np.concatenate(z)
        assert 0.7 < math.sqrt(np.mean(z * z)) < 1.4
    for i, wheel in enumerate(collector.scopes()[2:], start=2):   # GNSS/IMU, as in the HMMWV test above
        d = collector.snapshot(wheel)
        assert d.slip.size > 200, wheel
        standardised_errors(d, i)
        assert no_gnss.snapshot(wheel).slip.size == 0 and no_gnss.snapshot(wheel).floor_only[0].size > 25, wheel
    # with GNSS only the rear samples before its first estimate lack a reference
    assert no_gnss.counters.dropped["reference_wheel"] > 20 * collector.counters.dropped["reference_wheel"]
    with pytest.raises(ValueError, match="speed_reference undriven_wheels needs an undriven axle.*driven_axles"):
        signal_config_from({**values, "speed_reference": "undriven_wheels"}, load_description("hmmwv_sim")).validate()
