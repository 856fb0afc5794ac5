"""The deconvolved true-slip distribution and each sample's posterior (estimation/latent_slip.py), checked
against known truth and a brute-force numerical integration."""

from __future__ import annotations

import math

import numpy as np

from vehcal_ros.estimation.latent_slip import SlipMixture, latent_slip, true_slip_distribution


def test_deconvolution_recovers_clusters_narrower_than_the_noise() -> None:
    """Two clusters of true slips (sd 2e-4 and 3e-3) measured with heteroscedastic noise (sd 1e-3 to 2e-3): BIC
    picks two components whose means, weights and deconvolved widths match the truth within their sampling
    error (n = 400)."""
    rng = np.random.default_rng(4)
    n = 400
    which = rng.random(n) < 0.7
    t = np.where(which, 0.001 + 2e-4 * rng.standard_normal(n), 0.02 + 3e-3 * rng.standard_normal(n))
    sd = rng.uniform(1e-3, 2e-3, n)
    s = t + sd * rng.standard_normal(n)
    mix = true_slip_distribution(s, sd**2)
    assert mix.n_components == 2
    k = np.argsort(mix.means)
    w, m, tau = mix.weights[k], mix.means[k], np.sqrt(mix.variances[k])
    # 3-SD bands (normal): false alarm 0.27 % each, 0.8 % for the three; 80 % power (3.84 SDs) against a weight
    # off by 0.088 (the binomial SD bounds the weight's error given the drawn labels, so at least that power), a
    # narrow-cluster mean off by 3.7e-4 and a wide-cluster mean off by 1.2e-3
    assert abs(w[0] - which.mean()) < 3 * np.sqrt(0.21 / n)
    assert abs(m[0] - 0.001) < 3 * 1.6e-3 / np.sqrt(0.7 * n) and abs(m[1] - 0.02) < 3 * 3.4e-3 / np.sqrt(0.3 * n)
    assert tau[0] < 6e-4                      # the noise (>= 1e-3) is not taken for cluster width
    assert 2.2e-3 < tau[1] < 3.8e-3


def test_posterior_matches_brute_force_integration() -> None:
    """m_i and w_i of a given mixture equal the mean and variance of prior x likelihood integrated on a fine
    grid (an independent evaluation of p(t | s_i))."""
    mix = SlipMixture(weights=np.array([0.6, 0.3, 0.1]), means=np.array([0.0, 0.012, 0.03]),
                      variances=np.array([1e-8, 4e-6, 0.0]), log_likelihood=0.0)
    s = np.array([-0.002, 0.001, 0.006, 0.011, 0.02, 0.029])
    v = np.array([1e-6, 2e-6, 1e-6, 4e-6, 1e-6, 9e-6])
    m, w = mix.posterior(s, v)
    grid = np.linspace(-0.02, 0.06, 400_001)
    dx = grid[1] - grid[0]
    for i in range(s.size):
        like = np.exp(-0.5 * (s[i] - grid) ** 2 / v[i])
        post = np.zeros_like(grid)
        for wk, mk, vk in zip(mix.weights, mix.means, mix.variances):
            if vk > 0:
                post += wk * np.exp(-0.5 * (grid - mk) ** 2 / vk) / np.sqrt(2 * np.pi * vk) * like
            else:                                 # a point mass: its weight times the likelihood at mk
                j = np.argmin(abs(grid - mk))
                post[j] += wk * np.exp(-0.5 * (s[i] - mk) ** 2 / v[i]) / dx
        post /= post.sum()
        mean = float((grid * post).sum())
        var = float(((grid - mean) ** 2 * post).sum())
        assert abs(m[i] - mean) < 1e-7 + 1e-4 * abs(mean), (i, m[i], mean)
        assert abs(w[i] - var) < 1e-4 * var + 1e-12, (i, w[i], var)


def test_noise_free_samples_pass_through() -> None:
    s = np.array([0.0, 0.01, 0.02, 0.005])
    m, w = latent_slip(s, np.zeros(4))
    np.testing.assert_array_equal(m, s)
    np.testing.assert_array_equal(w, np.zeros(4))


def test_shared_loadings_match_the_scatter_of_the_estimated_cluster_mean() -> None:
    """A tight cluster of true slips (sd 2e-4) measured with noise sd 2e-3, n = 60, fitted 400 times with one
    component: the spread of the estimated mean over the repetitions equals the sqrt(V) the loadings carry
    (row / (1 - g)), within the SD's sampling error (relative 1 / sqrt(2 x 400) ~ 3.5 %; 4 sigma), and each
    sample's loading is (1 - g) sqrt(V), the shrinkage's share of the mean's error."""
    from vehcal_ros.estimation.latent_slip import fit_mixture

    rng = np.random.default_rng(11)
    n, reps, sd = 60, 400, 2e-3
    means, implied = [], []
    for _ in range(reps):
        s = 0.001 + 2e-4 * rng.standard_normal(n) + sd * rng.standard_normal(n)
        mix = fit_mixture(s, np.full(n, sd**2), 1)
        sh = mix.shared_loadings(s, np.full(n, sd**2))
        g = mix.variances[0] / (mix.variances[0] + sd**2)
        assert sh.shape == (1, n) and np.allclose(sh[0], sh[0, 0])
        means.append(mix.means[0])
        implied.append(sh[0, 0] / (1.0 - g))
    spread = np.std(means, ddof=1)
    # 4 SDs of the ratio: false alarm 6e-5; 80 % power (4.84 SDs) against loadings off by 17 %
    assert abs(spread / np.median(implied) - 1.0) < 4 * 0.035


