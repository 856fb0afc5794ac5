"""A parameter is declared once: docs/nodes.md's tables and config/estimate.yaml are what
tools/param_reference.py generates from the declarations, and the shipped file sets each parameter to its declared
default (or to the value and reason the node names in ``SHIPPED_DIFFERENT``)."""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NODES = ("grip_estimator", "model_calibrator", "vehicle_simulator")


def _param_reference():
    spec = importlib.util.spec_from_file_location("param_reference", ROOT / "tools" / "param_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_docs_tables_are_the_generated_ones() -> None:
    """docs/nodes.md's parameter tables are exactly what tools/param_reference.py generates from the declarations (a
    row added, dropped, reordered or edited by hand fails)."""
    doc = (ROOT / "docs" / "nodes.md").read_text()
    generated = _param_reference().with_tables(doc)
    changed = [(a, b) for a, b in zip(doc.splitlines(), generated.splitlines()) if a != b]
    assert doc == generated, f"docs/nodes.md: regenerate with tools/param_reference.py --write: {changed[:2]}"


def test_params_file_is_the_generated_one() -> None:
    """config/estimate.yaml is exactly what tools/param_reference.py generates (a default, range or description
    changed in the declaration without regenerating, or a value edited in the file by hand, fails)."""
    shipped = (ROOT / "config" / "estimate.yaml").read_text()
    generated = _param_reference().params_yaml()
    changed = [(a, b) for a, b in zip(shipped.splitlines(), generated.splitlines()) if a != b]
    assert shipped == generated, (
        f"config/estimate.yaml: regenerate with tools/param_reference.py --write: {changed[:2]}")


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
    unset = {k for k, v in declared.items() if v == []}    # an empty list cannot be written (no type in ROS YAML)
    assert set(shipped) == set(declared) - unset, "config/estimate.yaml lists every declared parameter"
    drift = {k: (v, declared[k]) for k, v in shipped.items() if k not in excepted and v != declared[k]}
    assert drift == {}, f"config/estimate.yaml vs the declared defaults (shipped, declared): {drift}"
    assert all(shipped[k] == value != declared[k] for k, (value, _) in excepted.items()), \
        "an exception that no longer differs, or a shipped value other than the one named"
