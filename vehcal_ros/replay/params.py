"""What a bag replay runs: the nodes' parameter values, the pipelines they build and the bag's topic names.

The values come from the package's params file (config/estimate.yaml, every declared parameter with its node
default), then the given file's ``/**`` section, then each node's own section (:mod:`vehcal_ros.io.params_yaml`,
the one params parser). The pipelines are built by the nodes' own functions from those values, so a replay runs
the estimators the nodes would run.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from vehcal_ros.errors import InputError
from vehcal_ros.estimation.calibration.pipeline import CalibrationPipeline, config_from
from vehcal_ros.estimation.grip.pipeline import GripPipeline, pipeline_from_params
from vehcal_ros.io import bags
from vehcal_ros.io.params_yaml import absolute_topic, node_sections
from vehcal_ros.resources import find_resource, searched
from vehcal_ros.vehicle.description import load_description

GRIP_NODE = "grip_estimator"


CALIBRATOR_NODE = "model_calibrator"

# grip_estimator parameter -> read_bag sensor key (the node subscribes to these; ground truth is replay-only)
_GRIP_TOPIC_PARAMS = {"wheel_speeds_topic": "wheel_speeds", "tire_forces_topic": "tire_forces",
                      "odom_topic": "odom", "controls_topic": "controls"}


def default_params_file() -> Path:
    """The package's ``config/estimate.yaml`` (:func:`vehcal_ros.resources.find_resource`)."""
    found = find_resource("config", "estimate.yaml")
    if found is None:
        raise InputError(f"config/estimate.yaml not found (looked in {searched('config', 'estimate.yaml')})")
    return found


def resolve_params(params: Mapping[str, Mapping] | str | os.PathLike | None = None) -> dict[str, dict]:
    """Per-node parameter values: the package defaults (config/estimate.yaml, which lists every declared
    parameter with its node default), then the ``/**`` wildcard, then the node's own section.

    ``params``: ``{node: {param: value}}`` (as :func:`vehcal_ros.nodes.params_file.validate_params_file`
    returns), a params YAML path, or None for the defaults only.
    """
    defaults = node_sections(default_params_file())
    given = node_sections(params) if isinstance(params, (str, os.PathLike)) else dict(params or {})
    out: dict[str, dict] = {}
    for node in sorted((set(defaults) | set(given) | {GRIP_NODE}) - {"/**"}):
        values = dict(defaults.get(node, {}))
        values.update(given.get("/**", {}))
        values.update(given.get(node, {}))
        out[node] = values
    return out


def node_values(params: Mapping[str, Mapping] | str | os.PathLike | None, seed: int | None) -> dict[str, dict]:
    node_values = resolve_params(params)
    grip_values = dict(node_values.get(GRIP_NODE, {}))
    cal_values = dict(node_values.get(CALIBRATOR_NODE, {}))
    if seed is not None:
        if not 0 <= int(seed) < 2**31:
            raise InputError(f"seed {seed}: must be in [0, 2147483647]")
        grip_values["seed"] = int(seed)
        cal_values["seed"] = int(seed)
    node_values = {**node_values, GRIP_NODE: grip_values}
    if cal_values:
        node_values[CALIBRATOR_NODE] = cal_values
    return node_values


def grip_pipeline_from(values: Mapping[str, Any]) -> GripPipeline:
    """The GripPipeline the ``grip_estimator`` node builds from these parameter values (the same function)."""
    try:
        return pipeline_from_params(values, load_description(values.get("vehicle") or None))
    except KeyError as exc:
        raise InputError(f"{GRIP_NODE}: parameter {exc.args[0]!r} missing (and no package default)") from None
    except (TypeError, ValueError) as exc:
        raise InputError(f"{GRIP_NODE}: {exc}") from None


def calibration_pipeline_from(values: Mapping[str, Any]) -> CalibrationPipeline:
    """The CalibrationPipeline the ``model_calibrator`` node builds from these values (the same
    ``config_from``)."""
    try:
        return CalibrationPipeline(config_from(values))
    except InputError as exc:
        raise InputError(f"{CALIBRATOR_NODE}: {exc}") from None
    except (TypeError, ValueError) as exc:
        raise InputError(f"{CALIBRATOR_NODE}: {exc}") from None


def calibration_period(values: Mapping[str, Any]) -> float:
    """The node's timer period (``calibration_period``; 5 s, its declared default, when absent)."""
    return float(values.get("calibration_period", 5.0))


def output_prefix(values: Mapping[str, Any]) -> str:
    """The grip estimator's absolute output prefix (``output_prefix`` resolved in the root namespace, as a bag
    replay resolves the nodes' relative names): ``/vehcal`` by default."""
    return absolute_topic(str(values.get("output_prefix", "vehcal"))).rstrip("/")


def topic_map_from(node_values: Mapping[str, Mapping[str, Any]],
                   remap: Mapping[str, str] | None = None) -> dict[str, str]:
    """Canonical topic -> topic in the bag: the nodes' ``*_topic`` parameters, then ``remap`` (``FROM -> TO``
    where FROM is a canonical topic, a sensor key such as ``imu``, or the topic a node parameter names)."""
    out: dict[str, str] = {}
    for node, values in node_values.items():
        for key, val in values.items():
            if not key.endswith("_topic") or not isinstance(val, str):
                continue
            val = absolute_topic(val)  # the nodes' relative defaults, in the root namespace of a bag
            sensor = _GRIP_TOPIC_PARAMS.get(key, key[: -len("_topic")])
            canonical = bags.DEFAULT_TOPICS.get(sensor)
            if canonical is None or canonical == "/clock":
                continue
            if canonical in out and out[canonical] != val:
                raise InputError(f"{node}.{key} = {val!r} but another node reads {canonical} from "
                                 f"{out[canonical]!r}; a bag replay needs one name per topic")
            out[canonical] = val
    for src, dst in (remap or {}).items():
        if not isinstance(dst, str) or not dst.startswith("/"):
            raise InputError(f"remap {src}:={dst}: the target must be an absolute topic name")
        hits = [c for c in bags.TOPIC_TYPES if c != "/clock" and src in (c, out.get(c), _sensor_key(c))]
        if not hits:
            known = ", ".join(sorted({out.get(c, c) for c in bags.TOPIC_TYPES if c != "/clock"}))
            raise InputError(f"remap {src}:={dst}: {src!r} is not a topic the estimators read (known: {known})")
        for c in hits:
            out[c] = dst
    return {c: t for c, t in out.items() if t != c}


def _sensor_key(canonical: str) -> str | None:
    return next((k for k, v in bags.DEFAULT_TOPICS.items() if v == canonical), None)


def frames_from(grip_values: Mapping[str, Any]) -> bags.Frames:
    wheel_names = tuple(grip_values.get("wheel_names", bags.WHEELS))
    axes = tuple(int(a) for a in grip_values.get("controls_axes", (0, 1, 2)))
    if len(wheel_names) != 4 or len(axes) != 3:
        raise InputError(f"{GRIP_NODE}: wheel_names needs 4 names and controls_axes 3 indices")
    return bags.Frames(wheel_names=wheel_names, axes=axes)
