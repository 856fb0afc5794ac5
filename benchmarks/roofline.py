"""Roofline-style limits of this machine, and where a model kernel's step sits against them.

Machine probes (best of many short repeats, so a time slice on a core of the shared machine is enough):

* ``fma_vector``: a register-resident block of 64 doubles updated ``y = y * a + b`` (numba, fastmath: one FMA
  per element, vectorised by LLVM to the widest SIMD unit) -> the per-core peak in GFLOP/s;
* ``fma_scalar_chain``: ONE dependent chain ``y = y * a + b`` -> the latency-bound scalar rate (what a single
  serial dependency chain gets, the shape of an ODE step's critical path);
* ``stream_copy``: ``np.copyto`` of a 64 MiB array -> memory bandwidth in GB/s (bytes read + written).

A kernel's arithmetic per step is counted dynamically, not estimated from source:

* 8-DOF (``count_8dof``): the step's Python original (``_step.py_func``, with every numba callee swapped for
  its ``py_func``) runs the benchmark maneuver on a float subclass that counts each executed +, -, *, /,
  negation, abs, sqrt and copysign (one flop each; an FMA in the compiled code does two), compares
  separately, transcendental calls (sin, cos, ...) separately, and array element loads and stores. The branches
  taken are the real ones (tire regimes, brake, clamps).
* 14-DOF: not counted. Its kernels work on numpy arrays throughout (the counting float type does not pass
  through them), and valgrind's ``lackey`` (a dynamic count of every executed floating-point IR operation)
  did not get through the Python start-up within 45 min on the loaded machine (2026-11-24); the 14-DOF row
  has the measured time per step and the memory floor only.

The counts are stored in ``roofline_counts.json``; the benchmarks read them.

Run: ``.venv/bin/python benchmarks/roofline.py [--count-8dof]`` prints the probes (and stores the count).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from pathlib import Path

import numpy as np
from numba import njit

HERE = Path(__file__).resolve().parent
COUNTS = HERE / "roofline_counts.json"
FASTMATH = {"nsz", "arcp", "contract", "afn", "reassoc"}


@njit(cache=True, fastmath=FASTMATH)
def _fma_block(reps: int, a: float, b: float) -> float:
    y = np.empty(64)
    for i in range(64):
        y[i] = 1.0 + 1e-3 * i
    for _ in range(reps):
        for i in range(64):
            y[i] = y[i] * a + b
    return y.sum()


@njit(cache=True, fastmath=FASTMATH)
def _fma_chain(reps: int, a: float, b: float) -> float:
    y = 1.0
    for _ in range(reps):
        y = y * a + b
    return y


def _best_rate(fn, work: float, repeats: int = 30) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return work / best


def machine_peaks(repeats: int = 30) -> dict[str, float]:
    """Measured per-core FMA peaks (GFLOP/s) and memory bandwidth (GB/s), best of ``repeats``."""
    reps = 20000
    _fma_block(10, 0.999, 1e-3)
    _fma_chain(10, 0.999, 1e-3)
    vec = _best_rate(lambda: _fma_block(reps, 0.999999, 1e-6), 2.0 * 64 * reps, repeats) / 1e9
    chain = _best_rate(lambda: _fma_chain(reps * 16, 0.999999, 1e-6), 2.0 * reps * 16, repeats) / 1e9
    n = 8 * 1024 * 1024
    src = np.ones(n)
    dst = np.empty(n)
    np.copyto(dst, src)
    bw = _best_rate(lambda: np.copyto(dst, src), 2.0 * 8 * n, max(5, repeats // 3)) / 1e9
    return {"fma_vector_gflops_per_core": vec, "fma_scalar_chain_gflops": chain, "stream_copy_gb_s": bw,
            "cores": float(os.cpu_count() or 1)}


# ------------------------------------------------------------------------------------------- counted execution
class _Count:
    flops = 0
    compares = 0
    transcendental = 0
    by_name: dict[str, int] = {}
    loads = 0
    stores = 0


class _F(float):
    """A float whose arithmetic is counted in :class:`_Count`."""

    def _op(self, other, fn):
        _Count.flops += 1
        return _F(fn(float(self), float(other)))

    def __add__(self, o):
        return self._op(o, lambda a, b: a + b)

    def __radd__(self, o):
        return self._op(o, lambda a, b: b + a)

    def __sub__(self, o):
        return self._op(o, lambda a, b: a - b)

    def __rsub__(self, o):
        return self._op(o, lambda a, b: b - a)

    def __mul__(self, o):
        return self._op(o, lambda a, b: a * b)

    def __rmul__(self, o):
        return self._op(o, lambda a, b: b * a)

    def __truediv__(self, o):
        return self._op(o, lambda a, b: a / b)

    def __rtruediv__(self, o):
        return self._op(o, lambda a, b: b / a)

    def __pow__(self, o):
        _Count.flops += 1 if float(o) == 2.0 else 0
        _Count.transcendental += 0 if float(o) == 2.0 else 1
        return _F(float(self) ** float(o))

    def __neg__(self):
        _Count.flops += 1
        return _F(-float(self))

    def __abs__(self):
        _Count.flops += 1
        return _F(abs(float(self)))

    def _cmp(self, o, fn):
        _Count.compares += 1
        return fn(float(self), float(o))

    def __lt__(self, o):
        return self._cmp(o, lambda a, b: a < b)

    def __le__(self, o):
        return self._cmp(o, lambda a, b: a <= b)

    def __gt__(self, o):
        return self._cmp(o, lambda a, b: a > b)

    def __ge__(self, o):
        return self._cmp(o, lambda a, b: a >= b)

    __hash__ = float.__hash__


class _Arr:
    """An array of :class:`_F` whose element loads and stores are counted."""

    def __init__(self, values) -> None:
        self.v = [_F(x) for x in np.ravel(values)]

    def __getitem__(self, i):
        _Count.loads += 1
        return self.v[i]

    def __setitem__(self, i, x):
        _Count.stores += 1
        self.v[i] = _F(x)


class _Math:
    """``math`` for the counted run: sqrt/copysign are flops, the rest transcendental calls."""

    pi = math.pi
    inf = math.inf

    @staticmethod
    def sqrt(x):
        _Count.flops += 1
        return _F(math.sqrt(float(x)))

    @staticmethod
    def copysign(a, b):
        _Count.flops += 1
        return _F(math.copysign(float(a), float(b)))

    @staticmethod
    def isfinite(x):
        return math.isfinite(float(x))

    def __getattr__(self, name):
        fn = getattr(math, name)

        def counted(*args):
            _Count.transcendental += 1
            _Count.by_name[name] = _Count.by_name.get(name, 0) + 1
            return _F(fn(*[float(a) for a in args]))

        return counted


def count_8dof() -> dict[str, float]:
    """Executed operations per 8-DOF step on the benchmark maneuver (see the module docstring)."""
    from bench_8dof_sim import test_maneuver
    from numba.core.registry import CPUDispatcher

    import vehcal_ros.models.fiala as fiala
    import vehcal_ros.models.powertrain as powertrain
    import vehcal_ros.models.vehicle_8dof as v8

    t, thr, br, st, x0 = test_maneuver()
    sim = v8.Simulator8Dof(x0, t, thr, br, st, dt=0.005)
    p = v8.parameter_vector({"Cxf": 10659, "Cxr": 10280, "Cyf": 44016, "Cyr": 54046, "kphi_f": 36245,
                             "kphi_r": 26439, "bphi_f": 3863, "bphi_r": 3863, "rr": 0.0131})
    s0 = sim.x0.copy()
    fz0 = np.zeros(5)
    v8._initial_loads(sim.k, p, s0, fz0)
    saved = []
    try:
        for mod in (v8, fiala, powertrain):
            for name, obj in list(vars(mod).items()):
                if isinstance(obj, CPUDispatcher):
                    saved.append((mod, name, obj))
                    setattr(mod, name, obj.py_func)
            if hasattr(mod, "math"):
                saved.append((mod, "math", mod.math))
                mod.math = _Math()
        k, pa, s, fz = _Arr(sim.k), _Arr(p), _Arr(s0), _Arr(fz0)
        for name in ("flops", "compares", "transcendental", "loads", "stores"):
            setattr(_Count, name, 0)
        _Count.by_name = {}
        steps = sim.inputs.shape[0]
        for i in range(steps):
            row = sim.inputs[i]
            v8._step(k, pa, s, fz, _Arr(row), _F(sim.dt))
    finally:
        for mod, name, obj in saved:
            setattr(mod, name, obj)
    ref = sim.run(p)[-1]
    if not np.allclose([float(x) for x in s.v], ref, rtol=1e-9, atol=1e-9):
        raise RuntimeError("the counted run does not reproduce the compiled kernel's end state")
    return {"fp_ops_per_step": _Count.flops / steps, "compares_per_step": _Count.compares / steps,
            "transcendental_calls_per_step": _Count.transcendental / steps,
            "transcendental_by_name_per_step": {k: v / steps for k, v in sorted(_Count.by_name.items())},
            "bytes_loaded_per_step": 8.0 * _Count.loads / steps, "bytes_stored_per_step": 8.0 * _Count.stores / steps,
            "steps": steps, "method": "counted Python original of _step (py_func), benchmark maneuver"}


def roofline_row(counts: dict[str, float] | None, ns_per_step: float, peaks: dict[str, float],
                 stream_bytes_per_step: float) -> dict[str, float]:
    """A kernel step against the machine: achieved GFLOP/s, its fraction of the per-core vector FMA peak and
    its multiple of the one-dependent-chain scalar rate, and the time floors the compute peak and the memory
    bandwidth would allow. ``stream_bytes_per_step``: bytes that must come from memory each step (inputs and
    data; state, parameters and constants stay in registers/L1). None counts: only the time and memory floor."""
    row = {"ns_per_step": ns_per_step, "stream_bytes_per_step": stream_bytes_per_step,
           "floor_ns_at_bandwidth": stream_bytes_per_step / peaks["stream_copy_gb_s"]}
    if not counts:
        return row
    flops = counts["fp_ops_per_step"]
    gflops = flops / ns_per_step
    row.update({"fp_ops_per_step": flops, "arithmetic_intensity_flop_per_stream_byte": flops / stream_bytes_per_step,
                "achieved_gflops": gflops, "fraction_of_vector_peak": gflops / peaks["fma_vector_gflops_per_core"],
                "multiple_of_scalar_chain": gflops / peaks["fma_scalar_chain_gflops"],
                "floor_ns_at_vector_peak": flops / peaks["fma_vector_gflops_per_core"],
                "floor_ns_at_scalar_chain": flops / peaks["fma_scalar_chain_gflops"]})
    if "transcendental_calls_per_step" in counts:
        row["transcendental_calls_per_step"] = counts["transcendental_calls_per_step"]
    return row


def load_counts() -> dict:
    return json.loads(COUNTS.read_text()) if COUNTS.exists() else {}


def _store(key: str, value: dict) -> None:
    doc = load_counts()
    doc[key] = {**value, "counted": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    COUNTS.write_text(json.dumps(doc, indent=1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count-8dof", action="store_true", help="count the 8-DOF step's operations (~1 min)")
    args = ap.parse_args()
    print(json.dumps({"peaks": machine_peaks(), "load_average": os.getloadavg()[0]}, indent=1))
    if args.count_8dof:
        _store("8dof", count_8dof())
    print(json.dumps(load_counts(), indent=1))


if __name__ == "__main__":
    main()
