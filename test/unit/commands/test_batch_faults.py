"""`vehcal batch` under faults: a worker process that dies mid-batch, bad and missing input files."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from vehcal_ros.cli import main
from vehcal_ros.commands.batch import calibrate_input, run_batch
from vehcal_ros.estimation.calibration.brake_fit import synthetic_maneuver, write_brake_csv


def crashing_task(path: str, stage: str, seed: int, chains, draws) -> dict:
    """The real task, except that an input whose name contains 'die' kills its worker process."""
    if "die" in os.path.basename(path):
        os._exit(3)
    return calibrate_input(path, stage, seed, chains, draws)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("batch_inputs")
    files = {}
    for k in range(4):
        mv = synthetic_maneuver(u0=16.0 + 2 * k, brake_level=0.2 + 0.03 * k, duration=3.0, dt=0.005, seed=k,
                                known_x0=False)
        files[f"car{k}"] = str(d / f"car{k}.csv")
        write_brake_csv(files[f"car{k}"], [mv])
    files["die"] = str(d / "die_here.csv")
    write_brake_csv(files["die"], [synthetic_maneuver(duration=3.0, dt=0.005, known_x0=False)])
    files["bad"] = str(d / "garbage.csv")
    Path(files["bad"]).write_text("time,throttle,brake\n0,0,x\n")
    files["missing"] = str(d / "no_such_file.csv")
    return files


def test_worker_death_and_bad_inputs_local_pool(inputs, tmp_path):
    order = [inputs[k] for k in ("car0", "car1", "die", "bad", "car2", "missing", "car3")]
    out = tmp_path / "out"
    summary = run_batch(order, out, executor="local", workers=2, task=crashing_task, progress=False)
    status = {Path(o.input).name: o for o in summary.outcomes}
    for k in range(4):
        o = status[f"car{k}.csv"]
        assert o.status == "ok", o.error
        d = json.loads(Path(o.result_file).read_text())
        assert d["task"] == "brake" and d["result"]["success"]
    die = status["die_here.csv"]
    assert die.status == "failed" and "worker died" in die.error and die.attempts == 2
    assert status["garbage.csv"].status == "failed" and "garbage.csv" in status["garbage.csv"].error
    assert status["no_such_file.csv"].status == "failed" and "no_such_file.csv" in status["no_such_file.csv"].error
    assert summary.executor_rebuilds == 2  # first death (in company: resubmitted alone), second death (alone)
    # innocent tasks in flight with the dying one were resubmitted once and finished
    assert all(status[f"car{k}.csv"].attempts in (1, 2) for k in range(4))
    s = json.loads((out / "summary.json").read_text())
    assert s["finished"] and s["n_ok"] == 4 and s["n_failed"] == 3
    assert {Path(i["input"]).name for i in s["inputs"] if i["status"] == "failed"} == {
        "die_here.csv", "garbage.csv", "no_such_file.csv"}
    assert sorted(p.name for p in out.glob("*.json")) == ["car0.json", "car1.json", "car2.json", "car3.json",
                                                           "summary.json"]


def test_results_survive_and_resume_skips(inputs, tmp_path):
    out = tmp_path / "out"
    first = run_batch([inputs["car0"], inputs["bad"]], out, executor="serial", progress=False)
    assert [o.status for o in first.outcomes] == ["ok", "failed"]
    written = (out / "car0.json").read_text()
    again = run_batch([inputs["car0"], inputs["car1"], inputs["die"]], out, executor="serial", resume=True,
                      task=_refuse_die_task, progress=False)
    assert [o.status for o in again.outcomes] == ["skipped", "ok", "failed"]
    assert (out / "car0.json").read_text() == written  # already computed result untouched
    r0 = json.loads(written)["result"]
    assert np.isfinite(r0["cost"]) and len(r0["x"]) == 4


def _refuse_die_task(path: str, stage: str, seed: int, chains, draws) -> dict:
    if "die" in os.path.basename(path):
        raise RuntimeError(f"refusing {path}")
    return calibrate_input(path, stage, seed, chains, draws)


def test_cli_batch_serial(inputs, tmp_path, capsys):
    out = tmp_path / "cli"
    rc = main(["batch", inputs["car1"], inputs["bad"], "--out", str(out), "--executor", "serial"])
    cap = capsys.readouterr()
    assert rc == 1
    assert "car1.csv" in cap.out and "ok" in cap.out and "garbage.csv" in cap.out
    assert "failed: " in cap.err and "garbage.csv" in cap.err
    assert "[" in cap.err and "2/2" in cap.err  # progress bar
    assert (out / "car1.json").exists() and (out / "summary.json").exists()
    rc = main(["batch", inputs["car1"], "--out", str(out), "--executor", "ray://x"])
    assert rc == 2 and "--executor" in capsys.readouterr().err
