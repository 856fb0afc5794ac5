"""Tempered Sequential Monte Carlo from the prior to the posterior (8-DOF paper Section 2.1, Eq. 3 and after).

The sampler draws the intermediate distributions ``p_n(theta | y) ~ L(theta)^phi_n p(theta)`` with ``phi_0 = 0``
and ``phi_N = 1`` (paper Section 2.1, after Del Moral et al. 2006 and Neal's annealed importance sampling; the
paper used PyMC's ``sample_smc``). Per stage:

1. next temperature by bisection so that the effective sample size of the incremental weights
   ``exp((phi' - phi) log L)`` is ``target_ess`` (default one half) of the particles;
2. log marginal likelihood increment ``log mean(w)`` accumulated (the evidence of Eq. 1's denominator);
3. systematic resampling;
4. Metropolis-Hastings mutations targeting ``p_n``: independent MH (``kernel="imh"``, PyMC's default and the
   paper's choice) with a proposal fitted to the importance-weighted particles BEFORE resampling (the weights
   already target ``p_n`` and the fit sees no resampling duplicates; PyMC fits the resampled ones), or a
   Gaussian random walk with the particle covariance scaled by ``2.38 / sqrt(d)`` and tuned toward acceptance
   0.234 (``kernel="rw"``). The IMH proposal is a mixture of ``imh_components`` (default 3) Gaussians fitted by
   EM (at most one component per ``30 d`` particles, each covariance shrunk a little toward the single fit's),
   plus the single Gaussian fit as a defensive component of weight 0.25 (the mixture's tails are never thinner
   than a quarter of that fit's); ``imh_components=1`` is PyMC's single Gaussian. The tempered posteriors between
   prior and posterior are skewed in the unconstrained space (logit-uniform prior, log sigmas): on the Chrono
   lateral stage one Gaussian accepts ~0.27 of its proposals in the middle stages, the mixture ~0.45, and the
   run takes ~43 % fewer evaluations for about the same ESS (benchmarks/README.md). With fewer
   particles per component the EM fit follows the particles' noise: at 100 per component in 9 dimensions (4 x 300
   on a synthetic lateral drive) the runs disagreed (R-hat 1.26); hence the ``30 d`` rule.

How many MH steps (``mutation_rule``): the steps only buy ESS while they replace the copies that resampling
made, so the default rule ``"distinct"`` stops as soon as ``min_distinct`` (0.95) of the particles sit at
distinct positions (every particle that moved, plus one per ancestor among those that did not), and
``min_distinct_final`` (0.99) at the last stage, whose particles are the draws; at most
``max_mutation_steps``: 1-2 steps at an acceptance rate ~0.8, 4-7 at ~0.3, instead of a fixed or
correlation-driven number. (0.9 saved another third of the evaluations on the Chrono lateral stage at 8 x 1000
with the same posterior, but let the 4 x 300 runs of a harder synthetic lateral drive disagree: R-hat 1.4.)
``mutation_rule="correlation"`` keeps the earlier rule (until
the mean correlation with the pre-mutation positions falls below ``correlation_threshold``). With
``refit_proposal`` the IMH Gaussian is refitted to the current particles before every further step.

Exact early rejection: each MH step draws its uniform first, so ``accept <=> log L(theta') > floor`` with a
floor known before the likelihood is evaluated; a likelihood that takes ``floor=`` may stop a simulation as
soon as its value is certainly below it (the 8-DOF Gaussian log likelihood only decreases as residuals add
up; Solonen et al. 2012) and return ``-inf``: the chain is the same as with full evaluations.

Batching: the runs (chains) advance in lockstep, each a generator that yields its proposals, and every
round's proposals of ALL runs go to the likelihood in one batch call (the 8-DOF kernel spreads the batch over
the cores in small chunks, :mod:`vehcal_ros.models.chunked`). Each run keeps its own random stream, so the
numbers do not depend on the batching. Stages are counted from the first reweighting; a run with N particles
at phi = 1 gives N draws.

Sampling runs in the unconstrained space by default (uniform -> logit, half-normal -> log, with Jacobians) or in
the bounded space (``space="bounded"``: proposals outside the support are rejected). Several independent runs
are reported as chains, ``draws[chain, draw, param]``, so split R-hat and ESS (diagnostics.py) apply.

The likelihood is a batch callable: ``log_likelihood(theta[n, d]) -> (n,)`` for all particles at once.
"""

