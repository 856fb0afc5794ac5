"""Files written so that no reader and no crash ever sees a partial one: :func:`write_atomic`, the one writer of
every output file the package replaces in place (calibrated params, state files, reports, maps, JSON results),
and :func:`remove_stale_temps`, which deletes the temporary files of writers that died. Standard library only."""

from __future__ import annotations

import os
import tempfile
import threading

TEMP_PREFIX = ".tmp_"


def _temp_pattern(path: str) -> tuple[str, str]:
    """(directory, name prefix) of the temporary files :func:`write_atomic` makes for ``path``."""
    directory, name = os.path.split(os.path.abspath(path))
    return directory, f"{TEMP_PREFIX}{name}."


def remove_stale_temps(path: str | os.PathLike) -> int:
    """Delete temporary files a killed writer of ``path`` left behind (those of processes no longer running);
    return how many. A writer that is alive keeps its file."""
    directory, prefix = _temp_pattern(os.fspath(path))
    removed = 0
    try:
        names = os.listdir(directory)
    except OSError:
        return 0
    for name in names:
        if not name.startswith(prefix):
            continue
        pid_text = name[len(prefix):].split(".", 1)[0]
        try:
            pid = int(pid_text)
        except ValueError:
            continue
        if pid != os.getpid() and _alive(pid):
            continue
        if pid == os.getpid():
            with _OWN_TEMPS_LOCK:
                own = name in _OWN_TEMPS
            if own:
                continue
        try:
            os.unlink(os.path.join(directory, name))
            removed += 1
        except OSError:
            pass
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


_OWN_TEMPS: set[str] = set()   # temp files this process is writing right now (other threads)
_OWN_TEMPS_LOCK = threading.Lock()   # writers in several threads (the calibrator's, the node's) change the set


def write_atomic(path: str | os.PathLike, text: str | bytes) -> None:
    """Write ``text`` (UTF-8 text, or bytes as they are) to ``path`` so that no reader and no crash ever sees a
    partial file.

    The text goes to ``.tmp_<name>.<pid>.<random>`` in the same directory, is flushed and fsync'ed, then
    ``os.replace``d onto ``path`` and the directory fsync'ed: a kill -9 (or power loss) at any point leaves either
    the old or the new complete file. Temporary files of writers that died are removed first
    (:func:`remove_stale_temps`), so kills do not accumulate them.
    """
    path = os.fspath(path)
    directory, prefix = _temp_pattern(path)
    os.makedirs(directory, exist_ok=True)
    remove_stale_temps(path)
    fd, tmp = tempfile.mkstemp(prefix=f"{prefix}{os.getpid()}.", suffix=".part", dir=directory)
    with _OWN_TEMPS_LOCK:
        _OWN_TEMPS.add(os.path.basename(tmp))
    try:
        with (os.fdopen(fd, "wb") if isinstance(text, bytes) else os.fdopen(fd, "w", encoding="utf-8")) as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        _fsync_dir(directory)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    finally:
        with _OWN_TEMPS_LOCK:
            _OWN_TEMPS.discard(os.path.basename(tmp))


def _fsync_dir(directory: str) -> None:
    try:
        dfd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:
        pass
    finally:
        os.close(dfd)
