"""The quantile functions equal scipy.stats' distributions bit for bit (the reference they replace at start-up)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from vehcal_ros.inference.quantiles import (
    chi2_quantile,
    chi2_upper_quantile,
    halfnormal_quantile,
    normal_quantile,
    student_t_quantile,
)

PROBS = [*np.random.default_rng(0).uniform(0.0, 1.0, 200), 0.0, 1.0, 0.5, 1e-12, 1.0 - 1e-12, 0.05, 0.95]
DOFS = [1, 2, 3, 7.5, 30, 200]


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


@pytest.mark.parametrize("dof", DOFS)
def test_quantiles_equal_scipy_stats(dof: float) -> None:
    for p in PROBS:
        assert _same(normal_quantile(p), float(stats.norm.ppf(p))), p
        assert _same(halfnormal_quantile(p, 3.7), float(stats.halfnorm.ppf(p, scale=3.7))), p
        assert _same(chi2_quantile(p, dof), float(stats.chi2.ppf(p, dof))), (p, dof)
        assert _same(chi2_upper_quantile(p, dof), float(stats.chi2.isf(p, dof))), (p, dof)
        assert _same(student_t_quantile(p, dof), float(stats.t.ppf(p, dof))), (p, dof)


def test_known_values_and_out_of_range() -> None:
    # printed tables' values (9 decimals)
    assert normal_quantile(0.975) == pytest.approx(1.959963985, abs=1e-9)
    assert chi2_upper_quantile(0.05, 1) == pytest.approx(3.841458821, abs=1e-9)
    assert chi2_quantile(0.95, 1) == pytest.approx(3.841458821, abs=1e-9)
    assert halfnormal_quantile(0.95, 2.0) == pytest.approx(2.0 * 1.959963985, abs=2e-9)
    assert student_t_quantile(0.975, 10) == pytest.approx(2.228138852, abs=1e-9)
    assert math.isnan(halfnormal_quantile(-0.1)) and math.isnan(normal_quantile(1.5))
