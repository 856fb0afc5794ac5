"""Bounded nonlinear least squares with a finite-difference Jacobian evaluated in parallel.

Parallel-estimation paper (Butz, von Stryk, Voegel, Wolter and Chucholowski, "Parallel Parameter Estimation in Full
Motor Vehicle Dynamics"): minimise
r(p) = 1/2 |f(p)|^2 (Eq. 11) subject to l <= p <= u (Eq. 12) by the Gauss-Newton/Levenberg-Marquardt family
(Eq. 13), where f(p) is a simulation residual whose derivatives exist only as finite differences:

* one-sided differences (Eq. 14), forward when ``p + h e_i`` is feasible, else backward;
* central differences (Eq. 15) when ``diff="central"`` and both ``p +- h e_i`` are feasible.

All perturbed evaluations of one Jacobian are submitted in one round to any
:class:`concurrent.futures.Executor` ("Parallel Optimization": the server processes evaluate ``p +- h e_i``
simultaneously while the client waits); the residual at the base point, already computed by the solver, is
reused. A residual may be *segmented* (several independent maneuvers, :class:`SegmentedResidual`): then every
evaluation, the solver's trial points included, is split by segment: every round of evaluations (one trial
point, or the stencil of a Jacobian) becomes ``tasks_per_worker x workers`` tasks of equal cost
(``segment_cost(k)`` when the residual has it, e.g. the simulated steps), so the trial-point evaluations run in
parallel too and the workers finish a round together. A task carries only the parameter
vector, the chunk's segment indices and a reference to the residual: process and Dask workers keep the
residual objects they received (per solve; the object travels with the tasks until every worker process has
answered once, later tasks carry only its id, and a worker that does not hold it answers "missing" and gets the
task again with the object), so the maneuver data are not pickled per task. Serial evaluation runs the same
segment computations one after another in the caller and concatenates them in the same order: estimates and
evaluation counts are bit-identical.

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

import itertools
import math
import os
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np
from scipy.optimize import least_squares

from vehcal_ros.inference.blas import BlasThreads
from vehcal_ros.inference.executors import executor_workers
from vehcal_ros.inference.quantiles import student_t_quantile

__all__ = [
    "RESIDUAL_NOT_CACHED",
    "ParallelFit",
    "ResidualEvaluator",
    "ResidualRef",
    "SegmentedResidual",
    "balanced_chunks",
    "evaluate_items",
    "fd_jacobian",
    "parallel_least_squares",
]

DEFAULT_F_NOISE = 1e-12
DEFAULT_COND_MAX = 1e8


@runtime_checkable
class SegmentedResidual(Protocol):
    """A residual made of independent parts (e.g. one per maneuver): f(p) = concat_k segment(p, k)."""

    n_segments: int

    def segment(self, p: np.ndarray, k: int) -> np.ndarray:
        """Residual vector of segment ``k`` at parameters ``p``."""
        ...


# --- worker side -------------------------------------------------------------------------------------------
# A process or Dask worker keeps the residual objects it has received, keyed by a per-solve id, so that a task
# ships only (id, p, segment list) and returns its residual slices: the maneuver data (~350 kB for the brake
# benchmark) crosses the process boundary once per worker and solve, not once per task. Thread and serial
# executors never pickle, so they use the caller's object directly and the cache stays empty.
_WORKER_FUNS: OrderedDict[str, Any] = OrderedDict()
_WORKER_FUNS_MAX = 4
_WORKER_LOCK = threading.Lock()
RESIDUAL_NOT_CACHED = "__vehcal_residual_not_cached__"
"""What :func:`evaluate_items` returns in place of the residual slices when the worker does not hold the residual
of the task's :class:`ResidualRef` (the caller then resends the task with the residual attached)."""
_SHIP_ROUNDS = 3
_evaluator_ids = itertools.count()


class ResidualRef:
    """The residual of one solve as a task argument: pickles to its id, plus the object when ``ship``.

    ``key`` identifies the residual of one solve (one :class:`ResidualEvaluator`) in the workers' cache; ``fun``
    is the residual object, or None after unpickling in a worker that does not hold it; ``ship`` makes the object
    travel with the pickle. Unpickled, a shipped reference stores the object in the worker's cache (at most
    ``_WORKER_FUNS_MAX``, least recently used dropped first) and an id-only one looks it up there.
    """

    __slots__ = ("key", "fun", "ship")

    def __init__(self, key: str, fun: Any, ship: bool = False) -> None:
        """Reference ``fun`` under ``key``; ``ship``: pickle the object along with the id."""
        self.key, self.fun, self.ship = key, fun, ship

    def __reduce__(self) -> tuple:
        """Pickle as a call of the worker-side resolver with the id, and the object when shipping."""
        return _resolve_fun, (self.key, self.fun if self.ship else None)


