"""Calibration stages qualify in physical units derived from the vehicle description
(estimation/calibration/qualification.py).

A lane change is simulated by the 8-DOF model (the truth: its own lateral acceleration u r + dv/dt), and the
same road-wheel angle is fed to the segment finder and the segment check as three different steering inputs:
normalised with a large lock (peak 0.011 of the lock), the road-wheel angle itself, and a steering-wheel angle
with a 16:1 ratio. Each qualifies the lateral stage alike, with the true peak lateral acceleration as its score.
Refusals name the quantity that failed, with value and threshold, and not one that passed; the road-wheel angle
follows the description's steering ratio. The thresholds are declared once: the model_calibrator's parameters,
config/estimate.yaml and docs/nodes.md follow that declaration.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest
import yaml

from vehcal_ros.errors import EstimationError, InputError
from vehcal_ros.estimation.calibration.fit import check_segment, stage_spec
from vehcal_ros.estimation.calibration.qualification import StageThresholds, declared, lateral_acceleration
from vehcal_ros.estimation.calibration.segments import SegmentConfig, build_segment, find_windows, resample
from vehcal_ros.models.vehicle_8dof import STATE_INDEX, Simulator8Dof, VehicleConstants
from vehcal_ros.vehicle.description import description_from_dict, load_description

ROOT = Path(__file__).resolve().parents[3]
HMMWV = load_description("hmmwv")   # the 8-DOF model's own constants (steering gain 0.6525 rad per unit input)


def _with_steering(source: str, ratio: float | None = None):
    """The HMMWV description with another steering map, through the description's own validation."""
    doc = HMMWV.to_dict()
    doc["steering"] = {"source": source} if ratio is None else {"source": source, "ratio": ratio}
    return description_from_dict(doc, source=f"hmmwv, steering {source} {ratio}")


NORMALISED_LARGE_LOCK = _with_steering("ratio", 0.6)      # -1..1 of a 0.6 rad (34 deg) lock
ROAD_WHEEL = _with_steering("measured")                   # the input is the road-wheel angle, rad
STEERING_WHEEL_16 = _with_steering("ratio", 1.0 / 16.0)   # steering-wheel angle, rad, 16:1


def _lane_change(delta_peak: float, speed: float, duration: float = 9.0) -> tuple[dict, np.ndarray, np.ndarray]:
    """A one-period sine lane change of road-wheel amplitude ``delta_peak`` (rad) from 2 to 6 s, coasting from
    ``speed`` (m/s), simulated by the 8-DOF model. Returns (sources with the steering column still to be filled,
    road-wheel angle, true lateral acceleration u r + dv/dt) at 100 Hz."""
    t = np.arange(int(duration * 100) + 1) / 100.0
    delta = np.where((t >= 2.0) & (t <= 6.0), delta_peak * np.sin(2.0 * math.pi * 0.25 * (t - 2.0)), 0.0)
    x0 = np.zeros(12)
    x0[STATE_INDEX["u"]] = speed
    for w in ("w_lf", "w_lr", "w_rf", "w_rr"):
        x0[STATE_INDEX[w]] = speed / 0.455
    z = np.zeros_like(t)
    constants = VehicleConstants.from_description(HMMWV)
    sim = Simulator8Dof(x0, t, z, z, delta / HMMWV.steer_gain, dt=0.005, output_dt=0.01, n_out=t.size,
                        constants=constants)
    xs = sim.run({})
    u, v, r = (xs[:, STATE_INDEX[k]] for k in ("u", "v", "wz"))
    ay_true = u * r + np.gradient(v, t)
    cols = lambda *idx: np.column_stack([t, *[xs[:, STATE_INDEX[i]] for i in idx]])  # noqa: E731
    sources = {"wheel_speeds": cols("w_lf", "w_rf", "w_lr", "w_rr"), "imu": cols("phi", "wx", "wz"),
               "odom": np.column_stack([cols("u", "v", "wz"), np.zeros((t.size, 3))]),
               "controls": np.column_stack([t, z, z, z])}
    return sources, delta, ay_true


