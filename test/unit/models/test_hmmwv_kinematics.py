"""Loop kinematics of the 14-DOF HMMWV (constraint-embedding paper Section 5): closure at machine precision
over the whole travel and analytical X_S / body axes / Eq. 14 accelerations against finite differences."""

from __future__ import annotations

import numpy as np
import pytest
from corner_kinematics import check_axes_and_velocity_products

from vehcal_ros.models.vehicle14 import HmmwvParams
from vehcal_ros.models.vehicle14 import kinematics as K

TRAVEL = np.linspace(-0.45, 0.25, 36)  # LCA rotation from the design pose (rad): past the rebound stop .. bump
STEER = np.linspace(-0.75, 0.75, 7)  # Pitman-arm angles (rad); full lock (steering = +-1) is +-0.74


def steer_range(q: float) -> np.ndarray:
    """Pitman angles over which the front spindle loop assembles: full lock except at extreme droop, where the
    inner wheel's tierod/steering-arm pair reaches its toggle (documented limit)."""
    return STEER if q >= -0.35 else np.linspace(-0.55, 0.55, 5)


@pytest.fixture(scope="module")
def geo() -> K.Geometry:
    return K.pack_geometry(HmmwvParams.from_yaml())


def test_design_pose_reproduces_hardpoints(geo):
    p = HmmwvParams.from_yaml()
    for i in range(4):
        mir = np.array([1.0, 1.0 if i % 2 == 0 else -1.0, 1.0])
        axle = p.front if i < 2 else p.rear
        st = K.corner_state(geo, i, 0.0)
        np.testing.assert_allclose(st["wheel_centre"], axle.hardpoints["SPINDLE"] * mir, atol=1e-14)
        assert abs(st["alpha"]) < 1e-14
        assert (
            abs(st["spring_length"] - np.linalg.norm(axle.hardpoints["SPRING_C"] - axle.hardpoints["SPRING_A"])) < 1e-14
        )


def test_four_bar_and_spindle_loops_close_over_travel(geo):
    worst = 0.0
    for i in range(4):
        for q in TRAVEL:
            for sig in steer_range(q) if i < 2 else [0.0]:
                pts = K.loop_points(geo, i, q, sig)
                assert K.corner_state(geo, i, q, 0.0, sig)["residual"] == 0.0
                # spatial ADFG loop: F and D carried by the knuckle == F on the upper arm, D on the lower arm
                worst = max(worst, np.linalg.norm(pts["F_up"] - pts["F_uca"]))
                worst = max(worst, np.linalg.norm(pts["D_kn"] - pts["D"]))
                worst = max(worst, abs(np.linalg.norm(pts["F_uca"] - pts["D"]) - geo.cg[i, K.CL]))
                # EKL spindle loop (Sec. 5.3): tierod length preserved
                worst = max(worst, abs(np.linalg.norm(pts["K"] - pts["L"]) - geo.cg[i, K.ELL]))
                # link lengths
                worst = max(worst, abs(np.linalg.norm((pts["D"] - pts["A"])[1:]) - geo.cg[i, K.BL]))
    assert worst < 5e-15


def test_shock_and_spring_loops_close_over_travel(geo):
    worst = 0.0
    for i in range(4):
        for q in TRAVEL:
            pts = K.loop_points(geo, i, q)
            worst = max(worst, abs(np.linalg.norm(pts["J_shock"] - pts["B_shock"]) - pts["shock_length"]))
            worst = max(worst, abs(np.linalg.norm(pts["J_spring"] - pts["B_spring"]) - pts["spring_length"]))
    assert worst < 5e-15


def test_pitman_steering_linkage_closes(geo):
    sg = geo.sg
    T = complex(sg[K.SG_UX], sg[K.SG_UY]) - sg[K.SG_B] * np.exp(1j * sg[K.SG_PHI0])
    W = T - complex(sg[K.SG_GX], sg[K.SG_GY])
    U0 = complex(sg[K.SG_UX], sg[K.SG_UY])
    d_left = abs(complex(sg[K.SG_LL], sg[K.SG_LL + 1]) - U0)
    for sig in STEER:
        th3, th4 = K.fourbar(
            sg[K.SG_PHI0] + sig, sg[K.SG_GX], sg[K.SG_GY], sg[K.SG_B], sg[K.SG_C], sg[K.SG_D], sg[K.SG_BR]
        )[:2]
        U = T + sg[K.SG_B] * np.exp(1j * (sg[K.SG_PHI0] + sig))
        V = W + sg[K.SG_D] * np.exp(1j * th4)
        assert abs(abs(U - V) - sg[K.SG_C]) < 1e-15  # coupler length
        assert abs(np.angle((U - V) / np.exp(1j * th3))) < 1e-14  # Eq. 21 angle
        # the tierod end rides rigidly on the link: its distance to U is preserved (steering frame plane)
        L = np.array(K.pitman(sg, sig, 1.0)[0])
        c, s = np.cos(sg[K.SG_PITCH]), np.sin(sg[K.SG_PITCH])
        Ls = np.array([[c, 0, -s], [0, 1, 0], [s, 0, c]]) @ (L - sg[K.SG_LOC : K.SG_LOC + 3])
        assert abs(abs(complex(Ls[0], Ls[1]) - U) - d_left) < 1e-15


def test_steering_sign_and_ackermann(geo):
    left = [K.corner_state(geo, i, -0.21, 0.0, -0.5)["steer"] for i in (0, 1)]
    assert left[0] > left[1] > 0.3  # negative Pitman angle steers left; inner (left) wheel turns more


