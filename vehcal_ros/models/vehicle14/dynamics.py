"""14-DOF constraint-embedded HMMWV dynamics: constraint-embedding paper, Sections 2-4.

Tree: chassis (6-DOF floating base) -> four aggregated suspension bodies S (1 DOF each: the LCA angle theta,
Section 4.1) -> four wheels (spin). Generalised velocities (14): chassis angular and linear velocity of the
reference point O in chassis axes, the four thetadot, the four wheel spin rates relative to the knuckle.
The equations of motion are an ODE in these minimal coordinates (no constraint stabilisation).

Spatial conventions: spatial vectors are [angular; linear], and every body's spatial quantities are referred
to the chassis reference point O in chassis axes at the current instant (the instantaneous inertial frame that
coincides with the chassis frame). Hence the rigid-body transforms phi(k, c) of Eqs. 4, 6, 7 between the
chassis, the aggregated bodies and the wheels are the identity, and

* H*(S) = [S_LCA; S_UCA; S_knuckle] (the X_S-weighted hinge axes of Eq. 10, from kinematics.py),
* a(S) = crm(V_chassis) H*(S) thetadot + H_S^* Xdot_S thetadot (Eq. 11) + the prescribed steering terms,
* b(k) = V(k) x* M(k) V(k) - f_ext(k) (gyroscopic minus external forces, Eq. 2),

and the articulated-body recursion (Eqs. 4, 6, 7) runs chassis <- S <- wheel with the paper's names
P, D, G, tau-bar, z, epsilon, nu, alpha. Because P(S) is block-diagonal over the bodies of S and phi(p, S) =
[1, 1, 1], the parent only needs the block sums (the sparsity exploited in Section 3.2).

The dense check (:func:`dense_accelerations`) assembles M = sum J^T M J and C = sum J^T (M a_bias + b) (Eq.
1-2)
from the same per-body data and solves M thetaddot = T - C.

Forces: tire (tires.py, flat road z = 0, friction from road.py), spring (cubic + bump/rebound stops), damper
(piecewise linear), drive and brake torques (the shared powertrain map, or an engine map + automatic gearbox +
open differentials with the vehicle's brake gain; reaction on the knuckle), optional
aerodynamic drag at the chassis COM, gravity. The steering Pitman arm is a prescribed motion following the
command with a first-order servo lag (sigmadot = (sigma_cmd - sigma)/tau).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from ..powertrain import brake_torque, drive_torque_per_wheel
from .kinematics import (
    B_KN,
    B_WH,
    DBC,
    DBR,
    DMC,
    DMR,
    ENGMAX,
    ENGMIN,
    FREE,
    K1,
    K3,
    M_KN,
    M_LCA,
    M_UCA,
    M_WH,
    MI_AX,
    MI_DLSH,
    MI_DLSP,
    MI_LSH,
    MI_LSP,
    MI_RESID,
    NMI,
    STMAX,
    STMIN,
    corner_kinematics,
    pitman_link,
)
from .road import road_mu
from .tires import T_KZ, T_QSY1, T_R0, T_VLOW, combined_forces, peak_mu, rolling_radius, vertical_force
from .vec3 import FASTMATH

# ---- state layout y ----
Y_R, Y_Q, Y_TH, Y_SIG, Y_W, Y_V, Y_THD, Y_OM = 0, 3, 7, 11, 12, 15, 18, 22
NY = 26
NDOF = 14
# ---- global parameters gp ----
G_GRAV, G_MC, G_COM, G_IC, G_TAU, G_AERO, G_RRV, G_BRKW = 0, 1, 2, 5, 14, 15, 16, 17
# powertrain (G_PT = 0: the 8-DOF paper's shared drive and brake maps; 1: engine map + automatic gearbox +
# open differentials, params.PowertrainParams) and the brake torque per wheel at full pedal
MAXG, MAXM = 10, 40  # gears, map points
G_PT, G_BRK, G_FRAC, G_FINAL, G_NG = 18, 19, 20, 24, 25
G_RATIO = 26
G_DOWN = G_RATIO + MAXG
G_UP = G_DOWN + MAXG
G_NF = G_UP + MAXG
G_MF = G_NF + 1  # full-throttle map: MAXM speeds then MAXM torques
G_NZ = G_MF + 2 * MAXM
G_MZ = G_NZ + 1
# implicit wheel spin (semi_implicit integrator): G_IMPL = 1 turns it on; G_ISPIN front/rear spin inertias
G_IMPL = G_MZ + 2 * MAXM
G_ISPIN = G_IMPL + 1
# road grade (road.py): sin and cos of the road's inclination; the world frame is the road's (x along it, z normal)
G_GRADE = G_ISPIN + 2
NGP = G_GRADE + 2
# ---- powertrain state (work[31]): gear index (0 = first), engine speed rad/s, engine torque N m ----
PS_GEAR, PS_WE, PS_TE = 0, 1, 2
# ---- per-wheel tire outputs wt[i, :] ----
(W_FX, W_FY, W_FZ, W_SLIP, W_ALPHA, W_RE, W_MU, W_VX, W_VY, W_DELTA, W_MUMAX, W_PX, W_PY, W_MY, W_TQ) = range(15)
W_LAM = 15  # wheel-spin stiffness -d(omegadot)/d(omega) of the tire force (1/s), with G_IMPL only
W_TB = 16  # brake torque at the wheel, N m (opposing its spin; part of W_TQ)
NWT = 17
NB = 17  # bodies: 0 chassis, 1 + 4 i + j (j = 0 LCA, 1 UCA, 2 knuckle, 3 wheel)


def make_work() -> tuple:
    """Scratch arrays reused by every derivative evaluation (no allocation inside the step loop)."""
    return (
        np.zeros((4, 4, 3, 3)),  # 0 rot
        np.zeros((4, 4, 3)),  # 1 pos
        np.zeros((4, 4, 6)),  # 2 sth  (X_S columns, per unit thetadot)
        np.zeros((4, 4, 6)),  # 3 ssg  (per unit sigmadot)
        np.zeros((4, 4, 6)),  # 4 acc  (velocity-product relative accelerations)
        np.zeros((4, NMI)),  # 5 misc
        np.zeros((NB, 6, 6)),  # 6 M(k) spatial inertias about O
        np.zeros((NB, 6)),  # 7 V(k)
        np.zeros((NB, 6)),  # 8 a(k) Coriolis (hinge) accelerations
        np.zeros((NB, 6)),  # 9 b(k) gyroscopic - external
        np.zeros((4, 6)),  # 10 h: wheel spin axes (H* of the wheels)
        np.zeros(NDOF),  # 11 T generalised forces
        np.zeros((4, NWT)),  # 12 tire outputs
        np.zeros((6, 6)),  # 13 P(chassis)
        np.zeros(6),  # 14 z(chassis)
        np.zeros((4, 6)),  # 15 U = phi(c,S) P(S) H*(S)
        np.zeros(4),  # 16 D(S)
        np.zeros(4),  # 17 nu(S)
        np.zeros((4, 6)),  # 18 G(wheel)
        np.zeros(4),  # 19 nu(wheel)
        np.zeros((6, 6)),  # 20 scratch 6x6
        np.zeros(6),  # 21 scratch 6
        np.zeros(NDOF),  # 22 last accelerations
        np.zeros(6),  # 23 alpha(knuckle) scratch
        np.zeros(6),  # 24 scratch 6
        np.zeros((3, 3)),  # 25 scratch 3x3
        np.zeros(6),  # 26 external force scratch
        np.zeros((4, 6)),  # 27 M h of the wheels
        np.zeros((4, 6)),  # 28 z(w) of the wheels
        np.zeros(6),  # 29 chassis acceleration
        np.zeros((3, 3)),  # 30 scratch 3x3
        np.zeros(3),  # 31 powertrain state (PS_*)
        np.zeros(3),  # 32 drive-torque reaction moment on the chassis (map engine)
    )


# ----------------------------------------------------------------------------------------------------------
# Spatial algebra
# ----------------------------------------------------------------------------------------------------------
@njit(cache=True, nogil=True, error_model="numpy", fastmath=FASTMATH)
def spatial_inertia(m, p, Ic, out):
    """M about O of a body of mass m, COM p, inertia Ic (about COM, chassis axes): [[Ic - m px px, m px],
    [-m px, m 1]] (out is 6x6)."""
    px = ((0.0, -p[2], p[1]), (p[2], 0.0, -p[0]), (-p[1], p[0], 0.0))
    for r in range(3):
        for c in range(3):
            s = 0.0
            for k in range(3):
                s += px[r][k] * px[k][c]
            out[r, c] = Ic[r, c] - m * s
            out[r, 3 + c] = m * px[r][c]
            out[3 + r, c] = -m * px[r][c]
            out[3 + r, 3 + c] = m if r == c else 0.0


@njit(cache=True, nogil=True, error_model="numpy", fastmath=FASTMATH)
def crm(V, m, out):
    """Spatial motion cross product V x m."""
    w0, w1, w2, v0, v1, v2 = V[0], V[1], V[2], V[3], V[4], V[5]
    a0, a1, a2, l0, l1, l2 = m[0], m[1], m[2], m[3], m[4], m[5]
    out[0] = w1 * a2 - w2 * a1
    out[1] = w2 * a0 - w0 * a2
    out[2] = w0 * a1 - w1 * a0
    out[3] = w1 * l2 - w2 * l1 + v1 * a2 - v2 * a1
    out[4] = w2 * l0 - w0 * l2 + v2 * a0 - v0 * a2
    out[5] = w0 * l1 - w1 * l0 + v0 * a1 - v1 * a0


@njit(cache=True, nogil=True, error_model="numpy", fastmath=FASTMATH)
def crf(V, f, out):
    """Spatial force cross product V x* f."""
    w0, w1, w2, v0, v1, v2 = V[0], V[1], V[2], V[3], V[4], V[5]
    n0, n1, n2, f0, f1, f2 = f[0], f[1], f[2], f[3], f[4], f[5]
    out[0] = w1 * n2 - w2 * n1 + v1 * f2 - v2 * f1
    out[1] = w2 * n0 - w0 * n2 + v2 * f0 - v0 * f2
    out[2] = w0 * n1 - w1 * n0 + v0 * f1 - v1 * f0
    out[3] = w1 * f2 - w2 * f1
    out[4] = w2 * f0 - w0 * f2
    out[5] = w0 * f1 - w1 * f0


@njit(cache=True, nogil=True, error_model="numpy", fastmath=FASTMATH)
def quat_to_rot(e0, e1, e2, e3):
    """Rotation matrix (chassis -> world) of the unit quaternion (e0, e1, e2, e3)."""
    return (
        (1.0 - 2.0 * (e2 * e2 + e3 * e3), 2.0 * (e1 * e2 - e0 * e3), 2.0 * (e1 * e3 + e0 * e2)),
        (2.0 * (e1 * e2 + e0 * e3), 1.0 - 2.0 * (e1 * e1 + e3 * e3), 2.0 * (e2 * e3 - e0 * e1)),
        (2.0 * (e1 * e3 - e0 * e2), 2.0 * (e2 * e3 + e0 * e1), 1.0 - 2.0 * (e1 * e1 + e2 * e2)),
    )


# ----------------------------------------------------------------------------------------------------------
# Force elements
# ----------------------------------------------------------------------------------------------------------
@njit(cache=True, nogil=True, error_model="numpy", fastmath=FASTMATH)
def _curve(bs, x):
    """Piecewise-linear bump/rebound stop curve (penetration -> force), linearly extrapolated."""
    n = bs.shape[0]
    if x <= bs[0, 0]:
        return 0.0
    for k in range(1, n):
        if x <= bs[k, 0]:
            t = (x - bs[k - 1, 0]) / (bs[k, 0] - bs[k - 1, 0])
            return bs[k - 1, 1] + t * (bs[k, 1] - bs[k - 1, 1])
    slope = (bs[n - 1, 1] - bs[n - 2, 1]) / (bs[n - 1, 0] - bs[n - 2, 0])
    return bs[n - 1, 1] + slope * (x - bs[n - 1, 0])


@njit(cache=True, nogil=True, error_model="numpy", fastmath=FASTMATH)
def _curve_energy(bs, x):
    """Integral of the stop curve from 0 to x."""
    n = bs.shape[0]
    e = 0.0
    for k in range(1, n):
        if x <= bs[k - 1, 0]:
            return e
        hi = min(x, bs[k, 0])
        f_hi = _curve(bs, hi)
        e += 0.5 * (bs[k - 1, 1] + f_hi) * (hi - bs[k - 1, 0])
    if x > bs[n - 1, 0]:
        e += 0.5 * (bs[n - 1, 1] + _curve(bs, x)) * (x - bs[n - 1, 0])
    return e


@njit(cache=True, nogil=True, error_model="numpy", fastmath=FASTMATH)
def spring_force(cg, bs, length):
    """Spring force along the spring (N, + pushes apart): -(k1 x + k3 x^3), x = L - L_free, plus stops."""
    x = length - cg[FREE]
    f = -(cg[K1] * x + cg[K3] * x * x * x)
    if length < cg[STMIN]:
        f += _curve(bs, cg[STMIN] - length)
    elif length > cg[STMAX]:
        f -= _curve(bs, length - cg[STMAX])
    return f


@njit(cache=True, nogil=True, error_model="numpy", fastmath=FASTMATH)
def spring_energy(cg, bs, length):
    x = length - cg[FREE]
    e = 0.5 * cg[K1] * x * x + 0.25 * cg[K3] * x**4
    if length < cg[STMIN]:
        e += _curve_energy(bs, cg[STMIN] - length)
    elif length > cg[STMAX]:
        e += _curve_energy(bs, length - cg[STMAX])
    return e


@njit(cache=True, nogil=True, error_model="numpy", fastmath=FASTMATH)
def damper_force(cg, length, rate, scale):
    """Piecewise-linear damper (N, + pushes apart): rebound rate when extending, compression rate otherwise;
    bump-stop rates outside the engagement lengths (reference ``shock``)."""
    inside = cg[ENGMIN] <= length <= cg[ENGMAX]
    if rate >= 0.0:
        c = cg[DMR] if inside else cg[DBR]
    else:
        c = cg[DMC] if inside else cg[DBC]
    return -scale * c * rate


@njit(cache=True, nogil=True, error_model="numpy", fastmath=FASTMATH)
def _map(gp, off, n, x):
    """Piecewise-linear engine map stored at gp[off: off + n] (speeds) and gp[off + MAXM: ...] (torques),
    held constant beyond its ends."""
    if x <= gp[off]:
        return gp[off + MAXM]
    for k in range(1, n):
        if x <= gp[off + k]:
            t = (x - gp[off + k - 1]) / (gp[off + k] - gp[off + k - 1])
            return gp[off + MAXM + k - 1] + t * (gp[off + MAXM + k] - gp[off + MAXM + k - 1])
    return gp[off + MAXM + n - 1]


@njit(cache=True, nogil=True, error_model="numpy", fastmath=FASTMATH)
def driveline_speed(y, gp):
    """Differential-box speed (rad/s): the torque-share-weighted mean spin of the driven wheels."""
    w = 0.0
    for i in range(4):
        w += gp[G_FRAC + i] * y[Y_OM + i]
    return w / (gp[G_FRAC] + gp[G_FRAC + 1] + gp[G_FRAC + 2] + gp[G_FRAC + 3])


@njit(cache=True, nogil=True, error_model="numpy", fastmath=FASTMATH)
def engine_torque(throttle, y, gp, ps):
    """Torque at the differential box (N m) of the map engine in the current gear: engine speed
    w_e = |w_diff| / (gear x final), T_e = (1 - throttle) map_zero(w_e) + throttle map_full(w_e) (Chrono
    EngineSimpleMap), returned as T_e / (gear x final); w_e and T_e are stored in ps."""
    g = int(ps[PS_GEAR])
    ratio = gp[G_RATIO + g] * gp[G_FINAL]
    we = abs(driveline_speed(y, gp)) / ratio
    te = (1.0 - throttle) * _map(gp, G_MZ, int(gp[G_NZ]), we) + throttle * _map(gp, G_MF, int(gp[G_NF]), we)
    ps[PS_WE] = we
    ps[PS_TE] = te
    return te / ratio


@njit(cache=True, nogil=True, error_model="numpy", fastmath=FASTMATH)
def shift_gear(y, gp, ps):
    """Chrono AutomaticTransmissionSimpleMap: one gear up above the gear's upshift speed, one down below its
    downshift speed (checked after every step, no latency)."""
    g = int(ps[PS_GEAR])
    we = abs(driveline_speed(y, gp)) / (gp[G_RATIO + g] * gp[G_FINAL])
    if we > gp[G_UP + g] and g < int(gp[G_NG]) - 1:
        ps[PS_GEAR] = g + 1
    elif we < gp[G_DOWN + g] and g > 0:
        ps[PS_GEAR] = g - 1


# ----------------------------------------------------------------------------------------------------------
# Per-body data shared by the AB recursion and the dense check
# ----------------------------------------------------------------------------------------------------------
@njit(cache=True, nogil=True, error_model="numpy", fastmath=FASTMATH)
def body_terms(y, u, cg, cp, ci, sg, gp, tp, bs, rb, rm, rdef, work):
    """Kinematics, forces and the per-body quantities M(k), V(k), a(k), b(k), H, T for state y, inputs u.

    u = [throttle, brake, sigma_cmd, damper_scale]. Returns sigmadot (the steering servo rate).
    """
    rot, pos, sth, ssg, acc, misc, Mb, Vb, ab, bb, hw, T, wt = work[:13]
    tmp6 = work[21]
    e0, e1, e2, e3 = y[Y_Q], y[Y_Q + 1], y[Y_Q + 2], y[Y_Q + 3]
    R = quat_to_rot(e0, e1, e2, e3)
    grav = gp[G_GRAV]
    sa = gp[G_GRADE]
    if sa == 0.0:
        gc = (-grav * R[2][0], -grav * R[2][1], -grav * R[2][2])  # gravity in chassis axes
    else:  # graded road: gravity in the road frame is (-g sin a, 0, -g cos a) (the road rises along +x)
        ca = gp[G_GRADE + 1]
        gc = (-grav * (sa * R[0][0] + ca * R[2][0]), -grav * (sa * R[0][1] + ca * R[2][1]),
              -grav * (sa * R[0][2] + ca * R[2][2]))
    sigma = y[Y_SIG]
    sigd = (u[2] - sigma) / gp[G_TAU]
    sigdd = -sigd / gp[G_TAU]
    for k in range(NDOF):
        T[k] = 0.0
    # ---- chassis (body 0) ----
    Ic = work[25]
    for r in range(3):
        for c in range(3):
            Ic[r, c] = gp[G_IC + 3 * r + c]
    com = (gp[G_COM], gp[G_COM + 1], gp[G_COM + 2])
    mc = gp[G_MC]
    spatial_inertia(mc, com, Ic, Mb[0])
    for r in range(3):
        Vb[0, r] = y[Y_W + r]
        Vb[0, 3 + r] = y[Y_V + r]
        ab[0, r] = 0.0
        ab[0, 3 + r] = 0.0
    Vc = Vb[0]
    fg = (mc * gc[0], mc * gc[1], mc * gc[2])
    fext = work[26]
    fext[0] = com[1] * fg[2] - com[2] * fg[1]
    fext[1] = com[2] * fg[0] - com[0] * fg[2]
    fext[2] = com[0] * fg[1] - com[1] * fg[0]
    fext[3], fext[4], fext[5] = fg[0], fg[1], fg[2]
    if gp[G_AERO] > 0.0:
        w = (y[Y_W], y[Y_W + 1], y[Y_W + 2])
        vcm = (
            y[Y_V] + w[1] * com[2] - w[2] * com[1],
            y[Y_V + 1] + w[2] * com[0] - w[0] * com[2],
            y[Y_V + 2] + w[0] * com[1] - w[1] * com[0],
        )
        sp = math.sqrt(vcm[0] ** 2 + vcm[1] ** 2 + vcm[2] ** 2)
        fa = (-gp[G_AERO] * sp * vcm[0], -gp[G_AERO] * sp * vcm[1], -gp[G_AERO] * sp * vcm[2])
        fext[0] += com[1] * fa[2] - com[2] * fa[1]
        fext[1] += com[2] * fa[0] - com[0] * fa[2]
        fext[2] += com[0] * fa[1] - com[1] * fa[0]
        fext[3] += fa[0]
        fext[4] += fa[1]
        fext[5] += fa[2]
    for r in range(6):
        tmp = 0.0
        for c in range(6):
            tmp += Mb[0, r, c] * Vc[c]
        tmp6[r] = tmp
    crf(Vc, tmp6, bb[0])
    for r in range(6):
        bb[0, r] -= fext[r]
    # ---- drive torque (shared powertrain map, or engine map + gearbox at the differential box) ----
    paper_map = gp[G_PT] < 0.5
    if paper_map:
        mean_w = 0.25 * (y[Y_OM] + y[Y_OM + 1] + y[Y_OM + 2] + y[Y_OM + 3])
        tdrive = drive_torque_per_wheel(u[0], mean_w)
    else:
        tdrive = engine_torque(u[0], y, gp, work[31])
    chassis_drive = work[32]  # drive-torque reactions on the chassis (map engine; pure moment)
    chassis_drive[0] = chassis_drive[1] = chassis_drive[2] = 0.0
    vtmp = work[24]
    link = pitman_link(sg, sigma)
    for i in range(4):
        thd = y[Y_THD + i]
        corner_kinematics(
            cg[i], cp[i], sg, link, y[Y_TH + i], thd, sigd, rot[i], pos[i], sth[i], ssg[i], acc[i], misc[i]
        )
        masses = (cg[i, M_LCA], cg[i, M_UCA], cg[i, M_KN], cg[i, M_WH])
        for j in range(4):
            k = 1 + 4 * i + j
            # inertia about the COM in chassis axes: R I0 R^T
            Rj = rot[i, j]
            I0 = ci[i, j]
            RI = work[30]
            for r in range(3):
                for c in range(3):
                    RI[r, c] = Rj[r, 0] * I0[0, c] + Rj[r, 1] * I0[1, c] + Rj[r, 2] * I0[2, c]
            for r in range(3):
                for c in range(3):
                    Ic[r, c] = RI[r, 0] * Rj[c, 0] + RI[r, 1] * Rj[c, 1] + RI[r, 2] * Rj[c, 2]
            p = (pos[i, j, 0], pos[i, j, 1], pos[i, j, 2])
            spatial_inertia(masses[j], p, Ic, Mb[k])
            m = masses[j]
            fext[3], fext[4], fext[5] = m * gc[0], m * gc[1], m * gc[2]
            fext[0] = p[1] * fext[5] - p[2] * fext[4]
            fext[1] = p[2] * fext[3] - p[0] * fext[5]
            fext[2] = p[0] * fext[4] - p[1] * fext[3]
            if j == 2 and not paper_map:
                # inboard differential: the drive torque's reaction goes to the chassis (the engine and differential
                # are sprung), not to the knuckle. The spin hinge puts -T a on the knuckle; +T a here cancels it and
                # -T a is added to the chassis after the corners (the brake reacts on the knuckle)
                tdi = gp[G_FRAC + i] * tdrive
                for r in range(3):
                    fext[r] += tdi * misc[i, MI_AX + r]
                    chassis_drive[r] -= tdi * misc[i, MI_AX + r]
            jj = j if j < 3 else B_KN  # the wheel carrier moves with the knuckle
            for r in range(6):
                vtmp[r] = sth[i, jj, r] * thd + ssg[i, jj, r] * sigd
                Vb[k, r] = Vc[r] + vtmp[r]
            if j < 3:
                crm(Vc, vtmp, ab[k])
                for r in range(6):
                    ab[k, r] += acc[i, j, r] + ssg[i, j, r] * sigdd
            else:
                # wheel: spin hinge h = [a; c x a] on the knuckle; V(w) = V(knuckle) + h omega
                ax = (misc[i, MI_AX], misc[i, MI_AX + 1], misc[i, MI_AX + 2])
                hw[i, 0], hw[i, 1], hw[i, 2] = ax[0], ax[1], ax[2]
                hw[i, 3] = p[1] * ax[2] - p[2] * ax[1]
                hw[i, 4] = p[2] * ax[0] - p[0] * ax[2]
                hw[i, 5] = p[0] * ax[1] - p[1] * ax[0]
                om = y[Y_OM + i]
                for r in range(6):
                    vtmp[r] = hw[i, r] * om
                crm(Vb[k - 1], vtmp, ab[k])  # a(w) = V(knuckle) x h omega
                for r in range(6):
                    Vb[k, r] = Vb[k - 1, r] + vtmp[r]
                _tire(i, y, R, p, ax, Vb[k - 1], om, tp, gp, rb, rm, rdef, wt, fext)
                # wheel torque: drive + brake (reaction on the knuckle)
                if paper_map:
                    tb = brake_torque(u[1], om) * min(1.0, abs(om) / gp[G_BRKW])
                    tq = tdrive + tb
                else:
                    tb = 0.0
                    if om > 0.0:
                        tb = -u[1] * gp[G_BRK]
                    elif om < 0.0:
                        tb = u[1] * gp[G_BRK]
                    tb *= min(1.0, abs(om) / gp[G_BRKW])
                    tq = gp[G_FRAC + i] * tdrive + tb
                T[10 + i] = tq
                wt[i, W_TQ] = tq
                wt[i, W_TB] = tb
            for r in range(6):
                s = 0.0
                for c in range(6):
                    s += Mb[k, r, c] * Vb[k, c]
                tmp6[r] = s
            crf(Vb[k], tmp6, bb[k])
            for r in range(6):
                bb[k, r] -= fext[r]
        # ---- spring and damper: generalised force on theta (virtual work F dL) ----
        lsp, dlsp = misc[i, MI_LSP], misc[i, MI_DLSP]
        lsh, dlsh = misc[i, MI_LSH], misc[i, MI_DLSH]
        T[6 + i] = spring_force(cg[i], bs, lsp) * dlsp + damper_force(cg[i], lsh, dlsh * thd, u[3]) * dlsh
    if not paper_map:
        for r in range(3):
            bb[0, r] -= chassis_drive[r]  # b = ... - f_ext
    return sigd


@njit(cache=True, nogil=True, error_model="numpy", fastmath=FASTMATH)
def _tire(i, y, R, c, ax, Vk, om, tp, gp, rb, rm, rdef, wt, fext):
    """Contact of wheel i on the flat road z = 0; adds the tire wrench (about O, chassis axes) to fext."""
    # wheel centre and spin axis in the world
    cw = (
        y[Y_R] + R[0][0] * c[0] + R[0][1] * c[1] + R[0][2] * c[2],
        y[Y_R + 1] + R[1][0] * c[0] + R[1][1] * c[1] + R[1][2] * c[2],
        y[Y_R + 2] + R[2][0] * c[0] + R[2][1] * c[1] + R[2][2] * c[2],
    )
    aw = (
        R[0][0] * ax[0] + R[0][1] * ax[1] + R[0][2] * ax[2],
        R[1][0] * ax[0] + R[1][1] * ax[1] + R[1][2] * ax[2],
        R[2][0] * ax[0] + R[2][1] * ax[1] + R[2][2] * ax[2],
    )
    # velocity of the wheel centre (knuckle point): v_O + w x c
    vc = (
        Vk[3] + Vk[1] * c[2] - Vk[2] * c[1],
        Vk[4] + Vk[2] * c[0] - Vk[0] * c[2],
        Vk[5] + Vk[0] * c[1] - Vk[1] * c[0],
    )
    vw = (
        R[0][0] * vc[0] + R[0][1] * vc[1] + R[0][2] * vc[2],
        R[1][0] * vc[0] + R[1][1] * vc[1] + R[1][2] * vc[2],
        R[2][0] * vc[0] + R[2][1] * vc[1] + R[2][2] * vc[2],
    )
    # heading frame: x_t = unit(a x e_z), y_t = e_z x x_t
    hn = math.hypot(aw[0], aw[1])
    xt = (aw[1] / hn, -aw[0] / hn, 0.0)
    yt = (-xt[1], xt[0], 0.0)
    cgam = math.sqrt(max(1.0 - aw[2] * aw[2], 1e-12))
    r_load = cw[2] / cgam
    delta = tp[T_R0] - r_load
    ddelta = -vw[2] / cgam
    # normal load = gradient of the tire potential 1/2 kz delta^2 with delta = R0 - z_c / cos(camber): a
    # vertical force (kz delta + cz deltadot) / cos(camber) at the contact point is exactly conservative
    fz = vertical_force(tp, delta, ddelta) / cgam
    re = rolling_radius(tp, delta)
    dn = ((aw[2] * aw[0]) / cgam, (aw[2] * aw[1]) / cgam, (aw[2] * aw[2] - 1.0) / cgam)
    pw = (cw[0] + r_load * dn[0], cw[1] + r_load * dn[1], cw[2] + r_load * dn[2])
    vx = vw[0] * xt[0] + vw[1] * xt[1]
    vy = vw[0] * yt[0] + vw[1] * yt[1]
    wr = om * re
    den = max(abs(wr), abs(vx))
    slip = (wr - vx) / den if den > 1e-9 else 0.0
    vlow = tp[T_VLOW]
    kappa = (wr - vx) / max(den, vlow)
    avx = abs(vx)
    alpha_f = math.atan2(vy, max(avx, vlow))
    if avx >= vlow:
        alpha_o = alpha_f
    else:
        alpha_o = math.atan2(vy, avx) if avx + abs(vy) > 1e-9 else 0.0
    mu = road_mu(rb, rm, rdef[0], pw[0], pw[1])
    fx, fy = combined_forces(tp, fz, kappa, alpha_f, mu)
    my = -tp[T_QSY1] * fz * tp[T_R0] * math.tanh(wr / gp[G_RRV])
    F = (fx * xt[0] + fy * yt[0], fx * xt[1] + fy * yt[1], fz)
    # to chassis axes: R^T F, contact point R^T (pw - r)
    Fc = (
        R[0][0] * F[0] + R[1][0] * F[1] + R[2][0] * F[2],
        R[0][1] * F[0] + R[1][1] * F[1] + R[2][1] * F[2],
        R[0][2] * F[0] + R[1][2] * F[1] + R[2][2] * F[2],
    )
    d = (pw[0] - y[Y_R], pw[1] - y[Y_R + 1], pw[2] - y[Y_R + 2])
    pc = (
        R[0][0] * d[0] + R[1][0] * d[1] + R[2][0] * d[2],
        R[0][1] * d[0] + R[1][1] * d[1] + R[2][1] * d[2],
        R[0][2] * d[0] + R[1][2] * d[1] + R[2][2] * d[2],
    )
    fext[0] += pc[1] * Fc[2] - pc[2] * Fc[1] + my * ax[0]
    fext[1] += pc[2] * Fc[0] - pc[0] * Fc[2] + my * ax[1]
    fext[2] += pc[0] * Fc[1] - pc[1] * Fc[0] + my * ax[2]
    fext[3] += Fc[0]
    fext[4] += Fc[1]
    fext[5] += Fc[2]
    wt[i, W_FX], wt[i, W_FY], wt[i, W_FZ] = fx, fy, fz
    wt[i, W_SLIP], wt[i, W_ALPHA], wt[i, W_RE], wt[i, W_MU] = slip, alpha_o, re, mu
    wt[i, W_VX], wt[i, W_VY], wt[i, W_DELTA] = vx, vy, delta
    wt[i, W_MUMAX] = peak_mu(tp, fz, mu) if fz > 0.0 else 0.0
    if gp[G_IMPL] > 0.5:
        # local slope of the tire force against the wheel's spin: lambda = R_e^2 dFx/dkappa / (max(den, v_low) I)
        h = 1e-4
        fxp = combined_forces(tp, fz, kappa + h, alpha_f, mu)[0]
        fxm = combined_forces(tp, fz, kappa - h, alpha_f, mu)[0]
        dk = (fxp - fxm) / (2.0 * h)
        wt[i, W_LAM] = re * re * max(dk, 0.0) / (max(den, vlow) * gp[G_ISPIN + (0 if i < 2 else 1)])
    wt[i, W_PX], wt[i, W_PY], wt[i, W_MY] = pw[0], pw[1], my


# ----------------------------------------------------------------------------------------------------------
# Articulated-body forward dynamics with aggregated bodies (Eqs. 4, 6, 7 with Eqs. 9-11)
# ----------------------------------------------------------------------------------------------------------
@njit(cache=True, nogil=True, error_model="numpy", fastmath=FASTMATH)
def _solve6(A, b, out):
    """Cholesky solve of the 6x6 SPD system A x = b (A is overwritten)."""
    n = 6
    for j in range(n):
        s = A[j, j]
        for k in range(j):
            s -= A[j, k] * A[j, k]
        A[j, j] = math.sqrt(s)
        for i in range(j + 1, n):
            s = A[i, j]
            for k in range(j):
                s -= A[i, k] * A[j, k]
            A[i, j] = s / A[j, j]
    for i in range(n):
        s = b[i]
        for k in range(i):
            s -= A[i, k] * out[k]
        out[i] = s / A[i, i]
    for i in range(n - 1, -1, -1):
        s = out[i]
        for k in range(i + 1, n):
            s -= A[k, i] * out[k]
        out[i] = s / A[i, i]


@njit(cache=True, nogil=True, error_model="numpy", fastmath=FASTMATH)
def aba(work, nudot):
    """Tip-to-base AB Riccati/gather sweep (Eqs. 4, 6) and base-to-tip sweep (Eq. 7); fills nudot (14)."""
    sth, Mb, ab, bb, hw, T = work[2], work[6], work[8], work[9], work[10], work[11]
    Pc, zc, U, DS, nuS, Gw, nuw, Pw, zw = work[13:22]
    alK, Mhs, zws, acc_c = work[23], work[27], work[28], work[29]
    for r in range(6):
        zc[r] = bb[0, r]  # z(chassis) starts with b(chassis); a(chassis) = 0
        for c in range(6):
            Pc[r, c] = Mb[0, r, c]  # P(chassis) starts with M(chassis)
    for i in range(4):
        kw = 4 + 4 * i  # wheel body
        kk = kw - 1  # knuckle body
        # ---- wheel w (child of the knuckle): Eq. 4 and Eq. 6 ----
        Mh = Mhs[i]
        Dw = 0.0
        for r in range(6):
            s = 0.0
            for c in range(6):
                s += Mb[kw, r, c] * hw[i, c]
            Mh[r] = s
            Dw += hw[i, r] * s  # D(w) = H P H*
        zwl = zws[i]
        eps_w = T[10 + i]
        for r in range(6):
            s = bb[kw, r]
            for c in range(6):
                s += Mb[kw, r, c] * ab[kw, c]
            zwl[r] = s  # z(w) = b(w) + P(w) a(w)
            eps_w -= hw[i, r] * s  # epsilon(w) = T(w) - H z(w)
        nuw[i] = eps_w / Dw  # nu(w) = D^-1 epsilon
        for r in range(6):
            Gw[i, r] = Mh[r] / Dw  # G(w) = P H* D^-1
        # ---- aggregated body S: P(S) = blockdiag(M_LCA, M_UCA, M_knuckle + P+(w)) ----
        DSi = 0.0
        eps = T[6 + i]
        for r in range(6):
            U[i, r] = 0.0
        for j in range(3):
            k = 1 + 4 * i + j
            for r in range(6):
                for c in range(6):
                    v = Mb[k, r, c]
                    if j == 2:
                        v -= Mh[r] * Mh[c] / Dw  # P+(w) = tau-bar(w) P(w) = P - G H P
                        v += Mb[kw, r, c]
                    Pw[r, c] = v
            for r in range(6):
                s = 0.0
                s2 = bb[k, r]
                for c in range(6):
                    s += Pw[r, c] * sth[i, j, c]
                    s2 += Pw[r, c] * ab[k, c]
                if j == 2:
                    s2 += zwl[r] + Gw[i, r] * eps_w  # phi(S,w) z+(w), z+ = z + G epsilon
                zw[r] = s2  # block j of z(S) = ... + b + P a
                U[i, r] += s  # phi(c,S) P(S) H*(S)
                DSi += sth[i, j, r] * s  # D(S) = H(S) P(S) H*(S)
                eps -= sth[i, j, r] * s2  # epsilon(S) = T(S) - H(S) z(S)
                zc[r] += s2
                for c in range(6):
                    Pc[r, c] += Pw[r, c]
        DS[i] = DSi
        nuS[i] = eps / DSi
        # parent: P+(S) = P - G H P summed over blocks; z+(S) = z + G epsilon
        for r in range(6):
            zc[r] += U[i, r] * eps / DSi
            for c in range(6):
                Pc[r, c] -= U[i, r] * U[i, c] / DSi
    # ---- chassis (root, H = identity, T = 0): thetaddot = D^-1 epsilon = -P^-1 z ----
    for r in range(6):
        zc[r] = -zc[r]
    _solve6(Pc, zc, acc_c)
    for r in range(6):
        nudot[r] = acc_c[r]
    # ---- base-to-tip (Eq. 7): thetaddot(S) = nu(S) - G*(S) alpha+(S); alpha(k) = alpha+ + H* thetaddot + a
    # ----
    for i in range(4):
        s = 0.0
        for r in range(6):
            s += U[i, r] * acc_c[r]
        thdd = nuS[i] - s / DS[i]
        nudot[6 + i] = thdd
        kk = 3 + 4 * i
        s = 0.0
        for r in range(6):
            alK[r] = acc_c[r] + sth[i, 2, r] * thdd + ab[kk, r]
            s += Gw[i, r] * alK[r]
        nudot[10 + i] = nuw[i] - s


@njit(cache=True, nogil=True, error_model="numpy", fastmath=FASTMATH)
def dense_accelerations(work):
    """Reference solution: M = sum_k J_k^T M(k) J_k, C = sum_k J_k^T (M(k) a_bias(k) + b(k)) (Eqs. 1-2),
    thetaddot = M^-1 (T - C). Uses the per-body data of :func:`body_terms`."""
    sth, Mb, ab, bb, hw, T = work[2], work[6], work[8], work[9], work[10], work[11]
    Mm = np.zeros((NDOF, NDOF))
    C = np.zeros(NDOF)
    for k in range(NB):
        J = np.zeros((6, NDOF))
        abias = np.zeros(6)
        for r in range(6):
            J[r, r] = 1.0
        if k > 0:
            i = (k - 1) // 4
            j = (k - 1) % 4
            jj = j if j < 3 else 2
            for r in range(6):
                J[r, 6 + i] = sth[i, jj, r]
                abias[r] = ab[1 + 4 * i + jj, r]
            if j == 3:
                for r in range(6):
                    J[r, 10 + i] = hw[i, r]
                    abias[r] += ab[k, r]
        MJ = Mb[k] @ J
        Mm += J.T @ MJ
        C += J.T @ (Mb[k] @ abias + bb[k])
    return np.linalg.solve(Mm, T - C), Mm


# ----------------------------------------------------------------------------------------------------------
# State derivative and integrators
# ----------------------------------------------------------------------------------------------------------
@njit(cache=True, nogil=True, error_model="numpy", fastmath=FASTMATH)
def derivative(y, u, cg, cp, ci, sg, gp, tp, bs, rb, rm, rdef, work, ydot):
    """dy/dt: kinematic rates and the AB accelerations."""
    sigd = body_terms(y, u, cg, cp, ci, sg, gp, tp, bs, rb, rm, rdef, work)
    aba(work, ydot[Y_W:])
    e0, e1, e2, e3 = y[Y_Q], y[Y_Q + 1], y[Y_Q + 2], y[Y_Q + 3]
    R = quat_to_rot(e0, e1, e2, e3)
    for r in range(3):
        ydot[Y_R + r] = R[r][0] * y[Y_V] + R[r][1] * y[Y_V + 1] + R[r][2] * y[Y_V + 2]
    wx, wy, wz = y[Y_W], y[Y_W + 1], y[Y_W + 2]
    ydot[Y_Q] = 0.5 * (-e1 * wx - e2 * wy - e3 * wz)
    ydot[Y_Q + 1] = 0.5 * (e0 * wx + e2 * wz - e3 * wy)
    ydot[Y_Q + 2] = 0.5 * (e0 * wy + e3 * wx - e1 * wz)
    ydot[Y_Q + 3] = 0.5 * (e0 * wz + e1 * wy - e2 * wx)
    for i in range(4):
        ydot[Y_TH + i] = y[Y_THD + i]
    ydot[Y_SIG] = sigd


@njit(cache=True, nogil=True, error_model="numpy", fastmath=FASTMATH)
def _quat_step(y, dt):
    """e <- e (x) exp(0.5 omega dt) with the body rate omega of y (exact for constant omega)."""
    wx, wy, wz = y[Y_W], y[Y_W + 1], y[Y_W + 2]
    wn = math.sqrt(wx * wx + wy * wy + wz * wz)
    h = 0.5 * wn * dt
    if wn > 1e-14:
        s = math.sin(h) / wn
    else:
        s = 0.5 * dt
    q0, q1, q2, q3 = math.cos(h), s * wx, s * wy, s * wz
    e0, e1, e2, e3 = y[Y_Q], y[Y_Q + 1], y[Y_Q + 2], y[Y_Q + 3]
    n0 = e0 * q0 - e1 * q1 - e2 * q2 - e3 * q3
    n1 = e0 * q1 + e1 * q0 + e2 * q3 - e3 * q2
    n2 = e0 * q2 - e1 * q3 + e2 * q0 + e3 * q1
    n3 = e0 * q3 + e1 * q2 - e2 * q1 + e3 * q0
    nn = math.sqrt(n0 * n0 + n1 * n1 + n2 * n2 + n3 * n3)
    y[Y_Q], y[Y_Q + 1], y[Y_Q + 2], y[Y_Q + 3] = n0 / nn, n1 / nn, n2 / nn, n3 / nn


@njit(cache=True, nogil=True, error_model="numpy", fastmath=FASTMATH)
def _implicit_spin(ydot, work, dt):
    """Linearly implicit (backward Euler) wheel spin against its own tire force, in place on ``ydot``.

    The stiff spin mode of a light wheel on a stiff tire at low speed is unstable with the explicit update at
    1 ms. The tire force depends on the slip (R_e w - v_x) / den, so d(w_dot)/dw = -lambda and
    d(w_dot)/dv_x = lambda / R_e: backward Euler in both gives w_dot = (f + lambda / R_e dt v_x_dot) /
    (1 + dt lambda), with v_x_dot the forward acceleration of the wheel centre along the wheel heading (from
    this step's chassis accelerations, chassis axes). Without the v_x_dot term the wheel lags the car by one
    step, which the stiff tire turns into a spurious force C_kappa dt a_x / |v_x| (about 100 N per rear
    wheel of the sedan at 2 m/s^2 and 2 m/s, the size of a 5 kg m^2 extra spin inertia).
    """
    pos, misc, wt = work[1], work[5], work[12]
    for i in range(4):
        lam = wt[i, W_LAM]
        if lam <= 0.0:
            continue
        c = pos[i, B_WH]
        a0, a1 = misc[i, MI_AX], misc[i, MI_AX + 1]
        hn = math.hypot(a0, a1)
        hx, hy = (a1 / hn, -a0 / hn) if hn > 1e-12 else (1.0, 0.0)   # heading = unit(axis x e_z)
        acx = ydot[Y_V] + ydot[Y_W + 1] * c[2] - ydot[Y_W + 2] * c[1]
        acy = ydot[Y_V + 1] + ydot[Y_W + 2] * c[0] - ydot[Y_W] * c[2]
        vx_dot = acx * hx + acy * hy
        ydot[Y_OM + i] = (ydot[Y_OM + i] + lam / wt[i, W_RE] * dt * vx_dot) / (1.0 + dt * lam)


@njit(cache=True, nogil=True, error_model="numpy", fastmath=FASTMATH)
def integrate(y, u, n_steps, dt, method, cg, cp, ci, sg, gp, tp, bs, rb, rm, rdef, work):
    """Advance y in place by n_steps of dt with inputs u held. method 0 = semi-implicit (symplectic) Euler:
    velocities from the accelerations at (q_n, v_n), then positions with v_{n+1}; method 1 = classical RK4
    (quaternion renormalised after each step). Returns -1, or the index of the first step whose state is
    non-finite (y then holds that state)."""
    ydot = np.empty(NY)
    k1 = np.empty(NY)
    k2 = np.empty(NY)
    k3 = np.empty(NY)
    k4 = np.empty(NY)
    yt = np.empty(NY)
    for n in range(n_steps):
        if method == 0:
            # derivative() without its kinematic rates (positions are advanced below with v_{n+1})
            ydot[Y_SIG] = body_terms(y, u, cg, cp, ci, sg, gp, tp, bs, rb, rm, rdef, work)
            aba(work, ydot[Y_W:])
            if gp[G_IMPL] > 0.5:
                _implicit_spin(ydot, work, dt)
            for k in range(Y_W, NY):
                y[k] += dt * ydot[k]
            R = quat_to_rot(y[Y_Q], y[Y_Q + 1], y[Y_Q + 2], y[Y_Q + 3])
            for r in range(3):
                y[Y_R + r] += dt * (R[r][0] * y[Y_V] + R[r][1] * y[Y_V + 1] + R[r][2] * y[Y_V + 2])
            _quat_step(y, dt)
            for i in range(4):
                y[Y_TH + i] += dt * y[Y_THD + i]
            y[Y_SIG] += dt * ydot[Y_SIG]
        else:
            derivative(y, u, cg, cp, ci, sg, gp, tp, bs, rb, rm, rdef, work, k1)
            for k in range(NY):
                yt[k] = y[k] + 0.5 * dt * k1[k]
            derivative(yt, u, cg, cp, ci, sg, gp, tp, bs, rb, rm, rdef, work, k2)
            for k in range(NY):
                yt[k] = y[k] + 0.5 * dt * k2[k]
            derivative(yt, u, cg, cp, ci, sg, gp, tp, bs, rb, rm, rdef, work, k3)
            for k in range(NY):
                yt[k] = y[k] + dt * k3[k]
            derivative(yt, u, cg, cp, ci, sg, gp, tp, bs, rb, rm, rdef, work, k4)
            for k in range(NY):
                y[k] += dt / 6.0 * (k1[k] + 2.0 * k2[k] + 2.0 * k3[k] + k4[k])
            nq = math.sqrt(y[Y_Q] ** 2 + y[Y_Q + 1] ** 2 + y[Y_Q + 2] ** 2 + y[Y_Q + 3] ** 2)
            for k in range(4):
                y[Y_Q + k] /= nq
        if gp[G_PT] > 0.5:
            shift_gear(y, gp, work[31])
        ok = True
        for k in range(NY):
            if not math.isfinite(y[k]):
                ok = False
        for i in range(4):
            if work[5][i, MI_RESID] > 1e-6:  # a loop could not be assembled (acos argument clipped)
                ok = False
        if not ok:
            return n
    return -1


@njit(cache=True, nogil=True, error_model="numpy", fastmath=FASTMATH)
def total_energy(y, u, cg, cp, ci, sg, gp, tp, bs, rb, rm, rdef, work):
    """Kinetic energy 1/2 sum V M V + gravity + spring (incl. stops) + tire potential energy (J)."""
    body_terms(y, u, cg, cp, ci, sg, gp, tp, bs, rb, rm, rdef, work)
    pos, misc, Mb, Vb, wt = work[1], work[5], work[6], work[7], work[12]
    ke = 0.0
    for k in range(NB):
        for r in range(6):
            for c in range(6):
                ke += 0.5 * Vb[k, r] * Mb[k, r, c] * Vb[k, c]
    R = quat_to_rot(y[Y_Q], y[Y_Q + 1], y[Y_Q + 2], y[Y_Q + 3])
    g = gp[G_GRAV]
    sa = gp[G_GRADE]
    ca = gp[G_GRADE + 1] if sa != 0.0 else 1.0
    com = (gp[G_COM], gp[G_COM + 1], gp[G_COM + 2])
    # height above a level datum: sin a x_road + cos a z_road (road frame; sin a = 0 on a flat road)
    hx = y[Y_R] + R[0][0] * com[0] + R[0][1] * com[1] + R[0][2] * com[2]
    hz = y[Y_R + 2] + R[2][0] * com[0] + R[2][1] * com[1] + R[2][2] * com[2]
    pe = gp[G_MC] * g * (sa * hx + ca * hz) if sa != 0.0 else gp[G_MC] * g * hz
    for i in range(4):
        masses = (cg[i, M_LCA], cg[i, M_UCA], cg[i, M_KN], cg[i, M_WH])
        for j in range(4):
            p = pos[i, j]
            hz = y[Y_R + 2] + R[2][0] * p[0] + R[2][1] * p[1] + R[2][2] * p[2]
            if sa != 0.0:
                hx = y[Y_R] + R[0][0] * p[0] + R[0][1] * p[1] + R[0][2] * p[2]
                pe += masses[j] * g * (sa * hx + ca * hz)
            else:
                pe += masses[j] * g * hz
        pe += spring_energy(cg[i], bs, misc[i, MI_LSP])
        d = wt[i, W_DELTA]
        if d > 0.0:
            pe += 0.5 * tp[T_KZ] * d * d
    return ke + pe


__all__ = [
    "NY",
    "NDOF",
    "Y_R",
    "Y_Q",
    "Y_TH",
    "Y_SIG",
    "Y_W",
    "Y_V",
    "Y_THD",
    "Y_OM",
    "make_work",
    "body_terms",
    "aba",
    "dense_accelerations",
    "derivative",
    "integrate",
    "total_energy",
    "spring_force",
    "damper_force",
    "B_WH",
    "MI_LSH",
]
