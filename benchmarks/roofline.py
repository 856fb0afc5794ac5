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

The counts are stored in ``results/roofline_counts.json``; the benchmarks read them.

Run: ``.venv/bin/python benchmarks/roofline.py [--count-8dof]`` prints the probes (and stores the count).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np
from numba import njit

HERE = Path(__file__).resolve().parent
COUNTS = HERE / "results" / "roofline_counts.json"
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
def _ieee_div(a: float, b: float) -> float:
    """a / b as the kernels' ``error_model="numpy"`` computes it (inf/nan instead of ZeroDivisionError)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return float(np.float64(a) / np.float64(b))


class _Count:
    flops = 0
    divisions = 0
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
        _Count.divisions += 1
        return self._op(o, _ieee_div)

    def __rtruediv__(self, o):
        _Count.divisions += 1
        return self._op(o, lambda a, b: _ieee_div(b, a))

    def __floordiv__(self, o):
        return self._op(o, lambda a, b: a // b)

    def __mod__(self, o):
        return self._op(o, lambda a, b: a % b)

    def __rpow__(self, o):
        _Count.transcendental += 1
        return _F(float(o) ** float(self))

    def __pos__(self):
        return self

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
    def fabs(x):
        _Count.flops += 1
        return _F(math.fabs(float(x)))

    @staticmethod
    def isfinite(x):
        return math.isfinite(float(x))

    def __getattr__(self, name):
        fn = getattr(math, name)
        if not callable(fn):
            return fn

        def counted(*args):
            _Count.transcendental += 1
            _Count.by_name[name] = _Count.by_name.get(name, 0) + 1
            return _F(fn(*[float(a) for a in args]))

        return counted


class _NdArr:
    """An n-d array of :class:`_F` (numpy object array) whose element loads and stores are counted; slicing gives a
    counted view. Floats stored into it are converted to :class:`_F`; ``computed_plain`` counts stored values that were
    plain floats other than the literals 0, 1, -1 and the simulator's per-chunk inputs (``Hmmwv14.step``), i.e.
    results computed outside the counting type (uncounted work): it must stay 0."""

    computed_plain = 0

    def __init__(self, values) -> None:
        a = np.asarray(values)
        if a.dtype == object:
            self.a = a
        elif a.dtype.kind == "f":
            self.a = np.empty(a.shape, dtype=object)
            self.a.ravel()[:] = [_F(x) for x in a.ravel()] if a.size else []
        else:
            self.a = a  # integer arrays stay as they are (indices)

    @property
    def shape(self):
        return self.a.shape

    def __len__(self) -> int:
        return len(self.a)

    def __getitem__(self, i):
        r = self.a[i]
        if isinstance(r, np.ndarray):
            return _NdArr(r)
        _Count.loads += 1
        return r

    def __setitem__(self, i, x):
        if isinstance(x, _NdArr):
            x = x.a
        if np.ndim(self.a[i]) == 0:
            _Count.stores += 1
            if not isinstance(x, _F) and float(x) not in (0.0, 1.0, -1.0) \
                    and sys._getframe(1).f_code.co_name != "step":
                _NdArr.computed_plain += 1
            self.a[i] = _F(x) if self.a.dtype == object else x
        else:
            n = int(np.size(self.a[i]))
            _Count.stores += n
            vals = np.broadcast_to(np.asarray(x, dtype=object), np.shape(self.a[i]))
            self.a[i] = np.vectorize(_F, otypes=[object])(vals) if self.a.dtype == object else vals

    def floats(self) -> np.ndarray:
        return np.asarray([float(x) for x in self.a.ravel()]).reshape(self.a.shape)


class _Numpy:
    """``numpy`` for the counted run: the kernels' own allocations (``np.empty``/``np.zeros``) are counted arrays."""

    @staticmethod
    def empty(shape, dtype=float):
        return _NdArr(np.zeros(shape, dtype=dtype))

    zeros = empty

    def __getattr__(self, name):
        return getattr(np, name)


