"""`vehcal run estimate`: a bad params file is one line and exit 2 before any node starts.

The live end-to-end check against the simulator's truth is not here yet: see the README, "Limitations".
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
VEHCAL = [sys.executable, "-m", "vehcal_ros.cli"]

pytestmark = pytest.mark.ros


def test_run_estimate_rejects_bad_params_file(tmp_path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("grip_estimator:\n  ros__parameters:\n    n_chains: 8\n    no_such_key: 1\n")
    proc = subprocess.run([*VEHCAL, "run", "estimate", "--params", str(bad)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "no_such_key" in lines[0] and "unknown parameter" in lines[0]
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text("grip_estimator:\n  ros__parameters:\n    fit_period: 5\n")
    proc = subprocess.run([*VEHCAL, "run", "estimate", "--params", str(wrong)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2 and "fit_period" in proc.stderr and "floating-point" in proc.stderr