from __future__ import annotations

import inspect
import math
import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field

import numpy as np

from vehcal_ros.errors import Cancelled, EstimationError

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


@dataclass(frozen=True)
class Normal:
    """Normal prior N(mean, sd^2) on the real line (a nuisance offset; identity transform)."""

    mean: float
    sd: float

    def __post_init__(self) -> None:
        if not (np.isfinite(self.mean) and np.isfinite(self.sd) and self.sd > 0):
            raise ValueError(f"normal prior needs a finite mean and sd > 0, got ({self.mean}, {self.sd})")


Distribution = Uniform | HalfNormal | Normal


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
            elif isinstance(d, Normal):
                out[:, j] = rng.normal(d.mean, d.sd, n)
            else:
                out[:, j] = np.abs(rng.normal(0.0, d.scale, n))
        return out

    def to_unconstrained(self, theta: np.ndarray) -> np.ndarray:
        z = np.empty_like(theta, dtype=float)
        for j, d in enumerate(self.dists):
            if isinstance(d, Uniform):
                p = np.clip((theta[:, j] - d.low) / (d.high - d.low), 1e-300, 1.0 - 1e-16)
                z[:, j] = np.log(p) - np.log1p(-p)
            elif isinstance(d, Normal):
                z[:, j] = theta[:, j]
            else:
                z[:, j] = np.log(np.maximum(theta[:, j], 1e-300))
        return z

    def from_unconstrained(self, z: np.ndarray) -> np.ndarray:
        theta = np.empty_like(z, dtype=float)
        for j, d in enumerate(self.dists):
            if isinstance(d, Uniform):
                theta[:, j] = d.low + (d.high - d.low) * _expit(z[:, j])
            elif isinstance(d, Normal):
                theta[:, j] = z[:, j]
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
            elif isinstance(d, Normal):
                lp += _normal_logpdf(zj, d)
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
            elif isinstance(d, Normal):
                lp += _normal_logpdf(x, d)
            else:
                val = (0.5 * math.log(2.0 / math.pi) - math.log(d.scale)) - 0.5 * (x / d.scale) ** 2
                lp += np.where(x > 0, val, -np.inf)
        return lp


def _normal_logpdf(x: np.ndarray, d: Normal) -> np.ndarray:
    return -0.5 * ((x - d.mean) / d.sd) ** 2 - math.log(d.sd) - 0.5 * math.log(2.0 * math.pi)


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
    distinct: tuple[tuple[float, ...], ...] = ()
    """per run and stage, the fraction of particles at distinct positions after the mutation (-)."""

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
            "distinct": [list(f) for f in self.distinct],
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


def next_temperature(ll: np.ndarray, beta: float, target: float) -> float:
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


def _distinct_fraction(ancestors: np.ndarray, moved: np.ndarray) -> float:
    """Fraction of particles at distinct positions: every moved particle, plus one per ancestor among the
    particles still sitting where resampling put them (copies of one ancestor count once)."""
    still = ancestors[~moved]
    return (int(moved.sum()) + np.unique(still).size) / ancestors.size


def _gaussian_fit(x: np.ndarray, imh_df: float | None, weights: np.ndarray | None = None
                  ) -> tuple[np.ndarray, np.ndarray, Callable]:
    """Mean, Cholesky factor of the covariance and the (unnormalised) log density of the IMH proposal fitted to
    the particles ``x`` (optionally importance-weighted; Gaussian, or multivariate t with ``imh_df`` degrees of
    freedom)."""
    d = x.shape[1]
    mean = np.average(x, axis=0, weights=weights)
    cov = np.atleast_2d(np.cov(x, rowvar=False, aweights=weights))
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


MIXTURE_PARTICLES_PER_DIM = 30
"""A run fits an IMH mixture component per ``30 d`` particles at most (``d`` parameters), else fewer components:
a component's covariance has ``d (d + 1) / 2`` entries to estimate (at 10 d the 4 x 300 synthetic lateral runs
disagreed, R-hat 1.26)."""
SHRINK = 2.0
"""Each EM component's covariance is shrunk toward the single fit's with the weight of ``SHRINK d`` particles."""


