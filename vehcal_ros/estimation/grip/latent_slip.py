"""The true slip behind noisy measured slips: a deconvolved slip distribution and each sample's posterior.

Errors-in-variables (docs/grip.md). A measured slip is s_i = t_i + e_i, e_i ~ N(0, v_i), with t_i the true slip
and v_i its (block-average) variance; the friction is mu_i = f(t_i) + noise. The friction given the measured slip
is then

    p(mu_i | s_i, theta) = int N(mu_i; f(t), sigma^2) p(t | s_i) dt,   p(t | s_i) ~ p(t) N(s_i; t, v_i)

and with p(t | s_i) ~ N(m_i, w_i) and f linearised at m_i it is N(mu_i; f(m_i), sigma^2 + f'(m_i)^2 w_i): the
Gaussian likelihood of :func:`~vehcal_ros.models.pacejka.gauss_nll` at (m_i, w_i). The usual effective-variance
form takes m_i = s_i, w_i = v_i, which is this with a flat prior p(t). Live slips are not flat: the vehicle
cruises, accelerates steadily or ramps, so the true slips sit in clusters far narrower than the slip noise. A
flat prior then claims the friction of a cluster should scatter by f' sqrt(v_i) and, seeing it does not, favours
curves that are flat at the clusters -- a low, confidently wrong peak (benchmarks/README_grip.md, case
``live_latent``; the live accel_coast run).

Here p(t) is learnt from the measured slips alone (it does not depend on theta, so the conditional likelihood
above stays exact up to the linearisation): a Gaussian mixture sum_k pi_k N(mu_k, tau_k^2) deconvolved from the
heteroscedastic noise by the extreme-deconvolution EM (Bovy, Hogg & Roweis 2011, Ann. Appl. Stat. 5, Eqs. 15-18),
the number of components chosen by BIC. Each sample's posterior is the mixture of the components' Gaussian
posteriors, reduced to its mean m_i and variance w_i (regression calibration, Carroll et al. 2006, ch. 4). Pure
numba, O(n K) per EM step; runs once per fit.

The posterior can also enter the likelihood without the reduction (``GripConfig.slip_posterior="slices"``): cut
into a few slices of about equal probability, each a Gaussian row, the sample's friction density their mixture
(:meth:`SlipMixture.posterior_slices`, :func:`~vehcal_ros.models.pacejka.gauss_nll_groups_into`). A sample whose
posterior spans two clusters then keeps both instead of one Gaussian at their mean.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numba import njit

_LOG_2PI = math.log(2.0 * math.pi)


POSTERIOR_SLICES = 3
"""Rows (Gaussian slices) per sample's true-slip posterior in the likelihood (:meth:`SlipMixture.posterior_slices`):
at most this many."""
TIGHT_POSTERIOR = 0.25
"""A posterior whose SD is at most this share of the sample's slip noise SD is one row."""
MIN_SLICE_WEIGHT = 1e-4
"""Slices of a sample's posterior below this probability are dropped from its rows."""


@dataclass(frozen=True)
class PosteriorSlices:
    """The samples' true-slip posteriors as rows of components (:meth:`SlipMixture.posterior_slices`)."""

    slip: np.ndarray
    """Posterior mean of the true slip under the row's component (slip)."""
    slip_var: np.ndarray
    """Its variance (slip^2)."""
    sample: np.ndarray
    """Index of the sample the row belongs to (non-decreasing)."""
    log_weight: np.ndarray
    """Log of the component's posterior probability for that sample (the sample's rows sum to 1)."""

    @property
    def groups(self) -> np.ndarray:
        """[2, rows] (log weight, sample): :func:`~vehcal_ros.models.pacejka.gauss_nll_groups_into`'s layout."""
        return np.ascontiguousarray(np.vstack([self.log_weight, self.sample.astype(float)]))


