"""A node's CPU share and the fit cycles it sheds when over its budget (live nodes only; replay never sheds).

:class:`CpuMeter` measures the node *process's* CPU share: process CPU time (``time.process_time()``, i.e.
CLOCK_PROCESS_CPUTIME_ID: user + system time of every thread of the process — the executor thread that runs the
subscription callbacks and timers, the worker thread of the fits, numba's and the SMC's threads, and the DDS
middleware's own threads in the process) over wall time (``time.monotonic()``), as a rolling mean over the
last ``window`` seconds, in percent of one core (100 = one core busy all the time; two busy cores read 200).

:class:`FitShedder` decides, at each fit cycle that comes due on the node's schedule, whether it runs or is
shed. The shedding order, fits before ingestion, never data:

1. fit cycles are postponed: while the process share over the last :data:`PRESSURE_WINDOW` s exceeds the
   budget, or a cycle came due while the previous fit still ran (an overrun), the effective cycle period doubles
   at each due cycle, up to :data:`MAX_STRETCH` times the nominal period; a due cycle runs once that many
   nominal periods have passed since the last one that ran, and the due cycles in between are shed (counted).
   So under sustained pressure a fit still runs every :data:`MAX_STRETCH` nominal periods. Once the share is
   back under the budget the stretch halves at every due cycle.
2. nothing else: message ingestion (conversion, checks, buffering), /diagnostics and the grip beliefs are never
   shed, so no input message is dropped for CPU. The buffers keep their own bounds (time window and size),
   unchanged, and the stretch is capped so that a stretched period stays shorter than the node's data window
   (:func:`max_stretch_for`): with the shipped periods the grip estimator's fits come at least every 25 s (5 x 5
   s, inside its 30 s window) and the calibrator's every 40 s (8 x 5 s, inside 120 s), so every buffered sample
   still reaches a fit.

A budget of 0 turns both off: no WARN and nothing shed (an overrun then only skips the cycle, as always).
Pure Python (no rclpy), so it is tested without a ROS graph.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable

PRESSURE_WINDOW = 10.0
"""s: the rolling window whose CPU share is compared with the budget (the sustained share)."""

WINDOWS = (10.0, 60.0)
"""s: the rolling windows reported on /diagnostics (``cpu_share_10s``, ``cpu_share_60s``)."""

MAX_STRETCH = 8
"""Largest factor a shed fit period reaches (the nominal period times this)."""

MIN_SPAN = 1.0
"""s: shortest wall span a share is computed over (shorter: NaN, and no pressure)."""


class CpuMeter:
    """Rolling mean of the process's CPU share, percent of one core (module docstring).

    Samples (wall, cpu) are stored at most every ``min_interval`` s (by :meth:`share`, called by the node's
    cycle and diagnostics checks), so memory is bounded by the longest window over ``min_interval``.
    ``share(window)`` is the share between the newest stored sample at least ``window`` s old (or the oldest
    one, while the history is shorter) and now.
    """

    def __init__(self, windows: tuple[float, ...] = WINDOWS, *,
                 cpu: Callable[[], float] = time.process_time,
                 wall: Callable[[], float] = time.monotonic, min_interval: float = 0.25,
                 maxlen: int = 4096) -> None:
        self.windows = tuple(float(w) for w in windows)
        self._cpu = cpu
        self._wall = wall
        self.min_interval = float(min_interval)
        self._samples: deque[tuple[float, float]] = deque(maxlen=maxlen)
        self._samples.append((self._wall(), self._cpu()))
        self._lock = threading.Lock()   # the schedule check and a service's /diagnostics may read it at once

    def sample(self) -> tuple[float, float]:
        """Return (wall s, process CPU s) now; store it when ``min_interval`` s have passed since the last stored
        one, and forget samples the longest window no longer needs (one at or beyond it is kept)."""
        now = (self._wall(), self._cpu())
        with self._lock:
            self._store(now)
        return now

    def _store(self, now: tuple[float, float]) -> None:
        if now[0] - self._samples[-1][0] >= self.min_interval:
            self._samples.append(now)
            keep = max(self.windows, default=0.0)
            while len(self._samples) > 2 and now[0] - self._samples[1][0] >= keep:
                self._samples.popleft()

    def share(self, window: float) -> float:
        """Percent of one core over the last ``window`` s (NaN below :data:`MIN_SPAN` s of history)."""
        wall, cpu = now = (self._wall(), self._cpu())
        with self._lock:
            self._store(now)
            start = self._samples[0]
            for s in self._samples:
                if wall - s[0] >= window:
                    start = s
                else:
                    break
        span = wall - start[0]
        if span < MIN_SPAN:
            return math.nan
        return 100.0 * (cpu - start[1]) / span

    @property
    def n_samples(self) -> int:
        """How many (wall s, process CPU s) samples the meter holds: at most the longest window over
        ``min_interval``, plus the one at or beyond it and the newest."""
        with self._lock:
            return len(self._samples)

    def shares(self) -> dict[float, float]:
        """``{window: share}`` for every reported window."""
        return {w: self.share(w) for w in self.windows}


def max_stretch_for(window: float, period: float, cap: int = MAX_STRETCH) -> int:
    """The largest stretch (at most ``cap``, at least 1) whose period stretch x ``period`` is shorter than the data
    ``window`` (s): a sample buffered just after a fit is still in the buffer at the next one."""
    if not (period > 0.0 and math.isfinite(window)):
        return cap
    return max(1, min(cap, math.ceil(window / period) - 1))


class FitShedder:
    """Whether a due fit cycle runs or is shed (module docstring). ``budget``: percent of one core, 0 = off."""

    def __init__(self, budget: float = 0.0, max_stretch: int = MAX_STRETCH) -> None:
        self.budget = float(budget)
        self.max_stretch = int(max_stretch)
        self.stretch = 1              # the effective cycle period is stretch x the nominal one
        self.shed = 0                 # due cycles shed (postponed) for CPU
        self.overruns = 0             # due cycles that found the previous fit still running
        self._waited = 0              # due cycles since the last one that ran
        self._overran = False

    @property
    def enabled(self) -> bool:
        return self.budget > 0.0

    def over(self, share: float) -> bool:
        """Whether ``share`` (percent of one core) exceeds the budget (never when off or unknown)."""
        return self.enabled and math.isfinite(share) and share > self.budget

    def overran(self) -> None:
        """A cycle came due while the previous fit still ran (the node skips it, as without a budget)."""
        self.overruns += 1
        if self.enabled:
            self._overran = True

    def due(self, share: float) -> bool:
        """A cycle is due on the nominal schedule and the worker is free: True = run it, False = shed it.
        ``share``: the process's CPU share over :data:`PRESSURE_WINDOW`, percent of one core."""
        if not self.enabled:
            self.stretch, self._waited, self._overran = 1, 0, False
            return True
        self._waited += 1
        pressure, self._overran = self.over(share) or self._overran, False   # an overrun counts once
        if pressure:
            if self._waited >= self.stretch:
                self.stretch = min(2 * self.stretch, self.max_stretch)
        else:
            self.stretch = max(1, self.stretch // 2)
        if self._waited < self.stretch:
            self.shed += 1
            return False
        self._waited = 0
        return True


__all__ = ["CpuMeter", "FitShedder", "MAX_STRETCH", "PRESSURE_WINDOW", "WINDOWS", "max_stretch_for"]
