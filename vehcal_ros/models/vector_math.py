"""arctan and sin/cos in plain arithmetic, so that LLVM can vectorise the loops that call them.

numba turns ``math.atan`` and ``math.sin`` into calls to the C library, one element at a time; with Intel's SVML
it would call vector versions, but the llvmlite wheels from PyPI are not built with SVML. The magic formula's
errors-in-variables likelihood (:func:`~vehcal_ros.models.pacejka.gauss_nll_lat`, the grip chains' inner loop)
spends most of its time in two arctangents and one sine per sample. These are Cephes' double-precision
algorithms (S. L. Moshier, *Methods and Programs for Mathematical Functions*, 1989; ``atan.c``, ``sin.c``):
range reduction plus a rational (arctan) or polynomial (sin, cos) approximation, with every branch written as a
select so the loop body has no calls and no jumps. Accuracy (test_vector_math.py, against numpy): arctan within
1 ulp over the whole double range, sin and cos within 2.3e-16 absolute for |x| <= 64 (the likelihood needs
|x| <= C pi / 2 < 3 pi / 2). Compiled with ``error_model="numpy"`` (a division by zero in the branch not taken gives
inf instead of raising), ``inline="always"`` (so the caller's loop sees the arithmetic).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

_T3P8 = 2.41421356237309504880          # tan(3 pi / 8)
_MOREBITS = 6.123233995736765886130e-17  # pi / 2 - its double
_P0, _P1, _P2, _P3, _P4 = (-8.750608600031904122785e-1, -1.615753718733365076637e1, -7.500855792314704667340e1,
                           -1.228866684490136173410e2, -6.485021904942025371773e1)
_Q0, _Q1, _Q2, _Q3, _Q4 = (2.485846490142306297962e1, 1.650270098316988542046e2, 4.328810604912902668951e2,
                           4.853903996359136964868e2, 1.945506571482613964425e2)

_FOPI = 1.27323954473516268615           # 4 / pi
_DP1 = 7.85398125648498535156e-1         # pi / 4 in three parts (Cody-Waite reduction)
_DP2 = 3.77489470793079817668e-8
_DP3 = 2.69515142907905952645e-15
_S0, _S1, _S2, _S3, _S4, _S5 = (1.58962301576546568060e-10, -2.50507477628578072866e-8, 2.75573136213857245213e-6,
                               -1.98412698295895385996e-4, 8.33333333332211858878e-3, -1.66666666666666307295e-1)
_C0, _C1, _C2, _C3, _C4, _C5 = (-1.13585365213876817300e-11, 2.08757008419747316778e-9, -2.75573141792967388112e-7,
                               2.48015872888517045348e-5, -1.38888888888730564116e-3, 4.16666666666665929218e-2)


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def atan(x: float) -> float:
    """arctan(x) (rad): Cephes ``atan``, reduced to |x| <= tan(pi / 8) by arctan(x) = pi/2 - arctan(1/x) above
    tan(3 pi / 8) and pi/4 + arctan((x - 1) / (x + 1)) above 0.66, then x + x^3 P(x^2) / Q(x^2)."""
    a = abs(x)
    big = a > _T3P8
    mid = a > 0.66
    xr = -1.0 / a if big else ((a - 1.0) / (a + 1.0) if mid else a)
    y0 = 0.5 * math.pi if big else (0.25 * math.pi if mid else 0.0)
    extra = _MOREBITS if big else (0.5 * _MOREBITS if mid else 0.0)
    z = xr * xr
    num = (((_P0 * z + _P1) * z + _P2) * z + _P3) * z + _P4
    den = ((((z + _Q0) * z + _Q1) * z + _Q2) * z + _Q3) * z + _Q4
    r = y0 + (xr * (z * num / den) + xr + extra)
    return -r if x < 0.0 else r


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def sincos(x: float) -> tuple[float, float]:
    """(sin x, cos x) for moderate |x| (the reduction to the octant keeps full accuracy up to |x| ~ 1e8): Cephes
    ``sin`` / ``cos``, x reduced by multiples of pi / 4, then the sine and cosine polynomials of the octant."""
    a = abs(x)
    y = math.floor(a * _FOPI)
    j = np.int64(y)
    odd = (j & 1) == 1
    j = j + 1 if odd else j
    y = y + 1.0 if odd else y
    j = j & 7
    z = ((a - y * _DP1) - y * _DP2) - y * _DP3
    zz = z * z
    ps = z + z * zz * (((((_S0 * zz + _S1) * zz + _S2) * zz + _S3) * zz + _S4) * zz + _S5)
    pc = 1.0 - 0.5 * zz + zz * zz * (((((_C0 * zz + _C1) * zz + _C2) * zz + _C3) * zz + _C4) * zz + _C5)
    upper = j > 3
    k = j - 4 if upper else j
    swap = k == 1 or k == 2             # octants where sin uses the cosine polynomial and cos the sine's
    sn = pc if swap else ps
    sn = -sn if upper != (x < 0.0) else sn
    cs = ps if swap else pc
    cs = -cs if upper != (k > 1) else cs
    return sn, cs
