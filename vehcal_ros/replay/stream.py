"""A bag streamed as the nodes would have seen it: records in header-stamp order, the nodes' timers as ticks on the
bag's clock (:func:`stream_bag`), and where a replay is (:class:`ReplayProgress`).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from vehcal_ros.io import bags

ProgressFn = Callable[["ReplayProgress"], None]
"""``progress(ReplayProgress)``; called every ``progress_every`` records (and while waiting for fits) and at the end."""


@dataclass
class Timer:
    """A node timer on the bag clock: ``fire(t)`` every ``period`` s, the first one period after the first stamp."""

    period: float
    fire: Callable[[float], None]
    next: float = math.inf


@dataclass
class StreamStats:
    """What streaming a bag saw: messages (total and per canonical topic) and the first/last header stamps."""

    n: int = 0
    per_topic: dict[str, int] = field(default_factory=dict)
    t_start: float = float("nan")
    t_end: float = float("nan")


def stream_bag(path: str | os.PathLike, tmap: Mapping[str, str], frames: bags.Frames, timers: list[Timer],
               feed: Callable[[str, Any], None], on_progress: Callable[[StreamStats, float], None] | None = None,
               progress_every: int = 5000, admit: Callable[[str, Any], bool] | None = None) -> StreamStats:
    """Feed a bag's records in header-stamp order; before each record, fire every timer due at or before its
    stamp (one tick each, in time order; ties in the order of ``timers``), as the nodes' timers would have.
    A timer that fell several periods behind fires once and is re-armed past the record (the node skips too).
    ``admit``: the input guards, in arrival order (:func:`vehcal_ros.io.bags.read_bag`)."""
    st = StreamStats()
    for topic, rec in bags.read_bag(path, tmap, frames=frames, admit=admit):
        t = float(rec.t)
        if st.n == 0:
            st.t_start = t
            for tm in timers:
                tm.next = t + tm.period
        while timers and t >= min(tm.next for tm in timers):
            tm = min(timers, key=lambda x: x.next)   # the first of equals: the list order
            tm.fire(tm.next)
            tm.next += tm.period * max(1, math.floor((t - tm.next) / tm.period) + 1)
        st.n += 1
        st.per_topic[topic] = st.per_topic.get(topic, 0) + 1
        st.t_end = t if not math.isfinite(st.t_end) else max(st.t_end, t)
        feed(topic, rec)
        if on_progress is not None and st.n % progress_every == 0:
            on_progress(st, t)
    return st


@dataclass(frozen=True)
class ReplayProgress:
    """Where a replay is: ``done_t`` = bag time up to which every estimator has committed its cycles;
    ``read_t`` = bag time read so far; ``t_first``/``t_last`` = the bag's span (metadata); ``elapsed`` = wall s."""

    done_t: float
    read_t: float
    t_first: float
    t_last: float
    elapsed: float
    n_messages: int
    total: int
    finished: bool = False
    detail: str = ""

    @property
    def fraction(self) -> float:
        span = self.t_last - self.t_first
        if self.finished:
            return 1.0
        return min(1.0, max(0.0, (self.done_t - self.t_first) / span)) if span > 0 else 0.0

    @property
    def speed(self) -> float:
        """Bag seconds replayed per wall second (x real time)."""
        return max(0.0, self.done_t - self.t_first) / self.elapsed if self.elapsed > 0 else 0.0

    @property
    def time_left(self) -> float:
        """Wall seconds left at the speed so far (inf before any progress)."""
        if self.finished:
            return 0.0
        v = self.speed
        return max(0.0, self.t_last - self.done_t) / v if v > 0 else math.inf


def progress_reporter(progress: ProgressFn | None, span: tuple[float, float], total: int, t_wall: float
                       ) -> Callable[..., None] | None:
    """``report(done_t, read_t, n, detail)`` -> ``progress(ReplayProgress)`` (None without a progress callback)."""
    if progress is None:
        return None

    def report(done_t: float, read_t: float, n: int, detail: str = "") -> None:
        progress(ReplayProgress(done_t, read_t, *span, time.perf_counter() - t_wall, n, total, detail=detail))
    return report


@dataclass(frozen=True)
class ReplayJob:
    """Everything a replay stream needs (picklable: a parallel replay sends it to a worker)."""

    path: str
    tmap: dict[str, str]
    frames: bags.Frames
    grip_values: dict[str, Any]
    cal_values: dict[str, Any] | None
    grip_period: float
    cal_period: float
    final_cycle: bool = True
    progress_every: int = 5000
