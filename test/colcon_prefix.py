"""Helpers for tests of the installed package: build it into a colcon-style install prefix, and the environment
of that prefix's ``setup.bash``."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def install_prefix() -> Path:
    """Build the package into a fresh prefix as colcon's ament_python build does. The prefix is at a fixed place
    per clone (emptied first) so the numba caches of the installed modules stay valid between runs."""
    tag = hashlib.sha1(str(ROOT).encode()).hexdigest()[:10]
    base = Path(tempfile.gettempdir()) / f"vehcal_install_test_{tag}"
    prefix, build = base / "install", base / "build"
    for d in (prefix, build):
        shutil.rmtree(d, ignore_errors=True)
    build.mkdir(parents=True)
    # colcon-ros ament_python: setup.py egg_info/build/install --single-version-externally-managed + install_data
    cmd = [sys.executable, "setup.py", "egg_info", "--egg-base", str(build), "build", "--build-base",
           str(build / "build"), "install", "--prefix", str(prefix), "--record", str(build / "install.log"),
           "--single-version-externally-managed", "install_data"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return prefix


def site_packages(prefix: Path) -> Path:
    """The install prefix's site-packages directory."""
    rel = Path(sysconfig.get_path("purelib")).relative_to(sysconfig.get_path("data"))
    return prefix / rel


def installed_env(prefix: Path, base: Path) -> dict[str, str]:
    """The environment of ``source install/setup.bash``: AMENT_PREFIX_PATH and the install's site-packages
    first; the source tree is NOT on the path."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "AMENT_PREFIX_PATH")}
    env.update(AMENT_PREFIX_PATH=str(prefix), PYTHONPATH=str(site_packages(prefix)),
               NUMBA_CACHE_DIR=str(base / "numba_cache"), PYTHONUNBUFFERED="1")
    return env
