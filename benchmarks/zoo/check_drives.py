"""Run zoo scenarios on the 14-DOF simulator without writing bags and report how hard each drive excites the tires.

``python benchmarks/zoo/check_drives.py benchmarks/zoo/vehicles/zoo_*/scenario.yaml`` prints per scenario: simulated
time and wall time (s), the largest |slip ratio| and |Fx/Fz| / mu_max over the four wheels while u > 3 m/s (the
tire-force utilisation; the grip estimator's "low excitation" regime is well below 1), the smallest wheel load
(N), the top speed (m/s), the largest |roll| (deg) and |a_x| (m/s^2). Sampled at the driver rate. A diverging
model raises ``SimulationDiverged`` naming the time.
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from vehcal_ros.io.scenarios import load_scenario
from vehcal_ros.io.simulate import ScenarioRun


def check(path: str) -> dict[str, float]:
    """Excitation statistics of one scenario (module doc; keys: t, wall, slip, util, fz_min, v_max, roll, ax)."""
    scenario = load_scenario(path)
    run = ScenarioRun(scenario)
    t0 = time.monotonic()
    last = -1
    st = {"slip": 0.0, "util": 0.0, "fz_min": math.inf, "v_max": 0.0, "roll": 0.0, "ax": 0.0}
    for _topic, _rec, _t in run:
        if run.steps == last:
            continue
        last = run.steps
        o = run.outputs
        fz = np.asarray(o["fz"])
        if o["u"] > 3.0:
            st["slip"] = max(st["slip"], float(np.max(np.abs(o["slip"]))))
            util = np.abs(np.asarray(o["fx"])) / np.maximum(fz, 1.0) / np.asarray(o["mu_max"])
            st["util"] = max(st["util"], float(util.max()))
        st["fz_min"] = min(st["fz_min"], float(fz.min()))
        st["v_max"] = max(st["v_max"], float(o["u"]))
        st["roll"] = max(st["roll"], abs(math.degrees(float(o["roll"]))))
        st["ax"] = max(st["ax"], abs(float(o["ax"])))
    return {"t": run.t, "wall": time.monotonic() - t0, **st}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("scenarios", nargs="+", help="scenario YAML files")
    args = ap.parse_args(argv)
    print("scenario | sim s | wall s | x real time | max |slip| | max |Fx/Fz|/mu_max | min Fz N | v max m/s | "
          "max |roll| deg | max |ax| m/s^2")
    for path in args.scenarios:
        r = check(path)
        print(f"{path} | {r['t']:.1f} | {r['wall']:.1f} | {r['t'] / r['wall']:.1f} | {r['slip']:.3f} | "
              f"{r['util']:.2f} | {r['fz_min']:.0f} | {r['v_max']:.1f} | {r['roll']:.2f} | {r['ax']:.2f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
