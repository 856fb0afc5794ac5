"""Road-surface change detection (estimation/grip/surface_change.py) and its hook in the grip pipeline.

Known truth: (1) on a stationary stream of N(0, 1) residuals the CUSUM's mean run length to a false alarm
matches Siegmund's approximation (an independent closed form); (2) the recursive residuals of batch means are
N(0, 1) and uncorrelated when the true curve is drawn from the reference's posterior (the property the CUSUM's
design rests on); (3) on a simulated step from a dry to a snow tire curve, with the dry curve as the reference,
the change is detected within two batches and its time is estimated to within a batch; with the default
threshold there is no false alarm on long dry streams (fixed seeds), and few, at the design rate, on a
constant road whose slips share a slowly varying error, where a test of single samples fires on many windows;
(4) through GripPipeline: a fit on mixed dry + snow data drops the dry samples and publishes an interval that
contains the snow curve's peak.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from vehcal_ros.estimation.grip.fit import GripConfig
from vehcal_ros.estimation.grip.friction_samples import ScopeData
from vehcal_ros.estimation.grip.pipeline import GripPipeline, surface_change_config_from
from vehcal_ros.estimation.grip.surface_change import (
    PredictiveReference,
    SurfaceChangeConfig,
    cusum_change,
    detect_surface_change,
)
from vehcal_ros.models import pacejka

DRY = np.array([10.0, 1.65, 0.9, -0.5, 0.0, 0.0])     # B, C, D, E, s_h, s_v: peak 0.9
SNOW = np.array([30.0, 1.65, 0.3, -0.5, 0.0, 0.0])    # same slip stiffness B C D, peak 0.3
NOISE = 0.01                                          # std of a friction sample


def _siegmund_two_sided(k: float, h: float) -> float:
    """Mean run length of a two-sided CUSUM on N(0, 1) data (Siegmund's approximation, b = h + 1.166;
    Basseville & Nikiforov 1993 Eq. 5.2.44), one side's ARL halved."""
    b, d = h + 1.166, -k
    return (math.exp(-2.0 * d * b) + 2.0 * d * b - 1.0) / (2.0 * d * d) / 2.0


def test_false_alarm_run_length_matches_siegmund():
    k, h, n_streams = 0.5, 4.0, 2000
    rng = np.random.default_rng(11)
    t = np.arange(4000.0)
    lengths = []
    for _ in range(n_streams):
        found = cusum_change(t, rng.standard_normal(t.size), h, k)
        assert found is not None
        lengths.append(found[1] + 1.0)
    mean = float(np.mean(lengths))
    # run lengths are ~geometric (SD ~ mean): standard error mean/sqrt(2000) ~ 2 %; the approximation's own error
    # for the two-sided combination is a few %
    assert mean == pytest.approx(_siegmund_two_sided(k, h), rel=0.15)


def _stream(theta: np.ndarray, n: int, rng: np.random.Generator, t0: float) -> tuple[np.ndarray, ...]:
    slip = rng.uniform(0.0, 0.04, n)
    mu = pacejka.mf_curve(slip, theta) + NOISE * rng.standard_normal(n)
    return t0 + 0.05 * np.arange(n), slip, mu


def test_step_detected_within_two_batches_and_no_false_alarm():
    config = SurfaceChangeConfig()       # the defaults: h 6, k 0.5, batches of 20
    reference = PredictiveReference(DRY.copy(), np.zeros((6, 6)), NOISE, stamp=-1.0)
    delays, errors, false_alarms = [], [], 0
    for seed in range(20):
        rng = np.random.default_rng(seed)
        t1, s1, m1 = _stream(DRY, 2000, rng, 0.0)
        false_alarms += detect_surface_change(config, reference, t1, s1, m1) is not None
        t2, s2, m2 = _stream(SNOW, 200, rng, t1[-1] + 0.05)
        t, s, m = (np.concatenate(p) for p in ((t1, t2), (s1, s2), (m1, m2)))
        found = detect_surface_change(config, reference, t, s, m, np.zeros_like(s), np.zeros_like(m))
        assert found is not None, seed
        change, at = found.time, found.detected_at
        assert 0.0 < found.level < 0.3
        delays.append(round((at - t2[0]) / 0.05))
        errors.append(round((change - t2[0]) / 0.05))
    # 2000 batches of exact dry data: the default's mean run length is ~1290 batches of N(0, 1) innovations, but
    # without the reference's own samples phi is the batch size, so an exact reference's innovations have SD
    # 1/sqrt(20) and the run length is astronomically longer
    assert false_alarms == 0
    b = config.batch
    assert max(delays) <= 2 * b, delays   # snow sits ~4-25 noise SD below the dry curve at these slips
    # the change point is the first sample of the crossing run's first batch; the dry stream fills whole batches,
    # so it is the first snow sample, or a batch later when the first snow batch sat where both curves agree
    assert np.median(np.abs(errors)) == 0 and max(abs(e) for e in errors) <= b, errors


