"""Why the coast-down's rr predicts the held-out Chrono test 2 worse than the paper's rr (diagnostic, no sampler).

Each candidate cause is measured on the noise-free Chrono data (benchmarks/chrono_holdout.py for the files):

1. the coast-down window's least-squares rr (= the Gaussian likelihood's maximum, Eq. 15 of the 8-DOF paper with
   a constant sigma_u) under each candidate change: the window (rows 560-1059 vs earlier/later starts), the
   Cx held fixed (nominal vs calibrated), the initial wheel speeds (measured vs free rolling, w = u / r), the
   description's rotating inertia (``hmmwv``: Jw 11 kg m^2; ``hmmwv_chrono``: 17.46), and the u noise
   (five seeds of the paper's sigma_u = 0.1 m/s);
2. aerodynamic or driveline drag: the coast-down deceleration against u^2, and the spindle torque of the data's
   ``sp_tor`` column while coasting (a drag torque would show as a speed-dependent deceleration; a rotating
   inertia behind the spindle as ``sp_tor = J w_dot``);
3. test 2 (held out): u RMSE against rr, the u error at the end of the launch (3.5 s) and its drift over the
   coast (4.0 to 9.5 s) for the calibrated and the paper's parameters;
4. test 2's wheel-speed columns against u: the ratio w r / u before and after the vehicle has yawed;
5. the yaw angle (the one channel where the calibrated model loses to the priors): the road-wheel angle per unit
   steering input that Chrono's data record (``toe_in_avg``) in the lateral window and in test 2, against the
   description's fixed ratio; with ``--steer-experiment`` also the lateral stage calibrated on the recorded
   road-wheel angle (4 x 500, a description with ``steering.source: measured``) and test 2 run on it.

Run: ``PYTHONPATH=. .venv/bin/python benchmarks/diag_rr_holdout.py [--steer-experiment]
[--out benchmarks/results/diag_rr_holdout.md]``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
from scipy.optimize import minimize_scalar

sys.path.insert(0, str(Path(__file__).resolve().parent))
from chrono_holdout import PAPER_MEANS, chrono_dir, read_chrono, test2_table  # noqa: E402

from vehcal_ros.estimation.calibration.holdout import holdout_rmse  # noqa: E402
from vehcal_ros.models.vehicle_8dof import STATE_INDEX, Simulator8Dof, VehicleConstants  # noqa: E402

CALIBRATED_HMMWV = {"Cxf": 11079.0, "Cxr": 10624.0, "Cyf": 43442.0, "Cyr": 51720.0, "kphi_f": 33954.0,
                    "kphi_r": 28736.0, "bphi_f": 3846.0, "bphi_r": 3846.0, "rr": 0.01172}
"""The default path's calibrated means (``hmmwv``, the paper's stage order, chained with ``--model``)."""
CALIBRATED_CHRONO = {"Cxf": 12326.0, "Cxr": 11822.0, "Cyf": 43827.0, "Cyr": 53190.0, "kphi_f": 37639.0,
                     "kphi_r": 25994.0, "bphi_f": 3806.5, "bphi_r": 3806.5, "rr": 0.012301}
"""``hmmwv_chrono``, coast-down first, chained (benchmarks/results/chrono_table_rr_first.md)."""


def coast_window(first: int = 560, last: int = 1059) -> dict[str, np.ndarray]:
    """Rows ``first..last`` of rr_1.csv with its driver inputs (the paper's window: 560-1059)."""
    col = read_chrono(chrono_dir() / "rr_1.csv")
    drv = np.loadtxt(chrono_dir() / "rr_test.txt")
    sl = slice(first, last + 1)
    t = col["time"][sl]
    return {"t": t, "throttle": np.interp(t, drv[:, 0], drv[:, 2]), "brake": np.interp(t, drv[:, 0], drv[:, 3]),
            "steering": np.interp(t, drv[:, 0], drv[:, 1]), "u": col["vx"][sl], "v": col["vy"][sl],
            "yaw_rate": col["yaw_rate"][sl], "roll": col["roll"][sl], "roll_rate": col["roll_rate"][sl],
            "w_lf": col["wlf"][sl], "w_rf": col["wrf"][sl], "w_lr": col["wlr"][sl], "w_rr": col["wrr"][sl]}


def coast_sim(win: dict[str, np.ndarray], vehicle: str, free_rolling: bool = False) -> Simulator8Dof:
    """The rolling-resistance stage's simulator on ``win`` (dt 10 ms, the stage's step)."""
    c = VehicleConstants.from_description(vehicle)
    x0 = {"x": 0.0, "y": 0.0, "psi": 0.0, "u": win["u"][0], "v": win["v"][0], "wz": win["yaw_rate"][0],
          "phi": win["roll"][0], "wx": win["roll_rate"][0]}
    for w in ("w_lf", "w_rf", "w_lr", "w_rr"):
        x0[w] = win[w][0]
    if free_rolling:   # w = u / r with r = r0 - Fz/kt at the static load
        fz_f, fz_r = c.static_wheel_loads()
        for w, fz, kt in (("w_lf", fz_f, c.ktf), ("w_rf", fz_f, c.ktf), ("w_lr", fz_r, c.ktr), ("w_rr", fz_r, c.ktr)):
            x0[w] = win["u"][0] / (c.r0 - fz / kt)
    t = win["t"] - win["t"][0]
    return Simulator8Dof(x0, t, win["throttle"], win["brake"], win["steering"], dt=0.01, output_dt=0.01,
                         n_out=t.size, constants=c)


def best_rr(sim: Simulator8Dof, u: np.ndarray, params: dict[str, float]) -> float:
    """Least-squares rr of u on the window (1-D, bounded by the prior [0.005, 0.03])."""
    iu = STATE_INDEX["u"]

    def sse(rr: float) -> float:
        return float(np.sum((sim.run({**params, "rr": rr})[:, iu] - u) ** 2))
    return float(minimize_scalar(sse, bounds=(0.005, 0.03), method="bounded", options={"xatol": 1e-6}).x)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "diag_rr_holdout.md"))
    ap.add_argument("--steer-experiment", action="store_true",
                    help="also calibrate the lateral stage on the recorded road-wheel angle (~1 CPU min)")
    args = ap.parse_args()
    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    lines = [f"Run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average {load0:.1f} (2 cores, "
             "shared). Noise-free Chrono data unless stated.", ""]

    # 1. the coast-down's rr under each candidate change
    nominal = {"Cxf": 10300.0, "Cxr": 10300.0}
    lines += ["## 1. Least-squares rr of the coast-down (rr_1.csv), per candidate change", "",
              "| candidate | description | rows | held Cx | initial w | rr |", "|---|---|---|---|---|---|"]
    base = coast_window()
    cases = [("the rolling-resistance stage as run", "hmmwv", (560, 1059), nominal, False),
             ("window: the whole coast", "hmmwv", (470, 1059), nominal, False),
             ("window: its second half", "hmmwv", (810, 1059), nominal, False),
             ("held Cx: the calibrated", "hmmwv", (560, 1059), CALIBRATED_HMMWV, False),
             ("held Cx: the paper's", "hmmwv", (560, 1059), PAPER_MEANS, False),
             ("initial state: free-rolling wheels", "hmmwv", (560, 1059), nominal, True),
             ("rotating inertia: Chrono's 17.46 kg m^2", "hmmwv_chrono", (560, 1059), nominal, False)]
    for label, veh, rows, held, free in cases:
        win = base if rows == (560, 1059) else coast_window(*rows)
        p = {k: held[k] for k in ("Cxf", "Cxr")}
        rr = best_rr(coast_sim(win, veh, free), win["u"], p)
        lines.append(f"| {label} | {veh} | {rows[0]}-{rows[1]} | {p['Cxf']:.0f} / {p['Cxr']:.0f} | "
                     f"{'u / r' if free else 'measured'} | {rr:.5f} |")
    sim = coast_sim(base, "hmmwv")
    rng_rr = []
    for seed in range(5):
        noisy = base["u"] + np.random.default_rng(seed).normal(0.0, 0.1, base["u"].size)
        rng_rr.append(best_rr(sim, noisy, nominal))
    lines += ["", f"u noise (sigma_u 0.1 m/s, seeds 0-4, white Gaussian as the paper adds it): least-squares rr "
              f"{np.mean(rng_rr):.5f} +- {np.std(rng_rr, ddof=1):.5f} (SD across seeds); the iid Gaussian "
              "likelihood is the right noise model for this added noise, so it is not a bias source.", ""]

    # 2. aerodynamic / driveline drag
    col = read_chrono(chrono_dir() / "rr_1.csv")
    t, u = col["time"], col["vx"]
    sel = (t >= 5.0) & (t <= 10.5)
    a = np.gradient(u, t)[sel]
    coef = np.polyfit(u[sel] ** 2, a, 1)
    wdot = np.gradient(col["wlf"], t)[sel]
    j_spindle = np.median(col["sp_tor"][sel] / -wdot)
    change = abs(coef[0]) * (u[sel].max() ** 2 - u[sel].min() ** 2)
    lines += ["## 2. Drag: deceleration while coasting (rr_1.csv, 5.0-10.5 s)", "",
              f"* du/dt = {coef[1]:.4f} {coef[0]:+.2e} u^2 (u {u[sel].min():.2f}-{u[sel].max():.2f} m/s): a drag "
              f"term changes the deceleration by {change:.4f} m/s^2 over the window, "
              f"{100 * change / abs(coef[1]):.2f} % of the deceleration (a HMMWV's Cd A = 2.5 m^2 would give "
              f"{100 * 0.6 * 2.5 / 2613.5 * (u[sel].max() ** 2 - u[sel].min() ** 2) / abs(coef[1]):.0f} %): no "
              "aerodynamic drag (as the paper states) and no speed-dependent driveline drag.",
              f"* spindle torque while coasting: sp_tor / (-dw_lf/dt) = {j_spindle:.2f} kg m^2 (median): the "
              "torque that decelerates a rotating inertia behind the spindle (Chrono's 4WD shafts driveline: "
              "((0.5 + 0.5 + 0.5) / 0.2^2 + 2 x 0.6) / 4 = 9.675 kg m^2 per wheel), which the 8-DOF model with "
              "Jw = 11 (the paper's; Chrono's wheel + tire + spindle + axle alone are 7.79) leaves out.", ""]

    # 3. test 2: u against rr, launch error and coast drift
    tab = test2_table()
    lines += ["## 3. Held-out test 2: u", "",
              "| parameters | description | u RMSE | u error at 3.5 s (launch end) | drift of the u error "
              "4.0-9.5 s (coast with steering) | test 2's own best rr |", "|---|---|---|---|---|---|"]
    for label, veh, params in (("calibrated (paper order)", "hmmwv", CALIBRATED_HMMWV),
                               ("paper's means", "hmmwv", PAPER_MEANS),
                               ("calibrated (coast-down first)", "hmmwv_chrono", CALIBRATED_CHRONO),
                               ("paper's means", "hmmwv_chrono", PAPER_MEANS)):
        err = u_error(tab, params, veh)
        k = {s: int(round((s - 1.0) / 0.01)) for s in (3.5, 4.0, 9.5)}

        def u_rmse(rr: float, veh: str = veh, params: dict = params) -> float:
            return holdout_rmse(tab, {**params, "rr": rr}, constants=VehicleConstants.from_description(veh),
                                channels=("u",))["u"]
        best = minimize_scalar(u_rmse, bounds=(0.005, 0.03), method="bounded", options={"xatol": 1e-5}).x
        lines.append(f"| {label}, rr {params['rr']:.5f} | {veh} | {u_rmse(params['rr']):.4f} | "
                     f"{err[k[3.5]]:+.3f} | {err[k[9.5]] - err[k[4.0]]:+.3f} | {best:.4f} |")

    # 3b. stage order: the longitudinal stage's Cx with rr held vs calibrated first
    lines += ["", "Stage order: the throttle ramp's maximum-likelihood Cx (acc.csv rows 100-849; u, w_lf, w_lr, one "
              "Gaussian sigma per channel profiled out, as the stage samples it: maximise -n/2 sum_c log(RMS_c^2 + "
              "s_c^2), s = the paper's added noise 0.1, 1, 1), "
              "with rr held at the nominal 0.0175 (the paper's order) or at the coast-down's (calibrated first), "
              "and test 2's u RMSE with those Cx, the coast-down's rr and the paper's lateral means:", "",
              "| description | rr held in the longitudinal fit | Cxf, Cxr | RMS u, w_lf, w_lr | test-2 u RMSE |",
              "|---|---|---|---|---|"]
    for veh, rr_coast in (("hmmwv", 0.01166), ("hmmwv_chrono", 0.01218)):
        for rr_held in (0.0175, rr_coast):
            cx, res = fit_cx(veh, rr_held)
            p = {**PAPER_MEANS, "Cxf": cx[0], "Cxr": cx[1], "rr": rr_coast}
            u_hold = holdout_rmse(tab, p, constants=VehicleConstants.from_description(veh), channels=("u",))["u"]
            lines.append(f"| {veh} | {rr_held:.5f} | {cx[0]:.0f}, {cx[1]:.0f} | {res[0]:.3f}, {res[1]:.2f}, "
                         f"{res[2]:.2f} | {u_hold:.4f} |")

    # 4. wheel-speed columns
    col2 = read_chrono(chrono_dir() / "test_2.csv")
    lines += ["", "## 4. Held-out test 2: what the wheel-speed columns measure", "",
              "Ratio w_lr r / u (r = 0.4504 m, the 8-DOF rolling radius at the static load) against the yaw "
              "angle; the straight coast of rr_1.csv (same speeds, psi = 0) gives "
              f"{np.median(col['wlr'][sel] * 0.4504 / u[sel]):.4f}.", "",
              "| t s | psi rad | steering | w_lr r / u | (w_lr r / u) / cos(psi) |", "|---|---|---|---|---|"]
    for ts in (3.75, 5.0, 6.75, 8.0, 9.0, 9.25, 9.5):
        i = int(round(ts * 100))
        psi = col2["yaw"][i] - col2["yaw"][0]
        ratio = col2["wlr"][i] * 0.4504 / col2["vx"][i]
        lines.append(f"| {ts:.2f} | {psi:+.3f} | {col2['Steering_input'][i]:+.3f} | {ratio:.4f} | "
                     f"{ratio / np.cos(psi):.4f} |")
    lines += steering_section(tab, args.steer_experiment)
    lines += ["", f"Wall {time.perf_counter() - t0:.0f} s, load average {load0:.1f} -> {os.getloadavg()[0]:.1f}.",
              ""]
    text = "\n".join(lines)
    Path(args.out).write_text(text)
    print(text)


