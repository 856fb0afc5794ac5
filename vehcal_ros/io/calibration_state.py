"""The calibrator's state file: the last accepted result of each stage, kept across restarts.

``model_calibrator`` writes it (atomically: temp file + rename, so a kill -9 leaves the old or the new file, never
half of one) after every accepted fit and on ``~/save``; at start it reads it back and publishes the restored
model at once. JSON by default; a ``.yaml``/``.yml`` path is written as YAML (either is read). Layout::

    format: vehcal_ros/calibration_state
    version: 1
    vehicle_id: truck7
    vehicle: hmmwv                               # the calibrator's vehicle description (when it has one)
    saved_at: 2026-11-24T14:00:00+00:00          # UTC, information only
    stages:
      longitudinal:
        parameters: {Cxf: {mean, std, hdi_low, hdi_high, r_hat, ess_bulk, ess_tail, ...}, ...}
        noise: {u: {...}, ...}                     # per channel sigma summaries (channel units)
        converged: true
        segment: [t0, t1]                          # s, data time of the fitted segment
        score: 1.9                                 # the segment's excitation (segments.Window.score)
        holdout: {segment, rmse_candidate, rmse_replaced, coverage, passed, ...}   # optional: the accepted
                                                   # fit's predictive check (estimation/acceptance.py); files
                                                   # without it (written before the check existed) are read

A file that cannot be used is refused with :class:`StateRefused` naming the reason — not valid JSON/YAML or
truncated, not this format, another version, another ``vehicle_id`` or vehicle description, or a stage entry that
is not a complete posterior summary — and the node then starts from the priors. Nothing here imports rclpy.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from vehcal_ros.estimation.calibration import STAGE_NAMES, CalibrationResult, jsonable
from vehcal_ros.estimation.calibration_pipeline import CalibrationPipeline, write_atomic

FORMAT = "vehcal_ros/calibration_state"
VERSION = 1
SUMMARY_KEYS = ("mean", "std", "hdi_low", "hdi_high", "r_hat", "ess_bulk", "ess_tail")
"""Every summary in a state file has these numbers (the published ones; extra keys are kept)."""


class StateRefused(ValueError):
    """A state file that is not used; ``reason`` says why (also the exception text)."""

    def __init__(self, path: str | os.PathLike, reason: str) -> None:
        super().__init__(f"state file {os.fspath(path)} refused: {reason}")
        self.reason = reason


@dataclass(frozen=True)
class StageState:
    """One stage's last accepted posterior summary."""

    parameters: dict[str, dict[str, float]]
    noise: dict[str, dict[str, float]]
    converged: bool
    segment: tuple[float, float] | None
    score: float
    holdout: dict[str, Any] | None = None
    """the accepted fit's predictive check on its held-back segment (``HoldoutCheck.to_dict``), None if unknown."""

    def to_dict(self) -> dict[str, Any]:
        out = {"parameters": self.parameters, "noise": self.noise, "converged": bool(self.converged),
               "segment": list(self.segment) if self.segment is not None else None, "score": float(self.score)}
        if self.holdout is not None:
            out["holdout"] = jsonable(self.holdout)
        return out


def state_text(path: str | os.PathLike, vehicle_id: str, stages: Mapping[str, StageState],
               now: _dt.datetime | None = None, vehicle: str | None = None) -> str:
    """The file's text (YAML for a .yaml/.yml path, else JSON)."""
    doc = {"format": FORMAT, "version": VERSION, "vehicle_id": vehicle_id,
           "saved_at": (now or _dt.datetime.now(_dt.timezone.utc)).isoformat(timespec="seconds"),
           "stages": {s: st.to_dict() for s, st in stages.items()}}
    if vehicle is not None:
        doc["vehicle"] = str(vehicle)
    if Path(path).suffix.lower() in (".yaml", ".yml"):
        return yaml.safe_dump(doc, sort_keys=False)
    return json.dumps(doc, indent=1, allow_nan=False) + "\n"


def write_state(path: str | os.PathLike, vehicle_id: str, stages: Mapping[str, StageState],
                vehicle: str | None = None) -> None:
    """Write the state atomically (``write_atomic``: temp file in the same folder, then rename)."""
    write_atomic(path, state_text(path, vehicle_id, stages, vehicle=vehicle))


