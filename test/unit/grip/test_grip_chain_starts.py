"""Overdispersed chain starts of the grip fit (GripConfig.chain_starts, grip_fit.optima_starts).

The window in test/data/grip_window_two_modes.json is one the live pipeline fitted on a CommonRoad parameter set 1
drive (front axle, dry road, true mu_max 1.0): low excitation, |mu| up to ~0.27. Its posterior has a broad mode
(mu_max ~0.3-1.55, the data leave the peak free) and a narrow one (mu_max 0.276-0.303, a curve that saturates
at the data's edge). Chains that all start at theta_ML stay in the mode they start in, and split R-hat, blind to
a mode no chain visits, passes them.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from vehcal_ros.estimation.grip.fit import GripEstimator, optima_starts
from vehcal_ros.estimation.grip.pipeline import fit_config_from
from vehcal_ros.replay.params import resolve_params

WINDOW = json.loads((Path(__file__).resolve().parents[2] / "data" / "grip_window_two_modes.json").read_text())


def _fit(chain_starts: str, seed: int):
    cfg = dataclasses.replace(fit_config_from(resolve_params(None)["grip_estimator"]), seed=seed,
                              chain_starts=chain_starts)
    arrays = {k: np.asarray(WINDOW[k]) for k in ("slip", "mu", "slip_var", "mu_var", "lat")}
    return GripEstimator(cfg).fit(arrays["slip"], arrays["mu"], slip_var=arrays["slip_var"],
                                  mu_var=arrays["mu_var"], lateral=arrays["lat"])


@pytest.mark.slow
def test_chains_started_over_the_optima_do_not_pass_on_one_narrow_mode():
    """8 sampler seeds with the shipped fit settings: no converged fit's 90 % interval may exclude the true
    mu_max, and at least half converge. Measured on this window (seeds 100-109): chains all at theta_ML
    (``chain_starts="ml"``) converged 6 times, 5 of them on the narrow mode [0.276, 0.303]; started over the ML
    optima, 8 converged, none excluding 1.0. Power: at the "ml" rate of 5 in 10 a run of 8 seeds shows no such fit
    with probability 0.5^8 = 0.4 %."""
    truth = WINDOW["true_mu_max"]
    fits = [_fit("optima", 100 + k) for k in range(8)]
    wrong = [(f.mu_max_lower, f.mu_max_upper) for f in fits if f.converged
             and not f.mu_max_lower <= truth <= f.mu_max_upper]
    assert not wrong
    assert sum(f.converged for f in fits) >= 4


def test_optima_starts_spread_over_distinct_near_optima():
    """The best start first; an optimum beyond the log-likelihood gap and a near-duplicate are left out; the
    chains cycle over what is left."""
    bounds = np.array([(4.0, 210.0), (1.2, 2.1), (0.05, 1.7), (-2.7, 1.0), (-0.01, 0.01), (-0.05, 0.1)])
    best = np.array([20.0, 1.6, 0.3, 0.2, 0.0, 0.0])
    far = np.array([60.0, 1.4, 1.0, 0.5, 0.001, 0.01])        # another mode, 2 log-likelihood units down
    twin = best + 1e-4 * (bounds[:, 1] - bounds[:, 0])         # the same optimum again
    poor = np.array([150.0, 2.0, 1.5, -2.0, 0.0, 0.05])       # 50 units down
    sigma = 0.01
    ml = SimpleNamespace(start_theta=np.array([best, far, twin, poor]), V=1.0, sigma=sigma,
                         start_V=1.0 + 2.0 * sigma ** 2 * np.array([0.0, 2.0, 0.0, 50.0]))
    starts = optima_starts(best, ml, bounds, 5, gap=10.0, max_peak_slip=None)
    assert starts.shape == (5, 6)
    np.testing.assert_allclose(starts[[0, 2, 4]], np.tile(best, (3, 1)))
    np.testing.assert_allclose(starts[[1, 3]], np.tile(far, (2, 1)))
