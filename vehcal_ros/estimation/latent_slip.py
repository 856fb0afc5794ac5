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
numpy, O(n K) per EM step; runs once per fit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

_LOG_2PI = math.log(2.0 * math.pi)


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
        tau2 = self.variances[None, :]
        gain = tau2 / (tau2 + v[:, None])
        b = self.means[None, :] + gain * (s[:, None] - self.means[None, :])
        bvar = gain * v[:, None]                       # = tau^2 - tau^4 / (tau^2 + v)
        m = (r * b).sum(axis=1)
        w = (r * (bvar + b * b)).sum(axis=1) - m * m
        return m, np.maximum(w, 0.0)


def fit_mixture(s: np.ndarray, v: np.ndarray, k: int, n_iter: int = 300, tol: float = 1e-9) -> SlipMixture:
    """Extreme-deconvolution EM for ``k`` components (1-D), started at the quantiles of ``s``."""
    s = np.asarray(s, dtype=float)
    v = np.asarray(v, dtype=float)
    n = s.size
    means = np.quantile(s, (np.arange(k) + 0.5) / k)
    spread = float(np.var(s))
    variances = np.full(k, max(spread / k**2, 1e-12))
    weights = np.full(k, 1.0 / k)
    last = -math.inf
    mix = SlipMixture(weights, means, variances, last)
    for _ in range(n_iter):
        r, lse = mix.responsibilities(s, v)
        ll = float(lse.sum())
        tau2 = mix.variances[None, :]
        gain = tau2 / (tau2 + v[:, None])
        b = mix.means[None, :] + gain * (s[:, None] - mix.means[None, :])
        bvar = gain * v[:, None]
        nk = r.sum(axis=0) + 1e-300
        weights = np.maximum(nk / n, 1e-12)
        means = (r * b).sum(axis=0) / nk
        variances = np.maximum((r * ((b - means[None, :]) ** 2 + bvar)).sum(axis=0) / nk, 0.0)
        mix = SlipMixture(weights / weights.sum(), means, variances, ll)
        if ll - last <= tol * (1.0 + abs(ll)):
            break
        last = ll
    _, lse = mix.responsibilities(s, v)
    return SlipMixture(mix.weights, mix.means, mix.variances, float(lse.sum()))


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
