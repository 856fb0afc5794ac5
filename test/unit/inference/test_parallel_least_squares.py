"""Parallel finite-difference least squares (parallel-estimation paper, Eqs. 11-15) on known-truth problems."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest

from vehcal_ros.errors import InputError
from vehcal_ros.estimation.calibration.brake_fit import (
    FIT_NAMES,
    TRUE_PARAMETERS,
    BrakeResidual,
    GripResidual,
    fit_brake,
    synthetic_data,
)
from vehcal_ros.inference.executors import make_executor, map_over_executor, values_or_raise
from vehcal_ros.inference.least_squares.parallel import (
    RESIDUAL_NOT_CACHED,
    ResidualEvaluator,
    ResidualRef,
    balanced_chunks,
    evaluate_items,
    parallel_least_squares,
)
from vehcal_ros.models import pacejka

TRUTH = np.array([TRUE_PARAMETERS[n] for n in FIT_NAMES])


@pytest.fixture(scope="module")
def brake_problem():
    # generated and fitted with the same integration step (5 ms) and the true initial state (module doc of
    # brake_fit: a noisy initial state or a coarser fit step than the data's biases the fit by several sigma)
    maneuvers = synthetic_data(2, seed=1, dt=0.005)
    return maneuvers, BrakeResidual(maneuvers, dt=0.005)


@pytest.fixture(scope="module")
def local_pool():
    with make_executor("local", 2) as ex:
        yield ex


@pytest.mark.parametrize("method", ["trf", "lm"])
def test_brake_fit_ci_contains_truth(brake_problem, method):
    maneuvers, res = brake_problem
    fit = fit_brake(maneuvers, residual=res, method=method)
    assert fit.success, fit.message
    assert fit.names == FIT_NAMES
    assert np.all(fit.ci_lower < TRUTH) and np.all(TRUTH < fit.ci_upper), (fit.ci_lower, fit.x, fit.ci_upper)
    assert np.all(np.abs(fit.x - TRUTH) / TRUTH < 0.01)
    # residuals are whitened by the nominal noise: sigma^2 ~ 1
    assert 0.8 < fit.sigma2 < 1.3
    assert fit.cost <= 0.5 * float(res(TRUTH) @ res(TRUTH)) + 1e-6
    assert not fit.ill_conditioned and fit.warning is None
    assert fit.n_nonfinite == 0 and np.all(np.isfinite(fit.cov))
    # bookkeeping: one evaluation per solver trial point + n per forward-difference Jacobian
    assert fit.n_residual_evals == fit.nfev + len(FIT_NAMES) * fit.n_jacobian_evals
    json.dumps(fit.to_dict(), allow_nan=False)


def test_brake_ci_coverage_over_seeds():
    """95 % intervals over 8 noise seeds x 4 coefficients: coverage near 0.95 (binomial: >= 27 of 32)."""
    inside = 0
    for seed in range(10, 18):
        mv = synthetic_data(2, seed=seed, dt=0.005)
        fit = fit_brake(mv, residual=BrakeResidual(mv, dt=0.005))
        inside += int(np.sum((fit.ci_lower < TRUTH) & (TRUTH < fit.ci_upper)))
    assert inside >= 27, inside


def test_parallel_equals_serial(brake_problem, local_pool):
    maneuvers, res = brake_problem
    serial = fit_brake(maneuvers, residual=res)
    with make_executor("threads", 2) as threads:
        thr = fit_brake(maneuvers, residual=res, executor=threads)
    loc = fit_brake(maneuvers, residual=res, executor=local_pool)
    for par in (thr, loc):
        assert np.array_equal(par.x, serial.x)
        assert np.array_equal(par.jac, serial.jac)
        assert par.cost == serial.cost
        assert (par.n_residual_evals, par.n_jacobian_evals, par.nfev, par.njev) == (
            serial.n_residual_evals, serial.n_jacobian_evals, serial.nfev, serial.njev)
    assert loc.n_workers == 2 and serial.n_workers == 1
    # one task per worker and round (a trial point, or a Jacobian's whole stencil)
    assert serial.n_tasks == 0 and loc.n_tasks % 2 == 0 and loc.n_tasks < 2 * loc.n_residual_evals
    # finer tasks: same numbers
    fine = fit_brake(maneuvers, residual=res, executor=local_pool, tasks_per_worker=4)
    assert np.array_equal(fine.x, serial.x) and fine.n_residual_evals == serial.n_residual_evals
    # central differences (Eq. 15): 2n evaluations per Jacobian, same answer within the CI
    cen = fit_brake(maneuvers, residual=res, diff="central", executor=local_pool)
    assert cen.n_residual_evals == cen.nfev + 2 * len(FIT_NAMES) * cen.n_jacobian_evals
    assert np.all(np.abs(cen.x - serial.x) < 0.1 * serial.stderr)


def test_balanced_chunks():
    assert balanced_chunks([1.0] * 8, 2) == [(0, 2, 4, 6), (1, 3, 5, 7)]
    assert balanced_chunks([5.0, 1.0, 1.0, 1.0, 1.0, 1.0], 2) == [(0,), (1, 2, 3, 4, 5)]
    assert balanced_chunks([1.0, 2.0], 5) == [(1,), (0,)]
    assert balanced_chunks([1.0], 1) == [(0,)]


def test_workers_cache_the_residual_and_misses_are_resent(brake_problem, local_pool):
    """Once every worker answered, tasks carry only the residual's id; a worker without it gets it resent."""
    maneuvers, res = brake_problem
    p1, p2 = TRUTH, TRUTH * 1.001
    # pickling: an id-only reference resolves to nothing in a process that never received the residual
    ref = pickle.loads(pickle.dumps(ResidualRef("test-key-1", res, ship=False)))
    assert ref.fun is None and evaluate_items(ref, p1[None], ((0, 0),))[1] == RESIDUAL_NOT_CACHED
    ref = pickle.loads(pickle.dumps(ResidualRef("test-key-1", res, ship=True)))
    assert ref.fun is not None and pickle.loads(pickle.dumps(ResidualRef("test-key-1", res))).fun is not None
    ev = ResidualEvaluator(res, local_pool)
    assert ev.tasks(1) == [((0, 0),), ((0, 1),)]
    assert ev.tasks(4) == [((0, 0), (1, 0), (2, 0), (3, 0)), ((0, 1), (1, 1), (2, 1), (3, 1))]
    (r1,) = ev.many([p1])  # the residual travels with the tasks
    assert ev.n_resent == 0 and len(ev.holders) >= 1
    with make_executor("local", 2) as fresh:
        ev.executor, ev.holders = fresh, {"a", "b"}  # as if both workers held it: id-only tasks, all missing
        (r2,) = ev.many([p2])
        assert ev.n_resent == 2
        (r3,) = ev.many([p1])
    assert np.array_equal(r1, res(p1)) and np.array_equal(r2, res(p2)) and np.array_equal(r3, r1)