def _reference_and_truth(rng: np.random.Generator) -> tuple[PredictiveReference, np.ndarray]:
    """A dry reference with a small posterior covariance (so the curve is close to linear in theta across it)
    and a true theta drawn from that posterior."""
    sd = np.array([0.3, 0.02, 0.02, 0.05, 0.0005, 0.002])
    corr = np.eye(6)
    corr[0, 2] = corr[2, 0] = -0.5
    cov = corr * np.outer(sd, sd)
    truth = DRY + np.linalg.cholesky(cov) @ rng.standard_normal(6)
    return PredictiveReference(DRY.copy(), cov, NOISE, stamp=0.0), truth


def test_recursive_residuals_are_standard_normal_under_the_reference():
    """Known truth: when the road's curve is a draw from the reference's posterior and the samples' noise is
    white (phi = 1), the batch innovations e_j are independent N(0, 1) (Brown, Durbin & Evans 1975), whatever
    the draw; the plain standardised batch means (no updating) are not: they share the draw's error.

    Power: 300 streams x 15 batches = 4500 innovations; the variance's standard error is sqrt(2 / 4500) = 0.021,
    so the band 1 +- 0.1 (4.7 SE) fails with power > 0.99 for a variance off by 15 % (an innovation variance
    that ignored the parameter term or the updating); the lag-1 correlation's SE over 300 x 14 pairs is 0.015,
    the band +- 0.07 fails for a correlation of 0.12 with power > 0.99."""
    rng = np.random.default_rng(5)
    b = 20
    es, plain = [], []
    for _ in range(300):
        reference, truth = _reference_and_truth(rng)
        slip = rng.uniform(0.0, 0.08, 15 * b)
        mu = pacejka.mf_curve(slip, truth) + NOISE * rng.standard_normal(slip.size)
        r, w, jac = reference.residuals(slip, mu)
        e = reference.innovations(r.reshape(15, b), w.reshape(15, b), jac.reshape(15, b, 6), 1.0)
        es.append(e)
        plain.append(r.reshape(15, b).mean(axis=1) / (NOISE / math.sqrt(b)))
    e = np.array(es)
    assert abs(e.mean()) < 0.05                      # SE 0.015
    assert e.var() == pytest.approx(1.0, abs=0.1)
    lag1 = float(np.mean(e[:, 1:] * e[:, :-1]))
    assert abs(lag1) < 0.07
    assert np.array(plain).var() > 1.5               # the shared parameter error the updating takes out


def _correlated_dry(rng: np.random.Generator, n: int, rho: float, sd: float) -> tuple[np.ndarray, ...]:
    """A constant dry road sampled at 10 per second, its measured slips off by a shared AR(1) error (the speed
    reference's), stated slip variance that of the error's marginal."""
    slip_true = np.abs(0.01 * np.sin(np.arange(n) / 37.0)) + rng.uniform(0.0, 0.01, n)
    err = np.empty(n)
    err[0] = sd * rng.standard_normal()
    for i in range(1, n):
        err[i] = rho * err[i - 1] + sd * math.sqrt(1.0 - rho * rho) * rng.standard_normal()
    mu = pacejka.mf_curve(slip_true, DRY) + NOISE * rng.standard_normal(n)
    return 0.1 * np.arange(n), slip_true + err, mu, np.full(n, sd * sd)


def test_serially_correlated_slip_errors_rarely_raise_an_alarm():
    """A constant road whose measured slips share a slowly varying error (lag-1 correlation 0.8 at 0.1 s, as the
    simulated drives' residuals), 100 windows of 60 s, the reference's stamp at 30 s: the batch test with phi
    from the reference's own samples fires on at most 5 (its design rate: ~1.2 % of 15-batch runs at a mean run
    length of ~1290 batches); the same data tested sample by sample (batch 1, h 10, k 1: a CUSUM of single
    samples, as the drives' test was, which fired every ~28 s per axle on the 15-minute dry drive) fire on 29.
    Power: a false-alarm rate of 10 % per window gives <= 5 of 100 with probability 0.07 (Poisson), so the bound
    catches it with power 0.93; at the design rate it is exceeded with probability ~0.002."""
    rng = np.random.default_rng(8)
    batch_alarms = single_alarms = 0
    single = SurfaceChangeConfig(threshold=10.0, drift=1.0, batch=1)
    for _ in range(100):
        t, s, m, vs = _correlated_dry(rng, 600, 0.8, 0.0015)
        reference = PredictiveReference(DRY.copy(), np.zeros((6, 6)), NOISE, stamp=30.0)
        batch_alarms += detect_surface_change(SurfaceChangeConfig(), reference, t, s, m, vs) is not None
        single_alarms += detect_surface_change(single, reference, t, s, m, vs) is not None
    assert batch_alarms <= 5
    assert single_alarms >= 20


