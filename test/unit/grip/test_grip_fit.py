"""GripEstimator end to end (friction paper, Algorithm 1, simulated case of Section 4.1)."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from vehcal_ros.errors import EstimationError, InputError
from vehcal_ros.estimation.grip.fit import GripConfig, GripEstimator
from vehcal_ros.models.pacejka import mf_curve, slip_at_friction

TRUE = np.array([15.4, 1.60, 0.871, -1.09, 0.0, 0.0])
MU_MAX = 0.871
SIGMA = 0.0253
FAST = dict(n_steps=4000, n_ml_starts=4)


def _data(limit, seed, n=100):
    s_max = 0.4 if limit is None else slip_at_friction(TRUE, limit)
    rng = np.random.default_rng(500 + seed)
    s = rng.uniform(0, s_max, n)
    return s, mf_curve(s, TRUE) + SIGMA * rng.standard_normal(n)


def test_input_validation_and_cleaning():
    s, mu = _data(None, 0, n=60)
    s2 = np.concatenate([s, [np.nan, 0.1, np.inf], -s[:10]])
    mu2 = np.concatenate([mu, [0.5, np.nan, 0.2], -mu[:10]])
    est = GripEstimator(GripConfig.paper_case(**FAST)).prepare(s2, mu2)
    assert est[2] == 3 and est[3] == 10 and est[0].size == 60  # braking dropped by default
    s3, mu3, _, nb = GripEstimator(GripConfig.paper_case(mirror_braking=True, **FAST)).prepare(s2, mu2)
    assert nb == 10 and s3.size == 70 and np.all(s3 >= 0)
    np.testing.assert_allclose(s3[-10:], s[:10])
    np.testing.assert_allclose(mu3[-10:], mu[:10])
    with pytest.raises(EstimationError, match="too few"):
        GripEstimator(GripConfig.paper_case(min_points=20, **FAST)).fit(s[:10], mu[:10])
    with pytest.raises(EstimationError, match="unexcited"):
        GripEstimator(GripConfig.paper_case(**FAST)).fit(s, 0.01 * np.sin(s))
    with pytest.raises(EstimationError, match="slip spread"):
        GripEstimator(GripConfig.paper_case(**FAST)).fit(np.full(40, 0.02), mu[:40])
    with pytest.raises(InputError):
        GripConfig.paper_case(prior_mode="bogus")
    with pytest.raises(InputError):
        GripConfig.paper_case(max_peak_slip=0.0)


def test_full_curve_fit_fields_and_warm_start():
    s, mu = _data(None, 1)
    est = GripEstimator(GripConfig.paper_case(seed=3)).fit(s, mu)
    # whole curve: the 90 % interval contains the truth and is narrow. One interval at one seed: a regression
    # check, not a coverage test (over seeds it would fail a calibrated fit 10 % of the time and pass an estimate
    # biased by 2 posterior SDs 36 % of the time; test_sbc_paper_case_fast tests coverage)
    assert est.mu_max.lower <= MU_MAX <= est.mu_max.upper
    assert est.mu_max.upper - est.mu_max.lower < 0.06
    assert abs(est.slip_at_peak_mean - 0.0757) < 0.01
    d = json.loads(json.dumps(est.to_dict(), allow_nan=False))
    assert set(d["mu_max"]) == {"mean", "std", "lower", "upper", "prob"}
    assert set(d["slip_at_peak"]) == {"mean", "std"} and set(d["theta"]) == {"B", "C", "D", "E", "s_h", "s_v"}
    for key in ("r_hat_max", "ess_bulk_min", "converged", "n_points", "elapsed_s", "acceptance",
                "share_removed_by_prior", "theta_ml", "sigma", "curve"):
        assert key in d
    assert d["n_points"] == 100 and len(d["curve"]["q50"]) == 61
    assert np.all(np.array(d["curve"]["q05"]) <= np.array(d["curve"]["q95"]))
    # Eq. 17; rel. std of s ~ 1/sqrt(2*94) = 0.073, so rel=0.3 is 4.1 SDs: false alarm 4e-5, 80 % power against
    # a sigma off by 36 %
    assert est.sigma == pytest.approx(SIGMA, rel=0.3)
    # same seed -> same numbers
    again = GripEstimator(GripConfig.paper_case(seed=3)).fit(s, mu)
    assert again.mu_max == est.mu_max
    # warm start from the previous estimate on fresh data of the same curve
    s2, mu2 = _data(None, 2)
    warm = GripEstimator(GripConfig.paper_case(seed=4, n_steps=10_000)).fit(s2, mu2, warm_start=est)
    cold = GripEstimator(GripConfig.paper_case(seed=4, n_steps=10_000)).fit(s2, mu2)
    assert warm.warm_started and not cold.warm_started
    # same posterior whether warm or cold started: means agree within half a posterior std (MC error ~ std/10
    # each, so the difference has SD ~0.14 std and the bound is 3.5 SDs: false alarm 4e-4, 80 % power against a
    # warm-start bias of 0.62 std)
    assert abs(warm.mu_max.mean - cold.mu_max.mean) < 0.5 * cold.mu_max.std
    # a calibrated posterior puts the truth within 4 stds but for 6e-5 of seeds (normal); 80 % power against a
    # bias of 4.8 stds
    assert abs(warm.mu_max.mean - MU_MAX) < 4 * warm.mu_max.std


def test_posthoc_prior_reports_removed_share():
    s, mu = _data(0.3, 0)
    est = GripEstimator(GripConfig.paper_case(prior_mode="posthoc", **FAST)).fit(s, mu)
    assert 0.0 < est.share_removed_by_prior < 1.0
    assert est.slip_at_peak_mean <= 0.1


@pytest.mark.slow
def test_low_mu_coverage_paper_case() -> None:
    """Paper's simulated case, data mu <= 0.3: the 90 % interval must cover the true mu_max in 80-98 % of noise
    seeds (benchmarks/README_grip.md; the live settings measure 98 %, 49 / 50) and the posterior mean err by less
    than 25 % in the median (measured 6-7 % at the live settings).

    Coverage at one fixed tire is a frequentist property, not the nominal 90 %, hence the target range. The
    posterior is the live fit's, sampled with the SBC test's reduced budget (4 chains x 20 000 steps, extended to
    40 000; it covered on 80 / 80 other seeds, 100-179); 55 seeds. Operating characteristics
    (benchmarks/grip_test_power.py, exact binomial):

    * pass iff >= 37 of 55 intervals cover: P(pass) = 0.992 at coverage 0.8 (the low end of the target; higher
      coverage passes more often), 0.726 at 0.7, 0.168 at 0.6 (power 0.83 against coverage 0.6) and 0.007 at
      0.5. The former rule (>= 3 of 8) passed 0.999 / 0.989 / 0.950 / 0.855 of the time at 0.8 / 0.7 / 0.6 / 0.5.
    * The upper end (98 %) is not tested: intervals that always cover give 55 of 55, which a coverage of 0.98
      gives with probability 0.98^55 = 0.33; a 1 % false alarm there needs n >= 228 seeds (~60 CPU-s more).
    * median error < 0.25: with 55 seeds it fails iff >= 28 errors reach 0.25. Measured P(error >= 0.25) per seed
      0.09 (12 / 135 seeds at this budget, these 55 included): false alarm 1e-15 (5e-10 at 0.15, its 95 % upper
      bound); power 0.07 / 0.50 / 0.93 if a seed's error exceeds 25 % with probability 0.4 / 0.5 / 0.6 (the
      boundary, by construction, is a median error of 25 %).

    Measured at these 55 seeds: 54 cover, median error 9.2 %, 21 CPU-s.
    """
    n = 55
    cheap = dict(n_chains=4, n_steps=20_000, max_steps=40_000)
    covered, errs = 0, []
    for seed in range(n):
        s, mu = _data(0.3, seed)
        est = GripEstimator(GripConfig.paper_case(seed=seed, **cheap)).fit(s, mu)
        covered += est.mu_max.lower <= MU_MAX <= est.mu_max.upper
        errs.append(abs(est.mu_max.mean / MU_MAX - 1))
    assert covered >= 37, covered
    assert np.median(errs) < 0.25, errs


def test_errors_in_variables_fit_takes_slip_and_mu_variances():
    """Clustered everyday-driving data (cruise near mu = 0, a steady acceleration at mu ~ 0.15, a short ramp)
    with slip variances and per-sample friction variances (an estimated force), friction drawn given the measured
    slips from the model the fit assumes (Var_i = sigma^2 + v_mu_i + f'(s_i)^2 v_s_i): the fit converges by the
    rule, its 90 % interval contains the true mu_max, sigma stays small, and bad variance arrays are refused.
    (Data generated with noise on the true slip instead are the SBC benchmark's live_latent case.)"""
    from vehcal_ros.models.pacejka import slope

    rng = np.random.default_rng(11)
    s = np.concatenate([2e-4 * rng.standard_normal(40), slip_at_friction(TRUE, 0.15) + 2e-4 * rng.standard_normal(40),
                        np.linspace(0.0, slip_at_friction(TRUE, 0.3), 20)])
    vs = np.full(s.size, 1e-3**2)
    vm = np.where(np.arange(s.size) % 2 == 0, 0.0, 0.01**2)
    sd = np.sqrt(0.005**2 + vm + slope(s, TRUE) ** 2 * vs)
    mu = mf_curve(s, TRUE) + sd * rng.standard_normal(s.size)
    cfg = GripConfig.paper_case(n_ml_starts=8, max_peak_slip=0.15, seed=3, keep_negative_slip=True, slip_prior="flat")
    est = GripEstimator(cfg).fit(s, mu, slip_var=vs, mu_var=vm)
    assert est.converged and est.r_hat_max <= 1.01 and min(est.ess_bulk_min, est.ess_tail_min) >= 400
    assert est.mu_max.lower <= MU_MAX <= est.mu_max.upper
    # sigma (sampled, Jeffreys prior; truth 0.005) is weakly identified here: the slope term f'^2 v_s ~ (0.021)^2
    # dominates every residual's variance, so only an upper limit is learnt
    assert est.sigma < 0.01
    d = est.to_dict()
    assert d["converged"] is True and set(d["diagnostics"]) == {"B", "C", "D", "E", "s_h", "s_v", "sigma", "mu_max"}
    with pytest.raises(InputError, match="slip_var"):
        GripEstimator(cfg).fit(s, mu, slip_var=np.ones(3))
    with pytest.raises(InputError, match="mu_var"):
        GripEstimator(cfg).fit(s, mu, mu_var=np.ones(3))


def _clustered_design() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(true slips, measured slips, friction, slip variances) of everyday driving as the live pipeline sees it:
    cruise at 0, a steady acceleration at mu = 0.3, a short ramp; block-average slip noise 1.3e-3."""
    rng = np.random.default_rng(1)
    a = slip_at_friction(TRUE, 0.3)
    t = np.concatenate([np.zeros(60), np.full(25, a), np.linspace(0.0, a, 15)])
    s = t + 1.3e-3 * rng.standard_normal(t.size)
    mu = mf_curve(t, TRUE) + 3e-3 * rng.standard_normal(t.size)
    return t, s, mu, np.full(t.size, 1.3e-3**2)


def test_clustered_true_slips_flat_prior_is_confidently_low_deconvolved_is_not():
    """Everyday driving as the live pipeline sees it (accel_coast): true slips in clusters (cruise at 0, a steady
    acceleration at mu = 0.3, a short ramp), measured with block-average slip noise (1.3e-3) far wider than the
    clusters, friction at the TRUE slip. The flat-prior effective-variance likelihood reads the tight friction of
    each cluster as evidence of a flat curve there and converges to an interval below the true mu_max; with the
    deconvolved true-slip distribution (default) the interval contains it."""
    t, s, mu, vs = _clustered_design()
    cfg = GripConfig.paper_case(n_ml_starts=8, max_peak_slip=0.15, seed=3, keep_negative_slip=True)
    flat = GripEstimator(dataclasses.replace(cfg, slip_prior="flat")).fit(s, mu, slip_var=vs)
    assert flat.mu_max.upper < MU_MAX, flat.mu_max
    est = GripEstimator(cfg).fit(s, mu, slip_var=vs)
    assert est.slip_components >= 2 and est.converged
    assert est.mu_max.lower <= MU_MAX <= est.mu_max.upper, est.mu_max


def test_posterior_slices_take_a_given_slip_distribution():
    """``slip_posterior="slices"`` with ``slip_distribution``: the samples' true-slip posteriors are taken under the
    distribution given (here the design's own: the three clusters' true slips, what SBC's oracle case gives) and
    enter the likelihood as slices; on the clustered design above the chains converge and the interval holds the
    true mu_max. Coverage over many data sets is benchmarks/grip_sbc_recorded.py's (``--slip-posterior``)."""
    from vehcal_ros.estimation.grip.latent_slip import SlipMixture

    t, s, mu, vs = _clustered_design()
    values, counts = np.unique(np.round(t, 6), return_counts=True)
    truth = SlipMixture(counts / counts.sum(), values, np.full(values.size, 1e-12), 0.0)
    cfg = GripConfig.paper_case(n_ml_starts=8, max_peak_slip=0.15, seed=3, keep_negative_slip=True,
                                slip_posterior="slices")
    est = GripEstimator(cfg).fit(s, mu, slip_var=vs, slip_distribution=truth)
    assert est.slip_components == values.size and est.n_points == t.size and est.converged
    assert est.mu_max.lower <= MU_MAX <= est.mu_max.upper, est.mu_max
    with pytest.raises(InputError, match="slip_mean_error"):
        GripConfig.paper_case(slip_posterior="slices", slip_mean_error=True)
    with pytest.raises(InputError, match="slip_posterior"):
        GripConfig.paper_case(slip_posterior="exact")


def test_converged_means_exactly_the_rule():
    """``converged`` is split R-hat <= 1.01 and bulk and tail ESS >= 400 on every parameter, sigma and mu_max:
    recomputed here from the raw chains with arviz directly; a short run that cannot meet it says so."""
    import arviz as az

    from vehcal_ros.models.pacejka import peak_batch

    s, mu = _data(0.3, 0)
    for cfg in (GripConfig.paper_case(seed=1), GripConfig.paper_case(seed=1, n_steps=2000, max_steps=2000, thin=2)):
        est = GripEstimator(cfg).fit(s, mu)
        dr = est.chains.draws
        mm = peak_batch(np.ascontiguousarray(dr[..., :6].reshape(-1, 6)))[0].reshape(dr.shape[:2])
        cols = [dr[..., j] for j in range(dr.shape[2])] + [mm]
        ok = all(float(az.rhat(c)) <= 1.01 and float(az.ess(c, method="bulk")) >= 400
                 and float(az.ess(c, method="tail")) >= 400 for c in cols)
        assert est.converged == ok
        assert est.r_hat_max == pytest.approx(max(float(az.rhat(c)) for c in cols), rel=1e-9)
    assert not est.converged  # 2000 steps x 8 chains, 500 draws per chain after burn-in: not enough


def test_pipeline_withholds_estimates_below_the_excitation_gate():
    from vehcal_ros.estimation.grip.friction_samples import GripSignalConfig
    from vehcal_ros.estimation.grip.pipeline import FitOutcome, GripPipeline, fit_config_from

    s, mu = _data(0.3, 1)
    est = GripEstimator(GripConfig.paper_case(**FAST)).fit(s, mu)
    p = GripPipeline(GripSignalConfig.from_description(scope="vehicle"), min_excitation=0.15, max_r_hat=2.0,
                     min_ess=0.0, min_ess_tail=0.0)
    assert p.commit([FitOutcome(scope="vehicle", stamp=1.0, n_points=100, excitation=0.1, estimate=est)]) == []
    assert p.status["vehicle"].estimate is None and "min_excitation" in p.status["vehicle"].message
    assert p.commit([FitOutcome(scope="vehicle", stamp=2.0, n_points=100, excitation=0.3, estimate=est)]) == [
        "vehicle"]
    cfg = fit_config_from({"theta_lower": [5, 0.5, 0.2, -2, -0.05, -0.3], "theta_upper": [45, 2, 2, 0, 0.05, 0.3]})
    assert cfg.bounds[0] == (5.0, 45.0)
    with pytest.raises(InputError, match="bounds"):
        fit_config_from({"theta_lower": [50, 0.5, 0.2, -2, -0.05, -0.3], "theta_upper": [45, 2, 2, 0, 0.05, 0.3]})
    assert fit_config_from({"slip_prior": "flat"}).slip_prior == "flat"    # replay/bench only
    with pytest.raises(InputError, match="slip_prior"):
        fit_config_from({"slip_prior": "none"})
