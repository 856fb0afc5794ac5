"""Where the package's shared resources live (config/, config/scenarios/, config/vehicles/, launch/).

One lookup used everywhere. Three layouts, searched in this order:

1. **A ROS 2 install** (``colcon build``, ``source install/setup.bash``): the package's share folder as the ament
   index finds it on ``AMENT_PREFIX_PATH`` (``<prefix>/share/vehcal_ros``). This is what ``ros2 launch`` and
   ``ros2 run`` see, and it is not ``sys.prefix`` (colcon installs into the workspace's ``install/``).
2. **The source tree** (a clone used with ``pip install -e .``, the pip environment of the README): the repository
   root, recognised by its ``package.xml``.
3. **A plain pip install**: ``sys.prefix/share/vehcal_ros`` (setup.py's ``data_files``).

Nothing here imports rclpy; ``ament_index_python`` is optional (absent outside ROS 2).

The reference data the models read (``vehcal_ros/data/*.yaml``: hmmwv, vehicle_8dof, friction) is package data
inside the Python package, read with ``importlib.resources`` by models/ and estimation/ (which must not import
io/); it is installed with the modules in every layout, so it needs no share-folder lookup. Scenario files
(``io/scenarios.py``), the params file (``replay/``, ``commands/run.py``) and vehicle descriptions
(``config/vehicles``) go through this module.
"""

from __future__ import annotations

import sys
from pathlib import Path

PACKAGE = "vehcal_ros"


def _ament_share() -> Path | None:
    """The package's share folder through the ament index, or None (no index, or the package is not in it)."""
    try:
        from ament_index_python.packages import PackageNotFoundError, get_package_share_directory
    except ImportError:
        return None
    try:
        return Path(get_package_share_directory(PACKAGE))
    except (PackageNotFoundError, LookupError, ValueError, OSError):
        return None


def _source_root() -> Path | None:
    root = Path(__file__).resolve().parents[1]
    return root if (root / "package.xml").is_file() else None


def share_dirs() -> list[Path]:
    """Candidate roots of the package's resources, most specific first (module docstring), existing only."""
    out: list[Path] = []
    for cand in (_ament_share(), _source_root(), Path(sys.prefix) / "share" / PACKAGE):
        if cand is not None and cand.is_dir() and cand not in out:
            out.append(cand)
    return out


def resource_dirs(*parts: str) -> list[Path]:
    """Every existing folder ``<root>/<parts...>`` over :func:`share_dirs` (e.g. ``("config", "scenarios")``)."""
    return [d for d in (root.joinpath(*parts) for root in share_dirs()) if d.is_dir()]


def find_resource(*parts: str) -> Path | None:
    """The first existing file ``<root>/<parts...>`` over :func:`share_dirs`, or None."""
    for root in share_dirs():
        p = root.joinpath(*parts)
        if p.is_file():
            return p
    return None


def searched(*parts: str) -> str:
    """Human-readable list of the places looked in, for error messages."""
    roots = [Path(p) for p in (_ament_share(), _source_root(), Path(sys.prefix) / "share" / PACKAGE) if p]
    return ", ".join(str(r.joinpath(*parts)) for r in roots)


__all__ = ["share_dirs", "resource_dirs", "find_resource", "searched", "PACKAGE"]
