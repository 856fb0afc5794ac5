"""How long the GNSS/IMU speed reference's error persists: its autocorrelation, simulated and from the filter's
steady state.

The slips' speed reference (vehcal_ros/estimation/sensing/speed_reference.py, ``GnssImuSpeed``) carries its speed error
from one GNSS fix to the next by integrating the IMU, and its offset state pulls it back. This script runs the
filter class itself on a synthetic drive at constant speed (IMU 100 Hz with the default white noise and an offset
walking at the default ``bias_walk``, GNSS 10 Hz with 0.05 m/s per axis, 0.1 s late) and prints the correlation
of its released speed error k seconds apart, at the fixes' stamps and for 0.1 s block means (what a friction
sample sees), beside the closed loop of the steady-state filter: A = (I - K H) F over one GNSS period, K from the
discrete algebraic Riccati equation, P the stationary error covariance, correlation (A^k P)_uu / P_uu.

    .venv/bin/python benchmarks/speed_reference_error.py [--seconds 1500] [--seed 3]
"""

from __future__ import annotations

import argparse
import math
import os
import time

import numpy as np
from scipy.linalg import solve_discrete_are

from vehcal_ros.estimation.sensing.speed_reference import GnssImuSpeed, SpeedReferenceConfig
from vehcal_ros.records import GnssVelocity, ImuSample

LAGS_S = (0.1, 0.5, 1.0, 2.0, 3.0, 4.0)


def closed_loop(cfg: SpeedReferenceConfig, period: float = 0.1, imu_period: float = 0.01
                ) -> tuple[np.ndarray, np.ndarray]:
    """(A, P): the steady-state filter's error transition over one GNSS period and its covariance after a fix."""
    F = np.array([[1.0, -period], [0.0, 1.0]])
    Q = np.diag([cfg.accel_std ** 2 * imu_period * period, cfg.bias_walk ** 2 * period])
    H = np.array([[1.0, 0.0]])
    R = np.array([[cfg.gnss_std ** 2]])
    prior = solve_discrete_are(F.T, H.T, Q, R)          # the covariance before a fix
    K = prior @ H.T / (prior[0, 0] + R[0, 0])
    return (np.eye(2) - K @ H) @ F, (np.eye(2) - K @ H) @ prior


def simulate(cfg: SpeedReferenceConfig, seconds: float, seed: int, speed: float = 10.0
             ) -> tuple[np.ndarray, np.ndarray, float]:
    """(error at each fix's stamp, error per 0.1 s block mean, the filter's mean stated P_uu), after 30 s. IMU
    samples every 0.01 s (step k), a fix at every tenth step, delivered 0.1 s late."""
    rng = np.random.default_rng(seed)
    f = GnssImuSpeed(cfg)
    n = int(round(seconds / 0.01))
    ax = 0.05 * rng.standard_normal(n) + np.cumsum(cfg.bias_walk * math.sqrt(0.01) * rng.standard_normal(n))
    released: dict[int, tuple[float, float]] = {}   # IMU step -> (u, u_var)
    pending: list[GnssVelocity] = []
    for k in range(n):
        t = round(k * 0.01, 6)
        out = f.add_imu(ImuSample(t=t, roll=0.0, roll_rate=0.0, yaw_rate=0.0, ax=float(ax[k]), ay=0.0))
        if k % 10 == 0:
            pending.append(GnssVelocity(t=t, ve=speed + 0.05 * rng.standard_normal(), vn=0.05 * rng.standard_normal()))
        while pending and pending[0].t <= t - 0.1 + 1e-9:
            out += f.add_gnss(pending.pop(0))
        released.update((round(r.t * 100.0), (r.u, r.u_var)) for r in out)
    steps = np.array(sorted(k for k in released if k >= 3000))
    err = np.array([released[k][0] for k in steps]) - speed
    block = (steps - steps[0]) // 10
    means = np.bincount(block, err) / np.bincount(block)
    return err[steps % 10 == 0], means, float(np.mean([released[k][1] for k in steps]))


def acf(x: np.ndarray, lag: int) -> float:
    x = x - x.mean()
    return float(np.corrcoef(x[:-lag], x[lag:])[0, 1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=1500.0)
    ap.add_argument("--seed", type=int, default=3)
    args = ap.parse_args()
    cfg = SpeedReferenceConfig(rear_distance=1.5)
    load = os.getloadavg()[0]
    A, P = closed_loop(cfg)
    at_fix, means, p_uu = simulate(cfg, args.seconds, args.seed)
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    print(f"{stamp}, load {load:.1f}; {args.seconds:.0f} s, seed {args.seed}")
    print(f"speed error SD: at the fixes {at_fix.std():.4f} m/s, block means {means.std():.4f}, "
          f"stated sqrt(P_uu) {math.sqrt(p_uu):.4f}, steady state {math.sqrt(P[0, 0]):.4f}")
    print("lag s   closed loop (A^k P)_uu   filter at fixes   filter 0.1 s blocks   exponential (slowest eigenvalue)")
    lam = max(abs(np.linalg.eigvals(A)))
    for lag_s in LAGS_S:
        k = int(round(lag_s / 0.1))
        model = (np.linalg.matrix_power(A, k) @ P)[0, 0] / P[0, 0]
        print(f"{lag_s:5.1f}   {model:22.3f}   {acf(at_fix, k):15.3f}   {acf(means, k):19.3f}   {lam ** k:10.3f}")


if __name__ == "__main__":
    main()
