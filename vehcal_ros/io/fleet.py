"""A fleet of vehicles and their drives (bags), and one drive replayed with the vehicle's carried calibration state.

Fleet file (YAML; paths relative to the file's folder)::

    params: common.params.yaml      # optional: ROS params file of every vehicle (default config/estimate.yaml)
    drift: {rate: 0.01, floor: 0.02, half_width: 3.0, radius_floor: 3e-4}   # optional: the drift model
                                    # (estimation/carry_forward.py; absent keys: its defaults)
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

Drives: :func:`replay_drive` replays one bag (:func:`vehcal_ros.io.replay.replay_bag`, serial schedule) with the
calibration pipeline started from the vehicle's state (:func:`vehcal_ros.io.calibration_state.restore_into`: each
stage's accepted posterior carried forward) and returns the replay JSON with the updated state (version 2, this
drive appended to its history). ``vehcal batch --fleet`` chains it per vehicle; ``vehcal replay --state`` is the
same function on one bag. Nothing here imports rclpy.
"""

from __future__ import annotations

import glob
import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from vehcal_ros.errors import InputError
from vehcal_ros.estimation.carry_forward import DEFAULT_DRIFT, DriftModel
from vehcal_ros.inference.executors import worker_threads
from vehcal_ros.io.replay_parallel import kernel_threads

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
    from vehcal_ros.vehicle.description import load_vehicle

    p = _resolve(base, value)
    ref = os.fspath(p) if p.is_file() else value
    try:
        load_vehicle(ref)
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


# ------------------------------------------------------------------------------------------------ one drive
def replay_with_state(bag: str | os.PathLike, params: Mapping[str, Mapping[str, Any]], vehicle_id: str,
                      state_text: str | None, *, drive: str | None = None, seed: int | None = None,
                      drift: DriftModel | None = None, state_label: str = "state", **replay_kw: Any
                      ) -> tuple[Any, str | None, dict[str, Any]]:
    """Replay ``bag`` with the model calibrator started from ``state_text`` (a state file's text, None: from the
    priors) and return (ReplayResult, the updated state's text, this drive's history entry).

    The start is :func:`~vehcal_ros.io.calibration_state.restore_into` with ``drift`` (None: the default model):
    the stages' accepted results restored and their priors carried forward to the bag's first record. The updated
    state holds the pipeline's accepted results at the end of the bag (a stage not refitted keeps its earlier
    ``data_time`` and ``drive``) and the history with this drive (``drive``, default the bag's stem) appended
    (replacing an entry of the same name). A state text that cannot be used raises InputError naming
    ``state_label`` and the reason. The updated state is None when the replay has no calibration pipeline."""
    from vehcal_ros.io import calibration_state as cs
    from vehcal_ros.io.replay import CALIBRATOR_NODE, replay_bag

    drift = drift if drift is not None else DEFAULT_DRIFT
    drive = drive or drive_name(bag)
    vehicle = (params.get(CALIBRATOR_NODE) or {}).get("vehicle") or None
    doc = None
    if state_text is not None:
        try:
            doc = cs.parse_state(state_text, state_label, vehicle_id, vehicle)
        except cs.StateRefused as exc:
            raise InputError(str(exc)) from None
    before = dict(doc.stages) if doc is not None else {}

    def start(pipeline: Any) -> None:
        if before:
            cs.restore_into(pipeline, before, note=f"carried forward from {state_label}", drift=drift,
                            history=doc.history if doc is not None else ())

    result = replay_bag(bag, params, seed=seed, workers=1, executor="serial", calibration_start=start, **replay_kw)
    pipe = result.calibration_pipeline
    if pipe is None:
        return result, None, {}
    after = cs.stages_from(pipe, drive, before)
    entry = cs.pipeline_drive_entry(pipe, drive, before, after)
    history = cs.with_entry(list(doc.history) if doc is not None else [], entry)
    text = cs.state_text(f"{state_label}.json", vehicle_id, after, vehicle=vehicle, history=history)
    return result, text, entry


def replay_drive(bag: str, vehicle_id: str, params: dict[str, dict[str, Any]], state_text: str | None,
                 seed: int | None = None, drift: Mapping[str, float] | None = None, drive: str | None = None
                 ) -> dict[str, Any]:
    """One task of ``vehcal batch --fleet`` (module level: process and Dask workers import it): the bag's
    vehicle_id checked against its metadata, then :func:`replay_with_state`. Returns ``{"task": "replay",
    "input", "vehicle_id", "drive", "replay": the replay JSON (with a ``fleet`` section: vehicle_id, drive, the
    carried priors), "state": the updated state text, "history_entry", "task_elapsed_s", "worker_pid"}``."""
    t0 = time.perf_counter()
    tagged = bag_vehicle_id(bag)
    if tagged is not None and tagged != vehicle_id:
        raise InputError(f"{bag}: its metadata says vehicle_id {tagged!r}, but it is listed under {vehicle_id!r}")
    model = DriftModel.from_mapping(drift) if drift else DEFAULT_DRIFT
    with kernel_threads(worker_threads()):   # the worker's share of the cores, not every core of the machine
        result, text, entry = replay_with_state(bag, params, vehicle_id, state_text, drive=drive, seed=seed,
                                                drift=model, state_label=f"state of {vehicle_id}")
    doc = result.to_dict()
    pipe = result.calibration_pipeline
    doc["fleet"] = {"vehicle_id": vehicle_id, "drive": entry.get("drive", drive or drive_name(bag)),
                    "carried_priors": dict(getattr(pipe, "carried_priors", {}) or {}),
                    "drift_model": model.to_dict(), "history_entry": entry}
    return {"task": "replay", "input": str(bag), "vehicle_id": vehicle_id, "drive": doc["fleet"]["drive"],
            "replay": doc, "state": text, "history_entry": entry, "task_elapsed_s": time.perf_counter() - t0,
            "worker_pid": os.getpid()}


__all__ = ["Fleet", "FleetVehicle", "load_fleet", "expand_bags", "bag_root", "bag_vehicle_id", "bag_start",
           "drive_name", "vehicle_ref", "replay_with_state", "replay_drive", "VEHICLE_ID_KEY"]
