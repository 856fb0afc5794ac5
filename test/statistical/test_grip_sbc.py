"""Simulation-based calibration of the grip posterior, fast version (the full one: benchmarks/bench_grip_sbc.py).

132 data sets from the fit's own prior (restricted to physical tires) at the paper's low excitation and noise;
each fitted with a reduced budget (4 chains x 20 000 steps, extended to 40 000 when the rule fails). If the
sampler computes the posterior, the 90 % / 50 % intervals of mu_max cover 90 % / 50 % and the ranks of the true
mu_max among 99 posterior draws are uniform.

The target (the design brief's, measured by benchmarks/bench_grip_sbc.py over >= 200 sets) is a 90 % interval
covering 86-94 %. This test rejects when the 90 % hits fall outside 103-130 of 132: probability 0.46 % at a true
coverage of 86 % and 0.27 % at 94 % (exact binomial), so a calibrated estimator anywhere in the target band
passes with >= 99 % probability. Its power is low: it fails a 90 % interval that covers 84 % with probability
0.03, 82 % with 0.10 and 80 % with 0.25 (benchmarks/grip_test_power.py computes these). 80 % power against 80 %
coverage at the same false alarm needs 460 sets (~250 CPU-s), beyond the suite's budget: that check is the
benchmark's. The 50 % hits (47-85) and the rank chi-square (p > 0.001) add checks against other shapes for a
small share of the false-alarm budget (0.06 % and 0.1 % at calibration).

Measured for this budget (bench_grip_sbc.one, seeds 2026 / 2027, 400 data sets each): 88.5 % / 90.5 %
(354 / 362 of 400); at this test's seed 12: 81.8 % (108 / 132); all 932 sets: 88.4 % (95 % interval 86.2-90.4 %),
inside the target band but below 90 %. A test centred on 90 % (pass 110-128: power 0.80 against 80 %) fails this
budget at seed 12 and about 3 % of seeds at 88.4 %. The live settings (8 chains, 40 000 extended up to 120 000
steps): 90.5 % (181 / 200, benchmarks/README_grip.md) and 109 / 132 at seed 12, 87.3 % over both. A candidate
cause of the shortfall in the simulation (not tested): the paper case's slip range ends where the curve reaches
min(0.3, 0.6 mu_max), so the largest slip carries information on the true mu_max that the fit does not use; its
posterior is then not the posterior of the simulation and SBC's uniformity is not guaranteed. 11 of the 12
misses at true mu_max < 0.35 (seed 2026) lie below the interval. A halved budget (10 000 / 20 000 steps)
measured 86.8 % (347 / 400, seed 2026): too short chains under-cover.
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
IN90_RANGE = (103, 130)       # pass ranges of the hit counts (module docstring: the target 86-94 %)
IN50_RANGE = (47, 85)
RANK_P_MIN = 0.001


def _bench() -> ModuleType:
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_grip_sbc.py"
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