def _fed(sources: dict, steering: np.ndarray) -> dict:
    out = dict(sources)
    ctl = sources["controls"].copy()
    ctl[:, 3] = steering
    out["controls"] = ctl
    return out


@pytest.fixture(scope="module")
def lane_change():
    """Road-wheel amplitude 0.0066 rad (0.38 deg) at 22 m/s: 0.011 of a 0.6 rad lock, ~0.7 m/s^2 peak."""
    return _lane_change(0.0066, 22.0)


def test_lateral_acceleration_is_u_r_plus_dv_dt(lane_change) -> None:
    sources, _, ay_true = lane_change
    r = resample(_fed(sources, np.zeros(sources["controls"].shape[0])))
    ay = lateral_acceleration(r.time, r["u"], r["v"], r["yaw_rate"])
    inner = slice(100, -100)
    # the 0.5 s mean of a 0.25 Hz sine keeps its peak within 3 %
    assert np.abs(ay[inner]).max() == pytest.approx(np.abs(ay_true[inner]).max(), rel=0.03)
    assert np.abs(ay - np.interp(r.time, sources["odom"][:, 0], ay_true))[inner].max() < 0.03


@pytest.mark.parametrize("desc, name", [(NORMALISED_LARGE_LOCK, "normalised, 0.011 of the lock"),
                                        (ROAD_WHEEL, "road-wheel angle"),
                                        (STEERING_WHEEL_16, "steering-wheel angle, 16:1")])
def test_any_steering_input_qualifies_on_its_lateral_acceleration(lane_change, desc, name: str) -> None:
    sources, delta, ay_true = lane_change
    steering = delta / desc.steer_gain          # what the car's controls topic carries
    if desc is NORMALISED_LARGE_LOCK:
        assert np.abs(steering).max() == pytest.approx(0.011, abs=1e-4)   # below the old 0.02 normalised gate
    r = resample(_fed(sources, steering))
    (win,), why = find_windows(r, "lateral", SegmentConfig(), desc)
    assert why == "", name
    # the window spans the steering above the threshold, padded 1 s either side; its score is the true peak
    # lateral acceleration
    onset = math.asin(SegmentConfig().lat_min_road_wheel_angle / 0.0066) / (2.0 * math.pi * 0.25)   # s
    assert win.t_start == pytest.approx(1.0 + onset, abs=0.02) and win.t_end == pytest.approx(7.0 - onset, abs=0.02)
    peak = float(np.abs(ay_true[200:700]).max())
    assert peak > 0.6 and win.score == pytest.approx(peak, rel=0.05), name
    seg = build_segment(r, win.t_start, win.t_end)
    check_segment(seg, stage_spec("lateral"), vehicle=desc)   # the whole segment qualifies too


def test_a_refusal_names_the_failing_quantity_and_not_one_that_passed() -> None:
    # steered well above the road-wheel threshold but slowly: the lateral acceleration stays below 0.5 m/s^2
    sources, delta, ay_true = _lane_change(0.005, 13.0)
    peak_ay = float(np.abs(ay_true[200:700]).max())
    assert 0.1 < peak_ay < 0.45
    r = resample(_fed(sources, delta / HMMWV.steer_gain))
    wins, why = find_windows(r, "lateral", SegmentConfig(), HMMWV)
    assert wins == []
    assert "peak lateral acceleration" in why and "need >= 0.5 m/s^2" in why
    assert f"{peak_ay:.2f}" in why or f"{peak_ay - 0.01:.2f}" in why or f"{peak_ay + 0.01:.2f}" in why, why
    assert "road-wheel" not in why and "yaw rate" not in why, why
    seg = build_segment(r, 1.0, 7.0)
    with pytest.raises(EstimationError) as exc:
        check_segment(seg, stage_spec("lateral"), vehicle=HMMWV)
    msg = str(exc.value)
    assert "no lateral excitation" in msg and "peak lateral acceleration" in msg and "m/s^2" in msg
    assert "road-wheel" not in msg and "speed" not in msg and "yaw" not in msg, msg

    # a car driven straight past the road-wheel threshold's reach: the angle is named, in rad and deg
    sources, delta, _ = _lane_change(0.003, 17.0)
    r = resample(_fed(sources, delta / HMMWV.steer_gain))
    wins, why = find_windows(r, "lateral", SegmentConfig(), HMMWV)
    assert wins == [] and "peak road-wheel angle 0.003 rad (0.172 deg), need >= 0.0044 rad (0.252 deg)" in why
    assert "lateral acceleration" not in why, why


