"""The calibrator's state file: the last accepted result of each stage and the history of accepted results per
drive, kept across restarts and shared by the live ``model_calibrator`` and ``vehcal batch --fleet``.

``model_calibrator`` writes it (atomically: temp file + rename, so a kill -9 leaves the old or the new file, never
half of one) after every accepted fit and on ``~/save``; at start it reads it back, publishes the restored model at
once and carries each stage forward (:func:`restore_into`: the stage's priors become the accepted posterior
widened by the drift model of :mod:`vehcal_ros.estimation.calibration.carry_forward`); :class:`StateFile` keeps
the file's side of such a run. ``vehcal batch --fleet`` and ``vehcal replay --state`` do the same around each
replayed bag of a vehicle. JSON by default; a ``.yaml``/``.yml`` path is written as YAML (either is read). Layout
(version 2)::

    format: vehcal_ros/calibration_state
    version: 2
    vehicle_id: truck7
    vehicle: hmmwv                               # the calibrator's vehicle description (when it has one)
    saved_at: 2026-11-24T14:00:00+00:00          # UTC, information only
    stages:
      longitudinal:
        parameters: {Cxf: {mean, std, hdi_low, hdi_high, r_hat, ess_bulk, ess_tail, ...}, ...}
        noise: {u: {...}, ...}                     # per channel sigma summaries (channel units)
        correlation: {Cxf: {Cxf: 1.0, Cxr: 0.3}, ...}   # optional: the parameters' posterior correlations
        converged: true
        segment: [t0, t1]                          # s, data time of the fitted segment
        score: 1.9                                 # the segment's excitation (segments.Window.score)
        holdout: {segment, rmse_candidate, rmse_replaced, coverage, passed, ...}   # optional: the accepted
                                                   # fit's predictive check (estimation/calibration/acceptance.py)
        data_time: 1732802400.0                    # s, stamp clock: the end of its newest data, the fitted segment
                                                   # or a confirming window (the drift model's elapsed time
                                                   # starts here)
        data_date: 2024-11-28T14:00:00+00:00       # UTC date of data_time when the stamps are Unix time, else null
        drive: truck7_2024-11-28                   # the drive (bag stem, or "live <start>") that fitted or
                                                   # last updated it
    history:                                       # one entry per drive, oldest first
      - drive: truck7_2024-11-28
        t_start: 1732802000.0                      # s, stamp clock: the drive's first and last record
        t_end: 1732802900.0
        date: 2024-11-28T13:53:20+00:00            # UTC date of t_start (null when not Unix time)
        stages:
          longitudinal:
            status: fitted                         # fitted (a new accepted fit this drive) | confirmed (windows
                                                   # of this drive confirmed the earlier result without a fit and
                                                   # were added to it: recalibration_check.updated_result) |
                                                   # carried (no new fit; the earlier drive's result stands)
            data_time: 1732802400.0
            parameters: {Cxf: {mean, std, hdi_low, hdi_high}, ...}
            check: {n, median_shift, max_shift, threshold, windows}   # optional: the drive's windows checked
                                                   # against the carried result (recalibration_check.py); windows:
                                                   # per window {Cxf: [d, v], ...}, its best fit's deviation and
                                                   # the variance expected without spread (carry_forward.py)
        rolling_radius: {mean: 0.4652, std: 1.3e-05, seconds: 54.0}   # m: the free-rolling radius the drive
                                                   # showed (segments.free_rolling_radius; absent: not measured)

Version 1 (the same without ``data_time``, ``data_date``, ``drive`` and ``history``) is migrated on read: a stage's
``data_time`` becomes its segment's end, and the history starts empty; the next write is version 2.

A file that cannot be used is refused with :class:`StateRefused` naming the reason — not valid JSON/YAML or
truncated, not this format, a version other than 1 or 2, another ``vehicle_id`` or vehicle description, a stage
entry that is not a complete posterior summary, or a history that is not a list of drive entries — and the node
then starts from the priors. Nothing here imports rclpy.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
from collections.abc import Callable, Collection, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from vehcal_ros.atomic_files import remove_stale_temps, write_atomic
from vehcal_ros.estimation.calibration.carry_forward import DEFAULT_DRIFT, DriftModel, window_spread
from vehcal_ros.estimation.calibration.fit import STAGE_NAMES, CalibrationResult
from vehcal_ros.estimation.calibration.pipeline import CalibrationPipeline
from vehcal_ros.estimation.calibration.recalibration_check import correlation_of, posterior_moments
from vehcal_ros.json_values import jsonable

FORMAT = "vehcal_ros/calibration_state"
VERSION = 2
READABLE_VERSIONS = (1, 2)
"""versions :func:`read_state_document` reads (1 is migrated)."""
UNIX_TIME_MIN = 1e8
"""s: stamps at or above this (1973-03-03) are taken as Unix time and given a date; below (a simulator clock from
0), ``data_date`` and ``date`` are null."""
HISTORY_KEYS = ("mean", "std", "hdi_low", "hdi_high")
"""the posterior numbers kept per parameter in a history entry."""
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
    data_time: float | None = None
    """s, stamp clock: the end of the fitted segment (None: unknown; the segment's end is used when there is one)."""
    drive: str | None = None
    """the drive that fitted it (bag stem or ``live <start>``), None if unknown."""
    correlation: dict[str, dict[str, float]] | None = None
    """parameter -> parameter -> posterior correlation (None: unknown, restored as independent)."""

    def __post_init__(self) -> None:
        if self.data_time is None and self.segment is not None:   # version 1: the segment's end
            object.__setattr__(self, "data_time", float(self.segment[1]))

    @property
    def time_of_data(self) -> float | None:
        """``data_time`` [s] (the segment's end when not given), None if unknown."""
        return float(self.data_time) if self.data_time is not None else None

    def to_dict(self) -> dict[str, Any]:
        out = {"parameters": self.parameters, "noise": self.noise, "converged": bool(self.converged),
               "segment": list(self.segment) if self.segment is not None else None, "score": float(self.score)}
        if self.holdout is not None:
            out["holdout"] = jsonable(self.holdout)
        t = self.time_of_data
        out["data_time"] = t
        out["data_date"] = date_of(t)
        out["drive"] = self.drive
        if self.correlation is not None:
            out["correlation"] = jsonable(self.correlation)
        return out


@dataclass(frozen=True)
class StateDocument:
    """A state file read back: its stages, its history of drives (oldest first) and the version it had."""

    stages: dict[str, StageState]
    history: list[dict[str, Any]]
    version_read: int


def date_of(t: float | None) -> str | None:
    """ISO-8601 UTC date of a stamp ``t`` [s] when it is Unix time (>= :data:`UNIX_TIME_MIN`), else None."""
    if t is None or not math.isfinite(t) or t < UNIX_TIME_MIN:
        return None
    return _dt.datetime.fromtimestamp(float(t), _dt.timezone.utc).isoformat(timespec="seconds")


def state_text(path: str | os.PathLike, vehicle_id: str, stages: Mapping[str, StageState],
               now: _dt.datetime | None = None, vehicle: str | None = None,
               history: list[dict[str, Any]] | None = None) -> str:
    """The file's text, version 2 (YAML for a .yaml/.yml path, else JSON)."""
    doc = {"format": FORMAT, "version": VERSION, "vehicle_id": vehicle_id,
           "saved_at": (now or _dt.datetime.now(_dt.timezone.utc)).isoformat(timespec="seconds"),
           "stages": {s: st.to_dict() for s, st in stages.items()}}
    if vehicle is not None:
        doc["vehicle"] = str(vehicle)
    doc["history"] = jsonable(list(history or []))
    if Path(path).suffix.lower() in (".yaml", ".yml"):
        return yaml.safe_dump(doc, sort_keys=False)
    return json.dumps(doc, indent=1, allow_nan=False) + "\n"


def write_state(path: str | os.PathLike, vehicle_id: str, stages: Mapping[str, StageState],
                vehicle: str | None = None, history: list[dict[str, Any]] | None = None) -> None:
    """Write the state atomically (``write_atomic``: temp file in the same folder, then rename)."""
    write_atomic(path, state_text(path, vehicle_id, stages, vehicle=vehicle, history=history))


def read_state(path: str | os.PathLike, vehicle_id: str, vehicle: str | None = None) -> dict[str, StageState]:
    """The stages of the state file at ``path`` (:func:`read_state_document`)."""
    return read_state_document(path, vehicle_id, vehicle).stages


def read_state_document(path: str | os.PathLike, vehicle_id: str, vehicle: str | None = None) -> StateDocument:
    """The state file at ``path`` for ``vehicle_id`` (and, when both the file and the caller name one, the vehicle
    description), version 1 migrated; FileNotFoundError if there is none, :class:`StateRefused` (with the reason)
    if it cannot be used."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise StateRefused(path, "corrupt: not a text file") from None
    return parse_state(text, path, vehicle_id, vehicle)


def parse_state(text: str, path: str | os.PathLike, vehicle_id: str, vehicle: str | None = None) -> StateDocument:
    """:func:`read_state_document` of a file's ``text`` (``path`` names it in a refusal)."""
    path = Path(path)
    try:
        doc = yaml.safe_load(text)  # JSON is YAML: either format reads here
    except yaml.YAMLError as exc:
        raise StateRefused(path, f"corrupt or truncated: not valid JSON/YAML ({str(exc).splitlines()[0]})") \
            from None
    if not isinstance(doc, dict):
        raise StateRefused(path, "corrupt or truncated: expected a mapping with format, version, vehicle_id, stages")
    if doc.get("format") != FORMAT:
        raise StateRefused(path, f"not a {FORMAT} file (format: {doc.get('format')!r})")
    version = doc.get("version")
    if version not in READABLE_VERSIONS or isinstance(version, bool):
        raise StateRefused(path, f"incompatible version {version!r} (this build reads versions "
                                 f"{', '.join(map(str, READABLE_VERSIONS))})")
    if str(doc.get("vehicle_id")) != vehicle_id:
        raise StateRefused(path, f"written for vehicle_id {doc.get('vehicle_id')!r}, this node is {vehicle_id!r}")
    if vehicle is not None and doc.get("vehicle") is not None and str(doc["vehicle"]) != str(vehicle):
        raise StateRefused(path, f"written for vehicle description {doc['vehicle']!r}, this node uses {vehicle!r}")
    stages = doc.get("stages")
    if not isinstance(stages, dict):
        raise StateRefused(path, "corrupt or truncated: 'stages' is not a mapping")
    history = doc.get("history", []) if version == 2 else []
    if not isinstance(history, list) or not all(isinstance(h, dict) and isinstance(h.get("drive"), str)
                                                and isinstance(h.get("stages", {}), dict) for h in history):
        raise StateRefused(path, "'history' must be a list of drive entries (each with a 'drive' name and "
                                 "'stages')")
    return StateDocument({stage: _stage(path, stage, body) for stage, body in stages.items()}, history,
                         int(version))


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
    data_time = body.get("data_time")
    if data_time is not None and not _finite(data_time):
        raise StateRefused(path, f"stage {stage}: 'data_time' must be a finite number or null")
    drive = body.get("drive")
    corr = body.get("correlation")
    names = set(groups["parameters"])
    if corr is not None and not (isinstance(corr, dict) and set(corr) <= names and all(
            isinstance(row, dict) and set(row) <= names and all(_finite(r) and -1.0 <= r <= 1.0 for r in row.values())
            for row in corr.values())):
        raise StateRefused(path, f"stage {stage}: 'correlation' must map parameters to parameters to numbers in "
                                 "[-1, 1], or be absent")
    return StageState(groups["parameters"], groups["noise"], bool(body.get("converged", True)),
                      (float(seg[0]), float(seg[1])) if seg is not None else None, float(score), holdout,
                      float(data_time) if data_time is not None else None,
                      str(drive) if drive is not None else None,
                      {str(a): {str(b): float(r) for b, r in row.items()} for a, row in corr.items()}
                      if corr is not None else None)


def stages_from(pipeline: CalibrationPipeline, drive: str | None = None,
                previous: Mapping[str, StageState] | None = None) -> dict[str, StageState]:
    """The accepted result of every stage that has one, as saved. ``drive`` names the drive a result accepted or
    updated (a confirming window's information added, recalibration_check.updated_result) since ``previous`` (the
    stages the pipeline was started from) came from, and its ``data_time`` is the end of the newest data in it (the
    fitted segment or the newest confirming window); a result carried over unchanged keeps its ``previous``
    entry's ``data_time`` and ``drive``."""
    out = {}
    for stage, st in pipeline.status.items():
        res = st.result
        if res is None:
            continue
        before = (previous or {}).get(stage)
        if before is not None and _same(before, st.result_segment, res):
            out[stage] = before
            continue
        seg = st.result_segment
        ends = [float(w[1]) for w in (seg, st.last_confirmed) if w is not None]
        out[stage] = StageState({k: dict(v) for k, v in res.parameters.items()},
                                {k: dict(v) for k, v in res.noise.items()}, bool(res.converged),
                                seg, float(st.result_score), getattr(st, "result_holdout", None),
                                max(ends) if ends else None, drive, _correlation(res))
    return out


def _correlation(result: CalibrationResult) -> dict[str, dict[str, float]] | None:
    """The posterior correlations of ``result``'s parameters (None: its summaries do not give them)."""
    names = list(result.parameters)
    try:
        _, cov, _ = posterior_moments(result, names)
    except (KeyError, ValueError, TypeError):
        return None
    return correlation_of(cov, names) if np.all(np.isfinite(cov)) else None


def _same(before: StageState, segment: tuple[float, float] | None, result: CalibrationResult) -> bool:
    """The pipeline's accepted result is still the one restored from ``before``."""
    seg = tuple(before.segment) if before.segment is not None else None
    return seg == (tuple(segment) if segment is not None else None) and all(
        before.parameters.get(k, {}).get("mean") == v.get("mean") for k, v in result.parameters.items())


def windows_of(history: Sequence[Mapping[str, Any]], stage: str) -> list[dict[str, Any]]:
    """The checked windows' deviations (``{parameter: [d, v]}``) of ``stage`` in every drive of ``history``, oldest
    first (a check without ``windows``, from an older file: none)."""
    out = []
    for entry in history:
        check = ((entry.get("stages") or {}).get(stage) or {}).get("check") or {}
        out.extend(w for w in check.get("windows") or () if isinstance(w, Mapping))
    return out


def restore_into(pipeline: CalibrationPipeline, stages: Mapping[str, StageState], note: str,
                 drift: DriftModel | None = DEFAULT_DRIFT,
                 history: Sequence[Mapping[str, Any]] = ()) -> list[str]:
    """Give the pipeline the saved results of its configured stages, each carried forward (its priors the saved
    posterior widened by ``drift`` for the data time since ``data_time``, and by the spread between windows that
    the checked windows of ``history`` show, carry_forward.window_spread: ``CalibrationPipeline.carry_forward``;
    None: restored only, priors unchanged); return the stages restored (in order)."""
    done = []
    for stage in pipeline.config.stages:
        saved = stages.get(stage)
        if saved is None:
            continue
        names = (*saved.parameters, *(f"sigma_{ch}" for ch in saved.noise))
        result = CalibrationResult(stage=stage, parameters=saved.parameters, noise=saved.noise,
                                   converged=saved.converged, elapsed_s=0.0, log_evidence=math.nan, n_stages=0,
                                   names=tuple(names), draws=np.empty((0, 0, len(names))),
                                   correlation=dict(saved.correlation or {}))
        pipeline.carry_forward(stage, result, saved.segment, saved.score, data_time=saved.time_of_data,
                               drift=drift, note=note, holdout=saved.holdout,
                               spread=window_spread(windows_of(history, stage)))
        done.append(stage)
    return done


def drive_entry(drive: str, t_start: float, t_end: float, before: Mapping[str, StageState],
                after: Mapping[str, StageState], confirmed: Collection[str] = (),
                checks: Mapping[str, tuple[Sequence[float], float, Sequence[Mapping]]] | None = None,
                rolling_radius: Mapping[str, float] | None = None,
                refitted: Collection[str] | None = None) -> dict[str, Any]:
    """The history entry of one drive (module docstring): every stage with a result after it, ``fitted`` when a
    new fit was accepted during the drive (the stage is in ``refitted``; None: the result changed), else
    ``confirmed`` when the stage is in ``confirmed`` (windows of the drive confirmed the carried model without a
    fit, and their information was added to it), else ``carried``. ``checks``: stage -> (the recalibration-check
    shifts of the drive's windows against the carried result, their threshold, their deviations
    ``{parameter: (d, v)}``), kept as the stage's ``check`` (``n``, ``median_shift``, ``max_shift``,
    ``threshold``, ``windows``) when there is at least one. ``rolling_radius``: the
    drive's free-rolling radius measurement (``radius``, ``se``, ``seconds``, m and s), kept as ``mean``, ``std``,
    ``seconds``."""
    stages = {}
    for stage, st in after.items():
        prev = before.get(stage)
        fitted = prev is None or (stage in refitted if refitted is not None else prev.to_dict() != st.to_dict())
        status = "fitted" if fitted else "confirmed" if stage in confirmed else "carried"
        stages[stage] = {"status": status, "data_time": st.time_of_data,
                         "parameters": {n: {k: float(v[k]) for k in HISTORY_KEYS if k in v}
                                        for n, v in st.parameters.items()}}
        shifts, threshold, deviations = (checks or {}).get(stage, ((), math.nan, ()))
        if len(shifts) and prev is not None:
            stages[stage]["check"] = {"n": len(shifts), "median_shift": float(np.median(shifts)),
                                      "max_shift": float(np.max(shifts)), "threshold": float(threshold),
                                      "windows": [{n: [float(d), float(v)] for n, (d, v) in w.items()}
                                                  for w in deviations]}
    t0 = float(t_start) if math.isfinite(t_start) else None
    entry = {"drive": drive, "t_start": t0, "t_end": float(t_end) if math.isfinite(t_end) else None,
             "date": date_of(t0), "stages": stages}
    if rolling_radius is not None:
        entry["rolling_radius"] = {"mean": float(rolling_radius["radius"]), "std": float(rolling_radius["se"]),
                                   "seconds": float(rolling_radius["seconds"])}
    return entry


def pipeline_drive_entry(pipeline: CalibrationPipeline, drive: str, before: Mapping[str, StageState],
                         after: Mapping[str, StageState]) -> dict[str, Any]:
    """:func:`drive_entry` of the drive ``pipeline`` has seen (its data span; the live calibrator's save and a
    replay with a state file build it here, so both write one history): the stages it confirmed, the checks
    against the carried results and its free-rolling radius."""
    t0, t1 = pipeline.data_span
    confirmed = [s for s, st in pipeline.status.items() if st.n_confirmed > 0]
    checks = {s: (list(st.carried_shifts), st.check_threshold, list(st.carried_deviations))
              for s, st in pipeline.status.items()}
    refitted = [s for s, st in pipeline.status.items() if st.result is not None and not st.result_restored]
    return drive_entry(drive, t0, t1, before, after, confirmed, checks, pipeline.rolling_radius_report(), refitted)


def with_entry(history: list[dict[str, Any]], entry: dict[str, Any]) -> list[dict[str, Any]]:
    """``history`` with ``entry`` replacing the entry of the same drive, else appended (order kept)."""
    out = [h for h in history if h.get("drive") != entry["drive"]]
    return out + [entry]


def live_drive() -> str:
    """The history's name of a live run starting now: ``live <UTC start time>``."""
    return "live " + _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


@dataclass
class StateFile:
    """The state file of one live calibrator run: read back into the pipeline at start (:meth:`restore`),
    rewritten with the run's drive entry after each accepted fit and on ``~/save`` (:meth:`save`), emptied by
    ``~/reset`` (:meth:`start_over`). An empty ``path`` keeps no file."""

    path: str
    vehicle_id: str
    vehicle: str | None = None                  #: the vehicle description the file must have been written for
    drive: str = field(default_factory=live_drive)   #: this run's name in the history
    note: str = ""                              #: what happened to the file at start (shown on /diagnostics)
    refused: str = ""                           #: why the file was refused at start ('' = not refused)
    before: dict[str, StageState] = field(default_factory=dict)   #: the stages restored at start
    history: list[dict[str, Any]] = field(default_factory=list)   #: the file's drives before this run

    def restore(self, pipeline: CalibrationPipeline) -> bool:
        """Read the file back into ``pipeline`` (:func:`restore_into`: each stage carried forward), once the temp
        files of a writer killed mid-write are removed, and say what happened in :attr:`note`: no file yet, the
        stages restored, or (with :attr:`refused`) why a file that cannot be used was refused, the pipeline then
        starting from the priors. Returns True when a file was read."""
        if not self.path:
            return False
        remove_stale_temps(self.path)   # the file itself is whole: write_atomic
        try:
            doc = read_state_document(self.path, self.vehicle_id, vehicle=self.vehicle)
        except FileNotFoundError:
            self.note = f"no state file at {self.path} yet: starting from the priors"
            return False
        except (StateRefused, OSError) as exc:
            self.refused = getattr(exc, "reason", str(exc))
            self.note = f"state file {self.path} refused: {self.refused}; starting from the priors"
            return False
        self.before, self.history = dict(doc.stages), list(doc.history)
        stages = restore_into(pipeline, doc.stages, note=f"restored from {self.path}", history=doc.history)
        self.note = (f"restored {', '.join(stages)} from {self.path}" if stages else
                     f"state file {self.path} holds no accepted stage: starting from the priors")
        return True

    def save(self, current: Callable[[], CalibrationPipeline],
             lock: AbstractContextManager | None = None) -> str | None:
        """Write the accepted results of the pipeline ``current()`` gives (:func:`stages_from`) and the history,
        with this run's drive entry (:func:`pipeline_drive_entry`) once there is a result, atomically
        (:func:`write_state`). ``current`` is called and the pipeline read under ``lock`` (the caller's: a live
        node's ``~/reset`` replaces its pipeline under it); the file is written outside it. Returns the path
        written, None without a path; OSError when the file cannot be written."""
        if not self.path:
            return None
        with lock or nullcontext():
            pipeline = current()
            stages = stages_from(pipeline, self.drive, self.before)
            entry = pipeline_drive_entry(pipeline, self.drive, self.before, stages)
        history = with_entry(self.history, entry) if stages else self.history
        write_state(self.path, self.vehicle_id, stages, vehicle=self.vehicle, history=history)
        return self.path

    def start_over(self, current: Callable[[], CalibrationPipeline],
                   lock: AbstractContextManager | None = None) -> str | None:
        """Drop the restored stages and the file's history, then :meth:`save` (a new pipeline: the file is
        emptied). Returns the path written, None without a path; OSError when the file cannot be written."""
        self.before, self.history = {}, []
        return self.save(current, lock)

    def report_values(self) -> dict[str, str]:
        """What the calibration status shows of the file: ``vehicle_id``, ``state_file`` (its path) and ``state``
        (:attr:`note`)."""
        return {"vehicle_id": self.vehicle_id, "state_file": self.path, "state": self.note}


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


__all__ = ["FORMAT", "VERSION", "READABLE_VERSIONS", "StageState", "StateDocument", "StateRefused", "read_state",
           "read_state_document", "parse_state", "write_state", "state_text", "stages_from", "windows_of",
           "restore_into", "drive_entry", "pipeline_drive_entry", "with_entry", "date_of", "StateFile", "live_drive"]
