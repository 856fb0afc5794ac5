"""Steady-state Fiala tire of the 8-DOF calibration paper (Unjhawala et al. 2023, doi:10.1115/1.4062199).

Section 3, Eqs. (8)-(9) and the force laws that follow them (after Taylor 2015, the paper's ref. 23), as the
paper's public code applies them (data/vehicle_8dof.yaml ``fiala_as_coded``):

* longitudinal slip  s = (R w - (u_g cos d + v_g sin d)) / |u_g cos d + v_g sin d|            (Eq. 8)
* slip angle         alpha = atan2(v_g, |u_g|) - d                                            (Eq. 9)
* both slips are zero while the contact-patch speed AND the wheel's surface speed R w are below 1e-4 m/s (no
  division by zero at rest); a wheel that spins on a contact patch at rest slides (|s| = R w / 1e-4, full
  sliding). The public code zeroes the slips whenever the contact patch is at rest, spinning wheel or not, so
  its car can never leave rest (the 8-DOF, launched from 0.1 m/s, rolled back to 1e-4 m/s and stayed there
  with the wheels spinning up);
* friction          mu = umax - (umax - umin) * min(1, sqrt(s^2 + tan^2 alpha));
* longitudinal:     elastic |s| < s_crit = |mu Fz / (2 Cx)|:  Fx = Cx s,
                    sliding: Fx = sign(s) (mu |Fz| - |(mu Fz)^2 / (4 s Cx)|);
* lateral:          elastic |alpha| <= atan(3 mu |Fz| / Cy): H = 1 - Cy |tan alpha| / (3 mu |Fz|),
                    Fy = -mu |Fz| (1 - H^3) sign(alpha); sliding: Fy = -mu |Fz| sign(alpha).

Forces are in the tire frame (x along the wheel plane). A tire with no load (Fz <= 0) transmits nothing.
"""

from __future__ import annotations

import math

from numba import njit

FASTMATH = False
"""No fast-math in the 8-DOF kernels. With LLVM's fast-math flags (contraction, reassociation, reciprocal and
approximate functions) the code numba compiles in a process with a cold cache differed from the code it loads
from the on-disk cache (measured 2026-11-24: the brake residual by up to 3.6e-14 between a cold and a warm
process), so a live node, a replay and a worker process could disagree at round-off and the parallel fits were
not bit-identical to the serial ones on a fresh machine. The step's cost without them: benchmarks/README.md
(8-DOF rows, benchmarks/bench_8dof_sim.py)."""

MU_MAX = 0.9835
"""Friction coefficient at zero comprehensive slip (the public code's ``umax``)."""
MU_MIN = 0.5568
"""Friction coefficient at full comprehensive slip (the public code's ``umin``)."""
MIN_CONTACT_SPEED = 1e-4
"""m/s: below this contact-patch speed and wheel surface speed both slips are taken as zero."""


@njit(cache=True, nogil=True, fastmath=FASTMATH)
def fiala_slips(u_g: float, v_g: float, delta: float, omega: float, radius: float) -> tuple[float, float]:
    """Longitudinal slip ``s`` (-) and slip angle ``alpha`` (rad) of one tire, Eqs. (8)-(9).

    ``u_g``, ``v_g``: contact-patch velocity in the body frame (m/s); ``delta``: road-wheel steer angle (rad);
    ``omega``: wheel spin (rad/s); ``radius``: loaded radius (m).
    """
    return fiala_slips_cs(u_g, v_g, delta, math.cos(delta), math.sin(delta), omega, radius)


@njit(cache=True, nogil=True, fastmath=FASTMATH)
def fiala_slips_cs(u_g: float, v_g: float, delta: float, cos_d: float, sin_d: float, omega: float,
                   radius: float) -> tuple[float, float]:
    """:func:`fiala_slips` with the steer angle's cosine and sine precomputed (hot-loop form)."""
    if abs(u_g) <= MIN_CONTACT_SPEED and abs(v_g) <= MIN_CONTACT_SPEED:
        if abs(radius * omega) <= MIN_CONTACT_SPEED:
            return 0.0, 0.0
        return radius * omega / MIN_CONTACT_SPEED, 0.0   # a wheel spinning on a patch at rest: full sliding
    vx_wheel = u_g * cos_d + v_g * sin_d
    denom = abs(vx_wheel)
    if denom < MIN_CONTACT_SPEED:
        denom = MIN_CONTACT_SPEED
    s = (radius * omega - vx_wheel) / denom
    alpha = math.atan2(v_g, abs(u_g)) - delta
    return s, alpha


