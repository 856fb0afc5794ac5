"""Magic formula kernels: analytic Jacobian (Eq. 16) vs finite differences, curve maximum vs a dense grid."""

from __future__ import annotations

import numpy as np
import pytest

from vehcal_ros.models import pacejka as P

TRUE = np.array([15.4, 1.60, 0.871, -1.09, 0.0, 0.0])
BOUNDS = np.array([(5.0, 30.0), (0.5, 2.0), (0.2, 2.0), (-2.0, 0.0), (-0.05, 0.05), (-0.3, 0.3)])


def _random_thetas(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return BOUNDS[:, 0] + (BOUNDS[:, 1] - BOUNDS[:, 0]) * rng.random((n, 6))


def test_mf_matches_formula():
    s = np.linspace(0, 0.4, 9)
    B, C, D, E, sh, sv = TRUE
    x = s + sh
    ref = D * np.sin(C * np.arctan(B * x - E * (B * x - np.arctan(B * x)))) + sv
    np.testing.assert_allclose(P.mf_curve(s, TRUE), ref, rtol=0, atol=1e-15)
    assert P.sse(s, ref + 0.1, TRUE) == pytest.approx(9 * 0.01, rel=1e-12)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_jacobian_vs_central_differences(seed):
    s = np.linspace(-0.02, 0.5, 60)
    for theta in _random_thetas(10, seed):
        F = P.jacobian(s, theta)
        Fd = np.empty_like(F)
        for j in range(6):
            h = 1e-6 * max(1.0, abs(theta[j]))
            tp, tm = theta.copy(), theta.copy()
            tp[j] += h
            tm[j] -= h
            Fd[:, j] = (P.mf_curve(s, tp) - P.mf_curve(s, tm)) / (2 * h)
        # central-difference truncation error ~h^2 * f''' and rounding ~eps/h: 1e-6 relative is ample
        np.testing.assert_allclose(F, Fd, rtol=1e-6, atol=1e-7 * np.abs(Fd).max())


def test_peak_true_curve():
    mu_max, s_pk = P.peak(TRUE)
    assert mu_max == pytest.approx(0.871, abs=1e-12)  # D + s_v exactly when the peak is interior
    s = np.linspace(0, 1, 1_000_001)
    m = P.mf_curve(s, TRUE)
    assert s_pk == pytest.approx(s[np.argmax(m)], abs=2e-6)
    assert m.max() == pytest.approx(mu_max, abs=1e-10)


def test_peak_batch_vs_dense_grid_over_bounds():
    thetas = _random_thetas(150, 5)
    mu_max, s_pk = P.peak_batch(thetas)
    s = np.linspace(0, P.S_DOMAIN_MAX, 100_001)
    curves = P.mf_batch(s, thetas)
    grid_max = curves.max(axis=1)
    grid_arg = s[np.argmax(curves, axis=1)]
    # the analytic maximum is never below the grid maximum and exceeds it by at most the grid resolution effect
    assert np.all(mu_max >= grid_max - 1e-12)
    np.testing.assert_allclose(mu_max, grid_max, atol=1e-6)
    interior = (s_pk > 1e-3) & (s_pk < P.S_DOMAIN_MAX)
    np.testing.assert_allclose(s_pk[interior], grid_arg[interior], atol=3e-4)
    # C <= 1: monotone curve, maximum at the end of the slip domain
    mono = thetas[:, 1] <= 1.0
    assert mono.any() and np.all(s_pk[mono] == P.S_DOMAIN_MAX)


def test_peak_slip_at_most_matches_root():
    thetas = _random_thetas(2000, 9)
    _, s_pk = P.peak_batch(thetas)
    for smax in (0.05, 0.1, 0.3):
        flags = np.array([P.peak_slip_at_most(t, smax) for t in thetas])
        np.testing.assert_array_equal(flags, s_pk <= smax)


def test_slip_at_friction_inverts_rising_branch():
    s03 = P.slip_at_friction(TRUE, 0.3)
    assert P.mf(s03, *TRUE) == pytest.approx(0.3, abs=1e-12)
    assert 0 < s03 < P.peak(TRUE)[1]
    with pytest.raises(ValueError):
        P.slip_at_friction(TRUE, 0.95)


def test_slope_and_exact_errors_in_variables_likelihood() -> None:
    """gauss_nll is minus the sum of Gaussian log densities with Var_i = sigma^2 + v_mu_i + f'(s_i)^2 v_s_i,
    checked against scipy.stats.norm.logpdf with the slope taken by central differences of the curve (an
    independent evaluation: neither the kernel's slope formula nor its sum is reused)."""
    from scipy.stats import norm

    from vehcal_ros.models.pacejka import gauss_nll, slope

    rng = np.random.default_rng(3)
    theta = np.array([15.4, 1.60, 0.871, -1.09, 0.004, -0.01])
    s = rng.uniform(-0.05, 0.2, 50)
    h = 1e-7
    fd = (P.mf_curve(s + h, theta) - P.mf_curve(s - h, theta)) / (2 * h)
    np.testing.assert_allclose(slope(s, theta), fd, rtol=1e-6, atol=1e-6)
    mu = P.mf_curve(s, theta) + 0.02 * rng.standard_normal(50)
    f = P.mf_curve(s, theta)
    sig2 = 0.02**2
    none = np.zeros(0)
    ref0 = -norm.logpdf(mu, loc=f, scale=np.sqrt(sig2)).sum()
    assert gauss_nll(s, mu, theta, sig2, none, none) == pytest.approx(ref0, rel=1e-12)
    vs = rng.uniform(0, 2e-5, 50)
    vm = rng.uniform(0, 1e-4, 50)
    for v_s, v_m in ((vs, none), (none, vm), (vs, vm), (np.zeros(50), np.zeros(50))):
        var = sig2 + (v_m if v_m.size else 0.0) + fd**2 * (v_s if v_s.size else 0.0)
        ref = -norm.logpdf(mu, loc=f, scale=np.sqrt(var)).sum()
        assert gauss_nll(s, mu, theta, sig2, v_s, v_m) == pytest.approx(ref, rel=1e-9)


def test_grouped_rows_likelihood_integrates_the_true_slip_out() -> None:
    """gauss_nll_groups: each sample's friction density is its true slip's posterior mixture (rows) integrated
    through the curve. Checked against that integral done by dense quadrature over t (an independent evaluation:
    the kernel linearises the curve inside each row, whose SD here is 2e-4, far below the curve's scale), for
    samples of one row (equal to gauss_nll) and of two or three rows, some straddling the curve's peak."""
    from scipy.stats import norm

    from vehcal_ros.models.pacejka import gauss_nll, gauss_nll_groups, likelihood_work

    theta = np.array([15.4, 1.60, 0.871, -1.09, 0.004, -0.01])
    sig2 = 0.005**2
    rows = [   # (sample, weight, mean slip, slip variance, friction)
        (0, 1.0, 0.010, 4e-8, 0.30), (1, 0.6, 0.0, 4e-8, 0.05), (1, 0.4, 0.012, 4e-8, 0.05),
        (2, 0.2, 0.08, 4e-8, 0.85), (2, 0.5, 0.11, 4e-8, 0.85), (2, 0.3, 0.14, 4e-8, 0.85), (3, 1.0, 0.02, 0.0, 0.5)]
    sample, w, b, bv, mu = (np.array(c, dtype=float) for c in zip(*rows))
    groups = np.vstack([np.log(w), sample])
    none = np.zeros(0)
    got = gauss_nll_groups(b, mu, theta, sig2, bv, none, none, np.zeros((0, b.size)), groups)
    ref = 0.0
    t = np.linspace(-0.05, 0.3, 700_001)
    f = P.mf_curve(t, theta)
    for i in range(4):
        j = sample == i
        dens = 0.0
        for wk, bk, vk, mk in zip(w[j], b[j], bv[j], mu[j]):
            if vk == 0.0:
                dens += wk * norm.pdf(mk, P.mf_curve(np.array([bk]), theta)[0], np.sqrt(sig2))
            else:
                dens += wk * np.trapezoid(norm.pdf(mk, f, np.sqrt(sig2)) * norm.pdf(t, bk, np.sqrt(vk)), t)
        ref -= np.log(dens)
    assert got == pytest.approx(ref, rel=2e-4)
    single = np.vstack([np.zeros(3), np.arange(3.0)])     # one row per sample: the plain likelihood
    s3, mu3, v3 = b[[0, 1, 3]], mu[[0, 1, 3]], bv[[0, 1, 3]]
    assert P.gauss_nll_groups_into(s3, mu3, theta, sig2, v3, none, none, np.zeros((0, 3)), single,
                                   likelihood_work(3, 0)) == pytest.approx(gauss_nll(s3, mu3, theta, sig2, v3, none),
                                                                            rel=1e-12)
