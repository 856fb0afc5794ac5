"""``vehcal replay`` and the replay package (serial, outputs, reports): deterministic replays in both storages,
remapping, recorded outputs, the report directory, and one-line exit-2 errors that leave nothing written.

The bag is synthetic for speed: a known magic-formula curve (friction paper Section 4.1) driven by a slip
sweep at 50 Hz over 24 s, with wheel speeds, tire forces, odometry, controls and ground truth, so the grip
estimator publishes a few estimates per scope with small sampler settings.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from vehcal_ros.cli import main
from vehcal_ros.io import bags
from vehcal_ros.models.pacejka import mf_curve
from vehcal_ros.records import Controls, GroundTruth, OdomSample, TireForce, WheelSpeeds
from vehcal_ros.replay.outputs import record_outputs
from vehcal_ros.replay.params import grip_pipeline_from, resolve_params, topic_map_from
from vehcal_ros.replay.serial import replay_bag

THETA = np.array([15.4, 1.60, 0.871, -1.09, 0.0, 0.0])
MU_MAX = float(mf_curve(np.linspace(0, 0.4, 4001), THETA).max())
RATE, DURATION, R0, U = 50.0, 24.0, 0.47, 15.0

PARAMS_YAML = """\
grip_estimator:
  ros__parameters:
    r0: 0.47
    theta_lower: [5.0, 0.5, 0.2, -2.0, -0.05, -0.3]   # the friction paper's Table 3 (a car tire like its own)
    theta_upper: [30.0, 2.0, 2.0, 0.0, 0.05, 0.3]
    max_peak_slip: 0.15
    fit_period: 8.0
    n_chains: 4
    n_steps: 6000                # chains start over the ML step's optima: 2000 steps leave them unmixed
    n_ml_starts: 4
    min_points: 30
    max_fit_points: 80
    min_ess: 10.0
    max_r_hat: 1.5
    speed_reference: odometry   # the synthetic stream's odometry is its exact speed
"""


def synthetic_records(seed: int = 1) -> list[tuple[str, object]]:
    """(canonical topic, record) in stamp order; slip sweeps a triangle between 0 and 0.08 on every wheel."""
    rng = np.random.default_rng(seed)
    out: list[tuple[str, object]] = []
    for i in range(int(DURATION * RATE)):
        t = 1.0 + i / RATE
        phase = (t / 3.0) % 1.0
        s = 0.08 * (2 * phase if phase < 0.5 else 2 - 2 * phase)
        omega = U / (1 - s) / R0
        out.append(("/vehicle/odom", OdomSample(t=t, u=U, v=0.0, yaw_rate=0.0, x=U * t)))
        out.append(("/vehicle/wheel_speeds", WheelSpeeds(t=t, omega=np.full(4, omega))))
        out.append(("/vehicle/controls", Controls(t=t, throttle=0.2, brake=0.0, steering=0.0)))
        for w in range(4):
            fz = 5000.0
            mu = float(mf_curve(np.array([s]), THETA)[0]) + 0.02 * rng.standard_normal()
            out.append(("/vehicle/tire_forces", TireForce(t=t, wheel=w, fx=mu * fz, fy=0.0, fz=fz)))
        out.append(("/vehicle/ground_truth", GroundTruth(t=t, mu_road=np.full(4, 0.871), slip=np.full(4, s),
                                                         slip_angle=np.zeros(4), mu_max=np.full(4, MU_MAX))))
    return out


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("replay")
    recs = synthetic_records()
    bags.write_bag(d / "bag_mcap", recs, storage="mcap")
    bags.write_bag(d / "bag_sqlite3", recs, storage="sqlite3")
    renamed = {"wheel_speeds": "/car/wheels", "tire_forces": "/car/tires", "odom": "/car/odom",
               "controls": "/car/joy", "ground_truth": "/sim/truth"}
    bags.write_bag(d / "bag_renamed", recs, storage="mcap", topics=renamed)
    (d / "params.yaml").write_text(PARAMS_YAML)
    return d


@pytest.fixture(scope="module")
def first(work):
    return replay_bag(work / "bag_mcap", work / "params.yaml", seed=7, calibration=False)


def numbers(result) -> dict:
    """The result's JSON without wall-clock fields (those differ run to run)."""
    def strip(o):
        if isinstance(o, dict):
            return {k: strip(v) for k, v in o.items()
                    if k not in ("elapsed_s", "elapsed_ml_s", "elapsed_mcmc_s", "sampling_s", "realtime_factor", "bag",
                                 "last_fit_s")}
        if isinstance(o, list):
            return [strip(v) for v in o]
        return o
    return strip(json.loads(json.dumps(result.to_dict())))