def test_the_road_wheel_angle_follows_the_description_steering_ratio(lane_change) -> None:
    """The same steering-wheel input with a 16:1 and a 17:1 ratio in the description: 0.00449 rad of road-wheel
    angle qualifies, 0.00422 rad does not (threshold 0.0044 rad); the refusal quotes the converted angle."""
    sources, delta, _ = lane_change
    sw = delta / 0.0066 * 0.00449 * 16.0             # steering-wheel rad; road-wheel 0.00449 rad at 16:1
    ratio16, ratio17 = _with_steering("ratio", 1.0 / 16.0), _with_steering("ratio", 1.0 / 17.0)
    assert float(np.abs(ratio17.road_wheel_angle(sw)).max()) == pytest.approx(0.00449 * 16 / 17, rel=1e-6)
    r = resample(_fed(sources, sw))
    seg = build_segment(r, 1.0, 7.0)
    check_segment(seg, stage_spec("lateral"), vehicle=ratio16)
    with pytest.raises(EstimationError, match=r"peak road-wheel angle 0\.00423 rad \(0\.242 deg\), need >= 0\.0044"):
        check_segment(seg, stage_spec("lateral"), vehicle=ratio17)
    assert find_windows(r, "lateral", SegmentConfig(), ratio16)[0]
    assert not find_windows(r, "lateral", SegmentConfig(), ratio17)[0]


def test_steering_beyond_one_unit_is_judged_as_a_road_wheel_angle(lane_change) -> None:
    """A steering-wheel input of 3 rad is a 0.19 rad road-wheel angle at 16:1 (plausible); the same numbers read
    as road-wheel angles (source measured) are above any lock and refused, naming the steering map."""
    sources, delta, _ = lane_change
    sw = delta / 0.0066 * 3.0
    seg = build_segment(resample(_fed(sources, sw)), 1.0, 7.0)
    with pytest.raises(EstimationError):   # judged on excitation (a coast-down it is not), not on units
        check_segment(seg, stage_spec("rolling_resistance"), vehicle=STEERING_WHEEL_16)
    with pytest.raises(InputError, match="steering.ratio"):
        check_segment(seg, stage_spec("rolling_resistance"), vehicle=ROAD_WHEEL)


def test_coast_down_refusal_names_only_what_failed(lane_change) -> None:
    """The coasting lane change is no coast-down only because it is not straight (speed, pedals and speed lost
    pass)."""
    sources, delta, _ = lane_change
    seg = build_segment(resample(_fed(sources, delta / HMMWV.steer_gain)), 1.0, 7.0)
    with pytest.raises(EstimationError) as exc:
        check_segment(seg, stage_spec("rolling_resistance"), vehicle=HMMWV)
    msg = str(exc.value)
    assert "not a coast-down: not straight: peak road-wheel angle 0.0066 rad (0.378 deg), need <= 0.0044" in msg
    assert "throttle" not in msg and "brake" not in msg and "speed" not in msg, msg


