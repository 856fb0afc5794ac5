"""launch/estimate.launch.py read as source, where ROS 2's ``launch`` is not importable (the pip environment).

test_launch_file.py runs the file with the real ``launch`` / ``launch_ros`` packages and skips without them.
This test does not replace that run. What it checks, without launch, is the file's structure against the
package: the documented arguments and their defaults, one Node per console script in setup.py, every node in the
``namespace`` argument, the simulator only under ``sim``, the estimators' parameters and use_sim_time, and the
/clock remap. The remap is checked by evaluating the file's own PythonExpression text with Python, as launch does,
for sim true and false.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TREE = ast.parse((ROOT / "launch" / "estimate.launch.py").read_text())


def _calls(name: str) -> list[ast.Call]:
    return [n for n in ast.walk(TREE) if isinstance(n, ast.Call) and getattr(n.func, "id", None) == name]


def _kw(call: ast.Call) -> dict[str, ast.expr]:
    return {k.arg: k.value for k in call.keywords}


def _assigned(name: str) -> ast.expr:
    for node in ast.walk(TREE):
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return node.value
    raise AssertionError(f"{name} is not assigned in the launch file")


def test_arguments_are_the_documented_ones() -> None:
    args = {c.args[0].value: _kw(c) for c in _calls("DeclareLaunchArgument")}
    assert set(args) == {"params_file", "namespace", "sim", "use_sim_time", "scenario", "vehicle"}
    assert ast.literal_eval(args["namespace"]["default_value"]) == ""
    assert ast.literal_eval(args["vehicle"]["default_value"]) == ""
    assert ast.literal_eval(args["sim"]["default_value"]) == "false"
    assert ast.literal_eval(args["scenario"]["default_value"]) == "daily_driving"
    assert getattr(args["use_sim_time"]["default_value"], "id", None) == "sim"   # follows sim
    default = ast.unparse(args["params_file"]["default_value"])
    assert "FindPackageShare('vehcal_ros')" in default and "'config', 'estimate.yaml'" in default
    assert (ROOT / "config" / "estimate.yaml").is_file()


def test_one_node_per_console_script_in_the_namespace() -> None:
    nodes = {ast.literal_eval(_kw(c)["executable"]): _kw(c) for c in _calls("Node")}
    scripts = dict(re.findall(r"[\"'](\w+)\s*=\s*(vehcal_ros\.nodes\.\w+):main[\"']", (ROOT / "setup.py").read_text()))
    assert set(nodes) == {"grip_estimator", "model_calibrator", "vehicle_simulator"}
    for exe, kw in nodes.items():
        assert scripts.get(exe) == f"vehcal_ros.nodes.{exe}", exe
        assert (ROOT / "vehcal_ros" / "nodes" / f"{exe}.py").is_file()
        assert ast.literal_eval(kw["package"]) == "vehcal_ros" and ast.literal_eval(kw["name"]) == exe
        assert getattr(kw["namespace"], "id", None) == "namespace", exe
        assert getattr(kw["remappings"], "id", None) == "clock", exe
    assert "condition" not in nodes["grip_estimator"] and "condition" not in nodes["model_calibrator"]
    assert ast.unparse(nodes["vehicle_simulator"]["condition"]) == "IfCondition(sim)"
    for exe, name in (("grip_estimator", "grip_params"), ("model_calibrator", "calibrator_params")):
        assert getattr(nodes[exe]["parameters"], "id", None) == name
        assert ast.unparse(_assigned(name)) == (
            f"[params_file, {{'use_sim_time': use_sim_time, 'vehicle': EstimatorVehicle('{exe}')}}]")
    sim_params = ast.unparse(nodes["vehicle_simulator"]["parameters"])
    assert sim_params == "[params_file, {'scenario': scenario, 'publish_clock': True}]"


def test_clock_remap_per_vehicle_only_with_the_simulator() -> None:
    (pair,) = _assigned("clock").elts
    source, target = pair.elts
    assert ast.literal_eval(source) == "/clock"
    assert ast.unparse(target.func) == "PythonExpression"
    parts = target.args[0].elts                   # [str, sim, str]: launch joins them and evaluates the text
    assert getattr(parts[1], "id", None) == "sim"
    for sim, want in (("true", "clock"), ("True", "clock"), ("false", "/clock")):
        text = ast.literal_eval(parts[0]) + sim + ast.literal_eval(parts[2])
        assert eval(text, {}) == want, (sim, text)   # noqa: S307 - the file's own expression, as launch evaluates it
