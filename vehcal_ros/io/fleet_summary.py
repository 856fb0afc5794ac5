"""The fleet summary of ``vehcal batch --fleet``: per vehicle, the calibrated parameters over its drives and a
drift flag where consecutive drives disagree beyond their uncertainty.

Input per vehicle: its state file's ``history`` (io/calibration_state.py: one entry per drive, oldest first, each
stage ``fitted``, ``confirmed`` or ``carried`` with its parameters' posterior mean, sd and HDI). Output per vehicle::

    drives: [{drive, date, t_start, stages: {stage: status}}, ...]
    parameters:
      Cxf:                                       # one series per calibrated parameter, one row per drive
        - {drive, status, mean, std, lower, upper, drift_score, drift}
    drift_flags: [{kind, stage, parameter, drive, previous_drive, score, ...}]

``lower``/``upper`` are a 90 % interval, mean -+ 1.645 sd (the normal approximation of the posterior; the
state keeps mean and sd). ``drift`` compares a drive's *fitted* estimate with the previous estimate of that
parameter (of any status): ``|m_i - m_prev| > z * sqrt(s_i^2 + s_prev^2 + tau^2 + s_drift^2)``, ``tau^2`` the
spread between windows that the checks of the drives before it show (``carry_forward.window_spread`` of their
``check`` ``windows``), ``s_drift`` the drift model's allowance over the data time between them and z =
``carry_forward.DRIFT_Z`` (3.0)
(:func:`vehcal_ros.estimation.calibration.carry_forward.drift_flag`); a confirmed or carried row repeats the earlier
estimate and is never flagged by it (flags of ``kind`` ``fit``, with ``mean`` and ``previous_mean``).

The free-rolling radius (``kind`` ``radius``, ``stage`` ``free_rolling``, ``parameter`` ``rolling_radius``): each
drive that measured it (the history entry's ``rolling_radius``) adds a row to the ``rolling_radius`` series
(``status`` ``measured``, m) and is compared with the previous drive that measured it,
:func:`vehcal_ros.estimation.calibration.carry_forward.radius_flag`. The radius falls with the wheel load, so this
flag is the one that sees a load change the calibrated stiffnesses absorb (the 8-DOF runs at the description's mass).

A flag without an accepted fit (``kind`` ``check``, per stage, ``parameter`` None): the stage kept the model
carried into the drive (no refit accepted), yet its windows were checked against that model
(estimation/calibration/recalibration_check.py: the Mahalanobis distance of each window's best fit from the carried
posterior, a two-sample Wald test) at least ``CHECK_MIN_WINDOWS`` (2) times and the median of those shifts exceeds
the check's threshold (``confirm_max_shift``, 3.5): most of the drive's data disagree with the carried model, and
every refit of them was refused, so no fitted row exists to compare. ``score`` is that median shift,
``n_windows`` the windows checked. A single inconsistent window is not enough: per window the check's false-alarm
rate is 0.05-3.2 % nominally (by stage) and higher with model-form error (a second drive of an unchanged test
vehicle gave 4.05 for rr, then a refit that moved rr within its uncertainty).

Extra per-vehicle sections: :func:`fleet_summary` takes ``sections`` = {name: fn(vehicle_id, drive documents) ->
JSON-able}; each is added to every vehicle's entry under ``name`` (e.g. a grip map from the replays' JSON).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from vehcal_ros.estimation.calibration.carry_forward import (
    DEFAULT_DRIFT,
    DRIFT_Z,
    DriftModel,
    drift_flag,
    radius_flag,
    window_spread,
)
from vehcal_ros.io.calibration_state import windows_of

Z90 = 1.6448536269514722
"""z of a two-sided 90 % normal interval."""

RADIUS_STAGE = "free_rolling"
"""the ``stage`` of the free-rolling radius's rows and flags (not a calibration stage: a measurement)."""

CHECK_MIN_WINDOWS = 2
"""A ``check`` flag needs at least this many windows of the drive checked against the carried model."""

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


def _row(drive: str, stage: str, status: Any, m: float, s: float) -> dict[str, Any]:
    """One drive's row of a parameter series: mean, sd and 90 % interval, not yet compared (module docstring)."""
    return {"drive": drive, "stage": stage, "status": status, "mean": _json_float(m), "std": _json_float(s),
            "lower": _json_float(m - Z90 * s), "upper": _json_float(m + Z90 * s), "drift_score": None,
            "drift": False}