def test_an_indefinite_reference_covariance_is_no_crash():
    """Bad input gets an answer: a reference whose posterior covariance is not positive semi-definite (a
    negative eigenvalue, as rounding or a degenerate chain can leave) still gives a finite test, no exception."""
    rng = np.random.default_rng(4)
    cov = np.diag([1.0, 0.01, 0.01, 0.05, 1e-6, 1e-4])
    cov[0, 2] = cov[2, 0] = -0.5                      # |corr| > 1 between B and D: eigenvalue < 0
    assert np.linalg.eigvalsh(cov).min() < 0.0
    reference = PredictiveReference(DRY.copy(), cov, NOISE, stamp=10.0)
    t, s, m = _stream(DRY, 600, rng, 0.0)
    assert detect_surface_change(SurfaceChangeConfig(), reference, t, s, m) is None


def test_config_ranges_named():
    with pytest.raises(ValueError, match="surface_change_threshold"):
        surface_change_config_from({"surface_change_threshold": -1.0})
    with pytest.raises(ValueError, match="surface_change_drift"):
        surface_change_config_from({"surface_change_drift": 11.0})
    with pytest.raises(ValueError, match="surface_change_batch"):
        surface_change_config_from({"surface_change_batch": 0})
    assert not surface_change_config_from({"surface_change_threshold": 0.0}).enabled


@pytest.mark.slow
def test_pipeline_drops_the_previous_surface():
    """Dry data, a published dry estimate; then a window of dry + snow samples: the fit keeps the snow samples
    only and its interval contains the snow peak (0.3); without the test the mixed window's does not. The fits use
    the paper case's settings, as the fit's own unit tests (the data are a car tire's curves like the paper's)."""
    rng = np.random.default_rng(3)

    def scope_data(parts):
        t, s, m = (np.concatenate(x) for x in zip(*parts))
        return ScopeData("front_axle", t, s, m, np.zeros_like(s), np.zeros_like(m))

    dry = (np.arange(60) * 0.5, rng.uniform(0.0, 0.15, 60), None)
    dry = (dry[0], dry[1], pacejka.mf_curve(dry[1], DRY) + NOISE * rng.standard_normal(60))
    snow_s = rng.uniform(0.0, 0.06, 40)
    snow = (30.0 + np.arange(40) * 0.25, snow_s, pacejka.mf_curve(snow_s, SNOW) + NOISE * rng.standard_normal(40))
    results = {}
    for label, config in (("on", SurfaceChangeConfig()), ("off", SurfaceChangeConfig(threshold=0.0))):
        p = GripPipeline(fit_config=GripConfig.paper_case(keep_negative_slip=True), surface_change=config)
        assert p.commit(p.fit([scope_data([dry])])) == ["front_axle"]
        dry_est = p.status["front_axle"].estimate
        assert dry_est.mu_max_lower <= 0.9 <= dry_est.mu_max_upper
        old = (dry[0][30:], dry[1][30:], dry[2][30:])        # the 30 s window: the newer half of the dry data
        outcomes = p.fit([scope_data([old, snow])])
        p.commit(outcomes)
        results[label] = (outcomes[0], p.status["front_axle"])
    on, st = results["on"]
    change = on.surface_change
    assert change is not None and 29.0 <= change.time <= 31.0, change
    n_kept = int(np.sum(np.abs(old[2]) < change.level))       # dry samples below the level where snow departs
    assert on.n_points <= 40 + n_kept + 2 and n_kept < 30     # the dry samples above it are not fitted
    assert st.surface_changes == 1 and st.last_surface_change == change.time
    assert on.estimate is not None and on.estimate.mu_max_lower <= 0.3 <= on.estimate.mu_max_upper
    off, _ = results["off"]
    assert off.surface_change is None and off.n_points == 70


WET_SAME_STIFFNESS = np.array([15.0, 1.65, 0.6, -0.5, 0.0, 0.0])   # peak 0.6, the DRY curve's slip stiffness B C D


def _ellipse_friction(slip: np.ndarray, theta: np.ndarray, lat: float) -> np.ndarray:
    """Longitudinal friction of a tire at a slip angle (lat = |sin alpha| / rho) under the friction ellipse."""
    f0, df0 = pacejka.mf_curve(slip, theta), pacejka.slope(slip, theta)
    d = theta[2] + theta[5]
    return np.array([pacejka.combined(float(s), float(f), float(g), lat / d)[0] for s, f, g in zip(slip, f0, df0)])


