"""numba's cache keyed by the kernels' sources: a kernel whose callee in another file changed is compiled again.

numba checks only the caller's own source before loading its cached machine code, and the callee is compiled into
it. Two real processes over one package of two kernel files, ``callee.py`` and ``caller.py``: the first compiles
and caches, then ``callee.py`` changes and the second must run the new code.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from vehcal_ros.numba_cache import MARK, configure, source_key

ROOT = Path(__file__).resolve().parents[2]

CALLEE = "from numba import njit\n\n\n@njit(cache=True)\ndef value():\n    return {v}\n"
CALLER = ("from numba import njit\n\nfrom kernels.callee import value\n\n\n@njit(cache=True)\n"
          "def twice():\n    return 2 * value()\n")
PROBE = ("import sys\nfrom pathlib import Path\nfrom vehcal_ros.numba_cache import configure\n"
         "configure(Path(sys.argv[1]) / 'kernels')\nfrom kernels.caller import twice\nprint(twice())\n")


def _run(tmp_path: Path, env: dict[str, str]) -> int:
    proc = subprocess.run([sys.executable, str(tmp_path / "probe.py"), str(tmp_path)], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return int(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_a_changed_callee_in_another_file_is_not_served_from_the_cache(tmp_path) -> None:
    pkg = tmp_path / "kernels"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "callee.py").write_text(CALLEE.format(v=1))
    (pkg / "caller.py").write_text(CALLER)
    (tmp_path / "probe.py").write_text(PROBE)
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", MARK)}
    env.update(XDG_CACHE_HOME=str(tmp_path / "cache"),
               PYTHONPATH=os.pathsep.join([str(ROOT), str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    assert _run(tmp_path, env) == 2
    assert any((tmp_path / "cache").rglob("*.nbi")), "the first process cached nothing"
    (pkg / "callee.py").write_text(CALLEE.format(v=5))
    assert _run(tmp_path, env) == 10


def test_the_key_follows_the_kernel_sources_only(tmp_path, monkeypatch) -> None:
    (tmp_path / "kernel.py").write_text("import numba\n")
    (tmp_path / "plain.py").write_text("x = 1\n")
    key = source_key(tmp_path)
    (tmp_path / "plain.py").write_text("x = 2\n")
    assert source_key(tmp_path) == key          # no kernel changed: the cache stays
    (tmp_path / "kernel.py").write_text("import numba  # edited\n")
    assert source_key(tmp_path) != key
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "mine"))
    monkeypatch.delenv(MARK, raising=False)
    assert configure(tmp_path) is None and os.environ["NUMBA_CACHE_DIR"] == str(tmp_path / "mine")  # the user's