def test_thresholds_are_declared_once() -> None:
    """Every SegmentConfig field (the stage thresholds included) is one model_calibrator parameter with the
    declared default, range and unit; config/estimate.yaml sets each to its declared default; docs/nodes.md
    has the generated row."""
    from vehcal_ros.nodes.model_calibrator import PARAMS

    spec = importlib.util.spec_from_file_location("param_reference", ROOT / "tools" / "param_reference.py")
    param_reference = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(param_reference)
    table = param_reference.table

    specs = {p.name: p for p in PARAMS}
    decl = declared(SegmentConfig)
    assert {d["name"] for d in decl} == {f.name for f in dataclasses.fields(SegmentConfig)}
    assert {d["name"] for d in declared(StageThresholds)} <= {d["name"] for d in decl}
    shipped = yaml.safe_load((ROOT / "config" / "estimate.yaml").read_text())["/**/model_calibrator"][
        "ros__parameters"]
    rows = set(table("model_calibrator").splitlines())
    docs = (ROOT / "docs" / "nodes.md").read_text()
    for d in decl:
        p = specs[d["name"]]
        assert (p.default, p.lo, p.hi) == (d["default"], d["lo"], d["hi"]), d["name"]
        assert shipped[d["name"]] == d["default"], d["name"]
        row = next(x for x in rows if x.startswith(f"| `{d['name']}` |"))
        assert row in docs, row
    for gone in ("lat_min_steering", "lat_min_yaw_rate", "max_steering_straight"):
        assert gone not in specs and gone not in shipped
    SegmentConfig().validate()
    with pytest.raises(InputError, match=r"lat_min_lateral_accel = 30.0 is out of range \[0, 20\] m/s\^2"):
        SegmentConfig(lat_min_lateral_accel=30.0).validate()


def test_a_braked_deceleration_is_no_coast_down_and_the_refusal_says_so() -> None:
    """A straight deceleration with the brake pedal at 0.05 for 0.8 s of every second (a speed controller's
    light braking): never 2 s of free rolling; the refusal names the brake, not the steering."""
    sources, _, _ = _lane_change(0.0, 17.0)
    t = sources["controls"][:, 0]
    ctl = sources["controls"].copy()
    ctl[:, 2] = np.where((t % 1.0) < 0.8, 0.05, 0.0)
    r = resample({**sources, "controls": ctl})
    wins, why = find_windows(r, "rolling_resistance", SegmentConfig(), HMMWV)
    assert wins == [] and "too short" in why and "% braked (brake >= 0.02)" in why, why
    assert "not straight" not in why, why


def _records(sources: dict, steering: np.ndarray) -> list:
    """Records of the calibrator's topics from stamp-first source arrays (wheel speeds, IMU, odometry,
    controls with ``steering``)."""
    from vehcal_ros.records import Controls, ImuSample, OdomSample, WheelSpeeds

    out: list = []
    w, imu, od, ctl = (sources[k] for k in ("wheel_speeds", "imu", "odom", "controls"))
    for k in range(w.shape[0]):
        t = float(w[k, 0])
        out += [WheelSpeeds(t, tuple(float(x) for x in w[k, 1:5])),
                ImuSample(t, float(imu[k, 1]), float(imu[k, 2]), float(imu[k, 3]), 0.0, 0.0),
                OdomSample(t, float(od[k, 1]), float(od[k, 2]), float(od[k, 3])),
                Controls(t, float(ctl[k, 1]), float(ctl[k, 2]), float(steering[k]))]
    return out


def test_the_live_calibrator_qualifies_through_its_vehicle_description(lane_change, tmp_path) -> None:
    """The model_calibrator's pipeline (live and replay) with a description whose steering input is the
    road-wheel angle takes the lane change for the lateral stage; the same numbers read as a normalised input of
    the HMMWV (0.0066 x 0.6525 = 0.0043 rad) are not steered enough, and its status names the road-wheel angle."""
    from vehcal_ros.estimation.calibration.pipeline import CalibrationPipeline, CalibrationPipelineConfig

    sources, delta, _ = lane_change
    path = tmp_path / "road_wheel_car.yaml"
    path.write_text(yaml.safe_dump(ROAD_WHEEL.to_dict()))
    jobs = {}
    for name, vehicle in (("road_wheel", str(path)), ("hmmwv", None)):
        p = CalibrationPipeline(CalibrationPipelineConfig(stages=("lateral",), vehicle=vehicle, window=60.0))
        for rec in _records(sources, delta):
            p.add(rec)
        jobs[name] = p.snapshot(final=True)
        if name == "hmmwv":
            assert jobs[name] == []
            msg = p.status["lateral"].message
            assert "peak road-wheel angle 0.00431 rad (0.247 deg), need >= 0.0044 rad (0.252 deg)" in msg, msg
            assert "lateral acceleration" not in msg, msg
    (job,) = jobs["road_wheel"]
    assert job.stage == "lateral" and job.window.score > 0.6


