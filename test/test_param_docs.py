"""A parameter is declared once: docs/nodes.md carries each node's rows as tools/param_table.py generates them
from the declarations, and config/estimate.yaml's model_calibrator section sets each parameter it lists to its
declared default."""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
NODES = ("grip_estimator", "model_calibrator", "vehicle_simulator")


def _table(node: str) -> list[str]:
    spec = importlib.util.spec_from_file_location("param_table", ROOT / "tools" / "param_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.table(node).splitlines()[2:]


def _section(doc: str, node: str) -> set[str]:
    start = doc.index(f"### {node}")
    end = doc.find("\n### ", start + 4)
    return set(doc[start:end if end >= 0 else len(doc)].splitlines())


@pytest.mark.parametrize("node", NODES)
def test_docs_rows_are_the_generated_ones(node: str) -> None:
    section = _section((ROOT / "docs" / "nodes.md").read_text(), node)
    missing = [row for row in _table(node) if row not in section]
    assert not missing, f"docs/nodes.md ### {node}: regenerate with tools/param_table.py: {missing[:3]}"


def test_shipped_calibrator_values_are_the_declared_defaults() -> None:
    from vehcal_ros.nodes.model_calibrator import PARAMS

    shipped = yaml.safe_load((ROOT / "config" / "estimate.yaml").read_text())["/**/model_calibrator"][
        "ros__parameters"]
    declared = {p.name: p.default for p in PARAMS}
    assert set(shipped) <= set(declared)
    assert {k: v for k, v in shipped.items() if v != declared[k]} == {}
