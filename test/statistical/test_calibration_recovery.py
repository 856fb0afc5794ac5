"""Staged calibration recovers known 8-DOF parameters from synthetic data of the paper's three maneuvers."""

from __future__ import annotations

import numpy as np
import pytest
from calibration_synthetic import NOISE, TRUTH, TRUTH_SAMPLED, synthetic_segment

from vehcal_ros.estimation.calibration.fit import calibrate_stage, predictive_responses

pytestmark = pytest.mark.slow

# chains x draws per stage: enough for R-hat < 1.01 and bulk ESS > 400 at test-suite cost (lateral: 13 sampled
# parameters with the AR(1) likelihood's four rhos; at 4 x 300 one rho's R-hat was 1.0100)
SIZES = {"longitudinal": (4, 250), "lateral": (4, 400), "rolling_resistance": (4, 300)}


@pytest.fixture(scope="module")
def results():
    out = {}
    for stage, (chains, draws) in SIZES.items():
        noisy, clean = synthetic_segment(stage, seed=1)
        # other stages' parameters at their true values ("previous stages' posterior means")
        res = calibrate_stage(noisy, stage, previous=TRUTH, n_chains=chains, n_draws=draws, seed=7)
        out[stage] = (res, noisy, clean)
    return out


@pytest.mark.parametrize("stage", list(SIZES))
def test_hdi_contains_truth_and_chains_converged(results, stage: str) -> None:
    res, noisy, clean = results[stage]
    chains, draws = SIZES[stage]
    assert res.draws.shape[:2] == (chains, draws)
    for name, s in res.parameters.items():
        # truth within 3.3 posterior sd (two-sided 99.9 % per parameter, ~1 % over the 8 of the three stages):
        # a 94 % HDI check misses one of 8 parameters in ~40 % of data sets, and its edge moves with the
        # sampler's Monte Carlo noise (bphi, seed 1: truth at +1.9 sd; the HDI's upper edge 7718-7774 over
        # sampler seeds, truth 7726)
        assert abs(s["mean"] - TRUTH_SAMPLED[name]) <= 3.3 * s["std"], (stage, name, s)
    for ch, s in res.noise.items():
        # the noise sigma the data carry is the realised RMS of the injected noise (the generating sigma can
        # sit a few posterior sd away for one finite noise draw: 500 samples fix sigma to ~3 %)
        realised = float(np.sqrt(np.mean((noisy.measured[ch] - clean.measured[ch]) ** 2)))
        assert s["hdi_low"] <= realised <= s["hdi_high"], (stage, ch, s, realised)
        assert abs(s["mean"] / NOISE[ch] - 1) < 0.15
    for name, s in {**res.parameters, **res.noise}.items():
        assert s["r_hat"] < 1.01, (stage, name, s["r_hat"])
        assert s["ess_bulk"] > 400, (stage, name, s["ess_bulk"])
    assert res.converged
    assert np.isfinite(res.log_evidence) and res.n_stages >= 3
    d = res.to_dict()
    assert set(d["parameters"]) == set(res.parameters) and d["stage"] == stage


def test_lateral_posterior_responses_ten_times_closer_than_prior(results) -> None:
    res, noisy, clean = results["lateral"]
    pred = predictive_responses(noisy, res, n=100, seed=3)
    truth = np.column_stack([clean.measured[c] for c in pred["channels"]])
    rmse_prior = np.sqrt(((pred["prior"] - truth[None]) ** 2).mean(axis=1)).mean(axis=0)
    rmse_post = np.sqrt(((pred["posterior"] - truth[None]) ** 2).mean(axis=1)).mean(axis=0)
    # against the noise-free responses (against noisy data the posterior RMSE is floored at the noise sigma)
    assert np.all(rmse_post * 10 <= rmse_prior), (rmse_prior, rmse_post)
    # and against the noisy data, the paper's Table 5 metric: the posterior RMSE is the noise level
    for ch in ("v", "yaw_rate", "roll", "roll_rate"):
        assert res.rmse_posterior[ch] == pytest.approx(NOISE[ch], rel=0.12)
        assert res.rmse_prior[ch] > 3 * res.rmse_posterior[ch]


def test_posterior_means_feed_next_stage(results) -> None:
    res, _, _ = results["lateral"]
    p = res.model_parameters()
    assert p["bphi_f"] == p["bphi_r"] == pytest.approx(0.5 * res.parameters["bphi"]["mean"])
    assert res.fixed["Cxf"] == TRUTH["Cxf"] and "Cyf" not in res.fixed


def test_longitudinal_stage_recovers_a_driveline_inertia_the_description_leaves_out() -> None:
    """A description whose wheels lack the driveline (``inertia_in_wheels: false``, as from a spec sheet): data of
    the paper's throttle ramp made with 5 kg m^2 more at each driven wheel (``Jd``; the HMMWV drives all four).
    The stage samples Jd beside Cxf, Cxr and recovers all three within 3.3 posterior sd (the tolerance above).
    Jd is well determined here: 5 kg m^2 at 4.4 rad/s^2 of wheel acceleration is 22 N m per wheel, 3.8 % of the
    drive force, ~0.5 m/s of speed after 7 s against 0.1 m/s of noise on 750 samples."""
    from dataclasses import replace

    from calibration_synthetic import MANEUVERS, require_chrono

    from vehcal_ros.estimation.calibration.fit import CHANNELS as CH
    from vehcal_ros.estimation.calibration.fit import Segment
    from vehcal_ros.models.vehicle_8dof import Simulator8Dof, VehicleConstants
    from vehcal_ros.vehicle.description import load_description

    desc = replace(load_description("hmmwv"), inertia_in_wheels=False)
    truth = {**TRUTH, "Jd": 5.0}
    csv, drv, a, b, dt = MANEUVERS["longitudinal"]
    base = require_chrono()
    ch = Segment.from_chrono(base / csv, base / drv, a, b)
    sim = Simulator8Dof(ch.initial_state, ch.time, ch.throttle, ch.brake, ch.steering, dt=dt, output_dt=0.01,
                        n_out=ch.time.size, constants=VehicleConstants.from_description(desc))
    x = sim.run(truth)
    clean = Segment.from_arrays(ch.time, ch.throttle, ch.brake, ch.steering,
                                {c: x[:, i] for c, i in CH.items()}, ch.initial_state, "synthetic, Jd 5")
    res = calibrate_stage(clean.with_noise(NOISE, 1), "longitudinal", previous=TRUTH, n_chains=4, n_draws=250,
                          seed=7, vehicle=desc)
    assert set(res.parameters) == {"Cxf", "Cxr", "Jd"} and res.converged
    for name, s in res.parameters.items():
        assert abs(s["mean"] - truth[name]) <= 3.3 * s["std"], (name, s)
    assert res.model_parameters()["Jd"] == pytest.approx(res.parameters["Jd"]["mean"])
