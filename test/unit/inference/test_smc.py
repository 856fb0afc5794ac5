"""Tempered SMC (vehcal_ros.inference.smc) against analytic posteriors and evidences."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from vehcal_ros.inference.diagnostics import summarize_draws
from vehcal_ros.inference.smc import HalfNormal, Prior, Uniform, run_smc, systematic_resample

# conjugate 2-D Gaussian: likelihood N(y; theta, S) with S diagonal-correlated, prior uniform box [-10, 10]^2
Y = np.array([1.3, -0.7])
S = np.array([[0.04, 0.018], [0.018, 0.09]])
S_INV = np.linalg.inv(S)
LOG_NORM = -0.5 * math.log(np.linalg.det(2 * math.pi * S))


def gauss_ll(theta: np.ndarray) -> np.ndarray:
    r = theta - Y
    return LOG_NORM - 0.5 * np.einsum("ij,jk,ik->i", r, S_INV, r)


@pytest.mark.parametrize("kernel", ["imh", "rw"])
def test_gaussian_box_prior_mean_std_evidence(kernel: str) -> None:
    prior = Prior(("a", "b"), (Uniform(-10, 10), Uniform(-10, 10)))
    res = run_smc(gauss_ll, prior, n_particles=1000, n_chains=4, seed=3, kernel=kernel)
    draws = res.draws.reshape(-1, 2)
    n_eff = 4 * 1000 / 4.0  # conservative: a quarter of the draws effectively independent
    sd = np.sqrt(np.diag(S))
    # posterior = N(Y, S) (the box truncation is ~40 sd away)
    assert np.all(np.abs(draws.mean(axis=0) - Y) < 4 * sd / math.sqrt(n_eff))
    assert np.all(np.abs(draws.std(axis=0) / sd - 1) < 0.08)
    corr = np.corrcoef(draws.T)[0, 1]
    assert abs(corr - 0.018 / (0.2 * 0.3)) < 0.06
    # evidence = 1/400 (the likelihood integrates to 1 over theta); SMC error of one run ~0.1 nat
    assert abs(res.log_evidence - math.log(1 / 400)) < 0.15
    assert res.draws.shape == (4, 1000, 2)
    assert res.temperatures[0][0] == 0.0 and res.temperatures[0][-1] == 1.0
    summ = summarize_draws(res.draws, res.names)
    assert all(s.r_hat < 1.01 for s in summ.values())


def test_imh_refit_proposal_few_steps_same_posterior() -> None:
    # the proposal refitted before every mutation step (the live calibrator's setting) with few steps per stage
    prior = Prior(("a", "b"), (Uniform(-10, 10), Uniform(-10, 10)))
    res = run_smc(gauss_ll, prior, n_particles=1000, n_chains=4, seed=4, kernel="imh", max_mutation_steps=3,
                  refit_proposal=True)
    draws = res.draws.reshape(-1, 2)
    sd = np.sqrt(np.diag(S))
    assert np.all(np.abs(draws.mean(axis=0) - Y) < 4 * sd / math.sqrt(1000.0))
    assert np.all(np.abs(draws.std(axis=0) / sd - 1) < 0.08)
    assert abs(res.log_evidence - math.log(1 / 400)) < 0.15
    assert max(max(s) for s in res.mutation_steps) <= 3
    assert all(s.r_hat < 1.01 for s in summarize_draws(res.draws, res.names).values())


def test_half_normal_prior_truncated_posterior_and_evidence() -> None:
    # theta ~ HalfNormal(1), y | theta ~ N(theta, s^2): posterior N(mu_p, sd_p^2) truncated to theta > 0
    y, s = 0.4, 0.5
    prior = Prior(("theta",), (HalfNormal(1.0),))

    def ll(th: np.ndarray) -> np.ndarray:
        return stats.norm.logpdf(y, th[:, 0], s)

    res = run_smc(ll, prior, n_particles=2000, n_chains=4, seed=11)
    var_p = 1.0 / (1.0 + 1.0 / s**2)
    mu_p, sd_p = var_p * y / s**2, math.sqrt(var_p)
    trunc = stats.truncnorm(-mu_p / sd_p, np.inf, loc=mu_p, scale=sd_p)
    evidence = 2.0 * stats.norm.pdf(y, 0.0, math.sqrt(1 + s**2)) * stats.norm.cdf(mu_p / sd_p)
    d = res.draws.ravel()
    se = trunc.std() / math.sqrt(d.size / 4.0)
    assert abs(d.mean() - trunc.mean()) < 4 * se
    assert abs(d.std() / trunc.std() - 1) < 0.06
    assert abs(res.log_evidence - math.log(evidence)) < 0.1
    assert d.min() > 0


def test_bounded_space_and_seed_reproducible() -> None:
    prior = Prior(("a", "b"), (Uniform(-10, 10), Uniform(-10, 10)))
    r1 = run_smc(gauss_ll, prior, n_particles=500, n_chains=2, seed=5, space="bounded", kernel="rw")
    r2 = run_smc(gauss_ll, prior, n_particles=500, n_chains=2, seed=5, space="bounded", kernel="rw")
    np.testing.assert_array_equal(r1.draws, r2.draws)
    assert np.all(np.abs(r1.draws.reshape(-1, 2).mean(axis=0) - Y) < 0.05)
    assert r1.to_dict()["shape"] == [2, 500, 2]


def test_systematic_resampling_counts() -> None:
    rng = np.random.default_rng(0)
    w = np.array([0.5, 0.25, 0.125, 0.125])
    idx = systematic_resample(rng, w)
    counts = np.bincount(idx, minlength=4)
    # systematic resampling keeps every count within one of N w
    assert np.all(np.abs(counts - 4 * w) < 1.0 + 1e-12)


def _skewed_ll(theta: np.ndarray) -> np.ndarray:
    """A skewed, curved posterior on the box prior: log a ~ N(0.5, 0.3^2) and b | a ~ N(a, 0.4^2)."""
    a, b = theta[:, 0], theta[:, 1]
    with np.errstate(divide="ignore", invalid="ignore"):
        la = np.log(a)
    return np.where(a > 0, -0.5 * ((la - 0.5) / 0.3) ** 2 - la - 0.5 * ((b - a) / 0.4) ** 2, -np.inf)


def test_mixture_proposal_skewed_posterior_against_grid() -> None:
    # posterior moments and evidence by brute-force quadrature on a fine grid (independent of the sampler)
    prior = Prior(("a", "b"), (Uniform(0.0, 10.0), Uniform(-5.0, 10.0)))
    ga = np.linspace(1e-4, 10.0, 2001)
    gb = np.linspace(-5.0, 10.0, 2001)
    aa, bb = np.meshgrid(ga, gb, indexing="ij")
    ll = _skewed_ll(np.column_stack([aa.ravel(), bb.ravel()])).reshape(aa.shape)
    dens = np.exp(ll)

    def integral(f: np.ndarray) -> float:
        return float(np.trapezoid(np.trapezoid(f, gb, axis=1), ga))

    z = integral(dens)
    mean = [integral(dens * v) / z for v in (aa, bb)]
    sd = [math.sqrt(integral(dens * (v - m) ** 2) / z) for v, m in zip((aa, bb), mean)]
    log_z = math.log(z / (10.0 * 15.0))
    runs = {k: run_smc(_skewed_ll, prior, n_particles=1000, n_chains=4, seed=11, imh_components=k) for k in (1, 3)}
    for res in runs.values():
        draws = res.draws.reshape(-1, 2)
        # 4000 draws, at least a quarter of them effectively independent: 4 sd of the mean's MC error
        assert np.all(np.abs(draws.mean(axis=0) - mean) < 4 * np.array(sd) / math.sqrt(1000.0))
        assert np.all(np.abs(draws.std(axis=0) / sd - 1) < 0.08)
        assert abs(res.log_evidence - log_z) < 0.15
        assert all(s.r_hat < 1.01 for s in summarize_draws(res.draws, res.names).values())
    # the mixture fits the skewed intermediate targets better: higher acceptance, fewer MH steps
    assert runs[3].mean_acceptance > runs[1].mean_acceptance
    assert runs[3].n_evaluations < runs[1].n_evaluations
