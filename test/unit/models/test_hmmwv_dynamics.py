"""14-DOF constraint-embedded HMMWV dynamics: AB recursion vs dense mass matrix, energy conservation order,
static settling, cornering, throttle ramp (the 8-DOF paper's acc maneuver) and coast-down."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from calibration_synthetic import CHRONO

from vehcal_ros.models.powertrain import road_wheel_angle
from vehcal_ros.models.vehicle14 import Hmmwv14, HmmwvParams, RoadMap
from vehcal_ros.models.vehicle14 import dynamics as dyn
from vehcal_ros.models.vehicle14.kinematics import corner_state

ACC_CSV = CHRONO / "acc.csv"


@pytest.fixture(scope="module")
def sim() -> Hmmwv14:
    return Hmmwv14()


def test_aba_equals_dense_mass_matrix_solution(sim):
    rng = np.random.default_rng(7)
    for trial in range(20):
        sim.reset(speed=rng.uniform(0.0, 25.0))
        y = sim.state
        y[dyn.Y_TH : dyn.Y_TH + 4] += rng.uniform(-0.12, 0.12, 4)
        y[dyn.Y_SIG] = rng.uniform(-0.6, 0.6)
        y[dyn.Y_Q : dyn.Y_Q + 4] += rng.normal(0.0, 0.03, 4)
        y[dyn.Y_Q : dyn.Y_Q + 4] /= np.linalg.norm(y[dyn.Y_Q : dyn.Y_Q + 4])
        y[dyn.Y_W :] += rng.normal(0.0, 1.0, dyn.NDOF) * np.r_[0.5 * np.ones(6), 2.0 * np.ones(4), 5 * np.ones(4)]
        sim.set_state(y)
        sim.set_inputs((rng.uniform(0, 1), rng.uniform(0, 0.3), rng.uniform(-0.7, 0.7), 1.0))  # steering moving
        a_ab = sim.accelerations()
        a_dense = sim.accelerations(dense=True)
        scale = max(1.0, np.abs(a_dense).max())
        assert np.abs(a_ab - a_dense).max() < 1e-9 * scale, trial
    sim.reset()


def _conservative_params() -> HmmwvParams:
    p = HmmwvParams.from_yaml()
    return replace(
        p,
        tire=replace(p.tire, qsy1=0.0, cz=0.0),
        front=replace(p.front, stop_min=0.0, stop_max=10.0),
        rear=replace(p.rear, stop_min=0.0, stop_max=10.0),
    )


def _energy_drift(integrator: str, dt: float, t_end: float = 1.0) -> float:
    s = Hmmwv14(_conservative_params(), RoadMap.uniform(0.0), dt=dt, integrator=integrator)
    s.damper_scale = 0.0
    s.reset(speed=5.0)
    y = s.state
    y[dyn.Y_W : dyn.Y_W + 2] = (0.1, -0.05)  # roll and pitch rates
    y[dyn.Y_V + 2] = 0.1  # heave
    y[dyn.Y_THD : dyn.Y_THD + 4] = (0.2, -0.1, 0.1, -0.15)
    y[dyn.Y_OM : dyn.Y_OM + 4] += (1.0, -2.0, 0.5, 0.0)
    s.set_state(y)
    e0 = s.total_energy()
    k = int(round(0.01 / dt))
    err = 0.0
    for _ in range(int(round(t_end / 0.01))):
        s.step(0.0, 0.0, 0.0, k)
        err = max(err, abs(s.total_energy() - e0))
        assert np.all(s.outputs()["fz"] > 0.0)  # stays in contact: smooth problem
    return err


def test_energy_conserved_to_first_order_semi_implicit():
    e1, e2 = _energy_drift("semi_implicit", 1e-3), _energy_drift("semi_implicit", 5e-4)
    assert e1 < 1.0  # J, of ~5e4 J
    assert 1.7 < e1 / e2 < 2.4


def test_energy_conserved_to_fourth_order_rk4():
    e1, e2 = _energy_drift("rk4", 4e-3), _energy_drift("rk4", 2e-3)
    assert e2 < 1e-3
    assert e1 / e2 > 14.0


def test_static_settling(sim):
    sim.reset()
    o = sim.outputs()
    m_g = sim.params.total_mass * sim.params.gravity
    assert abs(o["fz"].sum() - m_g) < 0.005 * m_g
    assert np.all(o["fz"] > 5500) and np.all(o["fz"] < 7000)
    assert 0.55 < o["z"] < 0.62  # chassis reference height, m
    assert np.all((0.43 < o["wheel_centre_z"]) & (o["wheel_centre_z"] < 0.47))
    assert abs(o["roll"]) < 1e-4 and abs(o["pitch"]) < 0.01
    assert abs(o["az"] - 9.81) < 0.01
    # stays settled for 1 s of simulation: loads still sum to m g
    sim.step(0.0, 0.0, 0.0, 1000)
    o2 = sim.outputs()
    assert abs(o2["fz"].sum() - m_g) < 0.005 * m_g
    assert abs(o2["z"] - o["z"]) < 1e-3 and abs(o2["u"]) < 1e-3


def _steady_turn(sim: Hmmwv14, speed: float, steering: float, seconds: float = 6.0) -> dict:
    sim.reset(speed=speed)
    thr = 0.03
    for _ in range(int(round(seconds * 100))):  # speed-holding throttle, steering held
        o = sim.outputs()
        thr = min(max(thr + 0.02 * (speed - o["u"]), 0.0), 1.0)
        sim.step(thr, 0.0, steering, 10)
    return sim.outputs()


def _static_wheelbase(sim: Hmmwv14) -> float:
    """Distance between the front and rear wheel centres at static ride height (3.310 m; Chrono's 3.378 m is
    the distance between the suspension frames, the spindles sit 40/36 mm inboard of them)."""
    th = sim.equilibrium[3:]
    x = [corner_state(sim.geometry, i, th[i])["wheel_centre"][0] for i in range(4)]
    return 0.5 * (x[0] + x[1]) - 0.5 * (x[2] + x[3])


def test_steady_state_cornering_understeers(sim):
    """Constant-speed method (SAE J266 style) at 15 m/s: steering held at 0.02 and 0.06 (a_y 0.87 and
    2.6 m/s^2) for 6 s with a speed-holding throttle; K = (delta - L r/u)/a_y with the measured u, r and the
    model's wheelbase L. Measured K = 3.3e-4 / 5.3e-4 rad/(m/s^2) (understeer: front roll steer of the inclined
    upper arm outweighs the rear toe-out and front toe-in under load transfer, docs/simulator_model.md). A slow
    constant-speed ramp steer (0 -> 0.06 over 30 s) gives 4.6e-4 .. 6e-4 at a_y 0.9 .. 2.5 m/s^2; the bounds
    [1e-4, 9e-4] are the measured values widened by that procedure spread (~2.5e-4)."""
    wheelbase = _static_wheelbase(sim)
    assert 3.30 < wheelbase < 3.32
    for st in (0.02, 0.06):
        o = _steady_turn(sim, 15.0, st)
        ay = o["u"] * o["r"]
        assert o["r"] > 0 and ay > 0 and o["roll"] > 0
        assert o["fz"][1] > o["fz"][0] and o["fz"][3] > o["fz"][2]
        assert o["fy"][:2].sum() > 0 and o["fy"][2:].sum() > 0  # (toe-in: the inner front Fy < 0 at low a_y)
        assert abs(o["steer_angle"].mean() - road_wheel_angle(st)) < 0.004
        k = (road_wheel_angle(st) - wheelbase * o["r"] / o["u"]) / ay
        assert 1e-4 < k < 9e-4, (st, k)


def test_throttle_ramp_reaches_acc_maneuver_speeds(sim):
    """The 8-DOF paper's acc maneuver: throttle 0 -> 0.5 over 0.5-4.5 s, held to 8.5 s (acc_test.txt)."""
    sim.reset()
    u = {}
    for k in range(850):
        t = sim.t
        thr = 0.0 if t < 0.5 else min(0.5, 0.5 * (t - 0.5) / 4.0)
        sim.step(thr, 0.0, 0.0, 10)
        if k + 1 in (100, 450, 850):
            u[k + 1] = sim.outputs()["u"]
    assert 0.1 < u[100] < 0.4  # Chrono 0.20 m/s at 1 s
    assert 8.0 < u[450] < 14.0  # Chrono 9.5 m/s at 4.5 s
    # Chrono 18.2 m/s at 8.5 s, but its powertrain saturates near 42 rad/s wheel speed; the shared map of
    # vehcal_ros.models.powertrain reaches zero torque only at 120 rad/s, so the ramp keeps accelerating
    assert 18.0 < u[850] < 32.0
    if ACC_CSV.exists():
        d = np.genfromtxt(ACC_CSV, delimiter=",", names=True)
        assert abs(np.interp(4.5, d["time"], d["vx"]) - u[450]) < 0.3 * u[450]


