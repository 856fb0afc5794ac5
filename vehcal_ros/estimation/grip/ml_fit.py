"""Multi-start maximum-likelihood fit of the magic formula (friction paper, Algorithm 1, steps 1-3).

n_ML starting points uniform in the parameter bounds (Table 3 by default); each is refined by bounded
trust-region-reflective least squares (``scipy.optimize.least_squares(method="trf")``, the interior-reflective
method of the paper's ref. [38]) with the analytic Jacobian of Eq. (16); the fit with the smallest V(theta)
(Eq. 14) is kept. Noise: sigma^2 = V / (N - n_theta) (Eq. 17). Covariance: Sigma_ML = sigma^2 (F^T F)^-1
(Eq. 15). When F is ill-conditioned (2-norm condition number above ``cond_max``) or Sigma_ML is absurd
relative to the bounds (not finite, not positive definite, or a standard deviation above ``absurd_frac`` times
the width of that parameter's bounds), the proposal covariance falls back to the diagonal of Eq. (27)
(Remark 3), as the paper does for its low-friction training sets.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import least_squares

from vehcal_ros.models.pacejka import N_THETA, THETA_NAMES, jacobian, residuals

#: Table 3 bounds, rows (lower, upper) per parameter B, C, D, E, s_h, s_v
TABLE3_BOUNDS: tuple[tuple[float, float], ...] = (
    (5.0, 30.0), (0.5, 2.0), (0.2, 2.0), (-2.0, 0.0), (-0.05, 0.05), (-0.3, 0.3),
)
#: Eq. (27): fallback diagonal proposal covariance (units: B^2, 1, 1, 1, slip^2, 1)
FALLBACK_PROPOSAL_COV: tuple[float, ...] = (7.0, 0.43, 0.3, 0.3, 0.005, 0.01)


@dataclass(frozen=True)
class MLFit:
    """Result of :func:`multistart_fit` (arrays in the parameter order B, C, D, E, s_h, s_v)."""

    theta: np.ndarray
    """theta_ML[6], the start with the smallest V (B in 1/slip, s_h in slip, others dimensionless)."""
    V: float
    """V(theta_ML), sum of squared friction residuals (Eq. 14), friction^2."""
    sigma: float
    """Noise standard deviation sqrt(V / (N - 6)) (Eq. 17), friction units."""
    cov: np.ndarray
    """Sigma_ML[6, 6] = sigma^2 (F^T F)^-1 (Eq. 15); may be huge or inf when ill-conditioned."""
    proposal_cov: np.ndarray
    """Covariance to start the sampler with: ``cov`` when usable, else diag(Eq. 27)."""
    cond: float
    """2-norm condition number of F (Eq. 16) at theta_ML."""
    ill_conditioned: bool
    """True when ``proposal_cov`` is the Eq. (27) fallback (ill-conditioned F or absurd Sigma_ML)."""
    n_points: int
    """N, number of data points."""
    n_starts: int
    """n_ML, number of starts."""
    n_success: int
    """Starts whose least-squares run reported success (status > 0)."""
    elapsed_s: float
    """Wall time of the whole multi-start fit, s."""
    start_V: np.ndarray | None = field(default=None)
    """V at the end of every start [n_starts] (only with ``keep_starts=True``)."""
    start_theta: np.ndarray | None = field(default=None)
    """Final theta of every start [n_starts, 6] (only with ``keep_starts=True``)."""

    def to_dict(self) -> dict:
        """JSON-ready dictionary."""
        d = {
            "theta": dict(zip(THETA_NAMES, map(float, self.theta))),
            "V": float(self.V), "sigma": float(self.sigma),
            "cov": np.where(np.isfinite(self.cov), self.cov, np.nan).tolist(),
            "proposal_cov": self.proposal_cov.tolist(), "cond": float(self.cond),
            "ill_conditioned": bool(self.ill_conditioned), "n_points": int(self.n_points),
            "n_starts": int(self.n_starts), "n_success": int(self.n_success), "elapsed_s": float(self.elapsed_s),
        }
        if self.start_V is not None:
            d["start_V"] = self.start_V.tolist()
        return d


def _bounds_array(bounds) -> tuple[np.ndarray, np.ndarray]:
    b = np.asarray(bounds, dtype=float)
    if b.shape != (N_THETA, 2) or not np.all(b[:, 0] < b[:, 1]):
        raise ValueError(f"bounds must be 6 rows of (lower < upper), got {b.tolist()}")
    return b[:, 0].copy(), b[:, 1].copy()


def ml_covariance(
    s: np.ndarray, theta: np.ndarray, sigma: float, bounds=TABLE3_BOUNDS, cond_max: float = 1e7,
    absurd_frac: float = 0.5, fallback_cov=FALLBACK_PROPOSAL_COV,
) -> tuple[np.ndarray, np.ndarray, float, bool]:
    """(Sigma_ML, proposal covariance, cond(F), fallback used) at ``theta`` (Eqs. 15-16, Remark 3, Eq. 27)."""
    lb, ub = _bounds_array(bounds)
    F = jacobian(np.ascontiguousarray(s, dtype=float), np.asarray(theta, dtype=float))
    sv = np.linalg.svd(F, compute_uv=False)
    cond = float(sv[0] / sv[-1]) if sv[-1] > 0 else float("inf")
    try:
        cov = sigma**2 * np.linalg.inv(F.T @ F)
    except np.linalg.LinAlgError:
        cov = np.full((N_THETA, N_THETA), np.inf)
    usable = bool(np.isfinite(cond) and cond <= cond_max and np.all(np.isfinite(cov)))
    if usable:
        cov = 0.5 * (cov + cov.T)
        try:
            np.linalg.cholesky(cov)
        except np.linalg.LinAlgError:
            usable = False
        if usable and np.any(np.sqrt(np.diag(cov)) > absurd_frac * (ub - lb)):
            usable = False
    proposal = cov.copy() if usable else np.diag(np.asarray(fallback_cov, dtype=float))
    return cov, proposal, cond, not usable


def multistart_fit(
    s: np.ndarray, mu: np.ndarray, bounds=TABLE3_BOUNDS, n_starts: int = 16,
    rng: np.random.Generator | int | None = None, extra_starts: np.ndarray | None = None,
    cond_max: float = 1e7, absurd_frac: float = 0.5, fallback_cov=FALLBACK_PROPOSAL_COV,
    keep_starts: bool = False, max_nfev: int = 100,
) -> MLFit:
    """Algorithm 1, steps 1-3: best of ``n_starts`` bounded TRF fits from uniform starts in ``bounds``.

    ``extra_starts[k, 6]`` are tried in addition (e.g. a warm start); ``rng`` seeds the uniform starts.
    """
    t0 = time.perf_counter()
    s = np.ascontiguousarray(s, dtype=float)
    mu = np.ascontiguousarray(mu, dtype=float)
    n = s.shape[0]
    if n <= N_THETA:
        raise ValueError(f"need more than {N_THETA} points for the ML fit (Eq. 17), got {n}")
    lb, ub = _bounds_array(bounds)
    rng = np.random.default_rng(rng)
    starts = lb + (ub - lb) * rng.random((int(n_starts), N_THETA))
    if extra_starts is not None:
        extra = np.clip(np.atleast_2d(np.asarray(extra_starts, dtype=float)), lb, ub)
        starts = np.vstack([extra, starts])
    # strictly interior starts (trf requires lb < x0 < ub)
    eps = 1e-9 * (ub - lb)
    starts = np.clip(starts, lb + eps, ub - eps)

    def fun(th: np.ndarray) -> np.ndarray:
        return residuals(s, mu, th)

    def jac(th: np.ndarray) -> np.ndarray:
        return jacobian(s, th)

    start_V = np.empty(starts.shape[0])
    start_theta = np.empty_like(starts)
    n_success = 0
    for k in range(starts.shape[0]):
        res = least_squares(fun, starts[k], jac=jac, bounds=(lb, ub), method="trf", x_scale="jac",
                            max_nfev=max_nfev)
        start_theta[k] = res.x
        start_V[k] = 2.0 * res.cost  # scipy's cost is V / 2
        n_success += int(res.status > 0)
    best = int(np.argmin(start_V))
    theta = start_theta[best].copy()
    V = float(start_V[best])
    sigma = float(np.sqrt(V / (n - N_THETA)))
    cov, proposal, cond, ill = ml_covariance(s, theta, sigma, bounds, cond_max, absurd_frac, fallback_cov)
    return MLFit(
        theta=theta, V=V, sigma=sigma, cov=cov, proposal_cov=proposal, cond=cond, ill_conditioned=ill,
        n_points=n, n_starts=int(starts.shape[0]), n_success=n_success, elapsed_s=time.perf_counter() - t0,
        start_V=start_V if keep_starts else None, start_theta=start_theta if keep_starts else None,
    )
