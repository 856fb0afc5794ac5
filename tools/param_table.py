"""Each node's declared parameters as a markdown table (robot_localization style): printed, or written into
docs/nodes.md in place of the node's table (``--write``; test_param_docs.py fails when they differ).

    .venv/bin/python tools/param_table.py grip_estimator
    .venv/bin/python tools/param_table.py --write
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

NODES = ("grip_estimator", "model_calibrator", "vehicle_simulator")
DOC = Path(__file__).resolve().parents[1] / "docs" / "nodes.md"
HEADER = "| parameter | default | range | meaning |"


def table(node: str) -> str:
    specs = importlib.import_module(f"vehcal_ros.nodes.{node}").PARAMS
    rows = [HEADER, "|---|---|---|---|"]
    for s in specs:
        if s.lo is not None and s.hi is not None:
            rng = f"[{s.lo:g}, {s.hi:g}]"
        elif s.choices:
            rng = " \\| ".join(s.choices)
        else:
            rng = ""
        ro = " (read-only)" if s.read_only else ""
        default = s.default if not isinstance(s.default, bool) else str(s.default).lower()
        rows.append(f"| `{s.name}` | `{default}` | {rng} | {s.description}{ro} |")
    return "\n".join(rows)


def with_tables(doc: str) -> str:
    """``doc`` (docs/nodes.md) with the table under each ``### <node>`` heading replaced by the generated one."""
    lines = doc.split("\n")
    for node in NODES:
        start = lines.index(f"### {node}")
        top = lines.index(HEADER, start)
        end = top
        while end < len(lines) and lines[end].startswith("|"):
            end += 1
        lines[top:end] = table(node).split("\n")
    return "\n".join(lines)


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        DOC.write_text(with_tables(DOC.read_text()))
    else:
        for name in sys.argv[1:]:
            print(table(name))
        print()
