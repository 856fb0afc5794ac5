"""CalibrationPipeline on records of a synthetic 8-DOF drive (throttle ramp, coast-down, steering ramp).

Stage order here is rolling_resistance -> longitudinal -> lateral: with the paper's order the not-yet-calibrated
rr is held at 0.0175 (truth 0.0131), which (measured) biases Cx by about -5 % and Cyr by -4 %, outside the 94 %
HDIs of a noise-level fit; a coast-down barely depends on Cx, so calibrating rr first keeps every stage unbiased.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import yaml
from calibration_drive import drive_records
from calibration_synthetic import TRUTH_SAMPLED

from vehcal_ros.errors import InputError
from vehcal_ros.estimation.calibration.fit import paper_prior_ranges, stage_spec
from vehcal_ros.estimation.calibration.pipeline import (
    MODEL_PARAMETERS,
    CalibrationPipeline,
    CalibrationPipelineConfig,
    config_from,
)
from vehcal_ros.estimation.calibration.segments import SegmentConfig
from vehcal_ros.inference.smc import Uniform
from vehcal_ros.records import Controls, GroundTruth, OdomSample, WheelSpeeds

ORDER = ("rolling_resistance", "longitudinal", "lateral")


@pytest.fixture(scope="module")
def records() -> list:
    return drive_records(seed=1)


@pytest.fixture(scope="module")
def calibrated(records):
    # dt = the drive's own 5 ms step for every stage: with the paper's 10 ms for lateral, the integrator's
    # different numerical roll damping is absorbed by bphi (measured 2.6-5 sd off)
    # 4 x 500: at 4 x 300 the lateral stage's kphi_f/kphi_r split is at the edge of the convergence rule (R-hat
    # 1.01-1.13 depending on the seed, on main as well); 4 x 500 gives R-hat <= 1.003, bulk ESS >= 1800
    cfg = CalibrationPipelineConfig(stages=ORDER, n_chains=4, n_draws=500, seed=5, min_ess=400.0,
                                    recalibration_period=0.0, dt=0.005)
    p = CalibrationPipeline(cfg)
    for rec in records:
        p.add(rec)
    jobs = p.snapshot(final=True)
    outcomes = p.fit(jobs)
    updated = p.commit(outcomes)
    return p, jobs, outcomes, updated


def test_stages_run_in_order_and_hdis_contain_truth(calibrated) -> None:
    p, jobs, outcomes, updated = calibrated
    assert [j.stage for j in jobs] == list(ORDER)
    assert [j.seed for j in jobs] == [5, 6, 7]
    assert updated == list(ORDER), [(o.stage, o.error, o.accepted) for o in outcomes]
    for stage in ORDER:
        st = p.status[stage]
        assert st.level == 0 and st.n_fits == 1 and st.result is not None, st.message
        for name, s in st.result.parameters.items():
            # bphi included: with the segment's fitted initial state held it sat 2.3-2.9 sd high over noise
            # seeds 1-3 (the roll transient of a 1e-3 rad/s initial roll-rate error); the pipeline samples the
            # initial values (initial_state="sampled"): seed 1 +0.76 sd (seeds 2, 3: -2.2, -1.0)
            assert s["hdi_low"] <= TRUTH_SAMPLED[name] <= s["hdi_high"], (stage, name, s)
            assert s["r_hat"] <= 1.01 and s["ess_bulk"] >= 400
    # a later stage held the earlier stages' posterior means fixed
    lat = p.status["lateral"].result
    assert lat.fixed["rr"] == pytest.approx(p.status["rolling_resistance"].result.parameters["rr"]["mean"])
    assert lat.fixed["Cxf"] == pytest.approx(p.status["longitudinal"].result.parameters["Cxf"]["mean"])
    model = p.model_parameters()
    assert tuple(model) == MODEL_PARAMETERS
    assert model.pop("Jd") == 0.0   # the paper's vehicle (no description): no driveline inertia calibrated
    for k in model:
        assert abs(model[k] / TRUTH_SAMPLED[k] - 1) < (0.35 if k.startswith("kphi") else 0.2), (k, model[k])
    doc = yaml.safe_load(p.params_yaml("mpc"))
    m = doc["mpc"]["ros__parameters"]["model"]
    assert set(m) == {k.lower() for k in MODEL_PARAMETERS} and m["cxf"] == pytest.approx(model["Cxf"])
    summ = p.parameter_summaries()
    assert summ["Cyf"]["stage"] == "lateral" and "lateral/sigma_v" in summ
    # nothing fresh: the next cycle fits nothing and keeps everything
    assert p.run_cycle() == [] and all(p.status[s].result is not None for s in ORDER)


def test_not_converging_config_is_reported_and_last_model_kept(calibrated, records) -> None:
    p, *_ = calibrated
    good = {s: p.status[s].result for s in ORDER}
    before = p.model_parameters()
    # tiny runs cannot reach the ESS floor: the fit is reported and not accepted
    # (confirm_max_shift 0: refit even though the new drive is the same vehicle, recalibration_check.py)
    p.config = CalibrationPipelineConfig(stages=ORDER, n_chains=2, n_draws=30, seed=9, min_ess=400.0,
                                         recalibration_period=0.0, confirm_max_shift=0.0)
    for rec in drive_records(seed=5, t0=200.0, duration=10.0):  # a new drive: rr + longitudinal windows
        p.add(rec)
    assert p.counters.clock_jumps >= 1                         # 100 s forward jump restarted the buffers
    assert p.run_cycle(final=True) == []
    st = p.status["rolling_resistance"]
    assert st.n_not_converged == 1 and st.level == 1
    assert "did not pass its diagnostics" in st.message and "keeping the last good model" in st.message
    assert {s: p.status[s].result for s in ORDER} == good
    assert p.model_parameters() == before


def test_single_chain_rhat_never_accepted() -> None:
    cfg = CalibrationPipelineConfig(stages=("rolling_resistance",), n_chains=1, n_draws=100, min_ess=10.0,
                                    recalibration_period=0.0, max_r_hat=1.0)
    p = CalibrationPipeline(cfg)
    for rec in drive_records(seed=3, duration=10.0):
        p.add(rec)
    assert p.run_cycle(final=True) == []
    st = p.status["rolling_resistance"]
    assert st.result is None and st.n_not_converged == 1 and "no model for this stage yet" in st.message
    assert p.model_parameters()["rr"] == pytest.approx(0.0175)       # default kept


@pytest.mark.parametrize("factor", [1, 4])
def test_a_fit_failing_the_rule_is_rerun_once_with_more_particles(factor: int) -> None:
    """2 chains x 100 particles cannot reach an ESS of 300 (at most about the 200 draws); the one re-run at
    ``retry_draws_factor`` x 100 can (4: 800 draws, the coast-down's posterior is unimodal). Factor 1: no re-run,
    refused, and the refusal names the particles and all three diagnostics."""
    cfg = CalibrationPipelineConfig(stages=("rolling_resistance",), n_chains=2, n_draws=100, min_ess=300.0,
                                    min_ess_tail=300.0, recalibration_period=0.0, retry_draws_factor=factor)
    p = CalibrationPipeline(cfg)
    for rec in drive_records(seed=3, duration=10.0):
        p.add(rec)
    updated = p.run_cycle(final=True)
    st = p.status["rolling_resistance"]
    if factor == 1:
        assert updated == [] and st.result is None and st.n_not_converged == 1
        assert "at 2 x 100 particles" in st.message and "min tail ESS" in st.message, st.message
    else:
        assert updated == ["rolling_resistance"], st.message
        assert st.result.draws.shape[:2] == (2, 400)
        assert min(v["ess_tail"] for v in st.result.parameters.values()) >= 300.0
        assert "min tail ESS" in st.message


def test_bad_samples_counted_never_raised() -> None:
    p = CalibrationPipeline(CalibrationPipelineConfig(stages=("rolling_resistance",)))
    p.add(OdomSample(10.0, 5.0, 0.0, 0.0))
    p.add(OdomSample(10.0, 5.0, 0.0, 0.0))                # duplicate
    p.add(OdomSample(9.5, 5.0, 0.0, 0.0))                 # out of order
    p.add(OdomSample(10.1, math.nan, 0.0, 0.0))           # NaN
    p.add(WheelSpeeds(10.1, np.array([1.0, math.inf, 1.0, 1.0])))
    p.add(Controls(10.2, 0.0, 0.0, 0.0))
    p.add(GroundTruth(10.2, np.ones(4), np.zeros(4), np.zeros(4), np.ones(4)))   # ignored
    p.add(OdomSample(2.0, 5.0, 0.0, 0.0))                 # 8 s back: clock jump, buffers restart
    c = p.counters
    assert c.dropped == {"nonfinite": 2, "out_of_order": 1, "duplicate": 1, "undecodable": 0}
    assert c.clock_jumps == 1 and c.ignored == 1 and c.received["odom"] == 5
    assert p.fill()["odom"] == 1 and p.fill()["controls"] == 0
    assert p.snapshot() == [] and "waiting for data" in p.status["rolling_resistance"].message


def test_config_validation_names_field() -> None:
    with pytest.raises(InputError, match="n_chains"):
        CalibrationPipeline(CalibrationPipelineConfig(n_chains=0))
    with pytest.raises(InputError, match="stages"):
        CalibrationPipeline(CalibrationPipelineConfig(stages=("lateral", "sideways")))
    with pytest.raises(InputError, match="lat_min_speed"):
        CalibrationPipeline(CalibrationPipelineConfig(segments=SegmentConfig(lat_min_speed=-1.0)))


@pytest.mark.parametrize("value, message", [
    ([0.03, 0.005], "prior.rr = .*lower bound must be below"),
    ([0.01, 0.01], "prior.rr = .*lower bound must be below"),
    ([0.001], r"prior.rr = \[0.001\]: expected \[lower, upper\]"),
    ([0.001, math.inf], "prior.rr = .*two finite numbers"),
    (["a", "b"], "prior.rr = .*two finite numbers"),
])
def test_prior_range_validation_names_the_parameter(value, message) -> None:
    with pytest.raises(InputError, match=message):
        config_from({"prior.rr": value})
    with pytest.raises(InputError, match="calibration config: " + message):
        CalibrationPipeline(CalibrationPipelineConfig(priors={"rr": value}))
    with pytest.raises(InputError, match="prior.sideways: unknown calibrated parameter"):
        config_from({"prior.sideways": [1.0, 2.0]})


def test_prior_defaults_are_the_papers_and_overrides_reach_the_stage() -> None:
    paper = paper_prior_ranges()
    # every published parameter but the driveline inertia, which the paper's model does not have
    assert paper["rr"] == (0.005, 0.03) and paper["kphi_r"] == (5000.0, 80000.0) and set(paper) == set(
        MODEL_PARAMETERS) - {"Jd"}
    assert dict(stage_spec("lateral").priors)["kphi_r"] == Uniform(5000.0, 80000.0)
    cfg = config_from({"prior.kphi_r": [5000.0, 150000.0], "prior.rr": [0.001, 0.03]})
    assert cfg.priors == {"kphi_r": (5000.0, 150000.0), "rr": (0.001, 0.03)}
    lat = dict(stage_spec("lateral", priors=cfg.priors).priors)
    assert lat["kphi_r"] == Uniform(5000.0, 150000.0) and lat["kphi_f"] == Uniform(5000.0, 80000.0)
    assert dict(stage_spec("rolling_resistance", priors=cfg.priors).priors) == {"rr": Uniform(0.001, 0.03)}
    assert config_from({}).priors is None


def test_prior_override_is_sampled_and_checked_at_its_bounds() -> None:
    # truth rr = 0.0131: a prior [0.015, 0.03] excludes it, so the posterior piles at the overridden lower bound
    # (not the paper's 0.005) and the fit is refused; [0.001, 0.03] contains it and the fit is accepted
    recs = drive_records(seed=3, duration=10.0)
    outcome = {}
    for lo in (0.015, 0.001):
        # the initial state held (measured): with it sampled, the posterior piled at the bound mixes worse (rr
        # R-hat 1.06, ESS 28 at 2 x 200) and the fit is refused as not converged instead of at its bound; the
        # whole window fitted (holdout_fraction 0): on its first 75 % the 2 x 200 fit piled at the bound 0.015
        # misses the diagnostics (R-hat 1.066, bulk ESS 30) before the bound check could refuse it
        cfg = CalibrationPipelineConfig(stages=("rolling_resistance",), n_chains=2, n_draws=200, min_ess=50.0,
                                        min_ess_tail=50.0,
                                        max_r_hat=1.05, recalibration_period=0.0, priors={"rr": (lo, 0.03)},
                                        initial_state="measured", holdout_fraction=0.0)
        p = CalibrationPipeline(cfg)
        for rec in recs:
            p.add(rec)
        jobs = p.snapshot(final=True)
        [o] = p.fit(jobs)
        assert p.acceptable(o.result) and o.result.priors == {"rr": (lo, 0.03)}   # converged by the rule
        assert o.accepted == (lo == 0.001)   # at the bound 0.015: not accepted
        assert lo <= o.result.draws[..., 0].min()
        p.commit([o])
        outcome[lo] = (p.status["rolling_resistance"], o.result.parameters["rr"]["mean"])
    st, mean = outcome[0.015]
    assert st.result is None and mean < 0.0152 and "lower bound of its prior [0.015, 0.03]" in st.message
    st, mean = outcome[0.001]
    assert st.result is not None and st.level == 0 and abs(mean / TRUTH_SAMPLED["rr"] - 1) < 0.2


def test_a_posterior_at_the_physical_limit_is_an_answer() -> None:
    # a car without rolling resistance (truth rr = 0, CommonRoad's multi-body model is one): the posterior piles
    # against the prior's lower bound 0, which is the physical limit of a rolling-resistance lever, so the fit is
    # accepted; the same pile against a chosen bound (0.015 above) is refused. Without rolling resistance the
    # coast-down loses 0.06 m/s (the tires' cornering drag), so the speed-drop threshold is lowered to let it in.
    from calibration_drive import drive_states
    from calibration_synthetic import TRUTH

    from vehcal_ros.estimation.calibration.pipeline import PHYSICAL_MINIMUM, at_prior_bound

    recs = drive_records(seed=3, duration=10.0, states=drive_states({**TRUTH, "rr": 0.0}, duration=10.0))
    # 2 x 1000 draws: a posterior piled against a bound mixes slowly (2 x 200: R-hat 1.09, bulk ESS 20)
    cfg = CalibrationPipelineConfig(stages=("rolling_resistance",), n_chains=2, n_draws=1000, min_ess=50.0,
                                    min_ess_tail=50.0,
                                    max_r_hat=1.05, recalibration_period=0.0, priors={"rr": (PHYSICAL_MINIMUM, 0.03)},
                                    initial_state="measured", holdout_fraction=0.0,
                                    segments=SegmentConfig(rr_min_speed_drop=0.05))
    p = CalibrationPipeline(cfg)
    for rec in recs:
        p.add(rec)
    [o] = p.fit(p.snapshot(final=True))
    assert o.accepted
    rr = o.result.parameters["rr"]
    assert rr["mean"] < 0.01 * 0.03   # within the margin at_prior_bound would call "at the bound"
    assert at_prior_bound("rolling_resistance", o.result) is None
    p.commit([o])
    st = p.status["rolling_resistance"]
    assert st.result is not None and st.level == 0, st.message


def test_residuals_beyond_their_prior_refuse_a_converged_fit() -> None:
    # the same coast-down with 0.6 m/s of extra noise on the speed channel (residuals no model in the prior
    # explains): the chains converge, but the residual sigma of u (~0.6 m/s) is beyond the 99.9 % quantile of its
    # half-normal prior (scale 0.1 x noise_prior_factor 1: 0.329 m/s), so the fit is refused naming the channel
    # and no model is accepted; the clean coast-down above is accepted by the same rule
    import dataclasses

    from calibration_drive import drive_states
    from calibration_synthetic import TRUTH

    from vehcal_ros.estimation.calibration.pipeline import noise_beyond_prior

    recs = drive_records(seed=3, duration=10.0, states=drive_states(TRUTH, duration=10.0))
    rng = np.random.default_rng(7)
    recs = [dataclasses.replace(r, u=r.u + 0.6 * rng.standard_normal()) if isinstance(r, OdomSample) else r
            for r in recs]
    cfg = CalibrationPipelineConfig(stages=("rolling_resistance",), n_chains=2, n_draws=1000, min_ess=50.0,
                                    min_ess_tail=50.0,
                                    max_r_hat=1.05, recalibration_period=0.0, initial_state="measured",
                                    holdout_fraction=0.0, priors={"rr": (0.0, 0.03)}, noise_prior_factor=1.0,
                                    noise_model="white",
                                    segments=SegmentConfig(rr_min_speed_drop=0.05))
    p = CalibrationPipeline(cfg)
    for rec in recs:
        p.add(rec)
    [o] = p.fit(p.snapshot(final=True))
    assert not o.accepted and o.result is not None
    sigma = o.result.noise["u"]["mean"]
    assert 0.45 < sigma < 0.7, sigma
    assert p.acceptable(o.result)   # converged by the rule
    assert "residual sigma of u" in noise_beyond_prior("rolling_resistance", o.result, 1.0)
    assert noise_beyond_prior("rolling_resistance", o.result, 10.0) is None   # within the default prior
    p.commit([o])
    st = p.status["rolling_resistance"]
    assert st.result is None and "the 8-DOF model does not describe this segment" in st.message, st.message


def test_accepted_stages_predicted_their_heldback_tail(calibrated) -> None:
    # every window's last 25 % was held back from the fit; each accepted stage predicted it per channel, and the
    # lateral stage (nominal Cy 50 000 against 44 016 / 54 046, kphi 37 500 against 36 245 / 26 439) better than
    # the nominal model it replaced on every channel (measured: v 0.047 vs 0.134 m/s, yaw rate 0.018 vs 0.056)
    p, jobs, outcomes, updated = calibrated
    for job, o in zip(jobs, outcomes):
        st = p.status[job.stage]
        h = st.result_holdout
        assert h is not None and h["passed"] and h is o.holdout, (job.stage, st.message)
        assert job.segment.time[-1] < job.held.time[0] == h["segment"][0]
        assert job.held.time[-1] == pytest.approx(job.window.t_end)
        assert set(h["rmse_candidate"]) == set(st.result.noise), job.stage
        assert h["replaced"] == "nominal" and "held-out RMSE" in p.result_summary(job.stage)
    lat = p.status["lateral"].result_holdout
    assert all(lat["rmse_candidate"][c] < lat["rmse_replaced"][c] for c in lat["rmse_candidate"]), lat
