"""``vehcal batch --fleet``: bags replayed per vehicle in time order, each stage carried forward through the
vehicle's state file (version 2; version 1 migrated), on a real Dask LocalCluster with the numbers of serial
``vehcal replay --state`` chains; fleet-file refusals; a truncated bag reported once; the drift flag.

The bags are the 8-DOF synthetic drive (test/calibration_drive.py, 14.5 s: throttle ramp, coast-down, steering
ramp) with the calibrator's longitudinal and rolling-resistance stages at 2 x 100 particles, so one replay takes
about a second once the kernels are compiled.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
import yaml

from vehcal_ros.cli import main
from vehcal_ros.errors import InputError
from vehcal_ros.estimation.calibration.carry_forward import DriftModel, carried_range, drift_flag, prior_sd
from vehcal_ros.io import bags
from vehcal_ros.io import calibration_state as cs
from vehcal_ros.io.fleet import bag_vehicle_id, load_fleet
from vehcal_ros.io.fleet_summary import fleet_summary, vehicle_summary

DAY = 86400.0
T0 = 1.7e9   # Unix time: the drives get dates
PARAMS = """\
grip_estimator:
  ros__parameters:
    fit_period: 8.0
model_calibrator:
  ros__parameters:
    stages: [rolling_resistance, longitudinal]
    require_order: true   # the chain: the longitudinal stage's fit depends on rr (stage_order.py)
    n_chains: 2
    n_draws: 100
    min_ess: 10.0
    min_ess_tail: 10.0
    max_r_hat: 1.5
    recalibration_period: 0.0
    calibration_period: 7.0
"""
# vehicle -> [(bag name, noise seed, day)]: the names sort against the time order
DRIVES = {"truckA": [("truckA_b", 1, 0), ("truckA_a", 2, 1)], "truckB": [("truckB_b", 3, 0), ("truckB_a", 4, 2)]}
V1_STATE = Path(__file__).resolve().parents[2] / "data" / "calibration_state_v1.json"


def _tag(bag: Path, vehicle_id: str) -> None:
    """Write ``custom_data: {vehicle_id: ...}`` into the bag's metadata.yaml (as ``ros2 bag record --custom-data``)."""
    meta = bag / "metadata.yaml"
    doc = yaml.safe_load(meta.read_text())
    doc["rosbag2_bagfile_information"]["custom_data"] = {"vehicle_id": vehicle_id}
    meta.write_text(yaml.safe_dump(doc))


@pytest.fixture(scope="module")
def fleet_dir(tmp_path_factory) -> Path:
    from calibration_drive import drive_records

    d = tmp_path_factory.mktemp("fleet")
    for vid, drives in DRIVES.items():
        for name, seed, day in drives:
            recs = drive_records(seed=seed, t0=T0 + day * DAY + (3600.0 if vid == "truckB" else 0.0))
            bags.write_bag(d / name, [(None, r) for r in recs], storage="mcap")
    _tag(d / "truckB_a", "truckB")
    (d / "p.yaml").write_text(PARAMS)
    (d / "fleet.yaml").write_text("params: p.yaml\nvehicles:\n  truckA: {vehicle: hmmwv, bags: 'truckA_*'}\n"
                                  "  truckB: {vehicle: hmmwv, bags: ['truckB_*']}\n")
    return d


def _rr_bounds(vehicle: str | None) -> tuple[float, float]:
    from vehcal_ros.estimation.calibration.fit import stage_spec

    d = dict(stage_spec("rolling_resistance", vehicle=vehicle).priors)["rr"]
    return float(d.low), float(d.high)


def _strip(o):
    """A document without wall-clock fields."""
    if isinstance(o, dict):
        return {k: _strip(v) for k, v in o.items() if k not in ("elapsed_s", "sampling_s", "realtime_factor", "bag",
                                                                "last_fit_s", "saved_at", "wall_s")}
    if isinstance(o, list):
        return [_strip(v) for v in o]
    return o


