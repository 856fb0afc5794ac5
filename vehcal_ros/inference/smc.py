"""Tempered Sequential Monte Carlo from the prior to the posterior (8-DOF paper Section 2.1, Eq. 3 and after).

The sampler draws the intermediate distributions ``p_n(theta | y) ~ L(theta)^phi_n p(theta)`` with ``phi_0 = 0``
and ``phi_N = 1`` (paper Section 2.1, after Del Moral et al. 2006 and Neal's annealed importance sampling; the
paper used PyMC's ``sample_smc``). Per stage:

1. next temperature by bisection so that the effective sample size of the incremental weights
   ``exp((phi' - phi) log L)`` is ``target_ess`` (default one half) of the particles;
2. log marginal likelihood increment ``log mean(w)`` accumulated (the evidence of Eq. 1's denominator);
3. systematic resampling;
4. Metropolis-Hastings mutations targeting ``p_n``: independent MH with a Gaussian fitted to the particles
   (``kernel="imh"``, PyMC's default and the paper's choice) or a Gaussian random walk with the particle
   covariance scaled by ``2.38 / sqrt(d)`` and tuned toward acceptance 0.234 (``kernel="rw"``). Mutation steps
   are repeated until the mean (over parameters) correlation between the particles' positions before and after
   the mutation falls below ``correlation_threshold`` (PyMC's rule), at most ``max_mutation_steps``. With
   ``refit_proposal`` the IMH Gaussian is refitted to the particles before every step, not only once after
   resampling: the resampled particles carry duplicates and lag behind the new temperature, and with few steps
   per stage a proposal fitted to them once can leave a run biased (runs disagreeing: R-hat > 1.01).
   Stages are counted from the first reweighting; a run with N particles at phi = 1 gives N draws.

Sampling runs in the unconstrained space by default (uniform -> logit, half-normal -> log, with Jacobians) or in
the bounded space (``space="bounded"``: proposals outside the support are rejected). Several independent runs
are reported as chains, ``draws[chain, draw, param]``, so split R-hat and ESS (diagnostics.py) apply.

The likelihood is a batch callable: ``log_likelihood(theta[n, d]) -> (n,)`` for all particles at once (the
8-DOF calibration evaluates it with a parallel numba kernel).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from vehcal_ros.errors import EstimationError

LogLikelihoodBatch = Callable[[np.ndarray], np.ndarray]


@dataclass(frozen=True)
class Uniform:
    """Uniform prior on [low, high]."""

    low: float
    high: float

    def __post_init__(self) -> None:
        if not (np.isfinite(self.low) and np.isfinite(self.high) and self.high > self.low):
            raise ValueError(f"uniform prior needs finite low < high, got [{self.low}, {self.high}]")


@dataclass(frozen=True)
class HalfNormal:
    """Half-normal prior on (0, inf) with scale ``scale`` (the standard deviation of the parent normal)."""

    scale: float

    def __post_init__(self) -> None:
        if not (np.isfinite(self.scale) and self.scale > 0):
            raise ValueError(f"half-normal prior needs scale > 0, got {self.scale}")


Distribution = Uniform | HalfNormal


@dataclass(frozen=True)
class Prior:
    """Independent product prior over named parameters, with the transforms SMC uses."""

    names: tuple[str, ...]
    dists: tuple[Distribution, ...]

    def __post_init__(self) -> None:
        if len(self.names) != len(self.dists):
            raise ValueError("names and dists must have the same length")

    @classmethod
    def from_pairs(cls, pairs: Sequence[tuple[str, Distribution]]) -> Prior:
        return cls(tuple(n for n, _ in pairs), tuple(d for _, d in pairs))

    @property
    def dim(self) -> int:
        return len(self.names)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` prior draws ``(n, d)`` in the natural space."""
        out = np.empty((n, self.dim))
        for j, d in enumerate(self.dists):
            if isinstance(d, Uniform):
                out[:, j] = rng.uniform(d.low, d.high, n)
            else:
                out[:, j] = np.abs(rng.normal(0.0, d.scale, n))
        return out

    def to_unconstrained(self, theta: np.ndarray) -> np.ndarray:
        z = np.empty_like(theta, dtype=float)
        for j, d in enumerate(self.dists):
            if isinstance(d, Uniform):
                p = np.clip((theta[:, j] - d.low) / (d.high - d.low), 1e-300, 1.0 - 1e-16)
                z[:, j] = np.log(p) - np.log1p(-p)
            else:
                z[:, j] = np.log(np.maximum(theta[:, j], 1e-300))
        return z

    def from_unconstrained(self, z: np.ndarray) -> np.ndarray:
        theta = np.empty_like(z, dtype=float)
        for j, d in enumerate(self.dists):
            if isinstance(d, Uniform):
                theta[:, j] = d.low + (d.high - d.low) * _expit(z[:, j])
            else:
                theta[:, j] = np.exp(z[:, j])
        return theta

    def log_prob_unconstrained(self, z: np.ndarray) -> np.ndarray:
        """Log density of the transformed prior (Jacobian included), ``(n,)``."""
        lp = np.zeros(z.shape[0])
        for j, d in enumerate(self.dists):
            zj = z[:, j]
            if isinstance(d, Uniform):
                lp += -np.logaddexp(0.0, -zj) - np.logaddexp(0.0, zj)   # log sigmoid(z) + log sigmoid(-z)
            else:
                th = np.exp(zj)
                lp += (0.5 * math.log(2.0 / math.pi) - math.log(d.scale)) - 0.5 * (th / d.scale) ** 2 + zj
        return lp

    def log_prob(self, theta: np.ndarray) -> np.ndarray:
        """Log density in the natural space, ``-inf`` outside the support, ``(n,)``."""
        lp = np.zeros(theta.shape[0])
        for j, d in enumerate(self.dists):
            x = theta[:, j]
            if isinstance(d, Uniform):
                inside = (x >= d.low) & (x <= d.high)
                lp += np.where(inside, -math.log(d.high - d.low), -np.inf)
            else:
                val = (0.5 * math.log(2.0 / math.pi) - math.log(d.scale)) - 0.5 * (x / d.scale) ** 2
                lp += np.where(x > 0, val, -np.inf)
        return lp


