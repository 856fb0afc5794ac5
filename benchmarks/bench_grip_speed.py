"""Grip-fit speed at the live settings, per scope, on one core.

The grip_estimator's defaults (config/estimate.yaml): 8 chains, n_steps 40 000 extended in 20 000-step blocks up
to max_steps 120 000 until split R-hat <= 1.01 and bulk/tail ESS >= 400 (B..s_v, sigma, mu_max), thin 20, 20 ML
starts (cold) or one warm-start TRF fit, 100 samples per fit (max_fit_points). One core: NUMBA_NUM_THREADS=1, set
here before numba is imported. Reported: CPU time (process_time: what one uncontended core needs; wall time on a
shared machine is inflated by the load, which is printed) of a cold fit, a warm-started fit (the node's steady
state) and the worst case (all 120 000 steps), for the paper's low-excitation data and for live-like block
samples with slip variances. A node with scope ``axle`` runs two such fits per cycle (fit_period 5 s).

    .venv/bin/python benchmarks/bench_grip_speed.py [--repeats 3]
"""

from __future__ import annotations

import argparse  # noqa: E402
import os
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))

TRUE_THETA = np.array([15.4, 1.60, 0.871, -1.09, 0.0, 0.0])
LIVE = dict(n_chains=8, n_steps=40_000, max_steps=120_000, n_ml_starts=20, max_peak_slip=0.15,
            keep_negative_slip=True)


def datasets() -> dict[str, dict]:
    from bench_grip_sbc import simulate

    from vehcal_ros.models.pacejka import mf_curve, slip_at_friction

    rng = np.random.default_rng(7)
    out = {}
    for k in range(2):
        s = rng.uniform(0, slip_at_friction(TRUE_THETA, 0.3), 100)
        out[f"paper mu<=0.3 #{k}"] = {"slip": s, "mu": mf_curve(s, TRUE_THETA) + 0.0253 * rng.standard_normal(100)}
        out[f"live blocks #{k}"] = simulate("live_latent", TRUE_THETA, rng)
    return out


def cpu_fit(cfg, d: dict, warm=None):
    from vehcal_ros.estimation.grip.fit import GripEstimator

    c0, w0 = time.process_time(), time.perf_counter()
    e = GripEstimator(cfg).fit(d["slip"], d["mu"], slip_var=d.get("slip_var"), warm_start=warm)
    return time.process_time() - c0, time.perf_counter() - w0, e


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    from vehcal_ros.estimation.grip.fit import GripConfig

    load0 = os.getloadavg()
    data = datasets()
    cpu_fit(GripConfig.paper_case(n_steps=400, max_steps=400), data["paper mu<=0.3 #0"])  # compile / load the caches
    rows = []
    for name, d in data.items():
        cold, warm, worst = [], [], []
        for r in range(args.repeats):
            c, w, e = cpu_fit(GripConfig.paper_case(seed=r, **LIVE), d)
            cold.append((c, w, e.n_steps_used, e.converged, e.elapsed_ml_s))
            c2, w2, e2 = cpu_fit(GripConfig.paper_case(seed=100 + r, **LIVE), d, warm=e)
            warm.append((c2, w2, e2.n_steps_used, e2.converged, e2.elapsed_ml_s))
            c3, w3, _ = cpu_fit(GripConfig.paper_case(seed=r, **{**LIVE, "n_steps": 120_000}), d)
            worst.append((c3, w3))
        rows.append((name, cold, warm, worst))
    print(f"NUMBA_NUM_THREADS={os.environ['NUMBA_NUM_THREADS']}; live settings {LIVE}; {args.repeats} repeats; "
          f"load average {load0[0]:.1f} -> {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"{'data':<22} {'fit':<6} {'CPU s med':>9} {'CPU s max':>9} {'wall s med':>10} {'steps':>16} "
          f"{'converged':>9}")
    for name, cold, warm, worst in rows:
        for label, xs in (("cold", cold), ("warm", warm)):
            a = np.array([x[:3] for x in xs], dtype=float)
            print(f"{name:<22} {label:<6} {np.median(a[:, 0]):>9.2f} {a[:, 0].max():>9.2f} {np.median(a[:, 1]):>10.2f} "
                  f"{'/'.join(str(int(x[2])) for x in xs):>16} {sum(x[3] for x in xs)}/{len(xs):>7}")
        a = np.array(worst)
        print(f"{name:<22} {'120k':<6} {np.median(a[:, 0]):>9.2f} {a[:, 0].max():>9.2f} {np.median(a[:, 1]):>10.2f} "
              f"{'120000':>16} {'':>9}")


if __name__ == "__main__":
    # one core per fit; set here, not at import, so importing this module (the fast SBC test) changes nothing
    os.environ.setdefault("NUMBA_NUM_THREADS", "1")
    main()
