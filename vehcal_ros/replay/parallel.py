"""Bag replay over several processes, with the serial replay's numbers (and so a live run's with the same cycle
times).

Which work depends on which (the pipelines' own rules, :mod:`vehcal_ros.estimation.grip.pipeline` and
:mod:`~vehcal_ros.estimation.calibration.pipeline`):

* The grip estimator's *schedule* depends on the data only: which scopes a tick snapshots (``min_new_points``
  since the scope's last snapshot), the cycle number and the seeds (``seed + 1000 * cycle + k``). A fit depends
  on the results before it only through its warm start (``GripPipeline.warm_start_of``: the scope's last fit
  that met the convergence rule, else its last published estimate). So the main
  process reads the bag and plans the grip cycles (a planning pipeline whose commits only advance the
  schedule), each scope's fits run one after another in worker processes (a scope's next fit is sent as soon as
  its previous one returns, with the state its outcome left), scopes in parallel, and the outcomes are committed
  to the real pipeline in cycle order, as the node commits them.
* The calibrator's schedule depends on its results (stage order, accepted values, excitation of the accepted
  fit), so its cycles stay in order: it runs in the main process on the same (single) read of the bag
  (:class:`CalibrationScheduler`: records into its buffers, the node's snapshot at each of its ticks); only its
  fits go to the executor, and its next tick first waits for them and commits, as the node's next cycle does.
  Most ticks have nothing to fit and most due refits end in the recalibration check
  (estimation/calibration/recalibration_check.py), so the wait is rare.

Scopes are independent of each other and of the calibrator, so the results equal the serial replay's bit for bit
(``test_replay_parallel.py``). Parallelism is bounded by the scopes (2 with ``scope: axle``) plus the
calibrator; the fits themselves run numba's threads over chains and particles.

Threads per task (:func:`task_threads`): with a local process pool, a task started while others keep the cores busy runs
its numba kernels on the cores they leave free (at least one): three processes
of two threads each on two cores only oversubscribe them (measured on the 160 s daily drive at load ~8: 133.7
CPU-s with two threads per worker, 121.5 with one). A grip fit sent while nothing else runs (the last fits of
the longest scope) gets every core. The chains and particles are independent, so the numbers do not depend on
the thread count.
"""

from __future__ import annotations

import contextlib
import copy
import math
import os
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Executor, Future, wait
from dataclasses import dataclass, field
from typing import Any

from vehcal_ros.errors import EstimationError
from vehcal_ros.estimation.grip.friction_samples import ScopeData
from vehcal_ros.estimation.grip.pipeline import FitOutcome, GripPipeline, excitation_of
from vehcal_ros.inference.executors import is_worker_lost, make_executor
from vehcal_ros.records import GnssFix, GroundTruth, OdomSample
from vehcal_ros.replay.guards import replay_guards
from vehcal_ros.replay.params import calibration_pipeline_from, grip_pipeline_from
from vehcal_ros.replay.results import CalibrationRecorder, GripRecorder
from vehcal_ros.replay.stream import ReplayJob, StreamStats, Timer, stream_bag

POLL_S = 0.5
"""s between progress reports while waiting for fits after the bag has been read."""

# ------------------------------------------------------------------------------------------ worker tasks
def task_threads(cores: int, others_running: int) -> int:
    """Threads for a task's numba kernels when ``others_running`` tasks already run on ``cores`` cores: the cores
    they leave free, at least one."""
    return max(1, int(cores) - int(others_running))


@contextlib.contextmanager
def kernel_threads(n: int | None):
    """Run this thread's numba kernels (``prange``, and the batch likelihood's chunk pool,
    :mod:`vehcal_ros.models.chunked`, which follows ``numba.set_num_threads``) on at most ``n`` threads; None: as
    configured. The setting is the calling thread's and is restored on exit (pool processes run later tasks)."""
    if n is None:
        yield
        return
    import numba

    old = numba.get_num_threads()
    numba.set_num_threads(max(1, min(int(n), numba.config.NUMBA_NUM_THREADS)))
    try:
        yield
    finally:
        numba.set_num_threads(old)


