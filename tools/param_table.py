"""Print a node's declared parameters as a markdown table (robot_localization style) for the README.

    .venv/bin/python tools/param_table.py grip_estimator
"""

from __future__ import annotations

import importlib
import sys


def table(node: str) -> str:
    specs = importlib.import_module(f"vehcal_ros.nodes.{node}").PARAMS
    rows = ["| parameter | default | range | meaning |", "|---|---|---|---|"]
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


if __name__ == "__main__":
    for name in sys.argv[1:]:
        print(table(name))
        print()
