"""Markdown table of grip-over-time results (the JSON of grip_over_time.py or zoo/run_zoo.py), one row per drive,
seed and force source, with the targets each misses.

Usage:  python benchmarks/grip_over_time_table.py RESULT.json [RESULT.json ...]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from grip_over_time import missed


def rows(path: Path) -> list[str]:
    doc = json.loads(path.read_text())
    out = []
    name = doc.get("vehicle", "zoo")
    label = f"{name} ({doc.get('description', 'spec sheet')}), {doc.get('scenario') or 'CommonRoad drive'}"
    for run in doc["runs"]:
        d = run["drive"]
        what = run.get("vehicle", label)
        if "bag" in run and doc.get("scenario") is None:
            what = f"{name} (CommonRoad multi-body), bag {Path(run['bag']).name}"
        miss = missed(d, doc.get("scenario"))
        scopes = "; ".join(f"{s.split('_')[0]} {f['inside']:.2f}/{f['overstated']:.2f}/{f['available']:.2f}/"
                           f"{f['usable_lower']:.2f}" for s, f in run["per_scope"].items())
        out.append(f"| {what} | {run.get('seed', 0)} | {run.get('forces', 'estimated')} | {d['inside']:.2f} | "
                   f"{d['overstated']:.2f} | {d['available']:.2f} | {d.get('available_fit', float('nan')):.2f} | "
                   f"{d['interval_score']:.3f} | "
                   f"{d['usable_lower']:.2f} | {scopes} | {', '.join(miss) or 'none'} |")
    return out


def main() -> int:
    print("| drive | seed | forces | inside | overstated | available | of which fitted | interval score | usable lower "
          "| per scope (inside/over/avail/usable) | targets missed |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for arg in sys.argv[1:]:
        print("\n".join(rows(Path(arg))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