def fit_grip_job(scope_state: GripPipeline, cycle: int, k: int, data: ScopeData, threads: int | None = None
                 ) -> FitOutcome:
    """Fit ``data`` exactly as the node's pipeline fits the ``k``-th snapshot of cycle ``cycle``: the same
    ``GripPipeline.fit`` on a copy of ``scope_state`` (a pipeline that has committed this scope's earlier
    outcomes, so its warm start and any state learnt from them are the node's), with the cycle count and the
    seed offset set (seeds ``seed + 1000 * cycle + k``); ``threads``: see :func:`kernel_threads`."""
    import copy
    import dataclasses
    import threading

    p = copy.copy(scope_state)
    p.cancel = threading.Event()   # the pipeline's cancel flag does not travel (not picklable): a fresh one
    p.fit_config = dataclasses.replace(p.fit_config, seed=int(p.fit_config.seed) + k)
    p.cycle = cycle
    with kernel_threads(threads):
        return p.fit([data])[0]


def fit_calibration_jobs(state: Any, jobs: list, threads: int | None = None) -> list:
    """The calibrator's fit of one tick's jobs, exactly as the node's worker thread runs it: ``CalibrationPipeline.fit``
    on ``state``, a copy of the pipeline without its buffers (fit reads its configuration and the accepted
    results only); ``threads``: see :func:`kernel_threads`."""
    import threading

    p = copy.copy(state)
    p.cancel = threading.Event()
    with kernel_threads(threads):
        return p.fit(jobs)


def warm_worker() -> None:
    """A pool worker's first task at the start of a replay: import the estimators and load the grip chains'
    compiled kernels (numba's cache) while the main process reads the bag up to the first cycle, instead of
    when the first fit arrives (~2 s on the 2-core machine, the first tenth of the daily drive's replay)."""
    import numpy as np

    from vehcal_ros.estimation.calibration import pipeline as calibration_pipeline  # noqa: F401
    from vehcal_ros.estimation.grip.ml_fit import TABLE3_BOUNDS
    from vehcal_ros.estimation.grip.posterior import run_grip_chains

    s = np.linspace(0.001, 0.03, 16)
    theta = np.array([10.0, 1.9, 0.9, 0.5, 0.0, 0.0])
    with kernel_threads(1):
        run_grip_chains(s, 0.3 * s / 0.03, np.tile(theta, (2, 1)), np.diag(np.full(6, 1e-3)),
                        np.asarray(TABLE3_BOUNDS, dtype=float), 0.01, 40, 20, 2, max_peak_slip=0.1,
                        slip_var=np.full(16, 1e-6), mu_var=np.full(16, 1e-4), slope_coords=True, seed=0)


def _result_of(fut: Future) -> Any:
    """A worker's result; a worker that died is an EstimationError naming the way out (``--jobs 1``)."""
    try:
        return fut.result()
    except Exception as exc:
        if is_worker_lost(exc):
            raise EstimationError(f"a replay worker process died ({type(exc).__name__}: {exc}); the replay "
                                  "stopped (run with --jobs 1 to keep everything in one process)") from exc
        raise


# ------------------------------------------------------------------------------------------ grip schedule
@dataclass
class _Cycle:
    t_now: float                 # bag time of the tick
    number: int                  # the pipeline's cycle count (seeds)
    snaps: list[ScopeData]
    truths: dict[str, float]
    outcomes: list[FitOutcome | None] = field(default_factory=list)