def mixture_fit(x: np.ndarray, weights: np.ndarray | None, k: int, iters: int = 12, defensive: float = 0.25
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, Callable]:
    """A ``k``-component Gaussian mixture fitted to the (importance-weighted) particles ``x`` by EM: weights,
    means ``(k, d)``, Cholesky factors ``(k, d, d)`` and the mixture's log density (up to a constant).

    Deterministic: the components start as ``k`` equal-weight slices of the particles along their first principal
    axis; at most ``iters`` EM steps, fewer once no responsibility moves by 0.01. A component left with less than
    ``2 d`` particles' worth of weight is dropped; covariances are shrunk toward the single fit's (``SHRINK``);
    ``defensive`` > 0 appends that single fit as a component of that weight."""
    n, d = x.shape
    w = np.full(n, 1.0 / n) if weights is None else weights / weights.sum()
    mean0 = w @ x
    xc = x - mean0
    cov0 = (xc * w[:, None]).T @ xc
    reg = np.diag(1e-6 * np.maximum(np.diag(cov0), 1e-300))
    axis = np.linalg.eigh(cov0)[1][:, -1]
    order = np.argsort(xc @ axis)
    group = np.minimum((np.cumsum(w[order]) * k).astype(int), k - 1)
    resp = np.zeros((n, k))
    resp[order, group] = 1.0
    for _ in range(iters):
        previous = resp
        wr = resp * w[:, None]
        nk = wr.sum(axis=0)
        keep = nk * n >= 2 * d
        keep[np.argmax(nk)] = True
        wr, nk = wr[:, keep], nk[keep]
        pis = nk / nk.sum()
        means = (wr.T @ x) / nk[:, None]
        chols = np.empty((pis.size, d, d))
        for j in range(pis.size):
            xj = x - means[j]
            m_j = nk[j] * n   # the component's particles' worth; its covariance shrunk toward the whole fit's
            cov = ((xj * wr[:, j:j + 1]).T @ xj / nk[j] * m_j + SHRINK * d * cov0) / (m_j + SHRINK * d) + reg
            try:
                chols[j] = np.linalg.cholesky(cov)
            except np.linalg.LinAlgError:
                chols[j] = np.diag(np.sqrt(np.maximum(np.diag(cov), 1e-300)))
        logp = _mixture_terms(x, pis, means, chols)
        resp = np.exp(logp - logp.max(axis=1, keepdims=True))
        resp /= resp.sum(axis=1, keepdims=True)
        if resp.shape == previous.shape and np.abs(resp - previous).max() < 0.01:
            break
    if defensive > 0.0:   # the single Gaussian moment fit as one more component: the mixture's tails are never
        # thinner than ``defensive`` x that fit's (an EM component that hugs a cluster cannot strand particles)
        try:
            chol0 = np.linalg.cholesky(cov0 + reg)
        except np.linalg.LinAlgError:
            chol0 = np.diag(np.sqrt(np.maximum(np.diag(cov0), 1e-300)))
        pis = np.append((1.0 - defensive) * pis, defensive)
        means = np.vstack([means, mean0])
        chols = np.concatenate([chols, chol0[None]], axis=0)

    def log_q(xx: np.ndarray) -> np.ndarray:
        t = _mixture_terms(xx, pis, means, chols)
        m = t.max(axis=1)
        return m + np.log(np.exp(t - m[:, None]).sum(axis=1))

    return pis, means, chols, log_q


def _mixture_terms(x: np.ndarray, pis: np.ndarray, means: np.ndarray, chols: np.ndarray) -> np.ndarray:
    """``log pi_j + log N(x; mean_j, L_j L_j^T)`` per row and component (without the shared ``2 pi`` term)."""
    out = np.empty((x.shape[0], pis.size))
    for j in range(pis.size):
        r = (x - means[j]) @ np.linalg.inv(chols[j]).T
        out[:, j] = np.log(pis[j]) - np.log(np.diag(chols[j])).sum() - 0.5 * np.einsum("ij,ij->i", r, r)
    return out


@dataclass(frozen=True)
class _Options:
    kernel: str
    target_ess: float
    rule: str
    corr_threshold: float
    min_distinct: float
    min_distinct_final: float
    max_steps: int
    unconstrained: bool
    max_stages: int
    imh_df: float | None
    refit_proposal: bool
    weighted_fit: bool
    components: int = 1


