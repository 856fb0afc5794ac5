"""Bounded nonlinear least squares whose finite-difference Jacobian is evaluated in parallel
(:mod:`~vehcal_ros.inference.least_squares.parallel`, the parallel-estimation paper)."""
