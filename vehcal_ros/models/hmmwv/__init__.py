"""14-DOF constraint-embedded HMMWV simulator (constraint-embedding paper; DESIGN.md section 5 "Simulator").

Public API: :class:`Hmmwv14`, :class:`HmmwvParams`, :class:`RoadMap`, :class:`RoadPatch`.
Wheel arrays are ordered FL, FR, RL, RR (``vehcal_ros.estimation.signals.WHEELS``).
"""

from .params import HmmwvParams
from .road import RoadMap, RoadPatch
from .simulator import Hmmwv14

__all__ = ["Hmmwv14", "HmmwvParams", "RoadMap", "RoadPatch"]
