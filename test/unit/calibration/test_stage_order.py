"""The stages' chain order and the warning for a stage whose dependency was not chained in.

* ``stage_order``: rolling resistance depends on nothing held; longitudinal on rr; lateral on rr and the Cx. A
  stage run without a ``--model`` that calibrated them names the held values and the stage to run first.
* ``calibrated_names``: a result's ``calibrated`` list, else its own posterior's names (older results).
* the CLI warns on stderr and records ``calibrated`` (this stage's and the chain's) in its JSON.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from calibration_synthetic import synthetic_segment, write_csv

from vehcal_ros.cli import main
from vehcal_ros.estimation.calibration.fit import Segment
from vehcal_ros.estimation.calibration.stage_order import CHAIN_ORDER, missing_dependencies, order_warning
from vehcal_ros.io.model_file import calibrated_names


def test_chain_order_puts_every_stage_after_what_it_depends_on() -> None:
    assert CHAIN_ORDER == ("rolling_resistance", "longitudinal", "lateral")
    assert missing_dependencies("rolling_resistance", ()) == []
    assert missing_dependencies("longitudinal", ()) == ["rr"]
    assert missing_dependencies("longitudinal", ("rr",)) == []
    assert missing_dependencies("lateral", ("rr",)) == ["Cxf", "Cxr"]
    msg = order_warning("longitudinal", (), {"rr": 0.0175})
    assert msg is not None and "rr 0.0175" in msg and "calibrate rolling_resistance first" in msg
    assert order_warning("lateral", ("rr", "Cxf", "Cxr")) is None


def test_calibrated_names_from_results(tmp_path: Path) -> None:
    new = {"parameters": {"Cxf": {"mean": 1.0}}, "calibrated": ["Cxf", "Cxr", "rr"], "fixed": {"Cyf": 5e4}}
    old = {"parameters": {"bphi": {"mean": 7000.0}, "Cyf": {"mean": 4e4}}, "fixed": {"rr": 0.0175}}
    (tmp_path / "new.json").write_text(json.dumps(new))
    (tmp_path / "old.json").write_text(json.dumps(old))
    assert calibrated_names(tmp_path / "new.json") == {"Cxf", "Cxr", "rr"}
    # an older result: its own posterior only; a held rr is not calibrated
    assert calibrated_names(tmp_path / "old.json") == {"bphi", "bphi_f", "bphi_r", "Cyf"}


def _csv(tmp_path: Path, stage: str) -> Path:
    """The stage's synthetic window as a calibration CSV (noise-free first row = initial state)."""
    noisy, clean = synthetic_segment(stage, seed=4)
    meas = {k: np.concatenate([clean.measured[k][:1], v[1:]]) for k, v in noisy.measured.items()}
    return write_csv(tmp_path / f"{stage}.csv", Segment.from_arrays(noisy.time, noisy.throttle, noisy.brake,
                                                                     noisy.steering, meas))


def test_cli_warns_when_a_dependency_is_held_and_records_the_chain(tmp_path: Path, capsys) -> None:
    csv, acc = _csv(tmp_path, "rolling_resistance"), _csv(tmp_path, "longitudinal")
    # rolling resistance first: no warning; its JSON says rr is calibrated
    assert main(["calibrate", str(csv), "--stage", "rolling_resistance", "--chains", "1", "--draws", "60",
                 "--json", str(tmp_path / "rr.json")]) == 0
    assert "warning: stage" not in capsys.readouterr().err
    doc = json.loads((tmp_path / "rr.json").read_text())
    assert doc["calibrated"] == ["rr"]
    # a longitudinal stage on a chain without rr warns and names what to run first
    (tmp_path / "lat.json").write_text(json.dumps({"parameters": {"Cyf": {"mean": 4.4e4}}, "calibrated": ["Cyf"]}))
    assert main(["calibrate", str(acc), "--stage", "longitudinal", "--chains", "1", "--draws", "60",
                 "--model", str(tmp_path / "lat.json"), "--json", str(tmp_path / "lon.json")]) == 0
    err = capsys.readouterr().err
    assert "warning: stage longitudinal depends on rr 0.0175" in err and "calibrate rolling_resistance first" in err
    assert json.loads((tmp_path / "lon.json").read_text())["calibrated"] == ["Cxf", "Cxr", "Cyf"]
    # chained after rolling resistance: silent, and the chain's names carry on
    assert main(["calibrate", str(acc), "--stage", "longitudinal", "--chains", "1", "--draws", "60",
                 "--model", str(tmp_path / "rr.json"), "--json", str(tmp_path / "lon2.json")]) == 0
    assert "warning: stage" not in capsys.readouterr().err
    assert json.loads((tmp_path / "lon2.json").read_text())["calibrated"] == ["Cxf", "Cxr", "rr"]