def test_no_candidate_window_names_what_is_missing(lane_change) -> None:
    """When no sample can start a window, the reason names the quantity: no throttle at all; throttle only while
    steered (the share, not the brake, which passed); no speed for the lateral stage."""
    sources, delta, _ = lane_change
    steer = delta / HMMWV.steer_gain
    r = resample(_fed(sources, steer))
    _, why = find_windows(r, "longitudinal", SegmentConfig(), HMMWV)
    assert why == "no throttle application: peak throttle 0.000, need > 0.05", why
    ctl = _fed(sources, steer)["controls"]
    ctl[:, 1] = np.where(np.abs(delta) > 0.0044, 0.3, 0.0)   # throttle exactly while steered past straight
    _, why = find_windows(resample({**sources, "controls": ctl}), "longitudinal", SegmentConfig(), HMMWV)
    assert why.startswith("no straight throttle application without brake: of the ") and (
        "100 % not straight (road-wheel angle > 0.0044 rad (0.252 deg))" in why), why
    assert "braked" not in why, why
    _, why = find_windows(r, "lateral", SegmentConfig(lat_min_speed=30.0), HMMWV)
    assert why == "no lateral excitation: peak speed 22.0 m/s, need > 30 m/s", why


def test_a_spec_sheet_steering_ratio_sets_the_road_wheel_angle(lane_change) -> None:
    """From a spec sheet (the CommonRoad car's, steering-wheel input): the same steering-wheel angles are 16/17 of
    the road-wheel angle with a 17:1 instead of a 16:1 ratio, and a segment at 0.0045 rad with 16:1 drops below
    the lateral threshold with 17:1."""
    from vehcal_ros.vehicle.spec_sheet import description_document_from_spec

    spec = yaml.safe_load((ROOT / "benchmarks" / "foreign" / "vehicles" / "cr_set1.spec.yaml").read_text())
    descs = {}
    for ratio in (16.0, 17.0):
        doc = description_document_from_spec({**spec, "spec_sheet": {**spec["spec_sheet"], "steering_ratio": ratio}})
        descs[ratio] = description_from_dict(doc, source=f"cr_set1 at {ratio:g}:1")
    sw = np.array([0.0, 0.0720, -0.0720])     # steering-wheel rad
    assert descs[16.0].road_wheel_angle(sw) == pytest.approx(sw / 16.0)
    assert descs[17.0].road_wheel_angle(sw) == pytest.approx(sw / 17.0)
    sources, delta, _ = lane_change
    seg = build_segment(resample(_fed(sources, delta / 0.0066 * 0.0720)), 1.0, 7.0)   # 0.0045 rad at 16:1
    check_segment(seg, stage_spec("lateral"), vehicle=descs[16.0])
    with pytest.raises(EstimationError, match=r"peak road-wheel angle 0\.00424 rad"):
        check_segment(seg, stage_spec("lateral"), vehicle=descs[17.0])


def test_a_lateral_segment_without_its_speed_channel_is_judged_at_its_initial_speed(lane_change) -> None:
    from vehcal_ros.estimation.calibration.fit import Segment

    sources, delta, _ = lane_change
    seg = build_segment(resample(_fed(sources, delta / HMMWV.steer_gain)), 1.0, 7.0)
    lateral_only = Segment.from_arrays(seg.time, seg.throttle, seg.brake, seg.steering,
                                       {k: seg.measured[k] for k in ("v", "yaw_rate", "roll", "roll_rate")},
                                       seg.initial_state, source="lateral channels only")
    check_segment(lateral_only, stage_spec("lateral"), vehicle=HMMWV)
