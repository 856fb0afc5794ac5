"""Sensor faults of the simulator (models/sensors.py): each fault's effect on the emitted records, and that a
scenario without faults (or with neutral fault values) gives the same records as before."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from vehcal_ros.errors import InputError
from vehcal_ros.io.scenarios import parse_scenario
from vehcal_ros.io.simulate import ScenarioRun
from vehcal_ros.models.sensors import SensorSpec

R_WHEEL = 0.47  # m, the stand-in's rolling radius


class Model:
    """Point-mass stand-in with the Hmmwv14 interface (test only): u' = -0.1 m/s^2 (linear in time, so the
    encoder's trapezoidal angle is exact), constant body rates, accelerations and wheel torques."""

    def __init__(self, dt: float = 1e-3, speed: float = 10.0) -> None:
        self.dt, self.n, self.u0 = dt, 0, speed

    def step(self, throttle, brake, steering, n_steps=1):
        self.n += n_steps   # a step count, so the state does not depend on how the run batches the steps

    @property
    def t(self) -> float:
        return self.n * self.dt

    @property
    def u(self) -> float:
        return self.u0 - 0.1 * self.t

    def outputs(self):
        u = self.u
        return {"t": self.t, "x": self.u0 * self.t - 0.05 * self.t**2, "y": 0.0, "z": 0.0, "roll": 0.02,
                "pitch": -0.01, "yaw": 0.3, "u": u, "v": 0.0, "w": 0.0, "p": 0.05, "q": -0.02, "r": 0.3,
                "ax": 1.0, "ay": 0.5, "az": 9.81, "omega": np.full(4, u / R_WHEEL),
                "wheel_torque": np.array([400.0, 410.0, -300.0, 0.0]), "fx": np.zeros(4), "fy": np.zeros(4),
                "fz": np.full(4, 5000.0), "slip": np.zeros(4), "slip_angle": np.zeros(4),
                "rolling_radius": np.full(4, R_WHEEL), "mu_road": np.full(4, 0.9), "mu_max": np.full(4, 0.9),
                "steer_angle": np.zeros(2)}


def _scenario(sensors: dict | None = None, duration: float = 2.0, seed: int = 0):
    return parse_scenario({"name": "faults", "duration": duration, "seed": seed, "sensors": sensors or {}})


def _records(scenario, topic: str) -> list:
    return [rec for tp, rec, _ in ScenarioRun(scenario, model=Model(scenario.dt))
            if tp == topic]


def _items(scenario) -> list:
    return list(ScenarioRun(scenario, model=Model(scenario.dt)))


NOISY = {"wheel_speeds": {"noise_std": {"omega": 0.05, "torque": 20.0}},
         "imu": {"noise_std": {"yaw_rate": 0.005, "ax": 0.05, "ay": 0.05}},
         "odom": {"noise_std": {"u": 0.02}}}


def _same(a: list, b: list) -> bool:
    """Records equal field by field (numpy arrays compared exactly), topics and release times too."""
    if len(a) != len(b):
        return False
    for (ta, ra, sa), (tb, rb, sb) in zip(a, b):
        if ta != tb or sa != sb or type(ra) is not type(rb):
            return False
        for k in getattr(ra, "__dataclass_fields__", {}):
            x, y = getattr(ra, k), getattr(rb, k)
            if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
                if x is None or y is None or not np.array_equal(x, y):
                    return False
            elif x != y:
                return False
    return True


def test_defaults_are_no_fault_and_neutral_values_change_nothing():
    spec = SensorSpec(rate=100.0)
    assert (spec.torque_scale, spec.quantisation_teeth, spec.misalignment_deg, spec.stamp_latency,
            spec.stamp_jitter) == (1.0, 0, (0.0, 0.0, 0.0), 0.0, 0.0)
    base = _scenario(NOISY, duration=0.5, seed=5)
    neutral = (base.with_sensor_fault("wheel_speeds", torque_scale=1.0, quantisation_teeth=0)
               .with_sensor_fault("imu", misalignment_deg=(0, 0, 0), stamp_latency=0.0, stamp_jitter=0.0))
    assert _same(_items(base), _items(neutral))


