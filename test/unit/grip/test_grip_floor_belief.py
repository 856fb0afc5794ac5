"""Floor beliefs (estimation/grip/belief.py, grip_pipeline.GripPipeline.offer_floor): where no curve is identified,
the belief in force says mu_max is at least the largest friction the data show beyond their noise."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import binom

from vehcal_ros.estimation.grip.belief import HazardModel, belief_timeline, floor_mu_max
from vehcal_ros.estimation.grip.fit import MuMax
from vehcal_ros.estimation.grip.friction_samples import ScopeData
from vehcal_ros.estimation.grip.pipeline import GripPipeline, floor_candidates, observed_floor

SD = 0.02   # friction noise of the synthetic samples (stated as mu_var)


def window(mu_true: np.ndarray, seed: int, t0: float = 0.0) -> ScopeData:
    """10 Hz friction samples of true utilisation ``mu_true`` with N(0, SD^2) noise, stated as their variance."""
    rng = np.random.default_rng(seed)
    n = mu_true.size
    t = t0 + 0.1 * np.arange(n)
    return ScopeData(scope="front_axle", t=t, slip=0.02 * mu_true, mu=mu_true + rng.normal(0.0, SD, n),
                     slip_var=np.full(n, 1e-6), mu_var=np.full(n, SD**2), lat=np.zeros(n))


def test_floor_mu_max_is_the_prior_truncated_at_the_floor() -> None:
    hz = HazardModel()
    m = floor_mu_max(0.3, hz, 0.9)
    assert m.lower == 0.3
    assert m.upper == pytest.approx(0.3 + 0.9 * (hz.prior_upper - 0.3))
    assert m.mean == pytest.approx(0.5 * (0.3 + hz.prior_upper))


def test_candidates_are_newest_first_each_above_every_newer() -> None:
    mu = np.array([0.50, 0.10, 0.40, 0.10, 0.30, 0.20])
    data = ScopeData(scope="front_axle", t=np.arange(6.0), slip=np.zeros(6), mu=mu, mu_var=np.zeros(6))
    t, f = floor_candidates(data, sigma=0.0)
    assert list(t) == [5.0, 4.0, 2.0, 0.0]       # 0.2, 0.3, 0.4, 0.5: each higher than all newer ones
    assert list(f) == pytest.approx([0.2, 0.3, 0.4, 0.5])
    t, f = floor_candidates(data, sigma=0.0, since=3.0)
    assert list(t) == [5.0, 4.0]


def test_floor_holds_the_true_utilisation_at_its_false_alarm_level() -> None:
    """The Bonferroni floor exceeds the largest true |mu| of a window with probability <= level (0.01).

    Power: 300 windows; the test passes while at most 8 floors exceed the truth. Under a correct level 0.01
    (expected 3) it fails with probability P(X > 8 | 300, 0.01) = 0.004; a floor that overstates in 5 % of windows
    (a per-sample z without the Bonferroni correction does far worse) passes with P(X <= 8 | 300, 0.05) = 0.034
    (power 0.97).
    """
    assert binom.sf(8, 300, 0.01) < 0.005 and binom.cdf(8, 300, 0.05) < 0.04
    over = 0
    for seed in range(300):
        truth = 0.15 + 0.1 * np.sin(np.linspace(0.0, 6.0, 300)) ** 2
        over += observed_floor(window(truth, seed), sigma=0.0) > truth.max()
    assert over <= 8


def test_an_unexcited_window_puts_a_floor_belief_in_force() -> None:
    """A window on the linear part (span of |mu| below min_excitation) is not sampled; its floor goes in force,
    below the truth, within a few noise SDs of the true utilisation."""
    pipe = GripPipeline()
    for k in range(400):
        pipe.odometer.add_speed(0.1 * k, 15.0)
    data = window(np.full(300, 0.25), seed=1)
    out = pipe.fit([data])
    assert out[0].skipped and out[0].estimate is None
    pipe.commit(out)
    assert [s for s, _, _ in pipe.floor_updates] == ["front_axle"]
    b = pipe.belief("front_axle", data.t_end)
    assert b.known and b.floor
    assert 0.25 - 6 * SD < b.lower < 0.25
    assert b.upper == pytest.approx(b.lower + 0.9 * (HazardModel().prior_upper - b.lower), abs=0.02)
    assert "floor belief in force" in pipe.status["front_axle"].message
    assert pipe.status["front_axle"].n_floor == 1


def test_a_floor_does_not_replace_a_fresher_higher_estimate_and_ages_by_the_hazard() -> None:
    pipe = GripPipeline()
    for k in range(400):
        pipe.odometer.add_speed(0.1 * k, 15.0)
    fit = MuMax(mean=0.8, std=0.05, lower=0.7, upper=0.9, prob=0.9)
    pipe.beliefs["front_axle"].set_estimate(fit, 29.0)
    data = window(np.full(300, 0.25), seed=2)
    pipe.commit(pipe.fit([data]))
    assert pipe.floor_updates == []
    assert not pipe.belief("front_axle", data.t_end).floor
    # the same fit, 1.5 km older: its aged lower bound is below the window's floor, which takes over
    pipe.beliefs["front_axle"].set_estimate(fit, 0.0)
    for k in range(400, 1000):
        pipe.odometer.add_speed(0.1 * k, 15.0)
    late = window(np.full(300, 0.25), seed=3, t0=70.0)
    pipe.commit(pipe.fit([late]))
    assert [s for s, _, _ in pipe.floor_updates] == ["front_axle"]
    now = pipe.belief("front_axle", late.t_end)
    later = pipe.belief("front_axle", late.t_end + 30.0)   # 450 m on: wider, lower bound down
    assert now.floor and later.lower < now.lower


def test_floor_events_rebuild_the_same_belief_in_the_timeline() -> None:
    """A replay rebuilds the floor belief from its record (belief_timeline) as the pipeline holds it."""
    pipe = GripPipeline()
    speed_t = 0.1 * np.arange(400)
    for t in speed_t:
        pipe.odometer.add_speed(float(t), 15.0)
    data = window(np.full(300, 0.25), seed=4)
    pipe.commit(pipe.fit([data]))
    (_, mu, stamp), = pipe.floor_updates
    grid = np.array([data.t_end, data.t_end + 5.0, data.t_end + 9.0])
    out = belief_timeline([(data.t_end, "floor", mu, stamp)], speed_t, np.full(400, 15.0), grid)
    for k, t in enumerate(grid):
        b = pipe.belief("front_axle", float(t))
        assert out["floor"][k] and out["known"][k]
        assert out["lower"][k] == pytest.approx(b.lower, abs=1e-9)
        assert out["upper"][k] == pytest.approx(b.upper, abs=1e-9)


def test_floor_beliefs_can_be_switched_off() -> None:
    pipe = GripPipeline(floor_belief=False)
    pipe.commit(pipe.fit([window(np.full(300, 0.25), seed=5)]))
    assert pipe.floor_updates == [] and not pipe.belief("front_axle", 29.9).known


def test_samples_waiting_for_the_rolling_radius_put_a_floor_belief_in_force() -> None:
    """Before the rolling radius is learnt a window has no slips (only ScopeData.floor_only frictions): it is not
    fitted, and its floor goes in force, below the truth; a later window with slips is fitted as usual."""
    pipe = GripPipeline()
    for k in range(400):
        pipe.odometer.add_speed(0.1 * k, 15.0)
    full = window(np.full(300, 0.25), seed=3)
    waiting = ScopeData(scope="front_axle", t=np.empty(0), slip=np.empty(0), mu=np.empty(0),
                        slip_var=np.empty(0), mu_var=np.empty(0), lat=np.empty(0),
                        floor_only=(full.t, np.abs(full.mu), full.mu_var))
    assert waiting.t_end == full.t_end
    out = pipe.fit([waiting])
    assert out[0].skipped and out[0].estimate is None and "rolling radius" in out[0].error
    pipe.commit(out)
    b = pipe.belief("front_axle", full.t_end)
    assert b.known and b.floor and 0.25 - 6 * SD < b.lower < 0.25
    assert pipe.status["front_axle"].level == 1          # WARN: a normal start, not an error


def test_a_common_friction_scale_error_widens_the_interval_as_its_monte_carlo() -> None:
    """with_scale_error: mu_max (1 + e), e ~ N(0, s^2) common to the samples, on a Gaussian posterior. Its 90 %
    interval ends are those of 400 000 Monte Carlo draws within 0.002 (the draws' quantile SE is ~0.0003)."""
    import dataclasses

    from vehcal_ros.estimation.grip.fit import GripConfig, GripEstimator
    from vehcal_ros.estimation.grip.pipeline import with_scale_error
    from vehcal_ros.models.pacejka import mf_curve

    m, sd, s = 0.62, 0.03, 0.04
    slip = np.linspace(0.0, 0.05, 60)
    fit = GripEstimator(GripConfig.paper_case(n_chains=4, n_steps=2000, max_steps=2000, n_ml_starts=4, seed=1)).fit(
        slip, mf_curve(slip, np.array([12.0, 1.6, 0.6, 0.3, 0.0, 0.0])))
    est = dataclasses.replace(fit, mu_max=MuMax(mean=m, std=sd, lower=m - 1.6449 * sd, upper=m + 1.6449 * sd,
                                                prob=0.9))
    wide = with_scale_error(est, s).mu_max
    rng = np.random.default_rng(3)
    draws = rng.normal(m, sd, 400_000) * (1.0 + rng.normal(0.0, s, 400_000))
    lo, hi = np.quantile(draws, [0.05, 0.95])
    assert wide.lower == pytest.approx(lo, abs=0.002) and wide.upper == pytest.approx(hi, abs=0.002)
    assert wide.std == pytest.approx(draws.std(), rel=0.01) and wide.mean == m
    assert with_scale_error(est, 0.0) is est
