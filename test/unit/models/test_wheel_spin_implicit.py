"""Wheel spin of light wheels on stiff tires (the sedan): the 8-DOF's linearly implicit update, the loaded-radius
lever, the automatic's initial gear, and the 14-DOF's implicit spin without its one-step lag force.

Checks against independent evaluations: a closed-form momentum balance, a 20x finer step of the same model, the
gear that generated the data, and the rear (undriven) wheel's own spin balance in the 14-DOF.
"""

from __future__ import annotations

import numpy as np
import pytest

from vehcal_ros.estimation.calibration.fit import Segment, StageProblem, stage_spec
from vehcal_ros.models.vehicle_8dof import STATE_INDEX, Simulator8Dof, VehicleConstants

SEDAN = VehicleConstants.from_description("sedan")


def _rolling(c: VehicleConstants, u0: float) -> dict[str, float]:
    wf, wr = c.static_wheel_loads()
    rf, rr = c.r0 - wf / c.ktf, c.r0 - wr / c.ktr
    return {"u": u0, "v": 0.0, "phi": 0.0, "wx": 0.0, "wz": 0.0, "w_lf": u0 / rf, "w_rf": u0 / rf,
            "w_lr": u0 / rr, "w_rr": u0 / rr}


def test_sedan_momentum_balance_at_5ms() -> None:
    """Measured 300 N m on each front wheel, none on the rear (FWD), rr = 0, dt = 5 ms (the explicit update was
    unstable here: the rear wheels' lam dt ~ 10-40): m_t du/dt = sum Fx with Fx = (T - Jw dw/dt) / r_l and
    dw/dt = du/dt / r, i.e. du/dt = sum T / r_l / (m_t + sum Jw / (r_l r)), r_l = r - rolling_excess."""
    c = SEDAN
    assert c.rolling_excess > 0.005
    t = np.arange(0.0, 3.0001, 0.01)
    torque = np.zeros((t.size, 4))
    torque[:, :2] = 300.0                      # FL, FR
    sim = Simulator8Dof(_rolling(c, 8.0), t, np.zeros(t.size), np.zeros(t.size), np.zeros(t.size), dt=0.005,
                        output_dt=0.01, constants=c, wheel_torque=torque)
    out = sim.run({"rr": 0.0})
    assert np.all(np.isfinite(out))
    wf, wr = c.static_wheel_loads()
    rf, rr = c.r0 - wf / c.ktf, c.r0 - wr / c.ktr
    lf, lr = rf - c.rolling_excess, rr - c.rolling_excess
    accel = 2 * 300.0 / lf / (c.total_mass + 2 * c.Jw / (lf * rf) + 2 * c.Jw_r / (lr * rr))
    u = out[:, STATE_INDEX["u"]]
    assert (u[-1] - u[100]) / (t[-1] - t[100]) == pytest.approx(accel, rel=0.01)
    # the undriven rear wheels roll with the car (no oscillation): slip within 0.2 %
    w_lr = out[100:, STATE_INDEX["w_lr"]]
    assert np.max(np.abs(w_lr * rr / u[100:] - 1.0)) < 2e-3


def test_sedan_throttle_ramp_converges_in_dt() -> None:
    """The engine map through the gearbox on a throttle ramp: the 5 ms trajectory equals a 0.25 ms one."""
    t = np.arange(0.0, 6.0001, 0.01)
    thr = np.interp(t, [0.0, 3.0, 6.0], [0.0, 0.3, 0.0])
    runs = [Simulator8Dof(_rolling(SEDAN, 2.0), t, thr, np.zeros(t.size), np.zeros(t.size), dt=dt, output_dt=0.01,
                          constants=SEDAN).run({"rr": 0.0}) for dt in (0.005, 0.00025)]
    for name in ("u", "w_lf", "w_lr"):
        j = STATE_INDEX[name]
        assert np.max(np.abs(runs[0][:, j] - runs[1][:, j])) < 0.005 * np.max(np.abs(runs[1][:, j])), name


def test_initial_gear_is_inferred_from_the_data() -> None:
    """Coast-down at 25 m/s: the automatic may hold 4th (3280 rpm) although 3rd is below its up-shift speed; data
    made in 4th make the stage start in 4th (the default rule would take 3rd and double the engine braking)."""
    t = np.arange(0.0, 10.0001, 0.01)
    zeros = np.zeros(t.size)
    sim = Simulator8Dof(_rolling(SEDAN, 25.0), t, zeros, zeros, zeros, dt=0.01, output_dt=0.01, constants=SEDAN)
    assert len(sim.feasible_gears()) > 1 and 4 in sim.feasible_gears()
    auto = sim.run({"rr": 0.0})
    sim.initial_gear = 4
    truth = sim.run({"rr": 0.0})
    u_auto, u_4 = auto[:, STATE_INDEX["u"]], truth[:, STATE_INDEX["u"]]
    assert (u_auto[0] - u_auto[-1]) > 1.3 * (u_4[0] - u_4[-1])   # the default gear brakes harder
    rng = np.random.default_rng(5)
    seg = Segment.from_arrays(t, zeros, zeros, zeros, {"u": u_4 + 0.1 * rng.standard_normal(t.size)},
                              initial_state=truth[0])
    prob = StageProblem(seg, stage_spec("rolling_resistance", vehicle="sedan"), SEDAN.default_parameters(), SEDAN)
    assert prob.sim.initial_gear == 4


def test_sedan_14dof_rear_wheel_spin_balance() -> None:
    """14-DOF sedan on a throttle ramp (implicit spin on): the undriven rear wheel's tire force only spins it up,
    -Fx r_l = Jw dw/dt. The former implicit update (spin acceleration / (1 + dt lam)) left a one-step lag that the
    stiff tire turned into ~25 N m of extra torque at 2 m/s^2 (three times Jw dw/dt)."""
    from vehcal_ros.io.scenarios import DriverProgram, load_scenario
    from vehcal_ros.io.simulate import make_model

    sc = load_scenario("throttle_ramp", vehicle="sedan_zero_bump_steer")
    sim = make_model(sc, "sedan_zero_bump_steer")
    drv = DriverProgram(sc.driver)
    rows = []
    while sim.t < 5.5:
        o = sim.outputs()
        rows.append((o["t"], o["omega"][2], o["fx"][2], o["fz"][2]))
        sim.step(*drv.inputs_at(sim.t, o), n_steps=10)
    a = np.array(rows)
    jw = sim.params.corner_bodies(1)[3].inertia[1, 1]
    wdot = np.gradient(a[:, 1], a[:, 0])
    r_l = sim.params.tire.r0 - a[:, 3] / sim.params.tire.kz
    sel = (a[:, 0] > 3.0) & (a[:, 0] < 5.4)
    lhs, rhs = -a[sel, 2] * r_l[sel], jw * wdot[sel]
    assert np.max(rhs) > 5.0                              # the wheel is being spun up noticeably
    assert np.max(np.abs(lhs - rhs)) < 0.2 * np.max(rhs)