def test_coast_down_decelerates_plausibly(sim):
    sim.reset(speed=15.0)
    sim.step(0.0, 0.0, 0.0, 500)
    u0 = sim.outputs()["u"]
    sim.step(0.0, 0.0, 0.0, 5000)
    o = sim.outputs()
    decel = (u0 - o["u"]) / 5.0
    assert 0.03 < decel < 0.5  # rolling resistance QSY1 = 0.008 ~ 0.08 m/s^2
    assert np.all(np.abs(o["slip"]) < 0.01) and abs(o["r"]) < 1e-3


def test_braking_stops_the_vehicle(sim):
    sim.reset(speed=15.0)
    sim.step(0.0, 0.5, 0.0, 4000)
    o = sim.outputs()
    assert abs(o["u"]) < 0.05 and np.all(np.abs(o["omega"]) < 0.5)


def test_non_finite_state_raises_with_time_and_state(sim):
    sim.reset(speed=5.0)
    y = sim.state
    y[dyn.Y_V] = np.nan
    sim.set_state(y)
    with pytest.raises(FloatingPointError, match=r"t = .* state = "):
        sim.step(0.0, 0.0, 0.0, 5)
    sim.reset()


def test_outputs_contract(sim):
    sim.reset(speed=3.0)
    sim.step(0.1, 0.0, 0.2, 20)
    o = sim.outputs()
    for k in ("t", "x", "y", "z", "roll", "pitch", "yaw", "u", "v", "w", "p", "q", "r", "ax", "ay", "az"):
        assert isinstance(o[k], float)
    for k, n in (
        ("omega", 4),
        ("fx", 4),
        ("fy", 4),
        ("fz", 4),
        ("slip", 4),
        ("slip_angle", 4),
        ("rolling_radius", 4),
        ("mu_road", 4),
        ("mu_max", 4),
        ("steer_angle", 2),
        ("susp_angle", 4),
        ("spring_length", 4),
    ):
        assert o[k].shape == (n,)
    assert o["t"] == pytest.approx(0.02)
    assert np.all(o["fz"] >= 0.0)
    with pytest.raises(ValueError):
        Hmmwv14(integrator="euler")