def _py_funcs(modules, *, numpy_too: bool = False) -> list:
    """Swap every numba dispatcher in ``modules`` for its Python original and ``math`` (and ``np``) for the
    counting shims; returns what to restore."""
    from numba.core.registry import CPUDispatcher

    saved = []
    for mod in modules:
        for name, obj in list(vars(mod).items()):
            if isinstance(obj, CPUDispatcher):
                saved.append((mod, name, obj))
                setattr(mod, name, obj.py_func)
        if hasattr(mod, "math"):
            saved.append((mod, "math", mod.math))
            mod.math = _Math()
        if numpy_too and hasattr(mod, "np"):
            saved.append((mod, "np", mod.np))
            mod.np = _Numpy()
    return saved


def _restore(saved: list) -> None:
    for mod, name, obj in reversed(saved):
        setattr(mod, name, obj)


def _reset_counts() -> None:
    for name in ("flops", "divisions", "compares", "transcendental", "loads", "stores"):
        setattr(_Count, name, 0)
    _Count.by_name = {}
    _NdArr.computed_plain = 0


def _per_step(steps: int) -> dict[str, float]:
    return {"fp_ops_per_step": _Count.flops / steps, "divisions_per_step": _Count.divisions / steps,
            "compares_per_step": _Count.compares / steps,
            "transcendental_calls_per_step": _Count.transcendental / steps,
            "transcendental_by_name_per_step": {k: v / steps for k, v in sorted(_Count.by_name.items())},
            "bytes_loaded_per_step": 8.0 * _Count.loads / steps, "bytes_stored_per_step": 8.0 * _Count.stores / steps,
            "steps": steps}


def count_14dof(seconds: float = 20.0, window: float = 0.05, every: float = 0.5) -> dict[str, float]:
    """Executed operations per semi-implicit 14-DOF step on ``bench_hmmwv.py``'s maneuver (``seconds`` of it):
    the compiled kernel runs the maneuver, and every ``every`` seconds a ``window`` of it runs instead in the
    Python originals of every kernel (``integrate`` and all it calls) on counted numpy object arrays of
    :class:`_F` (the state, inputs, packed parameters and work arrays; the kernels' own ``np.empty`` likewise),
    after which the compiled kernel continues from the counted run's state. The end state must equal that of an
    all-compiled run (same branches, same arithmetic: no fast-math, so Python's and LLVM's IEEE operations agree)."""
    import importlib

    from bench_hmmwv import maneuver

    from vehcal_ros.models.vehicle14 import Hmmwv14

    names = ("vec3", "road", "tires", "kinematics", "dynamics")
    mods = [importlib.import_module(f"vehcal_ros.models.vehicle14.{n}") for n in names]
    mods.append(importlib.import_module("vehcal_ros.models.powertrain"))
    ref = Hmmwv14(integrator="semi_implicit")
    ref.reset(speed=5.0)
    maneuver(ref, seconds)
    sim = Hmmwv14(integrator="semi_implicit")
    sim.reset(speed=5.0)
    plain = (sim._y, sim._u, sim._args())
    work_bytes = 8 * (sum(a.size for a in plain[2][:-1]) + sum(a.size for a in plain[2][-1]))
    _reset_counts()
    computed_plain_stores = 0
    steps, t = 0, 0.0
    while t < seconds - 1e-9:
        t_next = min(t + every, seconds)
        maneuver(sim, t_next - t - window, start=t)                      # compiled
        saved = _py_funcs(mods, numpy_too=True)
        try:
            sim._y, sim._u = _NdArr(plain[0]), _NdArr(plain[1])
            sim._args_cache = tuple(_NdArr(a) for a in plain[2][:-1]) + (tuple(_NdArr(w) for w in plain[2][-1]),)
            maneuver(sim, window, start=t_next - window)                 # counted
            counted = (sim._y, sim._u, sim._args_cache)
        finally:
            _restore(saved)
            sim._y, sim._u, sim._args_cache = plain
        plain[0][:], plain[1][:] = counted[0].floats(), counted[1].floats()
        for dst, src in zip(plain[2][:-1], counted[2][:-1]):
            dst[...] = src.floats()
        for dst, src in zip(plain[2][-1], counted[2][-1]):
            dst[...] = src.floats()
        computed_plain_stores += _NdArr.computed_plain
        _NdArr.computed_plain = 0
        steps += int(round(window / sim.dt))
        t = t_next
    end = sim.state
    diff = float(np.max(np.abs(end - ref.state)))
    if not np.allclose(end, ref.state, rtol=1e-9, atol=1e-9):
        raise RuntimeError(f"the counted run does not reproduce the compiled kernel's end state: max |diff| {diff:.3g}")
    return {**_per_step(steps), "computed_plain_float_stores": computed_plain_stores,
            "parameter_and_work_bytes": work_bytes, "max_abs_end_state_difference_vs_compiled": diff,
            "method": f"counted Python originals of integrate (semi-implicit) and its callees: {window:g} s of "
                      f"bench_hmmwv.py's maneuver every {every:g} s over {seconds:g} s (the compiled kernel "
                      "between), inputs held 10 steps"}


