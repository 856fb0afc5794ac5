"""What the vehicle's sensors say, conditioned for both estimators: rolling buffers, input guards, tire forces
from production sensors, the online rolling radius, the slips' speed reference, wheel torques from CAN signals,
the torque scale, the IMU's mounting yaw and the vehicle's position. Imports neither estimator."""