def test_fleet_on_dask_matches_chained_serial_replays(fleet_dir, tmp_path, capsys):
    distributed = pytest.importorskip("distributed")
    cl = distributed.LocalCluster(host="127.0.0.1", processes=True, n_workers=2, threads_per_worker=1,
                                  dashboard_address=None)
    try:
        spec = "dask://" + cl.scheduler_address.removeprefix("tcp://")
        rc = main(["batch", "--fleet", str(fleet_dir / "fleet.yaml"), "--out", str(tmp_path / "out"),
                   "--executor", spec, "--seed", "3"])
    finally:
        cl.close()
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    out = tmp_path / "out"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["finished"] and summary["n_failed"] == 0 and summary["n_inputs"] == 4
    for vid, drives in DRIVES.items():
        # the same chain, serially, through `vehcal replay --state`, in time order (the reverse of the names)
        state = tmp_path / f"{vid}.state.json"
        for name, _, _ in sorted(drives, key=lambda d: d[2]):
            rc = main(["replay", str(fleet_dir / name), "--params", str(fleet_dir / "p.yaml"), "--vehicle", "hmmwv",
                       "--seed", "3", "--state", str(state), "--vehicle-id", vid, "--quiet",
                       "--json", str(tmp_path / f"{name}.json")])
            assert rc == 0, capsys.readouterr().err
            batch_doc = json.loads((out / vid / f"{name}.json").read_text())
            serial_doc = json.loads((tmp_path / f"{name}.json").read_text())
            assert _strip(batch_doc["calibration"]) == _strip(serial_doc["calibration"]), (vid, name)
            assert batch_doc["model_parameters"] == serial_doc["model_parameters"]
        a, b = json.loads(state.read_text()), json.loads((out / vid / "state.json").read_text())
        assert a["version"] == b["version"] == 2
        assert _strip(a) == _strip(b), vid
        hist = b["history"]
        first, second = sorted(drives, key=lambda d: d[2])
        assert [h["drive"] for h in hist] == [first[0], second[0]]   # time order
        assert hist[0]["date"].startswith("2023-11-14") and all(s["status"] == "fitted"
                                                                 for s in hist[0]["stages"].values())
        assert set(hist[0]["stages"]) == {"longitudinal", "rolling_resistance"}
        # the second drive started from the first's posteriors, widened by the drift model over >= 1 day
        second_doc = json.loads((out / vid / f"{second[0]}.json").read_text())
        carried = second_doc["fleet"]["carried_priors"]
        assert set(carried) == {"longitudinal", "rolling_resistance"}
        rr0 = hist[0]["stages"]["rolling_resistance"]["parameters"]["rr"]
        lo, hi = carried["rolling_resistance"]["rr"]["lower"], carried["rolling_resistance"]["rr"]["upper"]
        elapsed = carried["rolling_resistance"]["rr"]["elapsed_s"]
        assert elapsed > DAY - 60.0
        assert (lo, hi) == pytest.approx(carried_range(rr0["mean"], rr0["std"], elapsed, _rr_bounds("hmmwv"),
                                                       DriftModel()))
        veh = summary["vehicles"][vid]
        assert [d["drive"] for d in veh["drives"]] == [first[0], second[0]]
        assert len(veh["parameters"]["rr"]) == 2 and veh["drift_flags"] == []
        assert (out / vid / "parameters.png").stat().st_size > 1000
    assert {o["vehicle_id"] for o in summary["inputs"]} == set(DRIVES)

    # --resume: every drive is in its vehicle's history with its result file: nothing runs, nothing changes
    before = {p: p.read_bytes() for p in out.glob("*/state.json")}
    rc = main(["batch", "--fleet", str(fleet_dir / "fleet.yaml"), "--out", str(out), "--executor", "serial",
               "--resume"])
    assert rc == 0
    again = json.loads((out / "summary.json").read_text())
    assert [o["status"] for o in again["inputs"]] == ["skipped"] * 4
    assert {p: p.read_bytes() for p in out.glob("*/state.json")} == before


def test_truncated_and_mislabelled_bags_fail_once_the_others_finish(fleet_dir, tmp_path, capsys):
    d = tmp_path / "bags"
    d.mkdir()
    for name in ("truckA_b", "truckA_a", "truckB_b"):
        shutil.copytree(fleet_dir / name, d / name)
    cut = d / "truckA_cut"
    shutil.copytree(fleet_dir / "truckA_a", cut)
    data = next(cut.glob("*.mcap"))
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
    shutil.copytree(fleet_dir / "truckB_a", d / "truckB_x")   # tagged truckB: listed under truckA below
    shutil.copy(fleet_dir / "p.yaml", d / "p.yaml")
    (d / "fleet.yaml").write_text("params: p.yaml\nvehicles:\n"
                                  "  truckA: {vehicle: hmmwv, bags: [truckA_b, truckA_a, truckA_cut, truckB_x]}\n"
                                  "  truckB: {vehicle: hmmwv, bags: [truckB_b]}\n")
    rc = main(["batch", "--fleet", str(d / "fleet.yaml"), "--out", str(tmp_path / "out"), "--executor", "serial",
               "--seed", "3"])
    cap = capsys.readouterr()
    assert rc == 1
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    by = {Path(o["input"]).name: o for o in summary["inputs"]}
    assert by["truckA_cut"]["status"] == "failed" and "truncated or corrupt" in by["truckA_cut"]["error"]
    assert by["truckA_cut"]["attempts"] <= 1
    assert by["truckB_x"]["status"] == "failed" and "vehicle_id 'truckB'" in by["truckB_x"]["error"]
    failed_lines = [ln for ln in cap.err.splitlines() if ln.startswith("vehcal batch: failed: ")]
    assert len(failed_lines) == 2 and sum("truckA_cut" in ln for ln in failed_lines) == 1, failed_lines
    assert [by[n]["status"] for n in ("truckA_b", "truckA_a", "truckB_b")] == ["ok"] * 3
    hist = json.loads((tmp_path / "out" / "truckA" / "state.json").read_text())["history"]
    assert [h["drive"] for h in hist] == ["truckA_b", "truckA_a"]   # the failed bags left the chain unchanged


def dying_drive(bag: str, vehicle_id: str, params: dict, state_text, seed, drift, drive) -> dict:
    """The real fleet task, except that a bag whose name contains 'die' kills its worker process."""
    import os

    from vehcal_ros.replay.fleet import replay_drive

    if "die" in os.path.basename(bag):
        os._exit(3)
    return replay_drive(bag, vehicle_id, params, state_text, seed, drift, drive)


