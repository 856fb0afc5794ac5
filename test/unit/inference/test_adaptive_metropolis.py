"""Robust adaptive Metropolis (friction paper, Algorithm 1 steps 4-12; Vihola 2012)."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from vehcal_ros.estimation.grip.ml_fit import TABLE3_BOUNDS, multistart_fit
from vehcal_ros.estimation.grip.posterior import run_grip_chains
from vehcal_ros.inference.adaptive_metropolis import ram_adapt, run_ram
from vehcal_ros.inference.diagnostics import summarize_draws
from vehcal_ros.models.pacejka import mf_curve, peak_batch, slip_at_friction

TRUE = np.array([15.4, 1.60, 0.871, -1.09, 0.0, 0.0])


def test_rank_one_update_and_downdate_are_exact():
    rng = np.random.default_rng(0)
    A = rng.standard_normal((6, 6))
    S = np.linalg.cholesky(A @ A.T + 6 * np.eye(6))
    for coef in (0.7, -0.2, -0.234):
        r = rng.standard_normal(6)
        ref = S @ (np.eye(6) + coef * np.outer(r, r) / (r @ r)) @ S.T
        S2 = S.copy()
        assert ram_adapt(S2, r, coef, np.empty(6), np.empty((6, 6)))
        np.testing.assert_allclose(S2 @ S2.T, ref, rtol=1e-12, atol=1e-12)
        assert np.all(np.diag(S2) > 0) and np.allclose(S2, np.tril(S2))


def test_generic_ram_recovers_gaussian():
    mean = np.array([1.0, -2.0, 0.5, 3.0])
    A = np.array([[2.0, 0, 0, 0], [1.5, 0.5, 0, 0], [0.3, -0.2, 0.1, 0], [0.0, 1.0, 0.0, 4.0]])
    cov = A @ A.T
    prec = np.linalg.inv(cov)

    def logp(X):
        D = X - mean
        return -0.5 * np.einsum("ci,ij,cj->c", D, prec, D)

    rng = np.random.default_rng(1)
    x0 = mean + rng.standard_normal((8, 4)) * 3 * np.sqrt(np.diag(cov))
    res = run_ram(logp, x0, np.eye(4), n_steps=8000, burn_in=3000, thin=1, seed=2, names=list("abcd"))
    assert res.draws.shape == (8, 5000, 4)
    # Vihola's adaptation coerces the acceptance rate to 0.234
    assert np.all(np.abs(res.acceptance - 0.234) < 0.03), res.acceptance
    summ = summarize_draws(res.draws, res.names)
    for j, name in enumerate(res.names):
        s = summ[name]
        assert s.r_hat < 1.01
        # posterior mean within 5 Monte Carlo standard errors (MCSE from the bulk ESS)
        assert abs(s.mean - mean[j]) < 5 * s.mcse_mean, (name, s.mean, s.mcse_mean)
        # std within 5 standard errors; se(std) ~ std / sqrt(2 ESS)
        assert abs(s.std - np.sqrt(cov[j, j])) < 5 * np.sqrt(cov[j, j]) / np.sqrt(2 * s.ess_bulk)
    emp = np.cov(res.draws.reshape(-1, 4).T)
    corr_emp = emp / np.sqrt(np.outer(np.diag(emp), np.diag(emp)))
    corr = cov / np.sqrt(np.outer(np.diag(cov), np.diag(cov)))
    np.testing.assert_allclose(corr_emp, corr, atol=0.1)


def _grip_data(limit, seed, n=100):
    s_max = 0.4 if limit is None else slip_at_friction(TRUE, limit)
    rng = np.random.default_rng(seed)
    s = rng.uniform(0, s_max, n)
    return s, mf_curve(s, TRUE) + 0.0253 * rng.standard_normal(n)


def test_grip_chains_deterministic_in_bounds_and_truncated():
    s, mu = _grip_data(0.3, 3)
    ml = multistart_fit(s, mu, n_starts=4, rng=0)
    b = np.asarray(TABLE3_BOUNDS)
    S0 = np.linalg.cholesky(ml.proposal_cov)
    kw = dict(n_steps=4000, burn_in=2000, thin=5, seed=7)
    r1 = run_grip_chains(s, mu, np.tile(TRUE, (4, 1)), S0, b, ml.sigma, max_peak_slip=0.1, pilot_steps=1000, **kw)
    r2 = run_grip_chains(s, mu, np.tile(TRUE, (4, 1)), S0, b, ml.sigma, max_peak_slip=0.1, pilot_steps=1000, **kw)
    np.testing.assert_array_equal(r1.draws, r2.draws)
    assert r1.draws.shape == (4, 400, 7) and r1.names[-1] == "sigma"  # sigma sampled by default
    flat = np.ascontiguousarray(r1.draws.reshape(-1, 7)[:, :6])
    assert np.all(flat >= b[:, 0]) and np.all(flat <= b[:, 1])
    assert np.all(peak_batch(flat)[1] <= 0.1)
    # extension: the same chains continued until `until` says yes (here: never, so up to max_steps)
    calls = []
    r3 = run_grip_chains(s, mu, np.tile(TRUE, (4, 1)), S0, b, ml.sigma, max_peak_slip=0.1, pilot_steps=1000,
                         max_steps=8000, until=lambda r: calls.append(r.n_steps) is not None, **kw)
    assert calls == [4000, 6000]  # not asked again once max_steps is reached
    assert r3.n_steps == 8000 and r3.draws.shape == (4, 800, 7)
    assert np.all((r1.acceptance > 0.1) & (r1.acceptance < 0.45))
    assert not np.array_equal(r1.draws[0], r1.draws[1])  # independent streams per chain


def test_grip_chains_stop_between_pieces_same_draws():
    """stop() is asked every stop_check_steps; never true = the uninterrupted run's draws; true = ends there."""
    s, mu = _grip_data(0.3, 3)
    ml = multistart_fit(s, mu, n_starts=4, rng=0)
    b = np.asarray(TABLE3_BOUNDS)
    S0 = np.linalg.cholesky(ml.proposal_cov)
    kw = dict(n_steps=4000, burn_in=2000, thin=5, seed=7, max_peak_slip=0.1, pilot_steps=1000)
    ref = run_grip_chains(s, mu, np.tile(TRUE, (4, 1)), S0, b, ml.sigma, **kw)
    asked = []
    pieces = run_grip_chains(s, mu, np.tile(TRUE, (4, 1)), S0, b, ml.sigma, stop=lambda: asked.append(1) and False,
                             stop_check_steps=700, **kw)
    np.testing.assert_array_equal(pieces.draws, ref.draws)
    assert len(asked) == 4  # steps 1001-4000 in pieces of 700: asked after 1700, 2400, 3100, 3800
    calls = []
    stopped = run_grip_chains(s, mu, np.tile(TRUE, (4, 1)), S0, b, ml.sigma, stop=lambda: True,
                              stop_check_steps=1000, max_steps=8000, until=lambda r: calls.append(1) is None, **kw)
    assert stopped.n_steps == 2000 and calls == []  # ended after the first piece; `until` not asked
    short = run_grip_chains(s, mu, np.tile(TRUE, (4, 1)), S0, b, ml.sigma, **{**kw, "n_steps": 2000, "burn_in": 1000})
    np.testing.assert_array_equal(stopped.draws, short.draws)  # the same chains, ended early