def _attitude_step(e: np.ndarray, w: np.ndarray, dt: float) -> np.ndarray:
    """The unit quaternion e (scalar first) after dt s at the constant body rate w (rad/s): e (x) exp(0.5 w dt)
    (Hamilton product), renormalised."""
    wn = float(np.linalg.norm(w))
    h = 0.5 * wn * dt
    qv = w * (np.sin(h) / wn if wn > 1e-14 else 0.5 * dt)
    q0 = np.cos(h)
    n = np.r_[e[0] * q0 - e[1:] @ qv, e[0] * qv + q0 * e[1:] + np.cross(e[1:], qv)]
    return n / np.linalg.norm(n)


def test_fused_semi_implicit_step_equals_the_generic_derivative():
    """The fused semi-implicit step of ``integrate`` (body terms + AB recursion without the kinematic-rate
    pass) reproduces a step built from ``derivative`` to round-off over 1 s of a mixed maneuver."""
    s = Hmmwv14()
    s.reset(speed=5.0)
    s.set_inputs((0.4, 0.0, s.pitman_angle(0.2), 1.0))
    y_ref = s.state
    for _ in range(1000):
        ydot = s.state_derivative(y_ref)
        y_ref[dyn.Y_W :] += 1e-3 * ydot[dyn.Y_W :]
        R = dyn.quat_to_rot(*y_ref[dyn.Y_Q : dyn.Y_Q + 4])
        y_ref[dyn.Y_R : dyn.Y_R + 3] += 1e-3 * np.array(R) @ y_ref[dyn.Y_V : dyn.Y_V + 3]
        y_ref[dyn.Y_Q : dyn.Y_Q + 4] = _attitude_step(y_ref[dyn.Y_Q : dyn.Y_Q + 4], y_ref[dyn.Y_W : dyn.Y_W + 3], 1e-3)
        y_ref[dyn.Y_TH : dyn.Y_TH + 4] += 1e-3 * y_ref[dyn.Y_THD : dyn.Y_THD + 4]
        y_ref[dyn.Y_SIG] += 1e-3 * ydot[dyn.Y_SIG]
    s.step(0.4, 0.0, 0.2, 1000)
    scale = np.maximum(np.abs(y_ref), 1e-3)
    assert np.max(np.abs(s.state - y_ref) / scale) < 1e-9
