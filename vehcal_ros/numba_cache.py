"""Where numba keeps the package's compiled kernels: a directory keyed by a hash of the package's sources.

numba's on-disk cache (``cache=True``) checks the source of the function it compiled and nothing else: a kernel
that calls a kernel of another file keeps its cached machine code after that other file changed, and runs the
callee's old code (numba compiles callees into their callers). Keying the cache directory by a hash of the
package's kernel sources (every source file that mentions numba) makes any change of a kernel start an empty cache
(each kernel compiled once, on first use), so a stale kernel cannot run after an upgrade or an edit; an edit of
the other files keeps the cache.

The directory is ``$XDG_CACHE_HOME/vehcal_ros/numba/<key>`` (``~/.cache`` without ``XDG_CACHE_HOME``); ``make
clean`` removes it. A ``NUMBA_CACHE_DIR`` the user set is left as it is (keeping that one fresh is then theirs); one
this module set (marked in ``VEHCAL_NUMBA_CACHE_DIR``, inherited by child processes) is recomputed. Standard
library only: it runs when the package is imported, before any kernel is compiled.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parent
"""The package's source tree, whose kernel sources make the key."""
MARK = "VEHCAL_NUMBA_CACHE_DIR"
"""Environment variable holding the cache directory this module chose (so a child process recomputes it)."""


def source_key(root: Path = PACKAGE_ROOT) -> str:
    """16 hex digits of the SHA-256 over the relative path and the bytes of every ``*.py`` file under ``root`` that
    mentions numba (the kernels' sources)."""
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        text = path.read_bytes()
        if b"numba" not in text:
            continue
        digest.update(path.relative_to(root).as_posix().encode())
        digest.update(b"\0")
        digest.update(text)
    return digest.hexdigest()[:16]


def cache_base() -> Path:
    """``$XDG_CACHE_HOME/vehcal_ros/numba`` (``~/.cache/vehcal_ros/numba``)."""
    home = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(home) / "vehcal_ros" / "numba"


def configure(root: Path = PACKAGE_ROOT) -> Path | None:
    """Point numba's cache at the directory keyed by ``root``'s sources and return it; None (nothing changed)
    when the user set ``NUMBA_CACHE_DIR`` themselves."""
    given = os.environ.get("NUMBA_CACHE_DIR")
    if given and given != os.environ.get(MARK):
        return None
    directory = str(cache_base() / source_key(root))
    os.environ["NUMBA_CACHE_DIR"] = os.environ[MARK] = directory
    config = sys.modules.get("numba.core.config")
    if config is not None:   # numba already imported: its config read the environment then
        config.CACHE_DIR = directory
    return Path(directory)