@pytest.mark.slow
def test_grip_chains_full_curve_converge_to_ml_region():
    # full-curve data: long chains mix (R-hat < 1.05; the D/s_v/E ridge, correlation ~0.999, keeps it above 1.01
    # at this length) and centre on the ML region; mu_max is tightly identified
    s, mu = _grip_data(None, 5, n=100)
    ml = multistart_fit(s, mu, n_starts=6, rng=0)
    res = run_grip_chains(s, mu, np.tile(ml.theta, (4, 1)), np.linalg.cholesky(ml.proposal_cov),
                          np.asarray(TABLE3_BOUNDS), ml.sigma, n_steps=100_000, burn_in=20_000, thin=20,
                          pilot_steps=10_000, seed=1)
    summ = res.summary()
    mm = peak_batch(np.ascontiguousarray(res.draws[..., :6].reshape(-1, 6)))[0]
    assert max(v.r_hat for v in summ.values()) < 1.05
    assert abs(summ["C"].mean - ml.theta[1]) < 4 * summ["C"].std
    assert abs(np.mean(mm) - 0.871) < 4 * np.std(mm) + 0.005
    assert np.all(np.abs(res.acceptance - 0.234) < 0.05)


def test_slope_coordinates_sample_the_same_posterior():
    """Chains in (B C D, C, D, E, s_h, f(0)) target the same posterior as chains in theta (change of variables
    with its Jacobian): mu_max quantiles agree within Monte Carlo error (start at an ML corner of the bounds,
    outside the truncated prior: the chains must find the support without collapsing their step)."""
    s, mu = _grip_data(0.5, 2, n=100)
    ml = multistart_fit(s, mu, n_starts=6, rng=0)
    # reference: long chains in theta (R-hat ~1.01 at 300k steps); slope coordinates get there in 60k
    runs = [run_grip_chains(s, mu, np.tile(ml.theta, (4, 1)), np.linalg.cholesky(ml.proposal_cov),
                            np.asarray(TABLE3_BOUNDS), ml.sigma, seed=7, slope_coords=sc, n_steps=n,
                            burn_in=n // 3, thin=20, pilot_steps=n // 6, max_peak_slip=0.15)
            for sc, n in ((False, 300_000), (True, 60_000))]
    mm = [peak_batch(np.ascontiguousarray(r.draws[..., :6].reshape(-1, 6)))[0] for r in runs]
    for q in (0.1, 0.5, 0.9):
        a, b = (np.quantile(m, q) for m in mm)
        assert abs(a - b) < 0.25 * np.std(mm[0]) + 0.01, (q, a, b)
    assert np.all(runs[1].draws[..., 0] >= TABLE3_BOUNDS[0][0]) and np.all(runs[1].draws[..., 0] <= 30.0)


def _eiv_case():
    """Clustered low-excitation data with slip noise (sd 0.003) larger than the friction noise carried through the
    slope (the live pipeline's regime), and per-sample friction variances."""
    rng = np.random.default_rng(11)
    s_true = np.concatenate([np.full(30, slip_at_friction(TRUE, 0.15)), np.full(30, slip_at_friction(TRUE, 0.4)),
                             np.linspace(0, slip_at_friction(TRUE, 0.5), 20)])
    s = s_true + 0.003 * rng.standard_normal(s_true.size)
    mu = mf_curve(s_true, TRUE) + 0.01 * rng.standard_normal(s_true.size)
    return s, mu, np.full(s.size, 0.003**2), rng.uniform(0.0, 1e-4, s.size)


def _independent_log_density(s, mu, theta, sigma, vs, vm):
    """sum of scipy.stats.norm.logpdf with Var_i = sigma^2 + v_mu_i + f'(s_i)^2 v_s_i, f' by central differences."""
    from scipy.stats import norm

    h = 1e-7
    slope = (mf_curve(s + h, theta) - mf_curve(s - h, theta)) / (2 * h)
    return norm.logpdf(mu, mf_curve(s, theta), np.sqrt(sigma**2 + vm + slope**2 * vs)).sum()


def test_chain_log_target_is_the_exact_gaussian_density():
    """The chains' log target equals an independent evaluation of the errors-in-variables density (log-variance
    term included), in theta and in the slope coordinates (plus the log Jacobian, by finite differences); the old
    target (-1/2 sum r^2/Var, no log term) differs between two points by tens of nats."""
    from vehcal_ros.estimation.grip.posterior import (
        from_slope_coords,
        grip_log_target,
        grip_problem,
        to_slope_coords,
    )

    s, mu, vs, vm = _eiv_case()
    b = np.asarray(TABLE3_BOUNDS)
    rng = np.random.default_rng(5)
    for theta in (TRUE, TRUE * [1.5, 1, 1, 1, 1, 1], *(b[:, 0] + (b[:, 1] - b[:, 0]) * rng.random((5, 6)))):
        for sigma in (0.003, 0.02):
            ref = _independent_log_density(s, mu, theta, sigma, vs, vm)
            x = np.append(theta, np.log(sigma))
            got = grip_log_target(grip_problem(s, mu, b, sigma_mode="sampled", slip_var=vs, mu_var=vm), x)
            assert got == pytest.approx(ref, rel=1e-9, abs=1e-9)
            fixed = grip_log_target(grip_problem(s, mu, b, sigma_mode="fixed", sigma=sigma, slip_var=vs, mu_var=vm),
                                    theta)
            assert fixed == pytest.approx(ref, rel=1e-9, abs=1e-9)
            # slope coordinates: density in x = density in theta x |d theta / d x| (finite-difference Jacobian)
            xs = to_slope_coords(theta)
            J = np.empty((6, 6))
            for j in range(6):
                h = 1e-6 * max(1.0, abs(xs[j]))
                e = np.zeros(6)
                e[j] = h
                J[:, j] = (from_slope_coords(xs + e) - from_slope_coords(xs - e)) / (2 * h)
            got_x = grip_log_target(grip_problem(s, mu, b, slip_var=vs, mu_var=vm, slope_coords=True),
                                    np.append(xs, np.log(sigma)))
            assert got_x == pytest.approx(ref + np.log(abs(np.linalg.det(J))), rel=1e-7, abs=1e-6)
    # the old target (no log-variance term) is a different function of theta: B x1.5 moves it by another amount
    def old(theta):
        h = 1e-7
        sl = (mf_curve(s + h, theta) - mf_curve(s - h, theta)) / (2 * h)
        return -0.5 * np.sum((mu - mf_curve(s, theta)) ** 2 / (0.01**2 + vm + sl**2 * vs))

    steep = TRUE * [1.5, 1, 1, 1, 1, 1]
    new_diff = _independent_log_density(s, mu, steep, 0.01, vs, vm) - _independent_log_density(s, mu, TRUE, 0.01,
                                                                                               vs, vm)
    assert abs((old(steep) - old(TRUE)) - new_diff) > 10.0


_BG, _DG = np.linspace(5, 30, 201), np.linspace(0.2, 2, 201)
_PIN = 1e-9
#: B and D free, C, E, s_h, s_v pinned by bounds of width 2e-9 (sigma fixed at 0.01)
_PINNED = np.array([(5, 30), (1.6 - _PIN, 1.6 + _PIN), (0.2, 2), (-1.09 - _PIN, -1.09 + _PIN), (-_PIN, _PIN),
                    (-_PIN, _PIN)])


@functools.lru_cache(maxsize=2)
def _grid_moments(log_term: bool) -> list[tuple[float, float]]:
    """(mean, std) of B and D under a 201 x 201 grid posterior of the independent density of :func:`_eiv_case`
    (sigma 0.01; ``log_term`` False: the old target without the log-variance term)."""
    from scipy.stats import norm

    s, mu, vs, vm = _eiv_case()
    lp = np.empty((_BG.size, _DG.size))
    h = 1e-7
    for i, B in enumerate(_BG):
        for j, D in enumerate(_DG):
            th = TRUE.copy()
            th[0], th[2] = B, D
            f = mf_curve(s, th)
            sl = (mf_curve(s + h, th) - mf_curve(s - h, th)) / (2 * h)
            sd = np.sqrt(0.01**2 + vm + sl**2 * vs)
            lp[i, j] = norm.logpdf(mu, f, sd).sum() if log_term else np.sum(-0.5 * ((mu - f) / sd) ** 2)
    w = np.exp(lp - lp.max())
    w /= w.sum()
    out = []
    for g, p in ((_BG, w.sum(1)), (_DG, w.sum(0))):
        m = float(p @ g)
        out.append((m, float(np.sqrt(p @ g**2 - m * m))))
    return out


def _assert_matches_grid(res, old_differs: bool = True) -> None:
    summ = summarize_draws(res.draws[..., [0, 2]], ["B", "D"])
    for (m, sd), (m_old, _), name, dg in zip(_grid_moments(True), _grid_moments(False), ("B", "D"),
                                             (_BG[1] - _BG[0], _DG[1] - _DG[0])):
        got = summ[name]
        assert got.r_hat < 1.01
        assert abs(got.mean - m) < 5 * got.mcse_mean + dg, (name, got.mean, m)
        assert abs(got.std - sd) < 5 * sd / np.sqrt(2 * got.ess_bulk) + dg, (name, got.std, sd)
        if old_differs:
            assert abs(m_old - m) > 20 * got.mcse_mean + dg  # the old target's posterior is elsewhere


def test_two_parameter_posterior_matches_a_brute_force_grid():
    """B and D free (C, E, s_h, s_v pinned by bounds of width 2e-9), sigma fixed: the chains' posterior mean and
    std of B and D agree with a 201 x 201 grid posterior of the independent density within 5 Monte Carlo
    standard errors (+ grid resolution); the grid posterior of the old target (no log term) is far off, so this
    test fails on it."""
    s, mu, vs, vm = _eiv_case()
    res = run_grip_chains(s, mu, np.tile(TRUE, (4, 1)), np.diag([2.0, 1e-10, 0.1, 1e-10, 1e-10, 1e-10]), _PINNED,
                          0.01, 40_000, 10_000, 10, sigma_mode="fixed", slip_var=vs, mu_var=vm, seed=1)
    _assert_matches_grid(res)


@pytest.mark.parametrize("components", [1, 3])
def test_independence_steps_from_another_posterior_keep_the_grid_posterior(components):
    """Half the steps are independence steps from a t fitted to draws of ANOTHER posterior (B and D shifted by
    about one posterior std and half as wide: a previous window's), refitted to the chains' own draws at every
    extension: the chains still sample the grid posterior (mean and std within 5 MCSE), the independence steps
    are used (accepted in >= 5 % of tries) and the run is deterministic. With ``components`` 3 the proposal is
    the EM mixture of t plus the defensive t (refitted at the end of the burn-in as well)."""
    s, mu, vs, vm = _eiv_case()
    (mb, sb), (md, sd) = _grid_moments(True)
    rng = np.random.default_rng(3)
    other = np.tile(TRUE, (4000, 1))
    other[:, 0] = mb + sb + 0.5 * sb * rng.standard_normal(4000)
    other[:, 2] = md - sd + 0.5 * sd * rng.standard_normal(4000)
    other[:, [1, 3, 4, 5]] += 3e-10 * rng.standard_normal((4000, 4))
    run = dict(sigma_mode="fixed", slip_var=vs, mu_var=vm, seed=1, proposal_draws=other, p_independent=0.5,
               max_steps=40_000, until=lambda r: False, proposal_components=components)
    res = run_grip_chains(s, mu, np.tile(TRUE, (4, 1)), np.diag([2.0, 1e-10, 0.1, 1e-10, 1e-10, 1e-10]), _PINNED,
                          0.01, 20_000, 5_000, 10, **run)
    assert res.n_steps == 40_000 and res.extra["p_independent"] == 0.5
    assert res.extra["independence_acceptance"] >= 0.05
    _assert_matches_grid(res, old_differs=False)
    again = run_grip_chains(s, mu, np.tile(TRUE, (4, 1)), np.diag([2.0, 1e-10, 0.1, 1e-10, 1e-10, 1e-10]),
                            _PINNED, 0.01, 20_000, 5_000, 10, **run)
    np.testing.assert_array_equal(res.draws, again.draws)


def test_mixture_proposal_density_and_draws_match_scipy():
    """The packed mixture of multivariate t (independence_proposal with components 3, fitted to draws from two
    separated clusters): its log density differences equal scipy's mixture of multivariate_t (weights, means
    and L L^T read back from the packing) at random points, and 40 000 draws of the numba sampler have that
    mixture's mean (within 5 standard errors) and its marginals (two-sample Kolmogorov-Smirnov against 40 000
    draws of the scipy mixture, p > 1e-3 in each coordinate)."""
    from scipy.stats import multivariate_t

    from vehcal_ros.inference.adaptive_metropolis import (
        IND_HEAD,
        independence_proposal,
        mixture_draw,
        mixture_log_density,
        seed_states,
    )

    d = 3
    rng = np.random.default_rng(5)
    x = np.vstack([rng.normal([0, 0, 0], [1, 0.5, 0.2], (3000, d)), rng.normal([6, 2, -1], [0.5, 1, 0.3], (3000, d))])
    ind = independence_proposal(x, d, p=0.5, df=5, components=3)
    k = int(ind[2])
    assert ind[0] == 0.5 and k >= 3   # >= 2 EM components + the defensive one
    size = 2 + d + d * d
    comps = [ind[IND_HEAD + j * size: IND_HEAD + (j + 1) * size] for j in range(k)]
    pis = np.array([c[0] for c in comps])
    assert abs(pis.sum() - 1.0) < 1e-12 and abs(pis[-1] - 0.25) < 1e-12
    dists = [multivariate_t(c[2:2 + d], (L := c[2 + d:].reshape(d, d)) @ L.T, df=5) for c in comps]

    def scipy_logq(y):
        return np.logaddexp.reduce([np.log(pi) + dist.logpdf(y) for pi, dist in zip(pis, dists)])

    work = np.empty(d)
    pts = rng.normal([3, 1, -0.5], [4, 2, 1], (20, d))
    ours = np.array([mixture_log_density(ind, p, work) for p in pts])
    theirs = np.array([scipy_logq(p) for p in pts])
    np.testing.assert_allclose(ours - ours[0], theirs - theirs[0], atol=1e-9)
    st = seed_states(11, 1)[0]
    r, z, out = np.empty(d), np.empty(5), np.empty(d)
    n = 40_000
    draws = np.empty((n, d))
    for i in range(n):
        mixture_draw(ind, st, r, z, out)
        draws[i] = out
    mean = sum(pi * c[2:2 + d] for pi, c in zip(pis, comps))
    se = draws.std(axis=0) / np.sqrt(n)
    assert np.all(np.abs(draws.mean(axis=0) - mean) < 5 * se)
    from scipy.stats import ks_2samp

    comp = rng.choice(k, n, p=pis)
    ref = np.vstack([dists[j].rvs(size=int((comp == j).sum()), random_state=rng).reshape(-1, d) for j in range(k)])
    for j in range(d):
        assert ks_2samp(draws[:, j], ref[:, j]).pvalue > 1e-3, j


def test_shape_prior_adds_a_gaussian_on_slope_shape_and_curvature():
    """With a tire-shape prior the log target gains log N((B C D, C, E); mean, cov) (scipy's multivariate normal,
    up to its constant), in theta and in the slope coordinates alike."""
    from scipy.stats import multivariate_normal

    from vehcal_ros.estimation.grip.posterior import grip_log_target, grip_problem, to_slope_coords

    s, mu, vs, vm = _eiv_case()
    b = np.asarray(TABLE3_BOUNDS)
    mean = np.array([21.0, 1.5, -1.0])
    cov = np.array([[4.0, 0.1, 0.2], [0.1, 0.04, 0.01], [0.2, 0.01, 0.25]])
    mvn = multivariate_normal(mean, cov)
    rng = np.random.default_rng(8)
    for theta in b[:, 0] + (b[:, 1] - b[:, 0]) * rng.random((4, 6)):
        y = [theta[0] * theta[1] * theta[2], theta[1], theta[3]]
        for sc in (False, True):
            x = np.append(to_slope_coords(theta) if sc else theta, np.log(0.01))
            base = grip_log_target(grip_problem(s, mu, b, slip_var=vs, mu_var=vm, slope_coords=sc), x)
            with_prior = grip_log_target(grip_problem(s, mu, b, slip_var=vs, mu_var=vm, slope_coords=sc,
                                                      shape_prior=(mean, cov)), x)
            assert with_prior - base == pytest.approx(mvn.logpdf(y) - mvn.logpdf(mean), rel=1e-9, abs=1e-9)
