"""The recalibration check (estimation/calibration/recalibration_check.py): a window of the SAME vehicle confirms
the accepted longitudinal posterior (no refit), a window of a CHANGED vehicle (Cx, mass) triggers the refit; and in the
pipeline a confirmed window is counted, runs no SMC and its information is added to the accepted posterior
(updated_result: the Gaussian product, checked against importance weights of the same draws and against the truth
after several windows).

Data: the paper's longitudinal maneuver (Chrono inputs) simulated by the 8-DOF with known parameters and the
paper's noise (calibration_synthetic). The accepted posterior is a real SMC fit on noise seed 1. Under the same
vehicle the new window's best fit differs from the accepted mean only by the noise of both windows, so its
Mahalanobis shift^2 is about 2 chi^2(2) (P(shift > 3.5) = exp(-3.5^2 / 4) = 4.7 %); the seeds used here are fixed,
and their shifts are printed by the assertion messages. A 25 % stiffer tire or a 20 % heavier vehicle moves the
best fit by many posterior sd (independent of the check's own arithmetic: the data come from the simulator with
other constants)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from calibration_synthetic import MANEUVERS, NOISE, TRUTH, require_chrono

from vehcal_ros.estimation.calibration.fit import CHANNELS, Segment, calibrate_stage
from vehcal_ros.estimation.calibration.maneuver_spread import PartSpread, maneuver_offsets, widened
from vehcal_ros.estimation.calibration.pipeline import CalibrationPipeline, CalibrationPipelineConfig, StageJob
from vehcal_ros.estimation.calibration.recalibration_check import (
    DEFAULT_THRESHOLD,
    WindowCheck,
    check_window,
    posterior_moments,
    updated_result,
)
from vehcal_ros.estimation.calibration.segments import Window
from vehcal_ros.models.vehicle_8dof import Simulator8Dof, VehicleConstants, default_vehicle_constants

HELD = {k: v for k, v in TRUTH.items() if k not in ("Cxf", "Cxr")}


def longitudinal_window(seed: int, params: dict | None = None, constants: VehicleConstants | None = None
                        ) -> Segment:
    """The paper's longitudinal maneuver simulated with ``params`` (TRUTH) and ``constants``, noise seed ``seed``."""
    base = require_chrono()
    csv, drv, a, b, dt = MANEUVERS["longitudinal"]
    ch = Segment.from_chrono(base / csv, base / drv, a, b)
    sim = Simulator8Dof(ch.initial_state, ch.time, ch.throttle, ch.brake, ch.steering, dt=dt, output_dt=0.01,
                        n_out=ch.time.size, constants=constants)
    x = sim.run({**TRUTH, **(params or {})})
    clean = Segment.from_arrays(ch.time, ch.throttle, ch.brake, ch.steering, {c: x[:, i] for c, i in CHANNELS.items()},
                                ch.initial_state, "synthetic longitudinal")
    return clean.with_noise(NOISE, seed)


@pytest.fixture(scope="module")
def accepted():
    return calibrate_stage(longitudinal_window(1), "longitudinal", previous=HELD, n_chains=2, n_draws=400, seed=3,
                           predictive_draws=5)


def test_same_vehicle_windows_confirm(accepted) -> None:
    """Ten new noise realisations of the same vehicle: at most one refit (nominal rate 0.22 %; conditional on this
    accepted fit, itself 1.5-1.9 sd off the truth, measured 0 of 30 for seeds 2-31, max shift 3.49)."""
    checks = [check_window(longitudinal_window(seed), accepted, HELD, DEFAULT_THRESHOLD) for seed in range(2, 12)]
    refits = [c.describe() for c in checks if not c.consistent]
    assert len(refits) <= 1, refits
    assert max(max(c.ratio.values()) for c in checks) < 1.2   # the accepted model leaves the windows' noise level


