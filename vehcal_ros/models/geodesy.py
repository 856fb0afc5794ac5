"""WGS-84 geodetic <-> ECEF <-> local ENU (east, north, up) coordinates: the standard exact formulas, numpy only.

* Geodetic: latitude and longitude in degrees (north and east positive), ellipsoidal height in m (above the
  WGS-84 ellipsoid, not above sea level).
* ECEF: earth-centred, earth-fixed Cartesian x, y, z in m (x through latitude 0 / longitude 0, z through the
  north pole).
* ENU: a local tangent frame at an origin (a ``Geodetic``): e east, n north, u along the ellipsoid normal, in m.

Geodetic -> ECEF is the closed form ``X = (N + h) cos(phi) cos(lambda)``, ``Y = (N + h) cos(phi) sin(lambda)``,
``Z = (N (1 - e^2) + h) sin(phi)`` with the prime-vertical radius ``N = a / sqrt(1 - e^2 sin^2 phi)``. ECEF ->
geodetic is Heikkinen's exact closed form (M. Heikkinen, "Geschlossene Formeln zur Berechnung räumlicher
geodätischer Koordinaten aus rechtwinkligen Koordinaten", Z. Vermess. 107, 1982), with the height then computed
from the latitude by the stable ``h = p cos(phi) + z sin(phi) - a^2 / N`` form; it is exact to rounding (below a
micrometre on the earth's surface) everywhere except within ~40 km of the earth's centre. ECEF <-> ENU is the
rotation by the origin's latitude and longitude about the origin's ECEF position. Every function takes scalars or
numpy arrays (broadcast together) and returns floats or arrays alike. No I/O and no rclpy here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

WGS84_A = 6378137.0
"""m, semi-major axis of the WGS-84 ellipsoid (NIMA TR8350.2, Table 3.1)."""
WGS84_F = 1.0 / 298.257223563
"""Flattening of the WGS-84 ellipsoid (NIMA TR8350.2, Table 3.1)."""
WGS84_B = WGS84_A * (1.0 - WGS84_F)
"""m, semi-minor axis (6356752.3142 m)."""
WGS84_E2 = WGS84_F * (2.0 - WGS84_F)
"""First eccentricity squared, f (2 - f)."""
WGS84_EP2 = WGS84_E2 / (1.0 - WGS84_E2)
"""Second eccentricity squared, e^2 / (1 - e^2)."""


@dataclass(frozen=True)
class Geodetic:
    """A WGS-84 position: ``latitude``, ``longitude`` in degrees, ``altitude`` (ellipsoidal height) in m."""

    latitude: float
    longitude: float
    altitude: float = 0.0


def _out(*arrays: np.ndarray) -> Any:
    """Floats for 0-d results, arrays otherwise."""
    if all(a.ndim == 0 for a in arrays):
        return tuple(float(a) for a in arrays)
    return tuple(arrays)


def geodetic_to_ecef(latitude: Any, longitude: Any, altitude: Any = 0.0) -> tuple:
    """(x, y, z) ECEF in m of WGS-84 latitude, longitude (deg) and ellipsoidal height (m)."""
    phi = np.radians(np.asarray(latitude, dtype=float))
    lam = np.radians(np.asarray(longitude, dtype=float))
    h = np.asarray(altitude, dtype=float)
    s, c = np.sin(phi), np.cos(phi)
    n = WGS84_A / np.sqrt(1.0 - WGS84_E2 * s * s)
    return _out((n + h) * c * np.cos(lam), (n + h) * c * np.sin(lam), (n * (1.0 - WGS84_E2) + h) * s)


def ecef_to_geodetic(x: Any, y: Any, z: Any) -> tuple:
    """(latitude deg, longitude deg, ellipsoidal height m) of ECEF x, y, z (m): Heikkinen's closed form."""
    x, y, z = (np.asarray(v, dtype=float) for v in (x, y, z))
    a, b, e2, ep2 = WGS84_A, WGS84_B, WGS84_E2, WGS84_EP2
    p2 = x * x + y * y
    p = np.sqrt(p2)
    z2 = z * z
    f = 54.0 * b * b * z2
    g = p2 + (1.0 - e2) * z2 - e2 * (a * a - b * b)
    c = e2 * e2 * f * p2 / (g * g * g)
    s = np.cbrt(1.0 + c + np.sqrt(c * c + 2.0 * c))
    k = s + 1.0 + 1.0 / s
    pp = f / (3.0 * k * k * g * g)
    q = np.sqrt(1.0 + 2.0 * e2 * e2 * pp)
    r0 = (-(pp * e2 * p) / (1.0 + q)
          + np.sqrt(np.maximum(0.5 * a * a * (1.0 + 1.0 / q) - pp * (1.0 - e2) * z2 / (q * (1.0 + q))
                               - 0.5 * pp * p2, 0.0)))
    dp = p - e2 * r0
    v = np.sqrt(dp * dp + (1.0 - e2) * z2)
    z0 = b * b * z / (a * v)
    phi = np.arctan2(z + ep2 * z0, p)
    lam = np.arctan2(y, x)
    sphi, cphi = np.sin(phi), np.cos(phi)
    n = a / np.sqrt(1.0 - e2 * sphi * sphi)
    h = p * cphi + z * sphi - a * a / n
    return _out(np.degrees(phi), np.degrees(lam), h)