# ----------------------------------------------------------------------------------------------- replay
def test_replay_publishes_estimates_with_truth(first):
    assert first.n_messages == int(DURATION * RATE) * 8
    # timer at t0 + 8, t0 + 16 (the bag ends before t0 + 24), then the end-of-bag cycle
    assert first.counters["grip_cycles"] == 3
    assert set(first.grip) == {"front_axle", "rear_axle"}
    for g in first.grip.values():
        assert g.t.size >= 1 and g.final is not None and g.data is not None
        assert np.allclose(g.truth, MU_MAX)
        assert np.all(g.lower <= g.mean) and np.all(g.mean <= g.upper)
        assert abs(g.mean[-1] - MU_MAX) < 0.25 * MU_MAX
        assert g.curves.shape == (g.t.size, 3, g.curve_slip.size)
        assert g.truth_t.size == pytest.approx(DURATION / 0.1, abs=2)
    d = first.to_dict()
    json.dumps(d, allow_nan=False)
    fa = d["grip"]["front_axle"]
    assert set(fa["mu_max"]) == {"mean", "std", "lower", "upper", "prob"}
    for key in ("t", "stamp", "truth_mu_max", "slip_at_peak", "r_hat", "ess_bulk", "converged", "final", "status"):
        assert key in fa
    for key in ("n_messages", "elapsed_s", "counters", "calibration", "grip"):
        assert key in d


def test_same_bag_same_seed_same_numbers_in_both_storages(work, first):
    again = replay_bag(work / "bag_mcap", work / "params.yaml", seed=7, calibration=False)
    sqlite = replay_bag(work / "bag_sqlite3", work / "params.yaml", seed=7, calibration=False)
    assert numbers(again) == numbers(first)
    assert numbers(sqlite) == numbers(first)


def test_grip_pipeline_takes_the_params_file_values(work):
    """The replay's pipeline carries what the params file sets (PARAMS_YAML's values, none of them a default) and
    the declared defaults elsewhere."""
    node = pytest.importorskip("vehcal_ros.nodes.grip_estimator")
    values = resolve_params(work / "params.yaml")["grip_estimator"]
    p = grip_pipeline_from(values)
    fit, sig = p.fit_config, p.signal_config
    assert fit.bounds == ((5.0, 30.0), (0.5, 2.0), (0.2, 2.0), (-2.0, 0.0), (-0.05, 0.05), (-0.3, 0.3))
    assert (fit.max_peak_slip, fit.n_chains, fit.n_steps, fit.n_ml_starts, fit.min_points) == (0.15, 4, 6000, 4, 30)
    assert (p.max_fit_points, p.min_ess, p.max_r_hat) == (80, 10.0, 1.5)
    assert sig.r0 == 0.47 and sig.speed_reference == "odometry"
    declared = {s.name: s.default for s in node.PARAMS}
    assert sig.window == declared["window"] and p.min_new_points == declared["min_new_points"]
    # the package's params file lists every declared parameter of the grip node
    assert set(resolve_params(None)["grip_estimator"]) == {s.name for s in node.PARAMS}


def test_topic_map_from_params_and_remaps():
    values = {"grip_estimator": {"wheel_speeds_topic": "/car/wheels", "odom_topic": "/vehicle/odom"}}
    assert topic_map_from(values) == {"/vehicle/wheel_speeds": "/car/wheels"}
    m = topic_map_from(values, {"/car/wheels": "/x/w", "imu": "/x/imu", "/vehicle/ground_truth": "/x/gt"})
    assert m == {"/vehicle/wheel_speeds": "/x/w", "/vehicle/imu": "/x/imu", "/vehicle/ground_truth": "/x/gt"}
    with pytest.raises(ValueError, match="not a topic the estimators read"):
        topic_map_from(values, {"/lidar": "/x"})


