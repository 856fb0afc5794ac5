"""Simulation-based calibration of the grip posterior, fast version (the full one: benchmarks/bench_grip_sbc.py).

132 data sets from the fit's own prior (restricted to physical tires) at the paper's low excitation and noise;
each fitted with a reduced budget (4 chains x 20 000 steps, extended to 40 000 when the rule fails). If the
sampler computes the posterior, the 90 % / 50 % intervals of mu_max cover 90 % / 50 % and the ranks of the true
mu_max among 99 posterior draws are uniform.

What the test must see: 90 % intervals that cover 80 %. That is a lower-tail event of the number of 90 % hits,
binomial whatever the shape of the miscalibration, so that count carries the test; the 50 % hits and the ranks
add checks against other shapes for a small share of the false-alarm budget. Probability that the test passes
(benchmarks/grip_test_power.py: exact binomial for the 90 % hits alone, else Monte Carlo of the whole test,
100 000 replications, under posteriors too narrow by c or shifted by d posterior SDs):

    true coverage of the 90 % interval         0.90     0.85     0.80
    former test (40 sets, 99 % bands), all     0.992    0.949    0.796   (too narrow; 0.970 / 0.839 any shape)
    this test, 90 % hits alone (any shape)     0.993    0.750    0.200
    this test, all, too narrow (c 0.88, 0.78)  0.992    0.741    0.192
    this test, all, shifted (d 0.55, 0.78)     0.992    0.031    0.000

False alarm 0.8 %: 90 % hits below 110 of 132 (0.60 %) or above 128 (0.06 %), 50 % hits outside 47-85 (0.06 %),
rank chi-square p <= 0.001 (0.1 %). Power against 90 % intervals covering 80 %: 0.80 for any shape, 0.81 if the
posteriors are too narrow (the 50 % interval then covers 40 %), 1.00 if shifted. 132 is the smallest number of
sets giving 80 % power at a false alarm <= 0.7 % from the 90 % hits; pooling the 50 % hits into one count needs
135 if the posteriors are too narrow (116 if shifted, which the ranks catch anyway).

The boundary sits at ~83 % (110 / 132), so the test needs posteriors calibrated to about a point: it fails
with probability 1.8 % at a coverage of 89 %, 4.2 % at 88 %. Measured for this budget (bench_grip_sbc.one,
seeds 2026 / 2027, 400 data sets each): 88.5 % / 90.5 % (354 / 362 of 400); at this test's seed 12: 81.8 %
(108 / 132: the test fails; P(<= 108) = 0.3 % at 90 %, 1.7 % at 88.4 %); all 932 sets: 88.4 % (95 % interval
86.2-90.4 %). The live settings (8 chains, 40 000 extended up to 120 000 steps): 90.5 % (181 / 200,
benchmarks/README_grip.md) and 109 / 132 at seed 12 (they would fail this test too), 87.3 % over both. A
candidate cause in the simulation (not tested): the paper case's slip range ends where the curve reaches
min(0.3, 0.6 mu_max), so the largest slip carries information on the true mu_max that the fit does not use; its
posterior is then not the posterior of the simulation and SBC's uniformity is not guaranteed. 11 of the 12
misses at true mu_max < 0.35 (seed 2026) lie below the interval. A halved budget (10 000 / 20 000 steps)
measured 86.8 % (347 / 400, seed 2026; against this budget on the same data 9 sets lost their cover and 2 gained
one): too short chains under-cover.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from scipy.stats import chisquare

N_SETS = 132
FIT = (20_000, 40_000, 4)     # n_steps, max_steps, chains
IN90_RANGE = (110, 128)       # pass ranges of the hit counts (module docstring)
IN50_RANGE = (47, 85)
RANK_P_MIN = 0.001


def _bench() -> ModuleType:
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_grip_sbc.py"
    spec = importlib.util.spec_from_file_location("bench_grip_sbc", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow
def test_sbc_paper_case_fast() -> None:
    sbc = _bench()
    results = [sbc.one(("paper", k, 12, *FIT)) for k in range(N_SETS)]
    ok = [r for r in results if "rank" in r]
    assert len(ok) == N_SETS, [r.get("failed") for r in results]
    hits90 = sum(r["in90"] for r in ok)
    hits50 = sum(r["in50"] for r in ok)
    assert IN90_RANGE[0] <= hits90 <= IN90_RANGE[1], (hits90, hits50)
    assert IN50_RANGE[0] <= hits50 <= IN50_RANGE[1], (hits90, hits50)
    ranks = np.array([r["rank"]["mu_max"] for r in ok])
    counts = np.histogram(ranks, bins=5, range=(0, sbc.L_RANK + 1))[0]
    assert chisquare(counts).pvalue > RANK_P_MIN, counts
