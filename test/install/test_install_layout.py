"""What ``colcon build`` + ``ros2 launch vehcal_ros estimate.launch.py sim:=true namespace:=<ns>`` do, without the
launch package (not on PyPI): the package is built into a fresh install prefix the way colcon's ament_python build
does it, and the INSTALLED executables are started from an unrelated working directory with the arguments
launch_ros gives them. Checked over DDS:

* the installed ``vehcal precompile`` (as after ``colcon build``: ``ros2 run vehcal_ros vehcal precompile``)
  compiles the kernels into the prefix's cache, so the six nodes started next load them instead of each compiling
  what it uses;
* the simulator finds its scenario by name (through the ament index: the source tree is not on the path);
* every topic of a vehicle is under its namespace (only /diagnostics, /clock remapped per vehicle, /rosout and
  /parameter_events outside);
* the installed config/estimate.yaml is in force in a namespace (its wildcard node keys), read back through the
  nodes' parameter services;
* a calibration result arrives on /<ns>/vehcal/model_parameters;
* two simulated vehicles at once (/truck7, /truck8) do not see each other's data;
* the estimators' /diagnostics go on after the scenario ended (sim time stopped) and say what was accepted; every
  process shuts down on SIGINT without a traceback.

launch_ros turns ``Node(name=..., namespace=..., parameters=[file, {...}], remappings=[...])`` into
``<exe> --ros-args -r __node:=<name> -r __ns:=/<ns> --params-file <file> -p key:=value -r from:=to``; the
simulator's ``/clock`` is remapped to ``clock`` (i.e. ``/<ns>/clock``) when ``sim:=true`` so that two simulated
vehicles keep separate sim clocks (launch/estimate.launch.py does the same). The test-only settings that make a
calibration arrive within a minute (one stage, fewer draws, a 36 s coast-down) travel as a second params file
with wildcard keys, as launch_ros passes a dict of parameters.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from colcon_prefix import install_prefix, installed_env

from vehcal_ros.io.scenarios import simulated_description

PKG = "vehcal_ros"
NAMESPACES = ("truck7", "truck8")
TEST_PARAMS = {
    "/**/model_calibrator": {"ros__parameters": {"stages": ["rolling_resistance"], "require_order": False,
                                                 "n_chains": 2, "n_draws": 300, "min_ess": 100.0, "min_ess_tail": 100.0,
                                                 "max_r_hat": 1.05, "calibration_period": 2.0,
                                                 "max_gap": 0.25}},   # best-effort losses on a loaded machine
    "/**/grip_estimator": {"ros__parameters": {"n_steps": 4000}},
    "/**/vehicle_simulator": {"ros__parameters": {"duration": 36.0}},   # coast from 20 s: 10 s windows close
}

pytestmark = [pytest.mark.ros, pytest.mark.slow]


def launch_args(exe: Path, name: str, ns: str, params_file: Path, extra_file: Path, sim: bool,
                extra: dict[str, str]) -> list[str]:
    args = [str(exe), "--ros-args", "-r", f"__node:={name}", "-r", f"__ns:=/{ns}", "--params-file",
            str(params_file), "--params-file", str(extra_file)]
    for key, value in extra.items():
        args += ["-p", f"{key}:={value}"]
    if sim:
        args += ["-r", "/clock:=clock"]
    return args


@pytest.mark.timeout(900)   # ~90 s on 2 shared cores; the first run compiles the numba kernels of the prefix
def test_installed_package_two_vehicles_over_dds(tmp_path, rclpy_context) -> None:
    from diagnostic_msgs.msg import DiagnosticArray
    from rcl_interfaces.srv import GetParameters
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.node import Node
    from ros_util import spin_until, stop_all

    from vehcal_ros.nodes.grip_estimator import latched_qos

    prefix = install_prefix()
    lib = prefix / "lib" / PKG
    share = prefix / "share" / PKG
    for exe in ("grip_estimator", "model_calibrator", "vehicle_simulator"):
        assert (lib / exe).is_file(), sorted(p.name for p in lib.iterdir())
    installed_yaml = share / "config" / "estimate.yaml"
    assert installed_yaml.is_file() and (share / "config" / "scenarios" / "coast_down.yaml").is_file()
    assert (share / "launch" / "estimate.launch.py").is_file()   # what `ros2 launch vehcal_ros ...` finds
    assert (prefix / "share" / "ament_index" / "resource_index" / "packages" / PKG).is_file()
    extra_file = tmp_path / "launch_params.yaml"
    extra_file.write_text(yaml.safe_dump(TEST_PARAMS))
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    env = installed_env(prefix, prefix.parent)
    where = subprocess.run([sys.executable, "-c", "import vehcal_ros; print(vehcal_ros.__file__)"], env=env,
                           cwd=elsewhere, capture_output=True, text=True, check=True).stdout.strip()
    assert Path(where).is_relative_to(prefix), where            # the installed copy runs, not the source tree
    compiled = subprocess.run([str(lib / "vehcal"), "precompile"], env=env, cwd=elsewhere, capture_output=True,
                              text=True, timeout=600)
    assert compiled.returncode == 0 and compiled.stdout.startswith("kernels compiled into"), (
        compiled.stdout[-2000:] + compiled.stderr[-3000:])
    cached = {p.name.split(".")[0] for p in Path(env["NUMBA_CACHE_DIR"]).rglob("*.nbi")}
    assert {"dynamics", "posterior", "vehicle_8dof", "tire_forces"} <= cached, sorted(cached)  # the three groups

    probe = Node("install_probe", context=rclpy_context)
    models = {ns: [] for ns in NAMESPACES}
    diags: list = []
    for ns in NAMESPACES:
        probe.create_subscription(DiagnosticArray, f"/{ns}/vehcal/model_parameters", models[ns].append,
                                  latched_qos())
    probe.create_subscription(DiagnosticArray, "/diagnostics", diags.append, 200)
    ex = SingleThreadedExecutor(context=rclpy_context)
    ex.add_node(probe)

    procs: list[subprocess.Popen] = []
    logs: dict[str, Path] = {}
    try:
        for k, ns in enumerate(NAMESPACES):
            # the launch file's sim:=true: the estimators describe the simulated vehicle (EstimatorVehicle)
            estimator = {"use_sim_time": "true", "vehicle": simulated_description("coast_down")}
            nodes = [("model_calibrator", estimator), ("grip_estimator", estimator),
                     ("vehicle_simulator", {"scenario": "coast_down", "publish_clock": "true", "seed": str(k)})]
            for name, extra in nodes:
                logs[f"{ns}/{name}"] = log = tmp_path / f"{ns}_{name}.log"
                args = launch_args(lib / name, name, ns, installed_yaml, extra_file, True, extra)
                procs.append(subprocess.Popen(args, cwd=elsewhere, env=env, stdout=log.open("w"),
                                              stderr=subprocess.STDOUT))

        def tail() -> str:
            last = {}
            for arr in diags:
                for st in arr.status:
                    last[(st.hardware_id, st.name)] = st.message
            status = "\n".join(f"{hw} {name}: {msg}" for (hw, name), msg in sorted(last.items()))
            return status + "\n" + "\n".join(f"--- {k}\n{p.read_text()[-1500:]}" for k, p in logs.items())

        # a calibration result per vehicle (the simulators found coast_down by name through the ament index)
        ok = spin_until(ex, lambda: all(models[ns] for ns in NAMESPACES)
                        or any(p.poll() is not None for p in procs), timeout=400.0)
        assert ok and all(models[ns] for ns in NAMESPACES), tail()
        for ns in NAMESPACES:
            rr = {kv.key: kv.value for st in models[ns][-1].status if st.name == "rr" for kv in st.values}
            assert rr["stage"] == "rolling_resistance" and 0.001 < float(rr["mean"]) < 0.03, rr

        # every topic of a vehicle under its namespace
        names = {n for n, _ in probe.get_topic_names_and_types()}
        outside = {n for n in names if not n.startswith(tuple(f"/{ns}/" for ns in NAMESPACES))}
        assert outside <= {"/diagnostics", "/rosout", "/parameter_events"}, sorted(outside)
        for ns in NAMESPACES:
            for topic in ("vehicle/wheel_speeds", "vehicle/imu", "vehicle/odom", "vehicle/tire_forces", "clock",
                          "vehcal/model_parameters", "vehcal/grip/front_axle", "vehcal/grip_curve/rear_axle"):
                assert f"/{ns}/{topic}" in names, (ns, topic, sorted(names))
            # the vehicle's inputs: its own simulator only, read by its own estimators only
            pubs = probe.get_publishers_info_by_topic(f"/{ns}/vehicle/wheel_speeds")
            subs = probe.get_subscriptions_info_by_topic(f"/{ns}/vehicle/wheel_speeds")
            assert [(p.node_namespace, p.node_name) for p in pubs] == [(f"/{ns}", "vehicle_simulator")]
            assert sorted((s.node_namespace, s.node_name) for s in subs) == [
                (f"/{ns}", "grip_estimator"), (f"/{ns}", "model_calibrator")]

        # the installed params file in force (wildcard keys) under a namespace, read back over the services
        expected = yaml.safe_load(installed_yaml.read_text())
        for ns in NAMESPACES:
            for node, names_ in (("grip_estimator", ["r0", "kt", "window", "max_peak_slip", "n_steps", "vehicle"]),
                                 ("model_calibrator", ["r0", "rr_min_speed_drop", "vehicle", "n_draws", "stages"])):
                client = probe.create_client(GetParameters, f"/{ns}/{node}/get_parameters")
                assert client.wait_for_service(timeout_sec=10.0)
                future = client.call_async(GetParameters.Request(names=names_))
                assert spin_until(ex, future.done, timeout=10.0)
                got = dict(zip(names_, (_value(v) for v in future.result().values), strict=True))
                want = {**expected[f"/**/{node}"]["ros__parameters"], **TEST_PARAMS[f"/**/{node}"]["ros__parameters"],
                        "vehicle": estimator["vehicle"]}
                assert got == {n: want[n] for n in names_}, (ns, node, got)

        # the two vehicles do not see each other's data: each calibrator received no more wheel-speed messages
        # than its own simulator published (cross-talk would double them; the sensor QoS is best effort, and on a
        # loaded machine some are lost: 85 % arrived in one run on 2 shared cores)
        def last_values(prefix_name: str, hw: str) -> dict[str, str] | None:
            for arr in reversed(diags):
                for st in arr.status:
                    if st.name.startswith(prefix_name) and st.hardware_id == hw:
                        return {kv.key: kv.value for kv in st.values}
            return None

        def finished() -> bool:
            return all((v := last_values("vehicle_simulator", f"/{ns}/vehicle_simulator")) is not None
                       and v["state"] == "finished" for ns in NAMESPACES)

        assert spin_until(ex, finished, timeout=120.0), tail()

        # /diagnostics keep flowing after the scenario ended (no more /clock: the wall-clock fallback)
        def count(hw: str) -> int:
            return sum(1 for arr in diags for st in arr.status if st.hardware_id == hw and st.name.endswith("inputs"))

        hws = [f"/{ns}/{node}" for ns in NAMESPACES for node in ("model_calibrator", "grip_estimator")]
        start = {hw: count(hw) for hw in hws}
        assert spin_until(ex, lambda: all(count(hw) >= start[hw] + 2 for hw in hws), timeout=15.0), start
        for ns in NAMESPACES:
            sim = last_values("vehicle_simulator", f"/{ns}/vehicle_simulator")
            cal = last_values("model_calibrator: inputs", f"/{ns}/model_calibrator")
            sent, got = int(sim["records/vehicle/wheel_speeds"]), int(cal["received_wheel_speeds"])
            assert 0.5 * sent <= got <= sent, (ns, sent, got)
            status = last_values("model_calibrator: calibration", f"/{ns}/model_calibrator")
            assert status["calibrated_stages"] == "rolling_resistance", status
    finally:
        stop_all(procs, timeout=20.0)
        probe.destroy_node()
    for key, log in logs.items():   # a clean shutdown: nothing logged to a closed context, no traceback
        text = log.read_text()
        assert "Traceback" not in text and "context is invalid" not in text, (key, text[-2000:])



def _value(v):
    """rcl_interfaces/ParameterValue -> Python value (lists as lists)."""
    from rclpy.parameter import parameter_value_to_python

    value = parameter_value_to_python(v)
    return list(value) if not isinstance(value, (str, bytes)) and hasattr(value, "__len__") else value
