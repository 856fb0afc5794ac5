"""The online rolling-radius scale on the HMMWV daily drive: learnt k vs the simulator's truth.

Simulates ``config/scenarios/daily_driving.yaml`` (tire-force topic off: a production car; GNSS on, its
defaults: 10 Hz ENU velocity, 0.05 m/s per axis, 0.1 s latency), writes the bag with ``io.bags.write_bag``,
then feeds the bag in its recorded (arrival) order to one :class:`RollingRadiusEstimator` per description:
the HMMWV description as shipped and with its rolling radius scaled by 0.99 and 1.01 (R_desc(Fz) = s (r0 -
Fz/kt)). The truth is the simulator's own effective rolling radius, R0 - deflection/3 (models/vehicle14/tires.py),
per wheel at every wheel-speed sample, divided by the description's R_desc at the static load: the mean of that
ratio per axle over the samples the estimator could use (speed > 5 m/s, |a_x| < 0.3 m/s^2, |yaw rate| < 0.03
rad/s) is the k a perfect estimator would report. Prints, per description and axle, the learnt k and its SD,
the truth, the error, and the driving time (s since the start) after which the estimate stayed within 0.2 % of
the truth (and the free-rolling GNSS comparisons used by then), the time its reported SD fell below 0.1 %
(two SDs inside 0.2 %), and the comparisons used in all.

    .venv/bin/python benchmarks/bench_rolling_radius.py [--duration 160] [--seed 0] [--keep-bag DIR]
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
from pathlib import Path

import numpy as np

from vehcal_ros.estimation.sensing.rolling_radius import RollingRadiusConfig, RollingRadiusEstimator
from vehcal_ros.io.bags import read_bag, write_bag
from vehcal_ros.io.scenarios import load_scenario
from vehcal_ros.io.simulate import ScenarioRun
from vehcal_ros.records import Controls, GnssVelocity, ImuSample, WheelSpeeds
from vehcal_ros.vehicle.description import load_description

SCALES = (1.0, 0.99, 1.01)
TOLERANCE = 0.002


def simulate(bag: Path, duration: float | None, seed: int) -> dict[str, np.ndarray]:
    """Run the daily drive into ``bag``; return the truth series sampled with the wheel speeds."""
    scenario = load_scenario("daily_driving").without_sensor("tire_forces").with_seed(seed)
    run = ScenarioRun(scenario, duration=duration)
    truth: dict[str, list] = {"t": [], "re": [], "u": [], "ax": [], "r": []}
    items = []
    for topic, rec, t_rel in run:
        items.append((topic, rec, t_rel))
        if isinstance(rec, WheelSpeeds):
            out = run.outputs
            truth["t"].append(rec.t)
            truth["re"].append(np.array(out["rolling_radius"], dtype=float))
            truth["u"].append(float(out["u"]))
            truth["ax"].append(float(out["ax"]))
            truth["r"].append(float(out["r"]))
    counts = write_bag(bag, items)
    print(f"bag {bag}: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    return {k: np.asarray(v) for k, v in truth.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=None, help="s of the daily drive (default: all 160 s)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--keep-bag", type=Path, default=None, help="write the bag here (default: a temp dir)")
    args = ap.parse_args(argv)

    desc = load_description("hmmwv")
    with tempfile.TemporaryDirectory(prefix="vehcal_rr_") as tmp:
        bag = args.keep_bag or Path(tmp) / "daily_gnss"
        w0 = time.perf_counter()
        truth = simulate(bag, args.duration, args.seed)
        print(f"simulated in {time.perf_counter() - w0:.1f} s")
        base = RollingRadiusConfig.from_description(desc)
        ests, history = {}, {}
        for s in SCALES:
            cfg = RollingRadiusConfig.from_description(desc, r0=base.r0 * s, kt=(base.kt[0] / s, base.kt[1] / s))
            ests[s] = RollingRadiusEstimator(cfg)
            history[s] = []

        def feed(topic: str, rec) -> bool:   # the bag's own order = the order a live subscriber receives
            if isinstance(rec, (WheelSpeeds, ImuSample, GnssVelocity, Controls)):
                for s, est in ests.items():
                    before = est.used["gnss"]
                    est.add(rec)
                    if est.used["gnss"] != before:
                        history[s].append((est.state().t, *est.k, est.used["gnss"], *est.sd))
            return False   # nothing is kept for the stamp-ordered stream

        w0 = time.perf_counter()
        for _ in read_bag(bag, admit=feed):
            pass
        print(f"{len(ests)} estimators over the bag in {time.perf_counter() - w0:.1f} s")

    # truth k: the simulator's R_e over the description's static R_desc, on the samples the gates would take
    sel = (truth["u"] > 5.0) & (np.abs(truth["ax"]) < 0.3) & (np.abs(truth["r"]) < 0.03)
    re_axle = np.stack([truth["re"][:, 0:2].mean(axis=1), truth["re"][:, 2:4].mean(axis=1)], axis=1)
    print(f"\ntruth from {int(sel.sum())} of {sel.size} wheel-speed samples; simulator R_e mean front "
          f"{re_axle[sel, 0].mean():.5f} m, rear {re_axle[sel, 1].mean():.5f} m (R0 - deflection/3); "
          f"description r0 - Fz/kt at static load: front {base.radius_desc(0):.5f} m, rear {base.radius_desc(1):.5f} m")
    print(f"{'scale':>6} {'axle':>6} {'k learnt':>9} {'SD':>8} {'k truth':>9} {'error %':>8} {'err/SD':>7} "
          f"{'within 0.2 % after':>19} {'SD < 0.1 % at':>13} {'GNSS used':>9}")
    for s, est in ests.items():
        st = est.state()
        h = np.asarray(history[s]) if history[s] else np.zeros((0, 6))
        for a, name in enumerate(("front", "rear")):
            k_true = float(np.mean(re_axle[sel, a])) / est.config.radius_desc(a)
            err = st.k[a] / k_true - 1.0
            reached = "never"
            if h.size:
                bad = np.flatnonzero(np.abs(h[:, 1 + a] / k_true - 1.0) >= TOLERANCE)
                if bad.size == 0:
                    reached = f"{h[0, 0]:.1f} s (n={int(h[0, 3])})"
                elif bad[-1] + 1 < len(h):
                    i = bad[-1] + 1
                    reached = f"{h[i, 0]:.1f} s (n={int(h[i, 3])})"
            sure = np.flatnonzero(h[:, 4 + a] < 0.5 * TOLERANCE * h[:, 1 + a]) if h.size else np.zeros(0, int)
            confident = f"{h[sure[0], 0]:.1f} s" if sure.size else "never"
            print(f"{s:>6.2f} {name:>6} {st.k[a]:>9.5f} {st.sd[a]:>8.5f} {k_true:>9.5f} {100 * err:>8.3f} "
                  f"{err * k_true / st.sd[a] if st.sd[a] > 0 else math.nan:>7.2f} {reached:>19} {confident:>13} "
                  f"{st.used['gnss']:>9}")
        print(f"{'':>6} rejected: " + ", ".join(f"{k} {v}" for k, v in sorted(st.rejected.items())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
