"""Test-session set-up: every ROS 2 test talks over loopback only, on a private domain, logging to a temp dir.

The environment is fixed here, before any test imports rclpy, so node processes spawned by tests inherit it.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

_HERE = Path(__file__).resolve().parent
_TMP = tempfile.mkdtemp(prefix="vehcal_test_")
os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")   # gw0, gw1, ... under pytest-xdist
if _WORKER:   # a worker inherits its controller's domain: each worker takes its own, next to it
    _BASE = int(os.environ.get("ROS_DOMAIN_ID", "100"))
    os.environ["ROS_DOMAIN_ID"] = str(100 + (_BASE - 100 + 1 + int(_WORKER[2:])) % 100)
else:   # a private domain per test session
    os.environ.setdefault("ROS_DOMAIN_ID", str(100 + os.getpid() % 100))
os.environ["ROS_LOG_DIR"] = os.path.join(_TMP, "ros_log")
os.environ["ROS_HOME"] = os.path.join(_TMP, "ros_home")
os.environ.setdefault("RMW_IMPLEMENTATION", "rmw_fastrtps_cpp")
os.environ.setdefault("PYTHONUNBUFFERED", "1")


KINDS = ("unit", "ros", "statistical", "install")
"""The test folders: each test is marked with its folder's kind (``pytest -m unit``, ``-m "not ros"``)."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test with the kind of the folder it lives in (test/<kind>/...)."""
    for item in items:
        parts = item.path.relative_to(_HERE).parts
        if parts and parts[0] in KINDS:
            item.add_marker(getattr(pytest.mark, parts[0]))


@pytest.fixture()
def rclpy_context():
    """An initialised rclpy context for one test; shut down afterwards."""
    import rclpy
    from rclpy.context import Context

    ctx = Context()
    rclpy.init(context=ctx)
    try:
        yield ctx
    finally:
        if ctx.ok():
            rclpy.shutdown(context=ctx)
