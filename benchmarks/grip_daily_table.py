"""The demo's daily-drive grip table from `vehcal replay --json` results: per scope and road patch, the last
interval published while the patch was under the axle (stamp in the patch), its width and whether it contains the
true mu_max, plus every published estimate's containment (at its own time), for one or more replays of the same
bag (e.g. before and after a change).

    vehcal simulate daily_driving --bag daily_bag
    vehcal replay daily_bag --no-calibration --jobs 1 --json after.json
    .venv/bin/python benchmarks/grip_daily_table.py before=before.json after=after.json
"""

from __future__ import annotations

import json
import sys

import numpy as np


def patches(gt: dict) -> list[tuple[float, float, float]]:
    """(t0, t1, median true mu_max) of the stretches with the same road (true mu_max to 0.05)."""
    t, mm = np.asarray(gt["t"]), np.asarray(gt["mu_max"])
    key = np.round(mm / 0.05)
    out, start = [], 0
    for k in range(1, t.size + 1):
        if k == t.size or key[k] != key[start]:
            out.append((float(t[start]), float(t[k - 1]), float(np.median(mm[start:k]))))
            start = k
    return [p for p in out if p[1] - p[0] > 1.0]


def rows(result: dict) -> list[dict]:
    out = []
    for scope, g in result["grip"].items():
        stamp = np.asarray(g["stamp"], dtype=float)
        m = g["mu_max"]
        for t0, t1, truth in patches(g["ground_truth"]):
            sel = np.flatnonzero((stamp >= t0) & (stamp <= t1 + 0.1))
            row = {"scope": scope, "t0": t0, "t1": t1, "truth": truth, "n": int(sel.size),
                   "hits": int(sum(m["lower"][i] <= g["truth_mu_max"][i] <= m["upper"][i] for i in sel))}
            if sel.size:
                i = sel[-1]
                row.update(mean=m["mean"][i], lower=m["lower"][i], upper=m["upper"][i])
            out.append(row)
    return out


def main() -> None:
    runs = [(a.split("=", 1)[0], json.load(open(a.split("=", 1)[1]))) for a in sys.argv[1:]]
    tables = {label: rows(r) for label, r in runs}
    head = "| scope | t [s] | true mu_max |" + "".join(
        f" {lb}: last estimate [90 % interval] | width | contains | published (contain) |" for lb, _ in runs)
    print(head)
    print("|---|---|---|" + "---|---|---|---|" * len(runs))
    for k, base in enumerate(tables[runs[0][0]]):
        line = f"| {base['scope']} | {base['t0']:.0f}-{base['t1']:.0f} | {base['truth']:.3f} |"
        for lb, _ in runs:
            r = tables[lb][k]
            if "mean" in r:
                ok = "yes" if r["lower"] <= r["truth"] <= r["upper"] else "**no**"
                line += (f" {r['mean']:.3f} [{r['lower']:.3f}, {r['upper']:.3f}] | {r['upper'] - r['lower']:.3f} |"
                         f" {ok} | {r['n']} ({r['hits']}) |")
            else:
                line += " none published | | | 0 |"
        print(line)
    for lb, r in runs:
        n = sum(len(g["stamp"]) for g in r["grip"].values())
        hits = sum(x["hits"] for x in tables[lb])
        nc = r["counters"].get("grip_not_converged", {})
        print(f"\n{lb}: {n} estimates published, {hits} of those in a patch contain the truth at their time; "
              f"fits {r['counters'].get('grip_fits')}, withheld {nc}; replay {r['elapsed_s']:.0f} s wall")


if __name__ == "__main__":
    main()
