"""The magic-formula posterior of the friction paper (Eqs. 20-23) and its adaptive Metropolis chains, in numba.

Mussot et al. 2022, doi:10.1016/j.conengprac.2021.105048, Algorithm 1, steps 4-12, on
:mod:`vehcal_ros.inference.adaptive_metropolis`'s pieces: every chain runs entirely in numba (``nogil=True``,
chains in ``prange``) on a :class:`GripProblem`, the window's data and prior packed once. The prior is uniform in
the bounds (Eq. 20), the likelihood Gaussian, ``-V(theta)/(2 sigma^2)`` with sigma from the ML fit (Eq. 22,
``sigma_mode="fixed"``, the paper), sampled as log sigma (``"sampled"``), or integrated out under the Jeffreys
prior p(sigma) ~ 1/sigma, which gives ``-(N/2) log V(theta)`` (``"marginal"``). Optionally the physical prior of
Section 4.2.2 as a truncation: proposals whose curve peaks at a slip above ``max_peak_slip`` have zero prior
density and are rejected inside the chain. Random numbers come from one xoshiro256** stream per chain, so results
do not depend on the number of threads.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
from numba import njit, prange

from vehcal_ros.inference.adaptive_metropolis import (
    TARGET_ACCEPTANCE,
    ChainResult,
    check_schedule,
    independence_proposal,
    initial_factors,
    mixture_draw,
    mixture_log_density,
    normals,
    ram_adapt,
    refit_proposal,
    seed_states,
    step_size,
    uniform,
)
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


class GripProblem(NamedTuple):
    """One window's posterior as the numba kernels take it: the data, the likelihood's per-sample terms and the
    prior, packed once by :func:`grip_problem`."""

    s: np.ndarray
    """[n] the samples' slips (measured, or the rows' slip slices with ``gr``)."""
    mu: np.ndarray
    """[n] the samples' frictions."""
    vs: np.ndarray
    """[n] slip variances (empty: none)."""
    vm: np.ndarray
    """[n] friction variances (empty: none)."""
    la: np.ndarray
    """[n] lateral slips |sin alpha| / rho of the friction ellipse (empty: pure slip)."""
    sh: np.ndarray
    """[K, n] slip errors shared by the samples (K = 0: none)."""
    gr: np.ndarray
    """[2, n] (log weight, sample) of each row when the rows are slices of the samples' true-slip posteriors
    ([2, 0]: one row per sample)."""
    reparam: bool
    """The chains move in the slope coordinates (B C D, C, D, E, s_h, f(0))."""
    lb: np.ndarray
    """[d] lower bounds of the uniform prior (theta, then log sigma when sampled)."""
    ub: np.ndarray
    """[d] upper bounds."""
    sigma_mode: int
    """Index in :data:`SIGMA_MODES`: 0 sampled, 1 fixed, 2 marginal."""
    sigma2_fixed: float
    """sigma^2 when fixed (1.0 otherwise)."""
    half_n: float
    """N / 2 (the marginal likelihood's exponent)."""
    truncate: bool
    """The physical prior: curves peaking at a slip above ``max_peak_slip`` have zero density."""
    max_peak_slip: float
    """Its limit (1.0 when not truncating)."""
    shape: np.ndarray
    """[13] the packed tire-shape prior (:func:`_shape_array`; shape[0] = 0: none)."""


