"""Read a ROS 2 params YAML (``ros__parameters`` format) down to its node sections, rclpy-free: the one parser.

The parameter validation of ``vehcal run``/``replay`` (vehcal_ros/nodes/params_file.py) walks
:func:`param_sections`, bag replay reads :func:`node_sections`. A missing file, invalid YAML, a top level that
is not a mapping or a node section other than ``{ros__parameters: {...}}`` is one InputError naming the file
and the section.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from vehcal_ros.errors import InputError


def load_params_document(path: str | os.PathLike) -> dict[Any, Any]:
    """The top-level mapping (node key -> body) of the params YAML at ``path`` ({} for an empty file)."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"params file {path}: no such file")
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise InputError(f"params file {path}: not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset "
                         f"{exc.start})") from None
    except yaml.YAMLError as exc:
        raise InputError(f"params file {path}: not valid YAML ({str(exc).splitlines()[0]})") from None
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise InputError(f"params file {path}: expected a mapping of node names to ros__parameters")
    return doc


def param_sections(path: str | os.PathLike) -> Iterator[tuple[Any, str, dict[str, Any]]]:
    """``(key, node name, parameters)`` of every node section of the params YAML at ``path`` in file order, the
    parameters flattened to ROS 2's dotted names (:func:`flatten_params`). A section must be exactly
    ``{ros__parameters: {...}}``."""
    path = Path(path)
    for key, body in load_params_document(path).items():
        where = f"params file {path}: {key}"
        if not isinstance(body, dict) or set(body) != {"ros__parameters"}:
            raise InputError(f"{where}: expected exactly one key 'ros__parameters'")
        params = body["ros__parameters"] or {}
        if not isinstance(params, dict):
            raise InputError(f"{where}.ros__parameters: expected a mapping")
        yield key, node_name(key), flatten_params(params)


def node_sections(path: str | os.PathLike) -> dict[str, dict[str, Any]]:
    """``{node name: parameters}`` of the params YAML at ``path``: sections naming the same node (``/ns/name``,
    ``/**/name``, ``name``) merge in file order, later keys winning; the wildcard ``/**`` stays a section of its
    own. Structure only: values are not checked (that is the nodes' declarations' job)."""
    out: dict[str, dict[str, Any]] = {}
    for _, name, params in param_sections(path):
        out.setdefault(name, {}).update(params)
    return out


def flatten_params(params: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """ROS 2 nested parameter names, as rclpy reads them: ``{model: {cxf: 1.0}}`` -> ``{"model.cxf": 1.0}``."""
    out: dict[str, Any] = {}
    for k, v in params.items():
        if isinstance(v, Mapping):
            out.update(flatten_params(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def node_name(key: Any) -> str:
    """The node name of a params-file key: ``/ns/name`` and the wildcard node key ``/**/name`` -> ``name``; the
    wildcard ``/**`` stays."""
    return "/**" if key == "/**" else str(key).rstrip("/").split("/")[-1]


def absolute_topic(name: str, namespace: str = "/") -> str:
    """A topic name as ROS 2 resolves it in ``namespace``: ``vehicle/imu`` in ``/truck7`` -> ``/truck7/vehicle/imu``;
    absolute names (``/diagnostics``) stay. Bag replay resolves the nodes' relative defaults in the root namespace."""
    if name.startswith("/"):
        return name
    return "/" + "/".join(p for p in (*namespace.strip("/").split("/"), *name.strip("/").split("/")) if p)
