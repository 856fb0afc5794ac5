"""The spread between the parts of a window (estimation/calibration/maneuver_spread.py).

* The DerSimonian-Laird estimate against a hand-computed case, its heterogeneity test's size on homogeneous parts
  and its mean on parts with a known spread (simulated estimates; the power calculations are beside each test).
* ``widened``: the marginal variance grows by exactly tau^2, the means, correlations and R-hat are kept.
* On the 8-DOF's own data (the paper's longitudinal maneuver simulated with known parameters and the paper's
  noise, calibration_synthetic) the parts agree and nothing is widened; when the vehicle's Cx differs between the
  halves of the window (the data of two simulations spliced at a part boundary) the parts disagree and Cx is
  widened.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from calibration_synthetic import NOISE, TRUTH, require_chrono, synthetic_segment
from scipy.signal import lfilter
from scipy.stats import chi2

from vehcal_ros.estimation.calibration.fit import Segment, calibrate_stage
from vehcal_ros.estimation.calibration.maneuver_spread import (
    MIN_PARTS,
    PartSpread,
    dersimonian_laird,
    part_bounds,
    part_spread,
    widened,
)
from vehcal_ros.inference.diagnostics import summarize_draws

HELD = {k: v for k, v in TRUTH.items() if k not in ("Cxf", "Cxr")}


def test_part_bounds_cut_the_span_into_equal_parts_of_at_least_the_minimum() -> None:
    assert part_bounds(0.0, 4.0, 4, 1.0) == [(0.0, 1.0), (1.0, 2.0), (2.0, 3.0), (3.0, 4.0)]
    three = part_bounds(10.0, 13.5, 4, 1.0)   # 3.5 s: three parts of 1.17 s, end to end
    assert [b - a for a, b in three] == pytest.approx([3.5 / 3] * 3)
    assert three[0][0] == 10.0 and three[-1][1] == 13.5 and all(a[1] == b[0] for a, b in zip(three, three[1:]))
    assert part_bounds(0.0, 2.9, 4, 1.0) == []          # fewer than MIN_PARTS parts of 1 s
    # 300 samples at 100 Hz span 2.99 s and last 3 s: three parts of 1 s
    assert part_bounds(101.0, 103.99, 4, 1.0) == []
    assert len(part_bounds(101.0, 103.99, 4, 1.0, dt=0.01)) == 3
    assert part_bounds(101.0, 103.98, 4, 1.0, dt=0.01) == []   # 299 samples
    assert len(part_bounds(0.0, 100.0, 4, 1.0)) == 4


def test_dersimonian_laird_on_a_hand_computed_case() -> None:
    """y = (-3, 0, 3), v = 1 each: Q = 18 > chi2(2) 95 % quantile 5.99; S1 = 3, S2 = 3, tau^2 = (18 - 2) / (3 - 1) =
    8; the random-effects variance 1 / (3 / 9) = 3 against the fixed-effect 1 / 3: inflation 9. Agreeing parts:
    Q = 0, tau^2 = 0, inflation 1. Fewer than three usable parts: nothing estimated."""
    s = dersimonian_laird([-3.0, 0.0, 3.0], [1.0, 1.0, 1.0])
    assert s.q == pytest.approx(18.0) and s.tau2 == pytest.approx(8.0) and s.parts == 3 and s.heterogeneous
    assert s.inflation == pytest.approx(9.0)
    s = dersimonian_laird([2.0, 2.0, 2.0, 2.0], [1.0, 4.0, 1.0, 9.0])
    assert s.q == pytest.approx(0.0) and s.tau2 == 0.0 and s.inflation == 1.0 and not s.heterogeneous
    s = dersimonian_laird([1.0, 5.0, math.nan, 3.0], [1.0, 1.0, 1.0, -1.0])
    assert s.parts == 2 and s.tau2 == 0.0 and math.isnan(s.q)
    # weights: y = (0, 0, 10) with v = (1, 1, 100): the noisy third part is no evidence of a spread
    assert dersimonian_laird([0.0, 0.0, 10.0], [1.0, 1.0, 100.0]).tau2 == 0.0


def test_homogeneous_parts_are_widened_at_the_tests_size() -> None:
    """4 parts with unequal variances and no spread, 4000 sets: the share widened is the Q test's size, 5 %.
    The binomial SE at 5 % is 0.0034, so the tolerance 0.015 is 4.4 SE; a test of true size 8 % (SE 0.0043) is
    failed with probability P(share > 0.065 | 0.08) = 0.9995, one of size 2 % surely."""
    rng = np.random.default_rng(11)
    v = np.array([1.0, 2.0, 0.5, 4.0])
    widened_share = np.mean([dersimonian_laird(rng.normal(5.0, np.sqrt(v)), v).tau2 > 0.0 for _ in range(4000)])
    assert abs(widened_share - 0.05) <= 0.015, widened_share


def test_a_known_spread_is_recovered() -> None:
    """20 parts, v_k in [0.5, 2], true tau^2 = 4: the mean estimate over 400 sets is within 10 % of 4. The
    estimator's sd per set is ~ sqrt(2 (v + tau^2)^2 / 19) = 1.6, so the mean's SE is 0.08 and the tolerance 0.4
    is 5 SE; a 20 % bias (0.8, 10 SE) fails it with probability ~1. With 4 equal parts (v = 1) Q / (1 + tau^2)
    is chi^2(3), so the test finds that spread with probability P(chi^2(3) > q95 / 5) = 0.668; 1000 sets give it
    to SE 0.015, and the tolerance 0.045 (3 SE) fails a Q off by a factor 1.25 (power 0.57 -> 0.76) surely."""
    rng = np.random.default_rng(5)
    v = rng.uniform(0.5, 2.0, 20)
    est = [dersimonian_laird(rng.normal(0.0, 2.0, 20) + rng.normal(0.0, np.sqrt(v)), v).tau2 for _ in range(400)]
    assert np.mean(est) == pytest.approx(4.0, rel=0.1)
    v4 = np.ones(4)
    found = np.mean([dersimonian_laird(rng.normal(0.0, 2.0, 4) + rng.normal(0.0, 1.0, 4), v4).heterogeneous
                     for _ in range(1000)])
    power = chi2.sf(chi2.isf(0.05, 3) / 5.0, 3)
    assert abs(found - power) <= 0.045, (found, power)


def _result(draws: np.ndarray, names: tuple[str, ...], priors: dict) -> object:
    from vehcal_ros.estimation.calibration.fit import CalibrationResult
    params = {n: s.to_dict() for n, s in summarize_draws(draws, list(names)).items()}
    return CalibrationResult("longitudinal", params, {}, True, 0.0, 0.0, 1, names, draws, priors=priors)


def test_widened_multiplies_the_variance_by_the_inflation_and_keeps_the_rest() -> None:
    rng = np.random.default_rng(2)
    cov = np.array([[4.0, 1.2], [1.2, 1.0]])
    draws = rng.multivariate_normal([100.0, 50.0], cov, size=(4, 500))
    res = _result(draws, ("Cxf", "Cxr"), {"Cxf": (0.0, 1e4), "Cxr": (0.0, 1e4)})
    out = widened(res, {"Cxf": PartSpread(5.0, 20.0, 4, inflation=3.0), "Cxr": PartSpread(0.0, 1.0, 4)})
    flat0, flat1 = draws.reshape(-1, 2), out.draws.reshape(-1, 2)
    assert np.var(flat1[:, 0], ddof=1) == pytest.approx(3.0 * np.var(flat0[:, 0], ddof=1), rel=1e-9)
    np.testing.assert_allclose(flat1[:, 1], flat0[:, 1])
    np.testing.assert_allclose(flat1.mean(axis=0), flat0.mean(axis=0), rtol=1e-12)
    assert np.corrcoef(flat1.T)[0, 1] == pytest.approx(np.corrcoef(flat0.T)[0, 1], rel=1e-9)
    assert out.parameters["Cxf"]["r_hat"] == pytest.approx(res.parameters["Cxf"]["r_hat"], rel=1e-9)
    assert out.parameters["Cxf"]["std"] == pytest.approx(math.sqrt(3.0 * np.var(flat0[:, 0], ddof=1)), rel=1e-3)
    assert out.maneuver_spread["Cxf"]["widened"] and not out.maneuver_spread["Cxr"]["widened"]
    assert out.maneuver_spread["Cxf"]["tau"] == pytest.approx(math.sqrt(5.0))
    # the variance the widening added: 2 x the posterior's
    assert out.maneuver_spread["Cxf"]["offset"] ** 2 == pytest.approx(2.0 * np.var(flat0[:, 0], ddof=1), rel=1e-9)
    assert widened(res, {}) is res


def _maneuver(params: dict, seed: int) -> Segment:
    """The paper's longitudinal maneuver simulated with ``params`` over ``TRUTH`` and the paper's noise ``seed``."""
    return synthetic_segment("longitudinal", seed, params=params)[0]


@pytest.mark.slow
def test_parts_of_the_models_own_data_agree_and_a_changed_half_is_widened() -> None:
    """The accepted fit is a real SMC fit of the whole window. Same vehicle throughout: Q below its 95 % quantile
    for both Cx (the test's size is 5 % per parameter; these fixed seeds give Q printed by the message), nothing
    widened. The window's second half from a vehicle with Cxf and Cxr 40 % higher (a tire change mid-window, a
    stand-in for a maneuver-dependent effective stiffness): each half's parts recover their own Cx, so Q is far
    above its quantile and the published sd grows by the square root of the random-effects inflation."""
    require_chrono()
    same = _maneuver({}, 1)
    bounds = part_bounds(float(same.time[0]), float(same.time[-1]), 4, 0.5)
    assert len(bounds) >= MIN_PARTS
    fit = calibrate_stage(same, "longitudinal", previous=HELD, n_chains=2, n_draws=300, seed=3, predictive_draws=5)
    spread = part_spread(same, bounds, fit, HELD)
    assert set(spread) == {"Cxf", "Cxr"}
    assert all(s.tau2 == 0.0 and s.parts == len(bounds) for s in spread.values()), spread
    assert widened(fit, spread).parameters == fit.parameters

    stiff = _maneuver({"Cxf": 1.4 * TRUTH["Cxf"], "Cxr": 1.4 * TRUTH["Cxr"]}, 2)
    t_mid = bounds[len(bounds) // 2][0]
    mixed = dataclasses.replace(same, measured={c: np.where(same.time < t_mid - 1e-9, v, stiff.measured[c])
                                                for c, v in same.measured.items()})
    fit = calibrate_stage(mixed, "longitudinal", previous=HELD, n_chains=2, n_draws=300, seed=3, predictive_draws=5)
    spread = part_spread(mixed, bounds, fit, HELD)
    wide = widened(fit, spread)
    for name in ("Cxf", "Cxr"):
        assert spread[name].heterogeneous and spread[name].tau2 > 0.0, spread
        sd0, sd1 = fit.parameters[name]["std"], wide.parameters[name]["std"]
        assert spread[name].inflation > 2.0, spread
        assert sd1 == pytest.approx(sd0 * math.sqrt(spread[name].inflation), rel=0.02)
        # the spread is of the size of the change: the halves differ by 40 % of the truth
        assert 0.05 * TRUTH[name] < math.sqrt(spread[name].tau2) < 0.6 * TRUTH[name], spread


@pytest.mark.slow
def test_the_pipeline_cuts_its_windows_and_records_the_spread_when_asked() -> None:
    """``spread_parts`` (off by default): the calibration pipeline's jobs carry the fitted segment's parts and the
    accepted result records each parameter's spread over them (the synthetic 8-DOF drive of calibration_drive, its
    throttle ramp; the model's own data, so the record is there whether or not Q passes)."""
    from calibration_drive import drive_records

    from vehcal_ros.estimation.calibration.pipeline import CalibrationPipeline, CalibrationPipelineConfig

    records = drive_records(seed=1)
    for parts in (0, 3):
        cfg = CalibrationPipelineConfig(stages=("longitudinal",), n_chains=2, n_draws=300, min_ess=50.0,
                                        min_ess_tail=50.0, max_r_hat=1.05, seed=5, recalibration_period=0.0,
                                        dt=0.005, holdout_fraction=0.0, spread_parts=parts, spread_min_part_s=0.5)
        p = CalibrationPipeline(cfg)
        for rec in records:
            p.add(rec)
        jobs = p.snapshot(final=True)
        outcomes = p.fit(jobs)
        assert [o.accepted for o in outcomes] == [True], [(o.error, o.holdout) for o in outcomes]
        res = outcomes[0].result
        if parts == 0:
            assert jobs[0].parts == () and res.maneuver_spread == {}
            continue
        seg = jobs[0].segment
        assert len(jobs[0].parts) == 3
        assert jobs[0].parts[0][0] == pytest.approx(seg.time[0]) and jobs[0].parts[-1][1] == pytest.approx(seg.time[-1])
        assert set(res.maneuver_spread) == {"Cxf", "Cxr"}
        assert all(s["parts"] == 3 for s in res.maneuver_spread.values()), res.maneuver_spread
        assert res.to_dict()["maneuver_spread"] == res.maneuver_spread