class GripScheduler:
    """Plans the grip cycles from the data, runs each scope's fits in order on an executor, and commits the
    outcomes to ``grip`` in cycle order (module docstring)."""

    def __init__(self, values: dict[str, Any], grip: GripPipeline, recorder: GripRecorder, executor: Executor,
                 cores: int | None = None, others: Callable[[], int] = lambda: 0) -> None:
        self.values, self.grip, self.recorder, self.executor = values, grip, recorder, executor
        self.cores = cores            #: cores of a local pool (threads per fit: task_threads); None: as configured
        self.others = others          #: tasks running besides the grip fits (the calibrator's stream)
        self.planner = grip_pipeline_from(values)
        grip.use_odometer(self.planner.odometer)   # floor beliefs are aged as the node's (fed) pipeline ages them
        scopes = self.planner.collector.scopes()
        # per scope, a pipeline that commits that scope's outcomes in order: its state (last fit, last published
        # estimate, so the warm start; anything learnt from published estimates) is what the node's has then
        self.published = {s: grip_pipeline_from(values) for s in scopes}
        self.cycles: list[_Cycle] = []
        self.queue: dict[str, deque[tuple[int, int]]] = {s: deque() for s in scopes}
        self.running: dict[Future, tuple[str, int, int]] = {}
        self.next_commit = 0
        self.n_fits = self.n_done = 0

    def add(self, record: Any) -> None:
        self.planner.add(record)

    def plan(self, t_now: float) -> None:
        """A grip timer tick at bag time ``t_now``: the snapshot the node would take, queued per scope."""
        self.recorder.take_samples(self.planner)
        snaps = self.planner.snapshot()
        if not snaps:
            return
        ci = len(self.cycles)
        self.cycles.append(_Cycle(t_now, self.planner.cycle, snaps, self.recorder.truths(), [None] * len(snaps)))
        # advance the schedule (fill marks, cycle count) as the node's commit will: it depends on the data only
        self.planner.commit([FitOutcome(scope=d.scope, stamp=d.t_end, n_points=int(d.mu.size), excitation=0.0,
                                        error="planned") for d in snaps])
        for k, d in enumerate(snaps):
            self.queue[d.scope].append((ci, k))
            self.n_fits += 1
        self.pump()

    def pump(self) -> None:
        """Collect finished fits, send each idle scope its next fit, commit the cycles that are complete."""
        for fut in [f for f in self.running if f.done()]:
            scope, ci, k = self.running.pop(fut)
            outcome = _result_of(fut)
            self.cycles[ci].outcomes[k] = outcome
            self.published[scope].commit([outcome])  # the same gates as the node: is it the next warm start?
            self.n_done += 1
        busy = {s for s, _, _ in self.running.values()}
        for scope, q in self.queue.items():
            if q and scope not in busy:
                ci, k = q.popleft()
                self._submit(scope, ci, k)
                busy.add(scope)
        while self.next_commit < len(self.cycles) and None not in self.cycles[self.next_commit].outcomes:
            c = self.cycles[self.next_commit]
            updated = self.grip.commit(list(c.outcomes))
            self.recorder.committed(self.grip, c.t_now, updated, {d.scope: d for d in c.snaps}, c.truths)
            c.snaps, c.outcomes = [], []   # committed: keep nothing but the recorder's rows
            self.next_commit += 1

    def _submit(self, scope: str, ci: int, k: int) -> None:
        c = self.cycles[ci]
        state = copy.copy(self.published[scope])
        data = c.snaps[k]
        if excitation_of(data) < state.min_excitation:
            # the pipeline's pre-gate will skip the sampler: the same call, here (no worker round trip)
            fut: Future = Future()
            fut.set_result(fit_grip_job(state, c.number, k, data))
        else:
            state.__dict__.pop("cancel", None)   # a threading.Event: not picklable; fit_grip_job makes a fresh one
            threads = None if self.cores is None else task_threads(self.cores, len(self.running) + self.others())
            fut = self.executor.submit(fit_grip_job, state, c.number, k, data, threads)
        self.running[fut] = (scope, ci, k)

    def done_until(self, read_t: float) -> float:
        """Bag time up to which every planned cycle is committed (the read position when none is pending)."""
        if self.next_commit < len(self.cycles):
            return self.cycles[self.next_commit].t_now
        return read_t

    @property
    def idle(self) -> bool:
        return not self.running and not any(self.queue.values())

    def wait(self, timeout: float) -> None:
        if self.running:
            wait(list(self.running), timeout=timeout, return_when=FIRST_COMPLETED)
        self.pump()


