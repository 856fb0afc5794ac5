"""Bounded nonlinear least squares with a finite-difference Jacobian evaluated in parallel.

Parallel-estimation paper (papers/parallel-parameter-estimation-vehicle-dynamics.md): minimise
r(p) = 1/2 |f(p)|^2 (Eq. 11) subject to l <= p <= u (Eq. 12) by the Gauss-Newton/Levenberg-Marquardt family
(Eq. 13), where f(p) is a simulation residual whose derivatives exist only as finite differences:

* one-sided differences (Eq. 14), forward when ``p + h e_i`` is feasible, else backward;
* central differences (Eq. 15) when ``diff="central"`` and both ``p +- h e_i`` are feasible.

All perturbed evaluations of one Jacobian are submitted in one round to any
:class:`concurrent.futures.Executor` ("Parallel Optimization": the server processes evaluate ``p +- h e_i``
simultaneously while the client waits); the residual at the base point, already computed by the solver, is
reused. A residual may be *segmented* (several independent maneuvers, :class:`SegmentedResidual`): then every
evaluation, the solver's trial points included, is split into one task per segment, so the trial-point
evaluations run in parallel too.

Step size (Gill, Murray & Wright, the paper's ref. [8]): ``h_i = rel_step * max(|p_i|, typical_x_i)`` with
``rel_step = sqrt(f_noise)`` for one-sided and ``f_noise ** (1/3)`` for central differences, where ``f_noise``
is the relative accuracy of the residual (default 1e-12: a long semi-implicit Euler simulation loses ~4
digits to rounding, so the optimal steps are ~1e-6 and ~1e-4 relative). ``typical_x`` (default ``|x0|``,
1 where ``x0`` is 0) is the floor that keeps ``h`` from vanishing near zero. ``h`` is rounded so that
``(p + h) - p == h`` exactly, and shrunk to fit a box narrower than ``h``.

Solvers: ``scipy.optimize.least_squares`` ``"trf"`` (trust-region reflective, bounds honoured) and ``"lm"``
(MINPACK Levenberg-Marquardt, the paper's LMDER; unbounded, so finite bounds are imposed by the smooth change of
variables ``p = l + (u - l)(1 + sin z)/2`` (both bounds) or ``p = l + s(sqrt(z^2 + 1) - 1)`` (one bound, scale
``s = max(|x0|, 1)``), the MINUIT transform; the Jacobian is chained with ``dp/dz``).

Non-finite residuals: a point where f is NaN/inf is given the finite penalty residual
``penalty`` (default ``1e3 max(1, |f(x0)|_inf)`` in every entry, so its cost exceeds ``r(x0)``): the solver
rejects that step and shrinks its trust region. In a Jacobian, a non-finite perturbed point falls back to the
other one-sided difference (one more round), or for central differences to the finite side; a column with no
finite stencil is set to 0 and counted. NaN never reaches the result.

Statistics at p* (the paper's "statistical analysis"): J = df/dp(p*) by the same scheme, sigma^2 =
|f(p*)|^2 / (m - n), covariance sigma^2 (J^T J)^-1 and approximate 95 % confidence intervals
``p* +- t_{0.975, m-n} sqrt(diag(cov))`` (Student t with m - n degrees of freedom; equal to the normal 1.96 for
large m). Ill-conditioning is judged on the column-equilibrated J^T J (``D^-1 J^T J D^-1``, D = column norms),
which is independent of parameter units: above ``cond_max`` (default 1e8) the fit carries a warning.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np
from scipy import stats
from scipy.optimize import least_squares

from vehcal_ros.inference.executors import executor_workers

__all__ = ["ParallelFit", "SegmentedResidual", "fd_jacobian", "parallel_least_squares"]

DEFAULT_F_NOISE = 1e-12
DEFAULT_COND_MAX = 1e8


@runtime_checkable
class SegmentedResidual(Protocol):
    """A residual made of independent parts (e.g. one per maneuver): f(p) = concat_k segment(p, k)."""

    n_segments: int

    def segment(self, p: np.ndarray, k: int) -> np.ndarray:
        """Residual vector of segment ``k`` at parameters ``p``."""
        ...


def _eval_task(fun: Any, p: np.ndarray, k: int) -> np.ndarray:
    """One objective evaluation (module level so process and Dask backends can pickle it)."""
    try:
        r = fun.segment(p, k) if k >= 0 else fun(p)
    except ArithmeticError:  # overflow/zero division in a diverging simulation: same as non-finite
        return np.array([np.nan])
    return np.ascontiguousarray(np.asarray(r, dtype=float).ravel())


@dataclass(frozen=True)
class ParallelFit:
    """Result of :func:`parallel_least_squares` (arrays in parameter order; units those of p and f)."""

    x: np.ndarray
    """p*, the estimate [n]."""
    residual: np.ndarray
    """f(p*) [m], the residual vector (simulated minus measured, as the residual function defines it)."""
    cost: float
    """r(p*) = 1/2 |f(p*)|^2 (Eq. 11)."""
    jac: np.ndarray
    """J = df/dp at p* [m, n] (finite differences, Eqs. 14-15)."""
    sigma2: float
    """sigma^2 = |f(p*)|^2 / (m - n), the noise variance estimate."""
    cov: np.ndarray
    """sigma^2 (J^T J)^-1 [n, n]; +inf everywhere when J is numerically rank deficient."""
    stderr: np.ndarray
    """sqrt(diag(cov)) [n]."""
    ci_lower: np.ndarray
    """Lower ends of the approximate ``ci_level`` confidence intervals [n]."""
    ci_upper: np.ndarray
    """Upper ends [n]."""
    ci_level: float
    """Confidence level of the intervals (0.95 default)."""
    ci_quantile: float
    """Multiplier of ``stderr``: Student t quantile with m - n degrees of freedom."""
    cond: float
    """2-norm condition number of J^T J (unit dependent)."""
    cond_scaled: float
    """Condition number of the column-equilibrated J^T J (unit independent; judged against cond_max)."""
    ill_conditioned: bool
    """True when cond_scaled > cond_max or J is rank deficient."""
    warning: str | None
    """Human-readable warning (ill-conditioning, penalised evaluations, zeroed Jacobian columns), or None."""
    n_residual_evals: int
    """Objective evaluations in total: solver trial points, Jacobian stencil points, fallbacks, final J."""
    n_jacobian_evals: int
    """Jacobians built (solver requests plus the final one for the statistics when not reused)."""
    nfev: int
    """scipy's count of residual evaluations."""
    njev: int
    """scipy's count of Jacobian evaluations."""
    n_nonfinite: int
    """Evaluations whose residual was not finite (penalised or replaced by a fallback)."""
    n_zero_columns: int
    """Jacobian columns set to zero because no finite stencil existed."""
    stalled: bool
    """True when non-finite evaluations occurred and p* is not stationary (predicted_decrease > 1e-3): the
    solver stopped against the edge of the region where the residual is finite, not at a minimum."""
    predicted_decrease: float
    """Cost decrease a Gauss-Newton step from p* predicts, relative to r(p*) (~0 at a minimum)."""
    wall_time_s: float
    """Wall time of the whole fit, s."""
    method: str
    """"trf" or "lm"."""
    diff: str
    """"forward" (Eq. 14) or "central" (Eq. 15)."""
    status: int
    """scipy status (> 0 converged)."""
    message: str
    """scipy termination message."""
    n_workers: int
    """Parallelism of the executor used (1 for serial)."""
    names: tuple[str, ...] | None = field(default=None)
    """Parameter names, if given."""

    @property
    def success(self) -> bool:
        """scipy converged and the solver did not stall against a non-finite region."""
        return self.status > 0 and not self.stalled

    def to_dict(self) -> dict:
        """JSON-ready dictionary (infinite covariances become null)."""

        def clean(a: np.ndarray) -> Any:
            return np.where(np.isfinite(a), a, np.nan).astype(object).tolist() if np.ndim(a) else float(a)

        def lst(a: np.ndarray) -> list:
            return [None if not math.isfinite(v) else float(v) for v in np.ravel(a)]

        names = self.names or tuple(f"p{i}" for i in range(self.x.size))
        return {
            "parameters": {
                nm: {"value": float(self.x[i]), "stderr": lst(self.stderr[i:i + 1])[0],
                     "ci_lower": lst(self.ci_lower[i:i + 1])[0], "ci_upper": lst(self.ci_upper[i:i + 1])[0]}
                for i, nm in enumerate(names)
            },
            "x": lst(self.x), "cost": float(self.cost), "sigma2": float(self.sigma2),
            "cov": [lst(row) for row in self.cov], "ci_level": self.ci_level, "ci_quantile": self.ci_quantile,
            "cond": float(self.cond) if math.isfinite(self.cond) else None,
            "cond_scaled": float(self.cond_scaled) if math.isfinite(self.cond_scaled) else None,
            "ill_conditioned": bool(self.ill_conditioned), "warning": self.warning,
            "n_residuals": int(self.residual.size), "n_residual_evals": self.n_residual_evals,
            "n_jacobian_evals": self.n_jacobian_evals, "nfev": self.nfev, "njev": self.njev,
            "n_nonfinite": self.n_nonfinite, "n_zero_columns": self.n_zero_columns, "stalled": self.stalled,
            "predicted_decrease": self.predicted_decrease,
            "elapsed_s": float(self.wall_time_s), "method": self.method, "diff": self.diff,
            "status": self.status, "message": self.message, "success": self.success,
            "n_workers": self.n_workers,
        }