def test_a_dead_worker_fails_its_bag_once_on_a_local_pool_and_the_chains_go_on(fleet_dir, tmp_path):
    from vehcal_ros.commands.batch import run_fleet
    from vehcal_ros.commands.replay import load_params
    from vehcal_ros.commands.vehicle_option import apply_vehicle

    for src, dst in (("truckA_b", "a1"), ("truckA_a", "a2_die"), ("truckB_b", "b1"), ("truckB_a", "b2")):
        shutil.copytree(fleet_dir / src, tmp_path / dst)
    fleet = load_fleet(_fleet(tmp_path, "vehicles:\n  truckA: {vehicle: hmmwv, bags: ['a*']}\n"
                                        "  truckB: {vehicle: hmmwv, bags: ['b*']}\n"))
    params = apply_vehicle(load_params(str(fleet_dir / "p.yaml")), "hmmwv")
    summary = run_fleet(fleet, {"truckA": params, "truckB": params}, tmp_path / "out", executor="local", workers=2,
                        seed=3, task=dying_drive, progress=False, plots=False)
    by = {o.drive: o for o in summary.outcomes}
    assert by["a2_die"].status == "failed" and "worker died" in by["a2_die"].error and by["a2_die"].attempts == 2
    assert [by[n].status for n in ("a1", "b1", "b2")] == ["ok"] * 3 and summary.executor_rebuilds >= 1
    hist = {v: [h["drive"] for h in json.loads((tmp_path / "out" / v / "state.json").read_text())["history"]]
            for v in ("truckA", "truckB")}
    assert hist == {"truckA": ["a1"], "truckB": ["b1", "b2"]}


def _fleet(tmp_path: Path, text: str) -> Path:
    (tmp_path / "f.yaml").write_text(text)
    return tmp_path / "f.yaml"


@pytest.mark.parametrize("text, field", [
    ("vehicles: []\n", "vehicles: expected a non-empty mapping"),
    ("vehicle: {}\n", "unknown key 'vehicle'"),
    ("vehicles:\n  t1: {bags: 'x*'}\n", "vehicles.t1.vehicle: missing"),
    ("vehicles:\n  t1: {vehicle: no_such_car, bags: 'b*'}\n", "vehicles.t1.vehicle = 'no_such_car'"),
    ("vehicles:\n  t1: {vehicle: hmmwv}\n", "vehicles.t1.bags: missing"),
    ("vehicles:\n  t1: {vehicle: hmmwv, bags: ['b', 'nothing*']}\n",
     "vehicles.t1.bags[1] = 'nothing*': matches no bag"),
    ("vehicles:\n  t1: {vehicle: hmmwv, bags: 'b', colour: red}\n", "vehicles.t1.colour: unknown key"),
    ("vehicles:\n  t 1: {vehicle: hmmwv, bags: 'b'}\n", "vehicles.t 1: the vehicle_id must be"),
    ("vehicles:\n  t1: {vehicle: hmmwv, bags: 'b', params: none.yaml}\n", "vehicles.t1.params = 'none.yaml'"),
    ("vehicles:\n  t1: {vehicle: hmmwv, bags: 'b'}\n  t2: {vehicle: hmmwv, bags: 'b'}\n",
     "vehicles.t2.bags: "),
    ("drift: {rate: -1}\nvehicles:\n  t1: {vehicle: hmmwv, bags: 'b'}\n", "drift: drift model: rate = -1.0"),
    ("vehicles: [\n", "not valid YAML"),
])
def test_fleet_file_refused_with_one_line_naming_the_field(tmp_path, fleet_dir, text, field):
    shutil.copytree(fleet_dir / "truckA_b", tmp_path / "b")
    with pytest.raises(InputError) as err:
        load_fleet(_fleet(tmp_path, text))
    msg = str(err.value)
    assert field in msg and "\n" not in msg, msg