def test_a_fault_on_one_sensor_leaves_the_others_records_alone():
    base = _scenario(NOISY, duration=0.5, seed=5)
    faulty = base.with_sensor_fault("imu", stamp_latency=0.02, stamp_jitter=0.005, misalignment_deg=(0, 1, 1))
    for topic in ("/vehicle/wheel_speeds", "/vehicle/odom", "/vehicle/gnss/vel"):
        a = [(tp, r, 0.0) for tp, r, _ in _items(base) if tp == topic]
        b = [(tp, r, 0.0) for tp, r, _ in _items(faulty) if tp == topic]
        assert a and _same(a, b), topic


def test_torque_scale_and_bias_exact():
    sc = _scenario().with_sensor_fault("wheel_speeds", torque_scale=1.05, bias={"torque": 50.0})
    recs = _records(sc, "/vehicle/wheel_speeds")
    true = np.array([400.0, 410.0, -300.0, 0.0])
    for r in recs:
        np.testing.assert_allclose(r.torque, 1.05 * true + 50.0, rtol=0, atol=1e-9)
        np.testing.assert_allclose(r.omega, (10.0 - 0.1 * r.t) / R_WHEEL, rtol=0, atol=1e-9)  # spin rates untouched


def test_accelerometer_bias_exact():
    sc = _scenario().with_sensor_fault("imu", bias={"ax": 0.1, "ay": 0.1})
    for r in _records(sc, "/vehicle/imu"):
        assert (r.ax, r.ay, r.az) == pytest.approx((1.1, 0.6, 9.81), abs=1e-12)
        assert r.yaw_rate == pytest.approx(0.3, abs=1e-12)


@pytest.mark.parametrize("window", [0.0, 0.02])
def test_encoder_quantisation(window):
    teeth = 48
    sc = _scenario(duration=3.0).with_sensor_fault("wheel_speeds", quantisation_teeth=teeth,
                                                   quantisation_window=window)
    spec = sc.sensors["wheel_speeds"]
    T = window or 0.01
    q = 2.0 * math.pi / (teeth * T)
    assert spec.quantisation_step == pytest.approx(q)
    assert q == pytest.approx(13.0900, abs=1e-4) or window
    recs = _records(sc, "/vehicle/wheel_speeds")
    w = np.array([r.omega for r in recs])
    t = np.array([r.t for r in recs])
    true = (10.0 - 0.1 * t) / R_WHEEL
    # every reported rate is a whole number of steps
    np.testing.assert_allclose(w / q, np.round(w / q), rtol=0, atol=1e-9)
    # the count over a window is the window's angle / tooth pitch rounded down or up, so the rate is within one
    # step of the window's mean rate; the true rate is linear in t: the mean is the rate at the window's middle
    assert np.all(np.abs(w - (true + 0.1 / R_WHEEL * T / 2)[:, None]) < q + 1e-9)
    # no edge is lost: over successive non-overlapping windows the counted angle is the true angle within one
    # tooth pitch per wheel (the first window starts at the first sample)
    m = int(round(T / 0.01))
    end = (len(t) - 1) // m * m
    counted = w[m:end + 1:m].sum(axis=0) * T
    angle = 0.5 * (true[0] + true[end]) * (t[end] - t[0])
    assert np.all(np.abs(counted - angle) <= 2.0 * math.pi / teeth + 1e-9)


def test_encoder_window_must_be_whole_periods():
    with pytest.raises(ValueError, match="whole number of sampling periods"):
        ScenarioRun(_scenario().with_sensor_fault("wheel_speeds", quantisation_teeth=48, quantisation_window=0.015),
                    model=Model())


def test_imu_misalignment_rotates_vectors_and_attitude():
    sc = _scenario(duration=0.2).with_sensor_fault("imu", misalignment_deg=(0.0, 1.0, 1.0))
    rm = Rotation.from_euler("ZYX", [1.0, 1.0, 0.0], degrees=True)   # sensor axes in body axes
    rb = Rotation.from_euler("ZYX", [0.3, -0.01, 0.02])                # body attitude of the stand-in
    rates = rm.inv().apply([0.05, -0.02, 0.3])
    acc = rm.inv().apply([1.0, 0.5, 9.81])
    yaw, pitch, roll = (rb * rm).as_euler("ZYX")
    for r in _records(sc, "/vehicle/imu"):
        np.testing.assert_allclose([r.roll_rate, r.pitch_rate, r.yaw_rate], rates, atol=1e-12)
        np.testing.assert_allclose([r.ax, r.ay, r.az], acc, atol=1e-12)
        np.testing.assert_allclose([r.roll, r.pitch, r.yaw], [roll, pitch, yaw], atol=1e-12)
    # 1 deg about z moves sin(1 deg) x 9.81 ~ 0 of gravity but ~0.17 m/s^2 about y onto x: a visible fault
    assert acc[0] - 1.0 == pytest.approx(-9.81 * math.sin(math.radians(1.0)) + 0.5 * math.sin(math.radians(1.0)),
                                         abs=2e-3)