def test_fd_jacobian_matches_analytic_magic_formula():
    rng = np.random.default_rng(3)
    theta = np.array([12.0, 1.6, 0.9, -0.5, 0.002, 0.01])
    s = np.sort(rng.uniform(0.0, 0.15, 150))
    mu = pacejka.mf_curve(s, theta) + 0.005 * rng.standard_normal(s.size)
    lb = np.array([5.0, 0.5, 0.2, -2.0, -0.05, -0.3])
    ub = np.array([30.0, 2.0, 2.0, 0.0, 0.05, 0.3])
    for diff, tol in (("forward", 1e-4), ("central", 1e-5)):
        fit = parallel_least_squares(GripResidual(s, mu), [10.0, 1.4, 1.0, -0.3, 0.0, 0.0], (lb, ub), diff=diff)
        assert fit.success
        ja = pacejka.jacobian(s, fit.x)
        assert np.max(np.abs(fit.jac - ja)) < tol * np.max(np.abs(ja))
        assert abs(fit.x[2] + fit.x[5] - (theta[2] + theta[5])) < 0.05  # D + s_v (the peak) is well identified


def _exp_residual(p: np.ndarray) -> np.ndarray:
    """r_i = p1 exp(p0 t_i) - y_i with truth (0.8, 1.5); NaN where p0 > 0.82 (a 'diverging simulation')."""
    t = np.linspace(0.0, 1.0, 40)
    if p[0] > 0.82:
        return np.full(t.size, np.nan)
    return p[1] * np.exp(p[0] * t) - 1.5 * np.exp(0.8 * t)


def _edge_residual(p: np.ndarray) -> np.ndarray:
    """Same model; NaN just above the truth p0 = 0.8, so the forward stencil at p* is not finite."""
    t = np.linspace(0.0, 1.0, 40)
    if p[0] > 0.8 + 1e-8:
        return np.full(t.size, np.inf)
    return p[1] * np.exp(p[0] * t) - 1.5 * np.exp(0.8 * t)