class _Evaluator:
    """Evaluates the residual at batches of points, in the caller or on an executor, and counts."""

    def __init__(self, fun: Callable[[np.ndarray], np.ndarray] | SegmentedResidual,
                 executor: Executor | None) -> None:
        self.fun = fun
        self.executor = executor
        n_seg = int(getattr(fun, "n_segments", 1) or 1) if isinstance(fun, SegmentedResidual) else 1
        self.segments: list[int] = list(range(n_seg)) if isinstance(fun, SegmentedResidual) else [-1]
        self.n_evals = 0
        self.n_nonfinite = 0
        self._last: list[tuple[bytes, np.ndarray]] = []

    def _remember(self, p: np.ndarray, r: np.ndarray) -> None:
        self._last.append((p.tobytes(), r))
        if len(self._last) > 4:
            self._last.pop(0)

    def lookup(self, p: np.ndarray) -> np.ndarray | None:
        key = p.tobytes()
        for k, r in reversed(self._last):
            if k == key:
                return r
        return None

    def many(self, points: Sequence[np.ndarray], *, in_caller: bool = False) -> list[np.ndarray]:
        """Residuals at ``points`` (NaN-containing when not finite); one submit round for all of them.

        ``in_caller`` evaluates an unsegmented residual in the calling thread (the paper's client process).
        """
        pts = [np.ascontiguousarray(p, dtype=float) for p in points]
        self.n_evals += len(pts)
        tasks = [(i, k) for i in range(len(pts)) for k in self.segments]
        serial = self.executor is None or (in_caller and len(self.segments) == 1)
        if serial:
            parts = [_eval_task(self.fun, pts[i], k) for i, k in tasks]
        else:
            futs = [self.executor.submit(_eval_task, self.fun, pts[i], k) for i, k in tasks]
            parts = [f.result() for f in futs]
        out: list[np.ndarray] = []
        ns = len(self.segments)
        for i in range(len(pts)):
            seg = parts[i * ns:(i + 1) * ns]
            r = seg[0] if ns == 1 else np.concatenate(seg)
            if not np.all(np.isfinite(r)):
                self.n_nonfinite += 1
            out.append(r)
        return out


