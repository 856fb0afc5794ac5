"""What the nodes would have published during a replay, written to a new bag for later comparison and viewing:
``<prefix>/grip/<scope>`` Vector3Stamped (each published fit: x mean, y lower, z upper of mu_max),
``<prefix>/grip_curve/<scope>`` Float64MultiArray and ``/vehcal/model_parameters`` DiagnosticArray; and, as a
planner lives with it, ``<prefix>/grip_in_force/<scope>`` Vector3Stamped (the belief in force every
``TRUTH_PERIOD`` s: x mean, NaN when unknown, y lower, z upper) and ``<prefix>/grip_truth/<scope>`` Vector3Stamped
(x = y = z = the true mu_max under the scope's wheels, where the bag has ground truth). The shipped Foxglove
layout (config/foxglove/replay.json) plots these.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from vehcal_ros.errors import InputError
from vehcal_ros.io import bags
from vehcal_ros.replay.params import GRIP_NODE, output_prefix
from vehcal_ros.replay.results import ReplayResult

MODEL_PARAMETERS_TOPIC = "/vehcal/model_parameters"


def output_messages(result: ReplayResult) -> list[tuple[str, str, Any, int]]:
    """The publications of a replay as ``(topic, msgtype, rosbags_msg, stamp_ns)``: the nodes' in publication
    order, then per scope the belief in force and the truth in time order."""
    T = bags.rosbags_types()
    msgs: list[tuple[str, str, Any, int]] = []
    for prefix, key, kind, t, payload in result.outputs:
        ns = bags.sec_to_ns(t)
        if kind == "grip":
            mean, lower, upper, rows = payload
            msgs.append((f"{prefix}/grip/{key}", "geometry_msgs/msg/Vector3Stamped",
                         bags.vector3_stamped(T, t, key, mean, lower, upper), ns))
            msgs.append((f"{prefix}/grip_curve/{key}", "std_msgs/msg/Float64MultiArray",
                         bags.float64_multiarray(T, rows, ("slip,q05,q50,q95", "slip_grid")), ns))
        else:
            msgs.append((MODEL_PARAMETERS_TOPIC, "diagnostic_msgs/msg/DiagnosticArray",
                         bags.diagnostic_array(T, t, payload), ns))
    prefix = output_prefix(result.params.get(GRIP_NODE, {}))
    for scope, series in result.grip.items():
        f = series.in_force
        for i in range(f["t"].size if f else 0):
            t, ns = float(f["t"][i]), bags.sec_to_ns(float(f["t"][i]))
            msgs.append((f"{prefix}/grip_in_force/{scope}", "geometry_msgs/msg/Vector3Stamped",
                         bags.vector3_stamped(T, t, scope, float(f["mean"][i]), float(f["lower"][i]),
                                              float(f["upper"][i])), ns))
            truth = float(f["truth"][i])
            if math.isfinite(truth):
                msgs.append((f"{prefix}/grip_truth/{scope}", "geometry_msgs/msg/Vector3Stamped",
                             bags.vector3_stamped(T, t, scope, truth, truth, truth), ns))
    return msgs


def record_outputs(result: ReplayResult, out_path: str | os.PathLike, storage: str = "mcap") -> dict[str, int]:
    """Write the estimator outputs of ``result`` to a new bag at ``out_path`` (written beside it under a temporary
    name and renamed at the end; an existing ``out_path`` is refused). Returns messages per topic."""
    import shutil
    import tempfile

    out = Path(out_path)
    if storage not in bags.STORAGES:
        raise InputError(f"storage {storage!r} is not one of {', '.join(bags.STORAGES)}")
    if out.exists():
        raise InputError(f"{out}: already exists; refusing to overwrite")
    parent = out.parent if str(out.parent) else Path(".")
    if not parent.is_dir():
        raise InputError(f"{out}: the parent directory {parent} does not exist")
    tmp_root = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".partial", dir=parent))
    try:
        tmp = tmp_root / out.name
        counts = bags.write_topic_messages(tmp, output_messages(result), storage=storage)
        if out.exists():
            raise InputError(f"{out}: appeared while writing; refusing to overwrite")
        os.replace(tmp, out)
        return counts
    finally:
        shutil.rmtree(tmp_root, ignore_errors=True)
