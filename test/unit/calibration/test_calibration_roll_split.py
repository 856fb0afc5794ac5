"""The lateral stage samples (kphi_f, kphi_r) as total roll stiffness and front fraction with the stage's own
uniform prior on the (kphi_f, kphi_r) box (estimation/calibration._RollSplit)."""

from __future__ import annotations

import numpy as np

from vehcal_ros.estimation.calibration.fit import _RollSplit, stage_spec


def test_sampling_prior_times_ratio_is_the_uniform_box() -> None:
    spec = stage_spec("lateral", vehicle="sedan")
    roll = _RollSplit.of(spec)
    assert roll is not None and (roll.j_f, roll.j_r) == (2, 3)
    box = dict(spec.priors)
    (lf, hf), (lr, hr) = (box["kphi_f"].low, box["kphi_f"].high), (box["kphi_r"].low, box["kphi_r"].high)
    rng = np.random.default_rng(11)
    n = 400_000
    theta = np.zeros((n, 5))
    theta[:, 2] = rng.uniform(*roll.total, n)
    theta[:, 3] = rng.uniform(*roll.fraction, n)
    rep = roll.to_reported(theta)
    f, r = rep[:, 2], rep[:, 3]
    np.testing.assert_allclose(f + r, theta[:, 2], rtol=1e-12)
    np.testing.assert_allclose(f / (f + r), theta[:, 3], rtol=1e-12)
    w = np.exp(roll.log_prior_ratio(theta))
    inside = (f >= lf) & (f <= hf) & (r >= lr) & (r <= hr)
    assert np.all((w > 0) == inside)
    # importance weights p_box / p_sampling: mean 1 (the evidence is the box prior's), within 4 standard errors
    assert abs(w.mean() - 1.0) < 4 * w.std() / np.sqrt(n)
    # the reweighted draws are uniform on the box: the mean, sd and a quantile of each coordinate, against the
    # uniform's closed forms, with tolerances from the weights' effective sample size
    ess = w.sum() ** 2 / (w * w).sum()
    for x, lo, hi in ((f, lf, hf), (r, lr, hr)):
        mean = float(np.sum(w * x) / w.sum())
        sd = (hi - lo) / np.sqrt(12.0)
        assert abs(mean - 0.5 * (lo + hi)) < 4 * sd / np.sqrt(ess)
        # se(sd) / sd = sqrt((kurtosis - 1) / 4n): 0.45 / sqrt(n) for a uniform
        assert abs(np.sqrt(np.sum(w * (x - mean) ** 2) / w.sum()) / sd - 1.0) < 4 * 0.45 / np.sqrt(ess)
        below = float(np.sum(w * (x < lo + 0.2 * (hi - lo))) / w.sum())
        assert abs(below - 0.2) < 4 * np.sqrt(0.2 * 0.8 / ess)


def test_only_stages_with_both_roll_stiffnesses_are_reparametrised() -> None:
    assert _RollSplit.of(stage_spec("longitudinal")) is None
    assert _RollSplit.of(stage_spec("rolling_resistance")) is None
    assert _RollSplit.of(stage_spec("lateral")) is not None
