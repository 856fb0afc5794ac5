"""Grip potential from (slip, friction) samples: the friction paper's Algorithm 1 end to end.

Mussot et al. 2022, doi:10.1016/j.conengprac.2021.105048: multi-start ML (steps 1-3, Eqs. 14-17, Eq. 27 fallback),
robust adaptive Metropolis chains (steps 4-12, Eqs. 20-24), then per retained draw the curve maximum
(steps 13-15, Eqs. 25-26) and the physical prior of Section 4.2.2 (slip at the peak <= ``max_peak_slip``),
applied either after sampling as the paper does (``prior_mode="posthoc"``: draws peaking beyond the limit are
dropped) or inside the posterior (``prior_mode="truncated"``: such proposals have zero prior density).

Data handling (before the fit): non-finite pairs are removed and counted; samples with negative slip are
braking samples: with ``mirror_braking=True`` they are mapped (s, mu) -> (-s, -mu) so braking and traction
share one curve (the magic formula is odd about s = -s_h, s_v for a symmetric tire), otherwise they are
dropped and counted (fit braking separately by passing mirrored braking samples alone). Too few points or
unexcited data raise :class:`~vehcal_ros.errors.EstimationError`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import lru_cache

import numpy as np

from vehcal_ros.errors import EstimationError, InputError
from vehcal_ros.estimation.grip.latent_slip import SlipMixture, true_slip_distribution
from vehcal_ros.estimation.grip.ml_fit import FALLBACK_PROPOSAL_COV, TABLE3_BOUNDS, MLFit, multistart_fit
from vehcal_ros.estimation.grip.posterior import carried_log_ratio, grip_problem, run_grip_chains
from vehcal_ros.inference.adaptive_metropolis import ChainResult, tempered_weights
from vehcal_ros.inference.rank_diagnostics import rank_rhat_ess
from vehcal_ros.models.pacejka import (
    N_THETA,
    NO_GROUPS,
    THETA_NAMES,
    gauss_nll_groups,
    mf_batch,
    peak_batch,
    peak_slip_at_most,
    sse_batch,
)

#: Prior / ML bounds of B, C, D, E, s_h, s_v from published tire data (docs/grip.md, "Prior ranges from published
#: tire data"; vehcal_ros/data/tire_coefficients.yaml): passenger, light-truck and truck magic-formula sets over
#: 0.4-1.6 x their nominal load and road scales 0.1-1.2, with margins; E up to 1.
PUBLISHED_TIRE_BOUNDS: tuple[tuple[float, float], ...] = (
    (4.0, 210.0), (1.2, 2.1), (0.05, 1.7), (-2.7, 1.0), (-0.01, 0.01), (-0.05, 0.1),
)


@dataclass(frozen=True)
class GripConfig:
    """Settings of :class:`GripEstimator`. The defaults are what the grip_estimator node ships (its parameters take
    their defaults from here: vehcal_ros/estimation/grip/parameters.py); :meth:`paper_case` gives the friction
    paper's simulated-case settings (Table 3 bounds)."""

    bounds: tuple[tuple[float, float], ...] = PUBLISHED_TIRE_BOUNDS
    """Uniform prior / ML bounds per parameter B, C, D, E, s_h, s_v."""
    n_ml_starts: int = 20
    """n_ML uniform starts of the ML fit (Algorithm 1, step 1)."""
    n_chains: int = 8
    """n_mc adaptive Metropolis chains (step 4)."""
    n_steps: int = 40_000
    """M, steps per chain (step 6) before the first convergence check."""
    max_steps: int = 120_000
    """Chains that fail the convergence rule after ``n_steps`` continue (in blocks of max(n_steps/2,
    (max_steps - n_steps)/10)) up to this many steps; ``converged`` is then judged on the longer chains (burn-in
    the same fraction)."""
    burn_in: float = 0.5
    """Fraction of each chain discarded as burn-in, in [0, 1)."""
    thin: int = 20
    """Keep every ``thin``-th step after burn-in (step 12)."""
    pilot: float = 0.5
    """Fraction of the burn-in after which the proposal is reset from the pooled empirical covariance
    (Section 3.2); 0 disables it (pure Algorithm 1)."""
    gamma: float = 2.0 / 3.0
    """Adaptation exponent of eta_i = min(1, d i^-gamma), in [0.5, 1] (step 11)."""
    sigma_mode: str = "sampled"
    """"sampled" (default): sigma is a parameter of the chains with the Jeffreys prior p(sigma) ~ 1/sigma on
    ``sigma_bounds`` (its uncertainty enters the intervals); "fixed": sigma plugged in from the ML step (Eq. 17,
    the paper's practice); "marginal": sigma integrated out analytically (only without per-sample variances)."""
    sigma_bounds: tuple[float, float] = (1e-3, 1.0)
    """Support of sigma (friction) with ``sigma_mode="sampled"``. Below 0.001 (0.1 % of the wheel load) no
    friction sample is known: a force transducer's resolution and the road's texture are coarser. Without that
    floor a window whose samples sit on a plateau (steady acceleration, the slip's error along it) let sigma fall
    to 1e-5 with the curve's peak on the plateau, a posterior of mu_max with sd 5e-4."""
    max_peak_slip: float = 0.25
    """Physical prior: largest admissible slip at the curve maximum (Section 4.2.2; published tires: 0.07-0.21 on
    a dry road)."""
    prior_mode: str = "truncated"
    """"truncated" (zero prior density in the chain; default, same target, no draws wasted) or "posthoc"
    (drop draws after sampling, as the paper)."""
    interval_prob: float = 0.9
    """Probability of the equal-tailed credible interval of mu_max."""
    slip_grid: tuple[float, float, int] = (0.0, 0.3, 61)
    """(start, stop, n) of the slip grid for the curve quantiles q05/q50/q95."""
    seed: int | None = 0
    """Seed of the ML starts and of the chains (same seed and data -> same numbers)."""
    min_points: int = 30
    """Fewer usable points than this raise EstimationError (must exceed 6 for Eq. 17)."""
    min_mu_excitation: float = 0.05
    """max |mu| below this raises EstimationError (no information on the curve)."""
    min_slip_spread: float = 1e-3
    """max(s) - min(s) below this raises EstimationError."""
    mirror_braking: bool = False
    """Map braking samples (s < 0) to (-s, -mu); when False they are dropped and counted."""
    slope_coords: bool = True
    """Chains move in (B C D, C, D, E, s_h, s_v): the same posterior, far better mixing at low excitation, where
    the data fix the initial slope B C D and leave a curved ridge in (B, C, D) (see run_grip_chains)."""
    keep_negative_slip: bool = True
    """Keep samples with s < 0 as they are (overrides ``mirror_braking``): for data whose braking samples were
    already mirrored by the sign of the force (:mod:`grip_signals`), a small negative slip is noise around zero
    and dropping or mirroring it would bias the curve near the origin."""
    cond_max: float = 1e7
    """Condition number of F (Eq. 16) above which the Eq. (27) fallback proposal is used."""
    fallback_cov: tuple[float, ...] = FALLBACK_PROPOSAL_COV
    """Diagonal fallback proposal covariance (Eq. 27)."""
    r_hat_threshold: float = 1.01
    """``converged`` needs every split R-hat <= this (project-wide rule), on B, C, D, E, s_h, s_v, sigma and
    mu_max."""
    ess_threshold: float = 400.0
    """... and every bulk ESS >= this."""
    ess_tail_threshold: float = 400.0
    """... and every tail ESS >= this."""
    shape_prior: tuple | None = None
    """Optional Gaussian tire-shape prior ((mean of B C D, C, E), 3 x 3 covariance) multiplying the uniform prior:
    a tire keeps its shape across surfaces more than its peak (see GripPipeline.shape_prior). None = off."""
    prior_dominated_ratio: float = 0.5
    """An estimate is flagged ``prior_dominated`` when the posterior std of mu_max exceeds this share of its
    std under the prior alone (the data removed less than 1 - ratio^2 of the prior variance)."""
    max_curve_draws: int = 2000
    """Retained draws (evenly subsampled) used for the curve quantiles."""
    p_independent: float = 0.5
    """Share of the chains' steps that are independence Metropolis-Hastings steps (run_grip_chains
    ``proposal_draws``) instead of random-walk steps, from a mixture of multivariate t fitted to draws
    (``proposal_components``): warm-started fits first to the previous fit's draws (reweighted to the new window,
    ``carry_reweight``), refitted to the chains' own draws after the pilot and at the end of the burn-in; every
    fit refits it at each extension (cold fits: ``cold_independent``). 0 = random-walk steps only (Algorithm 1
    as published). Each kernel leaves the posterior invariant whatever the draws were, and within the kept part of
    a leg the proposal is fixed, so the chains stay exact; the convergence rule judges them as before. At low
    excitation the posterior is a curved ridge (the data fix the initial slope and leave the peak free) that the
    random walk follows slowly; an independence step crosses it at once when accepted
    (benchmarks/README_grip.md)."""
    cold_independent: bool = True
    """Cold fits take independence steps (``p_independent``) in their extensions, from a proposal fitted to the
    first leg's kept draws (the first leg stays Algorithm 1: random-walk steps only; fitted to the pilot's draws,
    which have barely left theta_ML, the proposal made the chains stick on a very narrow posterior). False: cold
    fits use random-walk steps only."""
    proposal_components: int = 3
    """Components of the independence proposal: up to this many multivariate t fitted by EM to the draws, plus
    the single inflated t as a defensive component of weight 0.25
    (:func:`~vehcal_ros.inference.adaptive_metropolis.independence_proposal`); 1 = the single t alone. On the
    daily drive's fits the mixture's steps are accepted ~0.08-0.19 of the time, the single t's ~0.01-0.10."""
    carry_reweight: bool = True
    """Warm-started fits: the previous fit's draws are first reweighted to the new window's posterior (importance
    weights p_new / p_old, tempered so their effective sample size stays >= half the draws: sequential Monte
    Carlo's reweighting step) and each chain starts at a draw of its own previous chain picked by those weights;
    the independence proposal is fitted to the weighted draws. A start and a proposal only, so the chains stay
    exact and the convergence rule decides as before. False: each chain goes on from its last draw and the
    proposal is fitted to the unweighted draws."""
    extend_by_need: bool = True
    """Chains that fail the convergence rule are extended by the steps the rule's shortfall predicts (ESS grows
    and split R-hat - 1 shrinks about in proportion to the chain length: ``GripEstimator.steps_needed``), at
    least n_steps/4 and at most the fixed block of ``max_steps``' docstring, instead of always by that block."""
    chain_starts: str = "optima"
    """Where the chains start. "ml": a cold fit's all at theta_ML (Algorithm 1, step 5), a warm fit's at the
    previous fit's chains. "optima": a cold fit's spread over the distinct local optima of the multi-start ML step
    within ``start_loglik_gap`` log-likelihood units of the best (the best first, then round-robin); a warm fit's
    every other chain likewise (its ML step then runs the ``n_ml_starts`` uniform starts too). Overdispersed
    starts: without them split R-hat cannot see a second mode the chains never visit (Gelman & Rubin 1992; Vehtari
    et al. 2021, Sec. 4)."""
    start_loglik_gap: float = 10.0
    """"optima": a local optimum of the ML step starts chains when its log-likelihood (V / (2 sigma_ML^2)) is within
    this of the best's."""
    carry_draws: int = 250
    """At most this many of each previous chain's draws (evenly spaced) are reweighted (each costs one log-target
    evaluation)."""
    slip_prior: str = "deconvolved"
    """What the fit assumes about the true slips behind measured slips with variances ``slip_var``:
    "deconvolved" (default): their distribution is learnt from the measured slips (a Gaussian mixture deconvolved
    from the slip noise, :mod:`~vehcal_ros.estimation.grip.latent_slip`) and each sample enters the likelihood at the
    posterior mean and variance of its true slip; "flat": a flat prior, i.e. the effective-variance likelihood at
    the measured slips (biased low when the true slips are clustered, as in everyday driving)."""
    slip_mean_error: bool = False
    """"deconvolved": True = the likelihood also integrates out the error of the deconvolved components' means,
    which all of a component's samples share (:meth:`~vehcal_ros.estimation.grip.latent_slip.SlipMixture.
    shared_loadings`, :func:`~vehcal_ros.models.pacejka.gauss_nll_shared_into`); False (default): the means taken
    as known. Measured, not the default (benchmarks/README_tire_forces.md): SBC live_latent 90.0 % /
    50.0 % (off: 89.0 / 49.5), the daily drive's misses unchanged."""

    slip_posterior: str = "moments"
    """"deconvolved": how each sample's true-slip posterior enters the likelihood. "moments" (default): its mean
    and variance, the curve linearised there (regression calibration). "slices": the posterior cut into
    :data:`~vehcal_ros.estimation.grip.latent_slip.POSTERIOR_SLICES` slices of equal probability, each a Gaussian row,
    the sample's density their mixture (:func:`~vehcal_ros.models.pacejka.gauss_nll_groups_into`): exact up to
    the linearisation inside a slice. Measured, not the default (benchmarks/README_grip.md, case ``recorded``):
    with the deconvolved mixture it does not change the coverage (81.0 % against 80.5 %) at 2.5 times the cost;
    with the design's true slip distribution it centres the intervals (88.0 %, ranks uniform; moments 86.0 %,
    leaning low)."""

    @classmethod
    def paper_case(cls, **changes: object) -> GripConfig:
        """The settings of the friction paper's simulated case as this project reproduces it (the paper-case
        benchmarks and tests): Table 3 bounds, the peak within slip 0.1 (Section 4.2.2), 8 ML starts, at least 20
        points, samples with s < 0 dropped, chains extended up to 160 000 steps; ``changes`` on top."""
        return cls(**{**PAPER_CASE, **changes})

    def __post_init__(self) -> None:
        b = np.asarray(self.bounds, dtype=float)
        checks = [
            (b.shape == (N_THETA, 2) and bool(np.all(b[:, 0] < b[:, 1])), "bounds must be 6 (lower < upper) pairs"),
            (self.n_ml_starts >= 1, "n_ml_starts must be >= 1"),
            (self.n_chains >= 1, "n_chains must be >= 1"),
            (self.n_steps >= 10, "n_steps must be >= 10"),
            (0.0 <= self.burn_in < 1.0, "burn_in must be a fraction in [0, 1)"),
            (self.thin >= 1, "thin must be >= 1"),
            (0.0 <= self.pilot <= 1.0, "pilot must be a fraction of the burn-in in [0, 1]"),
            (0.5 <= self.gamma <= 1.0, "gamma must be in [0.5, 1]"),
            (self.sigma_mode in ("sampled", "fixed", "marginal"), "sigma_mode must be 'sampled', 'fixed' or "
             "'marginal'"),
            (self.max_steps >= self.n_steps, "max_steps must be >= n_steps"),
            (len(self.sigma_bounds) == 2 and 0.0 < self.sigma_bounds[0] < self.sigma_bounds[1],
             "sigma_bounds must be (0 < lower < upper)"),
            (0.0 < self.prior_dominated_ratio <= 1.0, "prior_dominated_ratio must be in (0, 1]"),
            (0.0 < self.max_peak_slip < 1.0, "max_peak_slip must be in (0, 1)"),
            (self.prior_mode in ("posthoc", "truncated"), "prior_mode must be 'posthoc' or 'truncated'"),
            (0.0 < self.interval_prob < 1.0, "interval_prob must be in (0, 1)"),
            (0.0 <= self.p_independent < 1.0, "p_independent must be in [0, 1)"),
            (self.chain_starts in ("ml", "optima"), "chain_starts must be 'ml' or 'optima'"),
            (self.start_loglik_gap >= 0.0, "start_loglik_gap must be >= 0"),
            (self.carry_draws >= 1, "carry_draws must be >= 1"),
            (1 <= self.proposal_components <= 8, "proposal_components must be in [1, 8]"),
            (self.slip_prior in ("deconvolved", "flat"), "slip_prior must be 'deconvolved' or 'flat'"),
            (self.slip_posterior in ("moments", "slices"), "slip_posterior must be 'moments' or 'slices'"),
            (not (self.slip_posterior == "slices" and self.slip_mean_error),
             "slip_mean_error needs slip_posterior='moments' (one row per sample)"),
            (len(self.slip_grid) == 3 and self.slip_grid[2] >= 2 and self.slip_grid[1] > self.slip_grid[0],
             "slip_grid must be (start < stop, n >= 2)"),
            (self.min_points > N_THETA, f"min_points must be > {N_THETA}"),
            (self.cond_max > 1.0, "cond_max must be > 1"),
        ]
        for ok, msg in checks:
            if not ok:
                raise InputError(f"GripConfig: {msg}")
        n_keep = (self.n_steps - self.burn_steps) // self.thin
        if n_keep < 4:
            raise InputError("GripConfig: n_steps, burn_in and thin leave fewer than 4 draws per chain")

    @property
    def burn_steps(self) -> int:
        """Burn-in in steps."""
        return int(self.burn_in * self.n_steps)


