"""Segment finding on the synthetic 8-DOF drive and on the shipped scenarios' driver shapes; gaps, NaN, too
short, unexcited and rpm wheel speeds rejected with a reason."""

from __future__ import annotations

import math

import numpy as np
import pytest
from calibration_drive import STEER, T_STEER, drive_records, drive_states
from calibration_synthetic import NOISE

from vehcal_ros.errors import InputError
from vehcal_ros.estimation.calibration.fit import check_segment, stage_spec
from vehcal_ros.estimation.calibration.segments import (
    SegmentConfig,
    build_segment,
    find_segments,
    find_windows,
    records_to_sources,
    resample,
)
from vehcal_ros.io.scenarios import DriverProgram, load_scenario
from vehcal_ros.models.vehicle_8dof import STATE_INDEX, Simulator8Dof
from vehcal_ros.records import ImuSample, OdomSample, WheelSpeeds
from vehcal_ros.vehicle.description import load_description


@pytest.fixture(scope="module")
def sources():
    return records_to_sources(drive_records(seed=1, t0=100.0))


def test_drive_windows_and_segment_state(sources) -> None:
    r = resample(sources)
    assert r.valid.all() and np.allclose(np.diff(r.time), 0.01)
    (lon,), _ = find_windows(r, "longitudinal")
    (rr,), _ = find_windows(r, "rolling_resistance")
    (lat,), _ = find_windows(r, "lateral")
    # throttle 1 -> 5 s (onset padded back by 1 s), coast 5 -> 10 s (0.5 s settle), steering from 10 s: the coast
    # ends where the steering ramp's road-wheel angle passes straight_max_road_wheel_angle
    assert 100.15 <= lon.t_start <= 100.3 and 104.8 <= lon.t_end <= 105.0 and lon.score > 0.5  # m/s^2
    t_bend = T_STEER[0] + (T_STEER[1] - T_STEER[0]) * SegmentConfig().straight_max_road_wheel_angle / (
        STEER * load_description("hmmwv").steer_gain)
    assert rr.t_start == pytest.approx(105.46, abs=0.05) and rr.t_end == pytest.approx(100.0 + t_bend, abs=0.02)
    assert 109.0 <= lat.t_start <= 109.5 and lat.t_end == pytest.approx(114.5) and lat.score > 0.3
    seg = build_segment(r, rr.t_start, rr.t_end)
    _, x = drive_states()
    k = int(round((rr.t_start - 100.0) * 100))
    # the initial state from the data: within a fraction of one sample's noise
    for ch, st in (("u", "u"), ("w_lf", "w_lf"), ("w_rf", "w_rf"), ("w_lr", "w_lr"), ("w_rr", "w_rr")):
        assert abs(seg.initial_state[STATE_INDEX[st]] - x[k, STATE_INDEX[st]]) < 0.8 * NOISE[ch], ch
    # wheel order FL, FR, RL, RR maps onto w_lf, w_rf, w_lr, w_rr
    wheels = [rec for rec in drive_records(seed=1, t0=100.0, noise=False) if isinstance(rec, WheelSpeeds)]
    seg0 = build_segment(resample(records_to_sources(drive_records(seed=1, t0=100.0, noise=False))),
                         rr.t_start, rr.t_end)
    j = int(round((rr.t_start - 100.0) * 100))
    assert seg0.measured["w_rf"][0] == pytest.approx(wheels[j].omega[1])
    assert seg0.measured["w_lr"][0] == pytest.approx(wheels[j].omega[2])
    check_segment(seg, stage_spec("rolling_resistance"))


