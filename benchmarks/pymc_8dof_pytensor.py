"""The paper's lateral stage written the way a PyMC user would: the 8-DOF equations in pytensor.

For ``bench_vs_pymc.py --pymc-model pytensor`` (the optional benchmark environment, ``make bench-peers``). The
model is the same 8-DOF vehicle as this project's numba kernel (``vehcal_ros.models.vehicle_8dof._step``, the
paper's Eqs. (4)-(13), Fiala tire of ``models/fiala.py``, the linearly implicit wheel spin, the paper's
DC-motor powertrain and brake) re-written in pytensor tensor algebra, the time loop a ``pytensor.scan`` over the
integration steps (branches as ``pt.switch``), the likelihood ``pm.Normal(..., observed=...)`` per channel and
the priors as PyMC distributions: the model a PyMC user writes from the paper, with no code of this project in
its graph. Only the powertrain this stage uses (the paper's DC motor with per-wheel speed, no measured torque)
is written; :func:`pytensor_lateral_model` refuses any other. Its log likelihood is checked against this
project's (:func:`check_against_numba`: the same numbers to round-off at prior draws).
"""

from __future__ import annotations

import numpy as np

from vehcal_ros.models.fiala import MIN_CONTACT_SPEED
from vehcal_ros.models.powertrain import MAX_BRAKE_TORQUE
from vehcal_ros.models.vehicle_8dof import PARAM_INDEX, PT_OFFSET


def _fiala(pt, u_g, v_g, cd, sd, omega, radius, fz, cx, cy, mu_max, mu_min):
    """Fiala tire (tire frame Fx, Fy), ``models/fiala.fiala_tire`` in pytensor."""
    vxw = u_g * cd + v_g * sd
    denom = pt.maximum(abs(vxw), MIN_CONTACT_SPEED)
    s = (radius * omega - vxw) / denom
    au = abs(u_g)
    num = v_g * cd - au * sd
    den = au * cd + v_g * sd
    sgn_a = pt.sign(num)
    pos = den > 0.0
    ta = pt.switch(pos, abs(num) / pt.switch(pos, den, 1.0), np.inf)
    ss = pt.switch(pos, pt.minimum(pt.sqrt(s * s + ta * ta), 1.0), 1.0)
    mu = mu_max - (mu_max - mu_min) * ss
    mufz = mu * fz
    s_crit = abs(mufz / (2.0 * cx))
    s_safe = pt.switch(pt.eq(s, 0.0), 1.0, s)
    fx = pt.switch(abs(s) < s_crit, cx * s,
                   pt.switch(s >= 0.0, 1.0, -1.0) * (mufz - abs(mufz * mufz / (4.0 * s_safe * cx))))
    h = 1.0 - cy * ta / (3.0 * mufz)
    fy = pt.switch(ta <= 3.0 * mufz / cy, -mufz * (1.0 - h * h * h) * sgn_a, -mufz * sgn_a)
    idle = (fz <= 0.0) | ((au <= MIN_CONTACT_SPEED) & (abs(v_g) <= MIN_CONTACT_SPEED)
                          & (abs(radius * omega) <= MIN_CONTACT_SPEED))
    return pt.switch(idle, 0.0, fx), pt.switch(idle, 0.0, fy)


def _spin_rate(pt, f, w, r, excess, jw, fx, cx, vx, vx_dot, dt):
    """Linearly implicit wheel-spin acceleration, ``vehicle_8dof._spin_rate`` in pytensor."""
    den = abs(vx)
    den_safe = pt.maximum(den, MIN_CONTACT_SPEED)
    s = (r * w - vx) / den_safe
    big = abs(s) > 1e-9
    c = pt.switch(big, pt.clip(fx / pt.switch(big, s, 1.0), 0.0, cx), cx)
    lam = (r - excess) * r * c / (den_safe * jw)
    ds = pt.switch(vx > 0.0, s, -s)
    out = (f + lam * (1.0 + ds) / r * dt * vx_dot) / (1.0 + dt * lam)
    # gross slip, or the patch speed crossing zero within the step: no vx_dot coupling
    uncoupled = (abs(s) > 1.0) | (vx * (vx + dt * vx_dot) <= 0.0)
    out = pt.switch(uncoupled, f / (1.0 + dt * lam), out)
    return pt.switch(den < MIN_CONTACT_SPEED, f, out)