class ChainSteps(NamedTuple):
    """Which steps a kernel call runs and how the chains adapt (Algorithm 1, steps 6-12)."""

    i_first: int
    """First step of the call (1-based)."""
    i_last: int
    """Last step of the call."""
    burn_in: int
    """Draws are kept after this step (0 within an extension)."""
    thin: int
    """Every ``thin``-th step after burn-in is kept."""
    target: float
    """Target acceptance rate of the random-walk steps."""
    gamma: float
    """Exponent of the adaptation's step size, in [0.5, 1]."""
    adapt_steps: int
    """The factor adapts up to this step."""


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
def _grip_log_target(p, x, th, work) -> float:
    """Log posterior up to a constant (nats): uniform prior in the bounds (Eq. 20) [x truncation to curves
    peaking at slip <= max_peak_slip, Section 4.2.2] + the exact Gaussian errors-in-variables log likelihood
    (:func:`~vehcal_ros.models.pacejka.gauss_nll_groups_into`: Eq. 22 with Var_i = sigma^2 + v_mu_i + f'(s_i)^2
    v_s_i; the lateral slips, the shared slip errors and the slip slices of the :class:`GripProblem` ``p``).

    ``x`` is theta, or with ``p.reparam`` the slope coordinates (B C D, C, D, E, s_h, s_v); then theta is written
    to ``th`` and the log Jacobian -log(C D) of the change of variables is added (same posterior in theta).
    sigma: ``p.sigma_mode`` 0 sampled (x[6] = log sigma, uniform in [lb[6], ub[6]], i.e. the Jeffreys prior
    p(sigma) ~ 1/sigma truncated), 1 fixed at sqrt(sigma2_fixed), 2 integrated out under p(sigma) ~ 1/sigma
    (-(N/2) log V; only without per-sample variances).
    ``p.shape`` (length 13; shape[0] = 1 to use it): an optional Gaussian tire-shape prior on y = (B C D, C, E),
    mean shape[1:4], precision shape[4:13] (row-major 3 x 3), multiplying the uniform prior.
    ``work``: the likelihood's work space
    (:func:`~vehcal_ros.models.pacejka.likelihood_work`)."""
    log_jac = 0.0
    if p.reparam:
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
        if v < p.lb[j] or v > p.ub[j]:
            return -math.inf
    if p.truncate and not peak_slip_at_most(th, p.max_peak_slip):
        return -math.inf
    if p.shape[0] > 0.0:
        y0 = th[0] * th[1] * th[2] - p.shape[1]
        y1 = th[1] - p.shape[2]
        y2 = th[3] - p.shape[3]
        log_jac -= 0.5 * (p.shape[4] * y0 * y0 + p.shape[8] * y1 * y1 + p.shape[12] * y2 * y2
                          + 2.0 * (p.shape[5] * y0 * y1 + p.shape[6] * y0 * y2 + p.shape[9] * y1 * y2))
    if p.sigma_mode == 2:
        return log_jac - p.half_n * math.log(sse(p.s, p.mu, th))
    sigma2 = math.exp(2.0 * x[N_THETA]) if p.sigma_mode == 0 else p.sigma2_fixed
    return log_jac - gauss_nll_groups_into(p.s, p.mu, th, sigma2, p.vs, p.vm, p.la, p.sh, p.gr, work)


@njit(cache=True, nogil=True)
def _grip_chain(p, theta, S, steps, st, draws, logp, stats, ind):
    """Steps ``steps.i_first..i_last`` of one chain on the :class:`GripProblem` ``p`` (Algorithm 1, steps 6-12,
    as :class:`ChainSteps` says); theta, S and the RNG state are updated
    in place; draw k = (i - burn_in)/thin - 1 goes to draws[k], logp[k]; stats += (accepted, accepted after
    burn-in, independence steps tried, independence steps accepted).

    ``ind`` (see :func:`independence_proposal`): with ind[0] = p > 0, each step is, with probability p, an
    independence Metropolis-Hastings step from the fixed multivariate t proposal packed in ``ind`` instead of
    the adaptive random-walk step (a mixture of two kernels that each leave the posterior invariant; the
    random-walk factor S adapts on its own steps only)."""
    d = theta.shape[0]
    i_first, i_last, burn_in, thin, target, gamma, adapt_steps = steps
    prop = np.empty(d)
    r = np.empty(d)
    work = np.empty(d)
    Snew = np.empty((d, d))
    th = np.empty(N_THETA)
    lw = likelihood_work(p.s.shape[0], p.sh.shape[0])
    lp = _grip_log_target(p, theta, th, lw)
    p_ind = ind[0]
    z = np.empty(max(int(ind[1]), 1))
    lq = mixture_log_density(ind, theta, work) if p_ind > 0.0 else 0.0
    for i in range(i_first, i_last + 1):
        independent = p_ind > 0.0 and uniform(st) < p_ind
        if independent:
            mixture_draw(ind, st, r, z, prop)
            lqp = mixture_log_density(ind, prop, work)
        else:
            normals(st, r)
            for j in range(d):  # step 7: theta* = theta + S r (S lower triangular)
                acc = theta[j]
                for k in range(j + 1):
                    acc += S[j, k] * r[k]
                prop[j] = acc
            lqp = 0.0
        lpp = _grip_log_target(p, prop, th, lw)
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
        if uniform(st) < alpha:  # steps 9-10
            for j in range(d):
                theta[j] = prop[j]
            lp = lpp
            if p_ind > 0.0:
                lq = lqp if independent else mixture_log_density(ind, theta, work)
            stats[0] += 1
            if independent:
                stats[3] += 1
            if i > burn_in:
                stats[1] += 1
        if i <= adapt_steps and valid_start and not independent:  # step 11
            ram_adapt(S, r, step_size(i, d, gamma) * (alpha - target), work, Snew)
        if i > burn_in and (i - burn_in) % thin == 0:  # step 12
            k = (i - burn_in) // thin - 1
            for j in range(d):
                draws[k, j] = theta[j]
            logp[k] = lp