def _steps(p: np.ndarray, lb: np.ndarray, ub: np.ndarray, rel: float, typical: np.ndarray,
           central: bool) -> tuple[np.ndarray, np.ndarray]:
    """Per column: step ``h`` (signed) and kind (0 one-sided, 1 central) chosen from the bounds (Eqs. 14-15)."""
    n = p.size
    h = rel * np.maximum(np.abs(p), typical)
    h = (p + h) - p  # exactly representable
    step = np.empty(n)
    kind = np.zeros(n, dtype=np.int64)
    for i in range(n):
        fwd = p[i] + h[i] <= ub[i]
        bwd = p[i] - h[i] >= lb[i]
        if central and fwd and bwd:
            step[i] = h[i]
            kind[i] = 1
        elif fwd:
            step[i] = h[i]
        elif bwd:
            step[i] = -h[i]
        else:  # box narrower than h: use the larger room
            up, down = ub[i] - p[i], p[i] - lb[i]
            step[i] = up if up >= down else -down
            if step[i] == 0.0:
                raise ValueError(f"parameter {i}: lower and upper bound coincide ({lb[i]})")
    return step, kind


def fd_jacobian(ev: _Evaluator, p: np.ndarray, f0: np.ndarray, lb: np.ndarray, ub: np.ndarray, *, rel: float,
                typical: np.ndarray, central: bool) -> tuple[np.ndarray, int]:
    """Finite-difference Jacobian at ``p`` (base residual ``f0``) in one parallel round (+1 for fallbacks).

    Returns ``(J[m, n], n_zero_columns)``. Non-finite stencil points fall back as the module doc says.
    """
    n = p.size
    step, kind = _steps(p, lb, ub, rel, typical, central)
    pts: list[np.ndarray] = []
    where: list[tuple[int, int]] = []  # (column, sign)
    for i in range(n):
        e = np.zeros(n)
        e[i] = step[i]
        pts.append(p + e)
        where.append((i, 1))
        if kind[i] == 1:
            pts.append(p - e)
            where.append((i, -1))
    vals = ev.many(pts)
    plus: dict[int, np.ndarray] = {}
    minus: dict[int, np.ndarray] = {}
    for (i, sgn), r in zip(where, vals):
        if np.all(np.isfinite(r)) and r.shape == f0.shape:
            (plus if sgn > 0 else minus)[i] = r
    J = np.zeros((f0.size, n))
    retry: list[int] = []
    for i in range(n):
        h = step[i]
        if kind[i] == 1 and i in plus and i in minus:
            J[:, i] = (plus[i] - minus[i]) / (2.0 * h)                      # Eq. (15)
        elif i in plus:
            J[:, i] = (plus[i] - f0) / h                                    # Eq. (14), +-h
        elif i in minus:
            J[:, i] = (minus[i] - f0) / (-h)
        elif kind[i] == 0:
            retry.append(i)
    zero = [i for i in range(n) if kind[i] == 1 and i not in plus and i not in minus]
    if retry:  # the other one-sided difference, where feasible
        feas = [i for i in retry if lb[i] <= p[i] - step[i] <= ub[i]]
        zero += [i for i in retry if i not in feas]
        pts2 = []
        for i in feas:
            e = np.zeros(n)
            e[i] = -step[i]
            pts2.append(p + e)
        for i, r in zip(feas, ev.many(pts2) if pts2 else []):
            if np.all(np.isfinite(r)) and r.shape == f0.shape:
                J[:, i] = (r - f0) / (-step[i])
            else:
                zero.append(i)
    return J, len(zero)


