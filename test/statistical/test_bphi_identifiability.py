"""Paper Section 4.2: front and rear roll damping are not separately identifiable; their sum is."""

from __future__ import annotations

import numpy as np
import pytest
from calibration_synthetic import TRUTH, synthetic_segment

from vehcal_ros.estimation.calibration.fit import calibrate_stage

pytestmark = pytest.mark.slow


def test_separate_bphi_strongly_anticorrelated_merged_resolves() -> None:
    noisy, _ = synthetic_segment("lateral", seed=2)
    sep = calibrate_stage(noisy, "lateral", previous=TRUTH, n_chains=2, n_draws=250, seed=5, separate_bphi=True,
                          predictive_draws=10)
    merged = calibrate_stage(noisy, "lateral", previous=TRUTH, n_chains=2, n_draws=250, seed=5,
                             predictive_draws=10)
    d = sep.draws.reshape(-1, sep.draws.shape[2])
    bf, br = d[:, sep.names.index("bphi_f")], d[:, sep.names.index("bphi_r")]
    corr = np.corrcoef(bf, br)[0, 1]
    assert corr < -0.9, corr
    total = TRUTH["bphi_f"] + TRUTH["bphi_r"]
    # each alone is poorly determined (sd > 10 % of the total) ...
    assert sep.parameters["bphi_f"]["std"] > 0.1 * total and sep.parameters["bphi_r"]["std"] > 0.1 * total
    # ... while their sum, and the merged bphi, are sharp and agree
    s_sum = bf + br
    mb = merged.parameters["bphi"]
    assert mb["std"] < 0.06 * total and s_sum.std() < 0.06 * total
    assert abs(s_sum.mean() - mb["mean"]) < 3 * mb["std"]
    assert mb["hdi_low"] <= total <= mb["hdi_high"]
    assert sep.parameters["bphi_f"]["std"] > 4 * mb["std"] / 2