# ------------------------------------------------------------------------------------------ calibrator schedule
class CalibrationScheduler:
    """The calibrator in the main process, on the one bag read: records go to its buffers as they are read; a
    tick takes the node's snapshot and sends the fits (if any) to the executor; the next tick first waits for
    them and commits (the calibrator's next snapshot depends on its results: stage order, accepted values), so
    the cycles are the serial replay's. Most ticks have nothing to fit, and a fit is mostly a recalibration
    check (estimation/calibration/recalibration_check.py); the SMC runs rarely, beside the grip fits.

    A tick that would wait does not stop the read: it is deferred, with every record and rejection after it, in
    their order, and fed on (:meth:`drain`) once the fit is in, so the grip cycles keep being planned meanwhile
    (on the 160 s daily drive the read stalled ~4 s on the first SMC with one core idle).
    The calibrator sees the same sequence of records, ticks and commits as in a serial replay. At most ``max_deferred``
    items wait; beyond that the read waits for the fit, as before."""

    max_deferred = 200_000

    def __init__(self, values: dict[str, Any], executor: Executor, cores: int | None,
                 others: Callable[[], int]) -> None:
        self.recorder = CalibrationRecorder(calibration_pipeline_from(values))
        self.executor, self.cores, self.others = executor, cores, others
        self.pending: tuple[float, list, Future] | None = None   #: (tick's bag time, jobs, fit) not committed yet
        self.deferred: deque[tuple[str, Any]] = deque()           #: ("record" | "reject" | "tick", item) in order
        self._draining = False

    def add(self, record: Any) -> None:
        if self.deferred:
            self.deferred.append(("record", record))
        else:
            self.recorder.cal.add(record)

    def reject(self, source: str, reason: str = "undecodable") -> None:
        if self.deferred:
            self.deferred.append(("reject", (source, reason)))
        else:
            self.recorder.cal.reject(source, reason)

    @property
    def busy(self) -> bool:
        return self.pending is not None and not self.pending[2].done()

    @property
    def first_open_tick(self) -> float:
        """Bag time of the first tick not committed yet (its pending fit or a deferred tick); inf if none."""
        if self.pending is not None:
            return self.pending[0]
        return next((item[0] for kind, item in self.deferred if kind == "tick"), math.inf)

    def tick(self, t_now: float, wait_for: Callable[[Future], None], final: bool = False) -> None:
        """The model_calibrator's timer at bag time ``t_now``; ``wait_for(future)`` waits (a while) for a fit."""
        self.deferred.append(("tick", (t_now, final)))
        self.drain(wait_for, block=final or len(self.deferred) > self.max_deferred)

    def drain(self, wait_for: Callable[[Future], None], block: bool = False) -> None:
        """Feed the deferred items in order; a tick whose previous fit is still running stops the feed (``block``:
        waits for it). Not re-entered (``wait_for`` may report progress, which drains)."""
        if self._draining:
            return
        self._draining = True
        try:
            while self.deferred:
                kind, item = self.deferred[0]
                if kind == "tick" and self.busy and not block:
                    return
                self.deferred.popleft()
                if kind == "record":
                    self.recorder.cal.add(item)
                elif kind == "reject":
                    self.recorder.cal.reject(*item)
                else:
                    self._tick(*item, wait_for)
        finally:
            self._draining = False

    def _tick(self, t_now: float, final: bool, wait_for: Callable[[Future], None]) -> None:
        self._settle_pending(wait_for)
        jobs = self.recorder.snapshot(final)
        if not jobs:
            return
        state = copy.copy(self.recorder.cal)
        state.buffers = {}                       # fit does not read them: not sent
        state.__dict__.pop("cancel", None)       # a threading.Event (not picklable); the task makes a fresh one
        threads = None if self.cores is None else task_threads(self.cores, self.others())
        self.pending = (t_now, jobs, self.executor.submit(fit_calibration_jobs, state, jobs, threads))

    def settle(self, wait_for: Callable[[Future], None]) -> None:
        """Feed every deferred item (waiting for fits as needed), then wait for the last fit and commit it."""
        self.drain(wait_for, block=True)
        self._settle_pending(wait_for)

    def _settle_pending(self, wait_for: Callable[[Future], None]) -> None:
        if self.pending is None:
            return
        t_now, jobs, fut = self.pending
        while not fut.done():
            wait_for(fut)
        self.pending = None
        self.recorder.committed(t_now, jobs, _result_of(fut))


# ------------------------------------------------------------------------------------------ the replay
def _local_cores(ex: Executor) -> int | None:
    """This machine's cores when ``ex`` is a local process pool, else None: a Dask cluster's workers have their
    own cores, and a thread pool's tasks share one process (its threads already split the cores)."""
    from concurrent.futures import ProcessPoolExecutor

    if not isinstance(ex, ProcessPoolExecutor):
        return None
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def _pool_size(workers: int | None, n_tasks: int) -> int:
    """Worker processes of a replay's own pool: one per core (or ``workers``) plus ``n_tasks`` (the calibrator)."""
    return max(1, workers or os.cpu_count() or 1) + n_tasks


