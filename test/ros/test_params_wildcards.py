"""Params files with wildcard node keys and relative topic names, read by the project's own YAML readers
(``vehcal run``/``demo`` validation, bag replay) the way rclpy applies them."""

from __future__ import annotations

from pathlib import Path

import yaml

from vehcal_ros.io.params_yaml import absolute_topic
from vehcal_ros.replay.params import resolve_params, topic_map_from
from vehcal_ros.resources import find_resource

ROOT = Path(__file__).resolve().parents[2]


def test_shipped_params_file_uses_wildcard_keys_and_relative_topics() -> None:
    doc = yaml.safe_load((ROOT / "config" / "estimate.yaml").read_text())
    assert set(doc) == {"/**/grip_estimator", "/**/model_calibrator", "/**/vehicle_simulator"}
    for body in doc.values():
        for key, value in body["ros__parameters"].items():
            if key.endswith("_topic") or key == "output_prefix":
                assert not value.startswith("/"), (key, value)
    assert find_resource("config", "estimate.yaml") is not None
    assert find_resource("config", "scenarios", "coast_down.yaml") is not None


def test_wildcard_and_plain_sections_merge_in_run_and_replay(tmp_path) -> None:
    from vehcal_ros.commands.run import load_parameters

    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump({
        "/**": {"ros__parameters": {"seed": 7}},
        "/**/grip_estimator": {"ros__parameters": {"n_steps": 1234, "odom_topic": "car/odom"}},
        "/truck7/grip_estimator": {"ros__parameters": {"n_chains": 4}},
        "/**/model_calibrator": {"ros__parameters": {"odom_topic": "car/odom", "n_draws": 321}}}))
    run = load_parameters(path)
    assert (run["grip_estimator"]["n_steps"], run["grip_estimator"]["n_chains"]) == (1234, 4)
    assert run["grip_estimator"]["seed"] == 7 and run["model_calibrator"]["n_draws"] == 321
    assert run["grip_estimator"]["min_speed"] == 3.0         # the rest from the shipped file
    replay = resolve_params(path)
    assert (replay["grip_estimator"]["n_steps"], replay["grip_estimator"]["n_chains"]) == (1234, 4)
    assert replay["model_calibrator"]["n_draws"] == 321
    # a bag is replayed in the root namespace: relative topic parameters name /car/odom there
    assert topic_map_from(replay)["/vehicle/odom"] == "/car/odom"
    assert "/vehicle/wheel_speeds" not in topic_map_from(replay)   # vehicle/wheel_speeds is the canonical one


def test_nested_parameter_names_read_alike_in_run_and_replay(tmp_path) -> None:
    """ROS 2 reads ``model: {cxf: ...}`` as ``model.cxf``; `vehcal run`'s validation and bag replay both do, and an
    unknown nested name is refused by its dotted name."""
    import pytest

    from vehcal_ros.commands.run import load_parameters
    from vehcal_ros.errors import InputError

    path = tmp_path / "nested.yaml"
    path.write_text(yaml.safe_dump({"/**/model_calibrator": {"ros__parameters": {
        "model": {"cxf": 12000.0, "cyr": 45678.0}, "prior": {"rr": [0.001, 0.02]}}}}))
    run = load_parameters(path)["model_calibrator"]
    replay = resolve_params(path)["model_calibrator"]
    for values in (run, replay):
        assert (values["model.cxf"], values["model.cyr"], values["prior.rr"]) == (12000.0, 45678.0, [0.001, 0.02])
    path.write_text(yaml.safe_dump({"model_calibrator": {"ros__parameters": {"model": {"cxq": 1.0}}}}))
    with pytest.raises(InputError, match=r"model\.cxq: unknown parameter"):
        load_parameters(path)


def test_absolute_topic_resolves_like_ros() -> None:
    assert absolute_topic("vehicle/imu") == "/vehicle/imu"
    assert absolute_topic("vehicle/imu", "/truck7") == "/truck7/vehicle/imu"
    assert absolute_topic("/diagnostics", "/truck7") == "/diagnostics"
