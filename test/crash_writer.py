"""The writer that test_crash_safety kills (not a test module): versions of a state file and a params YAML.

``python test/crash_writer.py STATE PARAMS`` imports once, then for each line ``K`` on stdin forks a child that
rewrites both files (``write_atomic``) with versions K, K+1, ... in a tight loop and prints the child's pid once
its first pair is written; the test kills that child with SIGKILL.
"""

from __future__ import annotations

import datetime as dt
import os
import sys

import yaml

from vehcal_ros.atomic_files import write_atomic
from vehcal_ros.io.calibration_state import StageState, state_text

SAVED_AT = dt.datetime(2026, 11, 24, tzinfo=dt.timezone.utc)


def version_state(k: int) -> dict[str, StageState]:
    """Version ``k`` of an accepted rolling-resistance stage (rr mean = 0.004 + k 1e-6)."""
    summ = {"mean": 0.004 + k * 1e-6, "std": 1e-4, "hdi_low": 0.0038, "hdi_high": 0.0042, "r_hat": 1.002,
            "ess_bulk": 800.0, "ess_tail": 700.0}
    noise = {"u": {**summ, "mean": 0.1}, "omega": {**summ, "mean": 0.05}}
    return {"rolling_resistance": StageState({"rr": summ}, noise, True, (20.5, 30.5), 1.2)}


PAD = "".join(f"# padding line {i:06d}: makes a write take a while, so kills land inside writes\n"
              for i in range(16000))


def params_text(k: int) -> str:
    """Version ``k`` of a params YAML, padded with ~1 MB of comments so that a write takes a while."""
    body = {"model_calibrator": {"ros__parameters": {"version": k, "model": {"rr": 0.004 + k * 1e-6}}}}
    return yaml.safe_dump(body, sort_keys=False) + PAD


def write_loop(state: str, params: str, k: int, ready_fd: int) -> None:
    first = True
    while True:
        write_atomic(state, state_text(state, "truck7", version_state(k), now=SAVED_AT))
        write_atomic(params, params_text(k))
        if first:
            os.write(ready_fd, b"x")
            os.close(ready_fd)
            first = False
        k += 1


def main() -> None:
    state, params = sys.argv[1], sys.argv[2]
    for line in sys.stdin:
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            write_loop(state, params, int(line), w)
        os.close(w)
        os.read(r, 1)          # the child has written its first pair
        os.close(r)
        print(pid, flush=True)
        os.waitpid(pid, 0)     # until the test kills it
        print("reaped", flush=True)


if __name__ == "__main__":
    main()
