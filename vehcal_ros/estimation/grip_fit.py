"""Grip potential from (slip, friction) samples: the friction paper's Algorithm 1 end to end.

papers/tire-road-friction-ml-adaptive-metropolis.md: multi-start ML (steps 1-3, Eqs. 14-17, Eq. 27 fallback),
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
from dataclasses import asdict, dataclass, field

import numpy as np

from vehcal_ros.errors import EstimationError, InputError
from vehcal_ros.inference.adaptive_metropolis import ChainResult, run_grip_chains
from vehcal_ros.inference.least_squares import DEFAULT_BOUNDS, FALLBACK_PROPOSAL_COV, MLFit, multistart_fit
from vehcal_ros.models.pacejka import N_THETA, THETA_NAMES, mf_batch, peak_batch, peak_slip_at_most, slope, sse_batch


@dataclass(frozen=True)
class GripConfig:
    """Settings of :class:`GripEstimator` (defaults: DESIGN in-vehicle settings, Table 3 bounds)."""

    bounds: tuple[tuple[float, float], ...] = DEFAULT_BOUNDS
    """Uniform prior / ML bounds per parameter B, C, D, E, s_h, s_v (Table 3)."""
    n_ml_starts: int = 8
    """n_ML uniform starts of the ML fit (Algorithm 1, step 1)."""
    n_chains: int = 8
    """n_mc adaptive Metropolis chains (step 4)."""
    n_steps: int = 20_000
    """M, steps per chain (step 6)."""
    burn_in: float = 0.5
    """Fraction of each chain discarded as burn-in, in [0, 1)."""
    thin: int = 10
    """Keep every ``thin``-th step after burn-in (step 12)."""
    pilot: float = 0.5
    """Fraction of the burn-in after which the proposal is reset from the pooled empirical covariance
    (Section 3.2); 0 disables it (pure Algorithm 1)."""
    gamma: float = 2.0 / 3.0
    """Adaptation exponent of eta_i = min(1, d i^-gamma), in [0.5, 1] (step 11)."""
    sigma_mode: str = "fixed"
    """"fixed": sigma from Eq. (17) in the likelihood (Eq. 22, the paper); "marginal": sigma integrated out."""
    max_peak_slip: float = 0.1
    """Physical prior: largest admissible slip at the curve maximum (Section 4.2.2)."""
    prior_mode: str = "truncated"
    """"truncated" (zero prior density in the chain; default, same target, no draws wasted) or "posthoc"
    (drop draws after sampling, as the paper)."""
    interval_prob: float = 0.9
    """Probability of the equal-tailed credible interval of mu_max."""
    slip_grid: tuple[float, float, int] = (0.0, 0.3, 61)
    """(start, stop, n) of the slip grid for the curve quantiles q05/q50/q95."""
    seed: int | None = 0
    """Seed of the ML starts and of the chains (same seed and data -> same numbers)."""
    min_points: int = 20
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
    keep_negative_slip: bool = False
    """Keep samples with s < 0 as they are (overrides ``mirror_braking``): for data whose braking samples were
    already mirrored by the sign of the force (:mod:`grip_signals`), a small negative slip is noise around zero
    and dropping or mirroring it would bias the curve near the origin."""
    cond_max: float = 1e7
    """Condition number of F (Eq. 16) above which the Eq. (27) fallback proposal is used."""
    fallback_cov: tuple[float, ...] = FALLBACK_PROPOSAL_COV
    """Diagonal fallback proposal covariance (Eq. 27)."""
    r_hat_threshold: float = 1.01
    """``converged`` needs every R-hat below this (project-wide rule)."""
    ess_threshold: float = 400.0
    """``converged`` needs every bulk ESS above this (project-wide rule)."""
    max_curve_draws: int = 2000
    """Retained draws (evenly subsampled) used for the curve quantiles."""

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
            (self.sigma_mode in ("fixed", "marginal"), "sigma_mode must be 'fixed' or 'marginal'"),
            (0.0 < self.max_peak_slip < 1.0, "max_peak_slip must be in (0, 1)"),
            (self.prior_mode in ("posthoc", "truncated"), "prior_mode must be 'posthoc' or 'truncated'"),
            (0.0 < self.interval_prob < 1.0, "interval_prob must be in (0, 1)"),
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
    """One grip fit. JSON via :meth:`to_dict` with the field names of DESIGN section 6."""

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
    """Noise std used by the likelihood: Eq. (17) at theta_ML (friction)."""
    ml_cond: float
    """Condition number of F at theta_ML (Eq. 16)."""
    ml_ill_conditioned: bool
    """True when the Eq. (27) fallback proposal was used."""
    r_hat_max: float
    """Largest split R-hat over the six parameters (all chains, before the post-hoc prior)."""
    ess_bulk_min: float
    """Smallest bulk ESS over the six parameters."""
    mu_max_r_hat: float
    """Split R-hat of mu_max per draw (retained draws for 'truncated', all draws for 'posthoc')."""
    mu_max_ess_bulk: float
    """Bulk ESS of mu_max per draw (as above)."""
    acceptance: tuple[float, ...]
    """Acceptance rate after burn-in per chain (target 0.234)."""
    converged: bool
    """R-hat < r_hat_threshold and bulk ESS > ess_threshold for all six parameters."""
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
    """Samples with negative slip (mirrored or dropped, see ``mirror_braking``)."""
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
        """JSON-ready dictionary (DESIGN section 6 names: mu_max, slip_at_peak, theta, r_hat_max, ...)."""
        return {
            "mu_max": asdict(self.mu_max),
            "slip_at_peak": self.slip_at_peak,
            "theta": {k: float(v) for k, v in self.theta.items()},
            "theta_ml": {k: float(v) for k, v in self.theta_ml.items()},
            "theta_cov": self.theta_cov.tolist(),
            "mu_max_ml": self.mu_max_ml, "sigma": self.sigma,
            "ml_cond": self.ml_cond if math.isfinite(self.ml_cond) else None,
            "ml_ill_conditioned": self.ml_ill_conditioned,
            "r_hat_max": _nan_to_none(self.r_hat_max), "ess_bulk_min": _nan_to_none(self.ess_bulk_min),
            "mu_max_r_hat": _nan_to_none(self.mu_max_r_hat), "mu_max_ess_bulk": _nan_to_none(self.mu_max_ess_bulk),
            "acceptance": list(self.acceptance), "converged": self.converged,
            "share_removed_by_prior": self.share_removed_by_prior, "prior_mode": self.prior_mode,
            "max_peak_slip": self.max_peak_slip, "n_points": self.n_points,
            "n_removed_nonfinite": self.n_removed_nonfinite, "n_braking": self.n_braking,
            "n_draws": self.n_draws, "warm_started": self.warm_started,
            "elapsed_s": self.elapsed_s, "elapsed_ml_s": self.elapsed_ml_s, "elapsed_mcmc_s": self.elapsed_mcmc_s,
            "curve": self.curve.to_dict(),
        }


def _nan_to_none(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def _rhat_ess(x: np.ndarray) -> tuple[float, float]:
    """Split R-hat and bulk ESS of x[chain, draw] via inference.diagnostics."""
    from vehcal_ros.inference.diagnostics import summarize_draws

    if x.shape[1] < 4:
        return float("nan"), float("nan")
    s = summarize_draws(x[:, :, None], ["q"])["q"]
    return s.r_hat, s.ess_bulk


def odr_sigma(s: np.ndarray, mu: np.ndarray, slip_var: np.ndarray, theta: np.ndarray) -> float:
    """The mu-noise std of the errors-in-variables likelihood: sigma^2 solving
    sum r_i^2 / (sigma^2 + f'(s_i)^2 v_i) = N - n_theta at theta (the analogue of Eq. 17).

    When the slip noise alone explains the residuals, sigma^2 falls to 1 % of Eq. (17)'s value (a floor that
    keeps the likelihood proper)."""
    r2 = (mf_batch(s, np.ascontiguousarray(theta[None, :]))[0] - mu) ** 2
    a = slope(s, theta) ** 2 * slip_var
    dof = max(s.size - N_THETA, 1)
    hi = float(r2.sum() / dof)
    if not hi > 0.0:
        return 1e-6
    lo = 0.01 * hi

    def excess(x: float) -> float:
        return float(np.sum(r2 / (x + a))) - dof

    if excess(lo) <= 0.0:
        return float(np.sqrt(lo))
    from scipy.optimize import brentq

    return float(np.sqrt(brentq(excess, lo, hi, xtol=1e-12 * hi)))


class GripEstimator:
    """Fits the friction curve and its maximum from (slip, mu) samples (friction paper, Algorithm 1)."""

    def __init__(self, config: GripConfig | None = None) -> None:
        self.config = config if config is not None else GripConfig()

    # -- data ------------------------------------------------------------------------------------------
    def prepare(self, slip, mu) -> tuple[np.ndarray, np.ndarray, int, int]:
        """Clean the samples: (s, mu, n_removed_nonfinite, n_braking); raises EstimationError if unusable."""
        s, m, _, n_nonfinite, n_braking = self._clean(slip, mu, None)
        return s, m, n_nonfinite, n_braking

    def _clean(self, slip, mu, slip_var) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, int, int]:
        cfg = self.config
        s = np.asarray(slip, dtype=float).ravel()
        m = np.asarray(mu, dtype=float).ravel()
        v = None if slip_var is None else np.asarray(slip_var, dtype=float).ravel()
        if s.shape != m.shape or (v is not None and v.shape != s.shape):
            raise InputError(f"slip, mu (and slip_var) must have the same length, got {s.size} and {m.size}")
        finite = np.isfinite(s) & np.isfinite(m)
        if v is not None:
            finite &= np.isfinite(v) & (v >= 0.0)
        n_nonfinite = int(s.size - finite.sum())
        s, m = s[finite], m[finite]
        v = None if v is None else v[finite]
        braking = s < 0.0
        n_braking = int(braking.sum())
        if cfg.keep_negative_slip:
            pass
        elif cfg.mirror_braking:
            s = np.where(braking, -s, s)
            m = np.where(braking, -m, m)
        else:
            s, m = s[~braking], m[~braking]
            v = None if v is None else v[~braking]
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
        v = None if v is None else np.ascontiguousarray(v)
        return np.ascontiguousarray(s), np.ascontiguousarray(m), v, n_nonfinite, n_braking

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
    def fit(self, slip, mu, warm_start: GripEstimate | None = None, slip_var=None) -> GripEstimate:
        """Algorithm 1 on the samples; ``warm_start`` replaces the multi-start ML (see docs/grip.md).

        ``slip_var`` (variance of each measured slip, e.g. from block averaging): the chains use the
        errors-in-variables likelihood (:func:`~vehcal_ros.models.pacejka.sse_odr`) with sigma from
        :func:`odr_sigma`; without it the paper's Eq. (22).

        Warm start: one local TRF fit from the previous posterior mean gives theta_ML and sigma (Eq. 17); the
        chains start at the previous posterior mean with the previous posterior covariance as initial proposal
        (falling back to the ML proposal if it is not positive definite).
        """
        cfg = self.config
        t0 = time.perf_counter()
        s, m, vs, n_nonfinite, n_braking = self._clean(slip, mu, slip_var)
        ss = np.random.SeedSequence(cfg.seed)
        ss_ml, ss_start, ss_chain = ss.spawn(3)
        rng_ml = np.random.default_rng(ss_ml)
        b = np.asarray(cfg.bounds, dtype=float)
        truncated = cfg.prior_mode == "truncated"
        if warm_start is not None:
            prev_mean = np.array([warm_start.theta[k] for k in THETA_NAMES], dtype=float)
            prev_mean = np.clip(prev_mean, b[:, 0], b[:, 1])
            ml = multistart_fit(s, m, cfg.bounds, n_starts=0, rng=rng_ml, extra_starts=prev_mean,
                                cond_max=cfg.cond_max, fallback_cov=cfg.fallback_cov, keep_starts=True)
            x0 = prev_mean
            try:
                S0 = np.linalg.cholesky(np.asarray(warm_start.theta_cov, dtype=float) + 1e-12 * np.eye(N_THETA))
            except np.linalg.LinAlgError:
                S0 = np.linalg.cholesky(ml.proposal_cov)
        else:
            ml = multistart_fit(s, m, cfg.bounds, n_starts=cfg.n_ml_starts, rng=rng_ml, cond_max=cfg.cond_max,
                                fallback_cov=cfg.fallback_cov, keep_starts=True)
            x0 = ml.theta
            S0 = np.linalg.cholesky(ml.proposal_cov)
        if truncated and not peak_slip_at_most(x0, cfg.max_peak_slip):
            x0 = self._truncated_start(s, m, ml, np.random.default_rng(ss_start))
        t_ml = time.perf_counter() - t0

        burn = cfg.burn_steps
        eiv = vs is not None and cfg.sigma_mode == "fixed" and bool(np.any(vs > 0.0))
        sigma = odr_sigma(s, m, vs, ml.theta) if eiv else ml.sigma
        chains = run_grip_chains(
            s, m, np.tile(x0, (cfg.n_chains, 1)), S0, b, sigma, cfg.n_steps, burn, cfg.thin,
            sigma_mode=cfg.sigma_mode, max_peak_slip=cfg.max_peak_slip if truncated else None, gamma=cfg.gamma,
            pilot_steps=int(cfg.pilot * burn), seed=ss_chain, slip_var=vs if eiv else None,
            slope_coords=cfg.slope_coords,
        )
        t_mcmc = chains.elapsed_s

        draws = chains.draws
        flat = np.ascontiguousarray(draws.reshape(-1, N_THETA))
        mu_max_all, s_peak_all = peak_batch(flat)
        keep = s_peak_all <= cfg.max_peak_slip
        n_keep = int(keep.sum())
        share_removed = 0.0 if truncated else float(1.0 - n_keep / flat.shape[0])
        if n_keep < 2:
            raise EstimationError(
                f"the physical prior (slip at peak <= {cfg.max_peak_slip}) removed {flat.shape[0] - n_keep} of "
                f"{flat.shape[0]} draws; the data do not constrain the curve maximum")
        kept = flat[keep]
        mm = mu_max_all[keep]
        sp = s_peak_all[keep]
        a = 0.5 * (1.0 - cfg.interval_prob)
        lo, hi = np.quantile(mm, [a, 1.0 - a])
        mu_max = MuMax(mean=float(mm.mean()), std=float(mm.std(ddof=1)), lower=float(lo), upper=float(hi),
                       prob=float(cfg.interval_prob))

        from vehcal_ros.inference.diagnostics import summarize_draws

        summ = summarize_draws(draws, THETA_NAMES)
        r_hats = np.array([v.r_hat for v in summ.values()])
        esss = np.array([v.ess_bulk for v in summ.values()])
        r_hat_max = float(np.max(r_hats)) if np.all(np.isfinite(r_hats)) else float("nan")
        ess_min = float(np.min(esss)) if np.all(np.isfinite(esss)) else float("nan")
        mu_r, mu_ess = _rhat_ess(mu_max_all.reshape(draws.shape[0], draws.shape[1]))
        converged = bool(math.isfinite(r_hat_max) and r_hat_max < cfg.r_hat_threshold
                         and ess_min > cfg.ess_threshold)

        grid = np.linspace(cfg.slip_grid[0], cfg.slip_grid[1], int(cfg.slip_grid[2]))
        step = max(1, n_keep // cfg.max_curve_draws)
        curves = mf_batch(grid, np.ascontiguousarray(kept[::step]))
        q05, q50, q95 = np.quantile(curves, [0.05, 0.5, 0.95], axis=0)
        mu_max_ml = float(peak_batch(ml.theta[None, :])[0][0])
        cov = np.cov(kept.T) if n_keep > N_THETA else np.diag(np.asarray(cfg.fallback_cov, dtype=float))
        return GripEstimate(
            mu_max=mu_max, slip_at_peak_mean=float(sp.mean()), slip_at_peak_std=float(sp.std(ddof=1)),
            theta=dict(zip(THETA_NAMES, map(float, kept.mean(axis=0)))), theta_cov=cov,
            theta_ml=dict(zip(THETA_NAMES, map(float, ml.theta))), mu_max_ml=mu_max_ml, sigma=float(sigma),
            ml_cond=float(ml.cond), ml_ill_conditioned=bool(ml.ill_conditioned), r_hat_max=r_hat_max,
            ess_bulk_min=ess_min, mu_max_r_hat=float(mu_r), mu_max_ess_bulk=float(mu_ess),
            acceptance=tuple(float(x) for x in chains.acceptance), converged=converged,
            share_removed_by_prior=share_removed, prior_mode=cfg.prior_mode, max_peak_slip=float(cfg.max_peak_slip),
            n_points=int(s.size), n_removed_nonfinite=n_nonfinite, n_braking=n_braking, n_draws=n_keep,
            warm_started=warm_start is not None, elapsed_s=time.perf_counter() - t0, elapsed_ml_s=t_ml,
            elapsed_mcmc_s=t_mcmc, curve=GripCurve(slip=grid, q05=q05, q50=q50, q95=q95), chains=chains,
        )
