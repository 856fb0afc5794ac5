"""A synthetic drive for the segment / calibration-pipeline / model_calibrator tests (not a test module).

One continuous 8-DOF run with known parameters (``calibration_synthetic.TRUTH``): cruise, a straight throttle
ramp (longitudinal stage), a coast-down (rolling resistance), then a steering ramp at speed while coasting
(lateral), sampled at 100 Hz as the vehicle topics' records with the paper's Section 3.1 noise.
"""

from __future__ import annotations

import numpy as np
from calibration_synthetic import NOISE, TRUTH

from vehcal_ros.models.vehicle_8dof import STATE_INDEX, Simulator8Dof
from vehcal_ros.records import Controls, ImuSample, OdomSample, WheelSpeeds

RATE = 100.0
DURATION = 14.5
SPEED0 = 4.0
T_RAMP = (1.0, 3.0, 4.0, 5.0)     # throttle 0 -> THROTTLE (1-3 s), hold, -> 0 at 5 s
THROTTLE = 0.5
T_STEER = (10.0, 14.5)            # steering 0 -> STEER
STEER = 0.2


def drive_inputs(duration: float = DURATION, rate: float = RATE) -> tuple[np.ndarray, ...]:
    """(time, throttle, brake, steering) of the drive at ``rate``."""
    t = np.arange(int(round(duration * rate)) + 1) / rate
    a, b, c, d = T_RAMP
    thr = np.interp(t, [0, a, b, c, d, duration], [0, 0, THROTTLE, THROTTLE, 0, 0])
    steer = np.interp(t, [0, T_STEER[0], T_STEER[1], duration + 1], [0, 0, STEER, STEER])
    return t, thr, np.zeros_like(t), steer


def drive_states(params: dict | None = None, duration: float = DURATION) -> tuple[np.ndarray, np.ndarray]:
    """Noise-free (time, states (n, 12)) of the drive."""
    t, thr, brk, steer = drive_inputs(duration)
    x0 = np.zeros(12)
    x0[STATE_INDEX["u"]] = SPEED0
    r = 0.47 - 2097.85 * 9.81 / 4 / 326332.0
    for w in ("w_lf", "w_lr", "w_rf", "w_rr"):
        x0[STATE_INDEX[w]] = SPEED0 / r
    sim = Simulator8Dof(x0, t, thr, brk, steer, dt=0.005, output_dt=1.0 / RATE, n_out=t.size)
    return t, sim.run(params or TRUTH)


def drive_records(seed: int = 1, t0: float = 100.0, noise: bool = True, wheel_scale: float = 1.0,
                  duration: float = DURATION, states: tuple[np.ndarray, np.ndarray] | None = None) -> list:
    """Records (WheelSpeeds, ImuSample, OdomSample, Controls) of the drive in stamp order, stamps from ``t0``;
    ``states``: the (time, states) to record instead of :func:`drive_states` (same inputs)."""
    t, x = drive_states(duration=duration) if states is None else states
    _, thr, brk, steer = drive_inputs(duration)
    rng = np.random.default_rng(seed)

    def ch(name: str, state: str) -> np.ndarray:
        v = x[:, STATE_INDEX[state]].copy()
        return v + rng.normal(0.0, NOISE[name], v.shape) if noise else v

    u, v, yaw = ch("u", "u"), ch("v", "v"), ch("yaw_rate", "wz")
    roll, roll_rate = ch("roll", "phi"), ch("roll_rate", "wx")
    imu_yaw = ch("yaw_rate", "wz")
    wl = {w: ch(w, w) * wheel_scale for w in ("w_lf", "w_rf", "w_lr", "w_rr")}
    out = []
    for k, tk in enumerate(t + t0):
        tk = float(tk)
        out.append(WheelSpeeds(tk, np.array([wl["w_lf"][k], wl["w_rf"][k], wl["w_lr"][k], wl["w_rr"][k]])))
        out.append(ImuSample(tk, float(roll[k]), float(roll_rate[k]), float(imu_yaw[k]), 0.0, 0.0))
        out.append(OdomSample(tk, float(u[k]), float(v[k]), float(yaw[k])))
        out.append(Controls(tk, float(thr[k]), float(brk[k]), float(steer[k])))
    return out
