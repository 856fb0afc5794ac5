"""Helpers for tests over real DDS: wait on conditions with a timeout (never bare sleeps), spawn node processes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence


def spin_until(executor, predicate: Callable[[], bool], timeout: float, step: float = 0.05) -> bool:
    """Spin ``executor`` until ``predicate()`` holds or ``timeout`` seconds pass; return the predicate."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        executor.spin_once(timeout_sec=step)
    return predicate()


def wait_for_match(executor, endpoint, timeout: float = 15.0) -> bool:
    """Wait until a publisher has a subscriber (or a subscription a publisher)."""
    if hasattr(endpoint, "get_subscription_count"):
        return spin_until(executor, lambda: endpoint.get_subscription_count() > 0, timeout)
    return spin_until(executor, lambda: endpoint.get_publisher_count() > 0, timeout)


def spawn(args: Sequence[str], env: dict | None = None, log_path: str | None = None) -> subprocess.Popen:
    """Start ``python -m ...`` or a console script in another process with the test's ROS environment."""
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    out = open(log_path, "w") if log_path else subprocess.DEVNULL  # noqa: SIM115
    return subprocess.Popen([sys.executable, *args], env=full_env, stdout=out, stderr=subprocess.STDOUT)


def stop(proc: subprocess.Popen, timeout: float = 10.0) -> int:
    """SIGINT (Ctrl-C) then wait; kill if it does not exit. Returns the exit code."""
    return stop_all([proc], timeout)[0]


def stop_all(procs: Iterable[subprocess.Popen], timeout: float = 10.0) -> list[int]:
    """SIGINT every process still running (all at once, as ``ros2 launch`` does), wait up to ``timeout`` s for
    each, SIGKILL those that did not exit. Returns the exit codes. Benchmarks use it too (``benchmarks/`` put
    ``test/`` on ``sys.path``)."""
    import signal

    procs = list(procs)
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGINT)
    for p in procs:
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    return [p.returncode for p in procs]
