"""Which doubtful assumption of the fault matrix shows in signals the grip estimator already receives.

For the bags and descriptions of a ``grip_fault_matrix.py`` run (``--bag-dir`` kept), compute per row simple
consistency figures from the production topics only (wheel speeds with ECU torque, IMU, GNSS velocity,
controls) and the row's description; a figure departing from the clean row's names the doubtful input:

* ``F_icpt``, ``F_slope``: intercept (N) and slope of the least-squares line of the wheel forces sum(T / R_desc)
  against m_desc x a_GNSS (a_GNSS from the 1 s smoothed GNSS speed) on samples without brake and with
  throttle > 0.05, the IMU not used -- a torque offset moves the intercept by 4 x offset / R (the clean
  intercept is the drive's rolling resistance and drag); the slope is torque scale / (mass error): mass and
  torque scale are confounded here.
* ``ax_res``: mean IMU a_x minus d|v_GNSS|/dt on straight samples (|yaw rate| < 0.02 rad/s), m/s^2 -- an
  accelerometer bias, a pitch misalignment (g sin 1 deg = 0.17) or a grade (g x grade) shows here.
* ``gnss_grade``: mean v_up / |v_horizontal| (GNSS, speed > 5 m/s) -- the road grade itself, which tells a grade
  from an accelerometer bias.
* ``ay_ax``: slope of (IMU a_y - v yaw_rate) against IMU a_x -- a yaw misalignment of the IMU (-sin psi).
* ``imu_lag_ms``: the delay (ms, 1 ms grid, +-60 ms) that best fits the IMU yaw rate to the rear wheels' yaw
  rate (omega_rr - omega_rl) R_desc / track_rear in the lane changes -- the IMU's stamps late against the wheel
  speeds' (positive: the IMU lags).
* ``dw_sd``: SD of the sample-to-sample change of the front-left wheel speed at cruise (rad/s) -- an encoder's
  quantisation step (2 pi / (N T)) dwarfs the ~0.07 rad/s of the clean noise.
* ``yaw_gain``: slope of the IMU yaw rate against v delta_desc / L (delta_desc = steering ratio x command) in the
  lane changes -- 1 / (steering-ratio error) x the vehicle's understeer factor; relative to the clean row.

Usage:  python benchmarks/grip_fault_signatures.py --bag-dir DIR MATRIX.json [...] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from grip_fault_matrix import DESCRIPTIONS, ROW_ORDER  # noqa: E402

from vehcal_ros.io import bags  # noqa: E402
from vehcal_ros.records import Controls, GnssVelocity, ImuSample, WheelSpeeds  # noqa: E402
from vehcal_ros.vehicle.description import load_description  # noqa: E402


def _series(bag: Path) -> dict[str, np.ndarray]:
    """The production topics of ``bag`` as arrays (stamps s; SI units)."""
    ws_t, ws_w, ws_T, imu, gnss, ctl = [], [], [], [], [], []
    for _, rec in bags.read_bag(bag):
        if isinstance(rec, WheelSpeeds):
            ws_t.append(rec.t)
            ws_w.append(np.asarray(rec.omega, dtype=float))
            ws_T.append(np.asarray(rec.torque, dtype=float) if rec.torque is not None else np.full(4, np.nan))
        elif isinstance(rec, ImuSample):
            imu.append((rec.t, rec.ax, rec.ay, rec.yaw_rate))
        elif isinstance(rec, GnssVelocity):
            gnss.append((rec.t, rec.ve, rec.vn, rec.vu))
        elif isinstance(rec, Controls):
            ctl.append((rec.t, rec.throttle, rec.brake, rec.steering))
    return {"ws_t": np.array(ws_t), "ws_w": np.array(ws_w), "ws_T": np.array(ws_T), "imu": np.array(imu),
            "gnss": np.array(gnss), "ctl": np.array(ctl)}


def _slope(x: np.ndarray, y: np.ndarray) -> float:
    """Least-squares slope of y on x with an intercept (nan with fewer than 10 points)."""
    if len(x) < 10:
        return math.nan
    return float(np.polyfit(x, y, 1)[0])


def signatures(series: dict[str, np.ndarray], description: str) -> dict[str, float]:
    """The consistency figures of the module docstring for a bag's ``series`` read with ``description``."""
    d = load_description(description)
    s = series
    rf, rr = d.rolling_radius_at(*d.static_wheel_loads())
    radius = np.array([rf, rf, rr, rr])
    g = s["gnss"]
    tg = g[:, 0]
    vh = np.hypot(g[:, 1], g[:, 2])
    vs = np.convolve(vh, np.ones(11) / 11.0, mode="same")     # 1 s smoothing at 10 Hz
    ag = np.gradient(vs, tg)                                  # m/s^2, GNSS along-track acceleration
    t = s["imu"][:, 0]
    ax, ay, yaw = s["imu"][:, 1], s["imu"][:, 2], s["imu"][:, 3]
    ct = s["ctl"]
    thr = np.interp(tg, ct[:, 0], ct[:, 1])
    brk = np.interp(tg, ct[:, 0], ct[:, 2])
    steer = np.interp(t, ct[:, 0], ct[:, 3])
    torque = np.array([np.interp(tg, s["ws_t"], s["ws_T"][:, i]) for i in range(4)]).T
    out: dict[str, float] = {}
    drive = (thr > 0.05) & (brk == 0.0) & (vh > 3.0)
    drive[:6] = drive[-6:] = False                           # the smoothing's edges
    if drive.sum() >= 10:
        slope, icpt = np.polyfit(d.total_mass * ag[drive], (torque[drive] / radius).sum(axis=1), 1)
        out["F_icpt"], out["F_slope"] = float(icpt), float(slope)
    else:
        out["F_icpt"] = out["F_slope"] = math.nan
    v_imu = np.interp(t, tg, vh)
    ag_imu = np.interp(t, tg, ag)
    straight = (np.abs(yaw) < 0.02) & (v_imu > 3.0)
    out["ax_res"] = float(np.mean(ax[straight] - ag_imu[straight]))
    moving = vh > 5.0
    out["gnss_grade"] = float(np.mean(g[moving, 3] / vh[moving]))
    fast = v_imu > 3.0
    out["ay_ax"] = _slope(ax[fast], ay[fast] - v_imu[fast] * yaw[fast])
    # the IMU yaw rate against the rear wheels' yaw rate on a 1 ms grid, in the lane changes
    grid = np.arange(max(t[0], s["ws_t"][0]) + 1.0, min(t[-1], s["ws_t"][-1]) - 1.0, 0.001)
    w = s["ws_w"]
    r_wheel = np.interp(grid, s["ws_t"], (w[:, 3] - w[:, 2]) * rr / d.cr)
    r_imu = np.interp(grid, t, yaw)
    active = np.abs(np.interp(grid, t, steer)) > 0.003
    lags = np.arange(-60, 61)
    sse = []
    for k in lags:   # IMU sample at grid[i + k] against the wheels at grid[i]
        lo, hi = max(0, -k), len(grid) - max(0, k)
        m = active[lo:hi]
        sse.append(float(np.sum((r_imu[lo + k:hi + k][m] - r_wheel[lo:hi][m]) ** 2)))
    out["imu_lag_ms"] = float(lags[int(np.argmin(sse))])
    cruise = np.abs(np.interp(s["ws_t"], tg, ag)) < 0.1
    dw = np.diff(w[:, 0])[cruise[1:]]
    out["dw_sd"] = float(np.std(dw))
    lane = (np.abs(steer) > 0.003) & (v_imu > 5.0)
    out["yaw_gain"] = _slope(v_imu[lane] * d.steer_gain * steer[lane] / d.wheelbase, yaw[lane])
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("matrix", nargs="+", help="JSON outputs of grip_fault_matrix.py")
    ap.add_argument("--bag-dir", required=True, help="the --bag-dir of those runs")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    root = Path(args.bag_dir)
    rows = [r for f in args.matrix for r in json.loads(Path(f).read_text())["rows"]]
    order = {name: i for i, name in enumerate(ROW_ORDER)}
    rows.sort(key=lambda r: (r["vehicle"], order.get(r["row"], 99), r["seed"]))
    keys = ("F_icpt", "F_slope", "ax_res", "gnss_grade", "ay_ax", "imu_lag_ms", "dw_sd", "yaw_gain")
    print("| row | vehicle | k front | k rear | " + " | ".join(keys) + " |")
    print("|---" * (4 + len(keys)) + "|")
    results = []
    cache: dict[Path, dict[str, np.ndarray]] = {}
    for r in rows:
        bag = root / (f"{r['vehicle']}_{r['row']}_{r['seed']}" if r["fault"] else f"{r['vehicle']}_clean_{r['seed']}")
        desc = r["description"] if r["description"] else DESCRIPTIONS[r["vehicle"]]
        if bag not in cache:
            cache.clear()   # rows come grouped by vehicle; keep the clean bag's series across description rows
            cache[bag] = _series(bag)
        sig = signatures(cache[bag], desc)
        k = r["radius"]["k"]
        print(f"| {r['row']} | {r['vehicle']} | {k[0]:.4f} | {k[1]:.4f} | " + " | ".join(
            f"{sig[x]:.0f}" if x == "imu_lag_ms" else f"{sig[x]:.4g}" for x in keys) + " |", flush=True)
        results.append({"row": r["row"], "vehicle": r["vehicle"], "seed": r["seed"], "k": k, **sig})
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