# -------------------------------------------------------------------------------------------------- CLI
def test_cli_outputs_report_record_and_remap(work, first, capsys):
    out = work / "cli"
    out.mkdir()
    remaps = ["--remap", "/vehicle/wheel_speeds:=/car/wheels", "--remap", "tire_forces:=/car/tires",
              "--remap", "/vehicle/odom:=/car/odom", "--remap", "controls:=/car/joy",
              "--remap", "/vehicle/ground_truth:=/sim/truth"]
    rc = main(["replay", str(work / "bag_renamed"), "--params", str(work / "params.yaml"), "--seed", "7",
               "--no-calibration", "--json", str(out / "r.json"), "--report", str(out / "report"),
               "--record", str(out / "outputs"), "--storage", "sqlite3", *remaps])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    assert "front_axle" in cap.out and "mu_max" in cap.out
    assert "100.0 %" in cap.err and "x real time" in cap.err and "left" in cap.err
    doc = json.loads((out / "r.json").read_text())
    # remapped bag + --remap == canonical bag: same numbers
    assert numbers_of(doc)["grip"] == numbers(first)["grip"]
    assert doc["topic_map"]["/vehicle/wheel_speeds"] == "/car/wheels"
    # report
    names = {p.name for p in (out / "report").iterdir()}
    assert {"index.html", "mu_max.png", "grip_front_axle.png", "grip_rear_axle.png"} <= names
    html = (out / "report" / "index.html").read_text()
    assert "data:image/png;base64," in html
    assert 'src="http' not in html and "<link" not in html and "<script" not in html  # self-contained
    assert f"{MU_MAX:.3f}" in html
    # recorded outputs read back
    topics = bags.bag_topics(out / "outputs")
    n_front = first.grip["front_axle"].t.size
    assert topics["/vehcal/grip/front_axle"] == ("geometry_msgs/msg/Vector3Stamped", n_front)
    assert topics["/vehcal/grip_curve/front_axle"][0] == "std_msgs/msg/Float64MultiArray"
    from rosbags.highlevel import AnyReader

    with AnyReader([out / "outputs"], default_typestore=bags.typestore()) as reader:
        conns = [c for c in reader.connections if c.topic == "/vehcal/grip/front_axle"]
        msgs = [reader.deserialize(raw, c.msgtype) for c, _, raw in reader.messages(connections=conns)]
    assert [m.vector.x for m in msgs] == pytest.approx(list(first.grip["front_axle"].mean), abs=0)
    assert msgs[-1].header.frame_id == "front_axle"
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no temporaries left


def test_recorded_outputs_carry_every_topic_of_the_foxglove_layout(work, first, tmp_path):
    """The shipped Foxglove layout (config/foxglove/replay.json) plots only topics and fields a recorded replay
    has: the belief in force (each grid time of the replay's in-force timeline, mean/lower/upper), the truth
    where the bag has it, the published fits and the model parameters topic."""
    import re

    from rosbags.highlevel import AnyReader

    layout = json.loads((Path(__file__).resolve().parents[3] / "config" / "foxglove" / "replay.json").read_text())
    record_outputs(first, tmp_path / "rec")
    topics = bags.bag_topics(tmp_path / "rec")
    f = first.grip["front_axle"].in_force
    assert topics["/vehcal/grip_in_force/front_axle"] == ("geometry_msgs/msg/Vector3Stamped", f["t"].size)
    assert topics["/vehcal/grip_truth/front_axle"][1] == int(np.isfinite(f["truth"]).sum()) > 0
    paths = [p["value"] for c in layout["configById"].values() for p in c.get("paths", ())]
    paths += [c["topicPath"] for c in layout["configById"].values() if "topicPath" in c]
    with AnyReader([tmp_path / "rec"], default_typestore=bags.typestore()) as reader:
        for path in paths:
            topic, _, fields = re.match(r"(/[\w/]+)(\.?)(.*)", path).groups()
            conns = [c for c in reader.connections if c.topic == topic]
            if topic == "/vehcal/model_parameters" and not conns:
                continue   # no calibration in this replay (--no-calibration)
            assert conns, path
            msg = reader.deserialize(next(reader.messages(connections=conns))[2], conns[0].msgtype)
            for name in filter(None, fields.split(".")):
                msg = getattr(msg, name)
    in_force = [m for m in paths if "grip_in_force/front_axle" in m]
    assert len(in_force) == 3


def numbers_of(doc: dict) -> dict:
    class _R:
        def to_dict(self):
            return doc
    return numbers(_R())