@njit(cache=True, nogil=True, fastmath=FASTMATH)
def fiala_forces(s: float, alpha: float, fz: float, cx: float, cy: float,
                 mu_max: float = MU_MAX, mu_min: float = MU_MIN) -> tuple[float, float]:
    """Tire-frame forces ``(Fx, Fy)`` in N from slips, normal load ``fz`` (N) and stiffnesses.

    ``cx``: longitudinal slip stiffness (N per unit slip); ``cy``: cornering stiffness (N/rad).
    Elastic and sliding regimes as in the module docstring (paper Section 3, after Eq. 13).
    """
    if fz <= 0.0:
        return 0.0, 0.0
    ta = math.tan(alpha)
    ss = math.sqrt(s * s + ta * ta)
    if ss > 1.0:
        ss = 1.0
    mu = mu_max - (mu_max - mu_min) * ss
    mufz = mu * fz
    # longitudinal
    s_crit = abs(mufz / (2.0 * cx))
    if abs(s) < s_crit:
        fx = cx * s
    else:
        fx = math.copysign(1.0, s) * (mufz - abs(mufz * mufz / (4.0 * s * cx)))
    # lateral
    sgn_a = 0.0
    if alpha > 0.0:
        sgn_a = 1.0
    elif alpha < 0.0:
        sgn_a = -1.0
    # |alpha| <= atan(3 mu Fz / Cy)  <=>  |tan alpha| <= 3 mu Fz / Cy  (|alpha| < pi/2)
    if abs(ta) <= 3.0 * mufz / cy and abs(alpha) < 0.5 * math.pi:
        h = 1.0 - cy * abs(ta) / (3.0 * mufz)
        fy = -mufz * (1.0 - h * h * h) * sgn_a
    else:
        fy = -mufz * sgn_a
    return fx, fy


@njit(cache=True, nogil=True, fastmath=FASTMATH)
def fiala_tire(u_g: float, v_g: float, cos_d: float, sin_d: float, omega: float, radius: float, fz: float,
               cx: float, cy: float, mu_max: float, mu_min: float) -> tuple[float, float]:
    """Tire-frame ``(Fx, Fy)`` (N) straight from the contact-patch velocity: :func:`fiala_slips` followed by
    :func:`fiala_forces`, without inverse trigonometry (the hot-loop form, :func:`fiala_tire_slip`)."""
    fx, fy, _, _, _ = fiala_tire_slip(u_g, v_g, cos_d, sin_d, omega, radius, fz, cx, cy, mu_max, mu_min)
    return fx, fy


@njit(cache=True, nogil=True, fastmath=FASTMATH)
def fiala_tire_slip(u_g: float, v_g: float, cos_d: float, sin_d: float, omega: float, radius: float, fz: float,
                    cx: float, cy: float, mu_max: float, mu_min: float
                    ) -> tuple[float, float, float, float, float]:
    """:func:`fiala_tire` and what the 8-DOF's implicit wheel spin needs of the same tire: ``(Fx, Fy, s, 1/d, c)``
    with ``s`` the longitudinal slip, ``d = max(|vx_wheel|, MIN_CONTACT_SPEED)`` its denominator, and ``c`` the
    slope of Fx in s (``Cx`` in the elastic range, else the secant ``Fx / s`` clamped to [0, Cx]).

    ``tan(alpha) = (v_g cos d - |u_g| sin d) / (|u_g| cos d + v_g sin d)``, and sign(alpha) is the sign of the
    numerator; a non-positive denominator means |alpha| >= pi/2 (full sliding). Written with as few divisions as
    the formulas allow (one reciprocal of d for s, tan(alpha) and the spin; the regime tests multiplied out):
    a divide is ~10x a multiply's cost and the 8-DOF step is bound by them (benchmarks/README.md, Roofline).
    """
    vx_wheel = u_g * cos_d + v_g * sin_d
    denom = abs(vx_wheel)
    if denom < MIN_CONTACT_SPEED:
        denom = MIN_CONTACT_SPEED
    inv_den = 1.0 / denom
    s = (radius * omega - vx_wheel) * inv_den
    if fz <= 0.0 or (abs(u_g) <= MIN_CONTACT_SPEED and abs(v_g) <= MIN_CONTACT_SPEED
                     and abs(radius * omega) <= MIN_CONTACT_SPEED):
        return 0.0, 0.0, s, inv_den, (0.0 if abs(s) > 1e-9 else cx)
    au = abs(u_g)
    num = v_g * cos_d - au * sin_d
    den = au * cos_d + v_g * sin_d
    sgn_a = 0.0
    if num > 0.0:
        sgn_a = 1.0
    elif num < 0.0:
        sgn_a = -1.0
    if den > 0.0:
        ta = abs(num) * inv_den if den == denom else abs(num) / den
        ss = math.sqrt(s * s + ta * ta)
        if ss > 1.0:
            ss = 1.0
    else:
        ta = math.inf
        ss = 1.0
    mu = mu_max - (mu_max - mu_min) * ss
    mufz = mu * fz
    c = cx
    if abs(s) * abs(2.0 * cx) < mufz:   # |s| < s_crit = mu Fz / (2 Cx): elastic
        fx = cx * s
    else:
        fx = math.copysign(1.0, s) * (mufz - abs(mufz * mufz / (4.0 * s * cx)))
        if abs(s) > 1e-9:
            c = fx / s
            if c > cx:
                c = cx
            elif c < 0.0:
                c = 0.0
    if ta * cy <= 3.0 * mufz:           # |tan alpha| <= 3 mu Fz / Cy: elastic
        h = 1.0 - cy * ta / (3.0 * mufz)
        fy = -mufz * (1.0 - h * h * h) * sgn_a
    else:
        fy = -mufz * sgn_a
    return fx, fy, s, inv_den, c
