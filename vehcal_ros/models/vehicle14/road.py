"""Road friction map: rectangular patches of peak friction coefficient on a flat road z = 0
(docs/simulator_model.md), optionally inclined as a whole (``grade``).

A graded road is the plane z = 0 of the simulator's world frame tilted about the world y axis so that it rises
``grade`` (rise over run, 0.05 = 5 %) along +x: the model keeps the tires on z = 0 and tilts gravity instead
(dynamics.py: gravity (-g sin a, 0, -g cos a) in the road frame, a = atan(grade)); the simulator's outputs
refer the attitude and the accelerometer to the level (gravity) frame, x, y, z stay in the road frame.

A point takes the mu of the LAST patch (in tuple order) whose half-open rectangle [x0, x1) x [y0, y1) contains
it, so later patches paint over earlier ones; elsewhere ``default_mu``. mu is the peak of the tire's
pure-longitudinal Fx/Fz curve at the reference load (see tires.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numba import njit

from .vec3 import FASTMATH


def _check(value: float, name: str, where: str, lo: float | None = None) -> float:
    v = float(value)
    if not math.isfinite(v):
        raise ValueError(f"{where}: field '{name}' must be finite, got {value!r}")
    if lo is not None and v < lo:
        raise ValueError(f"{where}: field '{name}' must be >= {lo}, got {v}")
    return v


@dataclass(frozen=True)
class RoadPatch:
    """Rectangle in world x-y (m) with peak friction coefficient ``mu`` (>= 0)."""

    x0: float
    x1: float
    y0: float
    y1: float
    mu: float
    name: str = ""

    def __post_init__(self) -> None:
        where = f"road patch {self.name!r}" if self.name else "road patch"
        for f in ("x0", "x1", "y0", "y1"):
            _check(getattr(self, f), f, where)
        _check(self.mu, "mu", where, 0.0)
        if not self.x1 > self.x0:
            raise ValueError(f"{where}: field 'x1' ({self.x1}) must be greater than 'x0' ({self.x0})")
        if not self.y1 > self.y0:
            raise ValueError(f"{where}: field 'y1' ({self.y1}) must be greater than 'y0' ({self.y0})")

    def contains(self, x: float, y: float) -> bool:
        return self.x0 <= x < self.x1 and self.y0 <= y < self.y1


@dataclass(frozen=True)
class RoadMap:
    """Friction patches over a default surface."""

    patches: tuple[RoadPatch, ...] = ()
    default_mu: float = 0.9
    grade: float = 0.0   #: rise over run along +x (0.05 = 5 % uphill driving towards +x), within +-0.5

    def __post_init__(self) -> None:
        _check(self.default_mu, "default_mu", "road map", 0.0)
        if not -0.5 <= _check(self.grade, "grade", "road map") <= 0.5:
            raise ValueError(f"road map: field 'grade' must be within [-0.5, 0.5], got {self.grade}")
        object.__setattr__(self, "patches", tuple(self.patches))
        for k, p in enumerate(self.patches):
            if not isinstance(p, RoadPatch):
                raise ValueError(f"road map: field 'patches[{k}]' must be a RoadPatch, got {type(p).__name__}")

    def mu_at(self, x: float, y: float) -> float:
        """Peak friction coefficient at world (x, y)."""
        bounds, mus, default = self.arrays()
        return float(road_mu(bounds, mus, default[0], float(x), float(y)))

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """numba-friendly form: bounds (n, 4) rows [x0, x1, y0, y1], mus (n,), default (1,)."""
        n = len(self.patches)
        bounds = np.zeros((n, 4))
        mus = np.zeros(n)
        for k, p in enumerate(self.patches):
            bounds[k] = (p.x0, p.x1, p.y0, p.y1)
            mus[k] = p.mu
        return bounds, mus, np.array([float(self.default_mu)])

    @property
    def inclination(self) -> float:
        """Angle of the road to the level, rad: atan(grade)."""
        return math.atan(float(self.grade))

    @classmethod
    def uniform(cls, mu: float) -> RoadMap:
        """A road with one friction coefficient everywhere."""
        return cls((), mu)


@njit(cache=True, nogil=True, error_model="numpy", fastmath=FASTMATH)
def road_mu(bounds, mus, default_mu, x, y):
    """mu at (x, y): the last patch containing the point, else the default."""
    for k in range(bounds.shape[0] - 1, -1, -1):
        if bounds[k, 0] <= x < bounds[k, 1] and bounds[k, 2] <= y < bounds[k, 3]:
            return mus[k]
    return default_mu