def test_old_surface_samples_at_a_slip_angle_are_not_kept():
    """After a detected dry -> wet change the pipeline keeps the dry samples below the change's friction level
    only if they follow the wet curve: in pure slip they do (same slip stiffness), under the friction ellipse at
    a slip angle they do not (the apparent stiffness falls with the road's peak). Known truth: the wet curve;
    the kept samples' posterior-predictive residuals under it must be N(0, 1)-like (mean within 4 standard
    errors of 0), and the dry pure-slip samples must stay."""
    rng = np.random.default_rng(11)
    n, lat, level = 150, 0.035, 0.12            # lat: a 2 deg slip angle, rho 1
    s_old = rng.uniform(0.001, 0.007, 2 * n)    # |mu| up to ~0.1, below the level
    mu_old = np.concatenate([pacejka.mf_curve(s_old[:n], DRY), _ellipse_friction(s_old[n:], DRY, lat)])
    s_new = rng.uniform(0.0, 0.02, n)
    mu_new = _ellipse_friction(s_new, WET_SAME_STIFFNESS, lat)
    t = np.concatenate([np.linspace(0.0, 9.9, 2 * n), np.linspace(10.0, 20.0, n)])
    slip = np.concatenate([s_old, s_new])
    mu = np.concatenate([mu_old, mu_new]) + NOISE * rng.standard_normal(3 * n)
    lat_all = np.concatenate([np.zeros(n), np.full(2 * n, lat)])   # old pure slip, old at a slip angle, new
    data = ScopeData("front_axle", t, slip, mu, np.zeros(3 * n), np.zeros(3 * n), lat=lat_all)
    assert np.all(np.abs(mu_old) < level)
    p = GripPipeline()
    st = p.status["front_axle"]
    st.last_surface_change, st.surface_change_level = 10.0, level
    kept, change = p.current_surface(data)
    assert change is None                        # no published estimate: nothing to test against
    old_kept = kept.t < 10.0
    assert np.sum(kept.t >= 10.0) == n and np.sum(old_kept) == n and np.all(kept.lat[old_kept] == 0.0)
    wet = PredictiveReference(WET_SAME_STIFFNESS.copy(), np.zeros((6, 6)), NOISE, stamp=-1.0)
    r, w, _ = wet.residuals(kept.slip, kept.mu, lat=kept.lat)
    z = r / np.sqrt(w)
    assert abs(np.mean(z)) < 4.0 / math.sqrt(z.size), np.mean(z)
    # the premise, on the dropped samples: at a slip angle the dry road's low friction sits above the wet curve
    r, w, _ = wet.residuals(s_old[n:], mu[n:2 * n], lat=np.full(n, lat))
    dropped = r / np.sqrt(w)
    assert np.mean(dropped) > 4.0 / math.sqrt(n), np.mean(dropped)


def test_require_new_excitation_skips_a_window_whose_peak_rests_on_old_data():
    """A published estimate from an excited window; then only cruise samples (|mu| ~ 0) arrive: with
    ``require_new_excitation`` the next window is not fitted (its peak would rest on the old maneuver, on a road
    that may have changed unseen) and the estimate stays; without it (the default) the window is fitted. Once
    an excited maneuver arrives the window is fitted again."""
    rng = np.random.default_rng(5)

    def window(t, s):
        mu = pacejka.mf_curve(s, DRY) + NOISE * rng.standard_normal(s.size)
        return ScopeData("front_axle", t, s, mu, np.zeros_like(s), np.zeros_like(s))

    excited = (np.linspace(0.0, 10.0, 60), rng.uniform(0.0, 0.15, 60))
    cruise = (np.linspace(10.1, 15.0, 40), 1e-4 * rng.standard_normal(40))
    again = (np.linspace(15.1, 20.0, 40), rng.uniform(0.0, 0.15, 40))
    pipelines = {}
    for require in (True, False):
        p = pipelines[require] = GripPipeline(require_new_excitation=require)
        assert p.commit(p.fit([window(*excited)])) == ["front_axle"]
        first = p.status["front_axle"].estimate
        stale = window(np.concatenate([excited[0], cruise[0]]), np.concatenate([excited[1], cruise[1]]))
        assert p.new_excitation(stale) < p.min_excitation <= p.new_excitation(window(*again))
        (o,) = p.fit([stale])
        p.commit([o])
        assert o.skipped is require and (o.estimate is None) is require, (require, o.error)
        if require:
            assert "no new excitation" in o.error and p.status["front_axle"].estimate is first
    p = pipelines[True]
    (o,) = p.fit([window(*(np.concatenate(x) for x in zip(excited, cruise, again)))])
    assert not o.skipped and o.estimate is not None