@njit(cache=True, nogil=True, parallel=True)
def _grip_chains(p, X, S, steps, states, draws, logp, stats, ind):
    """:func:`_grip_chain` for every chain ``c`` of ``X``, ``S``, ``states``, ``draws``, ``logp``, ``stats``."""
    for c in prange(X.shape[0]):
        _grip_chain(p, X[c], S[c], steps, states[c], draws[c], logp[c], stats[c], ind)


@njit(cache=True, nogil=True)
def _grip_log_target_rows(p, X, out):
    """:func:`_grip_log_target` at every row of ``X`` [n, d] (sampler coordinates) into ``out`` [n]."""
    th = np.empty(N_THETA)
    lw = likelihood_work(p.s.shape[0], p.sh.shape[0])
    for i in range(X.shape[0]):
        out[i] = _grip_log_target(p, X[i], th, lw)


def carried_log_ratio(draws: np.ndarray, logp: np.ndarray, problem: GripProblem) -> np.ndarray:
    """log p_new(x_i) - logp_i for draws ``x_i`` of an earlier fit (``draws[..., d]`` in the returned convention
    (theta, sigma), ``logp[...]`` their log target under that fit, as :class:`ChainResult` holds them), p_new the
    target of ``problem`` (:func:`grip_problem`: the data of the new window): the log importance weights that turn
    them into draws of this target (sequential Monte Carlo's reweighting step, Del Moral, Doucet & Jasra 2006).
    Both log targets are in the sampler's coordinates (their Jacobians cancel); -inf where the new target is zero
    (outside the bounds or the physical prior)."""
    sampled = problem.sigma_mode == SIGMA_MODES.index("sampled")
    d = N_THETA + int(sampled)
    x = _sampler_coords(draws, d, bool(problem.reparam), sampled)
    if x is None:
        raise ValueError(f"draws must have {d} columns")
    out = np.empty(x.shape[0])
    with np.errstate(invalid="ignore"):
        _grip_log_target_rows(problem, np.ascontiguousarray(x), out)
        lr = out - np.asarray(logp, dtype=float).reshape(-1)
    lr[~np.isfinite(lr)] = -math.inf
    return lr.reshape(np.shape(logp))


def grip_log_target(problem: GripProblem, x: np.ndarray) -> float:
    """The chains' log target of ``problem`` (:func:`grip_problem`) at one point ``x`` (theta[6], plus log sigma
    with ``sigma_mode="sampled"``; slope coordinates with ``slope_coords``), up to the constant of the uniform
    prior (for tests and tools)."""
    x = np.ascontiguousarray(x, dtype=float)
    return float(_grip_log_target(problem, x, np.empty(N_THETA),
                                  likelihood_work(len(problem.s), problem.sh.shape[0])))


