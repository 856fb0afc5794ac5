"""A clone is self-contained: no test, benchmark, tool or package module reads a path outside the repository.

The paper's Chrono runs live in data/chrono_hmmwv (with their licence) and the reference files in vehcal_ros/data.
The check reads the source text: any ``parents[N]`` that climbs above the repository root, or a path into a
``shared`` folder, is a read from outside the clone.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("vehcal_ros", "test", "benchmarks", "tools", "launch")
OUTSIDE = re.compile(r"""["'/]shared["'/]|\.\./shared""")


def _climbs_above_root(path: Path, text: str) -> list[str]:
    depth = len(path.relative_to(ROOT).parts)   # parents[depth - 1] is the repository root
    return [m.group(0) for m in re.finditer(r"parents\[(\d+)\]", text) if int(m.group(1)) >= depth]


def test_no_source_reads_outside_the_repository():
    offenders = []
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path == Path(__file__).resolve():
                continue
            text = path.read_text()
            hits = _climbs_above_root(path, text) + OUTSIDE.findall(text)
            if hits:
                offenders.append(f"{path.relative_to(ROOT)}: {hits}")
    assert not offenders, "paths outside the repository:\n" + "\n".join(offenders)


def test_vendored_chrono_runs_are_complete():
    folder = ROOT / "data" / "chrono_hmmwv"
    names = {p.name for p in folder.iterdir()}
    assert {"LICENSE", "README.md", "acc.csv", "acc_test.txt", "simp_ramp.csv", "ramp_steer.txt", "rr_1.csv",
            "rr_test.txt", "test_2.csv", "test_set.txt"} <= names
    assert "BSD 3-Clause" in (folder / "LICENSE").read_text()