def _expit(z: np.ndarray) -> np.ndarray:
    return np.exp(-np.logaddexp(0.0, -z))


@dataclass(frozen=True)
class SMCResult:
    """Outcome of :func:`run_smc`: several independent SMC runs reported as chains."""

    names: tuple[str, ...]
    draws: np.ndarray = field(repr=False)
    """``(chain, draw, param)`` final particles (natural space, shuffled), parameter units."""
    log_likelihood: np.ndarray = field(repr=False)
    """``(chain, draw)`` log likelihood of each draw (nats)."""
    log_evidence_chains: tuple[float, ...]
    """log marginal likelihood estimate of each run (nats)."""
    temperatures: tuple[tuple[float, ...], ...]
    """per run, the tempering exponents phi_0 = 0 < ... < phi_N = 1."""
    acceptance: tuple[tuple[float, ...], ...]
    """per run and stage, the mean MH acceptance rate of the mutations (-)."""
    mutation_steps: tuple[tuple[int, ...], ...]
    """per run and stage, the number of MH steps taken."""
    n_evaluations: int
    """total likelihood evaluations (particle-simulations)."""
    elapsed_s: float
    """wall time (s)."""
    kernel: str

    @property
    def log_evidence(self) -> float:
        """log of the mean of the runs' evidence estimates (nats)."""
        le = np.asarray(self.log_evidence_chains)
        return float(np.logaddexp.reduce(le) - math.log(le.size))

    @property
    def n_stages(self) -> int:
        """Tempering stages of the longest run (the number of temperatures after phi_0)."""
        return max(len(t) - 1 for t in self.temperatures)

    @property
    def mean_acceptance(self) -> float:
        vals = [a for run in self.acceptance for a in run]
        return float(np.mean(vals)) if vals else float("nan")

    def to_dict(self, include_draws: bool = False) -> dict:
        out = {
            "names": list(self.names),
            "log_evidence": self.log_evidence,
            "log_evidence_chains": list(self.log_evidence_chains),
            "n_stages": self.n_stages,
            "stages_per_chain": [len(t) - 1 for t in self.temperatures],
            "temperatures": [list(t) for t in self.temperatures],
            "acceptance": [list(a) for a in self.acceptance],
            "mutation_steps": [list(s) for s in self.mutation_steps],
            "mean_acceptance": self.mean_acceptance,
            "n_evaluations": self.n_evaluations,
            "elapsed_s": self.elapsed_s,
            "kernel": self.kernel,
            "shape": list(self.draws.shape),
        }
        if include_draws:
            out["draws"] = self.draws.tolist()
        return out


def _ess_fraction(logw: np.ndarray) -> float:
    finite = np.isfinite(logw)
    if not finite.any():
        return 0.0
    w = np.exp(logw - logw[finite].max())
    w[~finite] = 0.0
    return float(w.sum() ** 2 / (w * w).sum() / w.size)


def _next_temperature(ll: np.ndarray, beta: float, target: float) -> float:
    """Bisection for phi' in (beta, 1] with ESS(exp((phi' - beta) ll)) = target * N."""
    if _ess_fraction((1.0 - beta) * ll) >= target:
        return 1.0
    lo, hi = beta, 1.0
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if _ess_fraction((mid - beta) * ll) >= target:
            lo = mid
        else:
            hi = mid
    return lo if lo > beta else hi


