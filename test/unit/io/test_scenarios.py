"""Scenario schema: the shipped scenarios load; every malformed case raises InputError naming the field path."""

from __future__ import annotations

import math
import re
import textwrap
from pathlib import Path

import numpy as np
import pytest
from calibration_synthetic import CHRONO

from vehcal_ros.errors import InputError
from vehcal_ros.io.scenarios import (
    SURFACES,
    DriverProgram,
    builtin_scenarios,
    load_scenario,
    parse_scenario,
    read_driver_file,
    simulated_description,
)

SHIPPED = ("throttle_ramp", "steering_ramp", "coast_down", "test_maneuver", "daily_driving", "split_mu_braking")


def _write(tmp_path: Path, text: str, name: str = "s.yaml") -> Path:
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_scenarios_load(name):
    assert name in builtin_scenarios()
    s = load_scenario(name)
    assert s.name == name and s.duration > 0 and s.dt == 0.001
    d = DriverProgram(s.driver)
    state = {"u": s.initial.speed}
    for t in np.arange(0.0, s.duration, 0.01):
        th, br, st = d.inputs_at(float(t), state)
        assert 0.0 <= th <= 1.0 and 0.0 <= br <= 1.0 and -1.0 <= st <= 1.0


def test_load_by_path_and_builtin_name_agree():
    by_name = load_scenario("throttle_ramp")
    by_path = load_scenario(builtin_scenarios()["throttle_ramp"])
    by_file_name = load_scenario("throttle_ramp.yaml")
    assert by_name == by_path == by_file_name


@pytest.mark.parametrize("scenario,driver_file", [("throttle_ramp", "acc_test.txt"),
                                                  ("steering_ramp", "ramp_steer.txt")])
def test_paper_maneuvers_match_driver_files(scenario, driver_file):
    """The shipped paper maneuvers reproduce the paper's driver files (linear between rows)."""
    path = CHRONO / driver_file
    assert path.exists(), f"the paper's driver file {path} is missing (vendored in data/chrono_hmmwv)"
    th, br, st = read_driver_file(path)
    d = DriverProgram(load_scenario(scenario).driver)
    for t in np.arange(0.0, 10.7, 0.01):
        got = d.inputs_at(float(t))
        want = (th.value_at(t), br.value_at(t), st.value_at(t))
        assert np.allclose(got, want, atol=1e-12), (t, got, want)


def test_driver_file_option(tmp_path):
    (tmp_path / "drv.txt").write_text("0 0 0 0\n1.0 0.1 0.5 0\n2.0 -0.2 0 0.4  # comment\n")
    p = _write(tmp_path, """
        name: from_file
        duration: 3
        driver: {file: drv.txt}
    """)
    d = DriverProgram(load_scenario(p).driver)
    assert d.inputs_at(0.5) == pytest.approx((0.25, 0.0, 0.05))
    assert d.inputs_at(1.5) == pytest.approx((0.25, 0.2, -0.05))
    assert d.inputs_at(2.5) == pytest.approx((0.0, 0.4, -0.2))


def test_segment_semantics(tmp_path):
    p = _write(tmp_path, """
        name: segs
        duration: 10
        driver:
          throttle:
            - {type: ramp, t0: 1, t1: 2, to: 0.4}
            - {type: hold, t0: 3, t1: 4, value: 0.8}
            - {type: sine, t0: 5, t1: 7, amplitude: 0.1, frequency: 0.5}
            - {type: knots, points: [[8, 0.2], [9, 0.0]]}
          steering:
            - {type: step, t0: 2, value: -0.3}
    """)
    d = DriverProgram(load_scenario(p).driver)
    th = [d.inputs_at(t)[0] for t in (0.5, 1.5, 2.5, 3.5, 4.5, 5.5, 7.5, 8.5, 9.5)]
    assert th == pytest.approx([0.0, 0.2, 0.4, 0.8, 0.8, 0.8 + 0.1 * math.sin(math.pi * 0.5), 0.8, 0.1, 0.0])
    assert d.inputs_at(1.0)[2] == 0.0 and d.inputs_at(2.0)[2] == -0.3


