"""The stacked rank-normalised R-hat / bulk ESS / tail ESS equal arviz's (the reference implementation)."""

from __future__ import annotations

import numpy as np

from vehcal_ros.inference.diagnostics import rhat_ess
from vehcal_ros.inference.rank_diagnostics import rank_rhat_ess


def _ar1_chains(rng: np.random.Generator, n_chain: int, n_draw: int, phi: float, shift: float) -> np.ndarray:
    """AR(1) chains (autocorrelation phi), chain c offset by c * shift (unmixed chains when shift > 0)."""
    x = np.empty((n_chain, n_draw))
    x[:, 0] = rng.standard_normal(n_chain)
    e = rng.standard_normal((n_chain, n_draw)) * np.sqrt(1 - phi**2)
    for t in range(1, n_draw):
        x[:, t] = phi * x[:, t - 1] + e[:, t]
    return x + shift * np.arange(n_chain)[:, None]


def test_stacked_statistics_equal_arviz():
    rng = np.random.default_rng(4)
    for n_chain, n_draw in ((8, 801), (4, 250), (2, 5)):
        qs = [_ar1_chains(rng, n_chain, n_draw, phi, shift) for phi, shift in
              ((0.0, 0.0), (0.9, 0.0), (0.99, 0.0), (0.5, 0.3), (-0.3, 0.0))]
        qs.append(np.exp(qs[1]))                              # skewed
        qs.append(np.round(qs[2] * 2) / 2)                    # ties (ranks averaged)
        qs.append(np.full((n_chain, n_draw), 0.7))            # constant: ESS = size, R-hat NaN in both
        x = np.stack(qs)
        ref = rhat_ess(np.moveaxis(x, 0, 2), [f"q{i}" for i in range(len(qs))])
        got = rank_rhat_ess(x)
        for i in range(len(qs)):
            np.testing.assert_allclose([g[i] for g in got], ref[f"q{i}"], rtol=1e-9, atol=1e-12, equal_nan=True,
                                       err_msg=f"quantity {i}, {n_chain} x {n_draw}")
    # a non-finite draw makes that quantity NaN and leaves the others alone
    x = np.stack([_ar1_chains(rng, 4, 100, 0.5, 0.0) for _ in range(2)])
    x[1, 2, 7] = np.inf
    r, b, t = rank_rhat_ess(x)
    assert np.isfinite([r[0], b[0], t[0]]).all() and np.isnan([r[1], b[1], t[1]]).all()
    assert np.isnan(rank_rhat_ess(x[:, :, :3])[0]).all()
