"""Physics sanity of the 8-DOF model (vehcal_ros.models.vehicle_8dof) and its Fiala tire."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from calibration_synthetic import CHRONO
from numba import njit

from vehcal_ros.models.borrowed import borrowed
from vehcal_ros.models.fiala import MIN_CONTACT_SPEED, fiala_forces, fiala_slips, fiala_tire, fiala_tire_slip
from vehcal_ros.models.vehicle_8dof import (
    DEFAULT_PARAMETERS,
    STATE_INDEX,
    Simulator8Dof,
    VehicleConstants,
    default_vehicle_constants,
    normal_loads,
    parameter_vector,
    simulate,
)

K = default_vehicle_constants()
MT = K.total_mass


def _rolling_state(u: float, wz: float = 0.0) -> dict[str, float]:
    w = u / 0.455
    return dict(u=u, v=0.0, phi=0.0, wx=0.0, wz=wz, w_lf=w, w_lr=w, w_rf=w, w_rr=w)


def test_default_description_is_the_papers_vehicle() -> None:
    # the hmmwv description's constants against the paper's Table 2 (data/vehicle_8dof.yaml); the description
    # adds its nominal parameter values
    assert VehicleConstants.from_yaml() == replace(K, nominal=())
    assert MT == pytest.approx(2097.85 + 2 * 127.866 + 2 * 129.98)


def _random_tire_states(seed: int, fz_low: float, n: int = 2000):
    """(u, v, delta, omega, r, fz, cx, cy): random tire states over both Fiala regimes."""
    rng = np.random.default_rng(seed)
    for _ in range(n):
        u, v = rng.normal(10, 8), rng.normal(0, 2)
        d = rng.uniform(-0.6, 0.6)
        w, r, fz = rng.normal(u / 0.46, 3), 0.46, rng.uniform(fz_low, 9000)
        cx, cy = rng.uniform(1e3, 5e4), rng.uniform(2e4, 8e4)
        yield u, v, d, w, r, fz, cx, cy


def test_fiala_fast_form_equals_reference_form() -> None:
    for u, v, d, w, r, fz, cx, cy in _random_tire_states(0, 0.0):
        s, al = fiala_slips(u, v, d, w, r)
        ref = fiala_forces(s, al, fz, cx, cy)
        fast = fiala_tire(u, v, np.cos(d), np.sin(d), w, r, fz, cx, cy, K.mu_max, K.mu_min)
        np.testing.assert_allclose(fast, ref, rtol=1e-9, atol=1e-6)


def test_fiala_tire_slip_hands_the_spin_the_reference_slip_and_slope() -> None:
    # what the 8-DOF's implicit wheel spin takes from the tire: the slip of Eq. 8 (reference form), 1 / its
    # denominator, and the slope dFx/ds (Cx while elastic, else the secant Fx / s of the reference forces, in [0, Cx])
    for u, v, d, w, r, fz, cx, cy in _random_tire_states(2, 1.0):
        fx, fy, s, inv_den, c = fiala_tire_slip(u, v, np.cos(d), np.sin(d), w, r, fz, cx, cy, K.mu_max, K.mu_min)
        s_ref, al = fiala_slips(u, v, d, w, r)
        fx_ref, _ = fiala_forces(s_ref, al, fz, cx, cy)
        vx = u * np.cos(d) + v * np.sin(d)
        np.testing.assert_allclose(s, s_ref, rtol=1e-12, atol=1e-12)
        assert inv_den * max(abs(vx), MIN_CONTACT_SPEED) == pytest.approx(1.0, rel=1e-14)
        mu_fz = (K.mu_max - (K.mu_max - K.mu_min) * min(1.0, np.hypot(s_ref, np.tan(al)))) * fz
        if abs(s_ref) < mu_fz / (2 * cx) * (1 - 1e-9):
            assert c == cx
        elif abs(s_ref) > mu_fz / (2 * cx) * (1 + 1e-9) and abs(s_ref) > 1e-9:
            assert c == pytest.approx(min(max(fx_ref / s_ref, 0.0), cx), rel=1e-9)


def test_fiala_regimes() -> None:
    fz, cx, cy = 5000.0, 10000.0, 50000.0
    fx, fy = fiala_forces(0.01, 0.0, fz, cx, cy)
    assert fx == pytest.approx(cx * 0.01) and fy == 0.0                 # elastic: linear in s
    fx, _ = fiala_forces(0.9, 0.0, fz, cx, cy)
    mu = K.mu_max - (K.mu_max - K.mu_min) * 0.9
    assert fx == pytest.approx(mu * fz - (mu * fz) ** 2 / (4 * 0.9 * cx))  # sliding
    _, fy = fiala_forces(0.0, 0.01, fz, cx, cy)
    assert fy == pytest.approx(-cy * np.tan(0.01), rel=0.05)              # small-angle cornering stiffness
    assert fiala_forces(0.1, 0.1, 0.0, cx, cy) == (0.0, 0.0)
    assert fiala_slips(0.0, 0.0, 0.2, 0.0, 0.47) == (0.0, 0.0)           # patch and wheel at rest: no slip
    # a wheel spinning on a patch at rest slides (the paper's public code returns no slip: no launch from rest)
    s, al = fiala_slips(0.0, 0.0, 0.2, 5.0, 0.47)
    assert s == pytest.approx(0.47 * 5.0 / 1e-4) and al == 0.0
    fx, fy = fiala_tire(0.0, 0.0, np.cos(0.2), np.sin(0.2), 5.0, 0.47, fz, cx, cy, K.mu_max, K.mu_min)
    assert fx == pytest.approx(K.mu_min * fz, rel=1e-4) and fy == 0.0


def test_loads_sum_to_total_weight_and_clamp() -> None:
    rng = np.random.default_rng(1)
    for _ in range(50):
        st = np.zeros(12)
        st[STATE_INDEX["phi"]] = rng.normal(0, 0.02)
        st[STATE_INDEX["wx"]] = rng.normal(0, 0.05)
        fz = normal_loads({}, st, ax=rng.normal(0, 1.5), ay=rng.normal(0, 2.0))
        assert np.all(fz > 0)
        assert fz.sum() == pytest.approx(MT * K.g, rel=1e-12)
    fz = normal_loads({}, np.zeros(12), ax=0.0, ay=0.0)
    assert fz[0] == pytest.approx(fz[2]) and fz[1] == pytest.approx(fz[3])   # symmetric at rest
    fz = normal_loads({}, np.zeros(12), ax=0.0, ay=25.0)                    # hard left: left wheels lift
    assert fz[0] == 0.0 and fz[1] == 0.0 and fz[2] > 0 and fz[3] > 0
    fz = normal_loads({}, np.zeros(12), ax=3.0, ay=0.0)                     # acceleration: load to the rear
    assert fz[1] > fz[0]


def test_straight_coast_deceleration_from_rolling_resistance() -> None:
    # T_rr = -rr |Fz| sign(w) (paper Sec. 3; rr is a lever arm in m as in the paper's code): free rolling gives
    # u_dot = -rr g / (R (1 + 4 Jw / (m_t R^2))) with R the loaded radius.
    rr = 0.015
    t = np.arange(0.0, 6.0 + 1e-9, 0.01)
    z = np.zeros_like(t)
    _, x = simulate({"rr": rr}, _rolling_state(20.0), t, z, z, z, dt=0.005)
    u = x[:, STATE_INDEX["u"]]
    R = K.r0 - (MT * K.g / 4) / K.ktf
    expected = -rr * K.g / (R * (1 + 4 * K.Jw / (MT * R**2)))
    decel = np.polyfit(t[200:], u[200:], 1)[0]
    assert decel == pytest.approx(expected, rel=0.03)
    assert np.allclose(x[:, STATE_INDEX["v"]], 0.0, atol=1e-9)
    assert np.allclose(x[:, STATE_INDEX["phi"]], 0.0, atol=1e-9)
    # and rr = 0 coasts at constant speed
    _, x0 = simulate({"rr": 0.0}, _rolling_state(20.0), t, z, z, z)
    assert abs(x0[-1, STATE_INDEX["u"]] - x0[100, STATE_INDEX["u"]]) < 0.01


def test_steady_cornering_roll_balance_and_yaw() -> None:
    # constant steer at speed: roll settles where Eq. (7) balances with wx = wx_dot = 0
    t = np.arange(0.0, 8.0 + 1e-9, 0.01)
    steer = np.full_like(t, 0.03)
    thr = np.full_like(t, 0.12)
    p = dict(DEFAULT_PARAMETERS)
    _, x = simulate(p, _rolling_state(15.0), t, thr, 0 * t, steer, dt=0.005)
    i = -1
    u, v, wz, phi = (x[i, STATE_INDEX[n]] for n in ("u", "v", "wz", "phi"))
    dt = t[1] - t[0]
    ay = (x[i, STATE_INDEX["v"]] - x[i - 1, STATE_INDEX["v"]]) / dt + wz * u
    hrc = (K.hrcf * K.b + K.hrcr * K.a) / (K.a + K.b)
    kphi = p["kphi_f"] + p["kphi_r"]
    phi_ss = hrc * K.m * ay / (kphi - K.m * K.g * hrc)
    assert wz > 0.05 and phi > 0  # left steer -> left yaw, body rolls to the right (positive about x)
    assert phi == pytest.approx(phi_ss, rel=0.03)
    assert abs(x[i, STATE_INDEX["wx"]]) < 3e-3
    assert abs(x[i, STATE_INDEX["wz"]] - x[i - 50, STATE_INDEX["wz"]]) < 0.03 * wz  # steady yaw rate
    assert abs(v) < 1.0


def test_batch_equals_single_runs_and_sse() -> None:
    t = np.arange(0.0, 3.0 + 1e-9, 0.01)
    steer = np.interp(t, [0, 1, 3], [0, 0.15, 0.15])
    thr = np.interp(t, [0, 1.5, 3], [0.3, 0.0, 0.0])
    brake = np.interp(t, [0, 2, 3], [0, 0, 0.2])
    sim = Simulator8Dof(_rolling_state(12.0), t, thr, brake, steer, dt=0.005)
    rng = np.random.default_rng(2)
    base = parameter_vector({})
    params = base * rng.uniform(0.6, 1.4, (7, base.size))
    batch = sim.run(params)
    for i in range(params.shape[0]):
        np.testing.assert_array_equal(batch[i], sim.run(params[i]))
    chan = [STATE_INDEX["v"], STATE_INDEX["wz"]]
    data = batch[0][:, chan] + 0.01
    sse = sim.sse(params, chan, data)
    ref = ((batch[:, :, chan] - data[None]) ** 2).sum(axis=1)
    np.testing.assert_allclose(sse, ref, rtol=1e-10)
    assert batch.shape == (7, t.size, 12) and np.all(np.isfinite(batch))


def test_brake_gain_parameters_scale_deceleration() -> None:
    t = np.arange(0.0, 1.5 + 1e-9, 0.01)
    z = np.zeros_like(t)
    br = np.full_like(t, 0.2)
    _, a = simulate({"rr": 0.0}, _rolling_state(20.0), t, z, br, z)
    half = {f"brake_gain_{w}": 2000.0 for w in ("lf", "rf", "lr", "rr")}
    _, b = simulate({"rr": 0.0, **half}, _rolling_state(20.0), t, z, br, z)
    da = 20.0 - a[-1, STATE_INDEX["u"]]
    db = 20.0 - b[-1, STATE_INDEX["u"]]
    assert da == pytest.approx(2 * db, rel=0.1)


@pytest.mark.parametrize("front_share, driven_wheels", [(0.5, 4), (1.0, 2)])
def test_driveline_inertia_turns_with_the_driven_wheels_only(front_share: float, driven_wheels: int) -> None:
    """``Jd`` adds to the spin inertia of each driven wheel: at small slip a launch's speed gain scales by
    (m_t + 4 Jw / r^2) / (m_t + 4 Jw / r^2 + n Jd / r^2) with n driven wheels (r = 0.4504 m, the loaded radius).
    The AWD and FWD ratios (0.935, 0.966) are 3 % apart; slip and load transfer move the simulated ones by
    <= 0.5 % (0.930, 0.969), so 1 % tells the two apart."""
    k = replace(K, front_share=front_share)
    t = np.arange(0.0, 3.0 + 1e-9, 0.01)
    z = np.zeros_like(t)
    throttle = np.full_like(t, 0.3)
    start = _rolling_state(10.0)
    start.update({w: 10.0 / 0.4504 for w in ("w_lf", "w_lr", "w_rf", "w_rr")})
    _, a = simulate({"rr": 0.0}, start, t, throttle, z, z, constants=k)
    _, b = simulate({"rr": 0.0, "Jd": 10.0}, start, t, throttle, z, z, constants=k)
    gain_a, gain_b = a[-1, STATE_INDEX["u"]] - 10.0, b[-1, STATE_INDEX["u"]] - 10.0
    r2 = 0.4504 ** 2
    expected = (MT + 4 * K.Jw / r2) / (MT + 4 * K.Jw / r2 + driven_wheels * 10.0 / r2)
    assert gain_b / gain_a == pytest.approx(expected, rel=0.01)


def test_reproduces_chrono_lateral_maneuver_with_published_means() -> None:
    if not CHRONO.is_dir():
        pytest.fail(f"the vendored Chrono data are missing at {CHRONO}")
    from vehcal_ros.estimation.calibration.fit import Segment

    seg = Segment.from_chrono(CHRONO / "simp_ramp.csv", CHRONO / "ramp_steer.txt", 700, 1069)
    p = dict(Cyf=44016, Cyr=54046, kphi_f=36245, kphi_r=26439, bphi_f=3863, bphi_r=3863, Cxf=10659,
             Cxr=10280, rr=0.0131)
    sim = Simulator8Dof(seg.initial_state, seg.time, seg.throttle, seg.brake, seg.steering, dt=0.01)
    x = sim.run(p)
    # paper Table 5 posterior mean-RMSE (v 0.037, roll 0.003, roll rate 0.002... on noisy data)
    for name, ch, tol in (("v", "v", 0.04), ("phi", "roll", 0.003), ("wx", "roll_rate", 0.003),
                          ("wz", "yaw_rate", 0.01)):
        rmse = np.sqrt(np.mean((x[:, STATE_INDEX[name]] - seg.measured[ch]) ** 2))
        assert rmse < tol, (name, rmse)


@njit
def _scale_rows_borrowed(a: np.ndarray, f: np.ndarray) -> float:
    b = borrowed(a)
    g = borrowed(f)
    for i in range(b.shape[0]):
        for j in range(b.shape[1]):
            b[i, j] *= g[i]
    return b[-1, -1]


def test_borrowed_view_is_the_same_memory_with_its_strides() -> None:
    base = np.arange(60.0).reshape(6, 10)
    view = base[1::2, ::3]                     # strided, not contiguous
    f = np.array([2.0, -1.0, 0.5])
    expect = base.copy()
    expect[1::2, ::3] *= f[:, None]
    last = _scale_rows_borrowed(view, f)
    np.testing.assert_array_equal(base, expect)  # written in place, nothing outside the view touched
    assert last == expect[5, 9]