class _Transform:
    """Box -> unbounded change of variables for LM (module doc); identity where a parameter has no bounds."""

    def __init__(self, lb: np.ndarray, ub: np.ndarray, x0: np.ndarray) -> None:
        self.lb, self.ub = lb, ub
        self.both = np.isfinite(lb) & np.isfinite(ub)
        self.lo = np.isfinite(lb) & ~np.isfinite(ub)
        self.hi = ~np.isfinite(lb) & np.isfinite(ub)
        self.s = np.maximum(np.abs(x0), 1.0)

    def to_p(self, z: np.ndarray) -> np.ndarray:
        p = z.copy()
        b, lo, hi = self.both, self.lo, self.hi
        p[b] = self.lb[b] + (self.ub[b] - self.lb[b]) * (1.0 + np.sin(z[b])) / 2.0
        p[lo] = self.lb[lo] + self.s[lo] * (np.sqrt(z[lo] ** 2 + 1.0) - 1.0)
        p[hi] = self.ub[hi] - self.s[hi] * (np.sqrt(z[hi] ** 2 + 1.0) - 1.0)
        return np.clip(p, self.lb, self.ub)

    def to_z(self, p: np.ndarray) -> np.ndarray:
        z = p.copy()
        b, lo, hi = self.both, self.lo, self.hi
        z[b] = np.arcsin(np.clip(2.0 * (p[b] - self.lb[b]) / (self.ub[b] - self.lb[b]) - 1.0, -1.0, 1.0))
        z[lo] = np.sqrt(((p[lo] - self.lb[lo]) / self.s[lo] + 1.0) ** 2 - 1.0)
        z[hi] = np.sqrt(((self.ub[hi] - p[hi]) / self.s[hi] + 1.0) ** 2 - 1.0)
        return z

    def dp_dz(self, z: np.ndarray) -> np.ndarray:
        d = np.ones_like(z)
        b, lo, hi = self.both, self.lo, self.hi
        d[b] = (self.ub[b] - self.lb[b]) * np.cos(z[b]) / 2.0
        d[lo] = self.s[lo] * z[lo] / np.sqrt(z[lo] ** 2 + 1.0)
        d[hi] = -self.s[hi] * z[hi] / np.sqrt(z[hi] ** 2 + 1.0)
        return d


