"""Roofline-style limits of this machine, and where a model kernel's step sits against them.

Machine probes (best of many short repeats, so a time slice on a core of the shared machine is enough):

* ``fma_vector``: a register-resident block of 64 doubles updated ``y = y * a + b`` (numba, fastmath: one FMA
  per element, vectorised by LLVM to the widest SIMD unit) -> the per-core peak in GFLOP/s;
* ``fma_scalar_chain``: ONE dependent chain ``y = y * a + b`` -> the latency-bound scalar rate (what a single
  serial dependency chain gets, the shape of an ODE step's critical path);
* ``stream_copy``: ``np.copyto`` of a 64 MiB array -> memory bandwidth in GB/s (bytes read + written).

A kernel's arithmetic per step is counted dynamically, not estimated from source: valgrind's ``lackey`` tool
(``--detailed-counts=yes``) counts every executed floating-point IR operation (add, sub, mul, div, sqrt, FMA
as two) and every load and store of a short Python driver, once with ``n`` runs of the kernel and once with
none; the difference over ``n`` x steps is the per-step count (interpreter start-up and the numba cache load
cancel). Transcendentals (sin, cos, atan2, exp, pow, tan) run in libm and are counted by their own
instructions. The counts are stored in ``roofline_counts.json`` by ``python benchmarks/roofline.py --count``
(minutes under valgrind); the benchmarks read them.

Run: ``.venv/bin/python benchmarks/roofline.py [--count]`` prints the probes (and re-counts the kernels).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
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


# ---------------------------------------------------------------------------------------------- lackey counts
JIT_CPU = "haswell"
"""valgrind 3.19 decodes AVX2/FMA but not AVX-512: the counted runs JIT for this CPU (cache warmed natively)."""


def _lackey(script: str, arg: int) -> dict[str, float]:
    """Run ``script arg`` under valgrind lackey: executed floating-point ALU ops and bytes loaded/stored.

    lackey reports IR-level operations by result type: scalar ``F64`` ops (add, sub, mul, div, sqrt, neg, FMA,
    conversions) count one flop each; ``V128``/``V256`` ops count 2/4 (double lanes)."""
    cmd = ["valgrind", "--tool=lackey", "--detailed-counts=yes", "--trace-children=yes", sys.executable, script,
           str(arg)]
    env = {**os.environ, "NUMBA_NUM_THREADS": "1", "NUMBA_CPU_NAME": JIT_CPU}
    subprocess.run([sys.executable, script, "1"], env=env, check=True)  # warm the numba cache for JIT_CPU
    err = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True).stderr
    size = {"I1": 1, "I8": 1, "I16": 2, "I32": 4, "I64": 8, "I128": 16, "F32": 4, "F64": 8, "F128": 16,
            "V128": 16, "V256": 32, "D32": 4, "D64": 8, "D128": 16}
    lanes = {"F32": 1, "F64": 1, "V128": 2, "V256": 4}
    counts = {"flops": 0.0, "loads": 0.0, "stores": 0.0}
    blocks = err.split("IR-level counts by type:")[1:]
    if not blocks:
        raise RuntimeError(f"no lackey summary in the valgrind output:\n{err[-2000:]}")
    for line in blocks[-1].splitlines():  # the last process to exit: python itself
        m = re.match(r"^==\d+==\s+([A-Z]\d+)\s+([\d,]+)\s+([\d,]+)\s+([\d,]+)", line)
        if not m or m.group(1) not in size:
            continue
        ld, st, alu = (int(g.replace(",", "")) for g in m.groups()[1:])
        counts["loads"] += ld * size[m.group(1)]
        counts["stores"] += st * size[m.group(1)]
        counts["flops"] += alu * lanes.get(m.group(1), 0)
    return counts


def count_kernel(script: str, n: int, steps_per_run: int) -> dict[str, float]:
    """Per-step executed FP ALU ops and bytes loaded/stored of ``script`` (see the module docstring)."""
    a = _lackey(script, 0)
    b = _lackey(script, n)
    steps = n * steps_per_run
    return {"fp_ops_per_step": (b["flops"] - a["flops"]) / steps,
            "bytes_loaded_per_step": (b["loads"] - a["loads"]) / steps,
            "bytes_stored_per_step": (b["stores"] - a["stores"]) / steps, "runs": n, "steps_per_run": steps_per_run}


def roofline_row(counts: dict[str, float] | None, ns_per_step: float, peaks: dict[str, float]) -> dict[str, float]:
    """Achieved rate of a kernel step against the peaks (None counts: only the time)."""
    if not counts:
        return {"ns_per_step": ns_per_step}
    flops = counts["fp_ops_per_step"]
    bytes_ = counts["bytes_loaded_per_step"] + counts["bytes_stored_per_step"]
    gflops = flops / ns_per_step
    return {"ns_per_step": ns_per_step, "fp_ops_per_step": flops, "bytes_per_step_l1": bytes_,
            "arithmetic_intensity_flop_per_byte": flops / bytes_ if bytes_ else float("nan"),
            "achieved_gflops": gflops,
            "fraction_of_vector_peak": gflops / peaks["fma_vector_gflops_per_core"],
            "fraction_of_scalar_chain": gflops / peaks["fma_scalar_chain_gflops"],
            "floor_ns_at_vector_peak": flops / peaks["fma_vector_gflops_per_core"],
            "floor_ns_at_bandwidth": bytes_ / peaks["stream_copy_gb_s"]}


def load_counts() -> dict:
    return json.loads(COUNTS.read_text()) if COUNTS.exists() else {}


_DRIVER_8DOF = """
import sys
sys.path.insert(0, {bench!r})
import numpy as np
from bench_8dof_sim import test_maneuver
from vehcal_ros.models.vehicle_8dof import Simulator8Dof, _simulate_one, parameter_vector
t, thr, br, st, x0 = test_maneuver()
sim = Simulator8Dof(x0, t, thr, br, st, dt=0.005)
p = parameter_vector({{}})
out = np.empty((sim.n_out, 12))
for _ in range(int(sys.argv[1])):
    _simulate_one(sim.k, p, sim.x0, sim.inputs, sim.dt, sim.n_sub, out)
