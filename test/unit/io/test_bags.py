"""rosbag2 I/O with rosbags: round trip in mcap and sqlite3, remapping, and clear errors for bad bags."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import numpy as np
import pytest

from vehcal_ros.errors import InputError
from vehcal_ros.io.bags import (
    BagWriter,
    bag_topics,
    diagnostic_array,
    float64_multiarray,
    read_bag,
    rosbags_types,
    sec_to_ns,
    typestore,
    vector3_stamped,
    write_bag,
    write_topic_messages,
)
from vehcal_ros.io.scenarios import parse_scenario
from vehcal_ros.io.simulate import ScenarioRun
from vehcal_ros.records import Controls, GroundTruth

STORAGES = ("mcap", "sqlite3")


class StandIn:
    """Tiny stand-in with the Hmmwv14 interface (test only): outputs vary with time so fields differ."""

    def __init__(self, dt: float = 1e-3) -> None:
        self.dt, self.t = dt, 0.0

    def step(self, throttle, brake, steering, n_steps=1):
        self.t += n_steps * self.dt

    def outputs(self):
        t = self.t
        s = np.sin(t + np.arange(4))
        return {"t": t, "x": 3 * t, "y": 0.1 * t, "z": 0.0, "roll": 0.01 * s[0], "pitch": 0.002 * s[1],
                "yaw": 0.3 * s[2], "u": 3.0 + s[0], "v": 0.1 * s[1], "w": 0.0, "p": 0.02 * s[2], "q": 0.001,
                "r": 0.05 * s[3], "ax": s[0], "ay": s[1], "az": 9.81, "omega": 6.0 + s, "fx": 100 * s,
                "fy": -50 * s, "fz": 5000 + 10 * s, "slip": 0.01 * s, "slip_angle": 0.02 * s,
                "rolling_radius": np.full(4, 0.47), "mu_road": np.array([0.15, 0.9, 0.15, 0.9]),
                "mu_max": np.array([0.15, 0.9, 0.15, 0.9]), "steer_angle": np.zeros(2)}


def _records(latency: float = 0.0, duration: float = 1.0):
    sensors = {k: {"rate": 100, "latency": latency} for k in ("wheel_speeds", "imu", "tire_forces", "odom")}
    sensors["odom"]["noise_std"] = {"u": 0.1}
    sensors["controls"] = {"rate": 50}
    sensors["ground_truth"] = {"rate": 20}
    sc = parse_scenario({"name": "bags", "duration": duration, "sensors": sensors, "seed": 1,
                         "driver": {"throttle": [{"type": "ramp", "t0": 0, "t1": 1, "to": 0.7}],
                                    "steering": [{"type": "sine", "t0": 0, "t1": 1, "amplitude": 0.3,
                                                  "frequency": 1}]}})
    run = ScenarioRun(sc, model=StandIn())
    return list(run), run


def _same(a, b) -> bool:
    if type(a) is not type(b):
        return False
    for f in dataclasses.fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, np.ndarray):
            if not np.array_equal(x, y):
                return False
        elif isinstance(a, Controls) and f.name != "t":
            if abs(x - y) > 1e-7:  # Joy axes are float32
                return False
        elif f.name in ("roll", "pitch", "yaw"):
            if abs(x - y) > 1e-12:  # through the orientation quaternion
                return False
        elif x != y:
            return False
    return True


def _key(rec):
    return (rec.t, getattr(rec, "wheel", -1))


@pytest.mark.parametrize("storage", STORAGES)
def test_round_trip_both_storages(tmp_path, storage):
    items, _ = _records(latency=0.02)
    counts = write_bag(tmp_path / "bag", items, storage=storage)
    assert counts["/vehicle/tire_forces"] == 4 * 101 and counts["/clock"] == 101
    assert (tmp_path / "bag" / "metadata.yaml").exists()
    back = list(read_bag(tmp_path / "bag"))
    stamps = [r.t for _, r in back]
    assert stamps == sorted(stamps)  # header-stamp order although log times carry the latency
    sent = {}
    for topic, rec, _ in items:
        if topic != "/clock":
            sent.setdefault(topic, []).append(rec)
    got = {}
    for topic, rec in back:
        got.setdefault(topic, []).append(rec)
    assert set(got) == set(sent)
    for topic in sent:
        a = sorted(sent[topic], key=_key)
        b = sorted(got[topic], key=_key)
        assert len(a) == len(b), topic
        assert all(_same(x, y) for x, y in zip(a, b)), topic
    gt = got["/vehicle/ground_truth"][0]
    assert isinstance(gt, GroundTruth) and gt.constants["dt"] == 0.001


def test_bag_log_times_are_release_times(tmp_path):
    from rosbags.highlevel import AnyReader

    items, _ = _records(latency=0.05, duration=0.2)
    write_bag(tmp_path / "bag", items)
    with AnyReader([tmp_path / "bag"], default_typestore=typestore()) as reader:
        for conn, log_ns, raw in reader.messages():
            if conn.topic == "/vehicle/imu":
                msg = reader.deserialize(raw, conn.msgtype)
                stamp_ns = msg.header.stamp.sec * 10**9 + msg.header.stamp.nanosec
                assert log_ns - stamp_ns == 50_000_000


@pytest.mark.parametrize("storage", STORAGES)
def test_topic_remapping(tmp_path, storage):
    items, _ = _records(duration=0.3)
    mapping = {"imu": "/car/imu", "/vehicle/wheel_speeds": "/car/wheels"}
    write_bag(tmp_path / "bag", items, storage=storage, topics=mapping)
    topics = bag_topics(tmp_path / "bag")
    assert "/car/imu" in topics and "/vehicle/imu" not in topics and "/car/wheels" in topics
    plain = {t for t, _ in read_bag(tmp_path / "bag")}
    assert "/vehicle/imu" not in plain and "/vehicle/odom" in plain
    remapped = {t for t, _ in read_bag(tmp_path / "bag", topic_map=mapping)}
    assert {"/vehicle/imu", "/vehicle/wheel_speeds", "/vehicle/odom"} <= remapped
    with pytest.raises(InputError, match="'lidar' is not a known topic"):
        list(read_bag(tmp_path / "bag", topic_map={"lidar": "/x"}))


@pytest.mark.parametrize("storage,fname", [("mcap", "bag.mcap"), ("sqlite3", "bag.db3")])
def test_truncated_bag(tmp_path, storage, fname):
    items, _ = _records(duration=2.0)
    write_bag(tmp_path / "bag", items, storage=storage)
    data = next(p for p in (tmp_path / "bag").iterdir() if p.suffix in (".mcap", ".db3"))
    # a bare storage file can be read too
    assert sum(1 for _ in read_bag(data)) > 0
    bad = tmp_path / "cut"
    shutil.copytree(tmp_path / "bag", bad)
    cut = bad / data.name
    cut.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
    with pytest.raises(InputError, match=r"truncated or corrupt bag"):
        list(read_bag(bad))


def test_not_a_bag(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(InputError, match="not a rosbag2 bag"):
        list(read_bag(tmp_path / "notes.txt"))
    with pytest.raises(InputError, match="not a rosbag2 bag"):
        list(read_bag(tmp_path))
    with pytest.raises(InputError, match="no such bag"):
        list(read_bag(tmp_path / "missing"))
    fake = tmp_path / "fake.mcap"
    fake.write_bytes(b"\x00" * 64)
    with pytest.raises(InputError, match="truncated or corrupt"):
        list(read_bag(fake))


@pytest.mark.parametrize("storage", STORAGES)
def test_no_relevant_topics_names_what_is_there(tmp_path, storage):
    T = rosbags_types()
    msgs = [("/other/status", "diagnostic_msgs/msg/DiagnosticArray",
             diagnostic_array(T, 0.1, [("x", "hw", 0, "ok", {"a": 1.0})]), sec_to_ns(0.1))]
    write_topic_messages(tmp_path / "bag", msgs, storage=storage)
    with pytest.raises(InputError, match=r"no relevant topics .*the bag has: /other/status "
                                         r"\(diagnostic_msgs/msg/DiagnosticArray\)"):
        list(read_bag(tmp_path / "bag"))


@pytest.mark.parametrize("storage", STORAGES)
def test_unexpected_and_unknown_message_types_are_named(tmp_path, storage):
    from rosbags.rosbag2 import StoragePlugin, Writer
    from rosbags.typesys import get_types_from_msg

    store = typestore()
    store.register(get_types_from_msg("float64 speed\nstring label", "custom_msgs/msg/WheelThing"))
    path = tmp_path / "bag"
    writer = Writer(path, version=Writer.VERSION_LATEST,
                    storage_plugin=StoragePlugin.MCAP if storage == "mcap" else StoragePlugin.SQLITE3)
    writer.open()
    conn = writer.add_connection("/vehicle/wheel_speeds", "custom_msgs/msg/WheelThing", typestore=store)
    cls = store.types["custom_msgs/msg/WheelThing"]
    writer.write(conn, 10, store.serialize_cdr(cls(speed=1.0, label="a"), "custom_msgs/msg/WheelThing"))
    writer.close()
    with pytest.raises(InputError, match=r"topic /vehicle/wheel_speeds has message type "
                                         r"custom_msgs/msg/WheelThing, expected sensor_msgs/msg/JointState"):
        list(read_bag(path))


def test_wrong_names_in_messages(tmp_path):
    items, _ = _records(duration=0.1)
    write_bag(tmp_path / "bag", items)
    from vehcal_ros.io.bags import Frames

    with pytest.raises(InputError, match=r"/vehicle/wheel_speeds: JointState has no joint named 'fl'"):
        list(read_bag(tmp_path / "bag", frames=Frames(wheel_names=("fl", "fr", "rl", "rr"))))


def test_output_message_writers(tmp_path):
    from rosbags.highlevel import AnyReader

    T = rosbags_types()
    curve = np.arange(12.0).reshape(4, 3)
    msgs = [("/vehcal/grip/vehicle", "geometry_msgs/msg/Vector3Stamped",
             vector3_stamped(T, 1.5, "vehicle", 0.8, 0.7, 0.9), sec_to_ns(1.5)),
            ("/vehcal/grip_curve/vehicle", "std_msgs/msg/Float64MultiArray",
             float64_multiarray(T, curve, ("quantity", "slip")), sec_to_ns(1.5)),
            ("/vehcal/model_parameters", "diagnostic_msgs/msg/DiagnosticArray",
             diagnostic_array(T, 2.0, [("cyf", "model_calibrator", 0, "ok", {"mean": 44016.25, "r_hat": 1.003})]),
             sec_to_ns(2.0))]
    counts = write_topic_messages(tmp_path / "out", msgs, storage="sqlite3")
    assert counts == {"/vehcal/grip/vehicle": 1, "/vehcal/grip_curve/vehicle": 1, "/vehcal/model_parameters": 1}
    with AnyReader([tmp_path / "out"], default_typestore=typestore()) as reader:
        got = {c.topic: reader.deserialize(raw, c.msgtype) for c, _, raw in reader.messages()}
    v = got["/vehcal/grip/vehicle"]
    assert (v.header.frame_id, v.vector.x, v.vector.y, v.vector.z) == ("vehicle", 0.8, 0.7, 0.9)
    a = got["/vehcal/grip_curve/vehicle"]
    assert [d.label for d in a.layout.dim] == ["quantity", "slip"]
    assert np.array_equal(np.asarray(a.data).reshape(a.layout.dim[0].size, a.layout.dim[1].size), curve)
    kv = {k.key: k.value for k in got["/vehcal/model_parameters"].status[0].values}
    assert float(kv["mean"]) == 44016.25


def test_refuses_to_overwrite_and_bad_storage(tmp_path):
    (tmp_path / "bag").mkdir()
    with pytest.raises(InputError, match="already exists"):
        write_bag(tmp_path / "bag", [])
    with pytest.raises(InputError, match="storage 'rosbag1'"):
        BagWriter(tmp_path / "new", storage="rosbag1")
    assert not Path(tmp_path / "new").exists()