def _statistics(J: np.ndarray, r: np.ndarray, ci_level: float, cond_max: float) -> dict[str, Any]:
    """sigma^2, covariance, CIs and conditioning at p* (module doc)."""
    m, n = J.shape
    dof = m - n
    sigma2 = float(r @ r / dof) if dof > 0 else math.inf
    sv = np.linalg.svd(J, compute_uv=False)
    rank_def = sv.size == 0 or sv[-1] <= sv[0] * max(m, n) * np.finfo(float).eps
    cond = math.inf if rank_def else float((sv[0] / sv[-1]) ** 2)
    norms = np.linalg.norm(J, axis=0)
    if np.any(norms == 0.0) or rank_def:
        cond_scaled = math.inf
    else:
        svs = np.linalg.svd(J / norms, compute_uv=False)
        cond_scaled = float((svs[0] / svs[-1]) ** 2) if svs[-1] > 0 else math.inf
    if math.isfinite(cond_scaled) and math.isfinite(sigma2):
        Js = J / norms  # invert the equilibrated matrix for accuracy
        cov = sigma2 * np.linalg.inv(Js.T @ Js) / np.outer(norms, norms)
        cov = 0.5 * (cov + cov.T)
    else:
        cov = np.full((n, n), math.inf)
    stderr = np.sqrt(np.where(np.diag(cov) >= 0, np.diag(cov), math.inf))
    q = float(stats.t.ppf(0.5 + ci_level / 2.0, dof)) if dof > 0 else math.inf
    return {"sigma2": sigma2, "cov": cov, "stderr": stderr, "q": q, "cond": cond, "cond_scaled": cond_scaled,
            "ill": bool(rank_def or not math.isfinite(cond_scaled) or cond_scaled > cond_max)}