def count_8dof() -> dict[str, float]:
    """Executed operations per 8-DOF step on the benchmark maneuver (see the module docstring)."""
    from bench_8dof_sim import test_maneuver

    import vehcal_ros.models.fiala as fiala
    import vehcal_ros.models.powertrain as powertrain
    import vehcal_ros.models.vehicle_8dof as v8

    t, thr, br, st, x0 = test_maneuver()
    sim = v8.Simulator8Dof(x0, t, thr, br, st, dt=0.005)
    p = v8.parameter_vector({"Cxf": 10659, "Cxr": 10280, "Cyf": 44016, "Cyr": 54046, "kphi_f": 36245,
                             "kphi_r": 26439, "bphi_f": 3863, "bphi_r": 3863, "rr": 0.0131})
    s0 = sim.x0.copy()
    fz0 = np.zeros(5)
    q0 = np.empty(v8.N_DERIVED)   # the run's derived constants (reciprocals): once per run, not per step
    v8._derived(sim.k, q0)
    v8._initial_loads(sim.k, q0, p, s0, fz0)
    saved = _py_funcs((v8, fiala, powertrain))
    try:
        k, q, pa, s, fz = _Arr(sim.k), _Arr(q0), _Arr(p), _Arr(s0), _Arr(fz0)
        _reset_counts()
        steps = sim.inputs.shape[0]
        for i in range(steps):
            row = sim.inputs[i]
            v8._step(k, q, pa, s, fz, _Arr(row), _F(sim.dt), True)
    finally:
        _restore(saved)
    ref = sim.run(p)[-1]
    if not np.allclose([float(x) for x in s.v], ref, rtol=1e-9, atol=1e-9):
        raise RuntimeError("the counted run does not reproduce the compiled kernel's end state")
    return {**_per_step(steps), "method": "counted Python original of _step (py_func), benchmark maneuver"}


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
    ap.add_argument("--count-14dof", action="store_true",
                    help="count the semi-implicit 14-DOF step's operations (~2 min)")
    ap.add_argument("--no-peaks", action="store_true", help="skip the machine probes")
    args = ap.parse_args()
    if not args.no_peaks:
        print(json.dumps({"peaks": machine_peaks(), "load_average": os.getloadavg()[0]}, indent=1))
    if args.count_8dof:
        _store("8dof", count_8dof())
    if args.count_14dof:
        _store("14dof_semi_implicit", count_14dof())
    print(json.dumps(load_counts(), indent=1))


if __name__ == "__main__":
    main()
