"""Allocation-free 3-vector / 3x3 helpers on float tuples for the numba kernels (no heap traffic per step)."""

from __future__ import annotations

import math

from numba import njit

# No LLVM fast-math in the 14-DOF kernels: with it, the code numba compiles with a cold cache differed from the
# code it loads from the on-disk cache (the same 18 s run ended 2e-12 apart, measured 2026-11-24), so the same
# scenario and seed gave different bags on a fresh machine. Cost: benchmarks/README.md (bench_hmmwv.py rows).
FASTMATH = False


@njit(cache=True, nogil=True, error_model="numpy", fastmath=FASTMATH)
def add(a, b):
    return (a[0] + b[0], a[1] + b[1], a[2] + b[2])


@njit(cache=True, nogil=True, error_model="numpy", fastmath=FASTMATH)
def sub(a, b):
    return (a[0] - b[0], a[1] - b[1], a[2] - b[2])


@njit(cache=True, nogil=True, error_model="numpy", fastmath=FASTMATH)
def scale(a, s):
    return (a[0] * s, a[1] * s, a[2] * s)


@njit(cache=True, nogil=True, error_model="numpy", fastmath=FASTMATH)
def axpy(s, a, b):
    """s * a + b."""
    return (s * a[0] + b[0], s * a[1] + b[1], s * a[2] + b[2])


@njit(cache=True, nogil=True, error_model="numpy", fastmath=FASTMATH)
def dot(a, b):
    return a[0] * b[0] + a[1] * b[1] + a[2] * b[2]


@njit(cache=True, nogil=True, error_model="numpy", fastmath=FASTMATH)
def cross(a, b):
    return (a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0])


@njit(cache=True, nogil=True, error_model="numpy", fastmath=FASTMATH)
def norm(a):
    return math.sqrt(a[0] * a[0] + a[1] * a[1] + a[2] * a[2])


@njit(cache=True, nogil=True, error_model="numpy", fastmath=FASTMATH)
def unit(a):
    n = math.sqrt(a[0] * a[0] + a[1] * a[1] + a[2] * a[2])
    return (a[0] / n, a[1] / n, a[2] / n)


@njit(cache=True, nogil=True, error_model="numpy", fastmath=FASTMATH)
def mv(m, v):
    """3x3 (tuple of rows) times vector."""
    return (dot(m[0], v), dot(m[1], v), dot(m[2], v))


@njit(cache=True, nogil=True, error_model="numpy", fastmath=FASTMATH)
def mtv(m, v):
    """Transpose(3x3) times vector."""
    return (
        m[0][0] * v[0] + m[1][0] * v[1] + m[2][0] * v[2],
        m[0][1] * v[0] + m[1][1] * v[1] + m[2][1] * v[2],
        m[0][2] * v[0] + m[1][2] * v[1] + m[2][2] * v[2],
    )


@njit(cache=True, nogil=True, error_model="numpy", fastmath=FASTMATH)
def mm(a, b):
    """3x3 product of row-tuples."""
    c0 = (b[0][0], b[1][0], b[2][0])
    c1 = (b[0][1], b[1][1], b[2][1])
    c2 = (b[0][2], b[1][2], b[2][2])
    return (
        (dot(a[0], c0), dot(a[0], c1), dot(a[0], c2)),
        (dot(a[1], c0), dot(a[1], c1), dot(a[1], c2)),
        (dot(a[2], c0), dot(a[2], c1), dot(a[2], c2)),
    )


@njit(cache=True, nogil=True, error_model="numpy", fastmath=FASTMATH)
def rot_x(a):
    """Rotation matrix about +x by angle a."""
    c = math.cos(a)
    s = math.sin(a)
    return ((1.0, 0.0, 0.0), (0.0, c, -s), (0.0, s, c))


@njit(cache=True, nogil=True, error_model="numpy", fastmath=FASTMATH)
def rot_axis(n, a):
    """Rodrigues rotation about unit axis n by angle a."""
    c = math.cos(a)
    s = math.sin(a)
    t = 1.0 - c
    x, y, z = n[0], n[1], n[2]
    return (
        (t * x * x + c, t * x * y - s * z, t * x * z + s * y),
        (t * x * y + s * z, t * y * y + c, t * y * z - s * x),
        (t * x * z - s * y, t * y * z + s * x, t * z * z + c),
    )


@njit(cache=True, nogil=True, error_model="numpy", fastmath=FASTMATH)
def row3(arr, i):
    """Row i of a (n, 3) float array as a tuple."""
    return (arr[i, 0], arr[i, 1], arr[i, 2])
