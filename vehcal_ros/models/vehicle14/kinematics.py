"""Analytical loop kinematics of one double-wishbone corner: constraint-embedding paper, Section 5.

Each suspension is one aggregated body S with the single independent coordinate theta = angle QAD of the lower
control arm (LCA) (Section 5). Its internal loops are solved in closed form:

* the ADFG upper/lower control-arm four-bar (Section 5.1, Eqs. 15-27),
* the ABJ shock (and the spring) slider-crank loop (Section 5.2, Eqs. 28-30),
* the EKL spindle/tierod loop (Section 5.3, Eqs. 31-32), whose tierod end L is, at the front, carried by the
  Pitman steering four-bar TUVW (Section 5.4).

Conventions. The four-bar and the shock loop are planar in the chassis y-z plane (all their hinges parallel
to x); their complex-plane coordinates are w = side * y + i z, so that the left and right corners share one
set of formulas and theta grows in bump on both sides. A planar rotation by d_phi is a rotation by
side * d_phi about +x. In the paper's Eq. 15 form, G->D = d exp(i theta_4) + c exp(i theta_3) with theta_4
the angle of G->F (upper arm) and theta_3 the angle of F->D (upright arm), and G->D = (A - G) + b exp(i theta)

Reduction. Chrono's upper-arm hinge axis (UCA_F -> UCA_B) is inclined (anti-dive); the planar four-bar of the
paper uses a hinge parallel to x through G = the point of that axis in the transverse plane of the upper ball
joint. The HMMWV's LCA hinge is parallel to x, and the planar formulas above hold exactly. A hinge that is not
(the sedan: front 7 deg in plan, rear semi-trailing 21 deg) turns the LCA about its own axis u (``P_LAX``); the
shock and spring lengths then come from the 3-D closed form L^2 = K0 - 2 (P cos a + Q sin a)
(:func:`slider_length_3d`), and the rest of the corner (spatial upper arm, spindle loop) is 3-D already. The
Python helpers :func:`internal_coordinates` / :func:`x_s_matrix` keep the planar shock-hinge coordinates (HMMWV).

Outputs per body (LCA, UCA, knuckle = Chrono's upright = the paper's "spindle", wheel carrier): the rotation
from the design (hardpoint) pose, the COM, the spatial axis per unit theta-dot and per unit steering rate
(the columns of H*(S) = H_S^* X_S of Eq. 10, about the chassis reference point O, chassis axes), and the
velocity-product relative acceleration (the H_S^* Xdot_S thetadot term of Eq. 11, via Eq. 14's
"acceleration-level constraint error at zero internal accelerations").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numba import njit

from .params import HmmwvParams
from .vec3 import FASTMATH, add, axpy, cross, dot, mtv, mv, norm, rot_x, row3, scale, sub, unit

# ---- per-corner scalar layout (cg[i, :]) ----
SIDE, AXLE, AY, AZ, GY, GZ, BL, CL, DL, TH0, TH30, TH40, BR4 = range(13)
SH_X, SH_BETA, SH_Y, SH_ETAOFF, SH_DX, SP_X, SP_BETA, SP_Y, SP_ETAOFF, SP_DX = range(13, 23)
EK, ELL, BRA = range(23, 26)
K1, K3, FREE, STMIN, STMAX, DMC, DMR, DBC, DBR, ENGMIN, ENGMAX = range(26, 37)
M_LCA, M_UCA, M_KN, M_WH = range(37, 41)
C30, S30, C40, S40 = range(41, 45)
UR, BRU = 45, 46
SH_XC, SH_XS, SH_CE, SH_SE, SP_XC, SP_XS, SP_CE, SP_SE, CTH0, STH0 = range(47, 57)
# LCA hinge: LX = 1 when it is parallel to x (the planar loops above apply), else the 3-D slider lengths
# L^2 = K0 - 2 (P cos(a) + Q sin(a)), a = side * q_rel, of the shock (SH_) and spring (SP_) are used
LX, SH_K0, SH_P, SH_Q, SP_K0, SP_P, SP_Q = range(57, 64)
NCG = 64
# ---- per-corner 3-D points (cp[i, k, :], chassis frame, design pose) ----
P_A, P_D0, P_F0, P_G, P_LCACM, P_UCACM, P_KCM, P_WC, P_K0, P_L0, P_E0, P_N0, P_E1, P_E2 = range(14)
P_SHB, P_SHJ, P_SPB, P_SPJ = range(14, 18)
P_UC, P_UAX, P_UEA, P_UEB, P_F10, P_F20 = range(18, 24)
P_LAX = 24  # unit LCA hinge axis (mirrored per side; + q_rel about side * axis = bump)
NPT = 25
# ---- steering layout (sg[:]) ----
SG_LOC, SG_PITCH, SG_GX, SG_GY, SG_B, SG_C, SG_D, SG_PHI0, SG_TH30, SG_BR, SG_UX, SG_UY = (
    0,
    3,
    4,
    5,
    6,
    7,
    8,
    9,
    10,
    11,
    12,
    13,
)
SG_LL, SG_LR = 14, 17
SG_KIND = 20  # 0 = Pitman four-bar, 1 = rack and pinion (SG_LL/SG_LR = tierod inner points, chassis frame)
NSG = 21
# ---- body indices ----
B_LCA, B_UCA, B_KN, B_WH = 0, 1, 2, 3
# ---- misc outputs (misc[i, :]) ----
MI_LSP, MI_DLSP, MI_LSH, MI_DLSH, MI_TH3, MI_TH4, MI_ALPHA, MI_ALPHA_TH, MI_ALPHA_SG, MI_P, MI_Q = range(11)
MI_AX, MI_AY, MI_AZ, MI_RESID = 11, 12, 13, 14
# the hot path stores cos/sin of the UCA angle phi and of the spindle angle alpha (atan2 only in the helpers)
MI_CPHI, MI_SPHI, MI_CALPHA, MI_SALPHA = MI_TH3, MI_TH4, MI_ALPHA, MI_Q
NMI = 15

FL, FR, RL, RR = 0, 1, 2, 3


# ----------------------------------------------------------------------------------------------------------
# Planar loops
# ----------------------------------------------------------------------------------------------------------
@njit(cache=True, nogil=True, error_model="numpy", fastmath=FASTMATH)
def fourbar(theta, gx, gy, b, c, d, br):
    """Section 5.1: four-bar with G->D = (gx + i gy) + b exp(i theta) = d exp(i theta_4) + c exp(i theta_3).

    Returns theta_3, theta_4 (Eqs. 20-21), p = dtheta_3/dtheta, q = dtheta_4/dtheta (Eqs. 25-26), their
    derivatives p', q' (Eq. 24 differentiated once more with thetaddot = 0), the cosines and sines of
    theta_3 and theta_4, and the clipped cosine excess ``bad`` (0 when the loop closes; > 0: the linkage
    cannot assemble).
    Sines and cosines of angle differences are formed from unit vectors (no extra trigonometric calls).
    """
    ct = math.cos(theta)
    st = math.sin(theta)
    x = gx + b * ct  # Eq. 17, x = a + b cos(theta) for a general ground vector
    y = gy + b * st
    r = math.sqrt(x * x + y * y)
    cg_ = x / r  # gamma = atan2(y, x), Eq. 19
    sg_ = y / r
    arg = (r * r + d * d - c * c) / (2.0 * d * r)
    bad = 0.0
    if arg > 1.0:
        bad = arg - 1.0
        arg = 1.0
    elif arg < -1.0:
        bad = -1.0 - arg
        arg = -1.0
    sa = br * math.sqrt(1.0 - arg * arg)
    c4 = cg_ * arg - sg_ * sa  # theta_4 = gamma + br acos(arg), Eq. 20
    s4 = sg_ * arg + cg_ * sa
    u3 = x - d * c4  # c exp(i theta_3) = G->D - d exp(i theta_4), Eq. 21
    v3 = y - d * s4
    cc = math.sqrt(u3 * u3 + v3 * v3)
    c3 = u3 / cc
    s3 = v3 / cc
    s34 = s3 * c4 - c3 * s4  # sin(theta_3 - theta_4)
    c34 = c3 * c4 + s3 * s4
    s_t4 = st * c4 - ct * s4  # sin(theta - theta_4)
    c_t4 = ct * c4 + st * s4
    s_t3 = st * c3 - ct * s3
    c_t3 = ct * c3 + st * s3
    p = b * s_t4 / (c * s34)  # Eq. 25
    q = b * s_t3 / (d * -s34)  # Eq. 26
    p2 = (b * c_t4 - c * p * p * c34 - d * q * q) / (c * s34)
    q2 = (b * c_t3 - c * p * p - d * q * q * c34) / (-d * s34)
    th3 = math.atan2(s3, c3)
    th4 = math.atan2(s4, c4)
    return th3, th4, p, q, p2, q2, bad, c3, s3, c4, s4


@njit(cache=True, nogil=True, error_model="numpy", fastmath=FASTMATH)
def slider_crank(ct, st, xl, beta, yl, eta_off, dx):
    """Section 5.2: z exp(i gamma) = x exp(i beta) - y exp(i eta), eta = theta + const (Eq. 28).

    Takes cos/sin of theta. Returns the planar |BJ| = z, gamma, dz/dtheta = y sin(eta - gamma) and
    dgamma/dtheta = -y cos(eta - gamma)/z (Eqs. 29-30), the 3-D length L = sqrt(z^2 + dx^2) (dx = constant
    out-of-plane offset of the ends) and dL/dtheta = z (dz/dtheta)/L. z uses hypot (identical to the paper's
    (x cos(beta) - y cos(eta))/cos(gamma), but well conditioned for a near-vertical shock).
    """
    ce = math.cos(eta_off)
    se = math.sin(eta_off)
    c_eta = ct * ce - st * se
    s_eta = st * ce + ct * se
    zx = xl * math.cos(beta) - yl * c_eta
    zy = xl * math.sin(beta) - yl * s_eta
    z = math.hypot(zx, zy)
    s_eg = s_eta * zx / z - c_eta * zy / z  # sin(eta - gamma)
    c_eg = c_eta * zx / z + s_eta * zy / z
    dz = yl * s_eg
    dgam = -yl * c_eg / z
    length = math.sqrt(z * z + dx * dx)
    return z, math.atan2(zy, zx), dz, dgam, length, z * dz / length


@njit(cache=True, nogil=True, error_model="numpy", fastmath=FASTMATH)
def slider_length(ct, st, xc, xs, yl, ce, se, dx):
    """Hot-path :func:`slider_crank`: the 3-D length L and dL/dtheta only, with the constants x cos(beta),
    x sin(beta), cos(eta_off), sin(eta_off) precomputed."""
    c_eta = ct * ce - st * se
    s_eta = st * ce + ct * se
    zx = xc - yl * c_eta
    zy = xs - yl * s_eta
    z = math.hypot(zx, zy)
    dz = yl * (s_eta * zx / z - c_eta * zy / z)
    length = math.sqrt(z * z + dx * dx)
    return length, z * dz / length


@njit(cache=True, nogil=True, error_model="numpy", fastmath=FASTMATH)
def slider_length_3d(ca, sa, side, k0, p, q):
    """Shock/spring length L and dL/dq_rel when the LCA hinge is not parallel to x: the end B on the LCA turns
    by a = side * q_rel about the hinge axis u through A, so L^2 = |J - A - R(u, a)(B0 - A)|^2
    = K0 - 2 (P cos(a) + Q sin(a)) (the 3-D form of Eq. 28's loop; constants from :func:`pack_geometry`)."""
    length = math.sqrt(k0 - 2.0 * (p * ca + q * sa))
    return length, side * (p * sa - q * ca) / length


# ----------------------------------------------------------------------------------------------------------
# Section 5.4: Pitman steering four-bar TUVW -> tierod end points L
# ----------------------------------------------------------------------------------------------------------
@njit(cache=True, nogil=True, error_model="numpy", fastmath=FASTMATH)
def pitman_link(sg, sigma):
    """Pose of the steering link UV (coupler of the planar four-bar TUVW: crank TU = Pitman arm, rocker WV =
    idler arm, in the steering frame's x-y plane) for Pitman-arm angle sigma.

    Returns (U - T) and the coupler rotation from the design pose as (cos, sin), its rate p and p' per unit
    sigmadot (Eqs. 25 and its derivative), and the loop's clipping excess. For a rack (``SG_KIND`` = 1) the
    first entry carries the rack displacement sigma (m, + = toward -y) and the rest are neutral.
    """
    if sg[SG_KIND] > 0.5:
        return sigma, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0
    phi = sg[SG_PHI0] + sigma
    th3, th4, p, q, p2, q2, bad, c3, s3, c4, s4 = fourbar(
        phi, sg[SG_GX], sg[SG_GY], sg[SG_B], sg[SG_C], sg[SG_D], sg[SG_BR]
    )
    b = sg[SG_B]
    ux = b * math.cos(phi)
    uy = b * math.sin(phi)
    c30 = math.cos(sg[SG_TH30])
    s30 = math.sin(sg[SG_TH30])
    return ux, uy, c3 * c30 + s3 * s30, s3 * c30 - c3 * s30, p, p2, bad


@njit(cache=True, nogil=True, error_model="numpy", fastmath=FASTMATH)
def pitman_point(sg, link, side):
    """Tierod inner point L of the front corner on ``side`` (+1 left, -1 right), riding on the steering link.

    Returns L, dL/dsigma, d2L/dsigma2 in the chassis frame (Section 5.4). A rack carries L along -y by its
    displacement (link[0]).
    """
    ux, uy, c3, s3, p, p2, bad = link
    k = SG_LL if side > 0 else SG_LR
    if sg[SG_KIND] > 0.5:
        return (sg[k], sg[k + 1] - ux, sg[k + 2]), (0.0, -1.0, 0.0), (0.0, 0.0, 0.0)
    b = sg[SG_B]
    r0x = sg[k] - sg[SG_UX]
    r0y = sg[k + 1] - sg[SG_UY]
    rx = c3 * r0x - s3 * r0y
    ry = s3 * r0x + c3 * r0y
    tx = sg[SG_UX] - b * math.cos(sg[SG_PHI0])  # crank pivot T
    ty = sg[SG_UY] - b * math.sin(sg[SG_PHI0])
    lx = tx + ux + rx
    ly = ty + uy + ry
    lz = sg[k + 2]
    # first derivative: U' = i (U - T); r' = i p r
    d1x = -uy - p * ry
    d1y = ux + p * rx
    # second derivative: U'' = -(U - T); r'' = i p' r - p^2 r
    d2x = -ux - p2 * ry - p * p * rx
    d2y = -uy + p2 * rx - p * p * ry
    cp_ = math.cos(sg[SG_PITCH])
    sp_ = math.sin(sg[SG_PITCH])
    # steering frame -> chassis: R_y(pitch)
    L = (sg[SG_LOC] + cp_ * lx + sp_ * lz, sg[SG_LOC + 1] + ly, sg[SG_LOC + 2] - sp_ * lx + cp_ * lz)
    dL = (cp_ * d1x, d1y, -sp_ * d1x)
    ddL = (cp_ * d2x, d2y, -sp_ * d2x)
    return L, dL, ddL


@njit(cache=True, nogil=True, error_model="numpy", fastmath=FASTMATH)
def pitman(sg, sigma, side):
    """Tierod inner point of one front corner: L, dL/dsigma, d2L/dsigma2 and the clipping excess."""
    link = pitman_link(sg, sigma)
    L, dL, ddL = pitman_point(sg, link, side)
    return L, dL, ddL, link[6]


@njit(cache=True, nogil=True, error_model="numpy", fastmath=FASTMATH)
def tierod_end(cg, cp, sg, link):
    """Tierod end L of a corner and its sigma-derivatives: on the steering link (front), fixed (rear)."""
    if cg[AXLE] < 0.5:
        return pitman_point(sg, link, cg[SIDE])
    return row3(cp, P_L0), (0.0, 0.0, 0.0), (0.0, 0.0, 0.0)


# ----------------------------------------------------------------------------------------------------------
# One corner: positions, X_S columns and velocity-product accelerations of every body of the aggregated body S
# ----------------------------------------------------------------------------------------------------------
@njit(cache=True, nogil=True, error_model="numpy", fastmath=FASTMATH)
def _spatial(w, v_com, p):
    """Spatial vector [w; v_O] about the chassis point O of a body with COM p, angular w, COM velocity
    v_com."""
    vo = add(v_com, cross(p, w))
    return (w[0], w[1], w[2], vo[0], vo[1], vo[2])


@njit(cache=True, nogil=True, error_model="numpy", fastmath=FASTMATH)
def _store_body(j, p, R, w_th, v_th, w_sg, v_sg, om, v_com, omd, a_com, rot, pos, sth, ssg, acc):
    for r in range(3):
        pos[j, r] = p[r]
        for c in range(3):
            rot[j, r, c] = R[r][c]
    s1 = _spatial(w_th, v_th, p)
    s2 = _spatial(w_sg, v_sg, p)
    # d/dt (v_com + p x w) at zero internal accelerations = a_com + pdot x w + p x wdot
    lin = add(add(a_com, cross(v_com, om)), cross(p, omd))
    for r in range(6):
        sth[j, r] = s1[r]
        ssg[j, r] = s2[r]
    for r in range(3):
        acc[j, r] = omd[r]
        acc[j, 3 + r] = lin[r]


@njit(cache=True, nogil=True, error_model="numpy", fastmath=FASTMATH)
def _rot_x_cs(c, s):
    return ((1.0, 0.0, 0.0), (0.0, c, -s), (0.0, s, c))


@njit(cache=True, nogil=True, error_model="numpy", fastmath=FASTMATH)
def corner_kinematics(cg, cp, sg, link, q_rel, thd, sigd, rot, pos, sth, ssg, acc, misc):
    """Forward, velocity (X_S) and velocity-product kinematics of one corner (Sections 5.1-5.4).

    q_rel: LCA rotation from the design pose (rad, + = bump); thd its rate; link = pitman_link(sg, sigma) and
    sigd the Pitman-arm rate (used at the front only). Fills, per body j in (LCA, UCA, knuckle, wheel
    carrier):
    rot[j] (3x3 rotation from the design pose), pos[j] (COM), sth[j] / ssg[j] (spatial axis about O per unit
    thetadot / sigmadot: the columns of H*(S) = H_S^* X_S), acc[j] (velocity-product spatial acceleration
    relative to the chassis: H_S^* Xdot_S thetadot of Eq. 11), and misc.
    """
    s = cg[SIDE]
    bad = 0.0
    ex = (1.0, 0.0, 0.0)
    zero = (0.0, 0.0, 0.0)
    # ---- LCA: rotation s*q_rel about the hinge line through A (parallel to x, or the axis P_LAX) ----
    A = row3(cp, P_A)
    if cg[LX] > 0.5:
        R_L = rot_x(s * q_rel)
        wL = scale(ex, s)  # per unit thetadot
    else:
        ul = row3(cp, P_LAX)
        R_L = rot_axis_cs(ul, math.cos(s * q_rel), math.sin(s * q_rel))
        wL = scale(ul, s)
    omL = scale(wL, thd)
    D0 = row3(cp, P_D0)
    D = add(A, mv(R_L, sub(D0, A)))
    vD_u = cross(wL, sub(D, A))
    aD0 = cross(omL, cross(omL, sub(D, A)))
    pl = add(A, mv(R_L, sub(row3(cp, P_LCACM), A)))
    vl_u = cross(wL, sub(pl, A))
    _store_body(
        B_LCA,
        pl,
        R_L,
        wL,
        vl_u,
        zero,
        zero,
        omL,
        scale(vl_u, thd),
        zero,
        cross(omL, cross(omL, sub(pl, A))),
        rot,
        pos,
        sth,
        ssg,
        acc,
    )
    # ---- UCA: spatial (RSSR) control-arm loop ADFG. F turns by phi about Chrono's inclined hinge axis u
    # through C on a circle of radius r: F = C + r (cos(phi) e_a + sin(phi) e_b); |F - D| = c gives
    # A_u cos(phi) + B_u sin(phi) = X_u, solved in closed form like the spindle loop (Sec. 5.3) ----
    C = row3(cp, P_UC)
    ua = row3(cp, P_UAX)
    ea = row3(cp, P_UEA)
    eb = row3(cp, P_UEB)
    ru = cg[UR]
    cl = cg[CL]
    wcd = sub(C, D)
    Au = 2.0 * ru * dot(ea, wcd)
    Bu = 2.0 * ru * dot(eb, wcd)
    Xu = cl * cl - dot(wcd, wcd) - ru * ru
    rabu = math.hypot(Au, Bu)
    argu = Xu / rabu
    if argu > 1.0:
        bad += argu - 1.0
        argu = 1.0
    elif argu < -1.0:
        bad += -1.0 - argu
        argu = -1.0
    squ = cg[BRU] * math.sqrt(1.0 - argu * argu)
    cf = (Au * argu - Bu * squ) / rabu
    sf = (Bu * argu + Au * squ) / rabu
    FC = add(scale(ea, ru * cf), scale(eb, ru * sf))
    FD = sub(add(C, FC), D)
    uxFC = cross(ua, FC)
    den_u = dot(FD, uxFC)
    ph_th = dot(FD, vD_u) / den_u  # dphi/dtheta from (F - D).(vF - vD) = 0
    phd = ph_th * thd
    vFD = sub(scale(uxFC, phd), scale(vD_u, thd))
    aFc = scale(cross(ua, uxFC), phd * phd)
    phdd = -(dot(vFD, vFD) + dot(FD, sub(aFc, aD0))) / den_u  # acceleration-level closure (Eq. 14)
    R_U = rot_axis_cs(ua, cf, sf)
    wU = scale(ua, ph_th)
    omU = scale(ua, phd)
    omdU = scale(ua, phdd)
    pu = add(C, mv(R_U, sub(row3(cp, P_UCACM), C)))
    PCu = sub(pu, C)
    vu_u = cross(wU, PCu)
    au = add(cross(omdU, PCu), cross(omU, cross(omU, PCu)))
    _store_body(B_UCA, pu, R_U, wU, vu_u, zero, zero, omU, scale(vu_u, thd), omdU, au, rot, pos, sth, ssg, acc)
    # ---- upright arm DF (massless): kingpin n = (F - D)/c, frame [f1, f2, n] with f1 = unit(x x n) ----
    ic = 1.0 / cl
    n = scale(FD, ic)
    nd_u = scale(sub(scale(uxFC, ph_th), vD_u), ic)  # dn/dtheta
    ndd = scale(sub(add(aFc, scale(uxFC, phdd)), aD0), ic)  # velocity-product part of n''
    gn = math.hypot(n[1], n[2])
    f1 = (0.0, -n[2] / gn, n[1] / gn)
    f2 = cross(n, f1)
    gd_u = (0.0, -nd_u[2], nd_u[1])  # d(x x n)/dtheta
    wn_u = dot(gd_u, f2) / gn  # spin of the frame about n
    wup = axpy(wn_u, n, cross(n, nd_u))
    omup = scale(wup, thd)
    nd = scale(nd_u, thd)
    gd = scale(gd_u, thd)
    gdd = (0.0, -ndd[2], ndd[1])
    wn = wn_u * thd
    f1d = scale(sub(gd, scale(f1, dot(f1, gd))), 1.0 / gn)
    f2d = add(cross(nd, f1), cross(n, f1d))
    wnd = (dot(gdd, f2) + dot(gd, f2d) - wn * dot(f1, gd)) / gn
    omdup = add(cross(n, ndd), axpy(wnd, n, scale(nd, wn)))
    f10 = row3(cp, P_F10)
    f20 = row3(cp, P_F20)
    n0 = row3(cp, P_N0)
    R_up = (
        (
            f1[0] * f10[0] + f2[0] * f20[0] + n[0] * n0[0],
            f1[0] * f10[1] + f2[0] * f20[1] + n[0] * n0[1],
            f1[0] * f10[2] + f2[0] * f20[2] + n[0] * n0[2],
        ),
        (
            f1[1] * f10[0] + f2[1] * f20[0] + n[1] * n0[0],
            f1[1] * f10[1] + f2[1] * f20[1] + n[1] * n0[1],
            f1[1] * f10[2] + f2[1] * f20[2] + n[1] * n0[2],
        ),
        (
            f1[2] * f10[0] + f2[2] * f20[0] + n[2] * n0[0],
            f1[2] * f10[1] + f2[2] * f20[1] + n[2] * n0[1],
            f1[2] * f10[2] + f2[2] * f20[2] + n[2] * n0[2],
        ),
    )
    E = add(D, mv(R_up, sub(row3(cp, P_E0), D0)))
    e1 = mv(R_up, row3(cp, P_E1))
    e2 = mv(R_up, row3(cp, P_E2))
    ED = sub(E, D)
    vE_u = add(vD_u, cross(wup, ED))
    aE0 = add(aD0, add(cross(omdup, ED), cross(omup, cross(omup, ED))))
    # ---- tierod end L: fixed on the chassis (rear) or on the Pitman steering link (front, Section 5.4) ----
    L, Ls, Lss = tierod_end(cg, cp, sg, link)
    if cg[AXLE] < 0.5:
        bad += link[6]
    # ---- spindle loop EKL (Section 5.3): A cos(alpha) + B sin(alpha) = X ----
    ek = cg[EK]
    EL = sub(L, E)
    Aa = dot(EL, e1) * ek  # EK0 = (ek, 0, 0) in the upright-arm frame (e1, e2, n)
    Bb = dot(EL, e2) * ek
    X = 0.5 * (dot(EL, EL) + ek * ek - cg[ELL] * cg[ELL])  # EK0(z) = 0: E is the foot of K0 on DF
    rab = math.hypot(Aa, Bb)
    arg = X / rab
    if arg > 1.0:
        bad += arg - 1.0
        arg = 1.0
    elif arg < -1.0:
        bad += -1.0 - arg
        arg = -1.0
    sq = cg[BRA] * math.sqrt(1.0 - arg * arg)  # alpha = beta + BRA acos(arg), beta = atan2(B, A)
    ca = (Aa * arg - Bb * sq) / rab
    sa = (Bb * arg + Aa * sq) / rab
    KE = add(scale(e1, ek * ca), scale(e2, ek * sa))
    K = add(E, KE)
    KL = sub(K, L)
    nxKE = cross(n, KE)
    den = dot(KL, nxKE)
    # velocity: (K - L).(vK - vL) = 0 with vK = vE + (omega_up + alphadot n) x KE  (equivalent to Eq. 32)
    vK0_u = add(vE_u, cross(wup, KE))
    a_th = -dot(KL, vK0_u) / den
    a_sg = dot(KL, Ls) / den
    alphad = a_th * thd + a_sg * sigd
    omK = add(omup, scale(n, alphad))
    vE = scale(vE_u, thd)
    vK = add(vE, cross(omK, KE))
    vL = scale(Ls, sigd)
    # acceleration (Eq. 14): alphaddot from the acceleration-level loop error at zero independent
    # accelerations
    omdK_na = add(omdup, scale(cross(omup, n), alphad))
    aK_na = add(aE0, add(cross(omdK_na, KE), cross(omK, cross(omK, KE))))
    dv = sub(vK, vL)
    aL0 = scale(Lss, sigd * sigd)
    add0 = -(dot(dv, dv) + dot(KL, sub(aK_na, aL0))) / den
    omdK = axpy(add0, n, omdK_na)
    R_K = mv_mat(R_up, rot_axis_cs(row3(cp, P_N0), ca, sa))
    wK_th = axpy(a_th, n, wup)
    wK_sg = scale(n, a_sg)
    E0 = row3(cp, P_E0)
    for j, kpt in ((B_KN, P_KCM), (B_WH, P_WC)):
        P = add(E, mv(R_K, sub(row3(cp, kpt), E0)))
        PE = sub(P, E)
        v_th = add(vE_u, cross(wK_th, PE))
        v_sg = cross(wK_sg, PE)
        v_com = add(vE, cross(omK, PE))
        a_com = add(aE0, add(cross(omdK, PE), cross(omK, cross(omK, PE))))
        _store_body(j, P, R_K, wK_th, v_th, wK_sg, v_sg, omK, v_com, omdK, a_com, rot, pos, sth, ssg, acc)
    # ---- shock and spring slider-crank loops (Section 5.2) ----
    if cg[LX] > 0.5:
        cq = R_L[1][1]  # cos(q_rel); theta = TH0 + q_rel
        sq_ = s * R_L[2][1]
        ct = cg[CTH0] * cq - cg[STH0] * sq_
        st = cg[STH0] * cq + cg[CTH0] * sq_
        lsh, dlsh = slider_length(ct, st, cg[SH_XC], cg[SH_XS], cg[SH_Y], cg[SH_CE], cg[SH_SE], cg[SH_DX])
        lsp, dlsp = slider_length(ct, st, cg[SP_XC], cg[SP_XS], cg[SP_Y], cg[SP_CE], cg[SP_SE], cg[SP_DX])
    else:
        ca_ = math.cos(s * q_rel)
        sa_ = math.sin(s * q_rel)
        lsh, dlsh = slider_length_3d(ca_, sa_, s, cg[SH_K0], cg[SH_P], cg[SH_Q])
        lsp, dlsp = slider_length_3d(ca_, sa_, s, cg[SP_K0], cg[SP_P], cg[SP_Q])
    axis = mv(R_K, (0.0, 1.0, 0.0))
    misc[MI_LSP] = lsp
    misc[MI_DLSP] = dlsp
    misc[MI_LSH] = lsh
    misc[MI_DLSH] = dlsh
    misc[MI_CPHI] = cf
    misc[MI_SPHI] = sf
    misc[MI_CALPHA] = ca
    misc[MI_SALPHA] = sa
    misc[MI_ALPHA_TH] = a_th
    misc[MI_ALPHA_SG] = a_sg
    misc[MI_P] = ph_th
    misc[MI_AX] = axis[0]
    misc[MI_AY] = axis[1]
    misc[MI_AZ] = axis[2]
    misc[MI_RESID] = bad


@njit(cache=True, nogil=True, error_model="numpy", fastmath=FASTMATH)
def rot_axis_cs(n, c, s):
    """Rodrigues rotation about unit axis n by the angle with cosine c and sine s."""
    t = 1.0 - c
    x, y, z = n[0], n[1], n[2]
    return (
        (t * x * x + c, t * x * y - s * z, t * x * z + s * y),
        (t * x * y + s * z, t * y * y + c, t * y * z - s * x),
        (t * x * z - s * y, t * y * z + s * x, t * z * z + c),
    )


@njit(cache=True, nogil=True, error_model="numpy", fastmath=FASTMATH)
def mv_mat(a, b):
    """3x3 product (alias kept local to avoid a name clash with the vector helper)."""
    c0 = (b[0][0], b[1][0], b[2][0])
    c1 = (b[0][1], b[1][1], b[2][1])
    c2 = (b[0][2], b[1][2], b[2][2])
    return (
        (dot(a[0], c0), dot(a[0], c1), dot(a[0], c2)),
        (dot(a[1], c0), dot(a[1], c1), dot(a[1], c2)),
        (dot(a[2], c0), dot(a[2], c1), dot(a[2], c2)),
    )


# ----------------------------------------------------------------------------------------------------------
# Packing the parameter set into numba arrays
# ----------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Geometry:
    """numba-friendly geometry: cg (4, NCG) scalars, cp (4, NPT, 3) points, ci (4, 4, 3, 3) body inertias
    about their COMs in chassis axes at the design pose, sg (NSG,) steering linkage."""

    cg: np.ndarray
    cp: np.ndarray
    ci: np.ndarray
    sg: np.ndarray


def _planar(p: np.ndarray, side: float) -> complex:
    return complex(side * p[1], p[2])


def _arm_inertia(inertia: np.ndarray, f: np.ndarray, b: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Arm inertia in chassis axes: body x along F-B, z normal to the arm plane (reference ``bodies``)."""
    x = (f - b) / np.linalg.norm(f - b)
    z = np.cross(x, u - f)
    z /= np.linalg.norm(z)
    y = np.cross(z, x)
    R = np.column_stack([x, y, z])
    return R @ inertia @ R.T


def _steering_geometry(params: HmmwvParams) -> np.ndarray:
    st = params.steering
    sg = np.zeros(NSG)
    if st.kind == "rack":
        sg[SG_KIND] = 1.0
        for k, side in ((SG_LL, 1.0), (SG_LR, -1.0)):
            sg[k : k + 3] = params.front.hardpoints["TIEROD_C"] * np.array([1.0, side, 1.0])
        return sg
    sg[SG_LOC : SG_LOC + 3] = st.location
    sg[SG_PITCH] = st.pitch
    T = complex(st.rev[0], st.rev[1])
    U = complex(st.univ[0], st.univ[1])
    W = complex(st.revsph_r[0], st.revsph_r[1])
    V = complex(st.revsph_s[0], st.revsph_s[1])
    g = T - W
    sg[SG_GX], sg[SG_GY] = g.real, g.imag
    sg[SG_B], sg[SG_C], sg[SG_D] = abs(U - T), abs(V - U), abs(V - W)
    sg[SG_PHI0] = np.angle(U - T)
    sg[SG_TH30] = np.angle(U - V)
    th40 = np.angle(V - W)
    sg[SG_BR] = _branch(sg[SG_PHI0], g, sg[SG_B], sg[SG_C], sg[SG_D], th40)
    sg[SG_UX], sg[SG_UY] = U.real, U.imag
    # tierod inner points (front TIEROD_C, left and mirrored right) expressed in the steering frame
    c, s_ = np.cos(st.pitch), np.sin(st.pitch)
    Ry = np.array([[c, 0.0, s_], [0.0, 1.0, 0.0], [-s_, 0.0, c]])
    for k, side in ((SG_LL, 1.0), (SG_LR, -1.0)):
        pc = params.front.hardpoints["TIEROD_C"] * np.array([1.0, side, 1.0])
        sg[k : k + 3] = Ry.T @ (pc - st.location)
    return sg


def _branch(theta: float, g: complex, b: float, c: float, d: float, th4_target: float) -> float:
    """Sign of the acos branch of Eq. 20 that reproduces the design pose."""
    best, err = 1.0, np.inf
    for br in (1.0, -1.0):
        th4 = fourbar(theta, g.real, g.imag, b, c, d, br)[1]
        e = abs(np.angle(np.exp(1j * (th4 - th4_target))))
        if e < err:
            best, err = br, e
    return best


def pack_geometry(params: HmmwvParams) -> Geometry:
    """Corner geometry in the chassis frame (FL, FR, RL, RR), closed-form loop constants, design angles."""
    cg = np.zeros((4, NCG))
    cp = np.zeros((4, NPT, 3))
    ci = np.zeros((4, 4, 3, 3))
    sg = _steering_geometry(params)
    for i in range(4):
        axle = params.front if i < 2 else params.rear
        side = 1.0 if i % 2 == 0 else -1.0
        mir = np.array([1.0, side, 1.0])
        h = {k: v * mir for k, v in axle.hardpoints.items()}
        A = 0.5 * (h["LCA_F"] + h["LCA_B"])
        ul = (h["LCA_F"] - h["LCA_B"]) / np.linalg.norm(h["LCA_F"] - h["LCA_B"])
        ul = ul if ul[0] >= 0.0 else -ul
        D0, F0 = h["LCA_U"], h["UCA_U"]
        uf, ub = h["UCA_F"], h["UCA_B"]
        G = uf + (F0[0] - uf[0]) / (ub[0] - uf[0]) * (ub - uf)  # UCA axis point in the ball joint's x-plane
        a_, d_, f_, g_ = (_planar(A, side), _planar(D0, side), _planar(F0, side), _planar(G, side))
        cg[i, SIDE] = side
        cg[i, AXLE] = 0.0 if i < 2 else 1.0
        cg[i, AY], cg[i, AZ], cg[i, GY], cg[i, GZ] = a_.real, a_.imag, g_.real, g_.imag
        cg[i, BL], cg[i, CL], cg[i, DL] = abs(d_ - a_), np.linalg.norm(F0 - D0), abs(f_ - g_)
        cg[i, TH0] = np.angle(d_ - a_)
        cg[i, TH30] = np.angle(d_ - f_)
        cg[i, TH40] = np.angle(f_ - g_)
        cg[i, C30], cg[i, S30] = np.cos(cg[i, TH30]), np.sin(cg[i, TH30])
        cg[i, C40], cg[i, S40] = np.cos(cg[i, TH40]), np.sin(cg[i, TH40])
        cg[i, BR4] = _branch(cg[i, TH0], a_ - g_, cg[i, BL], cg[i, CL], cg[i, DL], cg[i, TH40])
        for (kb, kj), (ix, ib, iy, ie, idx) in (
            (("SHOCK_A", "SHOCK_C"), (SH_X, SH_BETA, SH_Y, SH_ETAOFF, SH_DX)),
            (("SPRING_A", "SPRING_C"), (SP_X, SP_BETA, SP_Y, SP_ETAOFF, SP_DX)),
        ):
            b_, j_ = _planar(h[kb], side), _planar(h[kj], side)
            cg[i, ix], cg[i, ib] = abs(j_ - a_), np.angle(j_ - a_)
            cg[i, iy] = abs(b_ - a_)
            cg[i, ie] = np.angle(b_ - a_) - cg[i, TH0]
            cg[i, idx] = h[kj][0] - h[kb][0]
        for ix, ib, ie, ixc, ixs, ice, ise in (
            (SH_X, SH_BETA, SH_ETAOFF, SH_XC, SH_XS, SH_CE, SH_SE),
            (SP_X, SP_BETA, SP_ETAOFF, SP_XC, SP_XS, SP_CE, SP_SE),
        ):
            cg[i, ixc], cg[i, ixs] = cg[i, ix] * np.cos(cg[i, ib]), cg[i, ix] * np.sin(cg[i, ib])
            cg[i, ice], cg[i, ise] = np.cos(cg[i, ie]), np.sin(cg[i, ie])
        cg[i, CTH0], cg[i, STH0] = np.cos(cg[i, TH0]), np.sin(cg[i, TH0])
        cg[i, LX] = 1.0 if np.array_equal(ul, [1.0, 0.0, 0.0]) else 0.0
        for (kb, kj), (ik0, ip, iq) in (
            (("SHOCK_A", "SHOCK_C"), (SH_K0, SH_P, SH_Q)),
            (("SPRING_A", "SPRING_C"), (SP_K0, SP_P, SP_Q)),
        ):
            v = h[kb] - A
            w = h[kj] - A
            v_par = (ul @ v) * ul
            cg[i, ik0] = w @ w + v @ v - 2.0 * (w @ v_par)
            cg[i, ip] = w @ (v - v_par)
            cg[i, iq] = w @ np.cross(ul, v)
        # spindle loop: E = foot of K0 on the DF (kingpin) line; upright-arm frame (e1 along EK0, e2, n)
        K0, L0 = h["TIEROD_U"], h["TIEROD_C"]
        n0 = (F0 - D0) / np.linalg.norm(F0 - D0)
        E0 = D0 + np.dot(K0 - D0, n0) * n0
        e1 = (K0 - E0) / np.linalg.norm(K0 - E0)
        e2 = np.cross(n0, e1)
        cg[i, EK] = np.linalg.norm(K0 - E0)
        cg[i, ELL] = np.linalg.norm(K0 - L0)
        el = L0 - E0
        aa, bb = el @ e1 * cg[i, EK], el @ e2 * cg[i, EK]
        xx = 0.5 * (el @ el + cg[i, EK] ** 2 - cg[i, ELL] ** 2)
        base, dev = np.arctan2(bb, aa), np.arccos(np.clip(xx / np.hypot(aa, bb), -1, 1))
        cg[i, BRA] = (
            1.0 if abs(np.angle(np.exp(1j * (base + dev)))) < abs(np.angle(np.exp(1j * (base - dev)))) else -1.0
        )
        # spatial upper arm: hinge axis u (UCA_F -> UCA_B), circle of F0 about it (centre C, radius r, phi = 0 at
        # the design pose), and the upright-arm frame [f1, f2, n] at the design pose (f1 = unit(x x n))
        ua = (ub - uf) / np.linalg.norm(ub - uf)
        cu = uf + np.dot(F0 - uf, ua) * ua
        ru = np.linalg.norm(F0 - cu)
        ea = (F0 - cu) / ru
        eb = np.cross(ua, ea)
        wv = cu - D0
        au_, bu_ = 2.0 * ru * ea @ wv, 2.0 * ru * eb @ wv
        xu_ = cg[i, CL] ** 2 - wv @ wv - ru**2
        base, dev = np.arctan2(bu_, au_), np.arccos(np.clip(xu_ / np.hypot(au_, bu_), -1, 1))
        cg[i, UR] = ru
        cg[i, BRU] = (
            1.0 if abs(np.angle(np.exp(1j * (base + dev)))) < abs(np.angle(np.exp(1j * (base - dev)))) else -1.0
        )
        f10 = np.cross([1.0, 0.0, 0.0], n0)
        f10 /= np.linalg.norm(f10)
        f20 = np.cross(n0, f10)
        cg[i, K1], cg[i, K3], cg[i, FREE] = axle.spring_k1, axle.spring_k3, axle.spring_free_length
        cg[i, STMIN], cg[i, STMAX] = axle.stop_min, axle.stop_max
        cg[i, DMC], cg[i, DMR] = axle.damper_mid_compression, axle.damper_mid_rebound
        cg[i, DBC], cg[i, DBR] = axle.damper_bump_compression, axle.damper_bump_rebound
        cg[i, ENGMIN], cg[i, ENGMAX] = axle.damper_engage_min, axle.damper_engage_max
        lca, uca, upright, wheel = params.corner_bodies(0 if i < 2 else 1)
        cg[i, M_LCA], cg[i, M_UCA] = lca.mass, uca.mass
        cg[i, M_KN], cg[i, M_WH] = upright.mass, wheel.mass
        pts = {
            P_A: A,
            P_D0: D0,
            P_F0: F0,
            P_G: G,
            P_LCACM: h["LCA_CM"],
            P_UCACM: h["UCA_CM"],
            P_KCM: h["UPRIGHT"],
            P_WC: h["SPINDLE"],
            P_K0: K0,
            P_L0: L0,
            P_E0: E0,
            P_N0: n0,
            P_E1: e1,
            P_E2: e2,
            P_SHB: h["SHOCK_A"],
            P_SHJ: h["SHOCK_C"],
            P_SPB: h["SPRING_A"],
            P_SPJ: h["SPRING_C"],
            P_UC: cu,
            P_UAX: ua,
            P_UEA: ea,
            P_UEB: eb,
            P_F10: f10,
            P_F20: f20,
            P_LAX: ul,
        }
        for k, v in pts.items():
            cp[i, k] = v
        ci[i, B_LCA] = _arm_inertia(lca.inertia, h["LCA_F"], h["LCA_B"], D0)
        ci[i, B_UCA] = _arm_inertia(uca.inertia, uf, ub, F0)
        ci[i, B_KN] = upright.inertia
        ci[i, B_WH] = wheel.inertia
    return Geometry(cg=cg, cp=cp, ci=ci, sg=sg)


# ----------------------------------------------------------------------------------------------------------
# Python-level helpers (tests, plots, X_S of the paper)
# ----------------------------------------------------------------------------------------------------------
def corner_state(
    geo: Geometry, i: int, q_rel: float, thd: float = 1.0, sigma: float = 0.0, sigd: float = 0.0
) -> dict[str, np.ndarray | float]:
    """Run :func:`corner_kinematics` for corner i and return named results (not for hot loops)."""
    rot = np.zeros((4, 3, 3))
    pos = np.zeros((4, 3))
    sth = np.zeros((4, 6))
    ssg = np.zeros((4, 6))
    acc = np.zeros((4, 6))
    misc = np.zeros(NMI)
    link = pitman_link(geo.sg, sigma)
    corner_kinematics(geo.cg[i], geo.cp[i], geo.sg, link, q_rel, thd, sigd, rot, pos, sth, ssg, acc, misc)
    axis = misc[MI_AX : MI_AZ + 1].copy()
    side = geo.cg[i, SIDE]
    return {
        "rot": rot,
        "pos": pos,
        "sth": sth,
        "ssg": ssg,
        "acc": acc,
        "misc": misc,
        "axis": axis,
        "wheel_centre": pos[B_WH].copy(),
        "camber": float(-side * np.arcsin(axis[2])),
        "toe": float(-side * np.arctan2(-axis[0], axis[1])),  # + = toe-in
        "steer": float(np.arctan2(-axis[0], axis[1])),  # road-wheel angle, + = left
        "spring_length": float(misc[MI_LSP]),
        "shock_length": float(misc[MI_LSH]),
        "alpha": float(np.arctan2(misc[MI_SALPHA], misc[MI_CALPHA])),
        "phi": float(np.arctan2(misc[MI_SPHI], misc[MI_CPHI])),
        "residual": float(misc[MI_RESID]),
    }


def loop_points(geo: Geometry, i: int, q_rel: float, sigma: float = 0.0) -> dict[str, np.ndarray]:
    """3-D positions of the loop points A, D, F, C (UCA hinge), B, J (shock), E, K, L for closure checks."""
    cg, cp = geo.cg[i], geo.cp[i]
    st = corner_state(geo, i, q_rel, 0.0, sigma, 0.0)
    s = cg[SIDE]
    th = cg[TH0] + q_rel
    R_L = st["rot"][B_LCA]
    R_U = np.array(rot_axis_cs(cp[P_UAX], st["misc"][MI_CPHI], st["misc"][MI_SPHI]))
    A, C = cp[P_A], cp[P_UC]
    D = A + R_L @ (cp[P_D0] - A)
    R_K = st["rot"][B_KN]
    K0, E0 = cp[P_K0], cp[P_E0]
    # the knuckle carries D, F (ball joints), K (tierod end) and E (foot of K on the kingpin DF)
    E = D + R_K @ (E0 - cp[P_D0])
    F_kn = E + R_K @ (cp[P_F0] - E0)
    D_kn = E + R_K @ (cp[P_D0] - E0)
    F_uca = C + R_U @ (cp[P_F0] - C)  # F carried by the upper arm (cut joint)
    K = E + R_K @ (K0 - E0)
    if cg[AXLE] < 0.5:
        L = np.array(pitman(geo.sg, sigma, s)[0])
    else:
        L = cp[P_L0].copy()
    B_sh = A + R_L @ (cp[P_SHB] - A)
    B_sp = A + R_L @ (cp[P_SPB] - A)
    return {
        "A": A,
        "D": D,
        "D_kn": D_kn,
        "F_up": F_kn,
        "F_uca": F_uca,
        "C": C,
        "E": E,
        "K": K,
        "L": L,
        "theta": th,
        "B_shock": B_sh,
        "J_shock": cp[P_SHJ].copy(),
        "B_spring": B_sp,
        "J_spring": cp[P_SPJ].copy(),
        "shock_length": st["shock_length"],
        "spring_length": st["spring_length"],
        "R_K": R_K,
    }


def internal_coordinates(geo: Geometry, i: int, q_rel: float, sigma: float = 0.0) -> np.ndarray:
    """theta_S of the aggregated body: [theta, phi, DBJ, r_shock, alpha, chi, zeta] (Sections 5.1-5.3).

    theta = LCA angle, phi = UCA rotation about its (inclined) hinge axis from the design pose, shock hinge
    gamma - eta, shock stroke r = z (planar |BJ|), spindle alpha (knuckle rotation about the kingpin DF
    relative to the upright-arm frame [f1, f2, n]), tierod elevation chi and azimuth zeta of KL in the knuckle
    frame.
    """
    cg = geo.cg[i]
    th = cg[TH0] + q_rel
    st = corner_state(geo, i, q_rel, 0.0, sigma, 0.0)
    phi = st["phi"]
    z, gam = slider_crank(np.cos(th), np.sin(th), cg[SH_X], cg[SH_BETA], cg[SH_Y], cg[SH_ETAOFF], cg[SH_DX])[:2]
    pts = loop_points(geo, i, q_rel, sigma)
    kl = pts["R_K"].T @ (pts["L"] - pts["K"])
    chi = np.arcsin(kl[2] / np.linalg.norm(kl))
    zeta = np.arctan2(kl[1], kl[0])
    return np.array([th, phi, gam - (th + cg[SH_ETAOFF]), z, st["alpha"], chi, zeta])


def x_s_matrix(geo: Geometry, i: int, q_rel: float, sigma: float = 0.0) -> np.ndarray:
    """Analytical X_S (7 x 2): internal rates of :func:`internal_coordinates` per unit (thetadot, sigmadot).

    Column 0: the spatial control-arm loop (phidot = (F - D).vD / ((F - D).(u x (F - C))) thetadot), Eq. 30
    (shock: -(1 + y cos(eta - gamma)/z), y sin(eta - gamma)) and Eq. 32 (spindle loop: [alphadot, chidot,
    zetadot] = J_EL^-1 (v_L - v_up(L)) with v_up(L) the velocity of the upright-arm frame at L); column 1 is
    the steering contribution through the moving tierod end (Section 5.4).
    """
    cg, cp = geo.cg[i], geo.cp[i]
    s = cg[SIDE]
    th = cg[TH0] + q_rel
    z, gam, dz, dgam = slider_crank(np.cos(th), np.sin(th), cg[SH_X], cg[SH_BETA], cg[SH_Y], cg[SH_ETAOFF], cg[SH_DX])[
        :4
    ]
    X = np.zeros((7, 2))
    pts = loop_points(geo, i, q_rel, sigma)
    ex = np.array([1.0, 0.0, 0.0])
    A, D, F, C, E = pts["A"], pts["D"], pts["F_uca"], pts["C"], pts["E"]
    u = cp[P_UAX]
    vD = s * np.cross(cp[P_LAX], D - A)
    uxFC = np.cross(u, F - C)
    ph_th = (F - D) @ vD / ((F - D) @ uxFC)
    X[0, 0] = 1.0
    X[1, 0] = ph_th
    eta = th + cg[SH_ETAOFF]
    X[2, 0] = -(1.0 + cg[SH_Y] * np.cos(eta - gam) / z)  # Eq. 30
    X[3, 0] = cg[SH_Y] * np.sin(eta - gam)
    # upright-arm frame: n = (F - D)/c, spin about n from f1 = unit(x x n)
    c = cg[CL]
    n = (F - D) / c
    nd = (ph_th * uxFC - vD) / c
    g = np.cross(ex, n)
    f2 = np.cross(n, g / np.linalg.norm(g))
    w_up = np.cross(n, nd) + (np.cross(ex, nd) @ f2) / np.linalg.norm(g) * n
    L, K, R_K = pts["L"], pts["K"], pts["R_K"]
    kl = R_K.T @ (L - K)
    ell = np.linalg.norm(kl)
    chi, zeta = np.arcsin(kl[2] / ell), np.arctan2(kl[1], kl[0])
    d_chi = np.array([-np.sin(chi) * np.cos(zeta), -np.sin(chi) * np.sin(zeta), np.cos(chi)])
    d_zeta = np.array([-np.cos(chi) * np.sin(zeta), np.cos(chi) * np.cos(zeta), 0.0])
    J_EL = np.column_stack([np.cross(n, L - E), ell * R_K @ d_chi, ell * R_K @ d_zeta])
    v_up_L = vD + np.cross(w_up, L - D)
    X[4:7, 0] = np.linalg.solve(J_EL, -v_up_L)  # Eq. 32
    if cg[AXLE] < 0.5:
        dL = np.array(pitman(geo.sg, sigma, s)[1])
        X[4:7, 1] = np.linalg.solve(J_EL, dL)
    return X


__all__ = [
    "Geometry",
    "pack_geometry",
    "corner_kinematics",
    "corner_state",
    "fourbar",
    "slider_crank",
    "pitman",
    "pitman_link",
    "pitman_point",
    "tierod_end",
    "loop_points",
    "internal_coordinates",
    "x_s_matrix",
    "mtv",
    "norm",
    "unit",
]
