"""Where the vehicle is: the latest GNSS fix of a record stream, and the grip in force at each place.

:class:`PositionTracker` is fed the same record stream as the estimators (``add(record)`` takes any record and
keeps only :class:`~vehcal_ros.records.GnssFix` ones, as the grip collector dispatches by record
type); it holds the latest usable fix (status >= 0, finite latitude and longitude, stamps increasing) and a
track of fixes decimated to one per ``period`` s of bag time. :func:`grip_by_place` joins that track with the
belief in force of each grip scope (estimation/grip/belief.py ``belief_timeline``) into rows
``t, latitude, longitude, altitude, scope, mu_max, lower, upper, age, truth``: the first step of a friction map.
Nothing here changes the grip estimation. No I/O and no rclpy here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from vehcal_ros.records import GnssFix

PLACE_PERIOD = 1.0
"""s of bag time between the fixes kept on the track (the rows of the grip-by-place table)."""

PLACE_FIELDS = ("t", "latitude", "longitude", "altitude", "scope", "mu_max", "lower", "upper", "age", "truth")
"""The fields of a grip-by-place row, in order (the replay JSON's ``grip_by_place`` and the map writers' columns):
``t`` s (the fix's stamp), ``latitude``/``longitude`` deg and ``altitude`` m (WGS-84, as the receiver reported
them), ``scope`` (axle or wheel scope), ``mu_max``/``lower``/``upper`` (the belief in force at ``t``: mean and
interval, widened for the estimate's age; mean None and lower 0 while the grip is unknown), ``age`` s since the
newest sample of the estimate's data (None without an estimate), ``truth`` (the true mu_max under the scope's
wheels at ``t``, the lowest of them; None without ground truth)."""


class PositionTracker:
    """The latest usable GNSS fix and a track decimated to one fix per ``period`` s (module docstring)."""

    def __init__(self, period: float = PLACE_PERIOD) -> None:
        if not period > 0.0:
            raise ValueError(f"period must be > 0 s, got {period!r}")
        self.period = float(period)
        self.latest: GnssFix | None = None
        self.track: list[GnssFix] = []
        self.n_fixes = 0          #: fixes taken
        self.n_refused = 0        #: fixes refused (no fix, non-finite, stamp not after the latest)
        self._next = -math.inf

    def add(self, record: object) -> bool:
        """Take ``record`` if it is a usable GnssFix (other records are ignored). True when the fix also went on
        the decimated track (the first fix, then the first one ``period`` s or more after the last kept)."""
        if not isinstance(record, GnssFix):
            return False
        t = float(record.t)
        if not (record.has_fix and math.isfinite(t) and math.isfinite(record.altitude)) or (
                self.latest is not None and t <= self.latest.t):
            self.n_refused += 1
            return False
        self.latest = record
        self.n_fixes += 1
        if t < self._next - 1e-9:
            return False
        self._next = t + self.period
        self.track.append(record)
        return True

    def at(self, t: float, max_age: float = 2.0) -> GnssFix | None:
        """The latest fix if it is at most ``max_age`` s older than ``t`` (and not newer), else None."""
        fix = self.latest
        if fix is None or not (0.0 <= t - fix.t <= max_age):
            return None
        return fix


def _num(x: float) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None


def grip_by_place(track: Sequence[GnssFix], truths: Sequence[Mapping[str, float]],
                  in_force: Mapping[str, Mapping[str, np.ndarray]]) -> list[dict]:
    """Rows of ``PLACE_FIELDS`` (JSON-safe: non-finite numbers are None), one per fix of ``track`` and scope of
    ``in_force``, fix by fix. ``truths[k]``: scope -> true mu_max at ``track[k]`` (NaN unknown). ``in_force``:
    scope -> the belief timeline (arrays ``t``, ``mean``, ``lower``, ``upper``, ``age``, ``known``); a fix takes
    the belief at the latest timeline time at or before its stamp (none before the timeline starts: unknown)."""
    rows: list[dict] = []
    for k, fix in enumerate(track):
        for scope, f in in_force.items():
            t_grid = np.asarray(f.get("t", ()), dtype=float)
            i = int(np.searchsorted(t_grid, fix.t + 1e-6, side="right")) - 1
            known = i >= 0 and bool(f["known"][i])
            rows.append({
                "t": float(fix.t), "latitude": float(fix.latitude), "longitude": float(fix.longitude),
                "altitude": float(fix.altitude), "scope": scope,
                "mu_max": _num(f["mean"][i]) if known else None,
                "lower": _num(f["lower"][i]) if i >= 0 else 0.0,
                "upper": _num(f["upper"][i]) if i >= 0 else None,
                "age": _num(f["age"][i]) if i >= 0 else None,
                "truth": _num(truths[k].get(scope, math.nan)) if k < len(truths) else None,
            })
    return rows


__all__ = ["PLACE_FIELDS", "PLACE_PERIOD", "PositionTracker", "grip_by_place"]