def read_state(path: str | os.PathLike, vehicle_id: str, vehicle: str | None = None) -> dict[str, StageState]:
    """The stages of the state file at ``path`` for ``vehicle_id`` (and, when both the file and the caller name
    one, the vehicle description); FileNotFoundError if there is none, :class:`StateRefused` (with the reason) if
    it cannot be used."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise StateRefused(path, "corrupt: not a text file") from None
    try:
        doc = yaml.safe_load(text)  # JSON is YAML: either format reads here
    except yaml.YAMLError as exc:
        raise StateRefused(path, f"corrupt or truncated: not valid JSON/YAML ({str(exc).splitlines()[0]})") \
            from None
    if not isinstance(doc, dict):
        raise StateRefused(path, "corrupt or truncated: expected a mapping with format, version, vehicle_id, stages")
    if doc.get("format") != FORMAT:
        raise StateRefused(path, f"not a {FORMAT} file (format: {doc.get('format')!r})")
    if doc.get("version") != VERSION:
        raise StateRefused(path, f"incompatible version {doc.get('version')!r} (this build reads version {VERSION})")
    if str(doc.get("vehicle_id")) != vehicle_id:
        raise StateRefused(path, f"written for vehicle_id {doc.get('vehicle_id')!r}, this node is {vehicle_id!r}")
    if vehicle is not None and doc.get("vehicle") is not None and str(doc["vehicle"]) != str(vehicle):
        raise StateRefused(path, f"written for vehicle description {doc['vehicle']!r}, this node uses {vehicle!r}")
    stages = doc.get("stages")
    if not isinstance(stages, dict):
        raise StateRefused(path, "corrupt or truncated: 'stages' is not a mapping")
    return {stage: _stage(path, stage, body) for stage, body in stages.items()}


def _stage(path: Path, stage: Any, body: Any) -> StageState:
    if stage not in STAGE_NAMES:
        raise StateRefused(path, f"unknown stage {stage!r} (known: {', '.join(STAGE_NAMES)})")
    if not isinstance(body, dict):
        raise StateRefused(path, f"stage {stage}: expected a mapping")
    groups = {}
    for group in ("parameters", "noise"):
        entries = body.get(group)
        if not isinstance(entries, dict) or (group == "parameters" and not entries):
            raise StateRefused(path, f"stage {stage}: '{group}' missing or empty")
        for name, summ in entries.items():
            bad = [k for k in SUMMARY_KEYS if not isinstance(summ, dict) or not _finite(summ.get(k))]
            if bad:
                raise StateRefused(path, f"stage {stage}: {group}.{name}: {', '.join(bad)} missing or not finite")
        groups[group] = {str(n): {k: float(v) for k, v in s.items() if _finite(v)} for n, s in entries.items()}
    seg = body.get("segment")
    if seg is not None and not (isinstance(seg, list) and len(seg) == 2 and all(_finite(x) for x in seg)):
        raise StateRefused(path, f"stage {stage}: 'segment' must be [t0, t1] or null")
    score = body.get("score", 0.0)
    if not _finite(score):
        raise StateRefused(path, f"stage {stage}: 'score' must be a finite number")
    holdout = body.get("holdout")
    if holdout is not None and not isinstance(holdout, dict):
        raise StateRefused(path, f"stage {stage}: 'holdout' must be a mapping or absent")
    return StageState(groups["parameters"], groups["noise"], bool(body.get("converged", True)),
                      (float(seg[0]), float(seg[1])) if seg is not None else None, float(score), holdout)


def stages_from(pipeline: CalibrationPipeline) -> dict[str, StageState]:
    """The accepted result of every stage that has one, as saved."""
    out = {}
    for stage, st in pipeline.status.items():
        res = st.result
        if res is not None:
            out[stage] = StageState({k: dict(v) for k, v in res.parameters.items()},
                                    {k: dict(v) for k, v in res.noise.items()}, bool(res.converged),
                                    st.result_segment, float(st.result_score),
                                    getattr(st, "result_holdout", None))
    return out


def restore_into(pipeline: CalibrationPipeline, stages: Mapping[str, StageState], note: str) -> list[str]:
    """Give the pipeline the saved results of its configured stages; return the stages restored (in order)."""
    done = []
    for stage in pipeline.config.stages:
        saved = stages.get(stage)
        if saved is None:
            continue
        names = (*saved.parameters, *(f"sigma_{ch}" for ch in saved.noise))
        result = CalibrationResult(stage=stage, parameters=saved.parameters, noise=saved.noise,
                                   converged=saved.converged, elapsed_s=0.0, log_evidence=math.nan, n_stages=0,
                                   names=tuple(names), draws=np.empty((0, 0, len(names))))
        pipeline.restore(stage, result, saved.segment, saved.score, note=note, holdout=saved.holdout)
        done.append(stage)
    return done


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


__all__ = ["FORMAT", "VERSION", "StageState", "StateRefused", "read_state", "write_state", "state_text",
           "stages_from", "restore_into"]