def _rotation(origin: Geodetic) -> np.ndarray:
    """3x3 rows east, north, up of the ENU frame at ``origin``, in ECEF axes."""
    phi, lam = math.radians(origin.latitude), math.radians(origin.longitude)
    sp, cp, sl, cl = math.sin(phi), math.cos(phi), math.sin(lam), math.cos(lam)
    return np.array([[-sl, cl, 0.0], [-sp * cl, -sp * sl, cp], [cp * cl, cp * sl, sp]])


def ecef_to_enu(x: Any, y: Any, z: Any, origin: Geodetic) -> tuple:
    """(e, n, u) in m of ECEF x, y, z (m) in the ENU frame at ``origin``."""
    x0, y0, z0 = geodetic_to_ecef(origin.latitude, origin.longitude, origin.altitude)
    d = np.stack(np.broadcast_arrays(np.asarray(x, dtype=float) - x0, np.asarray(y, dtype=float) - y0,
                                     np.asarray(z, dtype=float) - z0))
    r = _rotation(origin)
    enu = np.tensordot(r, d, axes=(1, 0))
    return _out(enu[0], enu[1], enu[2])


def enu_to_ecef(e: Any, n: Any, u: Any, origin: Geodetic) -> tuple:
    """ECEF (x, y, z) in m of a point at (e, n, u) m in the ENU frame at ``origin``."""
    x0, y0, z0 = geodetic_to_ecef(origin.latitude, origin.longitude, origin.altitude)
    d = np.stack(np.broadcast_arrays(*(np.asarray(v, dtype=float) for v in (e, n, u))))
    xyz = np.tensordot(_rotation(origin).T, d, axes=(1, 0))
    return _out(xyz[0] + x0, xyz[1] + y0, xyz[2] + z0)


def geodetic_to_enu(latitude: Any, longitude: Any, altitude: Any, origin: Geodetic) -> tuple:
    """(e, n, u) in m of a WGS-84 position (deg, deg, m) in the ENU frame at ``origin``."""
    return ecef_to_enu(*geodetic_to_ecef(latitude, longitude, altitude), origin)


def enu_to_geodetic(e: Any, n: Any, u: Any, origin: Geodetic) -> tuple:
    """(latitude deg, longitude deg, ellipsoidal height m) of (e, n, u) m in the ENU frame at ``origin``."""
    return ecef_to_geodetic(*enu_to_ecef(e, n, u, origin))


__all__ = ["WGS84_A", "WGS84_B", "WGS84_E2", "WGS84_F", "Geodetic", "ecef_to_enu", "ecef_to_geodetic",
           "enu_to_ecef", "enu_to_geodetic", "geodetic_to_ecef", "geodetic_to_enu"]