"""

_DRIVER_14DOF = """
import sys
sys.path.insert(0, {bench!r})
from bench_hmmwv import maneuver
from vehcal_ros.models.hmmwv import Hmmwv14
sim = Hmmwv14(integrator="semi_implicit")
sim.reset(speed=5.0)
n = int(sys.argv[1])
maneuver(sim, 0.01 * n)
"""


def count_all(n8: int = 20, n14: int = 100) -> dict:
    """Count both kernels under valgrind and store the result in ``roofline_counts.json``."""
    from vehcal_ros.models.hmmwv import Hmmwv14

    dt14 = Hmmwv14(integrator="semi_implicit").dt
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, src, n, steps in (("8dof", _DRIVER_8DOF, n8, 2300),
                                    ("14dof_semi_implicit", _DRIVER_14DOF, n14, int(round(0.01 / dt14)))):
            path = Path(tmp) / f"{name}.py"
            path.write_text(src.format(bench=str(HERE)))
            out[name] = count_kernel(str(path), n, steps)
    out["counted"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    out["tool"] = "valgrind --tool=lackey --detailed-counts=yes (difference of n runs and 0 runs)"
    COUNTS.write_text(json.dumps(out, indent=1))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", action="store_true", help="re-count the kernels under valgrind (minutes)")
    args = ap.parse_args()
    peaks = machine_peaks()
    print(json.dumps({"peaks": peaks, "load_average": os.getloadavg()[0]}, indent=1))
    if args.count:
        print(json.dumps(count_all(), indent=1))


if __name__ == "__main__":
    main()