def grip_problem(s: np.ndarray, mu: np.ndarray, bounds: np.ndarray, *, sigma_mode: str = "sampled",
                 sigma: float = float("nan"), log_sigma_bounds: tuple[float, float] = (math.log(1e-5), 0.0),
                 max_peak_slip: float | None = None, slip_var: np.ndarray | None = None,
                 mu_var: np.ndarray | None = None, slope_coords: bool = False,
                 shape_prior: tuple[np.ndarray, np.ndarray] | None = None, lateral: np.ndarray | None = None,
                 shared: np.ndarray | None = None, groups: np.ndarray | None = None) -> GripProblem:
    """The window's posterior packed for the kernels (arguments as :func:`run_grip_chains`'); ValueError naming
    the argument when one is malformed."""
    s = np.ascontiguousarray(s, dtype=float)
    vs, vm = _variances(s, slip_var, mu_var)
    lb, ub = _box(bounds, sigma_mode, log_sigma_bounds)
    mode = SIGMA_MODES.index(sigma_mode)
    truncate = max_peak_slip is not None
    return GripProblem(s=s, mu=np.ascontiguousarray(mu, dtype=float), vs=vs, vm=vm, la=_lateral(s, lateral),
                       sh=_shared(s, shared), gr=_groups(s, groups), reparam=bool(slope_coords), lb=lb, ub=ub,
                       sigma_mode=mode, sigma2_fixed=float(sigma) ** 2 if mode == 1 else 1.0,
                       half_n=0.5 * s.shape[0], truncate=truncate,
                       max_peak_slip=float(max_peak_slip) if truncate else 1.0, shape=_shape_array(shape_prior))


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
    ``proposal_weights`` (one per draw, e.g. the importance weights of ``tempered_weights`` that carry the
    previous window's draws to this target): the fit is weighted. ``proposal_components`` > 1: the proposal is a
    mixture of up to that many t fitted by EM plus the single inflated t (:func:`independence_proposal`).
    """
    t0 = time.perf_counter()
    p = grip_problem(s, mu, bounds, sigma_mode=sigma_mode, sigma=sigma, log_sigma_bounds=log_sigma_bounds,
                     max_peak_slip=max_peak_slip, slip_var=slip_var, mu_var=mu_var, slope_coords=slope_coords,
                     shape_prior=shape_prior, lateral=lateral, shared=shared, groups=groups)
    if sigma_mode == "marginal" and (p.vs.size or p.vm.size or p.la.size or p.sh.shape[0] or p.gr.shape[1]):
        raise ValueError("sigma_mode='marginal' needs slip_var = mu_var = 0 and no lateral slip (use 'sampled')")
    lb, ub = p.lb, p.ub
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
    n_keep0 = check_schedule(n_steps, burn_in, thin, gamma)
    S0 = np.asarray(S0, dtype=float)
    if sampled and S0.shape[-1] == N_THETA:
        S0 = np.broadcast_to(S0, (n_chains, N_THETA, N_THETA))
        S0 = np.concatenate([np.concatenate([S0, np.zeros((n_chains, N_THETA, 1))], axis=2),
                             np.concatenate([np.zeros((n_chains, 1, N_THETA)),
                                             np.full((n_chains, 1, 1), 1.0 / math.sqrt(2.0 * max(p.s.size, 1)))],
                                            axis=2)], axis=1)
    S = initial_factors(S0, n_chains, d)
    X = np.ascontiguousarray(x0).copy()
    if slope_coords:
        # a start on a B or s_v bound must stay inside it after the round trip theta -> x -> theta
        eps = 1e-9 * (ub[:N_THETA] - lb[:N_THETA])
        X[:, :N_THETA] = np.clip(X[:, :N_THETA], lb[:N_THETA] + eps, ub[:N_THETA] - eps)
        # the initial factor keeps its shape with the B row scaled to B C D units (the full linearised
        # transform would turn a wide C, D proposal - e.g. the Eq. (27) fallback - into a huge step in B C D)
        S[:, 0, :] *= (X[:, 1] * X[:, 2])[:, None]
        X[:, :N_THETA] = to_slope_coords(X[:, :N_THETA])
    reparam = p.reparam
    states = seed_states(seed, n_chains)
    total_max = int(max(n_steps, max_steps or n_steps))
    draws_all = np.full((n_chains, total_max // thin, d), np.nan)
    logp_all = np.full((n_chains, total_max // thin), np.nan)
    stats = np.zeros((n_chains, 4), dtype=np.int64)
    ind = independence_proposal(_sampler_coords(proposal_draws, d, reparam, sampled), d, p_independent,
                                weights=proposal_weights, components=proposal_components)
    given = ind[0] > 0.0   # without draws to start from (a cold start) the first proposal comes at an extension
    adapt = int(total_max if adapt_steps is None else adapt_steps)

    def steps(i_first: int, i_last: int, burn: int, keep_every: int) -> ChainSteps:
        return ChainSteps(int(i_first), int(i_last), int(burn), int(keep_every), float(target), float(gamma), adapt)

    i_next = 1
    pilot = int(pilot_steps or 0)
    if pilot >= 4:
        if pilot > burn_in:
            raise ValueError(f"pilot_steps ({pilot}) must not exceed burn_in ({burn_in})")
        half = pilot // 2
        pdraws = np.empty((n_chains, pilot - half, d))
        plogp = np.empty((n_chains, pilot - half))
        _grip_chains(p, X, S, steps(1, pilot, half, 1), states, pdraws, plogp, stats, ind)
        emp = np.cov(pdraws.reshape(-1, d).T) * (2.38**2 / d)
        try:
            L = np.linalg.cholesky(emp + 1e-12 * np.diag(np.diag(emp) + 1e-300))
            if np.all(np.isfinite(L)) and np.all(np.diag(L) > 0):
                S[:] = L
        except np.linalg.LinAlgError:
            pass  # keep the adapted factors
        if given:
            ind = refit_proposal(ind, pdraws, d, p_independent, proposal_components)
        i_next = pilot + 1
    if given and burn_in - i_next >= 8 * thin:
        # the rest of the burn-in, then the independence proposal refitted to its second half (the chains have
        # moved from the previous posterior's draws toward this one); the kept draws use a fixed proposal
        _grip_chains(p, X, S, steps(i_next, burn_in, 0, thin), states, draws_all, logp_all, stats, ind)
        ind = refit_proposal(ind, draws_all[:, (i_next + burn_in) // 2 // thin:burn_in // thin], d, p_independent,
                             proposal_components)
        i_next = burn_in + 1
    burn_frac = burn_in / n_steps
    extra = {"sigma_mode": sigma_mode, "sigma": float(sigma), "errors_in_variables": bool(p.vs.size or p.vm.size),
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
            _grip_chains(p, X, S, steps(i, j, 0, thin), states, draws_all, logp_all, stats, ind)
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
        ind = refit_proposal(ind, draws_all[:, k0:k1], d, p_independent, proposal_components)
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
