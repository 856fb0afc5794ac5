"""``vehcal simulate``: the real 14-DOF simulator to a rosbag2 in both storages; bad input -> exit 2, one line."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from vehcal_ros.cli import main
from vehcal_ros.io.bags import bag_topics, read_bag


@pytest.mark.parametrize("storage", ["mcap", "sqlite3"])
def test_simulate_writes_a_bag(tmp_path, storage, capsys):
    out = tmp_path / "run"
    rc = main(["simulate", "throttle_ramp", "--bag", str(out), "--storage", storage, "--duration", "1.0"])
    assert rc == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith(f"vehcal simulate: wrote {out} ({storage})")
    topics = bag_topics(out)
    for topic in ("/vehicle/wheel_speeds", "/vehicle/imu", "/vehicle/tire_forces", "/vehicle/odom",
                  "/vehicle/controls", "/vehicle/ground_truth", "/clock"):
        assert topic in topics
    assert topics["/vehicle/odom"][1] == 101 and topics["/vehicle/tire_forces"][1] == 404
    records = list(read_bag(out))
    stamps = [r.t for _, r in records]
    assert stamps == sorted(stamps) and stamps[-1] == pytest.approx(1.0)
    ctl = [r for tp, r in records if tp == "/vehicle/controls"]
    assert ctl[-1].throttle == pytest.approx(0.5 * (1.0 - 0.5) / 4.0, abs=1e-6)  # throttle ramp 0 -> 0.5
    assert [p.name for p in tmp_path.iterdir()] == ["run"]  # no partial directory left behind


def test_seed_option_changes_only_the_noise(tmp_path, capsys):
    def odom_u(name, seed):
        out = tmp_path / name
        assert main(["simulate", "throttle_ramp", "--bag", str(out), "--seed", str(seed), "--duration", "0.2",
                     "--quiet"]) == 0
        return np.array([r.u for tp, r in read_bag(out) if tp == "/vehicle/odom"])

    a, b, c = odom_u("a", 1), odom_u("b", 1), odom_u("c", 2)
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    assert abs(np.std(a - c) / np.sqrt(2) - 0.1) < 0.05  # the scenario's odom.u noise std is 0.1 m/s


def _cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "vehcal_ros.cli", "simulate", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=60)


def test_bad_scenario_file_exits_2_with_one_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nduration: 5\nroad:\n  patches:\n    - {x0: 10, x1: 5, surface: wet}\n")
    proc = _cli(str(bad), "--bag", str(tmp_path / "out"), cwd=tmp_path)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "scenario.road.patches[0].x1: must be > x0 (= 10)" in lines[0] and "bad.yaml" in lines[0]
    assert not (tmp_path / "out").exists()


def test_refusals_exit_2(tmp_path, capsys):
    (tmp_path / "exists").mkdir()
    assert main(["simulate", "throttle_ramp", "--bag", str(tmp_path / "exists")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "already exists; refusing to overwrite" in err[0]
    assert main(["simulate", "no_such_scenario", "--bag", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no such scenario file or built-in scenario: no_such_scenario" in err[0]
    assert main(["simulate", "throttle_ramp", "--bag", str(tmp_path / "missing_dir" / "x")]) == 2
    assert "parent directory" in capsys.readouterr().err