def test_speed_controller_switches_channels(tmp_path):
    p = _write(tmp_path, """
        name: pi
        duration: 10
        initial: {speed: 5}
        driver:
          throttle: [{type: step, t0: 0, value: 0.3}]
          speed_control: {target: [{type: step, t0: 0, value: 10}], kp: 0.5, ki: 0.0, start: 2, end: 4}
    """)
    d = DriverProgram(load_scenario(p).driver)
    assert d.inputs_at(1.0, {"u": 5.0}) == (0.3, 0.0, 0.0)
    assert d.inputs_at(2.0, {"u": 8.0}) == pytest.approx((1.0, 0.0, 0.0))
    assert d.inputs_at(3.0, {"u": 12.0}) == pytest.approx((0.0, 1.0, 0.0))
    assert d.inputs_at(3.5, {"u": 10.5}) == pytest.approx((0.0, 0.25, 0.0))
    assert d.inputs_at(4.0, {"u": 10.5}) == (0.3, 0.0, 0.0)


def test_roads():
    split = load_scenario("split_mu_braking").road
    assert split.mu_at(10.0, 0.9) == SURFACES["ice"] and split.mu_at(10.0, -0.9) == SURFACES["dry"]
    assert split.mu_at(1000.0, 0.0) == split.default_mu
    daily = load_scenario("daily_driving").road
    names = [p.name for p in daily.patches]
    assert names == ["dry", "wet", "snow"]
    assert [p.mu for p in daily.patches] == [0.9, 0.6, 0.3]
    for a, b in zip(daily.patches, daily.patches[1:]):
        assert a.x1 == b.x0


def test_sensor_settings_and_defaults(tmp_path):
    p = _write(tmp_path, """
        name: sens
        duration: 1
        sensors:
          imu: {rate: 200, noise_std: {yaw_rate: 0.02}, bias: 0.1, latency: 0.005}
          clock: {enabled: false}
    """)
    s = load_scenario(p)
    imu = s.sensors["imu"]
    assert imu.rate == 200 and imu.noise_std == {"yaw_rate": 0.02} and imu.latency == 0.005
    assert imu.bias["ay"] == 0.1 and imu.bias["roll"] == 0.1
    assert s.sensors["odom"].rate == 100 and s.sensors["odom"].noise_std == {}
    assert not s.sensors["clock"].enabled


BASE = {"name": "bad", "duration": 5.0}

BAD_CASES = [
    ({"speed": 3}, "scenario.speed: unknown key"),
    ({"duration": "long"}, "scenario.duration: must be a number"),
    ({"duration": -1}, "scenario.duration: -1 is out of range"),
    ({"dt": 0.5}, "scenario.dt: 0.5 is out of range"),
    ({"seed": 1.5}, "scenario.seed: must be an integer"),
    ({"name": 7}, "scenario.name: must be a string"),
    ({"initial": {"speed": 5, "vx": 1}}, "scenario.initial.vx: unknown key"),
    ({"driver": {"throttle": [{"type": "ramp", "t0": 2, "t1": 1, "to": 0.5}]}},
     "scenario.driver.throttle[0].t1: must be > t0"),
    ({"driver": {"throttle": [{"type": "step", "t0": 2, "value": 0.5}, {"type": "step", "t0": 1, "value": 0}]}},
     "scenario.driver.throttle[1].t0: must be >= the previous segment's end"),
    ({"driver": {"brake": [{"type": "step", "t0": 1, "value": 1.5}]}}, "scenario.driver.brake[0].value: 1.5 is out"),
    ({"driver": {"steering": [{"type": "wiggle", "t0": 1}]}}, "scenario.driver.steering[0].type: 'wiggle'"),
    ({"driver": {"steering": [{"type": "step", "t0": 1, "value": 0.1, "slope": 2}]}},
     "scenario.driver.steering[0].slope: unknown key"),
    ({"driver": {"steering": [{"type": "sine", "t0": 0, "t1": 2, "amplitude": 1.2, "frequency": 1}]}},
     "scenario.driver.steering[0].amplitude"),
    ({"driver": {"throttle": [{"type": "knots", "points": [[0, 0], [2, 0.5], [1, 0.1]]}]}},
     "scenario.driver.throttle[0].points[2][0]: times must increase"),
    ({"driver": {"rate": 300}}, "scenario.driver.rate"),
    ({"driver": {"speed_control": {"target": [], "start": 3, "end": 2}}}, "scenario.driver.speed_control.end"),
    ({"driver": {"speed_control": {"kp": 1}}}, "scenario.driver.speed_control.target: required key"),
    ({"road": {"patches": [{"x0": 0, "x1": 10, "surface": "dry"}, {"x0": 10, "x1": 20, "surface": "wet"},
                           {"x0": 40, "x1": 30, "surface": "ice"}]}},
     "scenario.road.patches[2].x1: must be > x0 (= 40)"),
    ({"road": {"patches": [{"x0": 0, "x1": 10, "y0": 0, "y1": 5, "surface": "dry"},
                           {"x0": 5, "x1": 20, "y0": 2, "y1": 8, "surface": "wet"}]}},
     "scenario.road.patches[1]: overlaps scenario.road.patches[0] ('dry')"),
    ({"road": {"patches": [{"x0": 0, "x1": 10, "y0": 5, "y1": 5, "mu": 0.5}]}},
     "scenario.road.patches[0].y1: must be > y0"),
    ({"road": {"patches": [{"x0": 0, "x1": 10, "surface": "gravel"}]}}, "scenario.road.patches[0].surface"),
    ({"road": {"patches": [{"x0": 0, "x1": 10}]}}, "scenario.road.patches[0].mu: give 'mu' or a 'surface'"),
    ({"road": {"patches": [{"x0": 0, "x1": 10, "mu": -0.2}]}}, "scenario.road.patches[0].mu: -0.2 is out of range"),
    ({"road": {"track": [{"x0": 0, "x1": 10, "surface": "dry"}, {"x0": 12, "x1": 20, "surface": "wet"}]}},
     "scenario.road.track[1].x0: gap"),
    ({"road": {"track": [{"x0": 0, "x1": 10, "surface": "dry"}, {"x0": 8, "x1": 20, "surface": "wet"}]}},
     "scenario.road.track[1].x0: overlaps"),
    ({"road": {"track": [], "patches": []}}, "scenario.road.track: give either"),
    ({"sensors": {"lidar": {"rate": 10}}}, "scenario.sensors.lidar: unknown key"),
    ({"sensors": {"imu": {"noise_std": {"speed": 0.1}}}}, "scenario.sensors.imu.noise_std.speed: unknown channel"),
    ({"sensors": {"imu": {"noise_std": {"ax": -0.1}}}}, "scenario.sensors.imu.noise_std.ax: -0.1 is out of range"),
    ({"sensors": {"odom": {"rate": 300}}}, "scenario.sensors.odom.rate: 1/rate"),
    ({"sensors": {"odom": {"rate": 0}}}, "scenario.sensors.odom.rate: 0 is out of range"),
    ({"sensors": {"odom": {"latency": -0.01}}}, "scenario.sensors.odom.latency"),
    ({"sensors": {"odom": {"enabled": "yes"}}}, "scenario.sensors.odom.enabled: must be true or false"),
]