def steering_section(tab: dict[str, np.ndarray], experiment: bool) -> list[str]:
    """Section 5: Chrono's road-wheel angle per unit steering input against the lateral acceleration."""
    from vehcal_ros.vehicle.description import load_description

    ratio = load_description("hmmwv_chrono").steer_gain
    out = ["", "## 5. Held-out test 2: the yaw angle and the steering ratio", "",
           f"Road-wheel angle per unit steering input recorded by Chrono (-toe_in_avg / Steering_input, rad) against "
           f"the description's fixed {ratio:.4f}; lateral acceleration u x yaw rate:", "",
           "| run | t s | steering | road-wheel angle / steering | u yaw_rate m/s^2 |", "|---|---|---|---|---|"]
    for f, rows in (("simp_ramp.csv (lateral window)", (780, 900, 1020, 1065)),
                    ("test_2.csv (held out)", (420, 600, 660, 780, 840))):
        col = read_chrono(chrono_dir() / f.split()[0])
        for i in rows:
            s = col["Steering_input"][i]
            out.append(f"| {f} | {col['time'][i]:.2f} | {s:+.3f} | {-col['toe_in_avg'][i] / s:.4f} | "
                       f"{col['vx'][i] * col['yaw_rate'][i]:+.2f} |")
    if not experiment:
        return out
    from dataclasses import replace

    from bench_chrono_holdout_seeds import NOISE

    from vehcal_ros.estimation.calibration.fit import Segment, calibrate_stage

    desc = Path(__file__).resolve().parents[1] / "config" / "vehicles" / "hmmwv_chrono.yaml"
    text = desc.read_text().replace("  source: ratio ", "  source: measured  # ").replace("  ratio: 0.65", "  # 0.65")
    measured = Path(os.environ.get("TMPDIR", "/tmp")) / "hmmwv_chrono_measured_steering.yaml"
    measured.write_text(text.replace("name: hmmwv_chrono", "name: hmmwv_chrono_measured_steering"))
    col = read_chrono(chrono_dir() / "simp_ramp.csv")
    seg = Segment.from_chrono(chrono_dir() / "simp_ramp.csv", chrono_dir() / "ramp_steer.txt", 700, 1069)
    seg = replace(seg.with_noise(NOISE, 1), steering=-col["toe_in_avg"][700:1070])
    prev = {k: CALIBRATED_CHRONO[k] for k in ("Cxf", "Cxr", "rr")}
    res = calibrate_stage(seg, "lateral", previous=prev, vehicle=str(measured), n_chains=4, n_draws=500, seed=2)
    p = {**prev, **res.posterior_means()}
    t2 = dict(tab)
    t2["steering"] = -read_chrono(chrono_dir() / "test_2.csv")["toe_in_avg"][: tab["t"].size]
    ratio_fixed = holdout_rmse(tab, CALIBRATED_CHRONO, constants=VehicleConstants.from_description("hmmwv_chrono"))
    on_angle = holdout_rmse(t2, p, constants=VehicleConstants.from_description(str(measured)))
    out += ["", "Lateral stage on the recorded road-wheel angle (noise seed 1, 4 x 500, Cx and rr of the chain): "
            f"Cyf {p['Cyf']:.0f}, Cyr {p['Cyr']:.0f}, kphi_f {p['kphi_f']:.0f}, kphi_r {p['kphi_r']:.0f}, bphi "
            f"{p['bphi_f'] + p['bphi_r']:.0f} (converged {res.converged}); test 2 on the recorded angle: psi "
            f"{on_angle['psi']:.4f}, yaw rate {on_angle['yaw_rate']:.4f}, v {on_angle['v']:.4f} (fixed ratio, "
            f"the chain's means: {ratio_fixed['psi']:.4f}, {ratio_fixed['yaw_rate']:.4f}, {ratio_fixed['v']:.4f})."]
    return out


