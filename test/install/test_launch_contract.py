"""What launch/estimate.launch.py asks of the package, checked where ROS 2's launch packages are missing.

test_launch_file.py runs the launch file under the real ``launch`` / ``launch_ros`` and skips without them (they
are not on PyPI, so it skips in CI). This module reads the launch file's source instead (``ast``, nothing of it
is executed) and checks the contract it relies on, against the package itself: the executables it starts are
console scripts whose ``main`` exists, the node names it gives are the keys of the params file it loads by
default, every parameter it sets on a node is one that node declares, the files it finds through the package
share are installed there by setup.py, and the simulator only starts with ``sim``. What it cannot show (that
launch substitutes the arguments, applies the namespace and the remaps) stays with test_launch_file.py.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
LAUNCH_FILE = ROOT / "launch" / "estimate.launch.py"


def _calls(tree: ast.AST, name: str) -> list[ast.Call]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", None) == name]


def _kw(call: ast.Call, key: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == key), None)


def _const(node: ast.expr | None):
    return node.value if isinstance(node, ast.Constant) else None


def _launch() -> tuple[ast.Module, dict[str, ast.Call], dict[str, ast.Call]]:
    tree = ast.parse(LAUNCH_FILE.read_text(), filename=str(LAUNCH_FILE))
    arguments = {_const(c.args[0]): c for c in _calls(tree, "DeclareLaunchArgument")}
    nodes = {_const(_kw(c, "executable")): c for c in _calls(tree, "Node")}
    return tree, arguments, nodes


def _assigned_dicts(tree: ast.Module) -> dict[str, list[str]]:
    """Parameter names of the dict literals in each ``name = [...]`` list assignment (estimator_params)."""
    out: dict[str, list[str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.List):
            keys = [_const(k) for d in node.value.elts if isinstance(d, ast.Dict) for k in d.keys]
            out[node.targets[0].id] = keys
    return out


def test_launch_file_starts_the_console_scripts_under_the_params_file_node_names() -> None:
    _, arguments, nodes = _launch()
    assert set(arguments) == {"params_file", "namespace", "sim", "use_sim_time", "scenario", "vehicle"}
    assert set(nodes) == {"grip_estimator", "model_calibrator", "vehicle_simulator"}
    scripts = dict(re.findall(r'"(\w+) = (vehcal_ros\.nodes\.\w+:main)"', (ROOT / "setup.py").read_text()))
    params = yaml.safe_load((ROOT / "config" / "estimate.yaml").read_text())
    for exe, call in nodes.items():
        assert _const(_kw(call, "package")) == "vehcal_ros"
        module, func = scripts[exe].split(":")
        assert callable(getattr(importlib.import_module(module), func)), exe
        assert f"/**/{_const(_kw(call, 'name'))}" in params, exe       # the params file's section applies
        assert _kw(call, "namespace") is not None and _kw(call, "remappings") is not None, exe
    # only the simulator is conditional, on the sim argument
    assert [e for e, c in nodes.items() if _kw(c, "condition") is not None] == ["vehicle_simulator"]
    cond = _kw(nodes["vehicle_simulator"], "condition")
    assert getattr(cond.func, "id", None) == "IfCondition" and cond.args[0].id == "sim"


def test_parameters_the_launch_file_sets_are_declared_by_their_nodes() -> None:
    tree, _, nodes = _launch()
    lists = _assigned_dicts(tree)
    declared = {exe: {p.name for p in importlib.import_module(f"vehcal_ros.nodes.{exe}").PARAMS} | {"use_sim_time"}
                for exe in nodes}
    for exe, call in nodes.items():
        value = _kw(call, "parameters")
        if isinstance(value, ast.Name):
            names = lists[value.id]
        else:
            names = [_const(k) for d in value.elts if isinstance(d, ast.Dict) for k in d.keys]
        assert names and set(names) <= declared[exe], (exe, set(names) - declared[exe])


def test_default_params_file_is_the_installed_config() -> None:
    """The default params_file is FindPackageShare("vehcal_ros") / config / estimate.yaml: the file this
    repository ships, which test_install_layout finds installed under share/vehcal_ros/config (with the launch
    file under share/vehcal_ros/launch) in a colcon-style prefix."""
    _, arguments, _ = _launch()
    default = _kw(arguments["params_file"], "default_value")
    assert getattr(default.func, "id", None) == "PathJoinSubstitution"
    share, *parts = default.args[0].elts
    assert getattr(share.func, "id", None) == "FindPackageShare" and _const(share.args[0]) == "vehcal_ros"
    assert [_const(e) for e in parts] == ["config", "estimate.yaml"]
    assert (ROOT / "config" / "estimate.yaml").is_file()
