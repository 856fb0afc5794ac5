"""models/geodesy.py: WGS-84 geodetic <-> ECEF <-> ENU against published values, an independent small-offset
formula, and round trips."""

from __future__ import annotations

import math

import numpy as np
import pytest

from vehcal_ros.models.geodesy import (
    WGS84_A,
    WGS84_B,
    WGS84_E2,
    Geodetic,
    ecef_to_enu,
    ecef_to_geodetic,
    enu_to_ecef,
    enu_to_geodetic,
    geodetic_to_ecef,
    geodetic_to_enu,
)


def test_the_wgs84_definition():
    """NIMA TR8350.2 (Department of Defense World Geodetic System 1984, 3rd ed.), Table 3.1: a = 6378137 m,
    1/f = 298.257223563; Table 3.3: semi-minor axis b = 6356752.3142 m, first eccentricity squared
    e^2 = 6.69437999014e-3. On the equator at longitude 0 and 90 deg ECEF is (a, 0, 0) and (0, a, 0); at the
    poles (0, 0, +-b)."""
    assert WGS84_B == pytest.approx(6356752.3142, abs=1e-4)
    assert WGS84_E2 == pytest.approx(6.69437999014e-3, abs=1e-14)
    np.testing.assert_allclose(geodetic_to_ecef(0.0, 0.0, 0.0), (WGS84_A, 0.0, 0.0), atol=1e-9)
    np.testing.assert_allclose(geodetic_to_ecef(0.0, 90.0, 0.0), (0.0, WGS84_A, 0.0), atol=1e-9)
    np.testing.assert_allclose(geodetic_to_ecef(90.0, 0.0, 0.0), (0.0, 0.0, 6356752.3142), atol=1e-3)
    np.testing.assert_allclose(geodetic_to_ecef(-90.0, 0.0, 100.0), (0.0, 0.0, -6356852.3142), atol=1e-3)
    lat, _, h = ecef_to_geodetic(0.0, 0.0, 6356752.3142 + 10.0)
    assert lat == pytest.approx(90.0, abs=1e-12) and h == pytest.approx(10.0, abs=1e-3)
    lat, lon, h = ecef_to_geodetic(WGS84_A + 5.0, 0.0, 0.0)
    assert (lat, lon) == (0.0, 0.0) and h == pytest.approx(5.0, abs=1e-9)


def test_a_published_ecef_geodetic_pair():
    """brahe (D. Eddy), documentation "Geodetic transformations" (duncaneddy.github.io/brahe, learn/coordinates/
    geodetic_transformations): longitude -122.4194 deg, latitude 37.7749 deg, altitude 16.0 m (WGS-84) is ECEF
    x = -2706181.627, y = -4261070.165, z = 3885735.291 m (given to the millimetre)."""
    xyz = geodetic_to_ecef(37.7749, -122.4194, 16.0)
    np.testing.assert_allclose(xyz, (-2706181.627, -4261070.165, 3885735.291), atol=1e-3)
    lat, lon, h = ecef_to_geodetic(-2706181.627, -4261070.165, 3885735.291)
    # the published ECEF is rounded to the millimetre: 1 mm is 9e-9 deg of latitude
    assert lat == pytest.approx(37.7749, abs=2e-8) and lon == pytest.approx(-122.4194, abs=2e-8)
    assert h == pytest.approx(16.0, abs=1e-3)


def test_round_trip_over_the_globe_and_heights():
    rng = np.random.default_rng(5)
    lat = np.concatenate([rng.uniform(-90.0, 90.0, 2000), [90.0, -90.0, 0.0, 89.999999, -0.000001]])
    lon = rng.uniform(-180.0, 180.0, lat.size)
    h = rng.uniform(-1000.0, 100000.0, lat.size)
    lat2, lon2, h2 = ecef_to_geodetic(*geodetic_to_ecef(lat, lon, h))
    assert np.max(np.abs(lat2 - lat)) < 1e-9            # deg: ~0.1 mm
    polar = np.abs(lat) > 89.9999
    assert np.max(np.abs((lon2 - lon)[~polar])) < 1e-9  # longitude undefined at the poles
    assert np.max(np.abs(h2 - h)) < 1e-6                # m


def test_enu_at_the_origin_is_zero_and_up_is_the_normal():
    o = Geodetic(43.0722, -89.4008, 270.0)
    np.testing.assert_allclose(geodetic_to_enu(o.latitude, o.longitude, o.altitude, o), (0.0, 0.0, 0.0),
                               atol=1e-8)
    np.testing.assert_allclose(geodetic_to_enu(o.latitude, o.longitude, o.altitude + 123.0, o), (0.0, 0.0, 123.0),
                               atol=1e-8)


def test_small_enu_offsets_match_the_radii_of_curvature():
    """Independent of the ECEF route: for a small offset, north = (M + h) dphi and east = (N + h) cos(phi) dlambda
    with the meridian radius M = a (1 - e^2) / (1 - e^2 sin^2 phi)^1.5 and the prime-vertical radius
    N = a / (1 - e^2 sin^2 phi)^0.5 (any geodesy textbook, e.g. Torge & Mueller, Geodesy, 4th ed., Sec. 4.1).
    Over 20 m the neglected second-order terms (~ d^2 tan(phi) / R) are below 5e-4 m up to 80 deg latitude,
    while mixing up M and N would be off by ~e^2 d = 0.1 m."""
    for lat0, lon0, h0 in ((43.0722, -89.4008, 270.0), (-33.86, 151.21, 40.0), (78.2, 15.6, 10.0)):
        o = Geodetic(lat0, lon0, h0)
        phi = math.radians(lat0)
        w = 1.0 - WGS84_E2 * math.sin(phi) ** 2
        m, n = WGS84_A * (1.0 - WGS84_E2) / w ** 1.5, WGS84_A / math.sqrt(w)
        d_north, d_east = 14.0, -17.0
        lat = lat0 + math.degrees(d_north / (m + h0))
        lon = lon0 + math.degrees(d_east / ((n + h0) * math.cos(phi)))
        e, nn, u = geodetic_to_enu(lat, lon, h0, o)
        assert e == pytest.approx(d_east, abs=5e-4) and nn == pytest.approx(d_north, abs=5e-4)
        assert u == pytest.approx(-(d_east**2 + d_north**2) / (2 * 6.37e6), abs=1e-4)   # the tangent plane


def test_enu_round_trips_and_preserves_distances():
    rng = np.random.default_rng(9)
    o = Geodetic(-33.86, 151.21, 40.0)
    e, n, u = rng.uniform(-20000, 20000, 500), rng.uniform(-20000, 20000, 500), rng.uniform(-200, 2000, 500)
    e2, n2, u2 = geodetic_to_enu(*enu_to_geodetic(e, n, u, o), o)
    assert max(np.max(np.abs(e2 - e)), np.max(np.abs(n2 - n)), np.max(np.abs(u2 - u))) < 1e-6
    x, y, z = enu_to_ecef(e, n, u, o)
    x0, y0, z0 = geodetic_to_ecef(o.latitude, o.longitude, o.altitude)
    np.testing.assert_allclose(np.sqrt((x - x0) ** 2 + (y - y0) ** 2 + (z - z0) ** 2),
                               np.sqrt(e * e + n * n + u * u), rtol=0, atol=1e-6)   # a rotation: lengths kept
    np.testing.assert_allclose(ecef_to_enu(x, y, z, o), (e, n, u), atol=1e-6)
