"""A check both 14-DOF vehicles' kinematics tests share: one corner's body axes and velocity-product terms
against finite differences of its forward kinematics (:func:`vehcal_ros.models.vehicle14.kinematics.corner_state`)."""

from __future__ import annotations

import numpy as np

from vehcal_ros.models.vehicle14 import kinematics as K


def check_axes_and_velocity_products(geo, i: int, q: float, sig: float, thd: float, sgd: float,
                                     h: float = 1e-6) -> dict:
    """Columns of H*(S) = H_S^* X_S (spatial axes about O) from differentiated body poses, and the Eq. 11/14
    velocity-product term from differentiated relative spatial velocities along the motion (q' = thd,
    sigma' = sgd). Returns the corner state at (q, sig) for further checks."""
    s0 = K.corner_state(geo, i, q, thd, sig, sgd)
    sp = K.corner_state(geo, i, q + h * thd, 0.0, sig + h * sgd, 0.0)
    sm = K.corner_state(geo, i, q - h * thd, 0.0, sig - h * sgd, 0.0)
    vcom = (sp["pos"] - sm["pos"]) / (2 * h)
    dR = (sp["rot"] - sm["rot"]) / (2 * h)
    V0 = s0["sth"] * thd + s0["ssg"] * sgd
    for j in range(4):
        W = dR[j] @ s0["rot"][j].T
        w = np.array([W[2, 1], W[0, 2], W[1, 0]])
        np.testing.assert_allclose(np.r_[w, vcom[j] + np.cross(s0["pos"][j], w)], V0[j], atol=5e-9)
    vp = K.corner_state(geo, i, q + h * thd, thd, sig + h * sgd, sgd)
    vm = K.corner_state(geo, i, q - h * thd, thd, sig - h * sgd, sgd)
    Vp = vp["sth"] * thd + vp["ssg"] * sgd
    Vm = vm["sth"] * thd + vm["ssg"] * sgd
    np.testing.assert_allclose((Vp - Vm) / (2 * h), s0["acc"], atol=2e-8)
    return s0