def systematic_resample(rng: np.random.Generator, weights: np.ndarray) -> np.ndarray:
    """Indices from systematic resampling of normalised ``weights`` (one uniform offset)."""
    n = weights.size
    positions = (rng.random() + np.arange(n)) / n
    cum = np.cumsum(weights)
    cum[-1] = 1.0
    return np.minimum(np.searchsorted(cum, positions, side="left"), n - 1)


def _mean_corr(a: np.ndarray, b: np.ndarray) -> float:
    """Mean over parameters of the (signed) correlation of particle positions ``a`` and ``b``.

    Signed, as PyMC's rule: with no correlation left the estimate scatters around zero (|r| would not fall
    below ~0.8/sqrt(N) and would never meet a small threshold).
    """
    ac = a - a.mean(axis=0)
    bc = b - b.mean(axis=0)
    den = np.sqrt((ac * ac).sum(axis=0) * (bc * bc).sum(axis=0))
    with np.errstate(invalid="ignore", divide="ignore"):
        c = (ac * bc).sum(axis=0) / den
    c = np.where(np.isfinite(c), c, 1.0)
    return float(c.mean())


def _gaussian_fit(x: np.ndarray, imh_df: float | None) -> tuple[np.ndarray, np.ndarray, Callable]:
    """Mean, Cholesky factor of the covariance and the (unnormalised) log density of the IMH proposal fitted to
    the particles ``x`` (Gaussian, or multivariate t with ``imh_df`` degrees of freedom)."""
    d = x.shape[1]
    mean = x.mean(axis=0)
    cov = np.atleast_2d(np.cov(x, rowvar=False))
    cov += np.eye(d) * (1e-12 * max(1.0, float(np.abs(np.diag(cov)).max())))
    try:
        chol = np.linalg.cholesky(cov)
    except np.linalg.LinAlgError:
        chol = np.diag(np.sqrt(np.maximum(np.diag(cov), 1e-300)))
    inv = np.linalg.inv(chol)

    def log_q(xx: np.ndarray) -> np.ndarray:
        r = (xx - mean) @ inv.T
        r2 = np.einsum("ij,ij->i", r, r)
        if imh_df is None:
            return -0.5 * r2
        return -0.5 * (imh_df + d) * np.log1p(r2 / imh_df)

    return mean, chol, log_q


def _run_one(log_likelihood: LogLikelihoodBatch, prior: Prior, rng: np.random.Generator, n: int, kernel: str,
             target_ess: float, corr_threshold: float, max_steps: int, unconstrained: bool, max_stages: int,
             imh_df: float | None, refit_proposal: bool = False):
    d = prior.dim
    theta = prior.sample(rng, n)
    x = prior.to_unconstrained(theta) if unconstrained else theta

    def to_theta(xx: np.ndarray) -> np.ndarray:
        return prior.from_unconstrained(xx) if unconstrained else xx

    def log_prior(xx: np.ndarray) -> np.ndarray:
        return prior.log_prob_unconstrained(xx) if unconstrained else prior.log_prob(xx)

    def loglik(xx: np.ndarray) -> np.ndarray:
        out = np.asarray(log_likelihood(to_theta(xx)), dtype=float).reshape(-1)
        return np.where(np.isnan(out), -np.inf, out)

    lp = log_prior(x)
    ll = loglik(x)
    n_eval = n
    if not np.isfinite(ll).any():
        raise EstimationError("the likelihood is -inf or NaN for every prior draw; check the data and the priors")
    beta = 0.0
    log_z = 0.0
    temps = [0.0]
    accs: list[float] = []
    steps_taken: list[int] = []
    rw_scale = 2.38 / math.sqrt(d)
    while beta < 1.0:
        if len(temps) > max_stages:
            raise EstimationError(f"SMC did not reach phi = 1 within {max_stages} stages (phi = {beta:.3g})")
        new_beta = _next_temperature(ll, beta, target_ess)
        logw = (new_beta - beta) * ll
        logw = np.where(np.isfinite(logw), logw, -np.inf)
        m = logw.max()
        log_z += float(m + np.log(np.exp(logw - m).sum()) - math.log(n))
        w = np.exp(logw - m)
        w /= w.sum()
        idx = systematic_resample(rng, w)
        x, ll, lp = x[idx], ll[idx], lp[idx]
        beta = new_beta
        temps.append(beta)

        # mutation: MH moves that leave L^beta p invariant
        mean, chol, log_q = _gaussian_fit(x, imh_df)
        x0 = x.copy()
        acc_sum = 0.0
        k = 0
        if kernel == "imh":
            lq = log_q(x)
        for k in range(1, max_steps + 1):  # noqa: B007 - k is reported after the loop
            if refit_proposal and kernel == "imh" and k > 1:
                # the proposal follows the mutated particles (the resampled ones carry duplicates and lag
                # behind the tempered target: a proposal fitted to them once can leave a run biased)
                mean, chol, log_q = _gaussian_fit(x, imh_df)
                lq = log_q(x)
            eps = rng.standard_normal((n, d))
            if kernel == "imh":
                step = eps @ chol.T
                if imh_df is not None:
                    step *= np.sqrt(imh_df / rng.chisquare(imh_df, n))[:, None]
                prop = mean + step
                lq_prop = log_q(prop)
            else:
                prop = x + rw_scale * (eps @ chol.T)
            lp_prop = log_prior(prop)
            ok = np.isfinite(lp_prop)
            ll_prop = np.full(n, -np.inf)
            if ok.any():
                ll_prop[ok] = loglik(prop[ok])
                n_eval += int(ok.sum())
            log_alpha = (lp_prop + beta * ll_prop) - (lp + beta * ll)
            if kernel == "imh":
                log_alpha += lq - lq_prop
            log_alpha = np.where(np.isnan(log_alpha), -np.inf, log_alpha)
            accept = np.log(rng.random(n)) < log_alpha
            x[accept] = prop[accept]
            ll[accept] = ll_prop[accept]
            lp[accept] = lp_prop[accept]
            if kernel == "imh":
                lq[accept] = lq_prop[accept]
            acc_sum += float(accept.mean())
            if _mean_corr(x0, x) < corr_threshold:
                break
        acc = acc_sum / k
        accs.append(acc)
        steps_taken.append(k)
        if kernel == "rw":
            rw_scale *= math.exp(float(np.clip(acc - 0.234, -0.5, 0.5)) * 2.0)
    perm = rng.permutation(n)
    return to_theta(x[perm]), ll[perm], log_z, tuple(temps), tuple(accs), tuple(steps_taken), n_eval