def test_record_outputs_refuses_existing(work, first):
    (work / "exists").mkdir(exist_ok=True)
    with pytest.raises(ValueError, match="already exists"):
        record_outputs(first, work / "exists")


def _bad_bags(work: Path) -> dict[str, tuple[Path, list[str], str]]:
    bad = work / "bad"
    if bad.exists():
        shutil.rmtree(bad)
    bad.mkdir()
    # truncated: the storage file cut in half
    shutil.copytree(work / "bag_mcap", bad / "cut")
    data = next((bad / "cut").glob("*.mcap"))
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
    # no relevant topics
    T = bags.rosbags_types()
    bags.write_topic_messages(bad / "other", [("/other/status", "diagnostic_msgs/msg/DiagnosticArray",
                                               bags.diagnostic_array(T, 0.1, [("x", "hw", 0, "ok", {})]), 10)])
    # unknown message type on a relevant topic
    from rosbags.rosbag2 import StoragePlugin, Writer
    from rosbags.typesys import get_types_from_msg

    store = bags.typestore()
    store.register(get_types_from_msg("float64 speed", "custom_msgs/msg/WheelThing"))
    w = Writer(bad / "custom", version=Writer.VERSION_LATEST, storage_plugin=StoragePlugin.MCAP)
    w.open()
    conn = w.add_connection("/vehicle/wheel_speeds", "custom_msgs/msg/WheelThing", typestore=store)
    w.write(conn, 10, store.serialize_cdr(store.types["custom_msgs/msg/WheelThing"](speed=1.0),
                                          "custom_msgs/msg/WheelThing"))
    w.close()
    (bad / "unknown_key.yaml").write_text("grip_estimator:\n  ros__parameters:\n    fit_perod: 5.0\n")
    (bad / "wrong_type.yaml").write_text("grip_estimator:\n  ros__parameters:\n    fit_period: 5\n")
    params = ["--params", str(work / "params.yaml")]
    return {
        "truncated": (bad / "cut", params, "truncated or corrupt bag"),
        "no relevant topics": (bad / "other", params, "no relevant topics"),
        "other topic names": (work / "bag_renamed", params, "no relevant topics"),
        "unknown message type": (bad / "custom", params, "custom_msgs/msg/WheelThing"),
        "params unknown key": (work / "bag_mcap", ["--params", str(bad / "unknown_key.yaml")],
                               "fit_perod: unknown parameter"),
        "params wrong type": (work / "bag_mcap", ["--params", str(bad / "wrong_type.yaml")],
                              "fit_period: expected a floating-point number (write 5.0)"),
        "bad remap": (work / "bag_mcap", [*params, "--remap", "/lidar:=/x"], "not a topic the estimators read"),
    }


def test_bad_input_exits_2_with_one_line_and_writes_nothing(work, capsys):
    cases = _bad_bags(work)
    for name, (bag, extra, message) in cases.items():
        out = work / "bad_out"
        out.mkdir(exist_ok=True)
        rc = main(["replay", str(bag), *extra, "--no-calibration", "--quiet", "--json", str(out / "r.json"),
                   "--report", str(out / "report"), "--record", str(out / "rec")])
        cap = capsys.readouterr()
        lines = cap.err.splitlines()
        assert rc == 2, (name, cap.err)
        assert len(lines) == 1 and lines[0].startswith("vehcal replay: error: "), (name, cap.err)
        assert message in lines[0], (name, lines[0])
        assert "Traceback" not in cap.err
        assert list(out.iterdir()) == [], (name, list(out.iterdir()))  # nothing written, no temporaries
        out.rmdir()


# ---------------------------------------------------------------------------------------------- calibration
@pytest.fixture(scope="module")
def cal_bags(tmp_path_factory):
    pytest.importorskip("vehcal_ros.estimation.calibration.pipeline")
    from calibration_drive import drive_records

    d = tmp_path_factory.mktemp("replay_cal")
    recs = drive_records(seed=1)  # 8-DOF drive: throttle ramp, coast-down, steering ramp (14.5 s, no tire forces)
    bags.write_bag(d / "sqlite3", [(None, r) for r in recs], storage="sqlite3")
    return d