def parallel_least_squares(
    fun: Callable[[np.ndarray], np.ndarray] | SegmentedResidual,
    x0: Sequence[float] | np.ndarray,
    bounds: tuple[Any, Any] = (-np.inf, np.inf),
    *,
    executor: Executor | None = None,
    method: str = "trf",
    diff: str = "forward",
    f_noise: float = DEFAULT_F_NOISE,
    rel_step: float | None = None,
    typical_x: Sequence[float] | np.ndarray | None = None,
    x_scale: Any = "jac",
    ftol: float = 1e-8,
    xtol: float = 1e-8,
    gtol: float = 1e-8,
    max_nfev: int | None = None,
    penalty: float | None = None,
    ci_level: float = 0.95,
    cond_max: float = DEFAULT_COND_MAX,
    names: Sequence[str] | None = None,
) -> ParallelFit:
    """Minimise 1/2 |fun(p)|^2 in ``bounds`` with a parallel finite-difference Jacobian (module doc).

    ``fun``: picklable callable ``p -> f(p)`` (for process/Dask executors: a module-level function or an
    instance of a module-level class), or a :class:`SegmentedResidual`. ``executor``: where the evaluations
    run (None: serially in the caller). ``method``: "trf" or "lm"; ``diff``: "forward" (Eq. 14, n evaluations
    per Jacobian) or "central" (Eq. 15, 2n). ``rel_step`` overrides the ``f_noise``-derived relative step.
    Raises ValueError for bad arguments or a non-finite residual at ``x0``.
    """
    t_start = time.perf_counter()
    if method not in ("trf", "lm"):
        raise ValueError(f"method must be 'trf' or 'lm', got {method!r}")
    if diff not in ("forward", "central"):
        raise ValueError(f"diff must be 'forward' or 'central', got {diff!r}")
    x0 = np.asarray(x0, dtype=float).ravel().copy()
    n = x0.size
    lb = np.broadcast_to(np.asarray(bounds[0], dtype=float), (n,)).copy()
    ub = np.broadcast_to(np.asarray(bounds[1], dtype=float), (n,)).copy()
    if np.any(lb >= ub):
        raise ValueError("every lower bound must be below its upper bound")
    if np.any(x0 < lb) or np.any(x0 > ub):
        raise ValueError(f"x0 {x0.tolist()} is outside the bounds")
    central = diff == "central"
    rel = rel_step if rel_step is not None else (f_noise ** (1.0 / 3.0) if central else math.sqrt(f_noise))
    typical = (np.asarray(typical_x, dtype=float) if typical_x is not None
               else np.where(x0 != 0.0, np.abs(x0), 1.0))
    if names is not None and len(names) != n:
        raise ValueError(f"{len(names)} names for {n} parameters")

    ev = _Evaluator(fun, executor)
    (f_start,) = ev.many([x0], in_caller=True)
    if not np.all(np.isfinite(f_start)):
        raise ValueError(f"the residual is not finite at x0 = {x0.tolist()}")
    ev._remember(x0, f_start)
    m = f_start.size
    if m < n:
        raise ValueError(f"{m} residuals for {n} parameters: the problem is underdetermined")
    pen = float(penalty) if penalty is not None else 1e3 * max(1.0, float(np.max(np.abs(f_start))))
    counters = {"jac": 0, "zero": 0}
    last_jac: dict[str, Any] = {}

    def f_at(p: np.ndarray) -> np.ndarray:
        r = ev.lookup(p)
        if r is None:
            (r,) = ev.many([p], in_caller=True)
            ev._remember(p.copy(), r)
        if not np.all(np.isfinite(r)) or r.shape != f_start.shape:
            return np.full(m, pen)
        return r

    def jac_at(p: np.ndarray) -> np.ndarray:
        key = p.tobytes()
        if last_jac.get("key") == key:
            return last_jac["J"]
        f0 = ev.lookup(p)
        if f0 is None or not np.all(np.isfinite(f0)):
            f0 = f_at(p)
        J, nz = fd_jacobian(ev, p, f0, lb, ub, rel=rel, typical=typical, central=central)
        counters["jac"] += 1
        counters["zero"] += nz
        last_jac.update(key=key, J=J)
        return J

    if method == "trf":
        x_init = np.clip(x0, np.nextafter(lb, ub), np.nextafter(ub, lb))  # trf wants strictly interior
        res = least_squares(f_at, x_init, jac=jac_at, bounds=(lb, ub), method="trf", x_scale=x_scale,
                            ftol=ftol, xtol=xtol, gtol=gtol, max_nfev=max_nfev)
        x_best = res.x
    else:
        tr = _Transform(lb, ub, x0)
        bounded = np.isfinite(lb) | np.isfinite(ub)
        x_in = np.where(tr.both, np.clip(x0, lb + 1e-9 * (ub - lb), ub - 1e-9 * (ub - lb)), x0)

        def fz(z: np.ndarray) -> np.ndarray:
            return f_at(tr.to_p(z) if bounded.any() else z)

        def jz(z: np.ndarray) -> np.ndarray:
            if not bounded.any():
                return jac_at(z)
            return jac_at(tr.to_p(z)) * tr.dp_dz(z)

        z0 = tr.to_z(x_in) if bounded.any() else x_in
        res = least_squares(fz, z0, jac=jz, method="lm", x_scale=x_scale, ftol=ftol, xtol=xtol, gtol=gtol,
                            max_nfev=max_nfev)
        x_best = tr.to_p(res.x) if bounded.any() else res.x

    x_best = np.asarray(x_best, dtype=float).copy()
    r_best = ev.lookup(x_best)
    if r_best is None:
        (r_best,) = ev.many([x_best], in_caller=True)
        ev._remember(x_best, r_best)
    if not np.all(np.isfinite(r_best)):  # cannot happen: penalised points are never accepted
        raise RuntimeError("the solver ended on a point with a non-finite residual")
    J = jac_at(x_best)
    st = _statistics(J, r_best, ci_level, cond_max)
    # first-order check: the cost decrease a Gauss-Newton step from p* would predict (free parameters only),
    # 1/2 |P_J f|^2 with P_J the projection on the range of J; ~0 at a minimum
    free = ~(((x_best <= lb) & (J.T @ r_best > 0)) | ((x_best >= ub) & (J.T @ r_best < 0)))
    if free.any():
        step = np.linalg.lstsq(J[:, free], -r_best, rcond=1e-10)[0]
        pred = 0.5 * float(np.sum((J[:, free] @ step) ** 2))
    else:
        pred = 0.0
    cost_best = 0.5 * float(r_best @ r_best)
    rel_pred = pred / max(cost_best, 1e-12 * 0.5 * float(f_start @ f_start), 1e-300)
    stalled = ev.n_nonfinite > 0 and rel_pred > 1e-3
    warnings: list[str] = []
    if stalled:
        warnings.append(f"the solver stopped against the region where the residual is not finite (a Gauss-Newton "
                        f"step would still cut the cost by {rel_pred:.2g} of it): p* is probably not a minimum; "
                        "start elsewhere or widen the valid region")
    if st["ill"]:
        warnings.append(f"J^T J is ill-conditioned (equilibrated condition number {st['cond_scaled']:.3g} > "
                        f"{cond_max:.3g}): parameters are not separately identifiable; covariance and "
                        "intervals are unreliable")
    if ev.n_nonfinite:
        warnings.append(f"{ev.n_nonfinite} evaluations returned non-finite residuals (penalised/replaced)")
    if counters["zero"]:
        warnings.append(f"{counters['zero']} Jacobian columns had no finite stencil and were set to 0")
    half = st["q"] * st["stderr"]
    return ParallelFit(
        x=x_best, residual=r_best.copy(), cost=0.5 * float(r_best @ r_best), jac=J, sigma2=st["sigma2"],
        cov=st["cov"], stderr=st["stderr"], ci_lower=x_best - half, ci_upper=x_best + half, ci_level=ci_level,
        ci_quantile=st["q"], cond=st["cond"], cond_scaled=st["cond_scaled"], ill_conditioned=st["ill"],
        warning="; ".join(warnings) or None, n_residual_evals=ev.n_evals, n_jacobian_evals=counters["jac"],
        nfev=int(res.nfev), njev=int(res.njev or 0), n_nonfinite=ev.n_nonfinite,
        n_zero_columns=counters["zero"], stalled=stalled,
        predicted_decrease=rel_pred, wall_time_s=time.perf_counter() - t_start, method=method, diff=diff,
        status=int(res.status), message=str(res.message), n_workers=executor_workers(executor),
        names=tuple(names) if names is not None else None,
    )