@pytest.mark.parametrize("patch,expected", BAD_CASES, ids=[c[1].split(":")[0] + f"#{i}"
                                                            for i, c in enumerate(BAD_CASES)])
def test_bad_fields_raise_input_error_naming_the_field(patch, expected):
    data = {**BASE, **patch}
    with pytest.raises(InputError) as err:
        parse_scenario(data, source="bad.yaml")
    msg = str(err.value)
    assert msg.startswith("bad.yaml: ") and expected in msg, msg
    assert "\n" not in msg


def test_missing_required_and_root_type():
    with pytest.raises(InputError, match=r"scenario.duration: required key is missing"):
        parse_scenario({"name": "x"})
    with pytest.raises(InputError, match=r"scenario: must be a mapping"):
        parse_scenario([1, 2])


def test_file_level_errors(tmp_path):
    with pytest.raises(InputError, match="no such scenario file or built-in scenario: nope.*daily_driving"):
        load_scenario("nope")
    bad_yaml = _write(tmp_path, "name: [unclosed\n", "broken.yaml")
    with pytest.raises(InputError, match=r"broken.yaml: not valid YAML \(line"):
        load_scenario(bad_yaml)
    empty = _write(tmp_path, "", "empty.yaml")
    with pytest.raises(InputError, match="empty scenario file"):
        load_scenario(empty)
    with pytest.raises(InputError, match="is a directory"):
        load_scenario(tmp_path)
    clash = _write(tmp_path, """
        name: c
        duration: 1
        driver: {file: d.txt, throttle: []}
    """, "clash.yaml")
    (tmp_path / "d.txt").write_text("0 0 0 0\n1 0 1 0\n")
    with pytest.raises(InputError, match=r"scenario.driver.throttle: give the channels either"):
        load_scenario(clash)