PAPER_CASE: dict[str, object] = {"bounds": TABLE3_BOUNDS, "max_peak_slip": 0.1, "n_ml_starts": 8, "min_points": 20,
                                 "keep_negative_slip": False, "max_steps": 160_000}
"""The friction paper's simulated-case settings that differ from the shipped defaults
(:meth:`GripConfig.paper_case`)."""


@dataclass(frozen=True)
class MuMax:
    """Posterior of the grip potential mu_max (friction, dimensionless)."""

    mean: float
    std: float
    lower: float
    """Lower end of the equal-tailed credible interval."""
    upper: float
    """Upper end of the equal-tailed credible interval."""
    prob: float
    """Probability of the interval."""


@dataclass(frozen=True)
class GripCurve:
    """Posterior quantiles of mu(s) over a slip grid (Eq. 26 per draw)."""

    slip: np.ndarray
    q05: np.ndarray
    q50: np.ndarray
    q95: np.ndarray

    def to_dict(self) -> dict:
        return {k: getattr(self, k).tolist() for k in ("slip", "q05", "q50", "q95")}


@dataclass(frozen=True)
class GripEstimate:
    """One grip fit. JSON via :meth:`to_dict` with the field names of docs/cli.md."""

    mu_max: MuMax
    """Grip potential posterior over the retained draws (friction, -)."""
    slip_at_peak_mean: float
    """Posterior mean of the slip at the curve maximum (slip ratio, -)."""
    slip_at_peak_std: float
    """Posterior std of the slip at the curve maximum."""
    theta: dict
    """Posterior means of B (1/slip), C, D, E, s_h (slip), s_v over the retained draws (Eq. 25)."""
    theta_cov: np.ndarray
    """Posterior covariance [6, 6] of the retained draws (used for warm starts)."""
    theta_ml: dict
    """theta_ML (Algorithm 1, step 3)."""
    mu_max_ml: float
    """Curve maximum of theta_ML (friction)."""
    sigma: float
    """Noise std of the likelihood (friction): posterior mean with ``sigma_mode="sampled"``, else the plugged-in
    ML value (Eq. 17, or the exact errors-in-variables ML with per-sample variances)."""
    sigma_ml: float
    """ML estimate of sigma (the chains' start), friction."""
    ml_cond: float
    """Condition number of F at theta_ML (Eq. 16)."""
    ml_ill_conditioned: bool
    """True when the Eq. (27) fallback proposal was used."""
    r_hat_max: float
    """Largest split R-hat over B, C, D, E, s_h, s_v, sigma (if sampled) and mu_max (all chains)."""
    ess_bulk_min: float
    """Smallest bulk ESS over the same quantities."""
    ess_tail_min: float
    """Smallest tail ESS (5 % / 95 % quantiles) over the same quantities."""
    diagnostics: dict
    """Per quantity: {"r_hat", "ess_bulk", "ess_tail"}."""
    mu_max_r_hat: float
    """Split R-hat of mu_max per draw (retained draws for 'truncated', all draws for 'posthoc')."""
    mu_max_ess_bulk: float
    """Bulk ESS of mu_max per draw (as above)."""
    acceptance: tuple[float, ...]
    """Acceptance rate after burn-in per chain (target 0.234)."""
    converged: bool
    """Exactly the project's rule: split R-hat <= 1.01 and bulk and tail ESS >= 400 (the configured
    thresholds) on every curve parameter, sigma and mu_max."""
    n_steps_used: int
    """Steps per chain actually run (n_steps, or more up to max_steps when the rule was not met)."""
    mu_max_prior_std: float
    """Std of mu_max under the prior alone (bounds, physical prior), friction."""
    prior_dominated: bool
    """True when the data barely narrowed mu_max: posterior std > prior_dominated_ratio x mu_max_prior_std
    (the curve maximum is not identified by the data; the interval is mostly the prior's)."""
    share_removed_by_prior: float
    """Share of draws dropped by the post-hoc physical prior (0 with the truncated prior)."""
    prior_mode: str
    """'posthoc' or 'truncated'."""
    max_peak_slip: float
    """Physical-prior limit on the slip at the peak."""
    n_points: int
    """Points used in the fit (after cleaning, braking samples mirrored or dropped)."""
    n_removed_nonfinite: int
    """Non-finite (slip, mu) pairs removed."""
    n_braking: int
    """Samples with negative slip (kept, mirrored or dropped: ``keep_negative_slip``, ``mirror_braking``)."""
    n_draws: int
    """Retained draws (all chains)."""
    warm_started: bool
    """True when the fit started from a previous estimate instead of a fresh multi-start ML."""
    elapsed_s: float
    """Total wall time of the fit, s."""
    elapsed_ml_s: float
    """Wall time of the ML stage, s."""
    elapsed_mcmc_s: float
    """Wall time of the chains, s."""
    curve: GripCurve
    """Curve quantiles over the configured slip grid."""
    shape_mean: tuple[float, ...] = (float("nan"),) * 3
    """Posterior mean of the tire shape y = (B C D, C, E) (input of a learnt shape prior)."""
    shape_cov: np.ndarray | None = field(default=None, repr=False, compare=False)
    """Posterior covariance [3, 3] of y."""
    shape_prior_used: bool = False
    """True when the fit used a tire-shape prior."""
    slip_components: int = 0
    """Components of the deconvolved true-slip distribution (0: no slip variances, or ``slip_prior="flat"``)."""
    chains: ChainResult | None = field(default=None, repr=False, compare=False)
    """The raw chains (not serialised)."""

    @property
    def slip_at_peak(self) -> dict:
        return {"mean": self.slip_at_peak_mean, "std": self.slip_at_peak_std}

    # flat accessors (used by the grip node and pipeline)
    @property
    def mu_max_mean(self) -> float:
        return self.mu_max.mean

    @property
    def mu_max_std(self) -> float:
        return self.mu_max.std

    @property
    def mu_max_lower(self) -> float:
        return self.mu_max.lower

    @property
    def mu_max_upper(self) -> float:
        return self.mu_max.upper

    @property
    def curve_slip(self) -> np.ndarray:
        return self.curve.slip

    @property
    def curve_q05(self) -> np.ndarray:
        return self.curve.q05

    @property
    def curve_q50(self) -> np.ndarray:
        return self.curve.q50

    @property
    def curve_q95(self) -> np.ndarray:
        return self.curve.q95

    def to_dict(self) -> dict:
        """JSON-ready dictionary (the field names of docs/cli.md: mu_max, slip_at_peak, theta, r_hat_max, ...)."""
        return {
            "mu_max": asdict(self.mu_max),
            "slip_at_peak": self.slip_at_peak,
            "theta": {k: float(v) for k, v in self.theta.items()},
            "theta_ml": {k: float(v) for k, v in self.theta_ml.items()},
            "theta_cov": self.theta_cov.tolist(),
            "mu_max_ml": self.mu_max_ml, "sigma": self.sigma, "sigma_ml": self.sigma_ml,
            "ml_cond": self.ml_cond if math.isfinite(self.ml_cond) else None,
            "ml_ill_conditioned": self.ml_ill_conditioned,
            "r_hat_max": _nan_to_none(self.r_hat_max), "ess_bulk_min": _nan_to_none(self.ess_bulk_min),
            "mu_max_r_hat": _nan_to_none(self.mu_max_r_hat), "mu_max_ess_bulk": _nan_to_none(self.mu_max_ess_bulk),
            "ess_tail_min": _nan_to_none(self.ess_tail_min),
            "diagnostics": {k: {q: _nan_to_none(x) for q, x in v.items()} for k, v in self.diagnostics.items()},
            "acceptance": list(self.acceptance), "converged": self.converged,
            "n_steps_used": self.n_steps_used, "prior_dominated": self.prior_dominated,
            "mu_max_prior_std": self.mu_max_prior_std, "shape_prior_used": self.shape_prior_used,
            "shape_mean": dict(zip(("BCD", "C", "E"), self.shape_mean)), "slip_components": self.slip_components,
            "share_removed_by_prior": self.share_removed_by_prior, "prior_mode": self.prior_mode,
            "max_peak_slip": self.max_peak_slip, "n_points": self.n_points,
            "n_removed_nonfinite": self.n_removed_nonfinite, "n_braking": self.n_braking,
            "n_draws": self.n_draws, "warm_started": self.warm_started,
            "elapsed_s": self.elapsed_s, "elapsed_ml_s": self.elapsed_ml_s, "elapsed_mcmc_s": self.elapsed_mcmc_s,
            "curve": self.curve.to_dict(),
        }


