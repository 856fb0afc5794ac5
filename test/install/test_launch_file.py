"""launch/estimate.launch.py with the real ROS 2 ``launch`` / ``launch_ros`` packages.

Those are not on PyPI (the PyPI project called ``launch`` is an unrelated 2017 tool), so in the pip environment
these tests are reported as skipped with the reason; where ``launch`` and ``launch_ros`` are importable (a sourced
ROS 2 install) they run against the package built into a colcon-style prefix (first on AMENT_PREFIX_PATH): the
declared arguments and nodes; launch's own LaunchService starting the nodes, observed through its public
ProcessStarted events (each node's command line: namespace, per-vehicle clock remap, and the vehicle description
each estimator is given in its params files), shut down as soon as they have started; LaunchService running the
installed package (namespace:=truck7 sim:=true scenario:=coast_down); the ``ros2 launch`` smoke test when ros2cli
is there too. Checked outside CI, last on 2026-12-01, with ros2/launch 3.7.1 (launch, launch_xml, launch_yaml),
launch_ros 0.28.0 (launch_ros, ros2launch) and ros2cli 0.36.1 (ros2cli, ros2pkg) from their sources on PYTHONPATH /
PATH beside the pip rclpy (composition_interfaces, which launch_ros imports for composable node containers only,
replaced by a placeholder whose services raise if used): all five pass. In CI, test_launch_contract.py checks the
launch file's source against the package (executables, node names, parameters, default params file) and
test_install_layout.py runs the installed nodes with the arguments launch_ros gives them.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
from dataclasses import dataclass
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
    (``launch_params_*``): put them in the test's own temporary directory instead of the system's (TMPDIR for
    the launch subprocesses, which inherit it)."""
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


STARTED_SCRIPT = """
import json
import sys

import launch
from launch.actions import EmitEvent, IncludeLaunchDescription, RegisterEventHandler, TimerAction
from launch.event_handlers import OnProcessStart
from launch.events import Shutdown
from launch.launch_description_sources import PythonLaunchDescriptionSource

out, expected, timeout, launch_file = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
args = dict(a.split(":=", 1) for a in sys.argv[5:])
started = []


def on_start(event, context):
    started.append(list(event.cmd))
    if len(started) == expected:
        return EmitEvent(event=Shutdown(reason="the expected processes started"))
    return None


service = launch.LaunchService(argv=[])
service.include_launch_description(launch.LaunchDescription([
    RegisterEventHandler(OnProcessStart(on_start=on_start)),
    TimerAction(period=timeout, actions=[EmitEvent(event=Shutdown(reason="timed out"))]),
    IncludeLaunchDescription(PythonLaunchDescriptionSource(launch_file), launch_arguments=args.items()),
]))
code = service.run()
with open(out, "w") as f:
    json.dump(started, f)
sys.exit(code)
"""


@dataclass(frozen=True)
class StartedNode:
    """What a started node's command line (``... --ros-args -r __node:=NAME -r __ns:=NS --params-file FILE ...
    -r FROM:=TO``) gives it."""

    namespace: str | None
    """``__ns`` (None: none given, the root namespace)."""
    remaps: list[tuple[str, str]]
    """The remapping rules other than ``__node`` and ``__ns``, in order."""
    params_files: list[str]
    """The ``--params-file`` arguments, in order."""


def _parse_command(cmd: list[str]) -> StartedNode:
    """The namespace, remaps and params files of a node's command line (everything after its ``--ros-args``)."""
    namespace, remaps, params_files = None, [], []
    args = iter(cmd[cmd.index("--ros-args") + 1:])
    for flag in args:
        if flag == "--ros-args":
            continue
        value = next(args)
        if flag == "--params-file":
            params_files.append(value)
        elif flag == "-r":
            src, dst = value.split(":=", 1)
            if src == "__ns":
                namespace = dst
            elif src != "__node":
                remaps.append((src, dst))
        else:
            raise AssertionError(f"unexpected ROS argument {flag} {value} in {cmd}")
    return StartedNode(namespace, remaps, params_files)


def _started_nodes(tmp_path: Path, expected: int, **arguments: str) -> dict[str, StartedNode]:
    """Run the launch file with launch's own LaunchService (in a subprocess: a fresh launch state per run) with
    ``arguments``, record each process's command line from the ProcessStarted events, and shut the launch down as
    soon as ``expected`` processes have started (or after 60 s); the started nodes by executable name."""
    import json
    import sys
    import tempfile

    run = Path(tempfile.mkdtemp(prefix="started_", dir=tmp_path))
    (run / "record_started.py").write_text(STARTED_SCRIPT)
    env = {**os.environ, "ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST", "ROS_LOG_DIR": str(run / "log")}
    # the launch file's substitutions import vehcal_ros: this source tree's, as in the other tests of this module
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    proc = subprocess.run([sys.executable, str(run / "record_started.py"), str(run / "started.json"),
                           str(expected), "60", str(LAUNCH_FILE), *(f"{k}:={v}" for k, v in arguments.items())],
                          cwd=run, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=180)
    assert proc.returncode == 0, proc.stdout[-3000:]
    commands = json.loads((run / "started.json").read_text())
    assert len(commands) == expected, (commands, proc.stdout[-3000:])
    return {Path(cmd[0]).name: _parse_command(cmd) for cmd in commands}


def test_namespace_and_per_vehicle_clock(tmp_path, package_index) -> None:
    """namespace:=truck7 reaches every node; with sim:=true /clock is remapped to clock (/truck7/clock) so two
    simulated vehicles keep separate clocks; without the simulator the remap is a no-op."""
    params = str(ROOT / "config" / "estimate.yaml")
    for sim, clock, exes in (("true", "clock", {"grip_estimator", "model_calibrator", "vehicle_simulator"}),
                             ("false", "/clock", {"grip_estimator", "model_calibrator"})):
        started = _started_nodes(tmp_path, len(exes), params_file=params, namespace="truck7", sim=sim)
        assert set(started) == exes
        for exe, node in started.items():
            assert node.namespace == "/truck7", exe
            assert node.remaps == [("/clock", clock)], exe


def _vehicle_parameter(node: StartedNode) -> str | None:
    """The ``vehicle`` the node is started with: the last of its params files (launch_ros writes a dict of
    parameters as one, after the params_file) that sets it."""
    import yaml

    found = None
    for path in node.params_files:
        for section in (yaml.safe_load(Path(path).read_text()) or {}).values():
            found = (section.get("ros__parameters") or {}).get("vehicle", found)
    return found


def test_estimators_describe_the_simulated_vehicle(tmp_path, package_index) -> None:
    """With sim:=true both estimators get the simulated vehicle's shipped description (the simulator's HMMWV:
    hmmwv_sim; a sedan scenario: sedan) unless vehicle:= names one; without sim the params file's stands."""
    params = str(ROOT / "config" / "estimate.yaml")
    for arguments, want in (({"sim": "true"}, "hmmwv_sim"),
                            ({"sim": "true", "scenario": "sedan_coast_down"}, "sedan"),
                            ({"sim": "true", "vehicle": "sedan"}, "sedan"),
                            ({}, "hmmwv"),
                            ({"vehicle": "my_car.yaml"}, "my_car.yaml")):
        started = _started_nodes(tmp_path, 3 if arguments.get("sim") == "true" else 2, params_file=params,
                                 **arguments)
        for exe in ("grip_estimator", "model_calibrator"):
            assert _vehicle_parameter(started[exe]) == want, (arguments, exe)


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