@pytest.mark.parametrize("field, value", [("spread_parts", 2), ("spread_parts", 21), ("spread_parts", -1),
                                          ("spread_min_part_s", 0.0)])
def test_the_settings_are_refused_out_of_range_naming_them(field: str, value: float) -> None:
    from vehcal_ros.errors import InputError
    from vehcal_ros.estimation.calibration.pipeline import CalibrationPipelineConfig

    with pytest.raises(InputError, match=field):
        CalibrationPipelineConfig(**{field: value}).validate()


@pytest.mark.slow
def test_parts_weigh_their_own_autocorrelated_residuals() -> None:
    """The 8-DOF's own data with AR(1) sensor noise (lag-1 coefficient 0.9 on every channel, the paper's noise
    sds as stationary sds) fitted with the independent residual model: each part's least squares, whitened by its
    own coefficient, counts about (1 - 0.9) / (1 + 0.9) of its samples, so its variance is ~19 times what the
    fit's coefficient 0 gives, and the parts, which measure one vehicle, agree: Q below its 95 % quantile for both
    Cx and nothing widened. Counting every sample as new, these parts' Q is 2.5 (Cxr) and 10 (Cxf) times its
    quantile on the same data (the check that this test can fail)."""
    require_chrono()
    clean = synthetic_segment("longitudinal", 1, noise=False)[1]
    rng = np.random.default_rng(7)
    measured = {}
    for c, v in clean.measured.items():   # e_0 ~ N(0, sd^2), e_i = 0.9 e_(i-1) + sqrt(1 - 0.81) N(0, sd^2)
        x = rng.normal(0.0, NOISE[c], v.size)
        e = lfilter([math.sqrt(1.0 - 0.81)], [1.0, -0.9], x[1:], zi=[0.9 * x[0]])[0]
        measured[c] = v + np.concatenate([x[:1], e])
    seg = dataclasses.replace(clean, measured=measured)
    bounds = part_bounds(float(seg.time[0]), float(seg.time[-1]), 4, 0.5)
    fit = calibrate_stage(seg, "longitudinal", previous=HELD, n_chains=2, n_draws=300, seed=3, predictive_draws=5,
                          noise_model="white")
    spread = part_spread(seg, bounds, fit, HELD)
    q95 = float(chi2.ppf(0.95, len(bounds) - 1))
    for name in ("Cxf", "Cxr"):
        assert spread[name].parts == len(bounds) and spread[name].q < q95 and spread[name].tau2 == 0.0, spread