@dataclass
class _ChainOut:
    theta: np.ndarray
    ll: np.ndarray
    log_z: float
    temps: tuple[float, ...]
    accs: tuple[float, ...]
    steps: tuple[int, ...]
    distinct: tuple[float, ...]


# A chain is a generator: it yields (theta (m, d) in the natural space, floor (m,) or None) and is sent back
# the log likelihood of those rows; a row whose value is below its floor may come back as -inf (the chain only
# needs it to decide a certain MH rejection). The driver evaluates all chains' requests in one batch call.
_Request = tuple[np.ndarray, "np.ndarray | None"]


def _chain(prior: Prior, rng: np.random.Generator, n: int, o: _Options) -> Generator[_Request, np.ndarray, _ChainOut]:
    d = prior.dim
    x = prior.sample(rng, n)
    if o.unconstrained:
        x = prior.to_unconstrained(x)

    def to_theta(xx: np.ndarray) -> np.ndarray:
        return prior.from_unconstrained(xx) if o.unconstrained else xx

    def log_prior(xx: np.ndarray) -> np.ndarray:
        return prior.log_prob_unconstrained(xx) if o.unconstrained else prior.log_prob(xx)

    def clean(v: np.ndarray) -> np.ndarray:
        v = np.asarray(v, dtype=float).reshape(-1)
        return np.where(np.isnan(v), -np.inf, v)

    lp = log_prior(x)
    ll = clean((yield to_theta(x), None))
    if not np.isfinite(ll).any():
        raise EstimationError("the likelihood is -inf or NaN for every prior draw; check the data and the priors")
    beta, log_z = 0.0, 0.0
    temps = [0.0]
    accs: list[float] = []
    steps_taken: list[int] = []
    distinct: list[float] = []
    rw_scale = 2.38 / math.sqrt(d)
    imh = o.kernel == "imh"
    n_components = 1 if o.imh_df is not None else min(o.components, n // (MIXTURE_PARTICLES_PER_DIM * d))
    while beta < 1.0:
        if len(temps) > o.max_stages:
            raise EstimationError(f"SMC did not reach phi = 1 within {o.max_stages} stages (phi = {beta:.3g})")
        # 1-2. next temperature and evidence increment
        new_beta = next_temperature(ll, beta, o.target_ess)
        logw = (new_beta - beta) * ll
        logw = np.where(np.isfinite(logw), logw, -np.inf)
        m = logw.max()
        log_z += float(m + np.log(np.exp(logw - m).sum()) - math.log(n))
        w = np.exp(logw - m)
        w /= w.sum()
        # the proposal from the importance-weighted particles (no resampling duplicates in the fit)
        mean, chol, log_q = _gaussian_fit(x, o.imh_df, w if o.weighted_fit else None)
        mix = None
        if imh and n_components > 1:
            mix = mixture_fit(x, w if o.weighted_fit else None, n_components)
            log_q = mix[3]
        # 3. resampling
        idx = systematic_resample(rng, w)
        x, ll, lp = x[idx], ll[idx], lp[idx]
        beta = new_beta
        temps.append(beta)
        if not o.weighted_fit:
            mean, chol, log_q = _gaussian_fit(x, o.imh_df)
            if mix is not None:
                mix = mixture_fit(x, None, n_components)
                log_q = mix[3]
        # 4. mutation: MH moves leaving L^beta p invariant
        x0 = x.copy()
        moved = np.zeros(n, dtype=bool)
        lq = log_q(x) if imh else None
        acc_sum = 0.0
        k = 0
        for k in range(1, o.max_steps + 1):  # noqa: B007 - k is reported after the loop
            if o.refit_proposal and imh and k > 1:
                mean, chol, log_q = _gaussian_fit(x, o.imh_df)
                if mix is not None:
                    mix = mixture_fit(x, None, n_components)
                    log_q = mix[3]
                lq = log_q(x)
            eps = rng.standard_normal((n, d))
            if imh and mix is not None:
                comp = rng.choice(mix[0].size, n, p=mix[0])
                prop = mix[1][comp] + np.einsum("nij,nj->ni", mix[2][comp], eps)
                lq_prop = log_q(prop)
            elif imh:
                step = eps @ chol.T
                if o.imh_df is not None:
                    step *= np.sqrt(o.imh_df / rng.chisquare(o.imh_df, n))[:, None]
                prop = mean + step
                lq_prop = log_q(prop)
            else:
                prop = x + rw_scale * (eps @ chol.T)
            log_u = np.log(rng.random(n))
            lp_prop = log_prior(prop)
            ok = np.isfinite(lp_prop)
            ll_prop = np.full(n, -np.inf)
            # accept  <=>  lp' + beta ll' - lq' > log u + lp + beta ll - lq  <=>  ll' > floor
            with np.errstate(invalid="ignore"):
                rest = log_u + lp + beta * ll - lp_prop
                if imh:
                    rest += lq_prop - lq
                floor = np.where(np.isnan(rest), -np.inf, rest / beta)
            if ok.any():
                ll_prop[ok] = clean((yield to_theta(prop[ok]), floor[ok]))
            log_alpha = (lp_prop + beta * ll_prop) - (lp + beta * ll)
            if imh:
                log_alpha += lq - lq_prop
            log_alpha = np.where(np.isnan(log_alpha), -np.inf, log_alpha)
            accept = log_u < log_alpha
            x[accept] = prop[accept]
            ll[accept] = ll_prop[accept]
            lp[accept] = lp_prop[accept]
            if imh:
                lq[accept] = lq_prop[accept]
            moved |= accept
            acc_sum += float(accept.mean())
            if o.rule == "distinct":
                if _distinct_fraction(idx, moved) >= (o.min_distinct_final if beta >= 1.0 else o.min_distinct):
                    break
            elif _mean_corr(x0, x) < o.corr_threshold:
                break
        acc = acc_sum / k
        accs.append(acc)
        steps_taken.append(k)
        distinct.append(_distinct_fraction(idx, moved))
        if not imh:
            rw_scale *= math.exp(float(np.clip(acc - 0.234, -0.5, 0.5)) * 2.0)
    perm = rng.permutation(n)
    return _ChainOut(to_theta(x[perm]), ll[perm], log_z, tuple(temps), tuple(accs), tuple(steps_taken),
                     tuple(distinct))


def _accepts_floor(fn: Callable) -> bool:
    try:
        return "floor" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def run_smc(log_likelihood: LogLikelihoodBatch, prior: Prior, *, n_particles: int = 1000, n_chains: int = 4,
            seed: int | None = 0, kernel: str = "imh", target_ess: float = 0.5, mutation_rule: str = "distinct",
            min_distinct: float = 0.95, min_distinct_final: float = 0.99, correlation_threshold: float = 0.01,
            max_mutation_steps: int = 25, space: str = "unconstrained", max_stages: int = 500,
            imh_df: float | None = None, refit_proposal: bool = False, weighted_fit: bool = True,
            imh_components: int = 3,
            early_rejection: bool = True, stop: Callable[[], bool] | None = None) -> SMCResult:
    """Sample the posterior ``L(theta) p(theta)`` with ``n_chains`` independent tempered SMC runs.

    ``log_likelihood``: batch callable ``theta (n, d) -> (n,)`` in the natural space (``-inf`` allowed); if it
    takes a keyword ``floor`` (``(n,)``) it may return ``-inf`` for a row whose value is below its floor (the MH
    step rejects it for certain: exact early rejection, used when ``early_rejection``). The runs advance in
    lockstep and every round's proposals of all runs go to ONE call. ``prior``: :class:`Prior`;
    ``n_particles``: particles per run = draws per chain; ``kernel``: ``"imh"`` or ``"rw"``;
    ``mutation_rule``: ``"distinct"`` (MH steps until ``min_distinct`` of the particles sit at distinct
    positions; ``min_distinct_final`` at the last stage, whose particles are the draws) or ``"correlation"``
    (until the mean correlation with the pre-mutation positions is below ``correlation_threshold``), at most
    ``max_mutation_steps``; ``imh_df``: None for a Gaussian IMH proposal, or the degrees of freedom of a
    multivariate t; ``weighted_fit``: fit the IMH proposal to the importance-weighted particles before
    resampling (False: to the resampled ones, as PyMC); ``refit_proposal``: refit it to the current particles
    before every further step of a stage; ``imh_components``: Gaussians in the IMH proposal's mixture (1: one
    Gaussian, as PyMC; fewer than asked when a run has under ``30 d`` particles per component; a t proposal,
    ``imh_df``, is always one component); ``space``: ``"unconstrained"`` or ``"bounded"``.
    Runs are seeded from one ``SeedSequence(seed)``, so a seed fixes every number. Raises
    :class:`EstimationError` when the likelihood is nowhere finite. ``stop()`` true before a round of
    likelihood evaluations raises :class:`~vehcal_ros.errors.Cancelled` (a node shutting down: no result).
    """
    if kernel not in ("imh", "rw"):
        raise ValueError(f"kernel must be 'imh' or 'rw', got {kernel!r}")
    if space not in ("unconstrained", "bounded"):
        raise ValueError(f"space must be 'unconstrained' or 'bounded', got {space!r}")
    if mutation_rule not in ("distinct", "correlation"):
        raise ValueError(f"mutation_rule must be 'distinct' or 'correlation', got {mutation_rule!r}")
    if n_particles < 10 or n_chains < 1:
        raise ValueError("need at least 10 particles and 1 chain")
    if not 0.0 < target_ess < 1.0:
        raise ValueError("target_ess must be in (0, 1)")
    if not (0.0 < min_distinct <= 1.0 and 0.0 < min_distinct_final <= 1.0):
        raise ValueError("min_distinct and min_distinct_final must be in (0, 1]")
    if max_mutation_steps < 1:
        raise ValueError("max_mutation_steps must be >= 1")
    if imh_components < 1:
        raise ValueError("imh_components must be >= 1")
    t_start = time.perf_counter()
    opts = _Options(kernel, target_ess, mutation_rule, correlation_threshold, min_distinct, min_distinct_final,
                    max_mutation_steps,
                    space == "unconstrained", max_stages, imh_df, refit_proposal, weighted_fit, imh_components)
    use_floor = early_rejection and _accepts_floor(log_likelihood)
    seqs = np.random.SeedSequence(seed).spawn(n_chains)
    chains = [_chain(prior, np.random.default_rng(seqs[c]), n_particles, opts) for c in range(n_chains)]
    requests = {c: next(g) for c, g in enumerate(chains)}
    outs: dict[int, _ChainOut] = {}
    n_eval = 0
    while requests:
        if stop is not None and stop():
            raise Cancelled(f"SMC stopped on request after {n_eval} likelihood evaluations")
        order = list(requests)
        thetas = [requests[c][0] for c in order]
        sizes = [t.shape[0] for t in thetas]
        n_eval += sum(sizes)
        values = _evaluate(log_likelihood, thetas, [requests[c][1] for c in order], use_floor)
        for c, v in zip(order, np.split(values, np.cumsum(sizes)[:-1])):
            try:
                requests[c] = chains[c].send(v)
            except StopIteration as finished:
                outs[c] = finished.value
                del requests[c]
    res = [outs[c] for c in range(n_chains)]
    return SMCResult(
        names=tuple(prior.names), draws=np.stack([r.theta for r in res]), log_likelihood=np.stack([r.ll for r in res]),
        log_evidence_chains=tuple(float(r.log_z) for r in res), temperatures=tuple(r.temps for r in res),
        acceptance=tuple(r.accs for r in res), mutation_steps=tuple(r.steps for r in res), n_evaluations=n_eval,
        elapsed_s=time.perf_counter() - t_start, kernel=kernel, distinct=tuple(r.distinct for r in res),
    )


def _evaluate(log_likelihood: LogLikelihoodBatch, thetas: list[np.ndarray], floors: list[np.ndarray | None],
              use_floor: bool) -> np.ndarray:
    """One batch call for all chains' requests (a None floor asks for exact values: floor -inf)."""
    theta = np.concatenate(thetas, axis=0)
    if theta.shape[0] == 0:
        return np.empty(0)
    if use_floor:
        floor = np.concatenate([np.full(t.shape[0], -np.inf) if f is None else f for t, f in zip(thetas, floors)])
        return np.asarray(log_likelihood(theta, floor=floor), dtype=float).reshape(-1)
    return np.asarray(log_likelihood(theta), dtype=float).reshape(-1)