def test_stamp_latency_and_jitter():
    sc = _scenario(duration=20.0).with_sensor_fault("odom", stamp_latency=0.02, stamp_jitter=0.005)
    items = _items(sc)
    odom = [(rec, rel) for tp, rec, rel in items if tp == "/vehicle/odom"]
    late = np.array([rec.t - (10.0 - rec.u) / 0.1 for rec, _ in odom])  # stamp minus the data's time
    n = len(late)
    assert n == 2001
    assert late.min() >= 0.015 - 1e-9 and late.max() <= 0.025 + 1e-9
    # uniform on [0.015, 0.025]: sd 0.005 / sqrt(3); the mean is within 4.5 standard errors (p ~ 7e-6 to fail)
    assert abs(late.mean() - 0.02) < 4.5 * 0.005 / math.sqrt(3.0) / math.sqrt(n)
    # it spans the interval: P(no draw in the top or bottom 10 %) = 2 x 0.9^2001 (negligible)
    assert late.min() < 0.016 and late.max() > 0.024
    # released no earlier than stamped; stamps stay in order (jitter < half the period)
    assert all(rel >= rec.t - 1e-9 for rec, rel in odom)
    stamps = [rec.t for rec, _ in odom]
    assert stamps == sorted(stamps)
    # the other topics keep their measurement-time stamps
    imu = [rec for tp, rec, _ in items if tp == "/vehicle/imu"]
    assert [r.t for r in imu[:3]] == [0.0, 0.01, 0.02]


def test_stamp_latency_without_jitter_is_exact():
    sc = _scenario(duration=0.5).with_sensor_fault("imu", stamp_latency=0.02)
    imu = _records(sc, "/vehicle/imu")
    assert [round(r.t, 9) for r in imu[:3]] == [0.02, 0.03, 0.04]


def test_yaml_fault_keys_and_validation():
    sc = _scenario({"wheel_speeds": {"torque_scale": 0.95, "quantisation_teeth": 48, "bias": {"torque": -50.0}},
                    "imu": {"misalignment_deg": [0, 1, 1], "stamp_latency": 0.02, "stamp_jitter": 0.005,
                            "bias": {"ax": 0.1, "ay": 0.1}}})
    ws, imu = sc.sensors["wheel_speeds"], sc.sensors["imu"]
    assert (ws.torque_scale, ws.quantisation_teeth, ws.bias["torque"]) == (0.95, 48, -50.0)
    assert (imu.misalignment_deg, imu.stamp_latency, imu.stamp_jitter) == ((0.0, 1.0, 1.0), 0.02, 0.005)
    with pytest.raises(InputError, match=r"sensors\.odom\.misalignment_deg: unknown key"):
        _scenario({"odom": {"misalignment_deg": [0, 0, 1]}})
    with pytest.raises(InputError, match=r"sensors\.imu\.stamp_jitter: must not exceed"):
        _scenario({"imu": {"stamp_jitter": 0.01}})
    with pytest.raises(InputError, match=r"misalignment_deg: must list 3"):
        _scenario({"imu": {"misalignment_deg": [1, 1]}})
    with pytest.raises(InputError, match="clock.*stamp_latency"):
        _scenario({"clock": {"stamp_latency": 0.01}})


def test_with_sensor_fault_merges_and_rejects():
    sc = _scenario({"imu": {"bias": {"az": 0.2}}}).with_sensor_fault("imu", bias={"ax": 0.1})
    assert dict(sc.sensors["imu"].bias) == {"az": 0.2, "ax": 0.1}
    with pytest.raises(InputError, match="unknown sensor"):
        sc.with_sensor_fault("lidar", stamp_latency=0.1)
    with pytest.raises(InputError, match="does not take 'torque_scale'"):
        sc.with_sensor_fault("imu", torque_scale=1.1)
    with pytest.raises(InputError, match="unknown channel"):
        sc.with_sensor_fault("imu", bias={"torque": 1.0})
    with pytest.raises(InputError, match="unknown field"):
        sc.with_sensor_fault("imu", gain=1.0)