def _scenario_sources(name: str) -> dict:
    """Driver inputs of a shipped scenario through the 8-DOF model (100 Hz, noise-free)."""
    sc = load_scenario(name)
    prog = DriverProgram(sc.driver)
    t = np.arange(int(sc.duration * 100) + 1) / 100.0
    x0 = np.zeros(12)
    x0[STATE_INDEX["u"]] = max(sc.initial.speed, 0.1)
    for w in ("w_lf", "w_lr", "w_rf", "w_rr"):
        x0[STATE_INDEX[w]] = x0[STATE_INDEX["u"]] / 0.455
    # speed control needs the state: close the loop at 100 Hz with the previous output
    thr, brk, steer = np.zeros_like(t), np.zeros_like(t), np.zeros_like(t)
    xs = np.zeros((t.size, 12))
    xs[0] = x0
    step = 50  # simulate in 0.5 s chunks, the driver seeing the state at each chunk start
    for a in range(0, t.size - 1, step):
        b = min(a + step, t.size - 1)
        for i in range(a, b + 1):
            thr[i], brk[i], steer[i] = prog.inputs_at(float(t[i]), {"u": float(xs[a, 2]), "speed": float(xs[a, 2])})
        sim = Simulator8Dof(xs[a], t[a:b + 1], thr[a:b + 1], brk[a:b + 1], steer[a:b + 1], dt=0.005,
                            output_dt=0.01, n_out=b - a + 1)
        xs[a:b + 1] = sim.run({})
    cols = lambda *idx: np.column_stack([t, *[xs[:, STATE_INDEX[i]] for i in idx]])  # noqa: E731
    return {"wheel_speeds": cols("w_lf", "w_rf", "w_lr", "w_rr"), "imu": cols("phi", "wx", "wz"),
            "odom": np.column_stack([cols("u", "v", "wz"), np.zeros((t.size, 3))]),
            "controls": np.column_stack([t, thr, brk, steer])}


@pytest.mark.parametrize("name, stage, expect", [
    ("throttle_ramp", "longitudinal", (0.0, 8.6)),
    ("throttle_ramp", "rolling_resistance", (8.8, 12.0)),
    ("steering_ramp", "lateral", (5.9, 13.5)),   # the ramp, the driver straightens by 12.5 s, + pad
    ("coast_down", "rolling_resistance", (20.4, 30.6)),
])
def test_shipped_scenario_shapes(name: str, stage: str, expect: tuple[float, float]) -> None:
    src = _scenario_sources(name)
    segs, why = find_segments(src, stage)
    assert segs, why
    w = max((w for w, _ in segs), key=lambda w: w.score)
    assert expect[0] <= w.t_start and w.t_end <= expect[1], w
    assert w.duration >= 2.0


def test_steering_ramp_has_no_longitudinal_straight_coast_is_not_lateral() -> None:
    src = _scenario_sources("coast_down")
    segs, why = find_segments(src, "lateral")
    assert not segs and "no lateral excitation" in why


def test_gaps_nan_short_unexcited_rpm(sources) -> None:
    recs = drive_records(seed=1, t0=100.0)
    # a 0.3 s odometry gap and NaN IMU samples inside the coast: the window is cut, never spans them
    gapped = [r for r in recs if not (isinstance(r, OdomSample) and 107.0 < r.t < 107.3)]
    gapped = [ImuSample(r.t, math.nan, 0.0, 0.0, 0.0, 0.0) if isinstance(r, ImuSample) and 109.0 < r.t < 109.05
              else r for r in gapped]
    r = resample(records_to_sources(gapped))
    assert (~r.valid).sum() >= 30
    wins, why = find_windows(r, "rolling_resistance", SegmentConfig(min_duration=2.0))
    assert wins == [] and "too short" in why and "gap or NaN" in why
    with pytest.raises(InputError, match="gap or NaN"):
        build_segment(r, 106.0, 108.0)
    # a segment too short for the configuration
    wins, why = find_windows(resample(sources), "rolling_resistance", SegmentConfig(min_duration=8.0))
    assert wins == [] and "too short" in why
    # unexcited: the coast asks for a larger speed drop than it has
    wins, why = find_windows(resample(sources), "rolling_resistance", SegmentConfig(rr_min_speed_drop=5.0))
    assert wins == [] and "not excited" in why and "speed drop" in why
    # rpm wheel speeds: found as a window, refused by the plausibility check
    rpm = records_to_sources(drive_records(seed=1, t0=100.0, wheel_scale=30.0 / math.pi))
    (w, seg), = find_segments(rpm, "rolling_resistance")[0]
    with pytest.raises(InputError, match="rpm"):
        check_segment(seg, stage_spec("rolling_resistance"))
    # missing topic
    with pytest.raises(InputError, match="controls"):
        resample({k: v for k, v in sources.items() if k != "controls"})


def test_config_ranges() -> None:
    with pytest.raises(InputError, match="max_gap"):
        SegmentConfig(max_gap=10.0).validate()
    with pytest.raises(InputError, match="yaw_rate_source"):
        SegmentConfig(yaw_rate_source="gps").validate()
    SegmentConfig().validate()