def _executor(spec: Any, size: int) -> tuple[Executor, bool]:
    """(executor, owned): a given Executor is used as it is; a spec string makes one of ``size`` workers (closed
    at the end)."""
    if isinstance(spec, Executor):
        return spec, False
    return make_executor(str(spec), max_workers=size), True


def replay_parallel(job: ReplayJob, grip: GripPipeline, recorder: GripRecorder, workers: int | None, executor: Any,
                    report: Callable[..., None] | None) -> tuple[StreamStats, CalibrationRecorder | None, Any]:
    """The parallel schedule of :func:`vehcal_ros.replay.serial.replay_bag` (module docstring). Returns the main
    stream's stats, the calibration recorder (None without calibration) and the grip collector's counters."""
    size = _pool_size(workers, 1 if job.cal_values is not None else 0)
    ex, owned = _executor(executor, size)
    cores = _local_cores(ex)
    if cores is not None:   # a local process pool: its workers get ready while the bag is read
        for _ in range(size):
            ex.submit(warm_worker)
    cal: CalibrationScheduler | None = None
    sched = GripScheduler(job.grip_values, grip, recorder, ex, cores, lambda: int(cal is not None and cal.busy))
    if job.cal_values is not None:
        cal = CalibrationScheduler(job.cal_values, ex, cores, lambda: len(sched.running))
    guards = replay_guards(job.grip_values, job.cal_values, sched.planner.collector.reject,  # the serial's guards
                           cal.reject if cal is not None else None)
    last_truth = [-math.inf]
    read = [-math.inf, 0]   # bag time and records read so far
    ok = False

    def feed(topic: str, rec: Any) -> None:
        if isinstance(rec, GroundTruth):
            last_truth[0] = recorder.add_truth(rec, last_truth[0])
        else:
            if isinstance(rec, GnssFix):
                recorder.add_fix(rec)
            if guards.lets_in(0, topic, rec):
                sched.add(rec)
                if isinstance(rec, OdomSample):
                    recorder.add_speed(rec)
            if cal is not None and guards.lets_in(1, topic, rec):
                cal.add(rec)
        guards.fed(rec)

    def progress(read_t: float, n: int) -> None:
        read[:] = [read_t, n]
        sched.pump()
        if cal is not None:
            cal.drain(wait_for)   # a deferred tick whose fit is in goes on now
        if report is None:
            return
        done_t = sched.done_until(read_t)
        detail = f"grip fits {sched.n_done}/{sched.n_fits}"
        if cal is not None:
            cal_t = min(cal.first_open_tick, read_t)   # its first uncommitted tick
            done_t = min(done_t, cal_t)
            detail += ", calibration " + ("fitting" if cal.busy else f"at {cal_t:.0f} s" if math.isfinite(cal_t)
                                          else "starting")
        report(done_t, read_t, n, detail)

    def wait_for(fut: Future) -> None:   # the calibrator waits for its fit: keep the grip fits going meanwhile
        wait([fut, *sched.running], timeout=POLL_S, return_when=FIRST_COMPLETED)
        if read[1]:
            progress(*read)
        else:
            sched.pump()

    def cal_tick(t_now: float) -> None:
        cal.tick(t_now, wait_for)

    timers = [Timer(job.grip_period, sched.plan)] + ([Timer(job.cal_period, cal_tick)] if cal is not None else [])
    try:
        stats = stream_bag(job.path, job.tmap, job.frames, timers, feed, lambda st, t: progress(t, st.n),
                           job.progress_every, admit=guards.admit)
        read[:] = [stats.t_end, stats.n]
        if job.final_cycle and stats.n:
            sched.plan(stats.t_end)
            if cal is not None:
                cal.tick(stats.t_end, wait_for, final=True)
        if cal is not None:
            cal.settle(wait_for)
        t_last = time.monotonic()
        while not sched.idle:
            sched.wait(POLL_S)
            if time.monotonic() - t_last >= POLL_S:
                progress(stats.t_end, stats.n)
                t_last = time.monotonic()
        sched.pump()
        ok = True
        return stats, cal.recorder if cal is not None else None, sched.planner.collector.counters
    finally:
        if not ok:
            for f in [*sched.running, *([cal.pending[2]] if cal is not None and cal.pending else [])]:
                f.cancel()
        if owned:
            ex.shutdown(wait=True, cancel_futures=True)
