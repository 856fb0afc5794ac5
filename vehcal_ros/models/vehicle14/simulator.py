"""The 14-DOF vehicle simulator object (docs/simulator_model.md; constraint-embedding paper Sections 2-5).

``Hmmwv14`` (alias ``Vehicle14``) owns the state and runs the numba integration loop of dynamics.py for any
vehicle model file (params.load_simulator_params; the HMMWV by default). Driver inputs are the normalised
controls of the 8-DOF paper: throttle and brake 0..1 (HMMWV: the shared powertrain/brake maps; a map-engine
vehicle: its engine map, automatic gearbox and brake gain), and steering -1..1 whose MEAN front road-wheel
angle at static ride height is ``steering.gain`` x input (HMMWV: the shared ``road_wheel_angle`` map): the
Pitman-arm angle or rack displacement is chosen from a table of the linkage (which then gives Ackermann and
bump steer per wheel) and followed through a first-order servo (``servo_tau``).
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
from scipy.optimize import root

from . import dynamics as dyn
from .kinematics import B_WH, MI_AX, MI_LSP, pack_geometry
from .params import HmmwvParams, load_simulator_params
from .road import RoadMap
from .tires import mu_curve, pack_tire

INTEGRATORS = {"semi_implicit": 0, "rk4": 1}


class Hmmwv14:
    """14-DOF constraint-embedded vehicle on a flat road with spatially varying friction.

    params: a parameter set, or a vehicle name / model file (``load_simulator_params``); None = the HMMWV.
    dt: fixed step (s); integrator: "semi_implicit" (default, symplectic Euler, first order) or "rk4".
    """

    def __init__(
        self,
        params: HmmwvParams | str | None = None,
        road: RoadMap | None = None,
        dt: float = 1e-3,
        integrator: str = "semi_implicit",
    ) -> None:
        if integrator not in INTEGRATORS:
            raise ValueError(f"integrator must be one of {sorted(INTEGRATORS)}, got {integrator!r}")
        if not (dt > 0.0 and math.isfinite(dt)):
            raise ValueError(f"dt must be a positive number of seconds, got {dt!r}")
        if params is None:
            params = HmmwvParams.from_yaml()
        elif not isinstance(params, HmmwvParams):
            params = load_simulator_params(params)
        self.params = params
        self.road = road if road is not None else RoadMap()
        self.dt = float(dt)
        self.integrator = integrator
        self.damper_scale = 1.0
        p = self.params
        geo = pack_geometry(p)
        self.geometry = geo
        fz_ref = p.tire.fz_mu_ref if p.tire.fz_mu_ref is not None else p.total_mass * p.gravity / 4.0
        self._tp = pack_tire(p.tire, fz_ref)
        gp = np.zeros(dyn.NGP)
        gp[dyn.G_GRAV] = p.gravity
        gp[dyn.G_MC] = p.chassis.mass
        gp[dyn.G_COM : dyn.G_COM + 3] = p.chassis_com
        gp[dyn.G_IC : dyn.G_IC + 9] = p.chassis.inertia.ravel()
        gp[dyn.G_TAU] = p.steering.servo_tau
        gp[dyn.G_AERO] = 0.5 * p.aero_rho * p.aero_cd * p.aero_area if p.aero_enabled else 0.0
        gp[dyn.G_RRV] = 0.2  # m/s, smoothing speed of the rolling-resistance moment sign
        gp[dyn.G_BRKW] = 1.0  # rad/s, brake torque fades in linearly below this spin (no stick-slip chatter)
        _pack_powertrain(p, gp)
        self._gp = gp
        self.implicit_spin = self._spin_needs_implicit(fz_ref) if p.implicit_wheel_spin is None \
            else bool(p.implicit_wheel_spin)
        gp[dyn.G_IMPL] = 1.0 if self.implicit_spin else 0.0
        gp[dyn.G_ISPIN] = p.corner_bodies(0)[3].inertia[1, 1]
        gp[dyn.G_ISPIN + 1] = p.corner_bodies(1)[3].inertia[1, 1]
        if self.road.grade != 0.0:   # flat road: both 0 and dynamics.py keeps its flat-road expressions
            gp[dyn.G_GRADE] = math.sin(self.road.inclination)
            gp[dyn.G_GRADE + 1] = math.cos(self.road.inclination)
        self._bs = np.ascontiguousarray(p.bump_stop_curve, dtype=np.float64)
        self._rb, self._rm, self._rdef = self.road.arrays()
        self._work = dyn.make_work()
        self._y = np.zeros(dyn.NY)
        self._u = np.zeros(4)
        self._u[3] = 1.0
        self.t = 0.0
        self._eq = self._static_equilibrium()
        self._build_steering_table()
        self.reset()

    def _spin_needs_implicit(self, fz: float) -> bool:
        """True when the explicit wheel-spin update is unstable at the static load and the slip floor speed:
        lambda dt > 2 with lambda = R0^2 Kx(Fz) / (v_low I_spin) (the lighter wheel). The HMMWV: 1.7 (explicit);
        the sedan: 4.3 (implicit)."""
        from .tires import T_PKX1, T_PKX2, T_PKX3

        tp, t = self._tp, self.params.tire
        dfz = (fz - t.fz0) / t.fz0
        kx = fz * (tp[T_PKX1] + tp[T_PKX2] * dfz) * math.exp(tp[T_PKX3] * dfz)
        spin = min(self.params.corner_bodies(a)[3].inertia[1, 1] for a in (0, 1))
        return bool(t.r0**2 * kx / (t.v_low * spin) * self.dt > 2.0)

    # ------------------------------------------------------------------------------------------------------
    def _args(self) -> tuple:
        """Kernel arguments after the state and inputs (built once; the arrays are updated in place)."""
        args = getattr(self, "_args_cache", None)
        if args is not None:
            return args
        g = self.geometry
        self._args_cache = (
            g.cg,
            g.cp,
            g.ci,
            g.sg,
            self._gp,
            self._tp,
            self._bs,
            self._rb,
            self._rm,
            self._rdef,
            self._work,
        )
        return self._args_cache

    def _accel(self, y: np.ndarray, u: np.ndarray) -> np.ndarray:
        ydot = np.zeros(dyn.NY)
        dyn.derivative(y, u, *self._args(), ydot)
        return ydot

    def _pose_state(
        self,
        z: float,
        roll: float,
        pitch: float,
        th: np.ndarray,
        x: float = 0.0,
        y: float = 0.0,
        yaw: float = 0.0,
    ) -> np.ndarray:
        s = np.zeros(dyn.NY)
        s[dyn.Y_R : dyn.Y_R + 3] = (x, y, z)
        s[dyn.Y_Q : dyn.Y_Q + 4] = _euler_to_quat(roll, pitch, yaw)
        s[dyn.Y_TH : dyn.Y_TH + 4] = th
        return s

    def _static_equilibrium(self) -> np.ndarray:
        """Settled pose at rest: [z, roll, pitch, theta_1..4] with zero generalised accelerations."""
        u = np.array([0.0, 0.0, 0.0, 1.0])
        wc = self.geometry.cp[:, 7, 2]  # wheel-centre height in the chassis frame at the design pose

        def res(xv):
            y = self._pose_state(xv[0], xv[1], xv[2], xv[3:])
            a = self._accel(y, u)
            return np.r_[a[dyn.Y_W], a[dyn.Y_W + 1], a[dyn.Y_V + 2], a[dyn.Y_THD : dyn.Y_THD + 4]]

        def settled(sol) -> bool:
            ok = sol.success and np.max(np.abs(res(sol.x))) <= 1e-6 and np.all(np.abs(sol.x[1:3]) < 0.2)
            return bool(ok and np.all(self._work[12][:, dyn.W_FZ] > 0.0))

        x0 = np.r_[self.params.tire.r0 - 0.015 - wc[0] + 0.08, 0.0, 0.0, -0.15 * np.ones(4)]
        sol = root(res, x0, method="hybr", options={"xtol": 1e-13})
        if not settled(sol):
            # start from the design pose with the tires at the static deflection
            dz = self.params.total_mass * self.params.gravity / 4.0 / self.params.tire.kz
            x0 = np.r_[self.params.tire.r0 - dz - wc[0], 0.0, 0.0, np.zeros(4)]
            sol = root(res, x0, method="hybr", options={"xtol": 1e-13})
        if not settled(sol):
            raise RuntimeError(f"{self.params.name} static equilibrium not found: {sol.message}")
        return sol.x

    def _mean_steer(self, sigma: float) -> float:
        """Mean front road-wheel angle (rad) at static ride height for Pitman angle / rack position sigma."""
        from .kinematics import corner_state

        th = self._eq[3:]
        return 0.5 * (
            corner_state(self.geometry, 0, th[0], 0.0, sigma)["steer"]
            + corner_state(self.geometry, 1, th[1], 0.0, sigma)["steer"]
        )

    def _build_steering_table(self) -> None:
        """Mean front road-wheel angle vs Pitman-arm angle (Section 5.4 linkage) or rack position at static ride
        height, and the steering gain (rad per unit input) when the parameters leave it to the rack."""
        st = self.params.steering
        smax = st.rack_travel if st.kind == "rack" else st.max_pitman_angle
        sig = np.linspace(-smax, smax, 721)
        delta = np.array([self._mean_steer(s) for s in sig])
        delta = 0.5 * (delta - delta[::-1])  # exact left/right symmetry: steering 0 -> Pitman angle 0
        order = np.argsort(delta)
        if np.any(np.diff(delta[order]) <= 0):
            raise RuntimeError("steering table is not monotonic; reduce max_pitman_angle")
        self._steer_delta = delta[order]
        self._steer_sigma = sig[order]
        self._steer_last = (math.nan, 0.0)
        if st.gain is not None:
            self.steering_gain = float(st.gain)
        else:  # Chrono's rack map (displacement = input x travel), linearised at the centre
            h = 1e-4 * smax
            self.steering_gain = abs(self._mean_steer(h) - self._mean_steer(-h)) / (2.0 * h) * smax
        if self.steering_gain >= min(-self._steer_delta[0], self._steer_delta[-1]):
            raise RuntimeError(f"steering gain {self.steering_gain:.4f} rad exceeds the linkage's range")

    def pitman_angle(self, steering: float) -> float:
        """Pitman-arm angle (rad) or rack position (m) whose mean front road-wheel angle is
        ``steering_gain`` x steering (HMMWV: the shared road_wheel_angle map)."""
        steering = float(steering)
        last = self._steer_last
        if steering == last[0]:
            return last[1]
        sigma = float(np.interp(steering * self.steering_gain, self._steer_delta, self._steer_sigma))
        self._steer_last = (steering, sigma)
        return sigma

    # ------------------------------------------------------------------------------------------------------
    def reset(self, speed: float = 0.0, x: float = 0.0, y: float = 0.0, yaw: float = 0.0, settle: bool = True) -> None:
        """Place the vehicle at (x, y, yaw) with forward speed ``speed`` (m/s), wheels rolling freely.

        settle=True: the static equilibrium (settled suspension and tires); False: the design (hardpoint)
        pose with the tires just touching the road.
        """
        if settle:
            z, roll, pitch = self._eq[:3]
            th = self._eq[3:]
        else:
            th = np.zeros(4)
            z, roll, pitch = self.params.tire.r0 - self.geometry.cp[0, 7, 2], 0.0, 0.0
        self._y = self._pose_state(z, roll, pitch, th, x, y, yaw)
        self._y[dyn.Y_V] = speed
        self._u[:] = (0.0, 0.0, 0.0, self.damper_scale)
        self._accel(self._y, self._u)
        re = self._work[12][:, dyn.W_RE]
        self._y[dyn.Y_OM : dyn.Y_OM + 4] = speed / re
        if self._gp[dyn.G_PT] > 0.5:  # the gear the automatic would hold at this speed
            ps = self._work[31]
            ps[dyn.PS_GEAR] = 0.0
            for _ in range(int(self._gp[dyn.G_NG])):
                dyn.shift_gear(self._y, self._gp, ps)
        self.t = 0.0

    def step(self, throttle: float, brake: float, steering: float, n_steps: int = 1) -> None:
        """Advance n_steps of dt with the inputs held (throttle, brake 0..1; steering -1..1, + = left)."""
        th = min(max(float(throttle), 0.0), 1.0)
        br = min(max(float(brake), 0.0), 1.0)
        st = min(max(float(steering), -1.0), 1.0)
        u = self._u
        u[0] = th
        u[1] = br
        u[2] = self.pitman_angle(st)
        u[3] = self.damper_scale
        status = dyn.integrate(self._y, u, int(n_steps), self.dt, INTEGRATORS[self.integrator], *self._args())
        if status >= 0:
            self.t += (status + 1) * self.dt
            raise FloatingPointError(
                f"{self.params.name} state became non-finite or a suspension loop could not close at "
                f"t = {self.t:.6f} s; "
                f"state = {np.array2string(self._y, precision=6, max_line_width=400)}"
            )
        self.t += int(n_steps) * self.dt

    @property
    def state(self) -> np.ndarray:
        """Copy of the state vector (layout in dynamics.py: r, quaternion, theta, sigma, omega, v, thetadot,
        wheel spins)."""
        return self._y.copy()

    def set_state(self, y: np.ndarray) -> None:
        self._y[:] = y

    @property
    def inputs(self) -> np.ndarray:
        """Copy of the kernel inputs in force: [throttle 0..1, brake 0..1, Pitman-arm angle (rad) or rack
        position (m) commanded to the steering servo, damper scale]. :meth:`step` sets them from the driver's
        controls; :meth:`outputs`, :meth:`accelerations`, :meth:`state_derivative` and :meth:`total_energy`
        read them."""
        return self._u.copy()

    def set_inputs(self, u: np.ndarray | tuple[float, float, float, float]) -> None:
        """Set the kernel inputs (layout of :attr:`inputs`; the steering entry is the Pitman-arm angle or rack
        position itself, see :meth:`pitman_angle`) without stepping: to evaluate the model at given inputs.
        :meth:`step` and :meth:`reset` overwrite them."""
        self._u[:] = u

    @property
    def equilibrium(self) -> np.ndarray:
        """Copy of the settled pose at rest that :meth:`reset` starts from: [z (m), roll (rad), pitch (rad),
        theta_1..4 (rad, the lower control arms' angles FL, FR, RL, RR)]."""
        return self._eq.copy()

    def state_derivative(self, y: np.ndarray | None = None) -> np.ndarray:
        """dy/dt (layout of :attr:`state`, each entry's unit per second) at ``y`` (default: the current state)
        with the inputs in force: the kinematic rates and the AB accelerations (dynamics.derivative; the
        generic form the integrators' fused steps reproduce)."""
        return self._accel(self._y if y is None else np.ascontiguousarray(y, dtype=np.float64), self._u)

    @property
    def vehicle(self) -> str:
        """Name of the simulated vehicle (model file stem)."""
        return self.params.name

    @property
    def tire_pack(self) -> np.ndarray:
        """The tire's packed Pac02 coefficients and friction scaling as the kernels read them (tires.pack_tire;
        read-only use: the tire functions of tires.py take it)."""
        return self._tp

    @property
    def gear(self) -> int:
        """Current gear (1 = first) of a map-engine vehicle; 0 for the HMMWV's direct drive map."""
        return int(self._work[31][dyn.PS_GEAR]) + 1 if self._gp[dyn.G_PT] > 0.5 else 0

    @gear.setter
    def gear(self, value: int) -> None:
        n = int(self._gp[dyn.G_NG])
        if self._gp[dyn.G_PT] < 0.5 or not 1 <= int(value) <= n:
            raise ValueError(f"gear must be 1..{n} on a vehicle with a gearbox, got {value!r}")
        self._work[31][dyn.PS_GEAR] = float(int(value) - 1)

    # ------------------------------------------------------------------------------------------------------
    def outputs(self) -> dict[str, np.ndarray | float]:
        """Ground truth at the current time (see the package docs for the keys and units)."""
        y = self._y
        ydot = self._accel(y, self._u)
        w = self._work
        R = _quat_to_matrix(y[dyn.Y_Q : dyn.Y_Q + 4])
        om = y[dyn.Y_W : dyn.Y_W + 3]
        v = y[dyn.Y_V : dyn.Y_V + 3]
        vdot = ydot[dyn.Y_V : dyn.Y_V + 3]
        if self.road.grade != 0.0:
            # the road frame is tilted from the level by the inclination a about y (the road rises along +x):
            # gravity in the road frame is -g (sin a, 0, cos a); attitude referred to the level frame
            a = self.road.inclination
            sf = vdot + np.cross(om, v) + self.params.gravity * (math.sin(a) * R[0, :] + math.cos(a) * R[2, :])
            R = np.array([[math.cos(a), 0.0, -math.sin(a)], [0.0, 1.0, 0.0], [math.sin(a), 0.0, math.cos(a)]]) @ R
        else:
            sf = vdot + np.cross(om, v) + self.params.gravity * R[2, :]
        wt = w[12]
        misc = w[5]
        axis = misc[:, MI_AX : MI_AX + 3]
        return {
            "t": float(self.t),
            "x": float(y[0]),
            "y": float(y[1]),
            "z": float(y[2]),
            "roll": float(math.atan2(R[2, 1], R[2, 2])),
            "pitch": float(-math.asin(max(-1.0, min(1.0, R[2, 0])))),
            "yaw": float(math.atan2(R[1, 0], R[0, 0])),
            "u": float(v[0]),
            "v": float(v[1]),
            "w": float(v[2]),
            "p": float(om[0]),
            "q": float(om[1]),
            "r": float(om[2]),
            "ax": float(sf[0]),
            "ay": float(sf[1]),
            "az": float(sf[2]),
            "omega": y[dyn.Y_OM : dyn.Y_OM + 4].copy(),
            "fx": wt[:, dyn.W_FX].copy(),
            "fy": wt[:, dyn.W_FY].copy(),
            "fz": wt[:, dyn.W_FZ].copy(),
            "wheel_torque": wt[:, dyn.W_TQ].copy(),
            "brake_torque": wt[:, dyn.W_TB].copy(),
            "brake_pedal": float(self._u[1]),
            "slip": wt[:, dyn.W_SLIP].copy(),
            "slip_angle": wt[:, dyn.W_ALPHA].copy(),
            "rolling_radius": wt[:, dyn.W_RE].copy(),
            "mu_road": wt[:, dyn.W_MU].copy(),
            "mu_max": wt[:, dyn.W_MUMAX].copy(),
            "steer_angle": np.arctan2(-axis[:2, 0], axis[:2, 1]),
            "susp_angle": y[dyn.Y_TH : dyn.Y_TH + 4].copy(),
            "spring_length": misc[:, MI_LSP].copy(),
            "wheel_centre_z": np.array([y[2] + R[2] @ w[1][i, B_WH] for i in range(4)]),
            **self._powertrain_outputs(),
        }

    def _powertrain_outputs(self) -> dict[str, float]:
        if self._gp[dyn.G_PT] < 0.5:
            return {}
        ps = self._work[31]
        return {"gear": float(self.gear), "engine_speed": float(ps[dyn.PS_WE]), "engine_torque": float(ps[dyn.PS_TE])}

    def tire_mu_curve(self, wheel: int, slip: np.ndarray) -> np.ndarray:
        """The true pure-longitudinal Fx/Fz(s) under ``wheel`` at its current load and road friction."""
        if not 0 <= int(wheel) < 4:
            raise ValueError(f"wheel must be 0..3 (FL, FR, RL, RR), got {wheel!r}")
        self._accel(self._y, self._u)
        wt = self._work[12]
        s = np.ascontiguousarray(slip, dtype=np.float64).ravel()
        return mu_curve(self._tp, float(wt[wheel, dyn.W_FZ]), float(wt[wheel, dyn.W_MU]), s)

    def total_energy(self) -> float:
        """Kinetic + gravitational + spring + tire potential energy (J)."""
        return float(dyn.total_energy(self._y, self._u, *self._args()))

    def accelerations(self, dense: bool = False) -> np.ndarray:
        """Generalised accelerations (14) at the current state and inputs, by the AB recursion or, with
        dense=True, by solving the assembled mass matrix (test reference)."""
        ydot = self._accel(self._y, self._u)
        if dense:
            return dyn.dense_accelerations(self._work)[0]
        return ydot[dyn.Y_W :].copy()

    def with_params(self, **changes) -> Hmmwv14:
        """A new simulator with some HmmwvParams fields replaced (same road, dt, integrator)."""
        return Hmmwv14(replace(self.params, **changes), self.road, self.dt, self.integrator)


Vehicle14 = Hmmwv14
"""The simulator class under a vehicle-neutral name (``Vehicle14("sedan")``)."""


def _pack_powertrain(p: HmmwvParams, gp: np.ndarray) -> None:
    """Powertrain and brake constants into the kernel's global array (dynamics.G_PT ...)."""
    gp[dyn.G_BRK] = p.brake_max_torque
    pt = p.powertrain
    if pt is None:
        gp[dyn.G_PT] = 0.0
        gp[dyn.G_FRAC : dyn.G_FRAC + 4] = 0.25
        return
    ng, nf, nz = pt.gear_ratios.size, pt.map_full.shape[0], pt.map_zero.shape[0]
    if not (1 <= ng <= dyn.MAXG and 2 <= nf <= dyn.MAXM and 2 <= nz <= dyn.MAXM):
        raise ValueError(f"powertrain: at most {dyn.MAXG} gears and 2..{dyn.MAXM} map points per engine map")
    for name, m in (("map_full_throttle", pt.map_full), ("map_zero_throttle", pt.map_zero)):
        if np.any(np.diff(m[:, 0]) <= 0):
            raise ValueError(f"powertrain.engine_simple_map_cpp.{name}: engine speeds must increase")
    if np.any(pt.gear_ratios <= 0) or pt.final_ratio <= 0:
        raise ValueError("powertrain: gear ratios and the final (conical) ratio must be > 0")
    gp[dyn.G_PT] = 1.0
    gp[dyn.G_FRAC : dyn.G_FRAC + 4] = pt.wheel_fraction
    gp[dyn.G_FINAL] = pt.final_ratio
    gp[dyn.G_NG] = ng
    gp[dyn.G_RATIO : dyn.G_RATIO + ng] = pt.gear_ratios
    gp[dyn.G_DOWN : dyn.G_DOWN + ng] = pt.shift_down
    gp[dyn.G_UP : dyn.G_UP + ng] = pt.shift_up
    for off_n, off, m in ((dyn.G_NF, dyn.G_MF, pt.map_full), (dyn.G_NZ, dyn.G_MZ, pt.map_zero)):
        gp[off_n] = m.shape[0]
        gp[off : off + m.shape[0]] = m[:, 0]
        gp[off + dyn.MAXM : off + dyn.MAXM + m.shape[0]] = m[:, 1]


def _euler_to_quat(roll: float, pitch: float, yaw: float) -> np.ndarray:
    cr, sr = math.cos(roll / 2), math.sin(roll / 2)
    cp, sp = math.cos(pitch / 2), math.sin(pitch / 2)
    cy, sy = math.cos(yaw / 2), math.sin(yaw / 2)
    return np.array(
        [
            cr * cp * cy + sr * sp * sy,
            sr * cp * cy - cr * sp * sy,
            cr * sp * cy + sr * cp * sy,
            cr * cp * sy - sr * sp * cy,
        ]
    )


def _quat_to_matrix(e: np.ndarray) -> np.ndarray:
    return np.array(dyn.quat_to_rot(e[0], e[1], e[2], e[3]))