@pytest.mark.parametrize("i", [0, 1, 2, 3])
def test_x_s_equals_finite_difference(geo, i):
    h = 1e-6
    for q, sig in [(-0.21, 0.0), (0.1, 0.3), (-0.38, -0.6)]:
        X = K.x_s_matrix(geo, i, q, sig)
        fd_q = (K.internal_coordinates(geo, i, q + h, sig) - K.internal_coordinates(geo, i, q - h, sig)) / (2 * h)
        fd_s = (K.internal_coordinates(geo, i, q, sig + h) - K.internal_coordinates(geo, i, q, sig - h)) / (2 * h)
        np.testing.assert_allclose(X[:, 0], fd_q, atol=5e-9)
        np.testing.assert_allclose(X[:, 1], fd_s, atol=5e-9)
        # Eq. 32's alphadot equals the hot path's distance-constraint alphadot
        st = K.corner_state(geo, i, q, 1.0, sig, 0.0)
        assert abs(X[4, 0] - st["misc"][K.MI_ALPHA_TH]) < 1e-13
        assert abs(X[4, 1] - st["misc"][K.MI_ALPHA_SG]) < 1e-13


@pytest.mark.parametrize("i", [0, 1, 2, 3])
def test_body_axes_and_velocity_product_terms_equal_finite_difference(geo, i):
    """Columns of H*(S) = H_S^* X_S (spatial axes about O) from differentiated body poses; the Eq. 11/14
    velocity-product term from differentiated relative spatial velocities along the motion."""
    for q, sig in [(-0.21, 0.0), (0.1, 0.3), (-0.38, -0.6)]:
        check_axes_and_velocity_products(geo, i, q, sig, thd=0.7, sgd=-0.4)


def test_fourbar_second_derivatives(geo):
    """Eqs. 20-26 and their derivatives p', q' (used by the Pitman steering four-bar, Sec. 5.4)."""
    sg = geo.sg
    args = (sg[K.SG_GX], sg[K.SG_GY], sg[K.SG_B], sg[K.SG_C], sg[K.SG_D], sg[K.SG_BR])
    h = 1e-5
    for th in sg[K.SG_PHI0] + STEER:
        p, q, p2, q2 = K.fourbar(th, *args)[2:6]
        pp, qp = K.fourbar(th + h, *args)[2:4]
        pm, qm = K.fourbar(th - h, *args)[2:4]
        assert abs((pp - pm) / (2 * h) - p2) < 1e-6 * max(1.0, abs(p2))
        assert abs((qp - qm) / (2 * h) - q2) < 1e-6 * max(1.0, abs(q2))


def _trilaterate(p1, p2, p3, r1, r2, r3, ref):
    """Point at distances r1, r2, r3 from p1, p2, p3 (the solution nearer ref)."""
    ex = (p2 - p1) / np.linalg.norm(p2 - p1)
    i = ex @ (p3 - p1)
    ey = p3 - p1 - i * ex
    ey /= np.linalg.norm(ey)
    ez = np.cross(ex, ey)
    d, j = np.linalg.norm(p2 - p1), ey @ (p3 - p1)
    x = (r1**2 - r2**2 + d**2) / (2 * d)
    y = (r1**2 - r3**2 + i**2 + j**2) / (2 * j) - i / j * x
    z = np.sqrt(r1**2 - x**2 - y**2)
    c = [p1 + x * ex + y * ey + sz * z * ez for sz in (1.0, -1.0)]
    return min(c, key=lambda v: np.linalg.norm(v - ref))


def test_toe_and_camber_match_an_independent_3d_solution_of_the_joints(geo):
    """Chrono's joints solved independently (LCA hinge, UCA hinge along the inclined UCA_F-UCA_B axis,
    spherical D, F, K, tierod distance KL) by sphere intersection: the knuckle pose from D, F, K."""
    p = HmmwvParams.from_yaml()
    for i in range(4):
        s = 1.0 if i % 2 == 0 else -1.0
        mir = np.array([1.0, s, 1.0])
        h = {k: v * mir for k, v in (p.front if i < 2 else p.rear).hardpoints.items()}
        D0, F0, K0, L0 = h["LCA_U"], h["UCA_U"], h["TIEROD_U"], h["TIEROD_C"]
        uf, ub = h["UCA_F"], h["UCA_B"]
        for q in (-0.3, -0.21, -0.1, 0.05):
            A = geo.cp[i, K.P_A]
            c, sn = np.cos(s * q), np.sin(s * q)
            D = A + np.array([[1, 0, 0], [0, c, -sn], [0, sn, c]]) @ (D0 - A)
            # F: on the circle of F0 about the UCA axis at distance |DF| from D (circle-sphere intersection)
            F = _trilaterate(uf, ub, D, np.linalg.norm(F0 - uf), np.linalg.norm(F0 - ub), np.linalg.norm(F0 - D0), F0)
            Kp = _trilaterate(D, F, L0, *(np.linalg.norm(K0 - x) for x in (D0, F0, L0)), K0 + D - D0)

            def frame(a, b, c_):
                e1 = (b - a) / np.linalg.norm(b - a)
                e2 = c_ - a - ((c_ - a) @ e1) * e1
                e2 /= np.linalg.norm(e2)
                return np.column_stack([e1, e2, np.cross(e1, e2)])

            R = frame(D, F, Kp) @ frame(D0, F0, K0).T
            st = K.corner_state(geo, i, q)
            np.testing.assert_allclose(st["rot"][K.B_KN], R, atol=1e-12)
            np.testing.assert_allclose(st["wheel_centre"], D + R @ (h["SPINDLE"] - D0), atol=1e-12)
    # static front toe-in ~1.05-1.15 deg (the inclined UCA axis), rear toe-out ~0.4 deg
    assert 0.9 < np.degrees(K.corner_state(geo, 0, -0.22)["toe"]) < 1.3
    assert -0.6 < np.degrees(K.corner_state(geo, 2, -0.22)["toe"]) < -0.2
