"""launch/estimate.launch.py with the real ROS 2 ``launch`` / ``launch_ros`` packages.

Those are not on PyPI (the PyPI project called ``launch`` is an unrelated 2017 tool), so in the pip environment
these tests are reported as skipped with the reason; where ``launch`` and ``launch_ros`` are importable (a
sourced ROS 2 install) they run against the package built into a colcon-style prefix (first on
AMENT_PREFIX_PATH): the structural tests (arguments, nodes, namespace, per-vehicle clock remap); launch's own
LaunchService running it (namespace:=truck7 sim:=true scenario:=coast_down); the vehicle description each
estimator is given; the ``ros2 launch`` smoke test when ros2cli is there too. Checked outside CI, last on
2026-12-01, with ros2/launch 3.7.1 (launch, launch_xml, launch_yaml), launch_ros 0.28.0 (launch_ros, ros2launch)
and ros2cli 0.36.1 (ros2cli, ros2pkg) from their sources on PYTHONPATH / PATH beside the pip rclpy
(composition_interfaces, which launch_ros imports for composable node containers only, replaced by a placeholder
whose services raise if used): all five pass. In CI, test_launch_contract.py checks
the launch file's source against the package (executables, node names, parameters, default params file) and
test_install_layout.py runs the installed nodes with the arguments launch_ros gives them.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LAUNCH_FILE = ROOT / "launch" / "estimate.launch.py"

launch = pytest.importorskip("launch", reason="ROS 2's launch package is not installed (not on PyPI)")
if not hasattr(launch, "LaunchDescription"):
    pytest.skip("ROS 2's launch package is not installed ('launch' is only this repository's launch/ folder; "
                "launch is not on PyPI)", allow_module_level=True)
launch_ros = pytest.importorskip("launch_ros", reason="ROS 2's launch_ros package is not installed")


@pytest.fixture(autouse=True)
def _launch_temp_files_in_tmp_path(tmp_path, monkeypatch) -> None:
    """launch_ros writes each node's parameters to a NamedTemporaryFile it does not delete
    (``launch_params_*``): put them in the test's own temporary directory instead of the system's."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv("TMPDIR", str(tmp_path))


@pytest.fixture(scope="module")
def built_prefix() -> Path:
    """The package built into a colcon-style prefix (colcon_prefix.install_prefix), once per module."""
    from colcon_prefix import install_prefix

    return install_prefix()


@pytest.fixture
def package_index(built_prefix, monkeypatch) -> Path:
    """That prefix first on AMENT_PREFIX_PATH: the launch file's default params_file (FindPackageShare) resolves
    to the built package even where no ROS 2 workspace is sourced."""
    monkeypatch.setenv("AMENT_PREFIX_PATH", os.pathsep.join(
        [str(built_prefix), *filter(None, [os.environ.get("AMENT_PREFIX_PATH")])]))
    return built_prefix


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


def test_launch_declares_the_documented_arguments_and_nodes(package_index) -> None:
    ld, context = _description(params_file=str(ROOT / "config" / "estimate.yaml"))
    names = {a.name for a in ld.entities if isinstance(a, launch.actions.DeclareLaunchArgument)}
    assert names == {"params_file", "namespace", "sim", "use_sim_time", "scenario", "vehicle"}
    assert set(_nodes(ld, context)) == {"grip_estimator", "model_calibrator"}
    ld, context = _description(params_file=str(ROOT / "config" / "estimate.yaml"), sim="true")
    assert set(_nodes(ld, context)) == {"grip_estimator", "model_calibrator", "vehicle_simulator"}
    setup = (ROOT / "setup.py").read_text()
    for exe in ("grip_estimator", "model_calibrator", "vehicle_simulator"):
        assert f"{exe} = vehcal_ros.nodes.{exe}:main" in setup or f"{exe}=vehcal_ros.nodes.{exe}:main" in setup


def test_namespace_and_per_vehicle_clock(package_index) -> None:
    """namespace:=truck7 reaches every node; with sim:=true /clock is remapped to clock (/truck7/clock) so two
    simulated vehicles keep separate clocks; without the simulator the remap is a no-op."""
    for sim, clock in (("true", "clock"), ("false", "/clock")):
        ld, context = _description(params_file=str(ROOT / "config" / "estimate.yaml"), namespace="truck7", sim=sim)
        for exe, node in _nodes(ld, context).items():
            # launch_ros (0.28) expands a Node's substitutions only here or in execute(), which starts the process
            node._perform_substitutions(context)
            assert node.expanded_node_namespace == "/truck7", exe
            assert node.expanded_remapping_rules == [("/clock", clock)], exe


def _vehicle_parameter(node, context) -> str:
    """The ``vehicle`` the node is started with: the last of its params files (launch_ros writes a dict of
    parameters as one, after the params_file) that sets it. launch_ros keeps the expanded list private."""
    import yaml

    node._perform_substitutions(context)
    found = None
    for path, is_file in node._Node__expanded_parameter_arguments:
        assert is_file, path
        for section in (yaml.safe_load(Path(path).read_text()) or {}).values():
            found = (section.get("ros__parameters") or {}).get("vehicle", found)
    return found


