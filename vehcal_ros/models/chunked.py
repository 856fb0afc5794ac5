"""Dynamic scheduling of a ``nogil`` numba block kernel over threads (the batch likelihood's parallel loop).

numba's ``prange`` splits a loop into one equal slice per thread up front: when another process takes part
of a core, the thread on it finishes last and the whole call waits for it (a two-thread call runs at the
speed of its slower core). Here the rows are cut into many small chunks that a pool of threads takes one at
a time (the calling thread and ``threads - 1`` pool threads, each claiming the next chunk from a shared
counter: no future per chunk), so a thread on a busy core simply takes fewer chunks: the call degrades with the
CPU actually available instead of with the busiest core. The kernel must be compiled with ``nogil=True`` (the
threads then run truly in parallel) and have the signature ``kernel(*args, lo, hi, *outs)`` for rows ``lo..hi-1``.
"""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

DEFAULT_CHUNK = 32
"""rows per chunk: ~2-3 ms of 8-DOF work per chunk on the lateral window, small against the load swings."""

_POOL: ThreadPoolExecutor | None = None
_POOL_PID = 0
_POOL_LOCK = threading.Lock()


def n_threads() -> int:
    """Threads of the pool: ``NUMBA_NUM_THREADS`` if set, else the CPUs this process may use; at most what
    ``numba.set_num_threads`` allows the calling thread (as for numba's own ``prange``)."""
    import numba

    env = os.environ.get("NUMBA_NUM_THREADS")
    if env and env.isdigit() and int(env) > 0:
        n = int(env)
    else:
        try:
            n = len(os.sched_getaffinity(0))
        except AttributeError:  # pragma: no cover - not Linux
            n = os.cpu_count() or 1
    return max(1, min(n, numba.get_num_threads()))


def _pool() -> ThreadPoolExecutor:
    """The process's pool (a new one in a forked child: the parent's threads do not exist there)."""
    global _POOL, _POOL_PID
    with _POOL_LOCK:
        if _POOL is None or _POOL_PID != os.getpid():
            _POOL = ThreadPoolExecutor(max_workers=n_threads(), thread_name_prefix="vehcal-batch")
            _POOL_PID = os.getpid()
        return _POOL


def run_chunked(kernel: Callable, args: tuple, outs: tuple, n: int, chunk: int | None = None) -> None:
    """``kernel(*args, lo, hi, *outs)`` over rows ``0..n-1`` in chunks of ``chunk`` rows (default
    :data:`DEFAULT_CHUNK`), spread dynamically over the pool's threads; serial in the calling thread when one
    thread or one chunk suffices."""
    if n <= 0:
        return
    chunk = max(1, int(chunk or DEFAULT_CHUNK))
    threads = n_threads()
    if threads == 1 or n <= chunk:
        kernel(*args, 0, n, *outs)
        return
    n_chunks = -(-n // chunk)
    claim = itertools.count()   # next() on it is atomic under the GIL: each chunk is taken exactly once

    def work() -> None:
        for k in iter(claim.__next__, None):
            if k >= n_chunks:
                return
            lo = k * chunk
            kernel(*args, lo, min(lo + chunk, n), *outs)

    helpers = [_pool().submit(work) for _ in range(min(threads, n_chunks) - 1)]
    work()                      # the calling thread takes chunks too instead of waiting
    for f in helpers:
        f.result()
