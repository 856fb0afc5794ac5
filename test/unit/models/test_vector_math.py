"""The vectorisable arctan and sin/cos (models/vector_math.py) against numpy's (the C library's) over the double
range, and the likelihood built on them against a direct numpy evaluation."""

from __future__ import annotations

import numpy as np
from numba import njit

from vehcal_ros.models.vector_math import atan, sincos


@njit(cache=True)
def _atan_all(x, out):
    for i in range(x.shape[0]):
        out[i] = atan(x[i])


@njit(cache=True)
def _sincos_all(x, s, c):
    for i in range(x.shape[0]):
        s[i], c[i] = sincos(x[i])


def test_atan_within_one_ulp_over_the_double_range():
    rng = np.random.default_rng(0)
    x = rng.standard_normal(200_000) * 10.0 ** rng.uniform(-300, 300, 200_000)
    edges = np.array([0.0, -0.0, 0.66, np.nextafter(0.66, 1.0), 2.414213562373095, np.nextafter(2.414213562373095, 3.0),
                      1.0, -1.0, 1e-310, np.inf, -np.inf])
    x = np.concatenate([x, edges, -edges, rng.uniform(-5.0, 5.0, 100_000)])
    out = np.empty_like(x)
    _atan_all(x, out)
    ref = np.arctan(x)
    assert np.all(np.abs(out - ref) <= np.spacing(np.abs(ref)))
    assert np.array_equal(np.sign(out), np.sign(ref))   # odd; atan(-0.0) gives +0.0 (libm: -0.0)


def test_sincos_within_two_ulp_of_one():
    rng = np.random.default_rng(1)
    x = np.concatenate([rng.uniform(-64.0, 64.0, 300_000), np.arange(-80, 81) * np.pi / 4.0,
                        np.array([0.0, -0.0, 1e-300, -1e-300])])
    s, c = np.empty_like(x), np.empty_like(x)
    _sincos_all(x, s, c)
    assert np.abs(s - np.sin(x)).max() <= 2.3e-16
    assert np.abs(c - np.cos(x)).max() <= 2.3e-16


def test_likelihood_with_the_vector_functions_matches_numpy():
    """gauss_nll_lat (pure slip and under the friction ellipse) against the same likelihood written with numpy's
    arctan and sin at every sample (the ellipse from its closed form in the docstring of pacejka.combined)."""
    from vehcal_ros.models.pacejka import gauss_nll_lat

    rng = np.random.default_rng(2)
    n = 257                                  # not a multiple of the vector width or of the 8-sample log blocks
    s = rng.uniform(-0.02, 0.2, n)
    mu = rng.uniform(-0.1, 0.9, n)
    vs = rng.uniform(0.0, 1e-5, n)
    vm = rng.uniform(0.0, 1e-3, n)
    lat = np.where(rng.uniform(size=n) < 0.5, rng.uniform(0.0, 0.3, n), 0.0)
    B, C, D, E, sh, sv = 11.0, 1.7, 0.85, -0.4, 0.002, -0.01
    theta = np.array([B, C, D, E, sh, sv])
    u = B * (s + sh)
    phi = u - E * (u - np.arctan(u))
    f0 = D * np.sin(C * np.arctan(phi)) + sv
    df0 = D * np.cos(C * np.arctan(phi)) * C / (1 + phi**2) * ((1 - E) + E / (1 + u**2)) * B
    ld = lat / (D + sv)
    q = np.sqrt(s**2 + f0**2 * ld**2)
    f = np.where(ld > 0, f0 * np.abs(s) / q, f0)
    df = np.where(ld > 0, (df0 * np.abs(s) ** 3 + np.sign(s) * f0**3 * ld**2) / q**3, df0)
    sigma2 = 4e-4
    for la, ff, dd in ((np.zeros(0), f0, df0), (lat, f, df)):
        var = sigma2 + vm + dd**2 * vs
        ref = 0.5 * np.sum(np.log(2 * np.pi * var) + (mu - ff) ** 2 / var)
        assert abs(gauss_nll_lat(s, mu, theta, sigma2, vs, vm, la) - ref) <= 1e-12 * abs(ref)
        # without mu_var (transducer data): the same with v_mu = 0
        var0 = sigma2 + dd**2 * vs
        ref0 = 0.5 * np.sum(np.log(2 * np.pi * var0) + (mu - ff) ** 2 / var0)
        assert abs(gauss_nll_lat(s, mu, theta, sigma2, vs, np.zeros(0), la) - ref0) <= 1e-12 * abs(ref0)
        # without slip_var (exact slips): Var = sigma^2 + v_mu
        var1 = sigma2 + vm
        ref1 = 0.5 * np.sum(np.log(2 * np.pi * var1) + (mu - ff) ** 2 / var1)
        assert abs(gauss_nll_lat(s, mu, theta, sigma2, np.zeros(0), vm, la) - ref1) <= 1e-12 * abs(ref1)