def vehicle_summary(history: Sequence[Mapping[str, Any]], drift: DriftModel = DEFAULT_DRIFT,
                    z: float = DRIFT_Z) -> dict[str, Any]:
    """The summary of one vehicle from its state history (module docstring)."""
    drives = []
    series: dict[str, list[dict[str, Any]]] = {}
    flags = []
    prev: dict[str, tuple[float, float, float, str]] = {}   # parameter -> (mean, sd, data time, drive)
    windows: dict[str, list[dict[str, Any]]] = {}            # stage -> checked windows of the drives so far
    last_drive = None
    for entry in history:
        name = str(entry.get("drive"))
        stages = entry.get("stages") or {}
        drives.append({"drive": name, "date": entry.get("date"), "t_start": entry.get("t_start"),
                       "stages": {s: b.get("status") for s, b in stages.items()},
                       "checks": {s: b["check"] for s, b in stages.items() if b.get("check")}})
        for stage, body in stages.items():
            status = body.get("status")
            check = body.get("check") or {}
            shift, threshold = _num(check.get("median_shift")), _num(check.get("threshold"))
            if (status != "fitted" and int(check.get("n", 0)) >= CHECK_MIN_WINDOWS and math.isfinite(shift)
                    and math.isfinite(threshold) and shift > threshold):
                flags.append({"kind": "check", "stage": stage, "parameter": None, "drive": name,
                              "previous_drive": last_drive, "score": _json_float(shift),
                              "threshold": _json_float(threshold), "n_windows": int(check.get("n", 0))})
            t_data = _num(body.get("data_time"))
            spread = window_spread(windows.get(stage, ()))
            for par, summ in (body.get("parameters") or {}).items():
                m, s = _num(summ.get("mean")), _num(summ.get("std"))
                row = _row(name, stage, status, m, s)
                before = prev.get(par)
                if status == "fitted" and before is not None:
                    elapsed = t_data - before[2] if math.isfinite(t_data) and math.isfinite(before[2]) else 0.0
                    flag, score = drift_flag(before[0], before[1], m, s, elapsed, drift, z, spread.get(par, 0.0))
                    row["drift_score"], row["drift"] = _json_float(score), bool(flag)
                    if flag:
                        flags.append({"kind": "fit", "stage": stage, "parameter": par, "drive": name,
                                      "previous_drive": before[3],
                                      "score": _json_float(score), "mean": _json_float(m),
                                      "previous_mean": _json_float(before[0])})
                series.setdefault(par, []).append(row)
                if status == "fitted" or before is None:
                    prev[par] = (m, s, t_data, name)
        for stage in stages:
            windows.setdefault(stage, []).extend(windows_of([entry], stage))
        _radius_row(entry, name, prev, series, flags, drift, z)
        last_drive = name
    return {"drives": drives, "parameters": series, "drift_flags": flags, "drift_z": z,
            "drift_model": drift.to_dict()}


def _radius_row(entry: Mapping[str, Any], name: str, prev: dict[str, tuple[float, float, float, str]],
                series: dict[str, list[dict[str, Any]]], flags: list[dict[str, Any]], drift: DriftModel,
                z: float) -> None:
    """The drive's free-rolling radius row and its flag against the previous measured drive (module docstring)."""
    meas = entry.get("rolling_radius") or {}
    r, se = _num(meas.get("mean")), _num(meas.get("std"))
    if not (math.isfinite(r) and math.isfinite(se)):
        return
    row = _row(name, RADIUS_STAGE, "measured", r, se)
    before = prev.get("rolling_radius")
    if before is not None:
        flag, score = radius_flag(before[0], before[1], r, se, drift, z)
        row["drift_score"], row["drift"] = _json_float(score), bool(flag)
        if flag:
            flags.append({"kind": "radius", "stage": RADIUS_STAGE, "parameter": "rolling_radius", "drive": name,
                          "previous_drive": before[3], "score": _json_float(score), "mean": r,
                          "previous_mean": before[0]})
    series.setdefault("rolling_radius", []).append(row)
    prev["rolling_radius"] = (r, se, math.nan, name)


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


__all__ = ["vehicle_summary", "fleet_summary", "Z90", "Section", "RADIUS_STAGE"]