@pytest.mark.parametrize("change", ["Cx +25 %", "Cx -25 %", "mass +20 %"])
def test_changed_vehicle_window_triggers_refit(accepted, change: str) -> None:
    if change.startswith("Cx"):
        f = 1.25 if "+" in change else 0.75
        window = longitudinal_window(2, {"Cxf": TRUTH["Cxf"] * f, "Cxr": TRUTH["Cxr"] * f})
    else:
        hmmwv = default_vehicle_constants()
        window = longitudinal_window(2, constants=dataclasses.replace(hmmwv, m=hmmwv.m * 1.2))
    c = check_window(window, accepted, HELD, DEFAULT_THRESHOLD)
    assert not c.consistent, c.describe()
    if change.startswith("Cx"):   # the best fit moves towards the new vehicle's Cx
        assert np.sign(c.best["Cxf"] - c.mean["Cxf"]) == np.sign(f - 1.0), c.describe()


def test_threshold_zero_always_refits(accepted) -> None:
    assert not check_window(longitudinal_window(2), accepted, HELD, 0.0).consistent


def test_pipeline_counts_a_confirmation_and_runs_no_fit(accepted) -> None:
    """fit() on a job carrying the accepted result: same vehicle -> confirmed outcome (no SMC, counted by commit);
    changed vehicle -> the SMC runs (a result comes back)."""
    cfg = CalibrationPipelineConfig(stages=("longitudinal",), n_chains=2, n_draws=100, min_ess=0.0,
                                    min_ess_tail=0.0, max_r_hat=10.0,
                                    defaults={k: v for k, v in HELD.items() if k not in ("bphi_f", "bphi_r")})
    p = CalibrationPipeline(cfg)
    p.restore("longitudinal", accepted, (0.0, 7.5), 1.0)
    same, changed = longitudinal_window(2), longitudinal_window(2, {"Cxf": TRUTH["Cxf"] * 1.25,
                                                                    "Cxr": TRUTH["Cxr"] * 1.25})
    w = Window("longitudinal", 0.0, 7.5, 1.0)
    jobs = [StageJob("longitudinal", w, seg, HELD, seed=1, cycle=0, accepted=accepted) for seg in (same, changed)]
    out = p.fit(jobs)
    assert out[0].confirmed and out[0].result is None
    assert not out[1].confirmed and out[1].result is not None and out[1].check is not None
    p.commit(out[:1])
    st = p.status["longitudinal"]
    assert (st.n_confirmed, st.n_fits) == (1, 0) and "confirmed by" in st.message
    # the confirming window's information joined the accepted posterior: same draws' shape, narrower
    assert st.result is not accepted and st.result.draws.shape == accepted.draws.shape
    for n in ("Cxf", "Cxr"):
        assert st.result.parameters[n]["std"] < accepted.parameters[n]["std"], n
    assert st.result_restored   # still the carried model, updated (a fleet history calls it confirmed)


def test_update_stays_inside_the_prior_support(accepted) -> None:
    """The affine update of the draws never carries them out of the prior's range: with the accepted posterior's
    range cut at half a posterior sd below its mean, the updated draws and the published HDI stay at or above that
    bound (a stiffness whose wide posterior reaches its prior's lower end never gets a negative interval)."""
    c = check_window(longitudinal_window(2), accepted, HELD, DEFAULT_THRESHOLD)
    assert c.consistent, c.describe()
    s = accepted.parameters["Cxf"]
    low = s["mean"] - 0.5 * s["std"]
    cut = dataclasses.replace(accepted, priors={**accepted.priors, "Cxf": (low, 50000.0)})
    up = updated_result(cut, c)
    j = up.names.index("Cxf")
    assert up.draws[..., j].min() >= low and up.parameters["Cxf"]["hdi_low"] >= low
    assert (up.draws[..., j] == low).mean() > 0.05   # the draws the update carried below it are held at it


