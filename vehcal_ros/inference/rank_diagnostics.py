"""Rank-normalised split R-hat, bulk ESS and tail ESS of many quantities at once (Vehtari et al. 2021).

The same estimators as arviz's ``rhat(method="rank")``, ``ess(method="bulk")`` and ``ess(method="tail")``
(arviz.stats.diagnostics: ``_rhat_rank``, ``_ess_bulk``, ``_ess_tail``, step by step;
test/unit/inference/test_rank_diagnostics.py compares them), computed with the quantities stacked in one array:
one rank, one normal quantile and one FFT call for all of them instead of an xarray round trip per quantity and
per statistic. The grip fit asks the
convergence rule after every extension of its chains; through arviz that check cost ~55 ms (8 quantities), a
fifth of a warm fit's CPU time.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.fft import next_fast_len
from scipy.special import ndtri


def _split(x: np.ndarray) -> np.ndarray:
    """[q, chain, draw] -> [q, 2 chain, draw // 2]: first and last halves of every chain (arviz _split_chains)."""
    half = x.shape[2] // 2
    return np.concatenate([x[:, :, :half], x[:, :, x.shape[2] - half:]], axis=1)


def _average_ranks(flat: np.ndarray) -> np.ndarray:
    """Ranks 1..n of each row, ties averaged (scipy.stats.rankdata(method="average") row by row; one unstable
    sort per row, which ties do not affect since they are averaged)."""
    q, n = flat.shape
    order = np.argsort(flat, axis=1)
    srt = np.take_along_axis(flat, order, axis=1)
    ranks = np.broadcast_to(np.arange(1.0, n + 1.0), (q, n)).copy()
    first = np.ones((q, n), dtype=bool)
    first[:, 1:] = srt[:, 1:] != srt[:, :-1]
    for k in np.flatnonzero(~first.all(axis=1)):   # rows with ties
        starts = np.flatnonzero(first[k])
        ends = np.append(starts[1:], n)
        ranks[k] = np.repeat((starts + ends + 1) / 2.0, ends - starts)
    out = np.empty((q, n))
    np.put_along_axis(out, order, ranks, axis=1)
    return out


def _z_scale(x: np.ndarray) -> np.ndarray:
    """Normal scores of the pooled ranks of each quantity (rank - 3/8) / (S + 1/4) (arviz _z_scale)."""
    flat = x.reshape(x.shape[0], -1)
    return ndtri((_average_ranks(flat) - 0.375) / (flat.shape[1] + 0.25)).reshape(x.shape)


def _rhat(x: np.ndarray) -> np.ndarray:
    """Split-chain R-hat of each quantity of ``x[q, chain, draw]`` (arviz _rhat)."""
    n = x.shape[2]
    between = n * np.var(x.mean(axis=2), axis=1, ddof=1)
    within = np.var(x, axis=2, ddof=1).mean(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):   # a constant quantity: NaN, as arviz
        return np.sqrt((between / within + n - 1) / n)


def _ess(x: np.ndarray) -> np.ndarray:
    """ESS of each quantity of ``x[q, chain, draw]``: Geyer's initial monotone sequence on the multi-chain
    autocorrelation (arviz _ess, FFT autocovariance as arviz's autocov)."""
    q, n_chain, n_draw = x.shape
    m = next_fast_len(2 * n_draw)
    c = x - x.mean(axis=2, keepdims=True)
    f = np.fft.rfft(c, n=m, axis=2)
    f *= np.conjugate(f)
    acov = np.fft.irfft(f, n=m, axis=2)[:, :, :n_draw] / n_draw
    mean_acov = acov.mean(axis=1)                               # [q, lag]
    out = np.empty(q)
    for k in range(q):
        xk = x[k]
        if np.max(xk) - np.min(xk) < np.finfo(float).resolution:
            out[k] = xk.size
            continue
        mean_var = mean_acov[k, 0] * n_draw / (n_draw - 1.0)
        var_plus = mean_var * (n_draw - 1.0) / n_draw
        if n_chain > 1:
            var_plus += np.var(xk.mean(axis=1), ddof=1)
        rho = 1.0 - (mean_var - mean_acov[k]) / var_plus       # rho[t] for every lag t
        rho_t = np.zeros(n_draw)
        even, odd = 1.0, rho[1]
        rho_t[0], rho_t[1] = even, odd
        t = 1
        while t < n_draw - 3 and even + odd > 0.0:   # Geyer's initial positive sequence
            even, odd = rho[t + 1], rho[t + 2]
            if even + odd >= 0:
                rho_t[t + 1], rho_t[t + 2] = even, odd
            t += 2
        max_t = t - 2
        if even > 0:
            rho_t[max_t + 1] = even
        t = 1
        while t <= max_t - 2:                        # ... made monotone
            if rho_t[t + 1] + rho_t[t + 2] > rho_t[t - 1] + rho_t[t]:
                rho_t[t + 1] = rho_t[t + 2] = (rho_t[t - 1] + rho_t[t]) / 2.0
            t += 2
        total = n_chain * n_draw
        tau = -1.0 + 2.0 * np.sum(rho_t[:max_t + 1]) + np.sum(rho_t[max_t + 1:max_t + 2])
        tau = max(tau, 1.0 / math.log10(total))
        out[k] = math.nan if np.isnan(rho_t).any() else total / tau
    return out


def rank_rhat_ess(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rank-normalised split R-hat, bulk ESS, tail ESS) of each quantity of ``x[q, chain, draw]``: R-hat is the
    larger of the bulk (z-scaled) and tail (z-scaled |x - median|) split R-hats, tail ESS the smaller ESS of the
    5 % and 95 % quantile indicators. NaN for a quantity with a non-finite draw, and for all with fewer than 4
    draws or (R-hat) one chain."""
    x = np.asarray(x, dtype=float)
    q, n_chain, n_draw = x.shape
    nan = np.full(q, math.nan)
    if n_draw < 4:
        return nan, nan.copy(), nan.copy()
    finite = np.isfinite(x).reshape(q, -1).all(axis=1)
    xs = np.where(finite[:, None, None], x, 0.0)
    split = _split(xs)
    z = _z_scale(split)
    rhat = nan.copy()
    if n_chain >= 2:
        med = np.median(split.reshape(q, -1), axis=1)
        rhat = np.maximum(_rhat(z), _rhat(_z_scale(np.abs(split - med[:, None, None]))))
    bulk = _ess(z)
    lo, hi = np.quantile(xs.reshape(q, -1), [0.05, 0.95], axis=1)
    tail = np.minimum(_ess(_split((xs <= lo[:, None, None]).astype(float))),
                      _ess(_split((xs <= hi[:, None, None]).astype(float))))
    return tuple(np.where(finite, v, math.nan) for v in (rhat, bulk, tail))