def _resolve_fun(key: str, fun: Any) -> ResidualRef:
    """Unpickling in a worker: store a shipped residual, or look the id up (``fun`` None: a cache miss).

    A shipped reference stays shipping: a transport that unpickles and pickles again on the way (Dask may do
    so in the client or scheduler process) forwards the residual itself, not just its id.
    """
    shipped = fun is not None
    with _WORKER_LOCK:
        if shipped:
            _WORKER_FUNS[key] = fun
            while len(_WORKER_FUNS) > _WORKER_FUNS_MAX:
                _WORKER_FUNS.popitem(last=False)
        else:
            fun = _WORKER_FUNS.get(key)
        if fun is not None:
            _WORKER_FUNS.move_to_end(key)
    return ResidualRef(key, fun, ship=shipped)


def _eval_one(fun: Any, p: np.ndarray, k: int) -> np.ndarray:
    try:
        r = fun.segment(p, k) if k >= 0 else fun(p)
    except ArithmeticError:  # overflow/zero division in a diverging simulation: same as non-finite
        return np.array([np.nan])
    return np.ascontiguousarray(np.asarray(r, dtype=float).ravel())


def _worker_id() -> str:
    """Identity of the process running a task (host and pid: Dask workers may live on several hosts)."""
    return f"{socket.gethostname()}:{os.getpid()}"


def evaluate_items(ref: ResidualRef, points: np.ndarray, items: tuple[tuple[int, int], ...],
                   ) -> tuple[str, list[np.ndarray] | str]:
    """``(worker id, [residual slice of segment k at points[i] for (i, k) in items])`` (``k = -1``: the whole
    unsegmented residual).

    The task function the executor runs; module level so that process and Dask backends can pickle it. The
    slices are :data:`RESIDUAL_NOT_CACHED` when this worker does not hold the residual yet (the caller then
    resends the task with the residual attached).
    """
    if ref.fun is None:
        return _worker_id(), RESIDUAL_NOT_CACHED
    return _worker_id(), [_eval_one(ref.fun, points[i], k) for i, k in items]


def balanced_chunks(costs: Sequence[float], n_chunks: int) -> list[tuple[int, ...]]:
    """Indices of ``costs`` split into ``n_chunks`` groups of near-equal total cost, each sorted.

    Greedy longest first: in order of decreasing cost (ties by index), each index joins the group with the
    smallest load so far (ties: the lowest group). ``n_chunks`` is clamped to ``1..len(costs)``; empty groups
    are dropped.
    """
    n_chunks = max(1, min(n_chunks, len(costs)))
    loads = [0.0] * n_chunks
    groups: list[list[int]] = [[] for _ in range(n_chunks)]
    for k in sorted(range(len(costs)), key=lambda k: (-costs[k], k)):
        g = min(range(n_chunks), key=lambda g: (loads[g], g))
        groups[g].append(k)
        loads[g] += costs[k]
    return [tuple(sorted(g)) for g in groups if g]


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
    n_tasks: int = 0
    """Tasks submitted to the executor (0 for serial): evaluations sent out x chunks per evaluation."""
    n_resent: int = 0
    """Tasks resent with the residual attached because the worker did not hold it yet (cache miss)."""

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
            "n_workers": self.n_workers, "n_tasks": self.n_tasks, "n_resent": self.n_resent,
        }


