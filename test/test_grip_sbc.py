"""Simulation-based calibration of the grip posterior, fast version (the full one: benchmarks/bench_grip_sbc.py).

40 data sets from the fit's own prior (restricted to physical tires) at the paper's low excitation and noise;
each fitted with a reduced budget (4 chains x 20 000 steps, extended to 40 000 when the rule fails). If the
sampler computes the posterior, the ranks of the true mu_max among 99 posterior draws are uniform and the
50 % / 90 % intervals cover 50 % / 90 %: checked with two-sided 99 % binomial bands and a chi-square test.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import binom, chisquare

N_SETS = 40


def _bench():
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_grip_sbc.py"
    spec = importlib.util.spec_from_file_location("bench_grip_sbc", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow
def test_sbc_paper_case_fast():
    sbc = _bench()
    results = [sbc.one(("paper", k, 12, 20_000, 40_000, 4)) for k in range(N_SETS)]
    ok = [r for r in results if "rank" in r]
    assert len(ok) == N_SETS, [r.get("failed") for r in results]
    n = len(ok)
    for key, p in (("in50", 0.5), ("in90", 0.9)):
        hits = sum(r[key] for r in ok)
        lo, hi = binom.ppf(0.005, n, p), binom.ppf(0.995, n, p)
        assert lo <= hits <= hi, (key, hits, lo, hi)
    ranks = np.array([r["rank"]["mu_max"] for r in ok])
    counts = np.histogram(ranks, bins=5, range=(0, sbc.L_RANK + 1))[0]
    assert chisquare(counts).pvalue > 0.001, counts
