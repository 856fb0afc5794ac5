"""Rolling time-series buffers with a time window and a size bound (bounded memory however long the run).

A :class:`RollingBuffer` keeps rows ``(t, c_1, ..., c_k)`` in a preallocated ring. Rows must come in stamp
order: a row older than the newest kept one is dropped and counted (``n_out_of_order``), a duplicate stamp is
dropped and counted (``n_duplicate``), a row with a non-finite value is dropped and counted (``n_nonfinite``),
and a jump larger than ``max_gap`` either way (a clock jump, a log split, a restarted simulator or bag) clears
the buffer and is counted (``n_clock_jumps``), so no segment ever spans it. Nothing here imports rclpy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

POOL_MEMORY = 20
"""Estimates a :func:`pooled` noise figure averages: the first 20 equally, then a running mean over ~20."""


def pooled(previous: float, value: float, count: int) -> float:
    """A noise figure pooled over estimates, ``value`` being the ``count``-th (1-based): the mean of the first
    :data:`POOL_MEMORY`, then an exponential running mean over ~:data:`POOL_MEMORY` of them (steadier than one
    short window's own scatter, and it follows a change); ``previous`` nan: ``value``."""
    if math.isnan(previous):
        return value
    return previous + max(1.0 / count, 1.0 / POOL_MEMORY) * (value - previous)


@dataclass
class BufferCounters:
    """What a buffer accepted and what it dropped, by reason (counts since start)."""

    accepted: int = 0
    n_out_of_order: int = 0
    n_duplicate: int = 0
    n_nonfinite: int = 0
    n_clock_jumps: int = 0

    @property
    def dropped(self) -> int:
        return self.n_out_of_order + self.n_duplicate + self.n_nonfinite


class RollingBuffer:
    """Ring buffer of stamped rows with named columns.

    Args:
        columns: names of the value columns (the stamp column ``t`` is implicit), e.g. ``("slip", "mu")``.
        capacity: maximum number of rows kept (oldest dropped first).
        window: maximum age in seconds of kept rows relative to the newest row (``inf`` for none).
        max_gap: a stamp jump larger than this (s), forward or back, clears the buffer (``inf`` to never clear).
        allow_equal: accept rows with the same stamp as the newest (several wheels pooled in one scope).
    """

    def __init__(self, columns: Sequence[str], capacity: int, window: float = np.inf,
                 max_gap: float = np.inf, allow_equal: bool = False) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        if not window > 0:
            raise ValueError(f"window must be > 0 s, got {window}")
        self.columns = tuple(columns)
        self._col = {c: i + 1 for i, c in enumerate(self.columns)}
        self.capacity = int(capacity)
        self.window = float(window)
        self.max_gap = float(max_gap)
        self.allow_equal = bool(allow_equal)
        self._k = len(self.columns)
        self._data = np.empty((self.capacity, self._k + 1))
        self._last = -np.inf
        self._start = 0
        self._size = 0
        self.counters = BufferCounters()

    def __len__(self) -> int:
        return self._size

    @property
    def last_time(self) -> float:
        return self._last if self._size else -np.inf

    @property
    def first_time(self) -> float:
        if self._size == 0:
            return np.inf
        return float(self._data[self._start, 0])

    def clear(self) -> None:
        self._start = 0
        self._size = 0

    def append(self, t: float, values: Sequence[float]) -> bool:
        """Add one row; return False (and count why) if it was dropped.

        Plain Python on the scalars (no temporary arrays): this runs once per message in the live nodes.
        """
        if len(values) != self._k:
            raise ValueError(f"expected {self._k} values {self.columns}, got {len(values)}")
        if not (math.isfinite(t) and all(math.isfinite(v) for v in values)):
            self.counters.n_nonfinite += 1
            return False
        if self._size:
            last = self._last
            if abs(t - last) > self.max_gap:  # a clock jump either way (log split, restarted simulator or bag)
                self.counters.n_clock_jumps += 1
                self.clear()
            elif t < last:
                self.counters.n_out_of_order += 1
                return False
            elif t == last and not self.allow_equal:
                self.counters.n_duplicate += 1
                return False
        end = (self._start + self._size) % self.capacity
        row = self._data[end]
        row[0] = t
        row[1:] = values
        self._last = t
        if self._size < self.capacity:
            self._size += 1
        else:
            self._start = (self._start + 1) % self.capacity
        self._trim(t)
        self.counters.accepted += 1
        return True

    def index_at_or_after(self, t: float) -> int:
        """Position (0 = oldest) of the first kept row stamped at or after ``t`` (``len`` if none): a short scan
        back from the newest row (live data asks about recent stamps), else bisection. No copy."""
        d, cap, s = self._data, self.capacity, self._start
        k = self._size
        for _ in range(8):
            if k == 0 or d[(s + k - 1) % cap, 0] < t:
                return k
            k -= 1
        lo, hi = 0, k
        while lo < hi:
            mid = (lo + hi) // 2
            if d[(s + mid) % cap, 0] < t:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def row(self, i: int) -> np.ndarray:
        """The kept row at position ``i`` (0 = oldest), stamp first: a view into the ring, valid until the next
        append."""
        return self._data[(self._start + i) % self.capacity]

    def extend(self, t: np.ndarray, values: np.ndarray) -> int:
        """Append many rows (``values`` shaped ``(n, k)``); return how many were kept."""
        kept = 0
        for ti, vi in zip(np.asarray(t, dtype=float), np.asarray(values, dtype=float)):
            kept += self.append(float(ti), vi)
        return kept

    def _trim(self, newest: float) -> None:
        if not math.isfinite(self.window):
            return
        d, cap = self._data, self.capacity
        while self._size and newest - d[self._start, 0] > self.window:
            self._start = (self._start + 1) % cap
            self._size -= 1

    def array(self) -> np.ndarray:
        """A copy of the kept rows in time order, shape ``(n, 1 + k)`` with the stamp first."""
        idx = (self._start + np.arange(self._size)) % self.capacity
        return self._data[idx].copy()

    def times(self) -> np.ndarray:
        return self.array()[:, 0]

    def column(self, name: str) -> np.ndarray:
        return self.array()[:, self._col[name]]

    def since(self, t0: float) -> np.ndarray:
        """Rows with stamp >= ``t0`` in time order (a copy of those rows only)."""
        i = self.index_at_or_after(t0)
        idx = (self._start + np.arange(i, self._size)) % self.capacity
        return self._data[idx].copy()