def _normal_loads(pt, k, kphi_f, kphi_r, bphi_f, bphi_r, phi, wx, ax, ay, r_f, r_r):
    """Quasi-static normal loads (lf, lr, rf, rr), ``vehicle_8dof._normal_loads`` in pytensor."""
    m, muf, mur, a, b, h, cf, cr = (float(k[i]) for i in range(8))
    hrcf, hrcr, g = float(k[14]), float(k[15]), float(k[17])
    L = a + b
    stat_f = m * g * b / (2.0 * L) + muf * g
    stat_r = m * g * a / (2.0 * L) + mur * g
    f_c = (m * h + 2.0 * muf * r_f + 2.0 * mur * r_r) * ax / (2.0 * L)
    f_f = (m * b * (h - hrcf) / L + 2.0 * muf * r_f) * ay / cf + (kphi_f * phi + bphi_f * wx) / cf
    f_r = (m * a * (h - hrcr) / L + 2.0 * mur * r_r) * ay / cr + (kphi_r * phi + bphi_r * wx) / cr
    return (pt.maximum(stat_f - f_f - f_c, 0.0), pt.maximum(stat_r - f_r + f_c, 0.0),
            pt.maximum(stat_f + f_f - f_c, 0.0), pt.maximum(stat_r + f_r + f_c, 0.0))


def _step(pt, k, p, dt, throttle, brake, steering, s, fz):
    """One half-implicit Euler step, ``vehicle_8dof._step`` (DC-motor powertrain) in pytensor. ``s``: the 12
    states, ``fz``: the 4 loads, ``p``: dict of the 8-DOF parameters (tensors or floats)."""
    kf = [float(x) for x in k]
    a, b, cf, cr, r0 = kf[3], kf[4], kf[6], kf[7], kf[11]
    jw, g, mu_max, mu_min, mt, hrc, a1 = kf[16], kf[17], kf[18], kf[19], kf[21], kf[22], kf[32]
    m, muf, mur, jw_r, xs = kf[0], kf[1], kf[2], kf[35], kf[37]
    x, y, u, v, psi, phi, wx, wz, w_lf, w_lr, w_rf, w_rr = s
    delta = steering * kf[20]
    cd = pt.cos(delta)
    sd = pt.sin(delta)
    r_lf = r0 - fz[0] / kf[12]
    r_lr = r0 - fz[1] / kf[13]
    r_rf = r0 - fz[2] / kf[12]
    r_rr = r0 - fz[3] / kf[13]
    tire = dict(mu_max=mu_max, mu_min=mu_min)
    fxt_lf, fyt_lf = _fiala(pt, u - wz * cf / 2.0, v + wz * a, cd, sd, w_lf, r_lf, fz[0], p["Cxf"], p["Cyf"], **tire)
    fxt_lr, fyt_lr = _fiala(pt, u - wz * cr / 2.0, v - wz * b, 1.0, 0.0, w_lr, r_lr, fz[1], p["Cxr"], p["Cyr"],
                            **tire)
    fxt_rf, fyt_rf = _fiala(pt, u + wz * cf / 2.0, v + wz * a, cd, sd, w_rf, r_rf, fz[2], p["Cxf"], p["Cyf"], **tire)
    fxt_rr, fyt_rr = _fiala(pt, u + wz * cr / 2.0, v - wz * b, 1.0, 0.0, w_rr, r_rr, fz[3], p["Cxr"], p["Cyr"],
                            **tire)
    fxg_lf = fxt_lf * cd - fyt_lf * sd
    fxg_rf = fxt_rf * cd - fyt_rf * sd
    fyg_lf = fxt_lf * sd + fyt_lf * cd
    fyg_rf = fxt_rf * sd + fyt_rf * cd
    sum_fx = fxg_lf + fxg_rf + fxt_lr + fxt_rr
    sum_fy = fyg_lf + fyg_rf + fyt_lr + fyt_rr
    u_dot = wz * v + (sum_fx + (muf * a - mur * b) * wz * wz - 2.0 * hrc * m * wz * wx) / mt
    e1 = -mt * wz * u + sum_fy
    e2 = ((fyg_lf + fyg_rf) * a - (fyt_lr + fyt_rr) * b + (fxg_rf - fxg_lf) * cf / 2.0
          + (fxt_rr - fxt_lr) * cr / 2.0 + a1 * wz * u)
    e3 = m * g * hrc * phi - (p["kphi_f"] + p["kphi_r"]) * phi - (p["bphi_f"] + p["bphi_r"]) * wx + hrc * m * wz * u
    v_dot = kf[23] * e1 + kf[24] * e3 + kf[25] * e2
    wx_dot = kf[26] * e1 + kf[27] * e3 + kf[28] * e2
    wz_dot = kf[29] * e1 + kf[30] * e3 + kf[31] * e2
    # the paper's DC motor, each wheel its own speed; brake opposing the spin
    o = PT_OFFSET
    share_f, share_r = 0.5 * kf[o + 5], 0.5 * (1.0 - kf[o + 5])

    def motor(w, share):
        return (kf[o + 1] - kf[o + 1] * (w / kf[o + 3]) / kf[o + 2]) * throttle / kf[o + 3] * kf[o + 4] * share

    def brake_t(gain, w):
        return -pt.sign(w) * (brake * gain / MAX_BRAKE_TORQUE) * MAX_BRAKE_TORQUE

    rr = p["rr"]
    dw = []
    for w, r_l, fxt, fzi, share, gain, j in ((w_lf, r_lf, fxt_lf, fz[0], share_f, p["brake_gain_lf"], jw),
                                             (w_lr, r_lr, fxt_lr, fz[1], share_r, p["brake_gain_lr"], jw_r),
                                             (w_rf, r_rf, fxt_rf, fz[2], share_f, p["brake_gain_rf"], jw),
                                             (w_rr, r_rr, fxt_rr, fz[3], share_r, p["brake_gain_rr"], jw_r)):
        dw.append((motor(w, share) + brake_t(gain, w) - rr * fzi * pt.sign(w) - fxt * (r_l - xs)) / j)
    vxa_f = (v + wz * a) * sd
    vxd_f = (v_dot + wz_dot * a) * sd
    dw_lf = _spin_rate(pt, dw[0], w_lf, r_lf, xs, jw, fxt_lf, p["Cxf"], (u - wz * cf / 2.0) * cd + vxa_f,
                       (u_dot - wz_dot * cf / 2.0) * cd + vxd_f, dt)
    dw_rf = _spin_rate(pt, dw[2], w_rf, r_rf, xs, jw, fxt_rf, p["Cxf"], (u + wz * cf / 2.0) * cd + vxa_f,
                       (u_dot + wz_dot * cf / 2.0) * cd + vxd_f, dt)
    dw_lr = _spin_rate(pt, dw[1], w_lr, r_lr, xs, jw_r, fxt_lr, p["Cxr"], u - wz * cr / 2.0,
                       u_dot - wz_dot * cr / 2.0, dt)
    dw_rr = _spin_rate(pt, dw[3], w_rr, r_rr, xs, jw_r, fxt_rr, p["Cxr"], u + wz * cr / 2.0,
                       u_dot + wz_dot * cr / 2.0, dt)
    u_n = u + dt * u_dot
    v_n = v + dt * v_dot
    wx_n = wx + dt * wx_dot
    wz_n = wz + dt * wz_dot
    x_n = x + dt * (u_n * pt.cos(psi) - v_n * pt.sin(psi))
    y_n = y + dt * (u_n * pt.sin(psi) + v_n * pt.cos(psi))
    phi_n = phi + dt * wx_n
    s_n = (x_n, y_n, u_n, v_n, psi + dt * wz_n, phi_n, wx_n, wz_n,
           w_lf + dt * dw_lf, w_lr + dt * dw_lr, w_rf + dt * dw_rf, w_rr + dt * dw_rr)
    fz_n = _normal_loads(pt, k, p["kphi_f"], p["kphi_r"], p["bphi_f"], p["bphi_r"], phi_n, wx_n, u_dot - wz_n * v_n,
                         v_dot + wz_n * u_n, 0.5 * (r_lf + r_rf) - xs, 0.5 * (r_lr + r_rr) - xs)
    return s_n, fz_n