class ResidualEvaluator:
    """Evaluates the residual at batches of points, in the caller or on an executor, and counts.

    On an executor, one round (all points the solver needs at once: a trial point, or the stencil of a
    Jacobian) is split into ``tasks_per_worker x workers`` tasks of equal cost: the (point, segment) items are
    dealt out by :func:`balanced_chunks` with the segments' ``segment_cost`` (1 each when the residual has
    none). Few, equal tasks per round keep every worker busy until the round ends without the pool having to
    feed new tasks in the middle of it (a process pool's feeder threads then compete with the busy workers
    for the cores). A task carries the round's parameter vectors, its item list and a reference to the residual
    (:class:`ResidualRef`), which the workers cache. Without an executor, the segments are evaluated one after
    another in the caller. Both give bit-identical residuals (same segment computations, concatenated in
    segment order) and the same counts.
    """

    def __init__(self, fun: Callable[[np.ndarray], np.ndarray] | SegmentedResidual,
                 executor: Executor | None, tasks_per_worker: int = 1) -> None:
        self.fun = fun
        self.executor = executor
        segmented = isinstance(fun, SegmentedResidual)
        n_seg = int(getattr(fun, "n_segments", 1) or 1) if segmented else 1
        self.segments: list[int] = list(range(n_seg)) if segmented else [-1]
        cost_of = getattr(fun, "segment_cost", None) if segmented else None
        self.costs = {k: float(cost_of(k)) if callable(cost_of) else 1.0 for k in self.segments}
        self.n_workers = executor_workers(executor)
        self.n_slots = self.n_workers * max(1, int(tasks_per_worker))
        self.key = f"{os.getpid()}-{id(self)}-{next(_evaluator_ids)}"
        self.holders: set[str] = set()  # worker processes known to hold the residual
        self.rounds_shipped = 0
        self.n_evals = 0
        self.n_nonfinite = 0
        self.n_tasks = 0
        self.n_resent = 0
        self._last: list[tuple[bytes, np.ndarray]] = []

    def tasks(self, n_points: int) -> list[tuple[tuple[int, int], ...]]:
        """The round's tasks: (point, segment) items split into up to ``n_slots`` groups of equal cost."""
        items = [(i, k) for i in range(n_points) for k in self.segments]
        groups = balanced_chunks([self.costs[k] for _, k in items], self.n_slots)
        return [tuple(items[j] for j in g) for g in groups]

    def _remember(self, p: np.ndarray, r: np.ndarray) -> None:
        self._last.append((p.tobytes(), r))
        if len(self._last) > 4:
            self._last.pop(0)

    def lookup(self, p: np.ndarray) -> np.ndarray | None:
        """The residual remembered for exactly ``p`` (one of the last 4 the solve stored), or None."""
        key = p.tobytes()
        for k, r in reversed(self._last):
            if k == key:
                return r
        return None

    def _run_on_executor(self, pts: list[np.ndarray]) -> list[dict[int, np.ndarray]]:
        """One round: all tasks submitted at once; misses resent with the residual attached.

        The residual travels with every task until tasks have come back from ``workers`` distinct worker
        processes (at most :data:`_SHIP_ROUNDS` rounds: thread pools and multi-threaded Dask workers have
        fewer processes than workers); afterwards tasks carry only its id.
        """
        assert self.executor is not None
        points = np.array(pts)
        tasks = self.tasks(len(pts))
        ship = len(self.holders) < self.n_workers and self.rounds_shipped < _SHIP_ROUNDS
        self.rounds_shipped += ship
        # a fresh reference per round: a process pool pickles the arguments later, in its feeder thread
        ref = ResidualRef(self.key, self.fun, ship=ship)
        futs = [self.executor.submit(evaluate_items, ref, points, items) for items in tasks]
        out: list[dict[int, np.ndarray]] = [{} for _ in pts]
        shipped = ResidualRef(self.key, self.fun, ship=True)
        pending = list(zip(tasks, futs))
        resent: set[Future] = set()
        while pending:
            resend = []
            for items, fut in pending:
                wid, vals = fut.result()
                if isinstance(vals, str) and vals == RESIDUAL_NOT_CACHED:
                    self.holders.discard(wid)
                    if fut in resent:
                        raise RuntimeError("the executor lost the residual attached to a task")
                    fut2 = self.executor.submit(evaluate_items, shipped, points, items)
                    resent.add(fut2)
                    resend.append((items, fut2))
                    self.n_resent += 1
                    continue
                self.holders.add(wid)
                for (i, k), v in zip(items, vals):
                    out[i][k] = v
            pending = resend
        self.n_tasks += len(tasks)
        return out

    def many(self, points: Sequence[np.ndarray], *, in_caller: bool = False) -> list[np.ndarray]:
        """Residuals at ``points`` (NaN-containing when not finite); one submit round for all of them.

        ``in_caller`` evaluates an unsegmented residual in the calling thread (the paper's client process).
        """
        pts = [np.ascontiguousarray(p, dtype=float) for p in points]
        self.n_evals += len(pts)
        serial = self.executor is None or (in_caller and len(self.segments) == 1)
        if serial:
            parts = [{k: _eval_one(self.fun, p, k) for k in self.segments} for p in pts]
        else:
            parts = self._run_on_executor(pts)
        out: list[np.ndarray] = []
        for seg in parts:
            r = seg[self.segments[0]] if len(self.segments) == 1 else np.concatenate(
                [seg[k] for k in self.segments])
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


def fd_jacobian(ev: ResidualEvaluator, p: np.ndarray, f0: np.ndarray, lb: np.ndarray, ub: np.ndarray, *, rel: float,
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
    q = student_t_quantile(0.5 + ci_level / 2.0, dof) if dof > 0 else math.inf
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
    tasks_per_worker: int = 1,
    blas_threads: int | None = 1,
) -> ParallelFit:
    """Minimise 1/2 |fun(p)|^2 in ``bounds`` with a parallel finite-difference Jacobian (module doc).

    ``fun``: picklable callable ``p -> f(p)`` (for process/Dask executors: a module-level function or an
    instance of a module-level class), or a :class:`SegmentedResidual`. ``executor``: where the evaluations
    run (None: serially in the caller). ``method``: "trf" or "lm"; ``diff``: "forward" (Eq. 14, n evaluations
    per Jacobian) or "central" (Eq. 15, 2n). ``rel_step`` overrides the ``f_noise``-derived relative step.
    ``tasks_per_worker``: tasks per round of evaluations and worker for a segmented residual (1: one task of
    equal simulated cost per worker; more: finer tasks, which balance better when one worker is slowed down, at
    a per-task overhead). ``blas_threads``: OpenBLAS threads in the calling process during the solve (default 1:
    spinning BLAS threads would take CPU from the workers; None leaves the setting alone).
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

    with BlasThreads(blas_threads):
        ev = ResidualEvaluator(fun, executor, tasks_per_worker)
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
            names=tuple(names) if names is not None else None, n_tasks=ev.n_tasks, n_resent=ev.n_resent,
        )
