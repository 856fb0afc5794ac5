"""Read earlier calibration results back as 8-DOF parameter values (``vehcal calibrate --model FILE``).

The paper calibrates stage by stage, each stage holding the earlier stages' results fixed (Section 3). Across
files that needs the earlier result as input; two formats are accepted:

* a ``vehcal calibrate --json`` result: the values it held fixed (``fixed``) overridden by its posterior means
  (``parameters.<name>.mean``; for ``--stage all`` the merged ``parameters``), so a chain of files carries every
  earlier stage forward;
* a params YAML the calibrator wrote (``<node>: ros__parameters: model: {cxf: ..., bphi: ...}``, or a bare
  ``model:`` mapping); names are case-insensitive.

``bphi`` (total roll damping) becomes ``bphi_f = bphi_r = bphi / 2``. A missing file, an unknown parameter or a
non-finite value is one :class:`~vehcal_ros.errors.InputError` line naming the file and the entry.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from vehcal_ros.errors import InputError
from vehcal_ros.models.vehicle_8dof import PARAM_NAMES

_BY_LOWER = {n.lower(): n for n in (*PARAM_NAMES, "bphi")}


def load_model_file(path: str | os.PathLike) -> dict[str, float]:
    """8-DOF parameter values (``PARAM_NAMES``) from a calibrate JSON result or a calibrator params YAML."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"--model {p}: no such file")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise InputError(f"--model {p}: not a text file") from None
    if p.suffix.lower() == ".json" or text.lstrip().startswith("{"):
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputError(f"--model {p}: not valid JSON ({exc.msg}, line {exc.lineno})") from None
        return _from_result(doc, str(p))
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise InputError(f"--model {p}: not valid YAML ({str(exc).splitlines()[0]})") from None
    return _from_params(doc, str(p))


def _from_result(doc: Any, where: str) -> dict[str, float]:
    if not isinstance(doc, Mapping) or not isinstance(doc.get("parameters"), Mapping):
        raise InputError(f"--model {where}: expected a 'vehcal calibrate --json' result with 'parameters'")
    values: dict[str, Any] = {}
    stages = doc.get("stages") if isinstance(doc.get("stages"), Mapping) else {"": doc}
    for st in stages.values():   # held-fixed values of every stage first, then all posterior means
        if isinstance(st, Mapping) and isinstance(st.get("fixed"), Mapping):
            values.update(st["fixed"])
    for name, summ in doc["parameters"].items():
        if not isinstance(summ, Mapping) or "mean" not in summ:
            raise InputError(f"--model {where}: parameters.{name}: expected a summary with 'mean'")
        values[name] = summ["mean"]
    return _checked(values, where)


def _from_params(doc: Any, where: str) -> dict[str, float]:
    model = None
    if isinstance(doc, Mapping):
        if isinstance(doc.get("model"), Mapping):
            model = doc["model"]
        else:
            for body in doc.values():
                if isinstance(body, Mapping) and isinstance(body.get("ros__parameters"), Mapping) and \
                        isinstance(body["ros__parameters"].get("model"), Mapping):
                    model = body["ros__parameters"]["model"]
                    break
    if model is None:
        raise InputError(f"--model {where}: expected a params YAML with '<node>: ros__parameters: model: {{...}}' "
                         "or a 'vehcal calibrate --json' result")
    return _checked(model, where)


def _checked(values: Mapping[str, Any], where: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, v in values.items():
        key = _BY_LOWER.get(str(name).lower())
        if key is None:
            raise InputError(f"--model {where}: unknown parameter '{name}'; known: {', '.join(_BY_LOWER.values())}")
        try:
            x = float(v)
        except (TypeError, ValueError):
            x = math.nan
        if not math.isfinite(x):
            raise InputError(f"--model {where}: {name} = {v!r}: expected a finite number")
        if key == "bphi":
            out["bphi_f"] = out["bphi_r"] = 0.5 * x
        else:
            out[key] = x
    if not out:
        raise InputError(f"--model {where}: no parameter values")
    return out


def calibrated_names(path: str | os.PathLike) -> set[str]:
    """Names of the 8-DOF parameters a ``--model`` file's chain has calibrated (not merely held fixed).

    A ``vehcal calibrate --json`` result lists them in ``calibrated`` (this stage's parameters and, through
    ``--model``, every earlier stage's); an older result without it gives its own posterior's names. A params
    YAML the calibrator wrote counts as calibrated throughout. ``bphi`` also names ``bphi_f`` and ``bphi_r``.
    """
    p = Path(path)
    text = p.read_text(encoding="utf-8")
    if p.suffix.lower() == ".json" or text.lstrip().startswith("{"):
        doc = json.loads(text)
        names = doc.get("calibrated") if isinstance(doc, Mapping) else None
        if not isinstance(names, list):
            names = list(doc.get("parameters", {})) if isinstance(doc, Mapping) else []
    else:
        names = list(load_model_file(p))
    out = {_BY_LOWER.get(str(n).lower(), str(n)) for n in names}
    if "bphi" in out:
        out |= {"bphi_f", "bphi_r"}
    return out


__all__ = ["calibrated_names", "load_model_file"]
