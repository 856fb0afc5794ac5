"""The staged Bayesian calibration of the 8-DOF model (Unjhawala et al. 2023, doi:10.1115/1.4062199): maneuver
segments and their qualification, the stage fit, predictive acceptance, recalibration checks, the spread within
and between windows, the carried state's rules and the held-out test. Independent of
:mod:`vehcal_ros.estimation.grip`."""