def simulate_pytensor(problem, theta_model):
    """Symbolic states ``(n_out, 12)`` of the stage's window for the symbolic model parameters ``theta_model``
    (the stage's sampled names, as :class:`~vehcal_ros.estimation.calibration.fit.StageProblem` maps them)."""
    import pytensor
    import pytensor.tensor as pt

    sim = problem.sim
    k = sim.k
    if k[36] > 0.0 or k[PT_OFFSET] != 0.0 or sim.n_sub != 1:
        raise ValueError("the pytensor model covers the paper's DC-motor powertrain, no measured torque, n_sub 1")
    base = {name: float(problem.base[i]) for name, i in PARAM_INDEX.items()}

    def params(theta) -> dict:
        p = dict(base)
        for j, name in enumerate(problem.spec.parameter_names):
            if name == "bphi":
                p["bphi_f"] = p["bphi_r"] = 0.5 * theta[j]
            else:
                p[name] = theta[j]
        return p

    p = params(theta_model)
    x0 = [pt.constant(np.float64(v), dtype="float64") for v in sim.x0]
    # initial loads: steady cornering a_y = wz u, no longitudinal acceleration (vehicle_8dof._initial_loads)
    kf = [float(v) for v in k]
    r_f = kf[11] - (kf[0] * kf[17] * kf[4] / (2.0 * (kf[3] + kf[4])) + kf[1] * kf[17]) / kf[12] - kf[37]
    r_r = kf[11] - (kf[0] * kf[17] * kf[3] / (2.0 * (kf[3] + kf[4])) + kf[2] * kf[17]) / kf[13] - kf[37]
    fz0 = _normal_loads(pt, k, p["kphi_f"], p["kphi_r"], p["bphi_f"], p["bphi_r"], x0[5], x0[6], 0.0,
                        x0[7] * x0[2], r_f, r_r)
    fz0 = [pt.cast(f, "float64") for f in fz0]
    inputs = pt.constant(np.ascontiguousarray(sim.inputs[:, :3]))

    n_theta = len(theta_model)

    def body(inp, *args):  # the parameters enter as scan's non-sequences (PyMC's logp must see them)
        s, fz, theta = args[:12], args[12:16], args[16:16 + n_theta]
        s_n, fz_n = _step(pt, k, params(theta), sim.dt, inp[0], inp[1], inp[2], s, fz)
        return list(s_n) + list(fz_n)

    outs = pytensor.scan(body, sequences=[inputs], outputs_info=x0 + fz0, non_sequences=list(theta_model),
                         return_updates=False)
    return pt.concatenate([pt.stack(x0)[None, :], pt.stack(outs[:12], axis=1)], axis=0)


