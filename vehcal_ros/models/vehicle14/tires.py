"""Pacejka MF2002 (Pac02) tire with combined slip, scaled by the road friction (docs/simulator_model.md).

Combined slip: the MF2002 weighting functions (HMMWV), or Chrono's friction ellipsis for a tire file without
combined-slip coefficients (the sedan; :func:`ellipse_weights`).

Coefficients: ``tires.pac02`` of data/hmmwv.yaml (Chrono ``HMMWV_Pac02Tire``). Reductions (see
docs/simulator_model.md): camber terms, the horizontal/vertical shifts SHx, SVx, SHy, SVy (no ply steer or
conicity) and the kappa-induced side force SVyk are dropped, and PEY3 (sign-dependent lateral curvature) is
dropped, so the pure-slip curves are odd and left/right tires are identical. The effective rolling radius is
R_e = R0 - delta/3 (delta = tire deflection) instead of the Pac02 DREFF/BREFF/FREFF fit.

Friction scaling. The road's mu is the PEAK of the pure-longitudinal Fx/Fz curve at the reference load
``fz_mu_ref`` (the static corner load by default): both friction coefficients are multiplied by
mu_scale = mu_road / (PDX1 + PDX2 dfz_ref) (Chrono scales them by mu_road / 0.8 the same way). Because Cx > 1,
sin(Cx atan(.)) reaches 1 and the peak of Fx0/Fz at a load Fz is exactly mu_x = (PDX1 + PDX2 dfz) mu_scale.
The slip stiffnesses (PKX*, PKY*) do not depend on mu, as in Pac02.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from .params import TireParams
from .vec3 import FASTMATH

(
    T_R0,
    T_KZ,
    T_CZ,
    T_FZ0,
    T_PCX1,
    T_PDX1,
    T_PDX2,
    T_PEX1,
    T_PEX2,
    T_PEX3,
    T_PEX4,
    T_PKX1,
    T_PKX2,
    T_PKX3,
    T_RBX1,
    T_RBX2,
    T_RCX1,
    T_REX1,
    T_REX2,
    T_RHX1,
    T_PCY1,
    T_PDY1,
    T_PDY2,
    T_PEY1,
    T_PEY2,
    T_PKY1,
    T_PKY2,
    T_RBY1,
    T_RBY2,
    T_RBY3,
    T_RCY1,
    T_REY1,
    T_REY2,
    T_RHY1,
    T_RHY2,
    T_QSY1,
    T_VLOW,
    T_MUREF,
    T_ELLIPSE,
) = range(39)
NTP = 39


def pack_tire(t: TireParams, fz_mu_ref: float) -> np.ndarray:
    """Flat coefficient array for the numba kernels; ``fz_mu_ref`` = load (N) at which peak Fx/Fz =
    mu_road."""
    tp = np.zeros(NTP)
    names = [
        "r0",
        "kz",
        "cz",
        "fz0",
        "pcx1",
        "pdx1",
        "pdx2",
        "pex1",
        "pex2",
        "pex3",
        "pex4",
        "pkx1",
        "pkx2",
        "pkx3",
        "rbx1",
        "rbx2",
        "rcx1",
        "rex1",
        "rex2",
        "rhx1",
        "pcy1",
        "pdy1",
        "pdy2",
        "pey1",
        "pey2",
        "pky1",
        "pky2",
        "rby1",
        "rby2",
        "rby3",
        "rcy1",
        "rey1",
        "rey2",
        "rhy1",
        "rhy2",
        "qsy1",
        "v_low",
    ]
    for k, nm in enumerate(names):
        tp[k] = float(getattr(t, nm))
    dfz = (fz_mu_ref - t.fz0) / t.fz0
    tp[T_MUREF] = t.pdx1 + t.pdx2 * dfz
    if t.combined not in ("mf", "ellipsis"):
        raise ValueError(f"tire combined-slip method must be 'mf' or 'ellipsis', got {t.combined!r}")
    tp[T_ELLIPSE] = 1.0 if t.combined == "ellipsis" else 0.0
    return tp


@njit(cache=True, nogil=True, error_model="numpy", fastmath=FASTMATH)
def _mf(b, c, d, e, x):
    """Magic formula D sin(C atan(B x - E (B x - atan(B x))))."""
    bx = b * x
    return d * math.sin(c * math.atan(bx - e * (bx - math.atan(bx))))


@njit(cache=True, nogil=True, error_model="numpy", fastmath=FASTMATH)
def _weight(b, c, e, x, sh):
    """Combined-slip weighting cos(C atan(B (x+sh) - E(...))) / cos(C atan(B sh - E(...)))."""
    xs = x + sh
    num = math.cos(c * math.atan(b * xs - e * (b * xs - math.atan(b * xs))))
    den = math.cos(c * math.atan(b * sh - e * (b * sh - math.atan(b * sh))))
    return num / den


@njit(cache=True, nogil=True, error_model="numpy", fastmath=FASTMATH)
def mu_scale(tp, mu_road):
    """Factor on the Pac02 friction coefficients that makes mu_road the peak Fx/Fz at the reference load."""
    return mu_road / tp[T_MUREF]


@njit(cache=True, nogil=True, error_model="numpy", fastmath=FASTMATH)
def peak_mu(tp, fz, mu_road):
    """Peak of the pure-longitudinal Fx/Fz curve at load fz (the truth "mu_max")."""
    dfz = (fz - tp[T_FZ0]) / tp[T_FZ0]
    return (tp[T_PDX1] + tp[T_PDX2] * dfz) * mu_scale(tp, mu_road)


@njit(cache=True, nogil=True, error_model="numpy", fastmath=FASTMATH)
def fx_pure(tp, fz, kappa, mu_road):
    """Pure longitudinal force Fx0 (N) at slip ratio kappa (Pac02 longitudinal, reductions in the module
    doc)."""
    if fz <= 0.0 or mu_road <= 0.0:
        return 0.0
    dfz = (fz - tp[T_FZ0]) / tp[T_FZ0]
    cx = tp[T_PCX1]
    dx = (tp[T_PDX1] + tp[T_PDX2] * dfz) * mu_scale(tp, mu_road) * fz
    kx = fz * (tp[T_PKX1] + tp[T_PKX2] * dfz) * math.exp(tp[T_PKX3] * dfz)
    sgn = 1.0 if kappa >= 0.0 else -1.0
    ex = (tp[T_PEX1] + tp[T_PEX2] * dfz + tp[T_PEX3] * dfz * dfz) * (1.0 - tp[T_PEX4] * sgn)
    if ex > 1.0:
        ex = 1.0
    bx = kx / (cx * dx)
    return _mf(bx, cx, dx, ex, kappa)


@njit(cache=True, nogil=True, error_model="numpy", fastmath=FASTMATH)
def fy_pure(tp, fz, alpha, mu_road):
    """Pure lateral force Fy0 (N) at slip angle alpha (ISO sign: alpha = atan(v_y/|v_x|), Fy ~ -C alpha)."""
    if fz <= 0.0 or mu_road <= 0.0:
        return 0.0
    dfz = (fz - tp[T_FZ0]) / tp[T_FZ0]
    cy = tp[T_PCY1]
    dy = (tp[T_PDY1] + tp[T_PDY2] * dfz) * mu_scale(tp, mu_road) * fz
    xk = fz / (tp[T_PKY2] * tp[T_FZ0])
    ky = tp[T_PKY1] * tp[T_FZ0] * 2.0 * xk / (1.0 + xk * xk)  # PKY1 Fz0 sin(2 atan(Fz / (PKY2 Fz0)))
    ey = tp[T_PEY1] + tp[T_PEY2] * dfz
    if ey > 1.0:
        ey = 1.0
    by = ky / (cy * dy)
    return _mf(by, cy, dy, ey, alpha)


@njit(cache=True, nogil=True, error_model="numpy", fastmath=FASTMATH)
def ellipse_weights(tp, fz, kappa, alpha, mu_road, fx0, fy0):
    """Chrono's friction-ellipsis combination (ChPac02Tire, use mode 4 with ``m_use_friction_ellipsis``, the
    ADAMS method) with the shifts dropped: beta = acos(|kappa| / hypot(kappa, sin(alpha))),
    mu_x,c = 1 / hypot(1/mu_x,act, tan(beta)/mu_y,max), mu_y,c = tan(beta) / hypot(1/mu_x,max, tan(beta)/mu_y,act),
    Fx = Fx0 mu_x,c / mu_x,act, Fy = Fy0 mu_y,c / mu_y,act. Written with tan(beta) = |sin(alpha)|/|kappa| so
    that it stays finite at kappa = 0 or alpha = 0: returns (G_x, G_y)."""
    dfz = (fz - tp[T_FZ0]) / tp[T_FZ0]
    ms = mu_scale(tp, mu_road)
    mux_max = (tp[T_PDX1] + tp[T_PDX2] * dfz) * ms
    muy_max = abs((tp[T_PDY1] + tp[T_PDY2] * dfz) * ms)
    ak = abs(kappa)
    asn = abs(math.sin(alpha))
    mux_act = abs(fx0) / fz
    muy_act = abs(fy0) / fz
    hx = math.hypot(ak, mux_act * asn / muy_max)
    hy = math.hypot(asn, muy_act * ak / mux_max)
    gx = ak / hx if hx > 0.0 else 1.0
    gy = asn / hy if hy > 0.0 else 1.0
    return gx, gy


@njit(cache=True, nogil=True, error_model="numpy", fastmath=FASTMATH)
def combined_forces(tp, fz, kappa, alpha, mu_road):
    """Pac02 combined slip: Fx = G_xa Fx0, Fy = G_yk Fy0 (the MF2002 weighting functions), or Chrono's friction
    ellipsis for a tire file without combined-slip coefficients (``T_ELLIPSE``)."""
    if fz <= 0.0 or mu_road <= 0.0:
        return 0.0, 0.0
    dfz = (fz - tp[T_FZ0]) / tp[T_FZ0]
    fx0 = fx_pure(tp, fz, kappa, mu_road)
    fy0 = fy_pure(tp, fz, alpha, mu_road)
    if tp[T_ELLIPSE] > 0.5:
        gx, gy = ellipse_weights(tp, fz, kappa, alpha, mu_road, fx0, fy0)
        return gx * fx0, gy * fy0
    bxa = tp[T_RBX1] / math.sqrt(1.0 + (tp[T_RBX2] * kappa) ** 2)  # RBX1 cos(atan(RBX2 kappa))
    gxa = _weight(bxa, tp[T_RCX1], tp[T_REX1] + tp[T_REX2] * dfz, alpha, tp[T_RHX1])
    byk = tp[T_RBY1] / math.sqrt(1.0 + (tp[T_RBY2] * (alpha - tp[T_RBY3])) ** 2)
    gyk = _weight(byk, tp[T_RCY1], tp[T_REY1] + tp[T_REY2] * dfz, kappa, tp[T_RHY1] + tp[T_RHY2] * dfz)
    return gxa * fx0, gyk * fy0


@njit(cache=True, nogil=True, error_model="numpy", fastmath=FASTMATH)
def vertical_force(tp, delta, delta_rate):
    """Normal load (N) from tire stiffness and damping on a flat road, >= 0 (zero when not in contact)."""
    if delta <= 0.0:
        return 0.0
    f = tp[T_KZ] * delta + tp[T_CZ] * delta_rate
    return f if f > 0.0 else 0.0


@njit(cache=True, nogil=True, error_model="numpy", fastmath=FASTMATH)
def rolling_radius(tp, delta):
    """Effective rolling radius R_e = R0 - delta/3 (m)."""
    d = delta if delta > 0.0 else 0.0
    return tp[T_R0] - d / 3.0


@njit(cache=True, nogil=True, error_model="numpy", fastmath=FASTMATH)
def mu_curve(tp, fz, mu_road, slip):
    """Pure-longitudinal Fx/Fz over an array of slip ratios (the true mu(s) curve under a wheel)."""
    out = np.empty(slip.shape[0])
    for k in range(slip.shape[0]):
        out[k] = fx_pure(tp, fz, slip[k], mu_road) / fz if fz > 0.0 else 0.0
    return out