def test_estimators_describe_the_simulated_vehicle(package_index) -> None:
    """With sim:=true both estimators get the simulated vehicle's shipped description (the simulator's HMMWV:
    hmmwv_sim; a sedan scenario: sedan) unless vehicle:= names one; without sim the params file's stands."""
    params = str(ROOT / "config" / "estimate.yaml")
    for arguments, want in (({"sim": "true"}, "hmmwv_sim"),
                            ({"sim": "true", "scenario": "sedan_coast_down"}, "sedan"),
                            ({"sim": "true", "vehicle": "sedan"}, "sedan"),
                            ({}, "hmmwv"),
                            ({"vehicle": "my_car.yaml"}, "my_car.yaml")):
        ld, context = _description(params_file=params, **arguments)
        for exe, node in _nodes(ld, context).items():
            if exe != "vehicle_simulator":
                assert _vehicle_parameter(node, context) == want, (arguments, exe)


@pytest.mark.slow
def test_ros2_launch_starts_the_estimators(tmp_path, package_index) -> None:
    """`ros2 launch vehcal_ros estimate.launch.py` on the package built into a colcon-style prefix (first on
    AMENT_PREFIX_PATH; a sourced workspace's own build of it comes after): both estimators start."""
    if shutil.which("ros2") is None:
        pytest.skip("no ros2 command (ros2cli is not on PyPI: source a ROS 2 install)")
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


LAUNCH_SCRIPT = """
import sys
import launch
from launch.actions import IncludeLaunchDescription
from launch.launch_description_sources import PythonLaunchDescriptionSource
service = launch.LaunchService(argv=[])
args = dict(a.split(":=", 1) for a in sys.argv[2:])
service.include_launch_description(launch.LaunchDescription([
    IncludeLaunchDescription(PythonLaunchDescriptionSource(sys.argv[1]), launch_arguments=args.items())]))
sys.exit(service.run())
"""


@pytest.mark.slow
@pytest.mark.ros
def test_launch_service_runs_the_installed_package_in_a_namespace(tmp_path, rclpy_context, built_prefix) -> None:
    """The launch file of a colcon-style install prefix (colcon_prefix.install_prefix) run by launch's own
    LaunchService (what `ros2 launch` does, without ros2cli) with namespace:=truck7 sim:=true
    scenario:=coast_down: the simulator finds the scenario by name, both estimators subscribe under /truck7, the
    installed params file is in force, and the whole launch stops on SIGINT."""
    import sys

    from colcon_prefix import installed_env
    from diagnostic_msgs.msg import DiagnosticArray
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.node import Node
    from ros_util import spin_until, stop

    prefix = built_prefix
    env = installed_env(prefix, prefix.parent)
    # the sourced ROS 2 environment (launch, launch_ros and their dependencies) stays; the source tree goes
    kept = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and Path(p).resolve() != ROOT]
    env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], *kept])
    env["AMENT_PREFIX_PATH"] = os.pathsep.join([str(prefix), *filter(None, [os.environ.get("AMENT_PREFIX_PATH")])])
    (tmp_path / "run_launch.py").write_text(LAUNCH_SCRIPT)
    log = tmp_path / "launch.log"
    proc = subprocess.Popen([sys.executable, str(tmp_path / "run_launch.py"),
                             str(prefix / "share" / "vehcal_ros" / "launch" / "estimate.launch.py"),
                             "namespace:=truck7", "sim:=true", "scenario:=coast_down"],
                            cwd=tmp_path, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)
    probe = Node("launch_probe", context=rclpy_context)
    diags: list = []
    probe.create_subscription(DiagnosticArray, "/diagnostics", diags.append, 50)
    ex = SingleThreadedExecutor(context=rclpy_context)
    ex.add_node(probe)

    def running() -> bool:
        return any(st.hardware_id == "/truck7/vehicle_simulator" and "running scenario 'coast_down'" in st.message
                   for arr in diags for st in arr.status)

    try:
        assert spin_until(ex, lambda: running() or proc.poll() is not None, timeout=180.0) and running(), \
            log.read_text()[-3000:]

        def subscribers() -> list[str]:
            subs = probe.get_subscriptions_info_by_topic("/truck7/vehicle/wheel_speeds")
            return sorted(s.node_name for s in subs if s.node_namespace == "/truck7")

        # the simulator saw both subscriptions before it stepped; the probe's graph may learn of them later
        spin_until(ex, lambda: len(subscribers()) >= 2, timeout=30.0)
        assert subscribers() == ["grip_estimator", "model_calibrator"]
        assert probe.get_publishers_info_by_topic("/truck7/clock")
    finally:
        stop(proc, timeout=60.0)
        probe.destroy_node()
    assert proc.returncode == 0, log.read_text()[-3000:]
