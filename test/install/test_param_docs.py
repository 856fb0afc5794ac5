"""A parameter is declared once: docs/nodes.md carries each node's rows as tools/param_table.py generates them
from the declarations, and config/estimate.yaml sets each parameter it lists to its declared default (or names
the node's reason for not doing so)."""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NODES = ("grip_estimator", "model_calibrator", "vehicle_simulator")


def _param_table():
    spec = importlib.util.spec_from_file_location("param_table", ROOT / "tools" / "param_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_docs_tables_are_the_generated_ones() -> None:
    """docs/nodes.md's parameter tables are exactly what tools/param_table.py generates from the declarations (a
    row added, dropped, reordered or edited by hand fails)."""
    doc = (ROOT / "docs" / "nodes.md").read_text()
    generated = _param_table().with_tables(doc)
    changed = [(a, b) for a, b in zip(doc.splitlines(), generated.splitlines()) if a != b]
    assert doc == generated, f"docs/nodes.md: regenerate with tools/param_table.py --write: {changed[:2]}"


@pytest.mark.parametrize("node", NODES)
def test_shipped_values_are_the_declared_defaults(node: str) -> None:
    """config/estimate.yaml sets each parameter it lists to its declared default, except those the node names
    with a reason (``SHIPPED_DIFFERENT``); a default changed on one side only fails here."""
    from vehcal_ros.nodes.params_file import validate_params_file

    modules = {n: importlib.import_module(f"vehcal_ros.nodes.{n}") for n in NODES}
    module = modules[node]
    shipped = validate_params_file(ROOT / "config" / "estimate.yaml", {n: m.PARAMS for n, m in modules.items()})[node]
    declared = {p.name: list(p.default) if isinstance(p.default, tuple) else p.default for p in module.PARAMS}
    excepted = getattr(module, "SHIPPED_DIFFERENT", {})
    assert set(shipped) <= set(declared)
    assert set(excepted) <= set(shipped)
    drift = {k: (v, declared[k]) for k, v in shipped.items() if k not in excepted and v != declared[k]}
    assert drift == {}, f"config/estimate.yaml vs the declared defaults (shipped, declared): {drift}"
    assert all(shipped[k] != declared[k] for k in excepted), "an exception that no longer differs"