@dataclass(frozen=True)
class SlipMixture:
    """Deconvolved slip distribution: weights, means (slip) and variances (slip^2) of the true-slip components."""

    weights: np.ndarray
    means: np.ndarray
    variances: np.ndarray
    log_likelihood: float
    """Log likelihood of the measured slips under the mixture convolved with their noise (nats)."""

    @property
    def n_components(self) -> int:
        return int(self.weights.size)

    def responsibilities(self, s: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(r[n, K] posterior component probabilities, log density of each s_i under the noisy mixture)."""
        tot = self.variances[None, :] + v[:, None]
        logp = (np.log(self.weights)[None, :] - 0.5 * (_LOG_2PI + np.log(tot))
                - 0.5 * (s[:, None] - self.means[None, :]) ** 2 / tot)
        mx = logp.max(axis=1, keepdims=True)
        lse = mx[:, 0] + np.log(np.exp(logp - mx).sum(axis=1))
        return np.exp(logp - lse[:, None]), lse

    def posterior(self, s: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(m_i, w_i): mean and variance of the true slip given the measured s_i with noise variance v_i."""
        r, _ = self.responsibilities(s, v)
        m, w, _, _ = self._moments(s, v, r)
        return m, w

    def _moments(self, s: np.ndarray, v: np.ndarray, r: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(m_i, w_i, b_ik, E_k[t^2]_ik): the posterior's mean and variance from the responsibilities ``r`` and
        each component's posterior mean b_ik = mu_k + g_ik (s_i - mu_k), g_ik = tau_k^2 / (tau_k^2 + v_i), and
        second moment g_ik v_i + b_ik^2 (its variance g_ik v_i = tau^2 - tau^4 / (tau^2 + v))."""
        tau2 = self.variances[None, :]
        gain = tau2 / (tau2 + v[:, None])
        b = self.means[None, :] + gain * (s[:, None] - self.means[None, :])
        second = gain * v[:, None] + b * b
        m = (r * b).sum(axis=1)
        w = (r * second).sum(axis=1) - m * m
        return m, np.maximum(w, 0.0), b, second

    def posterior_slices(self, s: np.ndarray, v: np.ndarray, max_rows: int = POSTERIOR_SLICES,
                       min_weight: float = MIN_SLICE_WEIGHT) -> PosteriorSlices:
        """Each sample's true-slip posterior as at most ``max_rows`` Gaussian rows, the input of
        :func:`~vehcal_ros.models.pacejka.gauss_nll_groups_into`: the components' posteriors (mean b_ik =
        mu_k + g_ik (s_i - mu_k), variance g_ik v_i, probability r_ik), in slip order, are grouped into
        ``max_rows`` consecutive slices of about equal probability (a component is never split: a slice holds
        the components whose mid-probability falls in it), each slice moment-matched (its probability, mean and
        variance); slices below ``min_weight`` are dropped and the rest renormalised. A posterior no wider than
        :data:`TIGHT_POSTERIOR` times the slip noise SD (a sample inside a cluster far narrower than its noise:
        cruise) is one row; a sample with v_i = 0 is one row (s_i, 0). Rows of a sample are consecutive, in
        sample order. With a fine-grained distribution (many narrow components) the slices cut the posterior
        itself into equal-probability pieces."""
        s = np.asarray(s, dtype=float)
        v = np.asarray(v, dtype=float)
        order = np.argsort(self.means, kind="stable")
        mix = SlipMixture(self.weights[order], self.means[order], self.variances[order], self.log_likelihood)
        r, _ = mix.responsibilities(s, np.where(v > 0.0, v, 1.0))
        _, w, b, second = mix._moments(s, v, r)
        n_rows = np.where((v > 0.0) & (w > TIGHT_POSTERIOR ** 2 * v), max_rows, 1)
        mid = np.cumsum(r, axis=1) - 0.5 * r
        chunk = np.minimum((mid * n_rows[:, None]).astype(np.int64), n_rows[:, None] - 1)
        key = (np.arange(s.size)[:, None] * max_rows + chunk).ravel()
        size = s.size * max_rows
        total = np.bincount(key, r.ravel(), size)
        first = np.bincount(key, (r * b).ravel(), size)
        sec = np.bincount(key, (r * second).ravel(), size)
        exact = v <= 0.0
        mass = total.reshape(s.size, max_rows).copy()
        mass[exact] = 0.0
        mass[exact, 0] = 1.0
        keep = mass >= min_weight
        keep[np.arange(s.size), np.argmax(mass, axis=1)] = True
        mass = np.where(keep, mass, 0.0)
        mass /= mass.sum(axis=1, keepdims=True)
        sample, row = np.nonzero(keep)
        flat = sample * max_rows + row
        tot = total[flat]
        mean = np.where(exact[sample], s[sample], first[flat] / np.maximum(tot, 1e-300))
        var = np.where(exact[sample], 0.0, np.maximum(sec[flat] / np.maximum(tot, 1e-300) - mean * mean, 0.0))
        return PosteriorSlices(slip=np.ascontiguousarray(mean), slip_var=np.ascontiguousarray(var), sample=sample,
                               log_weight=np.ascontiguousarray(np.log(mass[sample, row])))

    def shared_loadings(self, s: np.ndarray, v: np.ndarray) -> np.ndarray:
        """[K, n] the error the component means carry into every posterior mean m_i (:meth:`posterior`), slip.

        The means are estimated from these same slips, with variance V_k = 1 / sum_i r_ik / (tau_k^2 + v_i) (the
        inverse Fisher information of mu_k), and m_i moves with mu_k by a_ik = r_ik (1 - g_ik). The error delta_k
        is one for all of a component's samples: m_i - t_i = sum_k a_ik delta_k + (its own part, variance w_i).
        Row k is a_ik sqrt(V_k); the likelihood integrates delta_k out exactly
        (:func:`~vehcal_ros.models.pacejka.gauss_nll_shared_into`). Without it a tight cluster of samples
        (cruise, a steady drive) pins the curve at its slip as if that slip were known to V_k / n_k, not V_k: a
        narrow interval that misses (benchmarks/README_tire_forces.md)."""
        r, _ = self.responsibilities(s, v)
        tot = self.variances[None, :] + v[:, None]
        gain = self.variances[None, :] / tot
        mean_var = 1.0 / np.maximum((r / tot).sum(axis=0), 1e-300)
        return np.ascontiguousarray((r * (1.0 - gain) * np.sqrt(mean_var)[None, :]).T)


def fit_mixture(s: np.ndarray, v: np.ndarray, k: int, n_iter: int = 300, tol: float = 1e-9) -> SlipMixture:
    """Extreme-deconvolution EM for ``k`` components (1-D), started at the quantiles of ``s`` (the EM steps in
    :func:`_xd_em`)."""
    s = np.ascontiguousarray(s, dtype=float)
    v = np.ascontiguousarray(v, dtype=float)
    means = np.quantile(s, (np.arange(k) + 0.5) / k)
    variances = np.full(k, max(float(np.var(s)) / k**2, 1e-12))
    weights = np.full(k, 1.0 / k)
    ll = _xd_em(s, v, weights, means, variances, int(n_iter), float(tol))
    return SlipMixture(weights, means, variances, float(ll))


@njit(cache=True, nogil=True)
def _xd_log_terms(s, v, weights, means, variances, logp, lse) -> float:
    """log pi_k N(s_i; mu_k, tau_k^2 + v_i) into ``logp`` [n, K], their log-sum-exp per sample into ``lse``;
    returns the log likelihood sum(lse)."""
    n, K = logp.shape
    logw = np.log(weights)
    total = 0.0
    for i in range(n):
        mx = -math.inf
        for j in range(K):
            tot = variances[j] + v[i]
            d = s[i] - means[j]
            lp = logw[j] - 0.5 * (_LOG_2PI + math.log(tot)) - 0.5 * d * d / tot
            logp[i, j] = lp
            mx = max(mx, lp)
        acc = 0.0
        for j in range(K):
            acc += math.exp(logp[i, j] - mx)
        lse[i] = mx + math.log(acc)
        total += lse[i]
    return total


@njit(cache=True, nogil=True)
def _xd_em(s, v, weights, means, variances, n_iter, tol) -> float:
    """Bovy, Hogg & Roweis (2011) Eqs. 15-18 in 1-D, in place on (weights, means, variances): per step, the
    responsibilities r_ik, each sample's posterior b_ik = mu_k + g_ik (s_i - mu_k), g_ik = tau_k^2 / (tau_k^2 +
    v_i), with variance g_ik v_i, then the weighted moments. Stops when the log likelihood gains less than ``tol``
    relatively. Returns the log likelihood of the final mixture."""
    n, K = s.shape[0], weights.shape[0]
    logp = np.empty((n, K))
    resp = np.empty((n, K))
    post = np.empty((n, K))     # b_ik
    gain = np.empty((n, K))     # g_ik
    lse = np.empty(n)
    last = -math.inf
    nk = np.empty(K)
    sb = np.empty(K)
    sv = np.empty(K)
    for _ in range(n_iter):
        ll = _xd_log_terms(s, v, weights, means, variances, logp, lse)
        nk[:] = 0.0
        sb[:] = 0.0
        sv[:] = 0.0
        for i in range(n):
            for j in range(K):
                r = math.exp(logp[i, j] - lse[i])
                g = variances[j] / (variances[j] + v[i])
                b = means[j] + g * (s[i] - means[j])
                resp[i, j], gain[i, j], post[i, j] = r, g, b
                nk[j] += r
                sb[j] += r * b
        for j in range(K):
            sb[j] /= nk[j] + 1e-300          # the new means
        for i in range(n):
            for j in range(K):
                sv[j] += resp[i, j] * ((post[i, j] - sb[j]) ** 2 + gain[i, j] * v[i])
        wsum = 0.0
        for j in range(K):
            weights[j] = max((nk[j] + 1e-300) / n, 1e-12)
            wsum += weights[j]
        for j in range(K):
            weights[j] /= wsum
            variances[j] = max(sv[j] / (nk[j] + 1e-300), 0.0)
            means[j] = sb[j]
        if ll - last <= tol * (1.0 + abs(ll)):
            break
        last = ll
    return _xd_log_terms(s, v, weights, means, variances, logp, lse)


def true_slip_distribution(s: np.ndarray, v: np.ndarray, max_components: int = 6) -> SlipMixture:
    """The deconvolved true-slip distribution of the measured slips ``s`` with noise variances ``v``: the
    mixture of 1 .. ``max_components`` components with the smallest BIC (3 K - 1 free parameters)."""
    s = np.asarray(s, dtype=float)
    v = np.asarray(v, dtype=float)
    best, best_bic = None, math.inf
    for k in range(1, min(max_components, max(1, s.size // 10)) + 1):
        mix = fit_mixture(s, v, k)
        bic = -2.0 * mix.log_likelihood + (3 * k - 1) * math.log(s.size)
        if bic < best_bic:
            best, best_bic = mix, bic
    assert best is not None
    return best


def latent_slip(s: np.ndarray, v: np.ndarray, max_components: int = 6) -> tuple[np.ndarray, np.ndarray]:
    """(m_i, w_i): posterior mean and variance of each true slip under the deconvolved slip distribution; the
    inputs of the errors-in-variables likelihood in place of (s_i, v_i). Samples with v_i = 0 come back as they
    are (m_i = s_i, w_i = 0)."""
    s = np.asarray(s, dtype=float)
    v = np.asarray(v, dtype=float)
    m, w = s.copy(), np.zeros_like(s)
    noisy = v > 0.0
    if noisy.sum() < 2:
        return s.copy(), v.copy()
    mix = true_slip_distribution(s, np.where(noisy, v, 0.0), max_components)
    m[noisy], w[noisy] = mix.posterior(s[noisy], v[noisy])
    return m, w
