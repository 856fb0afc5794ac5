"""Execution backends for parallel and distributed estimation (parallel-estimation paper, "Parallel Optimization").

The paper evaluates the finite-difference columns of its Jacobian concurrently on a network of PCs through
remote procedure calls. Here any :class:`concurrent.futures.Executor` plays that role, chosen by one string
(the ``--executor`` option of ``vehcal batch``):

=====================  =====================================================================================
``serial``             :class:`SerialExecutor`: runs each task in the calling thread at ``submit`` (reference).
``threads``            :class:`~concurrent.futures.ThreadPoolExecutor`; useful because the numba kernels are
                       compiled with ``nogil=True`` and release the GIL.
``local``              :class:`~concurrent.futures.ProcessPoolExecutor` with the ``forkserver`` start method
                       (``spawn`` where forkserver does not exist). Never ``fork``: a parent running rclpy/DDS,
                       dask or numba worker threads cannot be forked safely. The forkserver is a fresh
                       interpreter that preloads numpy, scipy and numba once; workers are forked from it, so
                       they start fast, inherit no rclpy/DDS state, and load the same on-disk numba caches
                       (``cache=True``) as the parent. Workers re-import the parent's ``__main__`` guarded by
                       ``if __name__ == "__main__"`` (as with spawn).
``dask://HOST:PORT``   a Dask distributed scheduler: ``distributed.Client(address).get_executor(pure=False)``;
                       the Client is closed when the executor is shut down.
=====================  =====================================================================================

Every executor returned by :func:`make_executor` is a context manager (``with make_executor(...) as ex:``) and
carries ``spec`` and ``max_workers`` (the parallelism a caller should plan for). :func:`map_over_executor`
spreads independent items (multi-start ML fits, independent SMC runs, batch inputs) over an executor, keeping
the input order and reporting failures per item instead of raising.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import traceback
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

from vehcal_ros.errors import InputError

ALLOWED_FORMS = "serial, threads, local, or dask://HOST:PORT"
#: modules the forkserver imports once so that forked workers start warm
FORKSERVER_PRELOAD: tuple[str, ...] = ("numpy", "scipy.optimize", "numba")
_PRELOAD_LOCK = threading.Lock()
_preload_set = False


class SerialExecutor(Executor):
    """An Executor that runs every task immediately in the calling thread (the serial reference backend)."""

    def __init__(self) -> None:
        self._shutdown = False
        self.spec = "serial"
        self.max_workers = 1

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        if self._shutdown:
            raise RuntimeError("cannot schedule new futures after shutdown")
        fut: Future = Future()
        fut.set_running_or_notify_cancel()
        try:
            fut.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # noqa: BLE001 - delivered through the future like any executor
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            fut.set_exception(exc)
        return fut

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self._shutdown = True


class DaskExecutor(Executor):
    """``distributed.Client(address).get_executor()`` that closes its Client on :meth:`shutdown`."""

    def __init__(self, address: str, timeout: float = 30.0) -> None:
        import distributed

        self.spec = f"dask://{address}"
        try:
            self.client = distributed.Client(address, timeout=timeout, set_as_default=False)
        except (OSError, TimeoutError) as exc:
            raise InputError(f"--executor {self.spec}: cannot connect to a Dask scheduler ({exc})") from exc
        self._executor = self.client.get_executor(pure=False)
        info = self.client.scheduler_info()
        workers = info.get("workers", {})
        self.max_workers = max(1, sum(int(w.get("nthreads", 1)) for w in workers.values()))

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        return self._executor.submit(fn, *args, **kwargs)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        try:
            self._executor.shutdown(wait=wait)
        finally:
            self.client.close()


def _process_context() -> multiprocessing.context.BaseContext:
    """forkserver (preloading :data:`FORKSERVER_PRELOAD`) where available, else spawn; never fork."""
    global _preload_set
    if "forkserver" in multiprocessing.get_all_start_methods():
        ctx = multiprocessing.get_context("forkserver")
        with _PRELOAD_LOCK:
            if not _preload_set:
                ctx.set_forkserver_preload(list(FORKSERVER_PRELOAD))
                _preload_set = True
        return ctx
    return multiprocessing.get_context("spawn")


def _check_workers(max_workers: int | None) -> None:
    if max_workers is not None and (not isinstance(max_workers, int) or max_workers < 1):
        raise InputError(f"--workers must be a positive integer, got {max_workers!r}")


def make_executor(spec: str, max_workers: int | None = None) -> Executor:
    """The backend named by ``spec`` (module table); ``max_workers`` defaults to ``os.cpu_count()``.

    For ``dask://`` the cluster decides the parallelism and ``max_workers`` is ignored. Raises
    :class:`~vehcal_ros.errors.InputError` naming ``--executor`` for an unknown form.
    """
    _check_workers(max_workers)
    n = max_workers or os.cpu_count() or 1
    spec = (spec or "").strip()
    if spec == "serial":
        return SerialExecutor()
    if spec == "threads":
        ex: Executor = ThreadPoolExecutor(max_workers=n, thread_name_prefix="vehcal")
    elif spec == "local":
        ex = ProcessPoolExecutor(max_workers=n, mp_context=_process_context())
    elif spec.startswith("dask://"):
        address = spec[len("dask://"):]
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise InputError(f"--executor {spec!r}: expected dask://HOST:PORT with a port 1-65535")
        return DaskExecutor(f"tcp://{address}")
    else:
        raise InputError(f"--executor {spec!r} is not valid; allowed: {ALLOWED_FORMS}")
    ex.spec = spec  # type: ignore[attr-defined]
    ex.max_workers = n  # type: ignore[attr-defined]
    return ex


def worker_threads() -> int | None:
    """The threads a task may use where it runs: a Dask worker's ``nthreads``, 1 in a pool process (``local``: one
    process per core), None in the calling process (serial, threads: as configured)."""
    try:
        from distributed import get_worker

        worker = get_worker()
    except (ImportError, ValueError):
        worker = None
    if worker is not None:
        state = getattr(worker, "state", None)
        return max(1, int(getattr(state, "nthreads", None) or getattr(worker, "nthreads", 1)))
    return 1 if multiprocessing.parent_process() is not None else None


def executor_workers(executor: Executor | None) -> int:
    """The parallelism an executor offers (``max_workers`` attribute, else the pool's, else 1)."""
    if executor is None:
        return 1
    n = getattr(executor, "max_workers", None) or getattr(executor, "_max_workers", None)
    return max(1, int(n or 1))


def is_worker_lost(exc: BaseException) -> bool:
    """True when ``exc`` means the worker running a task died (not that the task itself raised).

    ``BrokenExecutor`` (a dead ProcessPool worker breaks the whole pool) and Dask's ``KilledWorker`` (the
    scheduler gave up after ``distributed.scheduler.allowed-failures`` worker deaths on that task).
    """
    from concurrent.futures import BrokenExecutor

    if isinstance(exc, BrokenExecutor):
        return True
    return type(exc).__name__ in ("KilledWorker", "CommClosedError")


@dataclass(frozen=True)
class ItemResult:
    """Outcome of one item of :func:`map_over_executor`."""

    index: int
    """Position of the item in the input sequence."""
    ok: bool
    """True when ``value`` holds ``fn(item)``."""
    value: Any = None
    """``fn(item)`` when ok."""
    error: str | None = None
    """``ExceptionType: message`` when not ok."""
    worker_lost: bool = False
    """True when the failure was the worker dying (see :func:`is_worker_lost`)."""
    traceback: str | None = None
    """Formatted traceback of the failure (None when ok)."""

    def to_dict(self) -> dict:
        return {"index": self.index, "ok": self.ok, "error": self.error, "worker_lost": self.worker_lost}


def map_over_executor(fn: Callable[[Any], Any], items: Iterable[Any], executor: Executor | None = None,
                      ) -> list[ItemResult]:
    """``[fn(item) for item in items]`` on ``executor`` (serial when None), in input order, never raising.

    All items are submitted at once; each result is an :class:`ItemResult` with the value or the error of
    that item, so one failing start/run does not lose the others. ``fn`` must be picklable for process and
    Dask backends (a module-level function or a ``functools.partial`` of one).
    """
    items = list(items)
    ex = executor if executor is not None else SerialExecutor()
    futures: list[Future | BaseException] = []
    for it in items:
        try:
            futures.append(ex.submit(fn, it))
        except Exception as exc:  # e.g. a broken pool refuses new work
            futures.append(exc)
    wait([f for f in futures if isinstance(f, Future)])
    out: list[ItemResult] = []
    for i, f in enumerate(futures):
        exc = f if isinstance(f, BaseException) else f.exception()
        if exc is None:
            out.append(ItemResult(index=i, ok=True, value=f.result()))  # type: ignore[union-attr]
        else:
            tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
            out.append(ItemResult(index=i, ok=False, error=f"{type(exc).__name__}: {exc}",
                                  worker_lost=is_worker_lost(exc), traceback=tb))
    return out


def values_or_raise(results: Sequence[ItemResult]) -> list[Any]:
    """The values of :func:`map_over_executor` results; raises RuntimeError listing every failed index."""
    bad = [r for r in results if not r.ok]
    if bad:
        raise RuntimeError("; ".join(f"item {r.index}: {r.error}" for r in bad))
    return [r.value for r in results]
