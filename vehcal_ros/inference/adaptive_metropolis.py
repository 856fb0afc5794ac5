"""Robust adaptive Metropolis (Vihola 2012) as used by the friction paper, Algorithm 1, steps 4-12.

Each chain proposes ``theta* = theta + S r`` with ``r ~ N(0, I)`` (step 7), accepts with probability
``alpha = min(1, p(theta*)/p(theta))`` (steps 8-10, Eq. 24), and updates the lower-triangular factor S so that
``S S^T <- S (I + eta_i (alpha - 0.234) r r^T / |r|^2) S^T`` (step 11) by a rank-one Cholesky update
(``eta > 0``) or downdate (``eta < 0``), with ``eta_i = min(1, d i^-gamma)``, gamma in [0.5, 1] (Vihola's
choice of the step-size sequence; d = dimension). Draws after ``burn_in`` steps are kept every ``thin`` steps
(step 12). Draws are ``(chain, draw, parameter)`` as everywhere in vehcal_ros.

The pieces a chain kernel is built from, all numba: one xoshiro256** random stream per chain (:func:`uniform`,
:func:`normals`, seeded by ``numpy.random.SeedSequence(seed).spawn`` in :func:`seed_states`, so results do not
depend on the number of threads), the step-11 factor update (:func:`ram_adapt`, :func:`step_size`) and
independence steps from a fixed mixture of multivariate t fitted to draws of a nearby posterior
(:func:`independence_proposal`, :func:`mixture_draw`, :func:`mixture_log_density`), reweighted to a new target by
:func:`tempered_weights`. The magic-formula posterior's chains are built from them in
:mod:`vehcal_ros.estimation.grip.posterior`; :func:`run_ram` is a generic vectorised driver for any posterior
(the user's ``log_target_batch(X[n_chains, d]) -> logp[n_chains]`` is called once per step for all chains).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from numba import njit

from vehcal_ros.inference.smc import MIXTURE_PARTICLES_PER_DIM, mixture_fit, next_temperature
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
def uniform(st: np.ndarray) -> float:
    """Uniform on [0, 1) with 53 random bits."""
    return float(_next_u64(st) >> np.uint64(11)) * (1.0 / 9007199254740992.0)


@njit(cache=True, nogil=True)
def normals(st: np.ndarray, out: np.ndarray) -> None:
    """Fill ``out`` with standard normals (Box-Muller pairs)."""
    n = out.shape[0]
    j = 0
    while j < n:
        u1 = 1.0 - uniform(st)  # (0, 1]
        u2 = uniform(st)
        rad = math.sqrt(-2.0 * math.log(u1))
        sn, cs = sincos(2.0 * math.pi * u2)
        out[j] = rad * cs
        if j + 1 < n:
            out[j + 1] = rad * sn
        j += 2


def seed_states(seed: int | np.random.SeedSequence | None, n_chains: int) -> np.ndarray:
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
def step_size(i: int, d: int, gamma: float) -> float:
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
# independence steps: a fixed mixture of multivariate t fitted to draws of a nearby posterior
# ----------------------------------------------------------------------------------------------------------


IND_HEAD = 3
"""Packed independence proposal (:func:`independence_proposal`): [p, df, k] then per component j
[pi_j, c_j, mean_j[d], L_j[d, d] row-major], c_j = log pi_j - log det L_j."""


@njit(cache=True, nogil=True)
def mixture_draw(ind: np.ndarray, st: np.ndarray, r: np.ndarray, z: np.ndarray, out: np.ndarray) -> None:
    """``out`` ~ the mixture of multivariate t packed in ``ind``: a component j by its weight, then
    x* = m_j + L_j r / sqrt(chi2_df / df)."""
    d = out.shape[0]
    df = ind[1]
    k = int(ind[2])
    size = 2 + d + d * d
    u = uniform(st)
    j0 = k - 1
    cum = 0.0
    for j in range(k):
        cum += ind[IND_HEAD + j * size]
        if u < cum:
            j0 = j
            break
    base = IND_HEAD + j0 * size
    normals(st, r)
    normals(st, z)
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
def mixture_log_density(ind: np.ndarray, x: np.ndarray, work: np.ndarray) -> float:
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
    EM to the draws (:func:`~vehcal_ros.inference.smc.mixture_fit`, at most one per ``30 d`` draws, their
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
        pis, means, chols, _ = mixture_fit(x, wn, k, defensive=0.0)
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


def refit_proposal(ind: np.ndarray, x: np.ndarray, d: int, p: float, components: int = 1) -> np.ndarray:
    """The independence proposal refitted to the chains' own draws ``x`` (sampler coordinates), or ``ind``
    unchanged when they give none (p = 0, too few or degenerate draws)."""
    if p <= 0.0:
        return ind
    new = independence_proposal(x.reshape(-1, d), d, p, components=components)
    return new if new[0] > 0.0 else ind


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
    lam = next_temperature(z, 0.0, min_ess_frac)   # the calibrator's SMC temperature step, from 0
    v = np.exp(lam * z)
    w[fin] = v / v.sum()
    return w, lam


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


def check_schedule(n_steps: int, burn_in: int, thin: int, gamma: float) -> int:
    if n_steps < 1 or burn_in < 0 or thin < 1 or burn_in >= n_steps:
        raise ValueError(f"need n_steps >= 1, 0 <= burn_in < n_steps, thin >= 1; got {n_steps}, {burn_in}, {thin}")
    if not 0.5 <= gamma <= 1.0:
        raise ValueError(f"gamma must be in [0.5, 1] (Algorithm 1, step 11), got {gamma}")
    n_keep = (n_steps - burn_in) // thin
    if n_keep < 1:
        raise ValueError("no draws kept: n_steps - burn_in < thin")
    return n_keep


def initial_factors(S0: np.ndarray, n_chains: int, d: int) -> np.ndarray:
    S0 = np.asarray(S0, dtype=float)
    if S0.shape == (d, d):
        S0 = np.broadcast_to(S0, (n_chains, d, d))
    if S0.shape != (n_chains, d, d):
        raise ValueError(f"S0 must be ({d}, {d}) or ({n_chains}, {d}, {d}), got {S0.shape}")
    S = np.ascontiguousarray(np.tril(S0)).copy()
    if not np.all(np.diagonal(S, axis1=1, axis2=2) > 0):
        raise ValueError("S0 must be lower-triangular Cholesky factors with a positive diagonal")
    return S


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
    n_keep = check_schedule(n_steps, burn_in, thin, gamma)
    S = initial_factors(S0, n_chains, d)
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
