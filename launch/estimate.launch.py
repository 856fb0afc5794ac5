"""vehcal_ros: the estimator nodes, optionally against the built-in simulated vehicle.

    ros2 launch vehcal_ros estimate.launch.py                       # on a vehicle
    ros2 launch vehcal_ros estimate.launch.py sim:=true scenario:=daily_driving
    ros2 launch vehcal_ros estimate.launch.py params_file:=/path/my.yaml namespace:=truck7

Arguments: params_file (default: the package's config/estimate.yaml), namespace, use_sim_time (default: the
value of sim), sim (start vehicle_simulator, which publishes /clock), scenario (simulator scenario name or file).

Topic names are relative, so namespace:=truck7 puts a vehicle's whole graph under /truck7/ (the params file's
node keys are wildcards, /**/grip_estimator, so it applies in any namespace). With sim:=true the simulated
vehicle's clock is remapped to clock (/<namespace>/clock) for all three nodes: two simulated vehicles keep
separate sim clocks. The simulator waits (bounded: wait_for_subscribers / wait_timeout in the params file) until
both estimators subscribe before it steps.
"""

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument
from launch.conditions import IfCondition
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution, PythonExpression
from launch_ros.actions import Node
from launch_ros.substitutions import FindPackageShare


def generate_launch_description() -> LaunchDescription:
    params_file = LaunchConfiguration("params_file")
    namespace = LaunchConfiguration("namespace")
    use_sim_time = LaunchConfiguration("use_sim_time")
    sim = LaunchConfiguration("sim")
    scenario = LaunchConfiguration("scenario")
    estimator_params = [params_file, {"use_sim_time": use_sim_time}]
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
        Node(package="vehcal_ros", executable="grip_estimator", name="grip_estimator",
             namespace=namespace, parameters=estimator_params, remappings=clock, output="screen"),
        Node(package="vehcal_ros", executable="model_calibrator", name="model_calibrator",
             namespace=namespace, parameters=estimator_params, remappings=clock, output="screen"),
        Node(package="vehcal_ros", executable="vehicle_simulator", name="vehicle_simulator",
             namespace=namespace, condition=IfCondition(sim), remappings=clock, output="screen",
             parameters=[params_file, {"scenario": scenario, "publish_clock": True}]),
    ])
