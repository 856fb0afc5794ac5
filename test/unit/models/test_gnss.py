"""The simulated GNSS velocity: scenario options, ENU geometry, noise, rate, latency and the bag round trip."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from vehcal_ros.io.bags import bag_topics, read_bag, write_bag
from vehcal_ros.io.scenarios import load_scenario, parse_scenario
from vehcal_ros.io.simulate import ScenarioRun
from vehcal_ros.models.sensors import DEFAULT_SENSORS
from vehcal_ros.records import GnssVelocity

TOPIC = "/vehicle/gnss/vel"


class Cruise:
    """Stand-in with the Hmmwv14 interface (test only): constant body speed ``u`` (m/s) on heading ``yaw``."""

    def __init__(self, dt: float = 1e-3, u: float = 12.0, yaw: float = 0.6) -> None:
        self.dt, self.t, self.u, self.yaw = dt, 0.0, u, yaw

    def step(self, throttle, brake, steering, n_steps=1):
        self.t += n_steps * self.dt

    def outputs(self):
        w = np.full(4, self.u / 0.47)
        return {"t": self.t, "x": 0.0, "y": 0.0, "z": 0.0, "roll": 0.0, "pitch": 0.0, "yaw": self.yaw,
                "u": self.u, "v": 0.0, "w": 0.0, "p": 0.0, "q": 0.0, "r": 0.0, "ax": 0.0, "ay": 0.0, "az": 9.81,
                "omega": w, "fx": np.zeros(4), "fy": np.zeros(4), "fz": np.full(4, 5000.0),
                "slip": np.zeros(4), "slip_angle": np.zeros(4), "rolling_radius": np.full(4, 0.47),
                "mu_road": np.full(4, 0.9), "mu_max": np.full(4, 0.9), "steer_angle": np.zeros(2)}


def _run(sensors: dict, duration: float, seed: int = 0, **model):
    sc = parse_scenario({"name": "gnss_unit", "duration": duration, "seed": seed, "sensors": sensors})
    return list(ScenarioRun(sc, model=Cruise(sc.dt, **model)))


def test_gnss_defaults_follow_odometry():
    plain = parse_scenario({"name": "a", "duration": 1.0})
    g = plain.sensors["gnss"]
    assert g.enabled and g.rate == 10.0 and g.latency == pytest.approx(0.1)
    assert g.noise_std == {"ve": 0.05, "vn": 0.05, "vu": 0.05}
    assert g == DEFAULT_SENSORS["gnss"]
    no_odom = parse_scenario({"name": "b", "duration": 1.0, "sensors": {"odom": {"rate": 100, "enabled": False}}})
    assert not no_odom.sensors["gnss"].enabled
    custom = parse_scenario({"name": "c", "duration": 1.0,
                             "sensors": {"gnss": {"rate": 5, "noise_std": {"ve": 0.2}, "latency": 0.25}}})
    c = custom.sensors["gnss"]
    assert c.rate == 5 and c.latency == 0.25 and c.noise_std == {"ve": 0.2, "vn": 0.05, "vu": 0.05}
    scalar = parse_scenario({"name": "d", "duration": 1.0, "sensors": {"gnss": {"noise_std": 0.1}}})
    assert scalar.sensors["gnss"].noise_std == {"ve": 0.1, "vn": 0.1, "vu": 0.1}
    assert scalar.sensors["gnss"].latency == pytest.approx(0.1)   # not named: the default
    daily = load_scenario("daily_driving")
    assert daily.sensors["gnss"].enabled and daily.sensors["odom"].enabled


def test_gnss_noise_rate_and_enu_geometry():
    duration, u, yaw = 200.0, 12.0, 0.6
    items = _run({"gnss": {"rate": 10, "noise_std": 0.05, "latency": 0.1}}, duration, seed=11, u=u, yaw=yaw)
    recs = [r for tp, r, _ in items if tp == TOPIC]
    assert all(isinstance(r, GnssVelocity) for r in recs)
    # rate: the simulator samples on its step grid, so the count and the spacing are exact, not statistical
    stamps = np.array([r.t for r in recs])
    assert len(recs) == int(duration * 10) + 1
    assert np.allclose(np.diff(stamps), 0.1, atol=1e-9)
    resid = {"ve": np.array([r.ve for r in recs]) - u * math.cos(yaw),
             "vn": np.array([r.vn for r in recs]) - u * math.sin(yaw),
             "vu": np.array([r.vu for r in recs])}
    n = len(recs)
    for axis, e in resid.items():
        # known zero mean, so sum(e^2) / sigma^2 ~ chi-square(n) with n = 2001. The two-sided 1e-4 quantiles
        # bound the sample SD to about +-6 % of 0.05 m/s: a false failure once in 10^4 runs, while a noise
        # level off by 10 % (or noise applied to one axis only) fails with near certainty.
        lo, hi = stats.chi2.ppf([5e-5, 1 - 5e-5], n)
        assert lo < float(e @ e) / 0.05**2 < hi, axis
        # mean: |mean| < 4 SE (SE = 0.05 / sqrt(n) = 1.1 mm/s); false-failure rate 6e-5
        assert abs(e.mean()) < 4 * 0.05 / math.sqrt(n), axis
        # white: the lag-one autocorrelation of n white samples has SE 1/sqrt(n); 4 SE bound
        assert abs(np.corrcoef(e[:-1], e[1:])[0, 1]) < 4 / math.sqrt(n), axis
    assert all(r.std == pytest.approx(0.05) for r in recs)
    speed = np.array([r.speed for r in recs])
    assert abs(speed.mean() - u) < 4 * 0.05 / math.sqrt(n)


def test_gnss_latency_releases_after_the_measurement():
    latency = 0.1
    items = _run({"gnss": {"rate": 10, "latency": latency}, "wheel_speeds": {"rate": 100}}, 5.0)
    released = [(r.t, t_rel) for tp, r, t_rel in items if tp == TOPIC]
    assert len(released) == 51
    for t, t_rel in released:
        # released at the first step at or after t + latency (dt = 1 ms)
        assert t + latency - 1e-9 <= t_rel < t + latency + 1e-3 + 1e-9
    # in the stream, the record of measurement time t comes after every wheel-speed record stamped before
    # t + latency (at the release step itself the record held longest goes first)
    order = [(tp, r.t) for tp, r, _ in items if tp in (TOPIC, "/vehicle/wheel_speeds")]
    pos = {(tp, round(t, 3)): k for k, (tp, t) in enumerate(order)}
    for t, _ in released[:-1]:
        assert pos[(TOPIC, round(t, 3))] > pos[("/vehicle/wheel_speeds", round(t + latency - 0.01, 3))]


@pytest.mark.parametrize("storage", ["mcap", "sqlite3"])
def test_gnss_bag_round_trip(tmp_path, storage):
    items = _run({"gnss": {"rate": 10, "noise_std": 0.05, "latency": 0.1}, "wheel_speeds": {"rate": 100}}, 2.0)
    bag = tmp_path / "gnss_bag"
    counts = write_bag(bag, items, storage=storage)
    assert counts[TOPIC] == 21
    assert bag_topics(bag)[TOPIC] == ("geometry_msgs/msg/TwistWithCovarianceStamped", 21)
    written = [r for tp, r, _ in items if tp == TOPIC]
    back = [r for tp, r in read_bag(bag) if tp == TOPIC]
    assert back == written   # every field exact: stamps to the ns, float64 velocities, std from the covariance
    # a hand-made record with no reported accuracy comes back with std 0 (unknown)
    one = GnssVelocity(t=1.25, ve=-3.5, vn=7.25, vu=0.125)
    write_bag(tmp_path / "one", [(TOPIC, one)], storage=storage)
    assert [r for _, r in read_bag(tmp_path / "one")] == [one]