def test_fleet_file_and_bag_metadata(tmp_path, fleet_dir, capsys):
    shutil.copytree(fleet_dir / "truckA_b", tmp_path / "b")
    f = load_fleet(_fleet(tmp_path, "drift: {rate: 0.05}\nvehicles:\n  t1: {vehicle: sedan, bags: 'b/*.mcap'}\n"))
    assert f.vehicles[0].bags == (str(tmp_path / "b"),) and f.vehicles[0].vehicle == "sedan"   # the bag directory
    assert f.drift == DriftModel(rate=0.05)
    assert bag_vehicle_id(fleet_dir / "truckB_a") == "truckB" and bag_vehicle_id(fleet_dir / "truckA_b") is None
    # the CLI refuses a fleet with bags given too, and CSV inputs mixed with bags: one line, exit 2
    for argv in (["batch", str(tmp_path / "b"), "--fleet", str(tmp_path / "f.yaml"), "--out", str(tmp_path / "o")],
                 ["batch", str(tmp_path / "b"), str(tmp_path / "f.yaml"), "--out", str(tmp_path / "o")]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and ("not both" in err), err


def test_version_1_state_is_migrated_and_carried_forward(tmp_path, fleet_dir):
    """test/data/calibration_state_v1.json was written by the version-1 writer (vehcal_ros/io/calibration_state.py
    before version 2) from a replay of the synthetic drive."""
    doc = cs.read_state_document(V1_STATE, "truck7", vehicle="hmmwv")
    raw = json.loads(V1_STATE.read_text())
    assert raw["version"] == 1 and doc.version_read == 1 and doc.history == []
    assert set(doc.stages) == set(raw["stages"]) == {"longitudinal", "rolling_resistance"}
    for stage, st in doc.stages.items():
        body = raw["stages"][stage]
        assert st.data_time == body["segment"][1] and st.parameters == body["parameters"]
    # written back as version 2, read back the same
    cs.write_state(tmp_path / "v2.json", "truck7", doc.stages, vehicle="hmmwv")
    again = cs.read_state_document(tmp_path / "v2.json", "truck7", vehicle="hmmwv")
    assert again.version_read == 2 and again.stages == doc.stages
    # a replay started from the version-1 file: carried forward, then the file is version 2 with this drive
    state = tmp_path / "state.json"
    shutil.copy(V1_STATE, state)
    assert main(["replay", str(fleet_dir / "truckA_a"), "--params", str(fleet_dir / "p.yaml"), "--vehicle", "hmmwv",
                 "--seed", "3", "--state", str(state), "--vehicle-id", "truck7", "--quiet"]) == 0
    new = json.loads(state.read_text())
    assert new["version"] == 2 and [h["drive"] for h in new["history"]] == ["truckA_a"]
    assert new["history"][0]["date"].startswith("2023-11-15")


def test_pipeline_carry_forward_sets_widened_priors_at_the_first_record():
    import numpy as np

    from vehcal_ros.estimation.calibration.pipeline import CalibrationPipeline, CalibrationPipelineConfig
    from vehcal_ros.records import WheelSpeeds

    doc = cs.read_state_document(V1_STATE, "truck7")
    p = CalibrationPipeline(CalibrationPipelineConfig(stages=("rolling_resistance", "longitudinal")))
    assert cs.restore_into(p, doc.stages, note="restored") == ["rolling_resistance", "longitudinal"]
    assert p.config.priors is None and p.calibrated()   # restored at once; priors wait for the data time
    t_data = doc.stages["rolling_resistance"].data_time
    p.add(WheelSpeeds(t_data + 10 * DAY, np.full(4, 10.0)))
    rr = doc.stages["rolling_resistance"].parameters["rr"]
    assert p.config.priors["rr"] == pytest.approx(carried_range(rr["mean"], rr["std"], 10 * DAY, _rr_bounds(None),
                                                                DriftModel()))
    assert p.carried_priors["rolling_resistance"]["rr"]["elapsed_s"] == pytest.approx(10 * DAY)
    assert set(p.config.priors) == {"rr", "Cxf", "Cxr"}


def test_drift_model_math():
    m = DriftModel(rate=0.01, floor=0.02, half_width=3.0)
    # s_prior^2 = s^2 + (rate |m|)^2 days + (floor |m|)^2
    assert prior_sd(100.0, 3.0, 4 * DAY, m) == pytest.approx(math.sqrt(9.0 + 4.0 * 1.0 + 4.0))
    assert prior_sd(100.0, 3.0, -5.0, m) == pytest.approx(math.sqrt(9.0 + 4.0))   # an older drive: no time
    assert carried_range(100.0, 3.0, 0.0, (0.0, 1000.0), m) == pytest.approx((100 - 3 * math.sqrt(13),
                                                                              100 + 3 * math.sqrt(13)))
    assert carried_range(100.0, 3.0, 0.0, (95.0, 1000.0), m)[0] == 95.0             # clipped to the bounds
    assert carried_range(2000.0, 3.0, 0.0, (0.0, 1000.0), m) == (0.0, 1000.0)       # outside: the bounds
    assert carried_range(float("nan"), 3.0, 0.0, (0.0, 1000.0), m) == (0.0, 1000.0)
    with pytest.raises(InputError, match="half_width"):
        DriftModel.from_mapping({"half_width": 0})


def _history(means: list[float], sds: list[float], statuses: list[str] | None = None, days: float = 1.0) -> list:
    statuses = statuses or ["fitted"] * len(means)
    return [{"drive": f"d{i}", "t_start": T0 + i * days * DAY, "date": None,
             "stages": {"rolling_resistance": {"status": s, "data_time": T0 + i * days * DAY,
                                               "parameters": {"rr": {"mean": m, "std": sd}}}}}
            for i, (m, sd, s) in enumerate(zip(means, sds, statuses))]


def test_drift_flag_fires_on_a_jump_only():
    drift = DriftModel(rate=0.01, floor=0.02)
    # a steady parameter with noise of about one sd: no flag
    steady = vehicle_summary(_history([0.0130, 0.01315, 0.01290, 0.01305], [2e-4] * 4), drift)
    assert steady["drift_flags"] == [] and not any(r["drift"] for r in steady["parameters"]["rr"])
    row = steady["parameters"]["rr"][0]
    assert (row["lower"], row["upper"]) == pytest.approx((0.0130 - 1.6448536 * 2e-4, 0.0130 + 1.6448536 * 2e-4))
    # a jump of 30 % at the third drive: flagged there only; the sd of the test includes the drift allowance
    jump = vehicle_summary(_history([0.0130, 0.01305, 0.0170, 0.01702], [2e-4] * 4), drift)
    assert [(f["parameter"], f["drive"], f["previous_drive"]) for f in jump["drift_flags"]] == [("rr", "d2", "d1")]
    allowance = math.sqrt(2 * 4e-8 + (0.01 * 0.01305) ** 2 + (0.02 * 0.01305) ** 2)
    assert jump["drift_flags"][0]["score"] == pytest.approx((0.0170 - 0.01305) / allowance)
    # the same jump after a year: within the random walk's allowance, not flagged
    assert vehicle_summary(_history([0.0130, 0.0170], [2e-4] * 2, days=365.0), drift)["drift_flags"] == []
    # a carried row repeats the estimate and is never compared; the next fit compares with the last fit
    carried = vehicle_summary(_history([0.0130, 0.0130, 0.0131], [2e-4] * 3, ["fitted", "carried", "fitted"]), drift)
    assert carried["drift_flags"] == [] and carried["parameters"]["rr"][1]["drift_score"] is None
    assert drift_flag(1.0, 0.0, 1.0, 0.0, 0.0, DriftModel(floor=0.0, rate=0.0)) == (False, 0.0)
    # extra per-vehicle sections: one call each
    doc = fleet_summary({"t1": _history([0.013], [2e-4])}, drift, {"t1": [{"x": 1}]},
                        sections={"n_docs": lambda vid, docs: len(docs)})
    assert doc["t1"]["n_docs"] == 1


def test_a_jump_in_rolling_resistance_is_refitted_and_flagged(tmp_path, fleet_dir):
    """Drive 2 of a vehicle with rr 40 % higher than drive 1 (a real chain): the carried prior cannot hold it, the
    fit is run again on the description's range, and the fleet summary flags the jump; the steady vehicle of
    the same fleet is not flagged."""
    from calibration_drive import drive_records, drive_states
    from calibration_synthetic import TRUTH

    from vehcal_ros.commands.batch import run_fleet
    from vehcal_ros.commands.replay import load_params
    from vehcal_ros.commands.vehicle_option import apply_vehicle

    shutil.copytree(fleet_dir / "truckA_b", tmp_path / "c1")
    recs = drive_records(seed=5, t0=T0 + 3 * DAY, states=drive_states({**TRUTH, "rr": 1.4 * TRUTH["rr"]}))
    bags.write_bag(tmp_path / "c2", [(None, r) for r in recs], storage="mcap")
    shutil.copytree(fleet_dir / "truckB_b", tmp_path / "s1")
    shutil.copytree(fleet_dir / "truckB_a", tmp_path / "s2")
    fleet = load_fleet(_fleet(tmp_path, "vehicles:\n  jumpy: {vehicle: hmmwv, bags: ['c*']}\n"
                                        "  truckB: {vehicle: hmmwv, bags: ['s*']}\n"))
    params = apply_vehicle(load_params(str(fleet_dir / "p.yaml")), "hmmwv")
    summary = run_fleet(fleet, {"jumpy": params, "truckB": params}, tmp_path / "out", executor="serial", seed=3,
                        progress=False, plots=False)
    assert summary.n_ok == 4
    doc = summary.to_dict()["vehicles"]
    rr = doc["jumpy"]["parameters"]["rr"]
    assert [r["status"] for r in rr] == ["fitted", "fitted"]
    carried = json.loads((tmp_path / "out" / "jumpy" / "c2.json").read_text())["fleet"]["carried_priors"]
    assert rr[1]["mean"] > carried["rolling_resistance"]["rr"]["upper"]   # estimated beyond the carried range
    assert rr[1]["mean"] == pytest.approx(1.4 * TRUTH["rr"], rel=0.1)
    assert [(f["parameter"], f["drive"]) for f in doc["jumpy"]["drift_flags"]] == [("rr", "c2")]
    assert doc["truckB"]["drift_flags"] == []


def _place_bag(path: Path, seed: int, duration: float = 8.0) -> None:
    """A short simulated drive with the GNSS fix (the built-in accel_coast scenario, sensor seed ``seed``)."""
    from vehcal_ros.io.scenarios import parse_scenario, resolve_scenario_path
    from vehcal_ros.io.simulate import ScenarioRun

    src = resolve_scenario_path("accel_coast")
    data = yaml.safe_load(src.read_text())
    data.update(duration=duration, seed=seed)
    bags.write_bag(path, ScenarioRun(parse_scenario(data, source=str(src), base_dir=src.parent)), storage="mcap")


def test_fleet_grip_map_over_every_vehicles_drives(fleet_dir, tmp_path, capsys):
    """Two drives with the fix (both starting at t = 0: the map keeps them apart by drive) and a vehicle whose bag has
    none: the fleet map (GeoJSON, CSV, PNG) holds every row of the drives with rows, listed in summary.json, and a
    grip-by-place plot is written for the vehicle with rows only."""
    import csv

    for k in (1, 2):
        _place_bag(tmp_path / f"carC_{k}", seed=k)
    shutil.copytree(fleet_dir / "truckA_b", tmp_path / "truckA_b")
    (tmp_path / "p.yaml").write_text(PARAMS)
    (tmp_path / "fleet.yaml").write_text("params: p.yaml\nvehicles:\n  carC: {vehicle: hmmwv, bags: 'carC_*'}\n"
                                         "  truckA: {vehicle: hmmwv, bags: truckA_b}\n")
    out = tmp_path / "out"
    rc = main(["batch", "--fleet", str(tmp_path / "fleet.yaml"), "--out", str(out), "--executor", "serial",
               "--seed", "1"])
    assert rc == 0, capsys.readouterr().err
    summary = json.loads((out / "summary.json").read_text())
    gm = summary["grip_map"]
    assert sorted(Path(f).name for f in gm["files"]) == ["fleet_grip_map.csv", "fleet_grip_map.geojson",
                                                         "fleet_grip_map.png"]
    docs = {k: json.loads((out / "carC" / f"carC_{k}.json").read_text())["grip_by_place"] for k in (1, 2)}
    assert all(len(rows) >= 10 for rows in docs.values())
    assert docs[1][0]["t"] == docs[2][0]["t"]
    assert gm["rows"] == {"carC": len(docs[1]) + len(docs[2]), "truckA": 0}
    with open(out / "fleet_grip_map.csv", newline="") as f:
        table = list(csv.DictReader(f))
    assert list(table[0])[:2] == ["vehicle", "drive"]
    assert [(r["drive"], float(r["t"]), r["scope"]) for r in table] == \
        [(f"carC_{k}", r["t"], r["scope"]) for k in (1, 2) for r in docs[k]]
    assert {r["vehicle"] for r in table} == {"carC"}
    geo = json.loads((out / "fleet_grip_map.geojson").read_text())
    assert len(geo["features"]) == len(table)
    assert geo["features"][0]["geometry"]["coordinates"][:2] == [docs[1][0]["longitude"], docs[1][0]["latitude"]]
    assert set(gm["plots"]) == {"carC"} and Path(gm["plots"]["carC"]).name == "grip_by_place.png"
    assert (out / "carC" / "grip_by_place.png").stat().st_size > 1000
    assert (out / "fleet_grip_map.png").stat().st_size > 1000
    assert not (out / "truckA" / "grip_by_place.png").exists()


def test_grip_map_places_keep_drives_with_the_same_stamps_apart():
    """Rows of two drives of one vehicle at the same t are two places (one fix each), not one."""
    from vehcal_ros.io.grip_map import grip_places

    row = {"t": 0.0, "latitude": 43.0, "longitude": -89.0, "scope": "front_axle", "mu_max": 0.8, "lower": 0.7,
           "truth": 0.9}
    rows = [{"vehicle": "carC", "drive": d, **row, "scope": s} for d in ("a", "b") for s in ("front_axle", "rear_axle")]
    assert len(grip_places(rows)) == 2
    assert len(grip_places([{k: v for k, v in r.items() if k != "drive"} for r in rows])) == 1


def test_chains_hand_out_the_chain_with_the_most_work_left_first():
    """List scheduling by remaining work: a freed worker takes from the longest remaining chain (the critical
    path), one task per chain at a time, in order within each chain."""
    from vehcal_ros.commands.batch import _Chains

    chains = _Chains({"a": [0, 1], "b": [2, 3, 4], "c": [5]}, cost={i: 10.0 for i in range(6)})
    assert chains.take(2) == [2, 0]            # b (30 s left), then a (20 s); c (10 s) waits
    assert chains.take(1) == [5]               # the only ready chain: c
    chains.done(2)
    assert chains.take(2) == [3]               # b again (a and c are busy)
    chains.done(0)
    chains.done(3)
    chains.done(5)
    assert chains.take(3) == [1, 4]            # a tie (10 s each): the fleet file's order
    unweighted = _Chains({"a": [0], "b": [1, 2]})
    assert unweighted.take(1) == [1]           # no costs: 1 per task, b has more


def test_chains_weigh_the_work_left_by_each_chains_measured_replay_rate():
    """A chain's work left is its bag seconds times its own measured in-task s per bag second (after its first task
    once it has more), else the rate of all finished tasks: a vehicle whose bags replay slower is started before
    one with more bag seconds left that replays faster; a failed task (no in-task time) measures nothing."""
    from vehcal_ros.commands.batch import _Chains

    chains = _Chains({"fast": [0, 1, 2], "slow": [3, 4], "new": [5, 6]}, cost={i: 100.0 for i in range(7)})
    assert chains.take(2) == [0, 3]            # nothing measured: bag seconds alone (300 s, then 200 s)
    chains.done(0, 20.0)                       # 0.2 s per bag s
    chains.done(3, 60.0)                       # 0.6 s per bag s
    assert chains.remaining("fast") == pytest.approx(40.0)
    assert chains.remaining("slow") == pytest.approx(60.0)
    assert chains.remaining("new") == pytest.approx(80.0)   # unmeasured: all finished tasks, 80 s per 200 s
    assert chains.take(3) == [5, 4, 1]         # new (80 s), slow (60 s), fast (40 s)
    chains.done(5, None)                       # failed: no in-task time, the chain is free again
    assert chains.remaining("new") == pytest.approx(40.0)
    assert not chains.busy - {"slow", "fast"}
    chains.done(1, 10.0)                       # fast's second task: 0.1 s per bag s; its first (0.2) no longer counts
    assert chains.rate("fast") == pytest.approx(0.1) and chains.remaining("fast") == pytest.approx(10.0)


def test_a_drive_whose_windows_disagree_with_the_carried_model_is_flagged_without_a_fit():
    """The flag without an accepted fit: the stage kept its carried model, and the median recalibration-check shift
    of at least two of the drive's windows against it is above the check's threshold; below it, nothing."""
    def entry(name, check=None):
        body = {"status": "confirmed" if check else "fitted", "data_time": 10.0,
                "parameters": {"rr": {"mean": 0.013, "std": 2e-4, "hdi_low": 0.0127, "hdi_high": 0.0133}}}
        if check:
            body["check"] = check
        return {"drive": name, "t_start": 0.0, "stages": {"rolling_resistance": body}}

    calm = vehicle_summary([entry("d1"), entry("d2", {"n": 3, "median_shift": 1.2, "max_shift": 4.0,
                                                      "threshold": 3.5})])
    assert calm["drift_flags"] == []
    one = vehicle_summary([entry("d1"), entry("d2", {"n": 1, "median_shift": 6.0, "max_shift": 6.0,
                                                     "threshold": 3.5})])
    assert one["drift_flags"] == []            # one inconsistent window is not a drive's evidence
    changed = vehicle_summary([entry("d1"), entry("d2", {"n": 3, "median_shift": 6.0, "max_shift": 9.0,
                                                         "threshold": 3.5})])
    assert changed["drift_flags"] == [{"kind": "check", "stage": "rolling_resistance", "parameter": None,
                                       "drive": "d2", "previous_drive": "d1", "score": 6.0, "threshold": 3.5,
                                       "n_windows": 3}]
    assert changed["drives"][1]["checks"]["rolling_resistance"]["n"] == 3


def _free_rolling(records: list, vehicle: str) -> dict:
    from vehcal_ros.estimation.calibration.segments import (
        SegmentConfig,
        free_rolling_radius,
        records_to_sources,
        resample,
    )

    c = SegmentConfig()
    r = resample(records_to_sources(records), c.rate, c.max_gap, c.yaw_rate_source)
    fr = free_rolling_radius(r, c, vehicle)
    assert fr is not None
    return {"radius": fr.radius, "se": fr.se, "seconds": fr.seconds}


def test_a_load_change_lowers_the_rolling_radius_and_only_it_is_flagged(tmp_path):
    """The 14-DOF HMMWV's free-rolling radius falls with its wheel loads (tire deflection Fz / kz): drives of the
    same vehicle (noise seeds 1, 2) agree, one passenger's worth (+5 % chassis mass) is within the drift model's
    radius allowance, +20 % chassis mass is flagged (kind radius) and is the only flag."""
    import vehcal_ros
    from vehcal_ros.io.scenarios import load_scenario
    from vehcal_ros.io.simulate import ScenarioRun

    src = Path(vehcal_ros.__file__).parent / "data" / "hmmwv.yaml"
    drives = []
    for name, seed, load in (("same1", 1, 0.0), ("same2", 2, 0.0), ("plus5", 3, 0.05), ("plus20", 4, 0.20)):
        model = src
        if load:
            doc = yaml.safe_load(src.read_text())
            doc["chassis"]["mass"] = float(doc["chassis"]["mass"]) * (1.0 + load)
            model = tmp_path / f"hmmwv_{name}.yaml"
            model.write_text(yaml.safe_dump(doc, sort_keys=False))
        scenario = load_scenario("daily_driving", vehicle=str(model)).with_seed(seed)   # `vehcal simulate`'s run
        radius = _free_rolling([rec for _, rec, _ in ScenarioRun(scenario, duration=60.0)], "hmmwv_sim")
        drives.append(cs.drive_entry(name, 0.0, 60.0, {}, {}, rolling_radius=radius))
    summary = vehicle_summary(drives)
    rows = {r["drive"]: r for r in summary["parameters"]["rolling_radius"]}
    assert rows["plus20"]["mean"] < rows["same2"]["mean"] - 5e-4, rows       # 0.78 mm on the 120 s drives
    assert [(f["kind"], f["drive"]) for f in summary["drift_flags"]] == [("radius", "plus20")], summary["drift_flags"]
    assert summary["drift_flags"][0]["previous_drive"] == "plus5"


def test_a_history_entry_keeps_the_drives_rolling_radius_and_a_v2_reader_takes_it(tmp_path):
    entry = cs.drive_entry("d1", 0.0, 60.0, {}, {}, rolling_radius={"radius": 0.4652, "se": 1.2e-5,
                                                                     "seconds": 23.0, "used": True})
    assert entry["rolling_radius"] == {"mean": 0.4652, "std": 1.2e-5, "seconds": 23.0}
    path = tmp_path / "state.json"
    cs.write_state(path, "v1", {}, history=[entry])
    assert cs.read_state_document(path, "v1").history[0]["rolling_radius"]["mean"] == 0.4652


def test_window_spread_recovers_a_known_spread_between_windows():
    """The method-of-moments tau^2 of carry_forward.window_spread on windows drawn as ``b_j + e_j`` (b ~ N(0, tau^2),
    e ~ N(0, v_j), v_j known): per window d^2 - v has mean tau^2 and variance 2 (tau^2 + v_j)^2, so over J = 2000
    windows with tau^2 = 4 and v in [1, 3] the estimate's sd is about sqrt(2 / 2000) * 6 = 0.19; the tolerance
    0.8 is 4 sd (a false failure 6e-5 at a fixed seed), and an error of the estimator by a factor (tau^2 counted
    twice, v not subtracted: 2 above the truth) fails it. Without spread the estimate is the positive part of a
    mean near 0 with sd 0.09: below 0.36 (4 sd), whether or not its Q passes the heterogeneity test (1 time in
    20); with tau^2 = 4, Q is near 6400 against the test's 2105. Entries that are not two finite numbers are left
    out."""
    import numpy as np

    from vehcal_ros.estimation.calibration.carry_forward import window_spread

    rng = np.random.default_rng(7)
    v = rng.uniform(1.0, 3.0, 2000)
    d = rng.normal(0.0, 2.0, v.size) + rng.normal(0.0, np.sqrt(v))
    windows = [{"Cxf": (dj, vj), "Cxr": (rng.normal(0.0, math.sqrt(vj)), vj)} for dj, vj in zip(d, v)]
    windows += [{"Cxf": (math.nan, 1.0)}, {"Cxf": "x"}, {"Cxr": (1.0, -1.0)}, {}]
    tau2 = window_spread(windows)
    assert tau2["Cxf"] == pytest.approx(4.0, abs=0.8)
    assert 0.0 <= tau2["Cxr"] < 0.36
    assert window_spread([]) == {} and window_spread([{"rr": (0.1, 0.1)}]) == {"rr": 0.0}   # d^2 < v: none
    # the spread must pass Cochran's Q (5 %): windows of 1.2 and 1.3 sd (Q 3.13 < 5.99, chi^2(2)) carry none, although
    # their moment estimate is positive; 2.5 and 2.0 sd (Q 10.25) carry it
    assert window_spread([{"rr": (1.2, 1.0)}, {"rr": (-1.3, 1.0)}]) == {"rr": 0.0}
    assert window_spread([{"rr": (2.5, 1.0)}, {"rr": (-2.0, 1.0)}]) == {"rr": pytest.approx((6.25 + 4.0) / 2 - 1.0)}


def test_the_spread_between_windows_widens_the_carried_prior_and_the_drift_flag(tmp_path):
    """tau^2 adds to the carried prior's variance and to the drift flag's denominator; it comes from the checked
    windows of the drives BEFORE the compared one (a history entry keeps them, a restore hands them to the
    pipeline); a state file without windows carries tau^2 = 0."""
    import numpy as np

    from vehcal_ros.estimation.calibration.carry_forward import window_spread
    from vehcal_ros.estimation.calibration.pipeline import CalibrationPipeline, CalibrationPipelineConfig
    from vehcal_ros.records import WheelSpeeds

    m = DriftModel(rate=0.0, floor=0.0, half_width=3.0)
    assert prior_sd(100.0, 3.0, 0.0, m, spread=16.0) == pytest.approx(5.0)
    assert carried_range(100.0, 3.0, 0.0, (0.0, 1000.0), m, spread=16.0) == pytest.approx((85.0, 115.0))
    assert drift_flag(100.0, 3.0, 90.0, 4.0, 0.0, m, spread=11.0)[1] == pytest.approx(10.0 / 6.0)
    # drive d1's windows scatter by ~1.5e-3 around the carried rr (each expected 4e-8 + 4e-8): tau^2 ~ 2.2e-6
    hist = _history([0.0130, 0.0130, 0.0170], [2e-4] * 3, ["fitted", "confirmed", "fitted"])
    hist[1]["stages"]["rolling_resistance"]["check"] = {
        "n": 2, "median_shift": 5.3, "max_shift": 5.4, "threshold": 3.5,
        "windows": [{"rr": [1.5e-3, 8e-8]}, {"rr": [-1.5e-3, 8e-8]}]}
    tau2 = window_spread(cs.windows_of(hist, "rolling_resistance"))["rr"]
    assert tau2 == pytest.approx(1.5e-3 ** 2 - 8e-8)
    drift = DriftModel(rate=0.0, floor=0.0)
    flagged = vehicle_summary([hist[0], {**hist[1], "stages": {"rolling_resistance": {
        **hist[1]["stages"]["rolling_resistance"], "check": {}}}}, hist[2]], drift)
    assert [f["drive"] for f in flagged["drift_flags"]] == ["d2"]     # 4e-3 over 2.8e-4: 14 sd
    spread = vehicle_summary(hist, drift)
    score = spread["parameters"]["rr"][2]["drift_score"]
    assert score == pytest.approx(4e-3 / math.sqrt(8e-8 + tau2))
    assert [f["kind"] for f in spread["drift_flags"]] == ["check"]   # d1's own windows: checked without spread
    # the windows a drive's entry keeps are those a restore carries
    doc = cs.read_state_document(V1_STATE, "truck7")
    entry = cs.drive_entry("d9", 0.0, 60.0, doc.stages, doc.stages,
                           checks={"rolling_resistance": ([5.3], 3.5, [{"rr": (1.5e-3, 8e-8)}])})
    assert entry["stages"]["rolling_resistance"]["check"]["windows"] == [{"rr": [1.5e-3, 8e-8]}]
    path = tmp_path / "state.json"
    cs.write_state(path, "truck7", doc.stages, history=[entry])
    back = cs.read_state_document(path, "truck7")
    p = CalibrationPipeline(CalibrationPipelineConfig(stages=("rolling_resistance",)))
    cs.restore_into(p, back.stages, note="restored", history=back.history)
    assert p.spread["rolling_resistance"]["rr"] == pytest.approx(1.5e-3 ** 2 - 8e-8)
    t_data = back.stages["rolling_resistance"].data_time
    p.add(WheelSpeeds(t_data, np.full(4, 10.0)))
    rr = back.stages["rolling_resistance"].parameters["rr"]
    assert p.config.priors["rr"] == pytest.approx(carried_range(rr["mean"], rr["std"], 0.0, _rr_bounds(None),
                                                                DriftModel(), 1.5e-3 ** 2 - 8e-8))
    bare = CalibrationPipeline(CalibrationPipelineConfig(stages=("rolling_resistance",)))
    cs.restore_into(bare, doc.stages, note="restored")
    assert bare.spread["rolling_resistance"] == {}
