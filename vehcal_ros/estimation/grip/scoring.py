"""Grip judged as a planner lives with it: the belief in force at each instant against the truth at that instant.

Input: a time grid with, at each time, the interval in force (``lower``, ``upper``; ``known`` False for an
*unknown*, which counts with lower bound 0), the vehicle speed and the true mu_max (an axle's truth is the lower
of its wheels'). Only time while driving counts (speed >= ``min_speed``, 3 m/s) and where the truth is known.
Every grid step weighs the same (a uniform grid: time-weighted means).

Figures (each a fraction of driving time unless noted):

- ``inside``: lower <= truth <= upper (an unknown's interval is [0, its upper end]);
- ``overstated``: truth < lower, grip promised that the road does not have (the dangerous side);
- ``available``: an estimate is in force (not unknown);
- ``available_fit``: a fitted estimate is in force (neither unknown nor a floor belief, grip_belief.py);
- ``interval_score``: mean interval score of Gneiting & Raftery (2007), "Strictly proper scoring rules,
  prediction, and estimation", JASA 102(477), Eq. 43: (u - l) + (2/alpha)(l - x)[x < l] + (2/alpha)(x - u)[x > u],
  alpha = 1 - the interval's probability (0.1), friction units; lower is better;
- ``usable_lower``: time mean of min(lower / truth, 1): how much of the real grip the published lower bound lets
  a planner use (an unknown contributes 0).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

MIN_SPEED = 3.0
"""m/s: slower time does not count (the estimators gate their samples at the same speed)."""


def over_time_scores(in_force: Mapping[str, np.ndarray], alpha: float = 0.1,
                     min_speed: float = MIN_SPEED) -> dict[str, float]:
    """The figures of the module docstring for one scope (arrays ``lower``, ``upper``, ``known``, ``speed``,
    ``truth`` on one time grid ``t``); NaN figures and ``driving_s`` 0 when no driving time has a truth."""
    t = np.asarray(in_force["t"], dtype=float)
    truth = np.asarray(in_force["truth"], dtype=float)
    speed = np.asarray(in_force["speed"], dtype=float)
    known = np.asarray(in_force["known"], dtype=bool)
    fitted = known & ~np.asarray(in_force.get("floor", np.zeros(known.size, dtype=bool)), dtype=bool)
    lower = np.where(known, np.asarray(in_force["lower"], dtype=float), 0.0)
    upper = np.asarray(in_force["upper"], dtype=float)
    driving = np.isfinite(truth) & (speed >= min_speed)
    dt = float(np.median(np.diff(t))) if t.size > 1 else 0.0
    n = int(driving.sum())
    if n == 0:
        nan = float("nan")
        return {"inside": nan, "overstated": nan, "available": nan, "available_fit": nan, "interval_score": nan,
                "usable_lower": nan, "driving_s": 0.0}
    x, lo, hi = truth[driving], lower[driving], upper[driving]
    score = (hi - lo) + (2.0 / alpha) * np.maximum(lo - x, 0.0) + (2.0 / alpha) * np.maximum(x - hi, 0.0)
    return {"inside": float(np.mean((lo <= x) & (x <= hi))),
            "overstated": float(np.mean(x < lo)),
            "available": float(np.mean(known[driving])),
            "available_fit": float(np.mean(fitted[driving])),
            "interval_score": float(np.mean(score)),
            "usable_lower": float(np.mean(np.minimum(np.maximum(lo, 0.0) / x, 1.0))),
            "driving_s": n * dt}


def pooled_scores(per_scope: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """Figures of several scopes of one drive pooled, each weighted by its driving time."""
    w = {s: f["driving_s"] for s, f in per_scope.items() if f["driving_s"] > 0}
    total = sum(w.values())
    keys = ("inside", "overstated", "available", "available_fit", "interval_score", "usable_lower")
    if total == 0:
        return {**{k: float("nan") for k in keys}, "driving_s": 0.0}
    return {**{k: sum(per_scope[s][k] * ws for s, ws in w.items()) / total for k in keys}, "driving_s": total}