# ------------------------------------------------------------------------------------------------------------
# identifiability of Cx: the tire force must vary within a longitudinal window (long_min_accel_range)
# ------------------------------------------------------------------------------------------------------------
def _sources_of(t: np.ndarray, u: np.ndarray, throttle: np.ndarray, w: np.ndarray | None = None) -> dict:
    """Straight-line sources of a given speed trace (wheel speeds u / r unless given as ``w``, (n, 4))."""
    w = np.repeat((u / 0.45)[:, None], 4, axis=1) if w is None else w
    z = np.zeros_like(t)
    return {"wheel_speeds": np.column_stack([t, w]), "imu": np.column_stack([t, z, z, z]),
            "odom": np.column_stack([t, u, z, z, z, z, z]), "controls": np.column_stack([t, throttle, z, z])}


@pytest.mark.parametrize("a0, a1, accepted", [(1.0, 1.0, False), (0.5, 1.4, False), (0.5, 1.6, True),
                                              (0.0, 3.0, True)])
def test_longitudinal_window_needs_the_acceleration_to_vary(a0: float, a1: float, accepted: bool) -> None:
    """u(t) accelerates at a0 for 4 s, then at a1 for 4 s (throttle applied throughout): the 0.5 s mean
    accelerations are exactly a0 and a1 on the plateaus, so the spread is a1 - a0 (closed form), against the
    default long_min_accel_range 1.0 m/s^2 with 0.1 margins either side; the score stays the peak acceleration."""
    t = np.arange(801) / 100.0
    u = 3.0 + np.where(t < 4.0, a0 * t, 4.0 * a0 + a1 * (t - 4.0))
    r = resample(_sources_of(t, u, np.full_like(t, 0.2)))
    wins, why = find_windows(r, "longitudinal")
    if accepted:
        (win,) = wins
        assert win.score == pytest.approx(max(a0, a1), abs=1e-6) and why == ""
    else:
        assert wins == [] and "long_min_accel_range" in why and f"acceleration range {a1 - a0:.2f} m/s^2" in why
    # the threshold is a parameter: 0 accepts the steady launch
    assert find_windows(r, "longitudinal", SegmentConfig(long_min_accel_range=0.0))[0]


def test_steady_force_confounds_cx_with_the_rolling_radius() -> None:
    """Why the check exists, on the 8-DOF itself (finite differences, not the finder's formula): on a steady
    gentle launch the wheel-speed sensitivity to log Cx is, to within a few %, a multiple of the wheel speed
    itself, i.e. of a rolling-radius error (plus a constant), so the data cannot tell Cx from the radius; on a
    throttle step from cruise most of it is not. The finder refuses the first and takes the second."""
    t = np.arange(501) / 100.0
    r_roll = 0.47 - 2617.0 * 9.8 / 4 / 326332.0
    cases = {"steady": (3.0, np.full_like(t, 0.1)),
             "step": (8.0, np.interp(t, [0, 1, 1.5, 3.5, 4, 5], [0.01, 0.01, 0.4, 0.4, 0.01, 0.01]))}
    unexplained = {}
    for name, (u0, thr) in cases.items():
        x0 = np.zeros(12)
        x0[STATE_INDEX["u"]] = u0
        for wn in ("w_lf", "w_lr", "w_rf", "w_rr"):
            x0[STATE_INDEX[wn]] = u0 / r_roll
        sim = Simulator8Dof(x0, t, thr, np.zeros_like(t), np.zeros_like(t), dt=0.005, output_dt=0.01, n_out=t.size)
        x, x_cx = sim.run({"Cxf": 20000.0, "Cxr": 20000.0}), sim.run({"Cxf": 20200.0, "Cxr": 20200.0})
        i = STATE_INDEX["w_lf"]
        j_cx = (x_cx[:, i] - x[:, i]) / math.log(1.01)
        basis = np.column_stack([x[:, i], np.ones_like(t)])      # radius scale, offset
        res = j_cx - basis @ np.linalg.lstsq(basis, j_cx, rcond=None)[0]
        unexplained[name] = float(np.linalg.norm(res) / np.linalg.norm(j_cx))
        wheels = x[:, [STATE_INDEX[k] for k in ("w_lf", "w_rf", "w_lr", "w_rr")]]
        wins, why = find_windows(resample(_sources_of(t, x[:, STATE_INDEX["u"]], thr, wheels)), "longitudinal")
        assert bool(wins) == (name == "step"), (name, why)
    assert unexplained["steady"] < 0.1 < 0.5 < unexplained["step"], unexplained