def test_update_is_the_posterior_given_both_windows(accepted) -> None:
    """updated_result against an independent computation of the same posterior: the accepted draws importance-
    weighted by the window's Gaussian likelihood N(best | theta, S_new) (self-normalised; ESS printed). Mean within
    4 Monte Carlo standard errors per parameter, sd within 10 % (the affine map is exact for a Gaussian posterior;
    the SMC draws are nearly Gaussian here)."""
    c = check_window(longitudinal_window(2), accepted, HELD, DEFAULT_THRESHOLD)
    assert c.consistent, c.describe()
    names = list(c.best)
    x = accepted.draws.reshape(-1, accepted.draws.shape[-1])[:, [accepted.names.index(n) for n in names]]
    d = x - np.array([c.best[n] for n in names])
    logw = -0.5 * np.einsum("ij,jk,ik->i", d, np.linalg.inv(c.cov_best), d)
    w = np.exp(logw - logw.max())
    w /= w.sum()
    ess = 1.0 / float(np.sum(w * w))
    mean_is = w @ x
    sd_is = np.sqrt(w @ (x - mean_is) ** 2)
    up = updated_result(accepted, c)
    for k, n in enumerate(names):
        mcse = sd_is[k] / np.sqrt(ess)
        assert abs(up.parameters[n]["mean"] - mean_is[k]) < 4.0 * mcse, (n, up.parameters[n], mean_is[k], ess)
        assert abs(up.parameters[n]["std"] / sd_is[k] - 1.0) < 0.10, (n, up.parameters[n]["std"], sd_is[k], ess)


def test_updates_over_windows_hold_the_truth(accepted) -> None:
    """Four confirming windows (noise seeds 2-5) added one after the other: the posterior narrows (its sd falls by
    more than a third: each window carries about the accepted fit's information) and still holds the truth, |z| <
    3.5 per parameter (P = 0.05 % each under a calibrated posterior; an update that ignored the windows would keep
    the accepted fit's 1.5-1.9 sd offset, one that counted each window twice would narrow by 2/3 and move the z
    with it). Also from the summaries only (a result read back from a state file): the same means within 0.5 sd."""
    res = accepted
    summary_only = dataclasses.replace(accepted, draws=np.empty((0, 0, len(accepted.names))))
    for seed in range(2, 6):
        window = longitudinal_window(seed)
        c = check_window(window, res, HELD, DEFAULT_THRESHOLD)
        assert c.consistent, (seed, c.describe())
        res = updated_result(res, c)
        summary_only = updated_result(summary_only, check_window(window, summary_only, HELD, DEFAULT_THRESHOLD))
    mean, cov, from_draws = posterior_moments(res, ["Cxf", "Cxr"])
    assert from_draws
    for k, n in enumerate(("Cxf", "Cxr")):
        sd = float(np.sqrt(cov[k, k]))
        assert sd < (2.0 / 3.0) * accepted.parameters[n]["std"], (n, sd, accepted.parameters[n]["std"])
        z = (mean[k] - TRUTH[n]) / sd
        assert abs(z) < 3.5, (n, mean[k], sd, TRUTH[n])
        assert abs(summary_only.parameters[n]["mean"] - mean[k]) < 0.5 * sd, (n, summary_only.parameters[n], mean[k])


def test_inconsistent_window_changes_nothing(accepted) -> None:
    c = check_window(longitudinal_window(2, {"Cxf": TRUTH["Cxf"] * 1.25, "Cxr": TRUTH["Cxr"] * 1.25}), accepted,
                     HELD, DEFAULT_THRESHOLD)
    assert not c.consistent and updated_result(accepted, c) is accepted
    assert updated_result(accepted, WindowCheck("longitudinal", {}, {}, 1.0, {}, {}, 3.5)) is accepted


