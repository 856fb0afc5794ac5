"""The SMC's efficiency devices change no number: exact early rejection, the bounded 8-DOF batch kernel and its
chunked threads, the lockstep batching of the runs; and the step rule spends fewer evaluations than a fixed
count."""

from __future__ import annotations

import numpy as np
from calibration_synthetic import synthetic_segment

from vehcal_ros.estimation.calibration.fit import StageProblem, base_parameters, stage_spec
from vehcal_ros.inference.smc import Prior, Uniform, run_smc
from vehcal_ros.models import chunked

Y = np.array([1.3, -0.7])
S_INV = np.linalg.inv(np.array([[0.04, 0.018], [0.018, 0.09]]))
PRIOR = Prior(("a", "b"), (Uniform(-10, 10), Uniform(-10, 10)))


def gauss_ll(theta: np.ndarray) -> np.ndarray:
    r = theta - Y
    return -0.5 * np.einsum("ij,jk,ik->i", r, S_INV, r)


def gauss_ll_floor(theta: np.ndarray, floor: np.ndarray | None = None) -> np.ndarray:
    """The same likelihood, allowed to answer -inf below the floor (as a stopped simulation does)."""
    ll = gauss_ll(theta)
    return ll if floor is None else np.where(ll > floor, ll, -np.inf)


def test_early_rejection_changes_no_draw() -> None:
    cut = [0]

    def counting_floor(theta: np.ndarray, floor: np.ndarray | None = None) -> np.ndarray:
        out = gauss_ll_floor(theta, floor)
        cut[0] += int(np.isneginf(out).sum())
        return out

    full = run_smc(gauss_ll, PRIOR, n_particles=400, n_chains=3, seed=8)
    early = run_smc(counting_floor, PRIOR, n_particles=400, n_chains=3, seed=8)
    assert cut[0] > 300  # the floors did cut rows (IMH rejections: ~7 % of the proposals here)
    np.testing.assert_array_equal(full.draws, early.draws)
    assert full.mutation_steps == early.mutation_steps
    assert full.n_evaluations == early.n_evaluations


def test_lockstep_batching_equals_runs_alone() -> None:
    # the runs advance together, one batch call per round; each keeps its own random stream (child c of
    # SeedSequence(seed)), so run 0 of a 3-run call is the 1-run call with the same seed
    calls: list[int] = []

    def counting(theta: np.ndarray) -> np.ndarray:
        calls.append(theta.shape[0])
        return gauss_ll(theta)

    batched = run_smc(counting, PRIOR, n_particles=300, n_chains=3, seed=5)
    alone = run_smc(gauss_ll, PRIOR, n_particles=300, n_chains=1, seed=5)
    np.testing.assert_array_equal(batched.draws[0], alone.draws[0])
    assert batched.temperatures[0] == alone.temperatures[0]
    # the first call carries every run's prior draws; then one call per round until the longest run ends
    assert calls[0] == 900 and len(calls) == 1 + max(sum(s) for s in batched.mutation_steps)
    assert sum(calls) == batched.n_evaluations


def test_distinct_rule_reaches_its_target_with_fewer_steps_than_the_cap() -> None:
    res = run_smc(gauss_ll, PRIOR, n_particles=1000, n_chains=2, seed=2, max_mutation_steps=25)
    for steps, distinct in zip(res.mutation_steps, res.distinct):
        assert all(d >= 0.95 for d in distinct[:-1]) and distinct[-1] >= 0.99
        assert max(steps) < 25
    # the earlier rule (mean correlation < 0.01) takes more steps on the same problem
    corr = run_smc(gauss_ll, PRIOR, n_particles=1000, n_chains=2, seed=2, max_mutation_steps=25,
                   mutation_rule="correlation")
    assert corr.n_evaluations > 1.5 * res.n_evaluations


def _lateral_problem() -> StageProblem:
    noisy, _ = synthetic_segment("lateral", seed=1)
    spec = stage_spec("lateral")
    return StageProblem(noisy, spec, base_parameters(spec, None))


def test_bounded_kernel_stops_exactly_when_over_budget() -> None:
    pb = _lateral_problem()
    rng = np.random.default_rng(0)
    theta = pb.prior.sample(rng, 300)
    params = pb.parameter_matrix(theta[:, : pb.n_model])
    w = 1.0 / theta[:, pb.n_model:pb.n_model + pb.n_channels] ** 2   # the sigmas (then the AR(1) rhos)
    # reference: the plain (prange) kernel, full runs. It compiles the same loop into numba's parallel gufunc,
    # where LLVM contracts other multiply-adds into FMAs: round-off differs, and prior draws that spin the vehicle
    # out amplify it (up to 3e-7 relative; 7 of 300 rows above 1e-10, 2026-11-24); the median is 3e-16
    sse_full = pb.sim.sse(params, pb.chan, pb.data)
    sse_all, steps_all = pb.sim.sse_bounded(params, pb.chan, pb.data, w)
    rel = np.abs(sse_all - sse_full) / np.abs(sse_full)
    assert np.median(rel) < 1e-12 and rel.max() < 1e-5
    assert np.all(steps_all == pb.sim.steps_per_run)
    wsse = np.sum(w * sse_all, axis=1)
    budget = wsse * rng.uniform(0.2, 1.8, wsse.size)
    sse_b, steps_b = pb.sim.sse_bounded(params, pb.chan, pb.data, w, budget)
    over = wsse > budget * (1 + 1e-9)
    under = wsse < budget * (1 - 1e-9)
    assert over.sum() > 50 and under.sum() > 50
    assert np.all(np.isinf(sse_b[over])) and steps_b[over].mean() < 0.9 * pb.sim.steps_per_run
    # a run that stays under its budget is the full run, to the bit
    np.testing.assert_array_equal(sse_b[under], sse_all[under])
    # the same numbers however the rows are cut into chunks and threads
    old = chunked.DEFAULT_CHUNK
    try:
        chunked.DEFAULT_CHUNK = 7
        sse_c, steps_c = pb.sim.sse_bounded(params, pb.chan, pb.data, w, budget)
    finally:
        chunked.DEFAULT_CHUNK = old
    np.testing.assert_array_equal(sse_c, sse_b)
    np.testing.assert_array_equal(steps_c, steps_b)


def test_log_likelihood_floor_gives_minus_inf_only_below_it() -> None:
    pb = _lateral_problem()
    theta = pb.prior.sample(np.random.default_rng(1), 200)
    ll = pb.log_likelihood(theta)
    floor = ll + np.random.default_rng(2).normal(0.0, 50.0, ll.size)
    pb.steps_done = 0
    ll_f = pb.log_likelihood(theta, floor=floor)
    above = ll > floor + 1e-6 * np.abs(floor)
    np.testing.assert_allclose(ll_f[above], ll[above], rtol=1e-12)
    assert np.all(np.isneginf(ll_f[ll < floor - 1e-6 * np.abs(floor)]))
    assert pb.steps_done < 200 * pb.sim.steps_per_run


def test_chunked_pool_is_recreated_in_a_forked_child() -> None:
    # a process forked after the pool exists must not submit to the parent's (absent) threads
    import multiprocessing

    pb = _lateral_problem()
    theta = pb.prior.sample(np.random.default_rng(3), 100)
    expected = pb.log_likelihood(theta)
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(1) as pool:
        got = pool.apply_async(pb.log_likelihood, (theta,)).get(timeout=120)
    np.testing.assert_allclose(got, expected, rtol=1e-12)