def _nan_to_none(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def ml_sigma(s: np.ndarray, mu: np.ndarray, theta: np.ndarray, slip_var: np.ndarray | None = None,
             mu_var: np.ndarray | None = None, bounds: tuple[float, float] = (1e-5, 1.0),
             lateral: np.ndarray | None = None, shared: np.ndarray | None = None,
             groups: np.ndarray | None = None) -> float:
    """Maximum-likelihood sigma (friction) of the exact errors-in-variables likelihood at ``theta``
    (:func:`~vehcal_ros.models.pacejka.gauss_nll`, log-variance term included; no floor): a 1-D bounded
    minimisation over log sigma. Without per-sample variances this is sqrt(V/N) (Eq. 17 has N - 6)."""
    from scipy.optimize import minimize_scalar

    vs = np.zeros(0) if slip_var is None else np.ascontiguousarray(slip_var, dtype=float)
    vm = np.zeros(0) if mu_var is None else np.ascontiguousarray(mu_var, dtype=float)
    la = np.zeros(0) if lateral is None else np.ascontiguousarray(lateral, dtype=float)
    sh = np.zeros((0, len(s))) if shared is None else np.ascontiguousarray(shared, dtype=float)
    gr = NO_GROUPS if groups is None else np.ascontiguousarray(groups, dtype=float)
    th = np.ascontiguousarray(theta, dtype=float)
    lo, hi = math.log(bounds[0]), math.log(bounds[1])
    res = minimize_scalar(lambda ls: gauss_nll_groups(s, mu, th, math.exp(2.0 * ls), vs, vm, la, sh, gr),
                          bounds=(lo, hi), method="bounded", options={"xatol": 1e-6})
    return float(math.exp(res.x))


def ml_refine(s: np.ndarray, mu: np.ndarray, theta: np.ndarray, sigma: float, bounds: np.ndarray,
              slip_var: np.ndarray | None, mu_var: np.ndarray | None,
              sigma_bounds: tuple[float, float] = GripConfig.sigma_bounds,
              lateral: np.ndarray | None = None, shared: np.ndarray | None = None,
              groups: np.ndarray | None = None) -> tuple[np.ndarray, float]:
    """(theta, sigma) maximising the exact errors-in-variables likelihood, from the least-squares theta_ML
    (L-BFGS-B in the bounds; with zero per-sample variances least squares already is that maximum)."""
    from scipy.optimize import minimize

    vs = np.zeros(0) if slip_var is None else np.ascontiguousarray(slip_var, dtype=float)
    vm = np.zeros(0) if mu_var is None else np.ascontiguousarray(mu_var, dtype=float)
    la = np.zeros(0) if lateral is None else np.ascontiguousarray(lateral, dtype=float)
    sh = np.zeros((0, len(s))) if shared is None else np.ascontiguousarray(shared, dtype=float)
    gr = NO_GROUPS if groups is None else np.ascontiguousarray(groups, dtype=float)
    b = np.asarray(bounds, dtype=float)
    sig0 = ml_sigma(s, mu, theta, vs, vm, sigma_bounds, la, sh, gr)
    x0 = np.append(np.clip(theta, b[:, 0], b[:, 1]), math.log(sig0))
    lo = np.append(b[:, 0], math.log(sigma_bounds[0]))
    hi = np.append(b[:, 1], math.log(sigma_bounds[1]))

    def nll(x: np.ndarray) -> float:
        return float(gauss_nll_groups(s, mu, np.ascontiguousarray(x[:N_THETA]), math.exp(2.0 * x[N_THETA]), vs,
                                      vm, la, sh, gr))

    res = minimize(nll, x0, method="L-BFGS-B", bounds=list(zip(lo, hi)), options={"maxiter": 200})
    if not (np.all(np.isfinite(res.x)) and res.fun <= nll(x0)):
        return np.asarray(theta, dtype=float), sig0
    return res.x[:N_THETA].copy(), float(math.exp(res.x[N_THETA]))


@lru_cache(maxsize=32)
def prior_mu_max_std(bounds: tuple[tuple[float, float], ...], max_peak_slip: float | None,
                     n: int = 20_000) -> float:
    """Std of mu_max (friction) under the uniform prior in ``bounds`` truncated to curves peaking at slip
    <= max_peak_slip (Monte Carlo, fixed seed; the reference for ``prior_dominated``)."""
    b = np.asarray(bounds, dtype=float)
    rng = np.random.default_rng(12345)
    th = np.ascontiguousarray(b[:, 0] + (b[:, 1] - b[:, 0]) * rng.random((n, N_THETA)))
    mm, sp = peak_batch(th)
    if max_peak_slip is not None:
        mm = mm[sp <= max_peak_slip]
    return float(np.std(mm)) if mm.size > 10 else float("nan")


def chain_ends(previous: GripEstimate, cfg: GripConfig) -> np.ndarray | None:
    """The last draw of each chain of a previous fit as the chains' starts of a warm-started one ([n_chains, 6],
    or 7 with log sigma when both sample sigma), so the chains start spread over the previous posterior instead of
    at its mean. None (start at the mean) without chains, with another number of chains, or when a draw lies
    outside the current bounds or (truncated prior) peaks beyond ``max_peak_slip``."""
    ch = previous.chains
    if ch is None or ch.draws.ndim != 3 or ch.draws.shape[0] != cfg.n_chains or ch.draws.shape[1] == 0:
        return None
    last = np.array(ch.draws[:, -1, :], dtype=float)
    theta = last[:, :N_THETA]
    b = np.asarray(cfg.bounds, dtype=float)
    if not (np.all(np.isfinite(theta)) and np.all(theta > b[:, 0]) and np.all(theta < b[:, 1])):
        return None
    if cfg.prior_mode == "truncated" and not all(peak_slip_at_most(t, cfg.max_peak_slip) for t in theta):
        return None
    sigma = last[:, N_THETA] if last.shape[1] > N_THETA and "sigma" in ch.names else None
    if cfg.sigma_mode == "sampled" and sigma is not None and np.all(sigma > cfg.sigma_bounds[0]) \
            and np.all(sigma < cfg.sigma_bounds[1]):
        return np.ascontiguousarray(np.column_stack([theta, np.log(sigma)]))
    return np.ascontiguousarray(theta)


def optima_starts(x0: np.ndarray, ml: MLFit, bounds: np.ndarray, n_chains: int, gap: float,
                  max_peak_slip: float | None) -> np.ndarray:
    """(n_chains, 6) chain starts (``GripConfig.chain_starts="optima"``): ``x0`` first, then the multi-start ML
    step's local optima whose log-likelihood V / (2 sigma^2) is within ``gap`` of the best, each distinct from the
    starts before it (some parameter apart by more than 2 % of its prior range) and, with ``max_peak_slip``, inside
    the truncated prior; repeated round-robin over the chains."""
    picked = [np.asarray(x0, dtype=float)]
    if ml.start_theta is not None and ml.start_V is not None and ml.sigma > 0.0:
        span = bounds[:, 1] - bounds[:, 0]
        loglik_gap = (np.asarray(ml.start_V) - ml.V) / (2.0 * ml.sigma ** 2)
        for k in np.argsort(ml.start_V):
            th = np.clip(ml.start_theta[k], bounds[:, 0], bounds[:, 1])
            if loglik_gap[k] > gap or not np.all(np.isfinite(th)):
                continue
            if max_peak_slip is not None and not peak_slip_at_most(th, max_peak_slip):
                continue
            if all(np.max(np.abs(th - q) / span) > 0.02 for q in picked):
                picked.append(th)
    return np.array([picked[i % len(picked)] for i in range(n_chains)])


class GripEstimator:
    """Fits the friction curve and its maximum from (slip, mu) samples (friction paper, Algorithm 1)."""

    def __init__(self, config: GripConfig | None = None) -> None:
        self.config = config if config is not None else GripConfig()

    # -- data ------------------------------------------------------------------------------------------
    def prepare(self, slip, mu) -> tuple[np.ndarray, np.ndarray, int, int]:
        """Clean the samples: (s, mu, n_removed_nonfinite, n_braking); raises EstimationError if unusable."""
        s, m, _, _, n_nonfinite, n_braking, _ = self._clean(slip, mu, None, None)
        return s, m, n_nonfinite, n_braking

    def _clean(self, slip, mu, slip_var, mu_var, lateral=None
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None, int, int,
                          np.ndarray | None]:
        cfg = self.config
        s = np.asarray(slip, dtype=float).ravel()
        m = np.asarray(mu, dtype=float).ravel()
        if s.shape != m.shape:
            raise InputError(f"slip and mu must have the same length, got {s.size} and {m.size}")
        extra = {}
        for name, v in (("slip_var", slip_var), ("mu_var", mu_var), ("lateral", lateral)):
            if v is None:
                continue
            v = np.asarray(v, dtype=float).ravel()
            if v.shape != s.shape:
                raise InputError(f"{name} must have one value per sample ({s.size}), got {v.size}")
            extra[name] = v
        finite = np.isfinite(s) & np.isfinite(m)
        for v in extra.values():
            finite &= np.isfinite(v) & (v >= 0.0)
        n_nonfinite = int(s.size - finite.sum())
        s, m = s[finite], m[finite]
        extra = {k: v[finite] for k, v in extra.items()}
        braking = s < 0.0
        n_braking = int(braking.sum())
        if cfg.keep_negative_slip:
            pass
        elif cfg.mirror_braking:
            s = np.where(braking, -s, s)
            m = np.where(braking, -m, m)
        else:
            s, m = s[~braking], m[~braking]
            extra = {k: v[~braking] for k, v in extra.items()}
        if s.size < cfg.min_points:
            raise EstimationError(
                f"too few usable points for a grip fit: {s.size} < min_points={cfg.min_points} "
                f"({n_nonfinite} non-finite removed, {n_braking} braking samples "
                f"{'mirrored' if cfg.mirror_braking else 'dropped'})")
        if float(np.max(np.abs(m))) < cfg.min_mu_excitation:
            raise EstimationError(
                f"unexcited data: max |mu| = {np.max(np.abs(m)):.3g} < min_mu_excitation={cfg.min_mu_excitation}")
        if float(np.ptp(s)) < cfg.min_slip_spread:
            raise EstimationError(
                f"unexcited data: slip spread {np.ptp(s):.3g} < min_slip_spread={cfg.min_slip_spread}")
        vs, vm, la = (np.ascontiguousarray(extra[k]) if k in extra and np.any(extra[k] > 0) else None
                      for k in ("slip_var", "mu_var", "lateral"))
        return np.ascontiguousarray(s), np.ascontiguousarray(m), vs, vm, n_nonfinite, n_braking, la

    # -- start -----------------------------------------------------------------------------------------
    def _truncated_start(self, s: np.ndarray, mu: np.ndarray, ml: MLFit, rng: np.random.Generator) -> np.ndarray:
        """Lowest-V point satisfying the truncated prior: ML starts first, else uniform prior draws."""
        cfg = self.config
        if peak_slip_at_most(ml.theta, cfg.max_peak_slip):
            return ml.theta
        if ml.start_theta is not None:
            ok = np.array([peak_slip_at_most(t, cfg.max_peak_slip) for t in ml.start_theta])
            if ok.any():
                idx = np.flatnonzero(ok)
                return ml.start_theta[idx[np.argmin(ml.start_V[idx])]].copy()
        b = np.asarray(cfg.bounds, dtype=float)
        cand = b[:, 0] + (b[:, 1] - b[:, 0]) * rng.random((8192, N_THETA))
        ok = np.array([peak_slip_at_most(t, cfg.max_peak_slip) for t in cand])
        if not ok.any():
            raise EstimationError("no parameter vector in the bounds satisfies the physical prior")
        cand = np.ascontiguousarray(cand[ok])
        return cand[int(np.argmin(sse_batch(s, mu, cand)))].copy()

    # -- fit -------------------------------------------------------------------------------------------
    def fit(self, slip, mu, warm_start: GripEstimate | None = None, slip_var=None, mu_var=None,
            stop: Callable[[], bool] | None = None, lateral=None,
            slip_distribution: SlipMixture | None = None) -> GripEstimate:
        """Algorithm 1 on the samples; ``warm_start`` replaces the multi-start ML (see docs/grip.md).

        ``slip_var`` (variance of each measured slip, e.g. from block averaging) and ``mu_var`` (variance of
        each friction value, e.g. from a force estimate; zeros for transducer data): the likelihood's variance
        of sample i is sigma^2 + mu_var_i + f'(s_i)^2 slip_var_i (:func:`~vehcal_ros.models.pacejka.gauss_nll`,
        exact Gaussian density with its log-variance term). Without them it is the paper's Eq. (22).

        ``slip_distribution`` (with ``slip_prior="deconvolved"``): the true-slip distribution to take each
        sample's posterior under, e.g. deconvolved from a whole window of which these samples are a subsample;
        default: deconvolved from these samples (:func:`~vehcal_ros.estimation.grip.latent_slip.
        true_slip_distribution`). ``slip_posterior`` says how the posterior enters the likelihood.

        ``lateral`` (per sample |sin alpha| / rho, alpha the tire's slip angle, rho its lateral / longitudinal
        friction peak; from :mod:`grip_signals` with ``tire.combined_slip: ellipse``): the samples' friction is
        the friction ellipse's longitudinal share of the pure-slip curve (:func:`~vehcal_ros.models.pacejka.
        combined`); the curve, its quantiles and mu_max stay those of pure longitudinal slip. The multi-start
        least squares (only the chains' start) ignores it; the ML refinement and the chains use it.

        ``stop()`` true ends the chains within ~5000 steps (e.g. a node shutting down); the estimate then reports
        the rule as it stands on the steps done.

        Warm start: one local TRF fit from the previous posterior mean gives theta_ML and sigma (Eq. 17); the
        previous posterior covariance is the initial proposal (falling back to the ML proposal if it is not
        positive definite); each chain starts at one of its own previous draws picked by their importance weights
        for the new data (``carry_reweight``, :meth:`_reweighted`), else at its last draw (:func:`chain_ends`),
        else at the previous posterior mean; the previous draws (weighted) give the first independence proposal.
        """
        cfg = self.config
        t0 = time.perf_counter()
        s, m, vs, vm, n_nonfinite, n_braking, la = self._clean(slip, mu, slip_var, mu_var, lateral)
        n_points = int(s.size)
        n_components = 0
        shared = groups = None
        s_ls, m_ls = s, m   # the least-squares start's samples: the measured slips, or their posterior means
        if vs is not None and cfg.slip_prior == "deconvolved":  # measured slips -> their true slips' posteriors
            if slip_distribution is not None and n_braking and cfg.mirror_braking and not cfg.keep_negative_slip:
                raise InputError("slip_distribution describes the slips as given: it cannot be combined with "
                                 "mirror_braking (use keep_negative_slip)")
            mix = slip_distribution if slip_distribution is not None else true_slip_distribution(s, vs)
            n_components = mix.n_components
            post_mean, post_var = (np.ascontiguousarray(x) for x in mix.posterior(s, vs))
            s_ls = post_mean
            if cfg.slip_posterior == "slices":   # rows of posterior slices (pacejka.gauss_nll_groups_into)
                rows = mix.posterior_slices(s, vs)
                s, vs, groups = rows.slip, rows.slip_var, rows.groups
                m, vm, la = (None if x is None else np.ascontiguousarray(x[rows.sample]) for x in (m, vm, la))
            else:
                if cfg.slip_mean_error:
                    shared = mix.shared_loadings(s, vs)
                s, vs = post_mean, post_var
            vs = vs if np.any(vs > 0.0) else None
        ss = np.random.SeedSequence(cfg.seed)
        ss_ml, ss_start, ss_chain = ss.spawn(3)
        rng_ml = np.random.default_rng(ss_ml)
        b = np.asarray(cfg.bounds, dtype=float)
        truncated = cfg.prior_mode == "truncated"
        eiv = vs is not None or vm is not None or la is not None or shared is not None or groups is not None
        if cfg.sigma_mode == "marginal" and eiv:
            raise InputError("GripConfig: sigma_mode='marginal' cannot take per-sample variances; use 'sampled'")
        if warm_start is not None:
            prev_mean = np.array([warm_start.theta[k] for k in THETA_NAMES], dtype=float)
            prev_mean = np.clip(prev_mean, b[:, 0], b[:, 1])
            ml = multistart_fit(s_ls, m_ls, cfg.bounds, n_starts=cfg.n_ml_starts if cfg.chain_starts == "optima"
                                else 0, rng=rng_ml, extra_starts=prev_mean, cond_max=cfg.cond_max,
                                fallback_cov=cfg.fallback_cov, keep_starts=True)
            x0 = prev_mean
            starts = chain_ends(warm_start, cfg)  # each chain goes on from where the previous fit's ended
            try:
                S0 = np.linalg.cholesky(np.asarray(warm_start.theta_cov, dtype=float)[:N_THETA, :N_THETA]
                                        + 1e-12 * np.eye(N_THETA))
            except np.linalg.LinAlgError:
                S0 = np.linalg.cholesky(ml.proposal_cov)
        else:
            ml = multistart_fit(s_ls, m_ls, cfg.bounds, n_starts=cfg.n_ml_starts, rng=rng_ml, cond_max=cfg.cond_max,
                                fallback_cov=cfg.fallback_cov, keep_starts=True)
            x0 = ml.theta
            starts = None
            S0 = np.linalg.cholesky(ml.proposal_cov)
        carried = warm_start.chains.draws if warm_start is not None and warm_start.chains is not None else None
        theta_ml, sigma_ml = ml.theta, ml.sigma
        if eiv:  # the ML step on the exact errors-in-variables likelihood, from the least-squares fit
            theta_ml, sigma_ml = ml_refine(s, m, ml.theta, ml.sigma, b, vs, vm, cfg.sigma_bounds, la, shared, groups)
            if warm_start is None:
                x0 = theta_ml
        sigma_ml = float(np.clip(sigma_ml, *cfg.sigma_bounds))
        if truncated and not peak_slip_at_most(x0, cfg.max_peak_slip):
            x0 = self._truncated_start(s_ls, m_ls, ml, np.random.default_rng(ss_start))
        carried_w, carry_lam = None, float("nan")
        if carried is not None and cfg.carry_reweight and cfg.prior_mode == "truncated":
            carried, carried_w, carry_lam, starts = self._reweighted(warm_start.chains, starts, s, m, b, sigma_ml, vs,
                                                                     vm, la, shared, groups, ss_start.spawn(1)[0])
        if cfg.chain_starts == "optima":
            # chains that all start in one mode (at theta_ML, or going on from a previous fit trapped there) pass
            # split R-hat however many modes the posterior has: a cold fit's chains all start over the ML step's
            # optima, a warm fit's every other chain
            spread = optima_starts(x0 if warm_start is None else ml.theta, ml, b, cfg.n_chains,
                                   cfg.start_loglik_gap, cfg.max_peak_slip if truncated else None)
            if warm_start is None:
                starts = spread
            else:
                starts = np.array(np.tile(x0, (cfg.n_chains, 1)) if starts is None else starts, dtype=float)
                rows = spread[: starts[1::2].shape[0]]
                if starts.shape[1] > N_THETA:   # the chains' log sigma: the ML noise level
                    rows = np.column_stack([rows, np.full(rows.shape[0], math.log(sigma_ml))])
                starts[1::2] = rows
        t_ml = time.perf_counter() - t0

        burn = cfg.burn_steps
        mu_prior_std = prior_mu_max_std(tuple(map(tuple, b.tolist())), cfg.max_peak_slip)
        last: dict = {}

        def rule(res: ChainResult) -> bool:
            last.clear()
            last.update(self._diagnose(res))
            return last["converged"] or (stop is not None and stop())

        chains = run_grip_chains(
            s, m, np.tile(x0, (cfg.n_chains, 1)) if starts is None else starts, S0, b, sigma_ml, cfg.n_steps, burn,
            cfg.thin,
            sigma_mode=cfg.sigma_mode, log_sigma_bounds=tuple(math.log(x) for x in cfg.sigma_bounds),
            max_peak_slip=cfg.max_peak_slip if truncated else None, gamma=cfg.gamma,
            pilot_steps=int(cfg.pilot * burn), seed=ss_chain, slip_var=vs, mu_var=vm, lateral=la, shared=shared,
            groups=groups,
            slope_coords=cfg.slope_coords, max_steps=cfg.max_steps, until=rule, shape_prior=cfg.shape_prior,
            stop=stop, proposal_draws=carried,
            p_independent=cfg.p_independent if carried is not None or cfg.cold_independent else 0.0,
            proposal_weights=carried_w, proposal_components=cfg.proposal_components,
            extend=(lambda res: self.steps_needed(last, res.n_steps)) if cfg.extend_by_need else None,
        )
        chains.extra["carry_lambda"] = carry_lam
        if (last.get("n_steps"), last.get("burn_in")) != (chains.n_steps, chains.burn_in):
            rule(chains)
        t_mcmc = chains.elapsed_s

        draws = chains.draws
        flat = np.ascontiguousarray(draws.reshape(-1, draws.shape[2]))
        theta_flat = np.ascontiguousarray(flat[:, :N_THETA])
        mu_max_all, s_peak_all = last["mu_max"], last["s_peak"]
        keep = s_peak_all <= cfg.max_peak_slip
        n_keep = int(keep.sum())
        share_removed = 0.0 if truncated else float(1.0 - n_keep / flat.shape[0])
        if n_keep < 2:
            raise EstimationError(
                f"the physical prior (slip at peak <= {cfg.max_peak_slip}) removed {flat.shape[0] - n_keep} of "
                f"{flat.shape[0]} draws; the data do not constrain the curve maximum")
        kept = theta_flat[keep]
        mm = mu_max_all[keep]
        sp = s_peak_all[keep]
        a = 0.5 * (1.0 - cfg.interval_prob)
        lo, hi = np.quantile(mm, [a, 1.0 - a])
        mu_max = MuMax(mean=float(mm.mean()), std=float(mm.std(ddof=1)), lower=float(lo), upper=float(hi),
                       prob=float(cfg.interval_prob))
        sigma_post = float(flat[:, N_THETA].mean()) if cfg.sigma_mode == "sampled" else sigma_ml

        grid = np.linspace(cfg.slip_grid[0], cfg.slip_grid[1], int(cfg.slip_grid[2]))
        step = max(1, n_keep // cfg.max_curve_draws)
        curves = mf_batch(grid, np.ascontiguousarray(kept[::step]))
        q05, q50, q95 = np.quantile(curves, [0.05, 0.5, 0.95], axis=0)
        mu_max_ml = float(peak_batch(np.ascontiguousarray(theta_ml[None, :]))[0][0])
        cov = np.cov(kept.T) if n_keep > N_THETA else np.diag(np.asarray(cfg.fallback_cov, dtype=float))
        diag = last["diagnostics"]
        y = np.column_stack([kept[:, 0] * kept[:, 1] * kept[:, 2], kept[:, 1], kept[:, 3]])
        return GripEstimate(
            shape_mean=tuple(map(float, y.mean(axis=0))), shape_cov=np.cov(y.T),
            shape_prior_used=cfg.shape_prior is not None, slip_components=n_components,
            mu_max=mu_max, slip_at_peak_mean=float(sp.mean()), slip_at_peak_std=float(sp.std(ddof=1)),
            theta=dict(zip(THETA_NAMES, map(float, kept.mean(axis=0)))), theta_cov=cov,
            theta_ml=dict(zip(THETA_NAMES, map(float, theta_ml))), mu_max_ml=mu_max_ml, sigma=sigma_post,
            sigma_ml=sigma_ml, ml_cond=float(ml.cond), ml_ill_conditioned=bool(ml.ill_conditioned),
            r_hat_max=last["r_hat_max"], ess_bulk_min=last["ess_bulk_min"], ess_tail_min=last["ess_tail_min"],
            diagnostics=diag, mu_max_r_hat=diag["mu_max"]["r_hat"], mu_max_ess_bulk=diag["mu_max"]["ess_bulk"],
            acceptance=tuple(float(x) for x in chains.acceptance), converged=bool(last["converged"]),
            n_steps_used=int(chains.n_steps), mu_max_prior_std=mu_prior_std,
            prior_dominated=bool(mu_max.std > cfg.prior_dominated_ratio * mu_prior_std),
            share_removed_by_prior=share_removed, prior_mode=cfg.prior_mode, max_peak_slip=float(cfg.max_peak_slip),
            n_points=n_points, n_removed_nonfinite=n_nonfinite, n_braking=n_braking, n_draws=n_keep,
            warm_started=warm_start is not None, elapsed_s=time.perf_counter() - t0, elapsed_ml_s=t_ml,
            elapsed_mcmc_s=t_mcmc, curve=GripCurve(slip=grid, q05=q05, q50=q50, q95=q95), chains=chains,
        )

    def _reweighted(self, prev: ChainResult, starts: np.ndarray | None, s, m, b, sigma_ml, vs, vm, la, shared,
                    groups, seed: np.random.SeedSequence) -> tuple[np.ndarray, np.ndarray, float, np.ndarray | None]:
        """The previous fit's draws carried to this window (``carry_reweight``): (draws [n_chains, k, d], their
        tempered importance weights [n_chains, k], the tempering exponent, the chains' starts). Chain c starts
        at one of its own previous draws picked with probability ~ its weight (each chain keeps to its own part
        of the old posterior, so the starts stay as spread as the old chains), in (theta, log sigma); where a
        chain's weights are all 0, or the chains do not match, the ``starts`` given are kept."""
        cfg = self.config
        draws, logp = prev.draws, prev.logp
        n_c, n_d = logp.shape
        idx = np.unique(np.round(np.linspace(0, n_d - 1, min(n_d, cfg.carry_draws))).astype(int))
        draws = np.ascontiguousarray(draws[:, idx])
        problem = grip_problem(s, m, b, sigma_mode=cfg.sigma_mode, sigma=sigma_ml,
                               log_sigma_bounds=tuple(math.log(x) for x in cfg.sigma_bounds),
                               max_peak_slip=cfg.max_peak_slip, slip_var=vs, mu_var=vm,
                               slope_coords=cfg.slope_coords, shape_prior=cfg.shape_prior, lateral=la,
                               shared=shared, groups=groups)
        lr = carried_log_ratio(draws, logp[:, idx], problem)
        w, lam = tempered_weights(lr)
        if n_c != cfg.n_chains or draws.shape[2] != N_THETA + int(cfg.sigma_mode == "sampled"):
            return draws, w, lam, starts
        rng = np.random.default_rng(seed)
        out = np.full((n_c, draws.shape[2]), np.nan)
        if starts is not None and starts.shape == out.shape:
            out[:] = starts
        for c in range(n_c):
            wc = w[c]
            total = wc.sum()
            if not total > 0.0:
                continue
            x = draws[c, rng.choice(wc.size, p=wc / total)].copy()
            if cfg.sigma_mode == "sampled":
                x[N_THETA] = math.log(x[N_THETA])
            out[c, :x.size] = x
        if not np.all(np.isfinite(out)):   # a chain with no start of either kind: all at the mean as before
            return draws, w, lam, starts
        return draws, w, lam, np.ascontiguousarray(out)

    def steps_needed(self, diag: dict, n_steps: int) -> int:
        """Steps to add to chains of ``n_steps`` steps that failed the rule (``diag``: :meth:`_diagnose` of their
        draws), predicted from its shortfall:
        bulk and tail ESS grow and split R-hat - 1 shrinks about in proportion to the (post burn-in) chain length
        (Vehtari et al. 2021, Sections 3-4), so the chains need the factor f = max(ESS threshold / ESS, (R-hat -
        1) / (threshold - 1)) of their length; 25 % is added for the scatter of the estimates. The sampler clamps
        it to its extension limits (:func:`~vehcal_ros.estimation.grip.posterior.run_grip_chains`
        ``extend``). Non-finite diagnostics: a very large number (the sampler's largest block)."""
        cfg = self.config
        r, b, t = diag["r_hat_max"], diag["ess_bulk_min"], diag["ess_tail_min"]
        if not (math.isfinite(r) and b > 0.0 and t > 0.0):
            return 1 << 40
        f = max(cfg.ess_threshold / b, cfg.ess_tail_threshold / t, (r - 1.0) / (cfg.r_hat_threshold - 1.0))
        return int(math.ceil(n_steps * max(f - 1.0, 0.0) * 1.25))

    def _diagnose(self, res: ChainResult) -> dict:
        """The convergence rule on the chains' draws: split R-hat, bulk and tail ESS of every parameter (B, C,
        D, E, s_h, s_v, sigma if sampled) and of mu_max per draw (arviz's estimators, all quantities in one
        pass: inference.rank_diagnostics)."""
        cfg = self.config
        draws = res.draws
        n_c, n_d, d = draws.shape
        mm, sp = peak_batch(np.ascontiguousarray(draws[..., :N_THETA].reshape(-1, N_THETA)))
        allq = np.concatenate([draws, mm.reshape(n_c, n_d, 1)], axis=2)
        names = [*res.names, "mu_max"]
        d3 = dict(zip(names, zip(*(map(float, v) for v in rank_rhat_ess(np.moveaxis(allq, 2, 0))))))
        diag = {k: {"r_hat": v[0], "ess_bulk": v[1], "ess_tail": v[2]} for k, v in d3.items()}
        arr = np.array(list(d3.values()))
        finite = bool(np.all(np.isfinite(arr)))
        r_max = float(arr[:, 0].max()) if finite else float("nan")
        b_min = float(arr[:, 1].min()) if finite else float("nan")
        t_min = float(arr[:, 2].min()) if finite else float("nan")
        ok = finite and r_max <= cfg.r_hat_threshold and b_min >= cfg.ess_threshold and t_min >= cfg.ess_tail_threshold
        return {"converged": bool(ok), "r_hat_max": r_max, "ess_bulk_min": b_min, "ess_tail_min": t_min,
                "diagnostics": diag, "mu_max": mm, "s_peak": sp, "n_steps": res.n_steps, "burn_in": res.burn_in}
