"""OpenBLAS threads of this process, limited around a block of small linear algebra.

OpenBLAS worker threads busy-wait for a while after every call. The estimators' linear algebra is small (scipy's
trf and L-BFGS-B on 6-7 parameters, covariances of a few thousand draws), where threaded BLAS gains nothing and
the spinning threads take CPU from the work (a grip fit's ML refinement cost ~0.2 s of CPU per fit with default
threads, little with one; the least-squares solver measured ~0.5 s of a ~1.2 s solve). :class:`BlasThreads`
limits OpenBLAS to ``n`` threads in this process while a block runs (nests safely; BLAS results may depend on
the thread count, so the node and the replay, which run the same code under the same limit, stay bit-identical).
"""

from __future__ import annotations

import os
import threading
from typing import Any

_OPENBLAS_NAMES = (("", ""), ("scipy_", ""), ("scipy_", "64_"), ("", "64_"))
_blas_lock = threading.Lock()
_blas_state: dict[str, Any] = {"controls": None, "depth": 0, "saved": []}


def _openblas_controls() -> list[tuple[Any, Any]]:
    """(set, get) num-threads functions of every OpenBLAS library loaded in this process (Linux; else [])."""
    import ctypes

    out: list[tuple[Any, Any]] = []
    try:
        with open("/proc/self/maps", encoding="utf-8") as f:
            paths = sorted({ln.split()[-1] for ln in f
                            if "openblas" in ln.rsplit("/", 1)[-1].lower() and ".so" in ln.rsplit("/", 1)[-1]})
    except OSError:
        return out
    for path in paths:
        try:
            lib = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
        except OSError:
            continue
        for pre, suf in _OPENBLAS_NAMES:
            setter = getattr(lib, f"{pre}openblas_set_num_threads{suf}", None)
            getter = getattr(lib, f"{pre}openblas_get_num_threads{suf}", None)
            if setter is not None and getter is not None:
                setter.argtypes, setter.restype, getter.restype = [ctypes.c_int], None, ctypes.c_int
                out.append((setter, getter))
                break
    return out


class BlasThreads:
    """Context manager: OpenBLAS limited to ``n`` threads in this process (None: unchanged); nests safely."""

    def __init__(self, n: int | None) -> None:
        self.n = n

    def __enter__(self) -> None:
        if self.n is None:
            return
        with _blas_lock:
            if _blas_state["controls"] is None:
                _blas_state["controls"] = _openblas_controls()
            if _blas_state["depth"] == 0:
                _blas_state["saved"] = [get() for _, get in _blas_state["controls"]]
                for setter, _ in _blas_state["controls"]:
                    setter(int(self.n))
            _blas_state["depth"] += 1

    def __exit__(self, *exc: Any) -> None:
        if self.n is None:
            return
        with _blas_lock:
            _blas_state["depth"] -= 1
            if _blas_state["depth"] == 0:
                for (setter, _), old in zip(_blas_state["controls"], _blas_state["saved"]):
                    setter(int(old))
