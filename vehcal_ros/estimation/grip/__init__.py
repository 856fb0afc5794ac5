"""The grip estimator (Mussot et al. 2022, doi:10.1016/j.conengprac.2021.105048): friction samples from the
signals, the deconvolved slips, the magic-formula fit, the road-change test, the belief in force over time and
its scoring. Independent of :mod:`vehcal_ros.estimation.calibration`."""
