"""14-DOF constraint-embedded vehicle simulator (docs/simulator_model.md: the constraint-embedding method).

It simulates the HMMWV (default) and any vehicle model file in the layout of ``data/hmmwv.yaml`` (the shipped
``sedan``). Public API: :class:`Hmmwv14` (alias
:class:`Vehicle14`), :class:`HmmwvParams`, :func:`load_simulator_params`, :class:`RoadMap`, :class:`RoadPatch`.
Wheel arrays are ordered FL, FR, RL, RR (``vehcal_ros.records.WHEELS``).
"""

from .params import VEHICLE_NAMES, HmmwvParams, load_simulator_params, vehicle_model_file
from .road import RoadMap, RoadPatch
from .simulator import Hmmwv14, Vehicle14

__all__ = [
    "Hmmwv14",
    "HmmwvParams",
    "RoadMap",
    "RoadPatch",
    "VEHICLE_NAMES",
    "Vehicle14",
    "load_simulator_params",
    "vehicle_model_file",
]
