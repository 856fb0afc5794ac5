"""The deconvolved true-slip distribution and each sample's posterior (estimation/grip/latent_slip.py), checked
against known truth and a brute-force numerical integration."""

from __future__ import annotations

import numpy as np

from vehcal_ros.estimation.grip.latent_slip import SlipMixture, latent_slip, true_slip_distribution


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
    from vehcal_ros.estimation.grip.latent_slip import fit_mixture

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
    """gauss_nll_groups with one row per sample, i.e. the shared-error likelihood (Woodbury, O(n K^2)), against
    scipy's multivariate normal with the full covariance
    diag(sigma^2 + v_mu + f'^2 v_s) + L L^T, L_ik = f'(s_i) shared[k, i], the curve and its slope evaluated
    independently (numpy magic formula and friction ellipse, central differences); K = 0 is gauss_nll_lat."""
    from scipy.stats import multivariate_normal

    from vehcal_ros.models.pacejka import NO_GROUPS, gauss_nll_groups, gauss_nll_lat
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
    assert abs(gauss_nll_groups(s, mu, th, 1e-4, vs, vm, la, sh, NO_GROUPS) - ref) < 1e-6 * abs(ref)
    no_shared = np.zeros((0, n))
    assert gauss_nll_groups(s, mu, th, 1e-4, vs, vm, la, no_shared, NO_GROUPS) == gauss_nll_lat(s, mu, th, 1e-4, vs,
                                                                                                vm, la)


def test_posterior_slices_keep_the_posterior_and_its_modes() -> None:
    """posterior_slices: each sample's rows are a probability distribution whose mean and variance are those of
    its posterior (checked against :meth:`SlipMixture.posterior`, itself checked by brute-force integration
    above) up to the slices dropped below 1e-4; a sample between two clusters keeps a row on each; a sample
    inside a cluster far narrower than its noise is one row; a noise-free sample is itself."""
    mix = SlipMixture(weights=np.array([0.7, 0.3]), means=np.array([0.0, 0.012]),
                      variances=np.array([1e-8, 4e-6]), log_likelihood=0.0)
    s = np.array([0.0003, 0.006, 0.011, 0.02, 0.004])
    v = np.array([2e-6, 4e-6, 1e-6, 2e-6, 0.0])
    rows = mix.posterior_slices(s, v)
    m, w = mix.posterior(s[:4], v[:4])
    assert np.all(np.diff(rows.sample) >= 0) and set(rows.sample) == set(range(5))
    for i in range(4):
        j = rows.sample == i
        p = np.exp(rows.log_weight[j])
        assert abs(p.sum() - 1.0) < 1e-12
        mean = float((p * rows.slip[j]).sum())
        var = float((p * (rows.slip_var[j] + rows.slip[j] ** 2)).sum()) - mean**2
        assert abs(mean - m[i]) < 1e-3 * np.sqrt(v[i]), (i, mean, m[i])
        assert abs(var - w[i]) < 1e-3 * v[i], (i, var, w[i])
    assert np.sum(rows.sample == 0) == 1                       # inside the narrow cruise cluster: one row
    between = rows.slip[rows.sample == 1]
    assert between.size == 2 and between.min() < 0.001 and between.max() > 0.005   # both modes kept
    j = rows.sample == 4
    assert rows.slip[j].tolist() == [0.004] and rows.slip_var[j].tolist() == [0.0] and rows.log_weight[j][0] == 0.0
