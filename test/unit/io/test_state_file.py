"""The live calibrator's state file over one run (io/calibration_state.StateFile): restored at start with a note of
what happened (no file, refused with the reason, the stages restored), saved with the run's history entry, emptied
on a start over.

Known values: test/data/calibration_state_v1.json (vehicle_id truck7, stages longitudinal and rolling_resistance,
no history).
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
from pathlib import Path

from vehcal_ros.estimation.calibration.pipeline import CalibrationPipeline
from vehcal_ros.io.calibration_state import StateFile, read_state_document

V1_STATE = Path(__file__).resolve().parents[2] / "data" / "calibration_state_v1.json"


def test_no_path_keeps_no_file():
    state = StateFile("", "truck7")
    p = CalibrationPipeline()
    assert not state.restore(p) and state.note == "" and state.refused == ""
    assert state.save(lambda: p) is None and state.start_over(lambda: p) is None
    assert state.report_values() == {"vehicle_id": "truck7", "state_file": "", "state": ""}


def test_missing_and_refused_files_start_from_the_priors(tmp_path):
    missing = str(tmp_path / "none.json")
    state = StateFile(missing, "truck7")
    assert not state.restore(CalibrationPipeline())
    assert (state.note, state.refused) == (f"no state file at {missing} yet: starting from the priors", "")
    path = str(tmp_path / "state.json")
    shutil.copy(V1_STATE, path)
    state, p = StateFile(path, "truck9"), CalibrationPipeline()
    assert not state.restore(p) and not p.calibrated()
    assert state.refused == "written for vehicle_id 'truck7', this node is 'truck9'"
    assert state.note == f"state file {path} refused: {state.refused}; starting from the priors"
    assert state.report_values()["state"] == state.note


def test_restored_stages_are_saved_with_the_runs_drive_then_emptied_on_start_over(tmp_path):
    path = str(tmp_path / "state.json")
    shutil.copy(V1_STATE, path)
    state, p = StateFile(path, "truck7", "hmmwv"), CalibrationPipeline()
    assert state.drive.startswith("live ") and dt.datetime.fromisoformat(state.drive[5:]).tzinfo is not None
    assert state.restore(p)
    assert state.note == f"restored longitudinal, rolling_resistance from {path}" and state.refused == ""
    assert set(p.calibrated()) == {"Cxf", "Cxr", "rr"} and state.history == []
    assert state.save(lambda: p) == path
    doc = read_state_document(path, "truck7", vehicle="hmmwv")
    assert doc.version_read == 2 and doc.stages == read_state_document(V1_STATE, "truck7").stages
    assert [h["drive"] for h in doc.history] == [state.drive]
    assert {s: e["status"] for s, e in doc.history[0]["stages"].items()} == {
        "longitudinal": "carried", "rolling_resistance": "carried"}
    assert state.save(lambda: p) == path   # the run's entry is replaced, not added again
    assert len(read_state_document(path, "truck7").history) == 1
    assert state.start_over(lambda: CalibrationPipeline()) == path
    raw = json.loads(Path(path).read_text())
    assert (raw["stages"], raw["history"], raw["vehicle_id"], raw["vehicle"]) == ({}, [], "truck7", "hmmwv")