def pytensor_lateral_model(problem):
    """The PyMC model: uniform / half-normal priors of the stage, the pytensor 8-DOF, a Gaussian likelihood per
    channel: independent (``pm.Normal(observed=...)``) with the white noise model, else the exact AR(1) density of
    the residuals (calibration.py Eq. A1-A2, marginal sd ``sigma_c``, lag-one coefficient ``rho_c``) as a
    ``pm.Potential`` per channel."""
    import pymc as pm
    import pytensor.tensor as pt

    from vehcal_ros.inference.smc import HalfNormal, Uniform

    names = list(problem.prior.names)
    with pm.Model() as model:
        rvs = {}
        for name, dist in zip(names, problem.prior.dists):
            if isinstance(dist, Uniform):
                rvs[name] = pm.Uniform(name, lower=dist.low, upper=dist.high)
            elif isinstance(dist, HalfNormal):
                rvs[name] = pm.HalfNormal(name, sigma=dist.scale)
            else:  # pragma: no cover
                raise TypeError(dist)
        states = simulate_pytensor(problem, [rvs[n] for n in problem.spec.parameter_names])
        n = problem.data.shape[0]
        for j, (c, idx) in enumerate(zip(problem.spec.channels, problem.chan)):
            if f"rho_{c}" not in rvs:
                pm.Normal(f"obs_{c}", mu=states[:, int(idx)], sigma=rvs[f"sigma_{c}"], observed=problem.data[:, j])
                continue
            e = states[:, int(idx)] - problem.data[:, j]
            rho, sig2 = rvs[f"rho_{c}"], rvs[f"sigma_{c}"] ** 2
            one_m = 1.0 - rho ** 2
            q = one_m * e[0] ** 2 + pt.sum((e[1:] - rho * e[:-1]) ** 2)
            pm.Potential(f"obs_{c}", -0.5 * n * pt.log(2.0 * np.pi * sig2) - 0.5 * (n - 1) * pt.log(one_m)
                         - q / (2.0 * sig2 * one_m))
    return model


def check_against_numba(problem, model, n: int = 5, seed: int = 1) -> float:
    """Largest relative difference between the pytensor model's log likelihood and this project's
    (``StageProblem.log_likelihood``) at ``n`` prior draws."""
    names = list(problem.prior.names)
    rng = np.random.default_rng(seed)
    theta = problem.prior.sample(rng, n)
    ll_ref = problem.log_likelihood(theta)
    with model:
        fn = model.compile_fn(model.logp(vars=[*model.observed_RVs, *model.potentials]), point_fn=True)
    worst = 0.0
    for i in range(n):
        point = {f"{nm}_interval__" if nm in _interval_names(problem) else f"{nm}_log__":
                 _to_free(problem, nm, theta[i, j]) for j, nm in enumerate(names)}
        ll = float(fn(point))
        worst = max(worst, abs(ll - ll_ref[i]) / abs(ll_ref[i]))
    return worst


def _interval_names(problem) -> set[str]:
    from vehcal_ros.inference.smc import Uniform

    return {n for n, d in zip(problem.prior.names, problem.prior.dists) if isinstance(d, Uniform)}


def _to_free(problem, name: str, value: float) -> float:
    """PyMC's default transforms: interval (logit of the position in [low, high]) for uniforms, log otherwise."""
    from vehcal_ros.inference.smc import Uniform

    d = dict(zip(problem.prior.names, problem.prior.dists))[name]
    if isinstance(d, Uniform):
        q = (value - d.low) / (d.high - d.low)
        return float(np.log(q) - np.log1p(-q))
    return float(np.log(value))