def test_shared_error_likelihood_equals_the_dense_gaussian() -> None:
    """gauss_nll_shared (Woodbury, O(n K^2)) against scipy's multivariate normal with the full covariance
    diag(sigma^2 + v_mu + f'^2 v_s) + L L^T, L_ik = f'(s_i) shared[k, i], the curve and its slope evaluated
    independently (numpy magic formula and friction ellipse, central differences); K = 0 is gauss_nll_lat."""
    from scipy.stats import multivariate_normal

    from vehcal_ros.models.pacejka import gauss_nll_lat, gauss_nll_shared

    rng = np.random.default_rng(1)
    n, K = 40, 3
    th = np.array([12.0, 1.6, 0.8, -0.5, 0.002, 0.01])
    s, mu = rng.uniform(-0.02, 0.1, n), rng.uniform(0.0, 0.8, n)
    vs, vm = rng.uniform(1e-7, 1e-5, n), rng.uniform(1e-6, 1e-4, n)
    la = np.where(rng.uniform(size=n) < 0.5, rng.uniform(0.0, 0.05, n), 0.0)
    sh = rng.normal(0.0, 3e-3, (K, n))

    def curve(x: np.ndarray) -> np.ndarray:
        B, C, D, E, h, v = th
        u = B * (x + h)
        f0 = D * np.sin(C * np.arctan(u - E * (u - np.arctan(u)))) + v
        ld = la / (D + v)
        return np.where(ld > 0, f0 * np.abs(x) / np.sqrt(x * x + f0 * f0 * ld * ld), f0)

    slope = (curve(s + 1e-7) - curve(s - 1e-7)) / 2e-7
    L = slope[:, None] * sh.T
    cov = np.diag(1e-4 + vm + slope**2 * vs) + L @ L.T
    ref = -multivariate_normal(mean=curve(s), cov=cov).logpdf(mu)
    assert abs(gauss_nll_shared(s, mu, th, 1e-4, vs, vm, la, sh) - ref) < 1e-6 * abs(ref)
    # sparse loadings (one error per group of samples, the speed reference's stretches): the zero skip is exact
    group = rng.integers(0, K, n)
    sparse = np.zeros((K, n))
    sparse[group, np.arange(n)] = rng.uniform(1e-3, 3e-3, n)
    Ls = slope[:, None] * sparse.T
    ref = -multivariate_normal(mean=curve(s), cov=np.diag(1e-4 + vm + slope**2 * vs) + Ls @ Ls.T).logpdf(mu)
    assert abs(gauss_nll_shared(s, mu, th, 1e-4, vs, vm, la, sparse) - ref) < 1e-6 * abs(ref)
    assert gauss_nll_shared(s, mu, th, 1e-4, vs, vm, la, np.zeros((0, n))) == gauss_nll_lat(s, mu, th, 1e-4, vs, vm,
                                                                                             la)


def test_a_shared_slowly_varying_error_is_not_deconvolved_as_independent_noise() -> None:
    """Known truth: 30 s of two wheels' 0.1 s blocks, clusters at 0 and at +-0.006..0.012 joined by 1 s ramps;
    the measured slip carries white noise (0.0006) and a speed-reference error common to both wheels, first
    order with 0.8 s time constant and SD 0.0013. Deconvolved with the white part alone (the grip pipeline), the
    ramps' posterior slips m_i, with the reference's variance added to w_i, have standardised errors of RMS ~1;
    deconvolved with the reference's variance counted as independent noise, the ramps are pulled toward the
    clusters with a stated w_i too small: RMS 1.5-2. Pooled over 4 drives the ramps (8 stretches of 0.8 s per
    drive, the error's integrated time 1.6 s) hold ~50 independent reference errors, so the RMS has a sampling
    SD of ~1/sqrt(2 x 50) = 0.1: [0.7, 1.3] is 3 SD either side of 1, and the independent model's excess
    (>= 1.45) is more than 4 SD above it."""
    z_white, z_indep = [], []
    for seed in range(4):
        rng = np.random.default_rng(seed)
        tb = np.arange(0.05, 30.0, 0.1)
        target = np.zeros(tb.size)
        ramp = np.zeros(tb.size, bool)
        for t0, level in ((3, 0.012), (11, -0.009), (18, 0.006), (24, -0.012)):
            target += level * np.clip(np.minimum(tb - t0, t0 + 3.5 - tb) / 1.0, 0.0, 1.0)
            ramp |= ((tb > t0 + 0.1) & (tb < t0 + 0.9)) | ((tb > t0 + 2.6) & (tb < t0 + 3.4))
        ref_sd, white_sd, phi = 0.0013, 0.0006, math.exp(-0.1 / 0.8)
        e = np.empty(tb.size)
        e[0] = rng.normal(0.0, ref_sd)
        for k in range(1, tb.size):
            e[k] = phi * e[k - 1] + rng.normal(0.0, ref_sd * math.sqrt(1.0 - phi * phi))
        true, ramp = np.repeat(target, 2), np.repeat(ramp, 2)
        slip = true + np.repeat(e, 2) + rng.normal(0.0, white_sd, true.size)
        m, w = latent_slip(slip, np.full(true.size, white_sd**2))
        z_white.append(((m - true) / np.sqrt(w + ref_sd**2))[ramp])
        m, w = latent_slip(slip, np.full(true.size, white_sd**2 + ref_sd**2))
        z_indep.append(((m - true) / np.sqrt(w))[ramp])
    rms_white = math.sqrt(np.mean(np.concatenate(z_white) ** 2))
    rms_indep = math.sqrt(np.mean(np.concatenate(z_indep) ** 2))
    assert 0.7 < rms_white < 1.3, rms_white
    assert rms_indep > 1.45, rms_indep
