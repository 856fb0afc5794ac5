"""Multi-start ML fit (friction paper, Algorithm 1 steps 1-3, Eqs. 14-17, Eq. 27 fallback)."""

from __future__ import annotations

import numpy as np
import pytest

from vehcal_ros.estimation.grip.ml_fit import FALLBACK_PROPOSAL_COV, multistart_fit
from vehcal_ros.models.pacejka import mf_curve, peak, slip_at_friction

TRUE = np.array([15.4, 1.60, 0.871, -1.09, 0.0, 0.0])
SIGMA = 0.0253


def _data(s_max, seed, n=100, sigma=SIGMA):
    rng = np.random.default_rng(seed)
    s = rng.uniform(0, s_max, n)
    return s, mf_curve(s, TRUE) + sigma * rng.standard_normal(n)


def test_full_curve_recovers_theta_within_ml_std():
    # every parameter within 4 asymptotic std (Eq. 15) of the truth; the curve maximum within 0.03.
    s, mu = _data(0.4, seed=11, n=200)
    fit = multistart_fit(s, mu, n_starts=12, rng=0)
    # F is well conditioned; Sigma_ML may still be "absurd" for D, E, s_v (their ridge, cf. Remark 4)
    assert fit.cond < 1e7 and fit.n_success >= 10
    std = np.sqrt(np.diag(fit.cov))
    for j in range(6):
        assert abs(fit.theta[j] - TRUE[j]) < 4 * std[j], (j, fit.theta[j], std[j])
    # sigma from Eq. (17): relative sampling std of s^2 is sqrt(2/(N-6)) ~ 0.1 -> sigma within 4*0.05
    assert fit.sigma == pytest.approx(SIGMA, rel=0.2)
    assert peak(fit.theta)[0] == pytest.approx(0.871, abs=0.03)
    # the kept start is the smallest V of all starts
    fit2 = multistart_fit(s, mu, n_starts=6, rng=1, keep_starts=True)
    assert fit2.V == pytest.approx(fit2.start_V.min()) and fit2.start_theta.shape == (6, 6)


def test_noise_free_full_curve_exact():
    s = np.linspace(0.0, 0.4, 80)
    fit = multistart_fit(s, mf_curve(s, TRUE), n_starts=8, rng=3)
    np.testing.assert_allclose(fit.theta, TRUE, atol=1e-5)
    assert fit.V < 1e-16


def test_low_mu_is_ill_conditioned_and_falls_back():
    s, mu = _data(slip_at_friction(TRUE, 0.3), seed=4)
    fit = multistart_fit(s, mu, n_starts=6, rng=0, cond_max=1e7)
    assert fit.cond > 1e7 and fit.ill_conditioned
    np.testing.assert_array_equal(fit.proposal_cov, np.diag(FALLBACK_PROPOSAL_COV))
    d = fit.to_dict()
    assert d["ill_conditioned"] is True and set(d["theta"]) == {"B", "C", "D", "E", "s_h", "s_v"}


def test_bad_arguments():
    s, mu = _data(0.4, seed=0, n=6)
    with pytest.raises(ValueError):
        multistart_fit(s, mu)
    s, mu = _data(0.4, seed=0, n=30)
    with pytest.raises(ValueError):
        multistart_fit(s, mu, bounds=[(1, 0)] * 6)