def test_a_state_file_keeps_the_correlation_the_update_needs(accepted, tmp_path) -> None:
    """Written to a state file and read back (summaries only), the longitudinal posterior keeps its Cxf-Cxr
    correlation, and one window's update from it matches the update from the draws within 0.3 sd of each mean
    and 15 % of each sd; dropping the correlation would treat the two as independent."""
    from vehcal_ros.estimation.calibration.pipeline import CalibrationPipeline
    from vehcal_ros.io import calibration_state as cs

    cfg = CalibrationPipelineConfig(stages=("longitudinal",), defaults={k: v for k, v in HELD.items()
                                                                        if k not in ("bphi_f", "bphi_r")})
    p = CalibrationPipeline(cfg)
    p.restore("longitudinal", accepted, (0.0, 7.5), 1.0)
    p.status["longitudinal"].result_restored = False
    path = tmp_path / "state.json"
    cs.write_state(path, "v", cs.stages_from(p, "d1"))
    saved = cs.read_state(path, "v")["longitudinal"]
    _, cov, _ = posterior_moments(accepted, ["Cxf", "Cxr"])
    r = cov[0, 1] / np.sqrt(cov[0, 0] * cov[1, 1])
    assert abs(saved.correlation["Cxf"]["Cxr"] - r) < 1e-9 and abs(r) > 0.1, r
    q = CalibrationPipeline(cfg)
    cs.restore_into(q, {"longitudinal": saved}, note="test", drift=None)
    restored = q.status["longitudinal"].result
    window = longitudinal_window(2)
    a = updated_result(accepted, check_window(window, accepted, HELD, DEFAULT_THRESHOLD))
    b = updated_result(restored, check_window(window, restored, HELD, DEFAULT_THRESHOLD))
    for n in ("Cxf", "Cxr"):
        sd = a.parameters[n]["std"]
        assert abs(a.parameters[n]["mean"] - b.parameters[n]["mean"]) < 0.3 * sd, (n, a.parameters[n], b.parameters[n])
        assert abs(b.parameters[n]["std"] / sd - 1.0) < 0.15, (n, a.parameters[n], b.parameters[n])


def test_the_spread_between_windows_enters_the_check_and_the_update(accepted) -> None:
    """tau^2 (estimation/calibration/carry_forward.py) is added to the window's and the accepted posterior's
    covariance: the best fit and its deviation are unchanged, the shift falls (a spread as large as the window's own
    offset bounds shift^2 by k = 2), a confirming window adds less information (the updated posterior stays wider), and
    with a spread far above both the update averages the two windows."""
    stiff = longitudinal_window(5, {"Cxf": TRUTH["Cxf"] * 1.25, "Cxr": TRUTH["Cxr"] * 1.25})
    c0 = check_window(stiff, accepted, HELD, DEFAULT_THRESHOLD)
    assert not c0.consistent, c0.describe()
    for n, (d, v) in c0.deviation.items():
        assert d == pytest.approx(c0.best[n] - c0.mean[n]) and v > 0.0
    tau2 = {n: d * d for n, (d, _) in c0.deviation.items()}
    c1 = check_window(stiff, accepted, HELD, DEFAULT_THRESHOLD, spread=tau2)
    assert c1.best == pytest.approx(c0.best)
    assert all(c1.deviation[n] == pytest.approx(c0.deviation[n]) for n in c0.deviation)
    np.testing.assert_allclose(c1.cov_best - c0.cov_best, np.diag([tau2[n] for n in c1.best]), rtol=1e-9)
    assert c1.shift <= np.sqrt(2.0) + 1e-9 and c1.consistent, c1.describe()
    same = longitudinal_window(2)
    plain = check_window(same, accepted, HELD, DEFAULT_THRESHOLD)
    sd = {n: accepted.parameters[n]["std"] for n in plain.best}
    wide = check_window(same, accepted, HELD, DEFAULT_THRESHOLD, spread={n: (2 * s) ** 2 for n, s in sd.items()})
    assert plain.consistent and wide.consistent
    assert wide.shift < plain.shift
    for n in plain.best:
        assert (updated_result(accepted, wide).parameters[n]["std"]
                > updated_result(accepted, plain).parameters[n]["std"])
    # the accepted posterior counts as one window: after three confirming windows (4 windows' information) a fifth
    # moves the mean about 1/5 of the way to its best fit without spread (0.19-0.21 at these seeds), and about half
    # of it with a spread far above the windows' own variances (0.49-0.50): the windows are averaged as equals
    acc = accepted
    for seed in (6, 7, 8):
        acc = updated_result(acc, check_window(longitudinal_window(seed), acc, HELD, DEFAULT_THRESHOLD))
    _, cov, _ = posterior_moments(acc, list(plain.best))
    sd = {n: acc.parameters[n]["std"] for n in plain.best}
    for k, lo, hi in ((0.0, 0.1, 0.3), (10.0, 0.45, 0.55)):
        c = check_window(same, acc, HELD, DEFAULT_THRESHOLD, spread={n: (k * s) ** 2 for n, s in sd.items()})
        tau2 = np.diag([(k * sd[n]) ** 2 for n in c.best])
        np.testing.assert_allclose(c.cov_accepted - cov, tau2, rtol=1e-9, atol=1e-9 * max(tau2.max(), 1.0))
        upd = updated_result(acc, c)
        for n in c.best:
            assert lo < (upd.parameters[n]["mean"] - c.mean[n]) / (c.best[n] - c.mean[n]) < hi, (k, n)


