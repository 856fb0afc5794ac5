"""Markdown table of grip-over-time results (the JSON of grip_over_time.py or zoo/run_zoo.py), one row per drive,
seed and force source, with the targets each misses.

Usage:  python benchmarks/grip_over_time_table.py RESULT.json [RESULT.json ...]
"""

from __future__ import annotations

import argparse
import json
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
    ap = argparse.ArgumentParser(description="Markdown table of grip-over-time results.")
    ap.add_argument("results", nargs="+", type=Path, help="JSON of grip_over_time.py or zoo/run_zoo.py")
    args = ap.parse_args()
    missing = [str(p) for p in args.results if not p.is_file()]
    if missing:
        raise SystemExit(f"grip_over_time_table: no such file: {missing[0]}")
    print("| drive | seed | forces | inside | overstated | available | of which fitted | interval score | usable lower "
          "| per scope (inside/over/avail/usable) | targets missed |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for path in args.results:
        print("\n".join(rows(path)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
