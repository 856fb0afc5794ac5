"""Validate a ROS 2 params YAML (``ros__parameters`` format) against the nodes' declared parameters.

``vehcal run`` and the launch file read the same file (config/estimate.yaml by default). Before any node starts,
:func:`validate_params_file` checks every key: an unknown node or parameter, a wrong type (ROS 2 does not turn
``5`` into ``5.0`` for a double parameter) or a value out of range raises InputError naming the file, the node,
the parameter and what is allowed, so nothing starts half-configured.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from vehcal_ros.errors import InputError
from vehcal_ros.io.params_yaml import param_sections
from vehcal_ros.parameters import ParamSpec

#: parameters every node has (rclpy declares them)
BUILTIN = {"use_sim_time": False, "start_type_description_service": True}


def _type_problem(spec: ParamSpec, value: Any) -> str | None:
    d = spec.default
    if isinstance(d, bool):
        return None if isinstance(value, bool) else "expected true or false"
    if isinstance(d, int):
        return None if isinstance(value, int) and not isinstance(value, bool) else "expected an integer"
    if isinstance(d, float):
        if isinstance(value, bool) or not isinstance(value, float):
            hint = f" (write {value}.0)" if isinstance(value, int) and not isinstance(value, bool) else ""
            return f"expected a floating-point number{hint}"
        return None
    if isinstance(d, str):
        return None if isinstance(value, str) else "expected a string"
    if isinstance(d, (list, tuple)):
        if not isinstance(value, list):
            return "expected a list"
        if d and not all(isinstance(v, type(d[0])) for v in value):
            return f"expected a list of {type(d[0]).__name__}"
    return None


def validate_params_file(path: str | Path, specs_by_node: Mapping[str, Sequence[ParamSpec]]) -> dict[str, dict]:
    """Return ``{node_name: {param: value}}`` from ``path`` after checking it; raise InputError otherwise.

    Node keys may be plain names, namespaced (``/ns/name``), wildcard node keys (``/**/name``, as the shipped
    config/estimate.yaml uses) or the wildcard ``/**``; the wildcard's parameters must be known to at least one
    node. Sections naming the same node merge (later keys win).
    """
    path = Path(path)
    out: dict[str, dict] = {}
    for key, name, params in param_sections(path):
        where = f"params file {path}: {key}"
        if name != "/**" and name not in specs_by_node:
            raise InputError(f"{where}: unknown node (known: {', '.join(specs_by_node)})")
        if name == "/**":
            candidates = [s for specs in specs_by_node.values() for s in specs]
        else:
            candidates = list(specs_by_node[name])
        by_name = {s.name: s for s in candidates}
        for pname, value in params.items():
            pwhere = f"{where}.ros__parameters.{pname}"
            if pname in BUILTIN:
                if not isinstance(value, type(BUILTIN[pname])):
                    raise InputError(f"{pwhere}: expected true or false, got {value!r}")
                continue
            spec = by_name.get(pname)
            if spec is None:
                raise InputError(f"{pwhere}: unknown parameter")
            problem = _type_problem(spec, value)
            if problem:
                raise InputError(f"{pwhere}: {problem}, got {value!r}")
            problem = spec.validate(value)
            if problem:
                raise InputError(f"{pwhere}: {problem}")
        out.setdefault(name, {}).update(params)   # /**/name and name sections of one node merge
    return out