def test_the_best_fit_is_not_clipped_by_a_narrower_range_the_accepted_fit_had(accepted) -> None:
    """A carried stage is refitted on narrow ranges around its carried posterior; the check's best fit is bounded
    by the ranges it is given (the description's), not by those, so a 25 % stiffer tire shows its full size
    instead of stopping at the narrow range's bound (where it would look like a small, consistent shift)."""
    m = {n: accepted.parameters[n]["mean"] for n in ("Cxf", "Cxr")}
    s = {n: accepted.parameters[n]["std"] for n in m}
    narrow = dataclasses.replace(accepted, priors={n: (m[n] - 3 * s[n], m[n] + 3 * s[n]) for n in m})
    stiff = longitudinal_window(2, {"Cxf": TRUTH["Cxf"] * 1.25, "Cxr": TRUTH["Cxr"] * 1.25})
    wide, clipped = check_window(stiff, narrow, HELD, DEFAULT_THRESHOLD), check_window(stiff, accepted, HELD,
                                                                                      DEFAULT_THRESHOLD)
    assert wide.best == pytest.approx(clipped.best, rel=1e-3)
    assert wide.best["Cxf"] > m["Cxf"] + 3 * s["Cxf"], wide.describe()


def test_a_widened_posterior_keeps_its_width_through_a_confirming_update(accepted) -> None:
    """An accepted posterior widened by the spread between the parts of its window
    (estimation/calibration/maneuver_spread.py, here its variance multiplied by 26: 25 posterior variances added) holds
    its window's offset: a new window of the same vehicle has one too (``offset``), so the update is an average of two
    windows of about equal weight and keeps ~1/sqrt(2) of the widened sd (0.6-0.8 asserted), where without the offset
    the window's own narrow least-squares variance would take it back to about the unwidened sd (< 0.3 of the widened
    one: sqrt(1 / (1/26 + 1)) / sqrt(26) = 0.19). The accepted side is not widened twice: its covariance is the
    widened posterior's, the offset not added."""
    sd = {n: accepted.parameters[n]["std"] for n in ("Cxf", "Cxr")}
    wide = widened(accepted, {n: PartSpread((10.0 * s) ** 2, 30.0, 4, inflation=26.0) for n, s in sd.items()})
    offsets = maneuver_offsets(wide)   # the variance added: 25 posterior variances (from the draws)
    assert offsets == pytest.approx({n: 25.0 * s * s for n, s in sd.items()}, rel=0.01)
    same = longitudinal_window(2)
    with_offset = check_window(same, wide, HELD, DEFAULT_THRESHOLD, offset=offsets)
    without = check_window(same, wide, HELD, DEFAULT_THRESHOLD)
    _, cov_wide, _ = posterior_moments(wide, list(with_offset.best))
    np.testing.assert_allclose(with_offset.cov_accepted, cov_wide, rtol=1e-9)
    np.testing.assert_allclose(with_offset.cov_best - without.cov_best,
                               np.diag([offsets[n] for n in with_offset.best]), rtol=1e-9)
    assert with_offset.consistent and without.consistent
    for n in ("Cxf", "Cxr"):
        sd_wide = wide.parameters[n]["std"]
        assert 0.6 < updated_result(wide, with_offset).parameters[n]["std"] / sd_wide < 0.8
        assert updated_result(wide, without).parameters[n]["std"] / sd_wide < 0.3
