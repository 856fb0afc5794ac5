"""The numba kernels give the same numbers whether a process compiled them (cold cache) or loaded them from the
on-disk cache (warm): replay, live nodes and worker processes agree bit for bit on a fresh machine.

With LLVM fast-math flags they did not (the brake residual differed by 3.6e-14, an 18 s 14-DOF run by 2e-12), so
the parallel fits were not bit-identical to the serial ones on CI's fresh clone. Two real processes share one
empty ``NUMBA_CACHE_DIR``: the first compiles and writes the cache, the second loads it.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]

PROBE = r"""
import pickle, sys
import numpy as np
from vehcal_ros.estimation.calibration.brake_fit import FIT_NAMES, TRUE_PARAMETERS, BrakeResidual, synthetic_data
from vehcal_ros.models.vehicle14 import Hmmwv14

truth = np.array([TRUE_PARAMETERS[n] for n in FIT_NAMES])
res = BrakeResidual(synthetic_data(2, seed=1, dt=0.005), dt=0.005)
out = [res(truth), res(truth * 1.001)]
sim = Hmmwv14()
sim.reset(speed=5.0)
for k in range(300):
    t = 0.01 * k
    sim.step(min(0.5, 0.2 * t), 0.0, 0.15 * np.sin(0.8 * t), 10)
out.append(np.array(sim.state, dtype=float).ravel())
pickle.dump(out, open(sys.argv[1], "wb"))
"""


@pytest.mark.slow
def test_cold_compiled_and_cache_loaded_kernels_agree_bitwise(tmp_path) -> None:
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba_cache"),
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    runs = []
    for name in ("cold", "warm"):
        out = tmp_path / f"{name}.pkl"
        proc = subprocess.run([sys.executable, str(script), str(out)], env=env, capture_output=True, text=True,
                              timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        runs.append(pickle.loads(out.read_bytes()))
    assert any((tmp_path / "numba_cache").rglob("*.nbc")), "the first process wrote no cache"
    for cold, warm in zip(*runs):
        assert np.all(np.isfinite(cold))
        assert np.array_equal(cold, warm), float(np.max(np.abs(cold - warm)))
