"""Bag replay: the live estimators over a rosbag2 file, on the bag's clock, with a live run's numbers.

:mod:`~vehcal_ros.replay.params` (the nodes' values, pipelines and topics), :mod:`~vehcal_ros.replay.stream`
(records and timer ticks in bag time), :mod:`~vehcal_ros.replay.guards` (what the live nodes let in),
:mod:`~vehcal_ros.replay.serial` (:func:`~vehcal_ros.replay.serial.replay_bag`, the entry point and the reference
schedule), :mod:`~vehcal_ros.replay.parallel` (the same numbers from several processes),
:mod:`~vehcal_ros.replay.results` (what was found), :mod:`~vehcal_ros.replay.outputs` (what the nodes would have
published, as a bag), :mod:`~vehcal_ros.replay.reports` (figures and an HTML index) and
:mod:`~vehcal_ros.replay.fleet` (one drive of a fleet with its carried calibration state).
"""
