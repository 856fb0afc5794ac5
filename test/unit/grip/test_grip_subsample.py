"""The samples a grip fit sees (grip_pipeline.subsample): chosen on the slip, never on the friction;
the excited part of a window kept; the newest sample kept; each slip's posterior under the whole window's
deconvolved slip distribution.

Windows shaped like the accel_coast drive's 35 s front window (602 blocks: 80 of an acceleration, the rest
coasting near zero slip), where the former evenly-in-time subsample kept 13 of the 80.
"""

from __future__ import annotations

import numpy as np

from vehcal_ros.estimation.grip.friction_samples import ScopeData
from vehcal_ros.estimation.grip.latent_slip import true_slip_distribution
from vehcal_ros.estimation.grip.pipeline import stratified_indices, subsample

N, N_ACC, N_MAX = 602, 80, 100
EXC = "excitation"   # the rule under test (the pipeline's default is "even": see its docstring)
SD_S = 5e-4   # block slip noise


def _window(seed: int, mu_scale: float = 1.0) -> ScopeData:
    """An acceleration (true slip 0.028 +- 2e-4, mu ~0.49) at the start, then coasting (true slip -5.7e-4)."""
    rng = np.random.default_rng(seed)
    t = np.arange(N) * 0.05
    true = np.where(np.arange(N) < N_ACC, 0.028 + 2e-4 * rng.standard_normal(N), -5.7e-4)
    s = true + SD_S * rng.standard_normal(N)
    mu = mu_scale * np.where(np.arange(N) < N_ACC, 0.49, -0.007) + 5e-3 * rng.standard_normal(N)
    return ScopeData("front_axle", t, s, mu, np.full(N, SD_S**2), np.zeros(N), np.zeros(N))


def test_indices_do_not_depend_on_the_friction():
    """Same slips, frictions unrelated (random, scaled, permuted): the same samples are chosen."""
    a = _window(1)
    rng = np.random.default_rng(9)
    for mu in (rng.standard_normal(N), 3.0 * a.mu, a.mu[rng.permutation(N)]):
        b = ScopeData(a.scope, a.t, a.slip, mu, a.slip_var, a.mu_var, a.lat)
        assert np.array_equal(subsample(a, N_MAX, EXC).t, subsample(b, N_MAX, EXC).t)
        assert np.array_equal(subsample(a, N_MAX, EXC, deconvolve=False).t,
                              subsample(b, N_MAX, EXC, deconvolve=False).t)


def test_excited_blocks_and_the_newest_sample_are_kept():
    """At most n_max samples, the newest among them, and at least 3/8 of the budget from the 80 acceleration
    blocks (they fill the top three dyadic strata of |slip| and beyond; evenly in time gives 100 x 80/602 ~ 13)."""
    for seed in range(3):
        d = _window(seed)
        for deconvolve in (True, False):
            out = subsample(d, N_MAX, EXC, deconvolve=deconvolve)
            assert N_MAX - 1 <= out.t.size <= N_MAX
            assert out.t[-1] == d.t[-1]
            assert np.all(np.diff(out.t) > 0)                      # time order, no duplicates
            n_acc = int(np.sum(out.t < d.t[N_ACC]))
            assert n_acc >= 3 * N_MAX // 8, n_acc
            assert out.t.size - n_acc >= N_MAX // 4               # and the coast stays represented
    even = np.unique(np.round(np.linspace(0, N - 1, N_MAX)).astype(int))
    assert np.sum(even < N_ACC) < 3 * N_MAX // 8                  # the former rule fails the check above


def test_stratified_indices_small_and_tied_inputs():
    assert np.array_equal(stratified_indices(np.ones(7), 10), np.arange(7))
    idx = stratified_indices(np.zeros(1000), 50)                  # all tied: evenly spread, newest kept
    assert 49 <= idx.size <= 50 and idx[-1] == 999 and idx[0] == 0
    assert np.all(np.diff(idx) > 0)


def test_slips_are_posteriors_under_the_whole_window():
    """With slip variances the chosen slips are their posteriors under the mixture deconvolved from ALL samples
    (checked against that mixture evaluated directly), and the fit is told not to deconvolve again; the tight
    acceleration cluster is resolved (posterior SD well below the noise)."""
    d = _window(2)
    out = subsample(d, N_MAX, EXC)
    assert out.slip_is_latent and not d.slip_is_latent
    mix = true_slip_distribution(d.slip, d.slip_var)
    idx = np.searchsorted(d.t, out.t)
    m, w = mix.posterior(d.slip[idx], d.slip_var[idx])
    np.testing.assert_allclose(out.slip, m, rtol=0, atol=1e-12)
    np.testing.assert_allclose(out.slip_var, w, rtol=0, atol=1e-15)
    acc = out.t < d.t[N_ACC]
    assert np.median(np.sqrt(out.slip_var[acc])) < 0.5 * SD_S
    np.testing.assert_array_equal(out.mu, d.mu[idx])               # frictions untouched
    flat = subsample(d, N_MAX, EXC, deconvolve=False)
    assert not flat.slip_is_latent and np.array_equal(flat.slip, d.slip[np.searchsorted(d.t, flat.t)])
    assert subsample(d, N, EXC) is d                                    # a window within the budget is fitted whole


def test_default_rule_is_even_in_time_with_the_newest_sample():
    """The pipeline's default (``even``): evenly spaced in time, the newest kept; the slips their posteriors under
    the mixture deconvolved from the whole window (as the excitation rule's), as measured without
    deconvolution."""
    d = _window(3)
    out = subsample(d, N_MAX)
    idx = np.unique(np.round(np.linspace(0, N - 1, N_MAX)).astype(int))
    np.testing.assert_array_equal(out.t, d.t[idx])
    mix = true_slip_distribution(d.slip, d.slip_var)
    m, w = mix.posterior(d.slip[idx], d.slip_var[idx])
    np.testing.assert_allclose(out.slip, m, rtol=0, atol=1e-12)
    np.testing.assert_allclose(out.slip_var, w, rtol=0, atol=1e-15)
    assert out.t[-1] == d.t[-1] and out.slip_is_latent
    raw = subsample(d, N_MAX, deconvolve=False)
    np.testing.assert_array_equal(raw.slip, d.slip[idx])
    assert not raw.slip_is_latent
