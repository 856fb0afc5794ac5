"""One drive of a fleet replayed with the vehicle's carried calibration state.

:func:`replay_drive` replays one bag (:func:`vehcal_ros.replay.serial.replay_bag`, serial schedule) with the
calibration pipeline started from the vehicle's state (:func:`vehcal_ros.io.calibration_state.restore_into`: each
stage's accepted posterior carried forward) and returns the replay JSON with the updated state (version 2, this
drive appended to its history). ``vehcal batch --fleet`` chains it per vehicle; ``vehcal replay --state`` is the
same function on one bag. Nothing here imports rclpy.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any

from vehcal_ros.errors import InputError
from vehcal_ros.estimation.calibration.carry_forward import DEFAULT_DRIFT, DriftModel
from vehcal_ros.inference.executors import worker_threads
from vehcal_ros.io import calibration_state as cs
from vehcal_ros.io.fleet import bag_vehicle_id, drive_name
from vehcal_ros.replay.parallel import kernel_threads
from vehcal_ros.replay.params import CALIBRATOR_NODE
from vehcal_ros.replay.serial import replay_bag


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