def run_smc(log_likelihood: LogLikelihoodBatch, prior: Prior, *, n_particles: int = 1000, n_chains: int = 4,
            seed: int | None = 0, kernel: str = "imh", target_ess: float = 0.5, correlation_threshold: float = 0.01,
            max_mutation_steps: int = 25, space: str = "unconstrained", max_stages: int = 500,
            imh_df: float | None = None, refit_proposal: bool = False) -> SMCResult:
    """Sample the posterior ``L(theta) p(theta)`` with ``n_chains`` independent tempered SMC runs.

    ``log_likelihood``: batch callable ``theta (n, d) -> (n,)`` in the natural space (``-inf`` allowed);
    ``prior``: :class:`Prior`; ``n_particles``: particles per run = draws per chain; ``kernel``: ``"imh"`` or
    ``"rw"``; ``imh_df``: None for PyMC's Gaussian IMH proposal, or the degrees of freedom of a
    multivariate-t proposal with the same location and scale; ``refit_proposal``: refit the IMH proposal to the
    particles before every mutation step of a stage (False: once per stage, as PyMC); ``space``:
    ``"unconstrained"`` or ``"bounded"``.
    Runs are seeded from one ``SeedSequence(seed)``, so a seed fixes every number. Raises
    :class:`EstimationError` when the likelihood is nowhere finite.
    """
    if kernel not in ("imh", "rw"):
        raise ValueError(f"kernel must be 'imh' or 'rw', got {kernel!r}")
    if space not in ("unconstrained", "bounded"):
        raise ValueError(f"space must be 'unconstrained' or 'bounded', got {space!r}")
    if n_particles < 10 or n_chains < 1:
        raise ValueError("need at least 10 particles and 1 chain")
    if not 0.0 < target_ess < 1.0:
        raise ValueError("target_ess must be in (0, 1)")
    t_start = time.perf_counter()
    seqs = np.random.SeedSequence(seed).spawn(n_chains)
    draws, lls, logzs, temps, accs, steps = [], [], [], [], [], []
    n_eval = 0
    for c in range(n_chains):
        rng = np.random.default_rng(seqs[c])
        th, ll, lz, tp, ac, st, ne = _run_one(log_likelihood, prior, rng, n_particles, kernel, target_ess,
                                              correlation_threshold, max_mutation_steps, space == "unconstrained",
                                              max_stages, imh_df, refit_proposal)
        draws.append(th)
        lls.append(ll)
        logzs.append(lz)
        temps.append(tp)
        accs.append(ac)
        steps.append(st)
        n_eval += ne
    return SMCResult(
        names=tuple(prior.names), draws=np.stack(draws), log_likelihood=np.stack(lls),
        log_evidence_chains=tuple(float(v) for v in logzs), temperatures=tuple(temps), acceptance=tuple(accs),
        mutation_steps=tuple(steps), n_evaluations=n_eval, elapsed_s=time.perf_counter() - t_start, kernel=kernel,
    )
