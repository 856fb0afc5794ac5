"""A fleet of vehicles and their drives (bags): the fleet file and the bags' vehicle ids.

Fleet file (YAML; paths relative to the file's folder)::

    params: common.params.yaml      # optional: ROS params file of every vehicle (default config/estimate.yaml)
    drift: {rate: 0.01, floor: 0.02, half_width: 3.0, radius_floor: 3e-4}   # optional: the drift model
                                    # (estimation/calibration/carry_forward.py; absent keys: its defaults)
    vehicles:
      truck7:                       # the vehicle_id (the state file's; letters, digits, '_', '-', '.')
        vehicle: hmmwv              # vehicle description: a shipped name (hmmwv, sedan, ...) or a YAML file
        bags: [drives/truck7/*.mcap, drives/truck7_*]   # globs (one string or a list); each must match a bag
        params: truck.params.yaml   # optional: this vehicle's params file (instead of the fleet's)
        state: /var/lib/vehcal/truck7.json   # optional: a state file to start the chain from (e.g. the live
                                    # calibrator's; read only)

A glob matches bag directories (with metadata.yaml) and .mcap/.db3 files; a storage file inside a bag directory
counts as that directory. A fleet file that cannot be used is refused with one :class:`InputError` line naming the
field (``vehicles.truck7.bags[1]``).

``vehicle_id`` in a bag: rosbag2's ``metadata.yaml`` may carry ``rosbag2_bagfile_information.custom_data``
(string key -> string value, written by ``ros2 bag record --custom-data`` or rosbags' ``set_custom_data``);
:func:`bag_vehicle_id` reads its ``vehicle_id`` key (a bare .mcap/.db3 without metadata.yaml has none). A bag whose
``vehicle_id`` differs from the fleet entry it is listed under is reported as a failed input.

Each drive is replayed with the vehicle's carried calibration state by :mod:`vehcal_ros.replay.fleet`. Nothing
here imports rclpy.
"""

from __future__ import annotations

import glob
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from vehcal_ros.errors import InputError
from vehcal_ros.estimation.calibration.carry_forward import DEFAULT_DRIFT, DriftModel

BAG_SUFFIXES = (".mcap", ".db3")
VEHICLE_ID_KEY = "vehicle_id"
"""the ``custom_data`` key of a bag's metadata.yaml naming its vehicle."""
_ID = re.compile(r"^[A-Za-z0-9_.-]+$")
VEHICLE_KEYS = ("vehicle", "bags", "params", "state")
TOP_KEYS = ("vehicles", "params", "drift")


@dataclass(frozen=True)
class FleetVehicle:
    """One vehicle of a fleet: its id, description, bags (sorted paths), params file and starting state file."""

    vehicle_id: str
    vehicle: str
    """vehicle description: shipped name or an absolute file path."""
    bags: tuple[str, ...]
    params: str | None = None
    state: str | None = None


@dataclass(frozen=True)
class Fleet:
    """A parsed, validated fleet file."""

    vehicles: tuple[FleetVehicle, ...]
    drift: DriftModel = field(default=DEFAULT_DRIFT)
    source: str = ""


def _where(path: str | os.PathLike) -> str:
    return f"fleet file {os.fspath(path)}"


def _resolve(base: Path, value: str) -> Path:
    p = Path(os.path.expanduser(value))
    return p if p.is_absolute() else base / p


def bag_root(path: str | os.PathLike) -> Path | None:
    """The bag a path names: a directory with metadata.yaml, or a .mcap/.db3 file (its directory when that holds
    metadata.yaml); None when it is neither."""
    p = Path(path)
    if p.is_dir():
        return p if (p / "metadata.yaml").exists() else None
    if p.is_file() and p.suffix.lower() in BAG_SUFFIXES:
        return p.parent if (p.parent / "metadata.yaml").exists() else p
    return None


def expand_bags(patterns: list[str], base: Path, label: str) -> list[str]:
    """Bag paths matched by ``patterns`` (relative to ``base``), unique and sorted; InputError naming
    ``label[i]`` for a pattern that matches no bag."""
    out: list[str] = []
    for i, pat in enumerate(patterns):
        if not isinstance(pat, str) or not pat.strip():
            raise InputError(f"{label}[{i}]: expected a path or glob, got {pat!r}")
        hits = sorted(glob.glob(os.fspath(_resolve(base, pat)), recursive=True))
        roots = [r for r in (bag_root(h) for h in hits) if r is not None]
        if not roots:
            raise InputError(f"{label}[{i}] = {pat!r}: matches no bag (a directory with metadata.yaml, or a "
                             f".mcap/.db3 file)")
        out += [os.fspath(r) for r in roots]
    return sorted(dict.fromkeys(out))


