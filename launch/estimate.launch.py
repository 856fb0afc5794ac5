"""vehcal_ros: the estimator nodes, optionally against the built-in simulated vehicle.

    ros2 launch vehcal_ros estimate.launch.py                       # on a vehicle
    ros2 launch vehcal_ros estimate.launch.py sim:=true scenario:=daily_driving
    ros2 launch vehcal_ros estimate.launch.py params_file:=/path/my.yaml namespace:=truck7 vehicle:=my_car.yaml

Arguments: params_file (default: the package's config/estimate.yaml), namespace, use_sim_time (default: the
value of sim), sim (start vehicle_simulator, which publishes /clock), scenario (simulator scenario name or file),
vehicle (the estimators' vehicle description, a config/vehicles name or a YAML file; default: with sim:=true the
shipped description of the vehicle the simulator drives, e.g. hmmwv_sim, as `vehcal run estimate --sim` gives
it; otherwise the params file's).

Topic names are relative, so namespace:=truck7 puts a vehicle's whole graph under /truck7/ (the params file's
node keys are wildcards, /**/grip_estimator, so it applies in any namespace). With sim:=true the simulated
vehicle's clock is remapped to clock (/<namespace>/clock) for all three nodes: two simulated vehicles keep
separate sim clocks. The simulator waits (bounded: wait_for_subscribers / wait_timeout in the params file) until
both estimators subscribe before it steps.
"""

from launch import LaunchContext, LaunchDescription, Substitution
from launch.actions import DeclareLaunchArgument
from launch.conditions import IfCondition
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution, PythonExpression
from launch_ros.actions import Node
from launch_ros.substitutions import FindPackageShare


class EstimatorVehicle(Substitution):
    """The ``vehicle`` parameter of estimator ``node``: the ``vehicle`` argument if given; else, with sim:=true,
    the shipped description of the vehicle the simulator drives (its ``vehicle`` in the params file, else the
    scenario's: vehcal_ros.io.scenarios.simulated_description); else the params file's, or the node's declared
    default where the file has none (the value the node would take anyway)."""

    def __init__(self, node: str) -> None:
        super().__init__()
        self.node = node

    def describe(self) -> str:
        return f"EstimatorVehicle({self.node!r})"

    def perform(self, context: LaunchContext) -> str:
        vehicle = LaunchConfiguration("vehicle").perform(context)
        if vehicle:
            return vehicle
        from vehcal_ros.commands.run import load_parameters, node_specs
        from vehcal_ros.io.scenarios import simulated_description

        params = load_parameters(LaunchConfiguration("params_file").perform(context))
        if LaunchConfiguration("sim").perform(context).lower() == "true":
            simulated = simulated_description(LaunchConfiguration("scenario").perform(context),
                                              params.get("vehicle_simulator", {}).get("vehicle"))
            if simulated:
                return simulated
        declared = next(spec.default for spec in node_specs()[self.node] if spec.name == "vehicle")
        return str(params.get(self.node, {}).get("vehicle", declared))


def generate_launch_description() -> LaunchDescription:
    params_file = LaunchConfiguration("params_file")
    namespace = LaunchConfiguration("namespace")
    use_sim_time = LaunchConfiguration("use_sim_time")
    sim = LaunchConfiguration("sim")
    scenario = LaunchConfiguration("scenario")
    grip_params = [params_file, {"use_sim_time": use_sim_time, "vehicle": EstimatorVehicle("grip_estimator")}]
    calibrator_params = [params_file, {"use_sim_time": use_sim_time, "vehicle": EstimatorVehicle("model_calibrator")}]
    # /clock -> clock (i.e. /<namespace>/clock) for a simulated vehicle; a no-op remap otherwise
    clock = [("/clock", PythonExpression(["'clock' if '", sim, "'.lower() == 'true' else '/clock'"]))]

    return LaunchDescription([
        DeclareLaunchArgument("params_file", description="ROS 2 params YAML for all nodes",
                              default_value=PathJoinSubstitution([FindPackageShare("vehcal_ros"),
                                                                  "config", "estimate.yaml"])),
        DeclareLaunchArgument("namespace", default_value="", description="namespace of every node"),
        DeclareLaunchArgument("sim", default_value="false", description="also start vehicle_simulator"),
        DeclareLaunchArgument("use_sim_time", default_value=sim, description="follow /clock"),
        DeclareLaunchArgument("scenario", default_value="daily_driving", description="simulator scenario"),
        DeclareLaunchArgument("vehicle", default_value="", description="the estimators' vehicle description "
                              "(default: with sim the simulated vehicle's, else the params file's)"),
        Node(package="vehcal_ros", executable="grip_estimator", name="grip_estimator",
             namespace=namespace, parameters=grip_params, remappings=clock, output="screen"),
        Node(package="vehcal_ros", executable="model_calibrator", name="model_calibrator",
             namespace=namespace, parameters=calibrator_params, remappings=clock, output="screen"),
        Node(package="vehcal_ros", executable="vehicle_simulator", name="vehicle_simulator",
             namespace=namespace, condition=IfCondition(sim), remappings=clock, output="screen",
             parameters=[params_file, {"scenario": scenario, "publish_clock": True}]),
    ])
