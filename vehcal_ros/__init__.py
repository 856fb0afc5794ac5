"""vehcal_ros: in-vehicle grip estimation and Bayesian 8-DOF model calibration for ROS 2.

Layers (docs/design.md): ``models`` (numba kernels), ``inference`` (fitting, sampling,
diagnostics), ``estimation`` (domain logic), ``io`` (bags, scenarios, reports, config) never import rclpy;
``nodes`` are thin rclpy adapters; ``cli`` is the ``vehcal`` command.
"""

from vehcal_ros.numba_cache import configure as _configure_numba_cache

__version__ = "0.1.0"

_configure_numba_cache()   # compiled kernels cached under a key of the package's sources (numba_cache.py)
