"""The slip geometry of the tests' synthetic vehicle, stated once: the 8-DOF paper's HMMWV (Table 2) with the slip
radius law r0 - Fz/kt of its unloaded radius and vertical stiffness. ``GripSignalConfig`` has no vehicle defaults
(the product takes them from the vehicle description); the tests that build slips by hand give these."""

from __future__ import annotations

from vehcal_ros.models.powertrain import STEERING_GAIN

R0, KT = 0.47, 326332.0               # m, N/m
X = (1.6889, 1.6889, -1.6889, -1.6889)  # m, wheel positions from the CM (FL, FR, RL, RR)
Y = (0.91, -0.91, 0.91, -0.91)          # m, left positive

SYNTHETIC_GEOMETRY = {"wheel_x": X, "wheel_y": Y, "driven": (True, True), "steering_gain": STEERING_GAIN,
                      "radius_mode": "load", "r0": R0, "kt": KT, "kt_rear": 0.0}