def test_driver_file_errors(tmp_path):
    f = tmp_path / "drv.txt"
    f.write_text("0 0 0 0\n1 0 0.5\n")
    with pytest.raises(InputError, match=r"drv.txt:2: expected 4 finite numbers"):
        read_driver_file(f)
    f.write_text("0 0 0 0\n2 0 0.5 0\n1 0 0 0\n")
    with pytest.raises(InputError, match=r"drv.txt:3: time 1 is not after"):
        read_driver_file(f)
    f.write_text("0 0 0 0\n1 0 1.5 0\n")
    with pytest.raises(InputError, match=r"drv.txt:2: throttle/brake must be in"):
        read_driver_file(f)
    with pytest.raises(InputError, match="driver file not found"):
        read_driver_file(tmp_path / "missing.txt")


def test_speed_controller_lets_go_in_coast_intervals(tmp_path):
    p = _write(tmp_path, """
        name: pi_coast
        duration: 10
        initial: {speed: 5}
        driver:
          steering: [{type: step, t0: 0, value: 0.01}]
          speed_control: {target: [{type: step, t0: 0, value: 10}], kp: 0.5, ki: 0.0, coast: [{t0: 2, t1: 4}]}
    """)
    d = DriverProgram(load_scenario(p).driver)
    assert d.inputs_at(1.0, {"u": 9.0}) == pytest.approx((0.5, 0.0, 0.01))
    assert d.inputs_at(2.0, {"u": 9.0}) == (0.0, 0.0, 0.01)
    assert d.inputs_at(3.99, {"u": 12.0}) == (0.0, 0.0, 0.01)
    assert d.inputs_at(4.0, {"u": 12.0}) == pytest.approx((0.0, 1.0, 0.01))


@pytest.mark.parametrize("coast,match", [
    ([{"t0": 3, "t1": 2}], "scenario.driver.speed_control.coast[0].t1: must be > t0"),
    ([{"t0": 1, "t1": 3}, {"t0": 2, "t1": 4}], "scenario.driver.speed_control.coast[1].t0: must be >="),
    ([{"t0": 1}], "scenario.driver.speed_control.coast[0].t1: required key"),
])
def test_coast_intervals_are_validated(coast, match):
    data = {"name": "x", "duration": 10, "driver": {"speed_control": {"target": [], "coast": coast}}}
    with pytest.raises(InputError, match=re.escape(match)):
        parse_scenario(data)


def test_long_drive_is_excited_all_the_way_through():
    """Every 60 s of the 1-hour drive has a coast-down, an acceleration, a braking and lane changes, and the
    road cycles dry -> wet -> snow over contiguous sections that the drive reaches."""
    s = load_scenario("long_drive")
    assert s.duration == 3600.0
    sc = s.driver.speed_control
    d = DriverProgram(s.driver)
    names = [p.name for p in s.road.patches]
    assert names == [("dry", "wet", "snow")[k % 3] for k in range(len(names))] and len(names) >= 60
    for k in range(60):
        t0 = 15.0 + 60.0 * k
        ts = np.arange(t0, t0 + 60.0, 0.5)
        assert any(t0 <= c0 and c1 <= t0 + 60.0 and c1 - c0 >= 10.0 for c0, c1 in sc.coast), f"block {k}: no coast"
        target = np.array([sc.target.value_at(float(t)) for t in ts])
        assert np.max(np.diff(target)) >= 0.5 * 0.5 and np.min(np.diff(target)) <= -0.5 * 0.5, f"block {k}"
        steer = np.array([d.spec.steering.value_at(float(t)) for t in ts])
        assert np.max(np.abs(steer)) >= 0.014 and abs(np.mean(steer)) < 1e-3, f"block {k}: no lane change"
        assert max(target) >= 15.0, f"block {k}: no driving at speed"


def test_simulated_description_names_the_description_of_the_vehicle_the_simulator_drives(tmp_path) -> None:
    """What `vehcal run estimate --sim` and the launch file's sim:=true give the estimators: the simulated
    HMMWV's own description (not the paper's `hmmwv`), the sedan's for a sedan scenario or a simulator told to
    drive the sedan, none for a model file of the user's, and a bad scenario refused by name."""
    assert simulated_description("daily_driving") == "hmmwv_sim"
    assert simulated_description("sedan_daily_driving") == "sedan"
    assert simulated_description("daily_driving", "sedan") == "sedan"
    model = tmp_path / "my_truck.yaml"
    model.write_text((Path(__file__).resolve().parents[3] / "vehcal_ros" / "data" / "hmmwv.yaml").read_text())
    assert simulated_description("coast_down", str(model)) is None
    with pytest.raises(InputError, match="no_such_scenario"):
        simulated_description("no_such_scenario")