def load_fleet(path: str | os.PathLike) -> Fleet:
    """Parse and validate a fleet file (module docstring); InputError with one line naming the field."""
    path = Path(path)
    where = _where(path)
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"{where}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{where}: cannot read it ({exc})") from None
    except yaml.YAMLError as exc:
        raise InputError(f"{where}: not valid YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(doc, dict):
        raise InputError(f"{where}: expected a mapping with 'vehicles'")
    unknown = [k for k in doc if k not in TOP_KEYS]
    if unknown:
        raise InputError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(TOP_KEYS)})")
    base = path.parent
    params = _file_field(doc.get("params"), base, f"{where}: params")
    drift_doc = doc.get("drift")
    if drift_doc is not None and not isinstance(drift_doc, dict):
        raise InputError(f"{where}: drift: expected a mapping of rate, floor, half_width, radius_floor")
    try:
        drift = DriftModel.from_mapping(drift_doc)
    except InputError as exc:
        raise InputError(f"{where}: drift: {exc}") from None
    vehicles = doc.get("vehicles")
    if not isinstance(vehicles, dict) or not vehicles:
        raise InputError(f"{where}: vehicles: expected a non-empty mapping vehicle_id -> {{vehicle, bags}}")
    out = []
    seen: dict[str, str] = {}
    for vid, body in vehicles.items():
        label = f"{where}: vehicles.{vid}"
        if not isinstance(vid, str) or not _ID.match(vid):
            raise InputError(f"{label}: the vehicle_id must be letters, digits, '_', '-' or '.'")
        if not isinstance(body, dict):
            raise InputError(f"{label}: expected a mapping with vehicle and bags")
        bad = [k for k in body if k not in VEHICLE_KEYS]
        if bad:
            raise InputError(f"{label}.{bad[0]}: unknown key (known: {', '.join(VEHICLE_KEYS)})")
        vehicle = body.get("vehicle")
        if not isinstance(vehicle, str) or not vehicle.strip():
            raise InputError(f"{label}.vehicle: missing; a shipped name (hmmwv, sedan) or a description file")
        vehicle = vehicle_ref(vehicle, base, f"{label}.vehicle")
        pats = body.get("bags")
        if isinstance(pats, str):
            pats = [pats]
        if not isinstance(pats, list) or not pats:
            raise InputError(f"{label}.bags: missing; a glob or a list of globs")
        bags_ = expand_bags(pats, base, f"{label}.bags")
        for b in bags_:
            if b in seen:
                raise InputError(f"{label}.bags: {b} is also listed under vehicles.{seen[b]}")
            seen[b] = vid
        out.append(FleetVehicle(vid, vehicle, tuple(bags_), _file_field(body.get("params"), base,
                                                                         f"{label}.params") or params,
                                _file_field(body.get("state"), base, f"{label}.state", must_exist=False)))
    return Fleet(tuple(out), drift, os.fspath(path))


def _file_field(value: Any, base: Path, label: str, must_exist: bool = True) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise InputError(f"{label}: expected a file path, got {value!r}")
    p = _resolve(base, value)
    if must_exist and not p.is_file():
        raise InputError(f"{label} = {value!r}: no such file ({p})")
    return os.fspath(p)


def vehicle_ref(value: str, base: Path, label: str) -> str:
    """A vehicle description reference: a file relative to ``base`` when one exists there, else the name as
    given (a shipped name or a path); validated by loading it (InputError naming ``label``)."""
    from vehcal_ros.vehicle.description import load_description

    p = _resolve(base, value)
    ref = os.fspath(p) if p.is_file() else value
    try:
        load_description(ref)
    except InputError as exc:
        raise InputError(f"{label} = {value!r}: {exc}") from None
    return ref


def bag_vehicle_id(path: str | os.PathLike) -> str | None:
    """``custom_data.vehicle_id`` of a bag's metadata.yaml (module docstring), None when absent or unreadable."""
    root = bag_root(path)
    if root is None or not root.is_dir():
        return None
    try:
        doc = yaml.safe_load((root / "metadata.yaml").read_text(encoding="utf-8"))
        custom = doc["rosbag2_bagfile_information"].get("custom_data") or {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError, KeyError, TypeError, AttributeError):
        return None
    vid = custom.get(VEHICLE_ID_KEY) if isinstance(custom, dict) else None
    return str(vid) if vid not in (None, "") else None


def bag_start(path: str | os.PathLike) -> float:
    """The bag's first message time [s] (its metadata's start; InputError for a bag that cannot be opened)."""
    return bag_times(path)[0]


def bag_times(path: str | os.PathLike) -> tuple[float, float]:
    """(first message time, duration) of a bag, s (its metadata; InputError for a bag that cannot be opened)."""
    from vehcal_ros.io.bags import bag_span

    start, end = bag_span(path)
    return float(start), max(float(end) - float(start), 0.0)


def drive_name(path: str | os.PathLike) -> str:
    """A drive's name: the bag's stem (a directory's name, a storage file's name without suffix)."""
    p = Path(path)
    return (p.name if p.is_dir() else p.stem) or "bag"


__all__ = ["Fleet", "FleetVehicle", "load_fleet", "expand_bags", "bag_root", "bag_vehicle_id", "bag_start",
           "drive_name", "vehicle_ref", "VEHICLE_ID_KEY"]
