"""launch/estimate.launch.py with the real ROS 2 ``launch`` / ``launch_ros`` packages.

Those are not on PyPI (the PyPI project called ``launch`` is an unrelated 2017 tool), so in the pip environment
these tests are reported as skipped with the reason; on a ROS 2 install (``source /opt/ros/<distro>/setup.bash``
after ``colcon build``) they run: the structural test always, the ``ros2 launch`` smoke test when the package is
installed in the sourced workspace.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAUNCH_FILE = ROOT / "launch" / "estimate.launch.py"

launch = pytest.importorskip("launch", reason="ROS 2's launch package is not installed (not on PyPI)")
if not hasattr(launch, "LaunchDescription"):
    pytest.skip("the installed 'launch' is not ROS 2's launch package", allow_module_level=True)
launch_ros = pytest.importorskip("launch_ros", reason="ROS 2's launch_ros package is not installed")


def _description(**arguments: str):
    spec = importlib.util.spec_from_file_location("estimate_launch", LAUNCH_FILE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    ld = module.generate_launch_description()
    context = launch.LaunchContext()
    for action in ld.entities:
        if isinstance(action, launch.actions.DeclareLaunchArgument):
            action.visit(context)
    for key, value in arguments.items():
        context.launch_configurations[key] = value
    return ld, context


def _nodes(ld, context) -> dict[str, object]:
    out = {}
    for action in ld.entities:
        if isinstance(action, launch_ros.actions.Node):
            condition = action.condition
            if condition is None or condition.evaluate(context):
                out[action.node_executable] = action
    return out


def test_launch_declares_the_documented_arguments_and_nodes() -> None:
    ld, context = _description(params_file=str(ROOT / "config" / "estimate.yaml"))
    names = {a.name for a in ld.entities if isinstance(a, launch.actions.DeclareLaunchArgument)}
    assert names == {"params_file", "namespace", "sim", "use_sim_time", "scenario"}
    assert set(_nodes(ld, context)) == {"grip_estimator", "model_calibrator"}
    ld, context = _description(params_file=str(ROOT / "config" / "estimate.yaml"), sim="true")
    assert set(_nodes(ld, context)) == {"grip_estimator", "model_calibrator", "vehicle_simulator"}
    setup = (ROOT / "setup.py").read_text()
    for exe in ("grip_estimator", "model_calibrator", "vehicle_simulator"):
        assert f"{exe} = vehcal_ros.nodes.{exe}:main" in setup or f"{exe}=vehcal_ros.nodes.{exe}:main" in setup


@pytest.mark.slow
def test_ros2_launch_starts_the_estimators(tmp_path) -> None:
    if shutil.which("ros2") is None:
        pytest.skip("no ros2 command (source a ROS 2 install with this package built)")
    from ament_index_python.packages import PackageNotFoundError, get_package_share_directory

    try:
        get_package_share_directory("vehcal_ros")
    except PackageNotFoundError:
        pytest.skip("vehcal_ros is not installed in the sourced workspace (colcon build first)")
    env = {**os.environ, "ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST", "ROS_DOMAIN_ID": "93",
           "ROS_LOG_DIR": str(tmp_path)}
    proc = subprocess.Popen(["ros2", "launch", "vehcal_ros", "estimate.launch.py"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out, _ = proc.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        proc.send_signal(2)
        out, _ = proc.communicate(timeout=20)
    assert "estimating grip per axle" in out and "calibrating stages" in out, out[-2000:]
