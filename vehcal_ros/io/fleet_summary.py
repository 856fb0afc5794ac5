"""The fleet summary of ``vehcal batch --fleet``: per vehicle, the calibrated parameters over its drives and a
drift flag where consecutive drives disagree beyond their uncertainty.

Input per vehicle: its state file's ``history`` (io/calibration_state.py: one entry per drive, oldest first, each
stage ``fitted``, ``confirmed`` or ``carried`` with its parameters' posterior mean, sd and HDI). Output per vehicle::

    drives: [{drive, date, t_start, stages: {stage: status}}, ...]
    parameters:
      Cxf:                                       # one series per calibrated parameter, one row per drive
        - {drive, status, mean, std, lower, upper, drift_score, drift}
    drift_flags: [{parameter, drive, previous_drive, score, mean, previous_mean}]

``lower``/``upper`` are a 90 % interval, mean -+ 1.645 sd (the normal approximation of the posterior; the
state keeps mean and sd). ``drift`` compares a drive's *fitted* estimate with the previous estimate of that
parameter (of any status): ``|m_i - m_prev| > z * sqrt(s_i^2 + s_prev^2 + s_drift^2)``, ``s_drift`` the
drift model's allowance over the data time between them and z = ``carry_forward.DRIFT_Z`` (3.0)
(:func:`vehcal_ros.estimation.carry_forward.drift_flag`); a confirmed or carried row repeats the earlier estimate and is
never flagged.

Extra per-vehicle sections: :func:`fleet_summary` takes ``sections`` = {name: fn(vehicle_id, drive documents) ->
JSON-able}; each is added to every vehicle's entry under ``name`` (e.g. a grip map from the replays' JSON).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from vehcal_ros.estimation.carry_forward import DEFAULT_DRIFT, DRIFT_Z, DriftModel, drift_flag

Z90 = 1.6448536269514722
"""z of a two-sided 90 % normal interval."""

Section = Callable[[str, Sequence[Mapping[str, Any]]], Any]
"""An extra per-vehicle section: fn(vehicle_id, the vehicle's drive documents (replay JSON), oldest first)."""


def _num(x: Any) -> float:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return math.nan
    return v


def _json_float(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def vehicle_summary(history: Sequence[Mapping[str, Any]], drift: DriftModel = DEFAULT_DRIFT,
                    z: float = DRIFT_Z) -> dict[str, Any]:
    """The summary of one vehicle from its state history (module docstring)."""
    drives = []
    series: dict[str, list[dict[str, Any]]] = {}
    flags = []
    prev: dict[str, tuple[float, float, float, str]] = {}   # parameter -> (mean, sd, data time, drive)
    for entry in history:
        name = str(entry.get("drive"))
        stages = entry.get("stages") or {}
        drives.append({"drive": name, "date": entry.get("date"), "t_start": entry.get("t_start"),
                       "stages": {s: b.get("status") for s, b in stages.items()}})
        for stage, body in stages.items():
            status = body.get("status")
            t_data = _num(body.get("data_time"))
            for par, summ in (body.get("parameters") or {}).items():
                m, s = _num(summ.get("mean")), _num(summ.get("std"))
                row: dict[str, Any] = {"drive": name, "stage": stage, "status": status, "mean": _json_float(m),
                                       "std": _json_float(s), "lower": _json_float(m - Z90 * s),
                                       "upper": _json_float(m + Z90 * s), "drift_score": None, "drift": False}
                before = prev.get(par)
                if status == "fitted" and before is not None:
                    elapsed = t_data - before[2] if math.isfinite(t_data) and math.isfinite(before[2]) else 0.0
                    flag, score = drift_flag(before[0], before[1], m, s, elapsed, drift, z)
                    row["drift_score"], row["drift"] = _json_float(score), bool(flag)
                    if flag:
                        flags.append({"parameter": par, "drive": name, "previous_drive": before[3],
                                      "score": _json_float(score), "mean": _json_float(m),
                                      "previous_mean": _json_float(before[0])})
                series.setdefault(par, []).append(row)
                if status == "fitted" or before is None:
                    prev[par] = (m, s, t_data, name)
    return {"drives": drives, "parameters": series, "drift_flags": flags, "drift_z": z,
            "drift_model": drift.to_dict()}


def fleet_summary(histories: Mapping[str, Sequence[Mapping[str, Any]]], drift: DriftModel = DEFAULT_DRIFT,
                  documents: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
                  sections: Mapping[str, Section] | None = None, z: float = DRIFT_Z) -> dict[str, Any]:
    """{vehicle_id: :func:`vehicle_summary` + each extra section}; ``documents``: each vehicle's drive documents
    (the replay JSON of its done drives, oldest first) handed to the ``sections``."""
    out = {}
    for vid, history in histories.items():
        entry = vehicle_summary(history, drift, z)
        for name, fn in (sections or {}).items():
            entry[name] = fn(vid, list((documents or {}).get(vid, ())))
        out[vid] = entry
    return out


__all__ = ["vehicle_summary", "fleet_summary", "Z90", "Section"]
