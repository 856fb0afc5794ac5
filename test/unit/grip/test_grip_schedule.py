"""The grip pipeline's scheduling: windows that can never publish are not sampled, and warm-started
fits go on from the previous fit's chains with a shorter first leg, under the same convergence rule.

Synthetic data: the friction paper's Section 4.1 curve (a known truth) under a slip sweep; small sampler budgets.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from vehcal_ros.diagnostic_levels import WARN
from vehcal_ros.estimation.grip.fit import GripConfig, GripEstimator, chain_ends
from vehcal_ros.estimation.grip.friction_samples import ScopeData
from vehcal_ros.estimation.grip.pipeline import GripPipeline, excitation_of
from vehcal_ros.models.pacejka import mf_curve

THETA = np.array([15.4, 1.60, 0.871, -1.09, 0.0, 0.0])
FAST = dataclasses.replace(GripConfig(), n_chains=4, n_steps=4000, max_steps=8000, n_ml_starts=4,
                           r_hat_threshold=1.5, ess_threshold=10.0, ess_tail_threshold=10.0)


def _window(t0: float, s_max: float, seed: int, n: int = 80) -> ScopeData:
    rng = np.random.default_rng(seed)
    s = np.linspace(0.0, s_max, n)
    return ScopeData(scope="front_axle", t=t0 + np.arange(n) * 0.1, slip=s,
                     mu=mf_curve(s, THETA) + 0.02 * rng.standard_normal(n))


def _pipeline(**kw) -> GripPipeline:
    """Windows here are refitted whatever their new samples' excitation (``require_new_excitation`` has its own
    test in test_surface_change.py)."""
    kw.setdefault("require_new_excitation", False)
    return GripPipeline(fit_config=FAST, max_r_hat=1.5, min_ess=10.0, min_ess_tail=10.0, **kw)


def test_unexcited_window_is_not_sampled_and_the_last_good_estimate_stays():
    p = _pipeline()
    excited = _window(0.0, 0.15, seed=1)
    assert p.commit(p.fit([excited])) == ["front_axle"]
    good = p.status["front_axle"].estimate
    # a window on the linear part of the curve: |mu| spans less than min_excitation (95th - 5th percentile)
    flat = _window(20.0, 0.004, seed=2)
    span = np.quantile(np.abs(flat.mu), 0.95) - np.quantile(np.abs(flat.mu), 0.05)
    assert excitation_of(flat) == span < p.min_excitation
    (o,) = p.fit([flat])
    assert o.skipped and o.estimate is None and o.wall_s == 0.0      # the sampler never ran (nothing timed)
    assert "min_excitation" in o.error and "not fitted" in o.error
    assert p.commit([o]) == []
    st = p.status["front_axle"]
    assert st.estimate is good and st.n_skipped_unexcited == 1 and st.n_failed == 1 and st.n_fits == 2
    assert st.level == WARN and "keeping the last good estimate" in st.message
    # min_excitation 0 lets the same window through to the sampler (the gate is the publication gate)
    (o2,) = _pipeline(min_excitation=0.0).fit([flat])
    assert not o2.skipped and o2.estimate is not None


def test_warm_fit_continues_the_previous_chains_with_a_shorter_first_leg():
    p = _pipeline(warm_steps=1000)
    first = _window(0.0, 0.15, seed=3)
    p.commit(p.fit([first]))
    prev = p.status["front_axle"].last_fit
    assert prev is not None and not prev.warm_started
    # the starts: each chain's last draw (theta, log sigma), all inside the prior's support
    x0 = chain_ends(prev, FAST)
    draws = prev.chains.draws
    np.testing.assert_array_equal(x0[:, :6], draws[:, -1, :6])
    np.testing.assert_allclose(np.exp(x0[:, 6]), draws[:, -1, 6], rtol=1e-12)
    assert chain_ends(prev, dataclasses.replace(FAST, n_chains=6)) is None   # another number of chains: mean
    cfg = p.warm_config(FAST)
    assert cfg.n_steps == 1000 and cfg.burn_in == p.warm_burn_in and cfg.max_steps == FAST.max_steps
    assert _pipeline(warm_steps=0).warm_config(FAST) == FAST
    (o,) = p.fit([_window(5.0, 0.15, seed=4)])
    e = o.estimate
    assert e.warm_started and e.n_steps_used < FAST.n_steps
    # the rule is the pipeline's, unchanged: what it publishes passes it
    if p.commit([o]):
        assert p.publishable(p.status["front_axle"].estimate)
    # the same data cold: a fresh multi-start, the full first leg
    again = _window(5.0, 0.15, seed=4)
    cold = GripEstimator(FAST).fit(again.slip, again.mu)
    assert not cold.warm_started and cold.n_steps_used >= FAST.n_steps


def test_warm_start_off_starts_every_fit_afresh():
    p = _pipeline(warm_start=False)
    p.commit(p.fit([_window(0.0, 0.15, seed=5)]))
    assert p.warm_start_of("front_axle") is None
    (o,) = p.fit([_window(5.0, 0.15, seed=6)])
    assert not o.estimate.warm_started and o.estimate.n_steps_used >= FAST.n_steps


def test_grip_config_is_untouched_by_the_schedule():
    # the schedule's settings live in the pipeline; GripConfig's defaults are the cold fit's
    assert GripConfig().n_steps == 40_000 and GripPipeline().warm_steps < GripConfig().n_steps


# ---------------------------------------------------------------------------------------------------------------
# nothing recomputed that did not change
# ---------------------------------------------------------------------------------------------------------------
def test_extension_by_the_rules_shortfall():
    """steps_needed: ESS grows and R-hat - 1 shrinks in proportion to the chain length, so the chains need the
    factor f = max(400 / ESS, (R-hat - 1) / 0.01) of their length, + 25 %; the sampler clamps each extension to
    [n_steps / 4, its fixed block] and asks the rule after each."""
    est = GripEstimator(GripConfig.paper_case())
    diag = {"r_hat_max": 1.02, "ess_bulk_min": 800.0, "ess_tail_min": 600.0}
    assert est.steps_needed(diag, 10_000) == 12_500                   # R-hat: f = 2 -> 1.25 x 10 000
    assert est.steps_needed({**diag, "r_hat_max": 1.005, "ess_tail_min": 200.0}, 10_000) == 12_500   # tail ESS
    assert est.steps_needed({**diag, "r_hat_max": 1.011}, 40_000) == 5_000   # f = 1.1
    assert est.steps_needed({**diag, "r_hat_max": float("nan")}, 10_000) >= 1 << 40
    # the sampler: asked with a shortfall of 1 step -> n_steps/4; of 10^9 -> the block (n_steps/2 here)
    from vehcal_ros.estimation.grip.ml_fit import TABLE3_BOUNDS, multistart_fit
    from vehcal_ros.estimation.grip.posterior import run_grip_chains

    w = _window(0.0, 0.15, seed=3)
    s, mu = w.slip, w.mu
    ml = multistart_fit(s, mu, n_starts=4, rng=0)
    S0 = np.linalg.cholesky(ml.proposal_cov)
    for ask, expect in ((1, [4000, 5000, 6000, 7000]), (10**9, [4000, 6000])):
        calls = []
        r = run_grip_chains(s, mu, np.tile(THETA, (4, 1)), S0, np.asarray(TABLE3_BOUNDS), ml.sigma, n_steps=4000,
                            burn_in=2000, thin=5, seed=7, max_steps=8000,
                            until=lambda res, c=calls: c.append(res.n_steps) is not None, extend=lambda res, a=ask: a)
        assert calls == expect and r.n_steps == 8000


def test_tempered_weights_keep_half_the_draws_effective():
    """Closed form: log ratios z ~ N(0, s^2) give weights whose ESS fraction at exponent lam is exp(-lam^2 s^2)
    (large n), so half the draws stay effective at lam = sqrt(ln 2) / s; small spreads keep lam = 1."""
    from vehcal_ros.inference.adaptive_metropolis import tempered_weights

    z = np.random.default_rng(0).standard_normal(200_000)
    for spread in (2.0, 4.0):
        w, lam = tempered_weights(spread * z)
        assert abs(lam - np.sqrt(np.log(2.0)) / spread) < 0.02 / spread
        assert abs(1.0 / np.sum(w * w) / z.size - 0.5) < 0.01 and abs(w.sum() - 1.0) < 1e-12
    w, lam = tempered_weights(0.1 * z)
    assert lam == 1.0
    w, lam = tempered_weights(np.where(z > 0, -np.inf, z))                  # outside the new support: weight 0
    assert np.all(w[z > 0] == 0.0) and lam > 0.0
    assert tempered_weights(np.full(5, -np.inf))[0].sum() == 0.0


def test_carried_draws_are_reweighted_by_the_new_windows_likelihood():
    """carried_log_ratio = log p(new data | theta, sigma) - log p(old data | theta, sigma) at each previous draw
    (priors and Jacobians cancel), checked against scipy's normal density; a warm fit then starts each chain at
    one of its own previous draws and still meets the rule."""
    from scipy.stats import norm

    from vehcal_ros.estimation.grip.posterior import carried_log_ratio, grip_problem

    old, new = _window(0.0, 0.15, seed=7), _window(5.0, 0.12, seed=8)
    prev = GripEstimator(FAST).fit(old.slip, old.mu)
    ch = prev.chains
    lr = carried_log_ratio(ch.draws, ch.logp, grip_problem(new.slip, new.mu, np.asarray(FAST.bounds),
                                                           max_peak_slip=0.1, slope_coords=True))
    x = ch.draws.reshape(-1, 7)
    ref = np.array([norm.logpdf(new.mu, mf_curve(new.slip, t[:6]), t[6]).sum()
                    - norm.logpdf(old.mu, mf_curve(old.slip, t[:6]), t[6]).sum() for t in x])
    np.testing.assert_allclose(lr.reshape(-1) - ref, (lr.reshape(-1) - ref).mean(), atol=1e-7)  # up to a constant
    e = GripEstimator(FAST).fit(new.slip, new.mu, warm_start=prev)
    lam = e.chains.extra["carry_lambda"]
    assert 0.0 < lam <= 1.0 and e.warm_started and e.converged
    off = GripEstimator(dataclasses.replace(FAST, carry_reweight=False)).fit(new.slip, new.mu, warm_start=prev)
    assert np.isnan(off.chains.extra["carry_lambda"])
    again = GripEstimator(FAST).fit(new.slip, new.mu, warm_start=prev)   # same seed, same numbers
    np.testing.assert_array_equal(again.chains.draws, e.chains.draws)
