"""The estimator nodes' parameters: the declarations of the nodes' own (topics, input conventions, timing,
health, files) and each node's complete list in declaration order, its own around the estimation parameters of its
pipeline (declared next to the configurations they fill: estimation/grip/parameters.py,
estimation/calibration/parameters.py). Each node module exports its list as ``PARAMS``; docs/nodes.md's tables
are generated from them (tools/param_reference.py). No rclpy.
"""

from __future__ import annotations

from vehcal_ros.estimation.calibration.parameters import MODEL_SPECS
from vehcal_ros.estimation.calibration.parameters import PARAMS as CALIBRATION_ESTIMATION
from vehcal_ros.estimation.grip.parameters import PARAMS as GRIP_ESTIMATION
from vehcal_ros.nodes.cpu_budget import MAX_STRETCH, PRESSURE_WINDOW
from vehcal_ros.parameters import ParamSpec
from vehcal_ros.records import WHEELS

CPU_BUDGET = ParamSpec(
    "cpu_budget", 0.0, f"CPU budget of the node process, percent of one core (all its threads; rolling "
    f"{PRESSURE_WINDOW:g} s mean): above it /diagnostics WARNs and fit cycles are postponed (period stretched up to "
    f"{MAX_STRETCH} x, shorter than the data window), never inputs; 0 = no budget", 0.0, 800.0)
"""The one declaration of ``cpu_budget``; both estimator nodes list it in their ``PARAMS``."""

CAN_TOPICS = (
    ParamSpec("drive_torque_topic", "vehicle/drive_torque", "sensor_msgs/JointState of the CAN drive torque (joints "
              "engine, gear, axle_front, axle_rear); subscribed when the vehicle description's torque_source is "
              "engine or axle", read_only=True),
    ParamSpec("brake_pressure_topic", "vehicle/brake_pressure", "sensor_msgs/FluidPressure of the brake line "
              "pressure, Pa (frame_id front_axle, rear_axle, or any other for the master cylinder); subscribed with "
              "torque_source engine or axle", read_only=True),
)
"""The one declaration of the CAN torque topics; both estimator nodes list them in their ``PARAMS``."""

FRAMES = (
    ParamSpec("wheel_names", list(WHEELS), "JointState / frame_id names of the FL, FR, RL, RR wheels",
              read_only=True, check=lambda v: None if len(v) == 4 else "parameter 'wheel_names' needs 4 names"),
    ParamSpec("controls_axes", [0, 1, 2], "Joy axes of throttle, brake and steering", read_only=True,
              check=lambda v: None if len(v) == 3 else "parameter 'controls_axes' needs 3 indices"),
)
"""The one declaration of the input conventions (wheel names, Joy axes); both estimator nodes list them."""

HEALTH = (
    ParamSpec("stale_timeout", 1.0, "an input topic silent for longer is reported WARN, s", 0.01, 3600.0),
    ParamSpec("diagnostics_period", 1.0, "period of the /diagnostics status, s", 0.05, 60.0, read_only=True),
    ParamSpec("clock_stall_timeout", 0.0, "wall time, s, the ROS clock must stand still before the data count as "
              "ended (one last cycle on data since the last cycle); 0 = 2 diagnostics periods", 0.0, 3600.0,
              read_only=True),
    CPU_BUDGET,
)
"""The one declaration of the health and timing parameters both estimator nodes list (with ``cpu_budget``)."""

GRIP_ESTIMATOR: tuple[ParamSpec, ...] = (
    ParamSpec("wheel_speeds_topic", "vehicle/wheel_speeds", "sensor_msgs/JointState, rad/s", read_only=True),
    ParamSpec("tire_forces_topic", "vehicle/tire_forces", "geometry_msgs/WrenchStamped per wheel (frame_id = wheel)",
              read_only=True),
    ParamSpec("odom_topic", "vehicle/odom", "nav_msgs/Odometry, body-frame twist", read_only=True),
    ParamSpec("controls_topic", "vehicle/controls", "sensor_msgs/Joy driver inputs (for the steering angle)",
              read_only=True),
    ParamSpec("output_prefix", "vehcal", "prefix of the grip and grip_curve output topics (relative: under the "
              "namespace)", read_only=True),
    *FRAMES,
    *GRIP_ESTIMATION,
    ParamSpec("fit_period", 5.0, "time between estimation cycles, s (ROS clock)", 0.05, 3600.0, read_only=True),
    ParamSpec("belief_period", 0.5, "period of the grip belief in force on grip/<scope> and grip_age/<scope>, s "
              "(ROS clock; published while data arrive)", 0.01, 60.0, read_only=True),
    ParamSpec("gnss_topic", "vehicle/gnss/vel", "geometry_msgs/TwistWithCovarianceStamped, ENU velocity of a GNSS "
              "receiver: the speed reference of the slips (speed_reference gnss_imu) and of the online rolling "
              "radius", read_only=True),
    ParamSpec("imu_topic", "vehicle/imu", "sensor_msgs/Imu (load transfer; pitch for the toe of the bump steer)",
              read_only=True),
    ParamSpec("model_parameters_topic", "vehcal/model_parameters", "the calibrator's model (calibrated roll "
              "stiffnesses split the lateral load transfer)", read_only=True),
    ParamSpec("publish_estimated_forces", False, "publish the estimated forces (WrenchStamped per wheel)",
              read_only=True),
    ParamSpec("estimated_forces_topic", "vehcal/tire_forces_estimated", "topic of the estimated forces",
              read_only=True),
    *HEALTH,
    *CAN_TOPICS,
)
"""``grip_estimator``'s parameters."""

MODEL_CALIBRATOR: tuple[ParamSpec, ...] = (
    ParamSpec("wheel_speeds_topic", "vehicle/wheel_speeds", "sensor_msgs/JointState, rad/s", read_only=True),
    ParamSpec("imu_topic", "vehicle/imu", "sensor_msgs/Imu (roll, roll rate, yaw rate)", read_only=True),
    ParamSpec("odom_topic", "vehicle/odom", "nav_msgs/Odometry, body-frame twist (u, v, yaw rate)", read_only=True),
    ParamSpec("controls_topic", "vehicle/controls", "sensor_msgs/Joy [throttle, brake, steering]", read_only=True),
    ParamSpec("output_topic", "vehcal/model_parameters", "diagnostic_msgs/DiagnosticArray of the calibrated model",
              read_only=True),
    *FRAMES,
    *CALIBRATION_ESTIMATION,
    ParamSpec("params_out", "", "path of the params YAML written on each recalibration ('' = none)"),
    ParamSpec("params_node_name", "model_calibrator", "node name at the top of the params YAML"),
    ParamSpec("state_file", "", "state file (JSON, or YAML for .yaml/.yml): accepted results restored at start, "
              "written after each accepted fit and on ~/save ('' = none)", read_only=True),
    ParamSpec("vehicle_id", "default", "the vehicle this calibrator's state file belongs to (a file written for "
              "another id is refused)", read_only=True,
              check=lambda v: None if str(v).strip() else "parameter 'vehicle_id' must not be empty"),
    ParamSpec("calibration_period", 5.0, "time between calibration cycles, s (ROS clock)", 0.05, 86400.0,
              read_only=True),
    *HEALTH,
    *CAN_TOPICS,
    *MODEL_SPECS,
)
"""``model_calibrator``'s parameters."""
