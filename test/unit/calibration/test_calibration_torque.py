"""Measured wheel torque (``JointState.effort``, or from the CAN signals) in the live calibrator's buffers.

With a vehicle description whose ``torque_source`` is ``measured``, the ``CalibrationPipeline`` (the object the
``model_calibrator`` node and bag replay feed) buffers the per-wheel torque of every ``WheelSpeeds`` record and
the segments it hands to the fits carry it (so it drives the 8-DOF wheels instead of the maps); with ``map``
the torque in the data is not buffered. The torque fed here is a known function of time, different per wheel,
so the check is against that function on the segment's own time grid, not against the pipeline's resampling.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import yaml
from calibration_drive import drive_records

from vehcal_ros.estimation.calibration.pipeline import CalibrationPipeline, CalibrationPipelineConfig
from vehcal_ros.records import BrakePressure, DriveTorque, WheelSpeeds
from vehcal_ros.resources import find_resource


def _torque(t: float) -> tuple[float, float, float, float]:
    """N m, FL, FR, RL, RR: a different straight line per wheel (linear interpolation reproduces it exactly)."""
    return (100.0 + 10.0 * t, 90.0 + 5.0 * t, -20.0 + 2.0 * t, -30.0 - 1.0 * t)


@pytest.fixture(scope="module")
def records() -> list:
    out = []
    for rec in drive_records(seed=3):
        if isinstance(rec, WheelSpeeds):
            rec = dataclasses.replace(rec, torque=_torque(rec.t))
        out.append(rec)
    return out


def _description(tmp_path: Path, source: str) -> str:
    doc = yaml.safe_load(Path(find_resource("config", "vehicles", "hmmwv.yaml")).read_text())
    doc["torque_source"] = source
    path = tmp_path / f"hmmwv_{source}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def _segments(vehicle: str, records: list) -> list:
    pipe = CalibrationPipeline(CalibrationPipelineConfig(vehicle=vehicle, require_order=False))
    for rec in records:
        pipe.add(rec)
    return pipe, [job.segment for job in pipe.snapshot(final=True)]


def test_measured_torque_reaches_the_segments(tmp_path: Path, records: list) -> None:
    pipe, segments = _segments(_description(tmp_path, "measured"), records)
    assert "wheel_torque" in pipe.buffers and len(pipe.buffers["wheel_torque"]) == len(pipe.buffers["wheel_speeds"])
    assert len(segments) == 3   # longitudinal, lateral, rolling resistance windows of the drive
    for seg in segments:
        assert seg.wheel_torque is not None and seg.wheel_torque.shape == (seg.time.size, 4)
        expect = np.array([_torque(t) for t in seg.time])
        np.testing.assert_allclose(seg.wheel_torque, expect, rtol=0, atol=1e-9)


def test_map_description_ignores_the_effort(tmp_path: Path, records: list) -> None:
    pipe, segments = _segments(_description(tmp_path, "map"), records)
    assert "wheel_torque" not in pipe.buffers
    assert segments and all(seg.wheel_torque is None for seg in segments)


def test_measured_torque_without_effort_is_rejected_by_name(tmp_path: Path) -> None:
    """A vehicle that publishes no effort although its description says measured: no fit on the maps; every
    stage reports the missing torque."""
    pipe, segments = _segments(_description(tmp_path, "measured"), drive_records(seed=3))
    assert len(pipe.buffers["wheel_torque"]) == 0 and segments == []
    for stage, st in pipe.status.items():
        assert "JointState.effort" in st.last_reason and st.n_rejected == 1, stage


def test_can_axle_torque_reaches_the_segments(tmp_path: Path) -> None:
    """A production car: no effort; the CAN axle torques and a zero brake pressure (stamped with the wheel
    speeds) through a description whose ``torque_source`` is ``axle``: each wheel gets half its axle's torque."""
    doc = yaml.safe_load(Path(find_resource("config", "vehicles", "hmmwv.yaml")).read_text())
    doc["torque_source"] = "axle"
    doc["brakes"].update(pressure_gain_front=20.0, pressure_gain_rear=20.0)
    path = tmp_path / "hmmwv_axle.yaml"
    path.write_text(yaml.safe_dump(doc))
    records = []
    for rec in drive_records(seed=3):
        if isinstance(rec, WheelSpeeds):
            fl, _, rl, _ = _torque(rec.t)
            records += [DriveTorque(t=rec.t, axle_front=2.0 * fl, axle_rear=2.0 * rl),
                        BrakePressure(t=rec.t, axle=-1, pressure=0.0)]
        records.append(rec)
    pipe, segments = _segments(str(path), records)
    assert len(pipe.buffers["wheel_torque"]) == len(pipe.buffers["wheel_speeds"])
    assert len(segments) == 3
    for seg in segments:
        expect = np.array([[fl, fl, rl, rl] for fl, _, rl, _ in map(_torque, seg.time)])
        np.testing.assert_allclose(seg.wheel_torque, expect, rtol=0, atol=1e-9)