@pytest.mark.parametrize("method, x0", [("trf", [0.0, 0.5]), ("lm", [0.0, 1.0])])
def test_nonfinite_objective_is_rejected_not_propagated(method, x0):
    """A trial step into the NaN region is rejected (penalty) and the solver still reaches the truth."""
    fit = parallel_least_squares(_exp_residual, x0, ([-5.0, 0.1], [5.0, 10.0]), method=method)
    assert fit.success and not fit.stalled
    assert np.allclose(fit.x, [0.8, 1.5], atol=1e-6)
    assert fit.n_nonfinite >= 1 and "non-finite" in fit.warning
    for arr in (fit.x, fit.residual, fit.jac, fit.cov, fit.ci_lower, fit.ci_upper):
        assert not np.any(np.isnan(arr))
    json.dumps(fit.to_dict(), allow_nan=False)


def test_stall_against_nonfinite_region_is_reported():
    """From (0, 0.5) LM runs into the NaN wall and stops there: finite numbers, but flagged as no minimum."""
    fit = parallel_least_squares(_exp_residual, [0.0, 0.5], ([-5.0, 0.1], [5.0, 10.0]), method="lm")
    assert fit.stalled and not fit.success and "not a minimum" in fit.warning
    assert np.all(np.isfinite(fit.x)) and np.all(np.isfinite(fit.residual))


def test_nonfinite_jacobian_column_falls_back_to_other_side():
    fit = parallel_least_squares(_edge_residual, [0.3, 1.0], ([-5.0, 0.1], [5.0, 10.0]))
    assert np.allclose(fit.x, [0.8, 1.5], atol=1e-6)
    t = np.linspace(0.0, 1.0, 40)
    ja = np.column_stack([fit.x[1] * t * np.exp(fit.x[0] * t), np.exp(fit.x[0] * t)])
    assert fit.n_zero_columns == 0 and fit.n_nonfinite >= 1
    assert np.max(np.abs(fit.jac - ja)) < 1e-4 * np.max(np.abs(ja))


def _exp_clean(p: np.ndarray) -> np.ndarray:
    t = np.linspace(0.0, 1.0, 40)
    return p[1] * np.exp(p[0] * t) - 1.5 * np.exp(0.8 * t) + 0.01 * np.sin(9.0 * t)


def _sum_only(p: np.ndarray) -> np.ndarray:
    t = np.linspace(0.0, 1.0, 30)
    return (p[0] + p[1]) * t - 3.0 * t + 0.01 * np.sin(7.0 * t)


def _nearly_collinear(p: np.ndarray) -> np.ndarray:
    t = np.linspace(0.0, 1.0, 30)
    return p[0] * t + p[1] * (t + 1e-5 * t * t) - 3.0 * t + 0.01 * np.sin(7.0 * t)


def test_ill_conditioning_is_flagged():
    sing = parallel_least_squares(_sum_only, [1.0, 1.0])
    assert sing.ill_conditioned and "ill-conditioned" in sing.warning
    assert abs(sing.x.sum() - 3.0) < 1e-2
    assert sing.cond_scaled > 1e12
    json.dumps(sing.to_dict(), allow_nan=False)
    near = parallel_least_squares(_nearly_collinear, [1.0, 1.0])
    assert near.ill_conditioned and near.cond_scaled > 1e8
    good = parallel_least_squares(_exp_clean, [0.0, 0.5])
    assert not good.ill_conditioned and good.warning is None


def test_executor_specs_and_map():
    for bad in ("mpi", "dask://nohost", "dask://h:99999", ""):
        with pytest.raises(InputError, match="--executor"):
            make_executor(bad, 2)
    with pytest.raises(InputError, match="--workers"):
        make_executor("threads", 0)
    with make_executor("threads", 2) as ex:
        out = map_over_executor(_maybe_fail, [1, 2, -3, 4], ex)
    assert [r.ok for r in out] == [True, True, False, True]
    assert [r.value for r in out if r.ok] == [1, 4, 16]
    assert "ValueError" in out[2].error and out[2].index == 2 and not out[2].worker_lost
    with pytest.raises(RuntimeError, match="item 2"):
        values_or_raise(out)
    assert values_or_raise(map_over_executor(_maybe_fail, [3, 2])) == [9, 4]


def _maybe_fail(x: int) -> int:
    if x < 0:
        raise ValueError(f"negative {x}")
    return x * x