CAL_PARAMS_YAML = """\
grip_estimator:
  ros__parameters:
    fit_period: 8.0
model_calibrator:
  ros__parameters:
    stages: [rolling_resistance, longitudinal, lateral]
    require_order: true           # the chain: each stage after the ones its fit depends on (stage_order.py)
    n_chains: 4
    n_draws: 500                  # the lateral stage samples 17 (AR(1) rhos and sigmas, initial state): at 300 its
    min_ess: 50.0                 # bulk ESS was 32 on this drive
    min_ess_tail: 50.0
    max_r_hat: 1.2
    recalibration_period: 0.0
    calibration_period: 7.0
"""


def test_calibration_pipeline_takes_the_params_file_values(tmp_path):
    pytest.importorskip("vehcal_ros.estimation.calibration.pipeline")
    node = pytest.importorskip("vehcal_ros.nodes.model_calibrator")
    from vehcal_ros.commands.replay import load_params
    from vehcal_ros.replay.params import calibration_pipeline_from

    (tmp_path / "p.yaml").write_text(CAL_PARAMS_YAML)
    values = load_params(tmp_path / "p.yaml")["model_calibrator"]
    config = calibration_pipeline_from(values).config
    assert config.stages == ("rolling_resistance", "longitudinal", "lateral") and config.require_order
    assert (config.n_chains, config.n_draws, config.min_ess, config.min_ess_tail, config.max_r_hat) == (
        4, 500, 50.0, 50.0, 1.2)
    declared = {s.name: s.default for s in node.PARAMS}
    assert config.recalibration_period == 0.0 != declared["recalibration_period"]


def test_calibration_replay_cli_json_record_and_report(cal_bags, tmp_path, capsys):
    """``vehcal replay`` of the calibration drive (sqlite3 storage): all three stages accepted, each with its
    predictive check, and the JSON, the recorded bag and the report carry them. (Same numbers from either
    storage and from serial and parallel schedules: test_same_bag_same_seed_same_numbers_in_both_storages and
    test_replay_parallel.py.)"""
    (tmp_path / "p.yaml").write_text(CAL_PARAMS_YAML)
    rc = main(["replay", str(cal_bags / "sqlite3"), "--params", str(tmp_path / "p.yaml"), "--seed", "4", "--quiet",
               "--json", str(tmp_path / "b.json"), "--report", str(tmp_path / "rep"), "--record",
               str(tmp_path / "rec")])
    assert rc == 0, capsys.readouterr().err
    d = json.loads((tmp_path / "b.json").read_text())
    assert d["counters"]["calibration_cycles"] >= 1
    assert set(d["calibration"]) == {"longitudinal", "lateral", "rolling_resistance"}
    for stage, c in d["calibration"].items():
        assert c["final"] is not None and len(c["t"]) >= 1, (stage, c["status"])
        final = {**c["final"]["parameters"], **{f"sigma_{k}": v for k, v in c["final"]["noise"].items()}}
        for name, stats in c["parameters"].items():
            assert stats["mean"][-1] == pytest.approx(final[name]["mean"])
    assert set(d["model_parameters"]) >= {"Cxf", "Cyf", "rr"}
    assert set(d["calibration"]["lateral"]["parameters"]["Cyf"]) >= {"mean", "std", "hdi_low", "hdi_high", "r_hat",
                                                                    "ess_bulk"}
    for stage, c in d["calibration"].items():   # the predictive check of the accepted fit, per channel
        h = c["holdout"]
        assert h["passed"] and h == c["final"]["holdout"] and c["status"]["n_refused_holdout"] >= 0, stage
        assert set(h["rmse_candidate"]) == set(h["rmse_replaced"]) == set(c["final"]["noise"]), stage
        assert h["segment"][0] > h["fitted"][1] and all(v > 0 for v in h["rmse_candidate"].values()), stage
    assert bags.bag_topics(tmp_path / "rec")["/vehcal/model_parameters"][1] >= 1
    files = {p.relative_to(tmp_path / "rep").as_posix() for p in (tmp_path / "rep").rglob("*.*")}
    assert {"index.html", "calibration/lateral/posterior.png", "calibration/lateral/trace.png",
            "calibration/lateral/ess_evolution.png", "calibration/lateral/pair_kde.png",
            "calibration/lateral/responses.png"} <= files
    html = (tmp_path / "rep" / "index.html").read_text()
    assert "Cyf" in html and "94 % HDI" in html
