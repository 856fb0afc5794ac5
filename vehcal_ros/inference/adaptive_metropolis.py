"""Robust adaptive Metropolis (Vihola 2012) as used by the friction paper, Algorithm 1, steps 4-12.

Each chain proposes ``theta* = theta + S r`` with ``r ~ N(0, I)`` (step 7), accepts with probability
``alpha = min(1, p(theta*)/p(theta))`` (steps 8-10, Eq. 24), and updates the lower-triangular factor S so that
``S S^T <- S (I + eta_i (alpha - 0.234) r r^T / |r|^2) S^T`` (step 11) by a rank-one Cholesky update
(``eta > 0``) or downdate (``eta < 0``), with ``eta_i = min(1, d i^-gamma)``, gamma in [0.5, 1] (Vihola's
choice of the step-size sequence; d = dimension). Draws after ``burn_in`` steps are kept every ``thin`` steps
(step 12). Draws are ``(chain, draw, parameter)`` as everywhere in vehcal_ros.

Two drivers:

* :func:`run_grip_chains` - the magic-formula posterior of Eqs. (20)-(23) entirely in numba
  (``nogil=True``, chains in ``prange``): uniform prior in the bounds (Eq. 20), Gaussian likelihood
  ``-V(theta)/(2 sigma^2)`` with sigma from the ML fit (Eq. 22, ``sigma_mode="fixed"``, the paper), or with sigma
  integrated out under the Jeffreys prior p(sigma) ~ 1/sigma, which gives ``-(N/2) log V(theta)``
  (``sigma_mode="marginal"``: sigma is then effectively sampled, at no extra dimension). Optionally the
  physical prior of Section 4.2.2 as a truncation: proposals whose curve peaks at a slip above
  ``max_peak_slip`` have zero prior density and are rejected inside the chain.
* :func:`run_ram` - a generic vectorised variant for other posteriors (e.g. the 8-DOF calibration): the user's
  ``log_target_batch(X[n_chains, d]) -> logp[n_chains]`` is called once per step for all chains.

Random numbers of :func:`run_grip_chains` come from one xoshiro256** stream per chain (seeded by
``numpy.random.SeedSequence(seed).spawn``), so results do not depend on the number of threads.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from numba import njit, prange

from vehcal_ros.inference.smc import MIXTURE_PARTICLES_PER_DIM, _mixture_fit, _next_temperature
from vehcal_ros.models.pacejka import (
    N_THETA,
    NO_GROUPS,
    THETA_NAMES,
    gauss_nll_groups_into,
    likelihood_work,
    mf_and_slope,
    peak_slip_at_most,
    sse,
)
from vehcal_ros.models.vector_math import sincos

TARGET_ACCEPTANCE = 0.234

# ----------------------------------------------------------------------------------------------------------
# random numbers: xoshiro256** (Blackman & Vigna), one stream per chain
# ----------------------------------------------------------------------------------------------------------


@njit(cache=True, nogil=True)
def _rotl(x: np.uint64, k: int) -> np.uint64:
    return (x << np.uint64(k)) | (x >> np.uint64(64 - k))


@njit(cache=True, nogil=True)
def _next_u64(st: np.ndarray) -> np.uint64:
    s0, s1, s2, s3 = st[0], st[1], st[2], st[3]
    result = _rotl(s1 * np.uint64(5), 7) * np.uint64(9)
    t = s1 << np.uint64(17)
    s2 ^= s0
    s3 ^= s1
    s1 ^= s2
    s0 ^= s3
    s2 ^= t
    s3 = _rotl(s3, 45)
    st[0], st[1], st[2], st[3] = s0, s1, s2, s3
    return result


@njit(cache=True, nogil=True)
def _uniform(st: np.ndarray) -> float:
    """Uniform on [0, 1) with 53 random bits."""
    return float(_next_u64(st) >> np.uint64(11)) * (1.0 / 9007199254740992.0)


@njit(cache=True, nogil=True)
def _normals(st: np.ndarray, out: np.ndarray) -> None:
    """Fill ``out`` with standard normals (Box-Muller pairs)."""
    n = out.shape[0]
    j = 0
    while j < n:
        u1 = 1.0 - _uniform(st)  # (0, 1]
        u2 = _uniform(st)
        rad = math.sqrt(-2.0 * math.log(u1))
        sn, cs = sincos(2.0 * math.pi * u2)
        out[j] = rad * cs
        if j + 1 < n:
            out[j + 1] = rad * sn
        j += 2


def _seed_states(seed: int | np.random.SeedSequence | None, n_chains: int) -> np.ndarray:
    ss = seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)
    states = np.empty((n_chains, 4), dtype=np.uint64)
    for c, child in enumerate(ss.spawn(n_chains)):
        st = child.generate_state(4, dtype=np.uint64)
        if not np.any(st):
            st[0] = np.uint64(0x9E3779B97F4A7C15)
        states[c] = st
    return states


# ----------------------------------------------------------------------------------------------------------
# step 11: rank-one update of the Cholesky factor
# ----------------------------------------------------------------------------------------------------------


@njit(cache=True, nogil=True)
def ram_adapt(S: np.ndarray, r: np.ndarray, coef: float, work: np.ndarray, Snew: np.ndarray) -> bool:
    """In place: S S^T <- S (I + coef r r^T/|r|^2) S^T with S lower triangular, positive diagonal.

    Friction paper, Algorithm 1, step 11 (Vihola 2012, Eq. 3); coef = eta_i (alpha_i - 0.234) > -1 keeps the
    matrix positive definite. A rank-one update (coef > 0) or downdate (coef < 0) of the Cholesky factor,
    O(d^2). Returns False (S unchanged) if the downdate loses positive definiteness numerically.
    """
    d = S.shape[0]
    if coef == 0.0:
        return True
    rn2 = 0.0
    for j in range(d):
        rn2 += r[j] * r[j]
    if rn2 <= 0.0:
        return True
    scale = math.sqrt(abs(coef) / rn2)
    for i in range(d):  # work = sqrt(|coef|) S r / |r|
        acc = 0.0
        for k in range(i + 1):
            acc += S[i, k] * r[k]
        work[i] = acc * scale
    sign = 1.0 if coef > 0.0 else -1.0
    for i in range(d):
        for k in range(d):
            Snew[i, k] = S[i, k]
    for k in range(d):
        lkk = Snew[k, k]
        r2 = lkk * lkk + sign * work[k] * work[k]
        if not (r2 > 1e-20 * lkk * lkk):
            return False
        rkk = math.sqrt(r2)
        c = rkk / lkk
        sn = work[k] / lkk
        Snew[k, k] = rkk
        for i in range(k + 1, d):
            Snew[i, k] = (Snew[i, k] + sign * sn * work[i]) / c
            work[i] = c * work[i] - sn * Snew[i, k]
    for i in range(d):
        if not math.isfinite(Snew[i, i]):
            return False
    for i in range(d):
        for k in range(i + 1):
            S[i, k] = Snew[i, k]
    return True


@njit(cache=True, nogil=True)
def _eta(i: int, d: int, gamma: float) -> float:
    """Adaptation step eta_i = min(1, d i^-gamma) (Algorithm 1, step 11)."""
    return min(1.0, d * i ** (-gamma))


@njit(cache=True, nogil=True)
def ram_adapt_batch(S: np.ndarray, R: np.ndarray, coef: np.ndarray) -> None:
    """:func:`ram_adapt` for every chain: ``S[c]``, ``R[c]``, ``coef[c]``."""
    d = S.shape[1]
    work = np.empty(d)
    Snew = np.empty((d, d))
    for c in range(S.shape[0]):
        ram_adapt(S[c], R[c], coef[c], work, Snew)


# ----------------------------------------------------------------------------------------------------------
# the magic-formula posterior in numba
# ----------------------------------------------------------------------------------------------------------


SIGMA_MODES = ("sampled", "fixed", "marginal")


@njit(cache=True, nogil=True)
def _theta_from_slope_coords(x: np.ndarray, th: np.ndarray) -> None:
    """theta from the slope coordinates x = (B C D, C, D, E, s_h, f(0)) (see :func:`to_slope_coords`)."""
    B = x[0] / (x[1] * x[2])
    th[0] = B
    for j in range(1, N_THETA - 1):
        th[j] = x[j]
    th[N_THETA - 1] = x[N_THETA - 1] - mf_and_slope(0.0, B, x[1], x[2], x[3], x[4])[0]


def to_slope_coords(theta: np.ndarray) -> np.ndarray:
    """The sampler's coordinates (B C D, C, D, E, s_h, f(0) = mu at zero slip) of ``theta[..., 6]``.

    Low-excitation data pin the initial slope B C D and the curve's value at zero slip, which are curved
    ridges in theta (B-C-D, and s_h-s_v since f(0) ~ s_v + B C D s_h); here each is one coordinate. The map is
    triangular: |d theta / d x| = 1/(C D) (B = x0/(C D); s_v = x5 - f(0; s_v = 0), unit slope in x5)."""
    theta = np.asarray(theta, dtype=float)
    x = theta.copy()
    B, C, D, E, sh, sv = np.moveaxis(theta, -1, 0)[:6]
    x[..., 0] = B * C * D
    u = B * sh
    x[..., 5] = sv + D * np.sin(C * np.arctan(u - E * (u - np.arctan(u))))
    return x


def from_slope_coords(x: np.ndarray) -> np.ndarray:
    """Inverse of :func:`to_slope_coords` (extra trailing columns, e.g. log sigma, are copied)."""
    x = np.asarray(x, dtype=float)
    theta = x.copy()
    bcd, C, D, E, sh, f0 = np.moveaxis(x, -1, 0)[:6]
    B = bcd / (C * D)
    u = B * sh
    theta[..., 0] = B
    theta[..., 5] = f0 - D * np.sin(C * np.arctan(u - E * (u - np.arctan(u))))
    return theta


@njit(cache=True, nogil=True)
def _grip_log_target(s, mu, vs, vm, la, sh, gr, x, th, reparam, lb, ub, sigma_mode, sigma2_fixed, half_n, truncate,
                     max_peak_slip, shape, work) -> float:
    """Log posterior up to a constant (nats): uniform prior in the bounds (Eq. 20) [x truncation to curves
    peaking at slip <= max_peak_slip, Section 4.2.2] + the exact Gaussian errors-in-variables log likelihood
    (:func:`~vehcal_ros.models.pacejka.gauss_nll_groups_into`: Eq. 22 with Var_i = sigma^2 + v_mu_i + f'(s_i)^2
    v_s_i; ``la`` the samples' lateral slips, empty = pure slip; ``sh`` slip errors shared by the samples).

    ``x`` is theta, or with ``reparam`` the slope coordinates (B C D, C, D, E, s_h, s_v); then theta is written
    to ``th`` and the log Jacobian -log(C D) of the change of variables is added (same posterior in theta).
    sigma: ``sigma_mode`` 0 sampled (x[6] = log sigma, uniform in [lb[6], ub[6]], i.e. the Jeffreys prior
    p(sigma) ~ 1/sigma truncated), 1 fixed at sqrt(sigma2_fixed), 2 integrated out under p(sigma) ~ 1/sigma
    (-(N/2) log V; only without per-sample variances).
    ``shape`` (length 12; shape[0] = 1 to use it): an optional Gaussian tire-shape prior on y = (B C D, C, E),
    mean shape[1:4], precision shape[4:13] (row-major 3 x 3), multiplying the uniform prior.
    ``sh`` [K, n]: slip errors shared by the samples (K = 0: none). ``gr`` [2, n]: the rows are slices of
    the samples' true-slip posteriors (:func:`~vehcal_ros.models.pacejka.gauss_nll_groups_into`; [2, 0]: one row
    per sample). ``work``: the likelihood's work space
    (:func:`~vehcal_ros.models.pacejka.likelihood_work`)."""
    log_jac = 0.0
    if reparam:
        cd = x[1] * x[2]
        if not cd > 0.0:
            return -math.inf
        log_jac = -math.log(cd)
        _theta_from_slope_coords(x, th)
    else:
        for j in range(N_THETA):
            th[j] = x[j]
    for j in range(x.shape[0]):
        v = th[j] if j < N_THETA else x[j]
        if v < lb[j] or v > ub[j]:
            return -math.inf
    if truncate and not peak_slip_at_most(th, max_peak_slip):
        return -math.inf
    if shape[0] > 0.0:
        y0 = th[0] * th[1] * th[2] - shape[1]
        y1 = th[1] - shape[2]
        y2 = th[3] - shape[3]
        log_jac -= 0.5 * (shape[4] * y0 * y0 + shape[8] * y1 * y1 + shape[12] * y2 * y2
                          + 2.0 * (shape[5] * y0 * y1 + shape[6] * y0 * y2 + shape[9] * y1 * y2))
    if sigma_mode == 2:
        return log_jac - half_n * math.log(sse(s, mu, th))
    sigma2 = math.exp(2.0 * x[N_THETA]) if sigma_mode == 0 else sigma2_fixed
    return log_jac - gauss_nll_groups_into(s, mu, th, sigma2, vs, vm, la, sh, gr, work)


@njit(cache=True, nogil=True)
def _grip_chain(s, mu, vs, vm, la, sh, gr, reparam, theta, S, lb, ub, sigma_mode, sigma2_fixed, truncate, max_peak_slip,
                shape, i_first, i_last, burn_in, thin, target, gamma, adapt_steps, st, draws, logp, stats, ind):
    """Steps i_first..i_last of one chain (Algorithm 1, steps 6-12); theta, S and the RNG state are updated
    in place; draw k = (i - burn_in)/thin - 1 goes to draws[k], logp[k]; stats += (accepted, accepted after
    burn-in, independence steps tried, independence steps accepted).

    ``ind`` (see :func:`independence_proposal`): with ind[0] = p > 0, each step is, with probability p, an
    independence Metropolis-Hastings step from the fixed multivariate t proposal packed in ``ind`` instead of
    the adaptive random-walk step (a mixture of two kernels that each leave the posterior invariant; the
    random-walk factor S adapts on its own steps only)."""
    d = theta.shape[0]
    half_n = 0.5 * s.shape[0]
    prop = np.empty(d)
    r = np.empty(d)
    work = np.empty(d)
    Snew = np.empty((d, d))
    th = np.empty(N_THETA)
    lw = likelihood_work(s.shape[0], sh.shape[0])
    lp = _grip_log_target(s, mu, vs, vm, la, sh, gr, theta, th, reparam, lb, ub, sigma_mode, sigma2_fixed, half_n,
                          truncate, max_peak_slip, shape, lw)
    p_ind = ind[0]
    z = np.empty(max(int(ind[1]), 1))
    lq = _mixture_log_density(ind, theta, work) if p_ind > 0.0 else 0.0
    for i in range(i_first, i_last + 1):
        independent = p_ind > 0.0 and _uniform(st) < p_ind
        if independent:
            _mixture_draw(ind, st, r, z, prop)
            lqp = _mixture_log_density(ind, prop, work)
        else:
            _normals(st, r)
            for j in range(d):  # step 7: theta* = theta + S r (S lower triangular)
                acc = theta[j]
                for k in range(j + 1):
                    acc += S[j, k] * r[k]
                prop[j] = acc
            lqp = 0.0
        lpp = _grip_log_target(s, mu, vs, vm, la, sh, gr, prop, th, reparam, lb, ub, sigma_mode, sigma2_fixed, half_n,
                               truncate, max_peak_slip, shape, lw)
        valid_start = lp != -math.inf  # from an outside start, keep the step size until the support is found
        ratio = lpp - lp + (lq - lqp if independent else 0.0)
        if lpp == -math.inf:  # step 8
            alpha = 0.0
        elif lp == -math.inf or ratio >= 0.0:
            alpha = 1.0
        else:
            alpha = math.exp(ratio)
        if independent:
            stats[2] += 1
        if _uniform(st) < alpha:  # steps 9-10
            for j in range(d):
                theta[j] = prop[j]
            lp = lpp
            if p_ind > 0.0:
                lq = lqp if independent else _mixture_log_density(ind, theta, work)
            stats[0] += 1
            if independent:
                stats[3] += 1
            if i > burn_in:
                stats[1] += 1
        if i <= adapt_steps and valid_start and not independent:  # step 11
            ram_adapt(S, r, _eta(i, d, gamma) * (alpha - target), work, Snew)
        if i > burn_in and (i - burn_in) % thin == 0:  # step 12
            k = (i - burn_in) // thin - 1
            for j in range(d):
                draws[k, j] = theta[j]
            logp[k] = lp


@njit(cache=True, nogil=True, parallel=True)
def _grip_chains(s, mu, vs, vm, la, sh, gr, reparam, X, S, lb, ub, sigma_mode, sigma2_fixed, truncate, max_peak_slip,
                 shape, i_first, i_last, burn_in, thin, target, gamma, adapt_steps, states, draws, logp, stats, ind):
    for c in prange(X.shape[0]):
        _grip_chain(s, mu, vs, vm, la, sh, gr, reparam, X[c], S[c], lb, ub, sigma_mode, sigma2_fixed, truncate,
                    max_peak_slip, shape, i_first, i_last, burn_in, thin, target, gamma, adapt_steps, states[c],
                    draws[c], logp[c], stats[c], ind)


IND_HEAD = 3
"""Packed independence proposal (:func:`independence_proposal`): [p, df, k] then per component j
[pi_j, c_j, mean_j[d], L_j[d, d] row-major], c_j = log pi_j - log det L_j."""


@njit(cache=True, nogil=True)
def _mixture_draw(ind: np.ndarray, st: np.ndarray, r: np.ndarray, z: np.ndarray, out: np.ndarray) -> None:
    """``out`` ~ the mixture of multivariate t packed in ``ind``: a component j by its weight, then
    x* = m_j + L_j r / sqrt(chi2_df / df)."""
    d = out.shape[0]
    df = ind[1]
    k = int(ind[2])
    size = 2 + d + d * d
    u = _uniform(st)
    j0 = k - 1
    cum = 0.0
    for j in range(k):
        cum += ind[IND_HEAD + j * size]
        if u < cum:
            j0 = j
            break
    base = IND_HEAD + j0 * size
    _normals(st, r)
    _normals(st, z)
    chi = 0.0
    for j in range(int(df)):
        chi += z[j] * z[j]
    scale = math.sqrt(df / chi) if chi > 0.0 else 1.0
    for j in range(d):
        acc = ind[base + 2 + j]
        for m in range(j + 1):
            acc += ind[base + 2 + d + j * d + m] * r[m] * scale
        out[j] = acc


@njit(cache=True, nogil=True)
def _mixture_log_density(ind: np.ndarray, x: np.ndarray, work: np.ndarray) -> float:
    """Log density (up to a constant shared by all components) of the mixture of multivariate t packed in
    ``ind`` at ``x``: log sum_j exp(c_j - (df + d)/2 log(1 + |L_j^-1 (x - m_j)|^2 / df)), by forward
    substitution (L_j lower triangular)."""
    d = x.shape[0]
    df = ind[1]
    k = int(ind[2])
    size = 2 + d + d * d
    best = -math.inf
    terms = 0.0
    for j in range(k):
        base = IND_HEAD + j * size
        q = 0.0
        for a in range(d):
            acc = x[a] - ind[base + 2 + a]
            for m in range(a):
                acc -= ind[base + 2 + d + a * d + m] * work[m]
            work[a] = acc / ind[base + 2 + d + a * d + a]
            q += work[a] * work[a]
        t = ind[base + 1] - 0.5 * (df + d) * math.log1p(q / df)
        if t > best:   # running log-sum-exp
            terms = terms * math.exp(best - t) + 1.0
            best = t
        else:
            terms += math.exp(t - best)
    return best + math.log(terms)


def independence_proposal(draws: np.ndarray | None, d: int, p: float = 0.5, df: int = 5, inflate: float = 1.5,
                          weights: np.ndarray | None = None, components: int = 1) -> np.ndarray:
    """The packed proposal of the chains' independence steps (layout: ``IND_HEAD``): a mixture of multivariate
    t with ``df`` degrees of freedom fitted to ``draws[n, d]`` (the sampler's coordinates; with ``weights[n]``,
    importance weights such as :func:`tempered_weights`, the weighted fit). ``components`` = 1: one t with the
    draws' mean and ``inflate``^2 times their covariance (heavier tails and a wider body than the draws, so the
    proposal covers a posterior that moved a little). ``components`` > 1: up to that many t components fitted by
    EM to the draws (:func:`~vehcal_ros.inference.smc._mixture_fit`, at most one per ``30 d`` draws, their
    covariances shrunk toward the single fit's) with weight 0.75, plus the single inflated t above with weight
    0.25 (a defensive component: the mixture's tails are never thinner than a quarter of it). A curved
    posterior, as the magic formula's at low excitation, is matched far better by the mixture: its steps are
    accepted several times as often. ``draws`` None, too few (effective) or degenerate: p = 0 (random-walk steps
    only; fewer than ``30 d`` (effective) draws count as too few)."""
    if draws is None or p <= 0.0:
        return np.zeros(IND_HEAD)
    x = np.asarray(draws, dtype=float).reshape(-1, d)
    w = None if weights is None else np.asarray(weights, dtype=float).reshape(-1)
    ok = np.all(np.isfinite(x), axis=1)
    if w is not None:
        ok &= np.isfinite(w) & (w > 0.0)
        w = w[ok]
    x = x[ok]
    n_eff = x.shape[0] if w is None else (w.sum() ** 2 / np.sum(w * w) if w.size else 0.0)
    if x.shape[0] < MIXTURE_PARTICLES_PER_DIM * d or n_eff < MIXTURE_PARTICLES_PER_DIM * d:
        return np.zeros(IND_HEAD)   # a covariance from fewer draws can be far too narrow in some direction
    wn = np.full(x.shape[0], 1.0 / x.shape[0]) if w is None else w / w.sum()
    mean = wn @ x
    cov = np.cov(x.T, aweights=wn) * inflate**2
    parts = [(1.0, mean, cov)]
    k = int(min(components, n_eff // (MIXTURE_PARTICLES_PER_DIM * d)))
    if k > 1:
        pis, means, chols, _ = _mixture_fit(x, wn, k, defensive=0.0)
        parts = [(0.75 * pi, m, L @ L.T) for pi, m, L in zip(pis, means, chols)] + [(0.25, mean, cov)]
    out = [float(p), float(df), float(len(parts))]
    for pi, m, c in parts:
        try:
            L = np.linalg.cholesky(c + 1e-12 * np.diag(np.diag(c) + 1e-300))
        except np.linalg.LinAlgError:
            return np.zeros(IND_HEAD)
        if not (np.all(np.isfinite(L)) and np.all(np.diag(L) > 0)):
            return np.zeros(IND_HEAD)
        out += [float(pi), math.log(pi) - float(np.log(np.diag(L)).sum()), *m.tolist(), *L.ravel().tolist()]
    return np.asarray(out)


@njit(cache=True, nogil=True)
def _grip_log_target_rows(s, mu, vs, vm, la, sh, gr, X, reparam, lb, ub, sigma_mode, sigma2_fixed, truncate,
                          max_peak_slip, shape, out):
    """:func:`_grip_log_target` at every row of ``X`` [n, d] (sampler coordinates) into ``out`` [n]."""
    th = np.empty(N_THETA)
    lw = likelihood_work(s.shape[0], sh.shape[0])
    half_n = 0.5 * s.shape[0]
    for i in range(X.shape[0]):
        out[i] = _grip_log_target(s, mu, vs, vm, la, sh, gr, X[i], th, reparam, lb, ub, sigma_mode, sigma2_fixed,
                                  half_n, truncate, max_peak_slip, shape, lw)


def carried_log_ratio(draws: np.ndarray, logp: np.ndarray, s: np.ndarray, mu: np.ndarray, bounds: np.ndarray, *,
                      sigma_mode: str = "sampled", sigma: float = float("nan"),
                      log_sigma_bounds: tuple[float, float] = (math.log(1e-5), 0.0),
                      max_peak_slip: float | None = None, slip_var: np.ndarray | None = None,
                      mu_var: np.ndarray | None = None, slope_coords: bool = False,
                      shape_prior: tuple[np.ndarray, np.ndarray] | None = None,
                      lateral: np.ndarray | None = None, shared: np.ndarray | None = None,
                      groups: np.ndarray | None = None) -> np.ndarray:
    """log p_new(x_i) - logp_i for draws ``x_i`` of an earlier fit (``draws[..., d]`` in the returned convention
    (theta, sigma), ``logp[...]`` their log target under that fit, as :class:`ChainResult` holds them): the log
    importance weights that turn them into draws of this target (the data of the new window; sequential Monte
    Carlo's reweighting step, Del Moral, Doucet & Jasra 2006). Both log targets are in the sampler's coordinates
    (their Jacobians cancel); -inf where the new target is zero (outside the bounds or the physical prior)."""
    sampled = sigma_mode == "sampled"
    d = N_THETA + int(sampled)
    x = _sampler_coords(draws, d, bool(slope_coords), sampled)
    if x is None:
        raise ValueError(f"draws must have {d} columns")
    s = np.ascontiguousarray(s, dtype=float)
    vs, vm = _variances(s, slip_var, mu_var)
    la = _lateral(s, lateral)
    sh = _shared(s, shared)
    gr = _groups(s, groups)
    lb, ub = _box(bounds, sigma_mode, log_sigma_bounds)
    mode = SIGMA_MODES.index(sigma_mode)
    out = np.empty(x.shape[0])
    with np.errstate(invalid="ignore"):
        _grip_log_target_rows(s, np.ascontiguousarray(mu, dtype=float), vs, vm, la, sh, gr, np.ascontiguousarray(x),
                              bool(slope_coords), lb, ub, mode, float(sigma) ** 2 if mode == 1 else 1.0,
                              max_peak_slip is not None, float(max_peak_slip) if max_peak_slip is not None else 1.0,
                              _shape_array(shape_prior), out)
        lr = out - np.asarray(logp, dtype=float).reshape(-1)
    lr[~np.isfinite(lr)] = -math.inf
    return lr.reshape(np.shape(logp))


def tempered_weights(log_ratio: np.ndarray, min_ess_frac: float = 0.5) -> tuple[np.ndarray, float]:
    """(normalised weights w_i ~ exp(lam log_ratio_i), lam): the largest lam in [0, 1] whose weights keep an
    effective sample size (sum w)^2 / sum w^2 of at least ``min_ess_frac`` of the draws with finite log ratio
    (adaptive tempering, as the calibrator's SMC chooses its next temperature; Jasra et al. 2011), by bisection.
    lam = 1 is the full reweighting to the new target; a smaller lam stops part-way between the old posterior and
    the new one when the new data move it too far for the old draws to represent it. All weights 0 when no
    log ratio is finite."""
    lr = np.asarray(log_ratio, dtype=float)
    fin = np.isfinite(lr)
    w = np.zeros(lr.shape)
    if not fin.any():
        return w, 0.0
    z = lr[fin] - lr[fin].max()
    lam = _next_temperature(z, 0.0, min_ess_frac)   # the calibrator's SMC temperature step, from 0
    v = np.exp(lam * z)
    w[fin] = v / v.sum()
    return w, lam


def grip_log_target(s: np.ndarray, mu: np.ndarray, x: np.ndarray, bounds: np.ndarray, *,
                    sigma_mode: str = "sampled", sigma: float = float("nan"),
                    log_sigma_bounds: tuple[float, float] = (math.log(1e-5), 0.0),
                    max_peak_slip: float | None = None, slip_var: np.ndarray | None = None,
                    mu_var: np.ndarray | None = None, slope_coords: bool = False,
                    shape_prior: tuple[np.ndarray, np.ndarray] | None = None,
                    lateral: np.ndarray | None = None, shared: np.ndarray | None = None,
                    groups: np.ndarray | None = None) -> float:
    """The chains' log target at one point ``x`` (theta[6], plus log sigma with ``sigma_mode="sampled"``;
    slope coordinates with ``slope_coords``), up to the constant of the uniform prior (for tests and tools)."""
    vs, vm = _variances(s, slip_var, mu_var)
    la = _lateral(s, lateral)
    sh = _shared(s, shared)
    gr = _groups(s, groups)
    lb, ub = _box(bounds, sigma_mode, log_sigma_bounds)
    x = np.ascontiguousarray(x, dtype=float)
    mode = SIGMA_MODES.index(sigma_mode)
    return float(_grip_log_target(np.ascontiguousarray(s, dtype=float), np.ascontiguousarray(mu, dtype=float),
                                  vs, vm, la, sh, gr, x, np.empty(N_THETA), bool(slope_coords), lb, ub, mode,
                                  float(sigma) ** 2 if mode == 1 else 1.0, 0.5 * len(s),
                                  max_peak_slip is not None,
                                  float(max_peak_slip) if max_peak_slip is not None else 1.0,
                                  _shape_array(shape_prior), likelihood_work(len(s), sh.shape[0])))


def _shape_array(shape_prior: tuple[np.ndarray, np.ndarray] | None) -> np.ndarray:
    """(mean[3], cov[3, 3]) of the tire-shape prior on (B C D, C, E) -> the kernels' packed array."""
    out = np.zeros(13)
    if shape_prior is None:
        return out
    m = np.asarray(shape_prior[0], dtype=float).reshape(3)
    cov = np.asarray(shape_prior[1], dtype=float).reshape(3, 3)
    if not (np.all(np.isfinite(m)) and np.all(np.isfinite(cov))):
        raise ValueError("shape_prior must be a finite (mean[3], cov[3, 3])")
    try:
        np.linalg.cholesky(cov)
        prec = np.linalg.inv(cov)
    except np.linalg.LinAlgError:
        raise ValueError("shape_prior covariance must be positive definite") from None
    out[0] = 1.0
    out[1:4] = m
    out[4:13] = prec.ravel()
    return out


def _variances(s: np.ndarray, slip_var: np.ndarray | None, mu_var: np.ndarray | None
               ) -> tuple[np.ndarray, np.ndarray]:
    out = []
    for name, v in (("slip_var", slip_var), ("mu_var", mu_var)):
        v = np.zeros(0) if v is None else np.ascontiguousarray(v, dtype=float)
        if v.size and (v.shape != np.shape(s) or not np.all(np.isfinite(v)) or np.any(v < 0)):
            raise ValueError(f"{name} must hold one finite, non-negative variance per sample")
        out.append(v if v.size and np.any(v > 0) else np.zeros(0))
    return out[0], out[1]


def _lateral(s: np.ndarray, lateral: np.ndarray | None) -> np.ndarray:
    """Per-sample lateral slip |sin alpha| / rho of the friction ellipse (pacejka.gauss_nll_lat); empty = none."""
    la = np.zeros(0) if lateral is None else np.ascontiguousarray(lateral, dtype=float)
    if la.size and (la.shape != np.shape(s) or not np.all(np.isfinite(la)) or np.any(la < 0)):
        raise ValueError("lateral must hold one finite, non-negative value per sample")
    return la if la.size and np.any(la > 0) else np.zeros(0)


def _groups(s: np.ndarray, groups: np.ndarray | None) -> np.ndarray:
    """[2, n] (log weight, sample) of each row when the rows are slices of the samples' true-slip posteriors
    (pacejka.gauss_nll_groups_into); [2, 0] = one row per sample."""
    if groups is None:
        return NO_GROUPS
    gr = np.ascontiguousarray(groups, dtype=float)
    if gr.shape != (2, len(s)) or not np.all(np.isfinite(gr)):
        raise ValueError("groups must be a finite [2, n] array (log weight, sample) per row")
    return gr


def _shared(s: np.ndarray, shared: np.ndarray | None) -> np.ndarray:
    """[K, n] slip errors shared by the samples (pacejka.gauss_nll_shared_into); [0, n] = none."""
    if shared is None:
        return np.zeros((0, len(s)))
    sh = np.ascontiguousarray(shared, dtype=float)
    if sh.ndim != 2 or sh.shape[1] != len(s) or not np.all(np.isfinite(sh)):
        raise ValueError("shared must be a finite [K, n] array, one column per sample")
    return sh


def _box(bounds: np.ndarray, sigma_mode: str, log_sigma_bounds: tuple[float, float]) -> tuple[np.ndarray, np.ndarray]:
    if sigma_mode not in SIGMA_MODES:
        raise ValueError(f"sigma_mode must be one of {SIGMA_MODES}, got {sigma_mode!r}")
    b = np.asarray(bounds, dtype=float)
    if sigma_mode == "sampled":
        lo, hi = map(float, log_sigma_bounds)
        if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
            raise ValueError(f"log_sigma_bounds must be finite (lower < upper), got {log_sigma_bounds}")
        b = np.vstack([b, [lo, hi]])
    return np.ascontiguousarray(b[:, 0]), np.ascontiguousarray(b[:, 1])


@dataclass(frozen=True)
class ChainResult:
    """Output of the adaptive Metropolis samplers (shapes use the (chain, draw, parameter) convention)."""

    draws: np.ndarray
    """Kept draws [n_chains, n_draws, d], parameter units."""
    logp: np.ndarray
    """Log target (up to a constant) of each kept draw [n_chains, n_draws]."""
    acceptance: np.ndarray
    """Acceptance rate after burn-in, per chain [n_chains] (fraction, target 0.234)."""
    acceptance_all: np.ndarray
    """Acceptance rate over all steps, per chain [n_chains]."""
    S: np.ndarray
    """Final lower-triangular proposal factors [n_chains, d, d] (proposal covariance S S^T)."""
    names: tuple[str, ...]
    """Parameter names, length d."""
    n_steps: int
    """Steps per chain (M in Algorithm 1)."""
    burn_in: int
    """Steps discarded at the start of each chain."""
    thin: int
    """Keep every ``thin``-th step after burn-in."""
    elapsed_s: float
    """Wall time of the sampling, s."""
    extra: dict = field(default_factory=dict)
    """Driver-specific settings (JSON-ready)."""

    def summary(self, hdi_prob: float = 0.94) -> dict:
        """Per-parameter ParamSummary (mean, std, HDI, MCSE, split R-hat, ESS) via inference.diagnostics."""
        from vehcal_ros.inference.diagnostics import summarize_draws

        return summarize_draws(self.draws, self.names, hdi_prob=hdi_prob)

    def to_dict(self, include_draws: bool = False) -> dict:
        """JSON-ready dictionary (draws only on request: they can be large)."""
        d = {
            "names": list(self.names), "shape": list(self.draws.shape),
            "acceptance": self.acceptance.tolist(), "acceptance_all": self.acceptance_all.tolist(),
            "S": self.S.tolist(), "n_steps": self.n_steps, "burn_in": self.burn_in, "thin": self.thin,
            "elapsed_s": self.elapsed_s, "extra": dict(self.extra),
        }
        if include_draws:
            d["draws"] = self.draws.tolist()
        return d


def _check_schedule(n_steps: int, burn_in: int, thin: int, gamma: float) -> int:
    if n_steps < 1 or burn_in < 0 or thin < 1 or burn_in >= n_steps:
        raise ValueError(f"need n_steps >= 1, 0 <= burn_in < n_steps, thin >= 1; got {n_steps}, {burn_in}, {thin}")
    if not 0.5 <= gamma <= 1.0:
        raise ValueError(f"gamma must be in [0.5, 1] (Algorithm 1, step 11), got {gamma}")
    n_keep = (n_steps - burn_in) // thin
    if n_keep < 1:
        raise ValueError("no draws kept: n_steps - burn_in < thin")
    return n_keep


def _initial_factors(S0: np.ndarray, n_chains: int, d: int) -> np.ndarray:
    S0 = np.asarray(S0, dtype=float)
    if S0.shape == (d, d):
        S0 = np.broadcast_to(S0, (n_chains, d, d))
    if S0.shape != (n_chains, d, d):
        raise ValueError(f"S0 must be ({d}, {d}) or ({n_chains}, {d}, {d}), got {S0.shape}")
    S = np.ascontiguousarray(np.tril(S0)).copy()
    if not np.all(np.diagonal(S, axis1=1, axis2=2) > 0):
        raise ValueError("S0 must be lower-triangular Cholesky factors with a positive diagonal")
    return S


def run_grip_chains(
    s: np.ndarray, mu: np.ndarray, x0: np.ndarray, S0: np.ndarray, bounds: np.ndarray, sigma: float,
    n_steps: int = 20_000, burn_in: int = 10_000, thin: int = 10, *, sigma_mode: str = "sampled",
    log_sigma_bounds: tuple[float, float] = (math.log(1e-5), 0.0),
    max_peak_slip: float | None = None, gamma: float = 2.0 / 3.0, target: float = TARGET_ACCEPTANCE,
    adapt_steps: int | None = None, pilot_steps: int | None = None,
    seed: int | np.random.SeedSequence | None = None, slip_var: np.ndarray | None = None,
    mu_var: np.ndarray | None = None, slope_coords: bool = False, max_steps: int | None = None,
    shape_prior: tuple[np.ndarray, np.ndarray] | None = None,
    until: Callable[[ChainResult], bool] | None = None,
    stop: Callable[[], bool] | None = None, stop_check_steps: int = 5_000,
    lateral: np.ndarray | None = None, shared: np.ndarray | None = None, groups: np.ndarray | None = None,
    proposal_draws: np.ndarray | None = None, p_independent: float = 0.0,
    proposal_weights: np.ndarray | None = None, extend: Callable[[ChainResult], int] | None = None,
    proposal_components: int = 1,
) -> ChainResult:
    """Algorithm 1, steps 4-12 on the magic-formula posterior (Eqs. 20-23), all chains in numba.

    ``x0[n_chains, 6]`` (or one ``[6]`` start for all chains, as step 4 starts every chain at theta_ML), ``S0``
    lower Cholesky factor(s) of the initial proposal covariance (step 5), ``bounds[6, 2]`` the uniform prior
    (Eq. 20). Likelihood: the exact Gaussian errors-in-variables density of
    :func:`~vehcal_ros.models.pacejka.gauss_nll` (Eq. 22 with Var_i = sigma^2 + mu_var_i + f'(s_i)^2 slip_var_i;
    ``slip_var``/``mu_var`` default to zeros; ``lateral`` (per sample |sin alpha| / rho, default none): samples
    taken at a slip angle, the friction ellipse of :func:`~vehcal_ros.models.pacejka.gauss_nll_lat`).
    ``groups`` [2, n] (log weight, sample): the rows are slices of the samples' true-slip posteriors,
    each sample's likelihood the mixture over its rows (:func:`~vehcal_ros.models.pacejka.gauss_nll_groups_into`).
    ``sigma_mode``:

    * ``"sampled"`` (default): log sigma is a seventh coordinate, uniform in ``log_sigma_bounds`` (Jeffreys
      p(sigma) ~ 1/sigma, truncated); ``sigma`` is its start; x0/S0 may have 6 or 7 columns (log sigma's
      initial step 1/sqrt(2 N), the width of its posterior); draws are returned with sigma (not log sigma) as
      parameter 7, named "sigma".
    * ``"fixed"``: sigma plugged in (the paper's practice, sigma from Eq. 17).
    * ``"marginal"``: sigma integrated out under p(sigma) ~ 1/sigma, -(N/2) log V (no per-sample variances).

    ``max_peak_slip`` (not None) truncates the prior to curves peaking at slip <= max_peak_slip.
    ``adapt_steps`` limits the adaptation to the first steps (default: all steps, as Algorithm 1).
    ``pilot_steps`` (<= burn_in): after that many steps every chain's factor is reset to the Cholesky factor of
    2.38^2/d times the empirical covariance of the second half of the pilot, pooled over chains ("computing
    first an empiric covariance matrix once enough samples have been generated", Section 3.2), then the
    rank-one adaptation continues.
    ``slope_coords``: the chains move in (B C D, C, D, E, s_h, s_v) - the same posterior, but the initial slope
    B C D, which even low-excitation data pin down, becomes one coordinate, so the random walk no longer has
    to follow the curved B-C-D ridge. ``x0``/``S0`` are given and draws returned in theta; the final factors
    ``S`` of the result are in the sampler's coordinates.
    ``shape_prior`` (mean[3], cov[3, 3]): a Gaussian prior on the tire shape (B C D, C, E) times the uniform one
    (e.g. learnt from the same tire on other surfaces; the peak D, s_v stays free).
    ``until`` (with ``max_steps`` > n_steps): after n_steps, ``until(result)`` is asked whether the draws are
    good enough (e.g. the convergence rule); if not, every chain continues by max(n_steps/2, (max_steps -
    n_steps)/10) steps at a time (same chains, same RNG streams) until it says yes or ``max_steps`` is
    reached; burn-in stays the same fraction burn_in/n_steps of the (longer) chains. ``extend(result)`` (steps,
    e.g. predicted from the rule's shortfall) sets each extension instead, clamped to [n_steps/4, that block]
    and rounded up to a multiple of ``thin``.
    ``stop()`` (e.g. a node shutting down) is asked every ``stop_check_steps`` steps: true ends the chains there
    (the result then holds the steps done so far; ``until`` is not asked). The pieces continue the same chains
    and RNG streams, so without a stop the draws are those of one uninterrupted run.
    ``proposal_draws`` ``[..., d]`` (draws of a nearby posterior in the returned convention, e.g. the previous
    window's fit): with probability ``p_independent`` a step is an independence Metropolis-Hastings step from a
    multivariate t fitted to them (:func:`independence_proposal`, in the sampler's coordinates) instead of a
    random-walk step; the proposal is refitted to the chains' own draws after the pilot, at the end of the
    burn-in and at every extension (without ``proposal_draws`` but with ``p_independent`` > 0: at the extensions
    only, from the kept draws). Both kernels leave the posterior invariant and the proposal is fixed within the
    kept part of each leg, so the chains are exact for any such draws; when they describe the new posterior
    well, a chain jumps across it in a few steps instead of diffusing along its curved ridges.
    ``proposal_weights`` (one per draw, e.g. the importance weights of :func:`tempered_weights` that carry the
    previous window's draws to this target): the fit is weighted. ``proposal_components`` > 1: the proposal is a
    mixture of up to that many t fitted by EM plus the single inflated t (:func:`independence_proposal`).
    """
    t0 = time.perf_counter()
    s = np.ascontiguousarray(s, dtype=float)
    mu = np.ascontiguousarray(mu, dtype=float)
    vs, vm = _variances(s, slip_var, mu_var)
    la = _lateral(s, lateral)
    sh = _shared(s, shared)
    gr = _groups(s, groups)
    if sigma_mode == "marginal" and (vs.size or vm.size or la.size or sh.shape[0] or gr.shape[1]):
        raise ValueError("sigma_mode='marginal' needs slip_var = mu_var = 0 and no lateral slip (use 'sampled')")
    lb, ub = _box(bounds, sigma_mode, log_sigma_bounds)
    sampled = sigma_mode == "sampled"
    d = N_THETA + int(sampled)
    x0 = np.atleast_2d(np.asarray(x0, dtype=float))
    n_chains = x0.shape[0]
    if sigma_mode != "marginal" and not (sigma > 0 and math.isfinite(sigma)):
        raise ValueError(f"sigma must be positive and finite, got {sigma}")
    if x0.shape[1] == N_THETA and sampled:
        log_s0 = min(max(math.log(sigma), lb[N_THETA] + 1e-9), ub[N_THETA] - 1e-9)
        x0 = np.hstack([x0, np.full((n_chains, 1), log_s0)])
    if x0.shape[1] != d:
        raise ValueError(f"x0 must have {d} columns, got {x0.shape}")
    n_keep0 = _check_schedule(n_steps, burn_in, thin, gamma)
    S0 = np.asarray(S0, dtype=float)
    if sampled and S0.shape[-1] == N_THETA:
        S0 = np.broadcast_to(S0, (n_chains, N_THETA, N_THETA))
        S0 = np.concatenate([np.concatenate([S0, np.zeros((n_chains, N_THETA, 1))], axis=2),
                             np.concatenate([np.zeros((n_chains, 1, N_THETA)),
                                             np.full((n_chains, 1, 1), 1.0 / math.sqrt(2.0 * max(s.size, 1)))],
                                            axis=2)], axis=1)
    S = _initial_factors(S0, n_chains, d)
    X = np.ascontiguousarray(x0).copy()
    if slope_coords:
        # a start on a B or s_v bound must stay inside it after the round trip theta -> x -> theta
        eps = 1e-9 * (ub[:N_THETA] - lb[:N_THETA])
        X[:, :N_THETA] = np.clip(X[:, :N_THETA], lb[:N_THETA] + eps, ub[:N_THETA] - eps)
        # the initial factor keeps its shape with the B row scaled to B C D units (the full linearised
        # transform would turn a wide C, D proposal - e.g. the Eq. (27) fallback - into a huge step in B C D)
        S[:, 0, :] *= (X[:, 1] * X[:, 2])[:, None]
        X[:, :N_THETA] = to_slope_coords(X[:, :N_THETA])
    reparam = bool(slope_coords)
    states = _seed_states(seed, n_chains)
    total_max = int(max(n_steps, max_steps or n_steps))
    draws_all = np.full((n_chains, total_max // thin, d), np.nan)
    logp_all = np.full((n_chains, total_max // thin), np.nan)
    stats = np.zeros((n_chains, 4), dtype=np.int64)
    ind = independence_proposal(_sampler_coords(proposal_draws, d, reparam, sampled), d, p_independent,
                                weights=proposal_weights, components=proposal_components)
    given = ind[0] > 0.0   # without draws to start from (a cold start) the first proposal comes at an extension
    truncate = max_peak_slip is not None
    common = (SIGMA_MODES.index(sigma_mode), float(sigma) ** 2 if sigma_mode == "fixed" else 1.0,
              truncate, float(max_peak_slip) if truncate else 1.0, _shape_array(shape_prior))
    adapt = int(total_max if adapt_steps is None else adapt_steps)
    i_next = 1
    pilot = int(pilot_steps or 0)
    if pilot >= 4:
        if pilot > burn_in:
            raise ValueError(f"pilot_steps ({pilot}) must not exceed burn_in ({burn_in})")
        half = pilot // 2
        pdraws = np.empty((n_chains, pilot - half, d))
        plogp = np.empty((n_chains, pilot - half))
        _grip_chains(s, mu, vs, vm, la, sh, gr, reparam, X, S, lb, ub, *common, 1, pilot, half, 1, float(target),
                     float(gamma), adapt, states, pdraws, plogp, stats, ind)
        emp = np.cov(pdraws.reshape(-1, d).T) * (2.38**2 / d)
        try:
            L = np.linalg.cholesky(emp + 1e-12 * np.diag(np.diag(emp) + 1e-300))
            if np.all(np.isfinite(L)) and np.all(np.diag(L) > 0):
                S[:] = L
        except np.linalg.LinAlgError:
            pass  # keep the adapted factors
        if given:
            ind = _refit(ind, pdraws, d, p_independent, proposal_components)
        i_next = pilot + 1
    if given and burn_in - i_next >= 8 * thin:
        # the rest of the burn-in, then the independence proposal refitted to its second half (the chains have
        # moved from the previous posterior's draws toward this one); the kept draws use a fixed proposal
        _grip_chains(s, mu, vs, vm, la, sh, gr, reparam, X, S, lb, ub, *common, i_next, burn_in, 0, int(thin),
                     float(target), float(gamma), adapt, states, draws_all, logp_all, stats, ind)
        ind = _refit(ind, draws_all[:, (i_next + burn_in) // 2 // thin:burn_in // thin], d, p_independent,
                     proposal_components)
        i_next = burn_in + 1
    burn_frac = burn_in / n_steps
    extra = {"sigma_mode": sigma_mode, "sigma": float(sigma), "errors_in_variables": bool(vs.size or vm.size),
             "slope_coords": reparam, "max_peak_slip": max_peak_slip, "pilot_steps": pilot, "gamma": float(gamma),
             "target": float(target), "n_keep_first": n_keep0, "p_independent": float(ind[0])}
    n_done = int(n_steps)
    block = max(thin, n_steps // 2, (total_max - n_steps) // 10)  # at most ~10 extensions (checks cost ~0.1 s)
    piece = max(int(thin), int(stop_check_steps) // int(thin) * int(thin))
    stopped = False
    while True:
        i = i_next
        while i <= n_done:  # the block in pieces of `piece` steps, asking stop() between them
            j = n_done if stop is None else min(n_done, i + piece - 1)
            _grip_chains(s, mu, vs, vm, la, sh, gr, reparam, X, S, lb, ub, *common, i, j, 0, int(thin), float(target),
                         float(gamma), adapt, states, draws_all, logp_all, stats, ind)
            i = j + 1
            if stop is not None and i <= n_done and stop():
                n_done, stopped = j, True
                break
        i_next = n_done + 1
        k1 = n_done // thin
        k0 = int(math.ceil(burn_frac * n_done / thin))
        result = _chain_result(draws_all, logp_all, k0, k1, n_done, stats, S, reparam, sampled, thin, t0, extra)
        if stopped or until is None or n_done >= total_max or until(result):
            return result
        ind = _refit(ind, draws_all[:, k0:k1], d, p_independent, proposal_components)
        extra["p_independent"] = float(ind[0])
        step = block if extend is None else min(block, max(int(n_steps) // 4, int(extend(result))))
        n_done = min(total_max, n_done + -(-step // int(thin)) * int(thin))


def _chain_result(draws_all: np.ndarray, logp_all: np.ndarray, k0: int, k1: int, n_done: int, stats: np.ndarray,
                  S: np.ndarray, reparam: bool, sampled: bool, thin: int, t0: float, extra: dict) -> ChainResult:
    """The kept draws k0..k1 (thinned indices) of chains run for ``n_done`` steps, in the returned convention."""
    draws = draws_all[:, k0:k1].copy()
    if reparam:
        draws = from_slope_coords(draws)
    if sampled:
        draws[..., N_THETA] = np.exp(draws[..., N_THETA])
    return ChainResult(
        draws=draws, logp=logp_all[:, k0:k1].copy(), acceptance=stats[:, 0] / float(n_done),
        acceptance_all=stats[:, 0] / float(n_done), S=S.copy(),
        names=THETA_NAMES + (("sigma",) if sampled else ()), n_steps=n_done, burn_in=k0 * thin, thin=int(thin),
        elapsed_s=time.perf_counter() - t0,
        extra={**extra, "independence_acceptance": float(stats[:, 3].sum() / max(1, stats[:, 2].sum()))})


def _refit(ind: np.ndarray, x: np.ndarray, d: int, p: float, components: int = 1) -> np.ndarray:
    """The independence proposal refitted to the chains' own draws ``x`` (sampler coordinates), or ``ind``
    unchanged when they give none (p = 0, too few or degenerate draws)."""
    if p <= 0.0:
        return ind
    new = independence_proposal(x.reshape(-1, d), d, p, components=components)
    return new if new[0] > 0.0 else ind


def _sampler_coords(draws: np.ndarray | None, d: int, reparam: bool, sampled: bool) -> np.ndarray | None:
    """Draws in the returned convention (theta, sigma) -> the chains' coordinates (slope coordinates, log sigma);
    None when absent or of another dimension."""
    if draws is None:
        return None
    x = np.asarray(draws, dtype=float).reshape(-1, np.shape(draws)[-1])
    if x.shape[1] != d:
        return None
    x = x.copy()
    if reparam:
        x[:, :N_THETA] = to_slope_coords(x[:, :N_THETA])
    if sampled:
        with np.errstate(divide="ignore", invalid="ignore"):
            x[:, N_THETA] = np.log(x[:, N_THETA])
    return x


def run_ram(
    log_target_batch: Callable[[np.ndarray], np.ndarray], x0: np.ndarray, S0: np.ndarray, n_steps: int,
    burn_in: int = 0, thin: int = 1, *, gamma: float = 2.0 / 3.0, target: float = TARGET_ACCEPTANCE,
    adapt_steps: int | None = None, seed: int | np.random.Generator | None = None,
    names: Sequence[str] | None = None,
) -> ChainResult:
    """Generic robust adaptive Metropolis over ``x0[n_chains, d]`` chains (Algorithm 1, steps 6-12).

    ``log_target_batch(X[n_chains, d]) -> logp[n_chains]`` (use -inf outside the support) is called once per
    step for all chains; the proposal, accept/reject and the rank-one factor updates are vectorised.
    ``S0`` is one lower Cholesky factor ``[d, d]`` or one per chain ``[n_chains, d, d]``.
    """
    t0 = time.perf_counter()
    X = np.array(np.atleast_2d(x0), dtype=float)
    n_chains, d = X.shape
    n_keep = _check_schedule(n_steps, burn_in, thin, gamma)
    S = _initial_factors(S0, n_chains, d)
    rng = np.random.default_rng(seed)
    names = tuple(names) if names is not None else tuple(f"x{j}" for j in range(d))
    if len(names) != d:
        raise ValueError(f"names must have {d} entries")
    adapt_steps = n_steps if adapt_steps is None else int(adapt_steps)
    lp = np.asarray(log_target_batch(X.copy()), dtype=float).reshape(n_chains)
    draws = np.empty((n_chains, n_keep, d))
    logp = np.empty((n_chains, n_keep))
    n_acc = np.zeros(n_chains, dtype=np.int64)
    n_acc_post = np.zeros(n_chains, dtype=np.int64)
    kept = 0
    for i in range(1, n_steps + 1):
        R = rng.standard_normal((n_chains, d))
        P = X + np.einsum("cij,cj->ci", S, R)
        lpp = np.asarray(log_target_batch(P), dtype=float).reshape(n_chains)
        with np.errstate(invalid="ignore", over="ignore"):
            diff = np.where(np.isfinite(lpp), lpp - lp, -np.inf)
            diff = np.where(np.isneginf(lp) & np.isfinite(lpp), 0.0, diff)
            alpha = np.exp(np.minimum(diff, 0.0))
        acc = rng.random(n_chains) < alpha
        X[acc] = P[acc]
        lp[acc] = lpp[acc]
        n_acc += acc
        if i > burn_in:
            n_acc_post += acc
        if i <= adapt_steps:
            ram_adapt_batch(S, R, min(1.0, d * i ** (-gamma)) * (alpha - target))
        if i > burn_in and (i - burn_in) % thin == 0:
            draws[:, kept] = X
            logp[:, kept] = lp
            kept += 1
    return ChainResult(
        draws=draws, logp=logp, acceptance=n_acc_post / float(n_steps - burn_in),
        acceptance_all=n_acc / float(n_steps), S=S, names=names, n_steps=int(n_steps), burn_in=int(burn_in),
        thin=int(thin), elapsed_s=time.perf_counter() - t0, extra={"gamma": float(gamma), "target": float(target)},
    )