def fit_cx(vehicle: str, rr: float) -> tuple[np.ndarray, np.ndarray]:
    """Maximum-likelihood (Cxf, Cxr) of the longitudinal window with ``rr`` held, each channel's sigma profiled
    out (Gaussian, Eq. 15) on the noise-free data plus the expected added noise; (Cx, RMS of u, w_lf, w_lr
    residuals against the noise-free data)."""
    from scipy.optimize import minimize

    col = read_chrono(chrono_dir() / "acc.csv")
    drv = np.loadtxt(chrono_dir() / "acc_test.txt")
    sl = slice(100, 850)
    t = col["time"][sl]
    x0 = {"x": 0.0, "y": 0.0, "psi": 0.0, "u": col["vx"][100], "v": col["vy"][100], "wz": col["yaw_rate"][100],
          "phi": col["roll"][100], "wx": col["roll_rate"][100], "w_lf": col["wlf"][100], "w_rf": col["wrf"][100],
          "w_lr": col["wlr"][100], "w_rr": col["wrr"][100]}
    sim = Simulator8Dof(x0, t - t[0], np.interp(t, drv[:, 0], drv[:, 2]), np.interp(t, drv[:, 0], drv[:, 3]),
                        np.interp(t, drv[:, 0], drv[:, 1]), dt=0.005, output_dt=0.01, n_out=t.size,
                        constants=VehicleConstants.from_description(vehicle))
    held = {"Cyf": 50000.0, "Cyr": 50000.0, "kphi_f": 37500.0, "kphi_r": 37500.0, "bphi_f": 15000.0,
            "bphi_r": 15000.0, "rr": rr}
    idx = [STATE_INDEX[k] for k in ("u", "w_lf", "w_lr")]
    data = np.column_stack([col["vx"][sl], col["wlf"][sl], col["wlr"][sl]])

    def rms(z: np.ndarray) -> np.ndarray:
        x = sim.run({**held, "Cxf": 1e4 * z[0], "Cxr": 1e4 * z[1]})[:, idx]
        return np.sqrt(np.mean((x - data) ** 2, axis=0))

    starts = [np.array([c, c]) for c in (0.6, 0.9, 1.2, 1.8)]
    noise = np.array([0.1, 1.0, 1.0])   # the added sensor noise: E[RMS^2] on noisy data = RMS^2 + noise^2
    fits = [minimize(lambda z: float(np.sum(np.log(rms(z) ** 2 + noise ** 2))), z0, method="Nelder-Mead",
                     options={"xatol": 1e-4, "fatol": 1e-9}) for z0 in starts]
    best = min(fits, key=lambda f: f.fun)
    return 1e4 * best.x, rms(best.x)


def u_error(tab: dict[str, np.ndarray], params: dict[str, float], vehicle: str) -> np.ndarray:
    """Model minus data u (m/s) on test 2 from 1.0 s, 10 ms samples."""
    t = tab["t"]
    keep = t >= 1.0 - 1e-9
    tt = t[keep]
    x0 = {"x": 0.0, "y": 0.0, "psi": 0.0, "u": tab["u"][keep][0], "v": tab["v"][keep][0],
          "wz": tab["yaw_rate"][keep][0], "phi": tab["roll"][keep][0], "wx": tab["roll_rate"][keep][0]}
    for w in ("w_lf", "w_rf", "w_lr", "w_rr"):
        x0[w] = tab[w][keep][0]
    sim = Simulator8Dof(x0, tt - tt[0], tab["throttle"][keep], tab["brake"][keep], tab["steering"][keep],
                        dt=0.005, output_dt=0.01, n_out=tt.size, constants=VehicleConstants.from_description(vehicle))
    return sim.run(dict(params))[:, STATE_INDEX["u"]] - tab["u"][keep]


if __name__ == "__main__":
    main()
