"""How much of the road's grip gentle driving can prove: the oracle fit of a whole constant-surface drive.

The usable lower bound of the over-time figures (the time mean of min(lower / truth, 1)) is bounded by what the
samples of a drive say about the peak of the friction curve. This script asks the best case: the simulator's TRUE
longitudinal slips and TRUE Fx / Fz of every driving sample (u >= 3 m/s, |slip angle| <= the grip node's
``max_slip_angle``), no measurement error at all, the whole drive in ONE fit (no road-change hazard, no window),
fitted by the product's Algorithm 1 (:class:`~vehcal_ros.estimation.grip.fit.GripEstimator` with the grip
node's shipped fit settings, config/estimate.yaml: its prior bounds, peak-slip cap, chains and convergence rule) in
three states of knowledge about the tire:

* ``free``: the shipped uniform priors on (B, C, D, E, s_h, s_v) (docs/grip.md "Prior ranges from published tire
  data");
* ``shape ~``: a Gaussian shape prior on (B C D, C, E) centred on the simulated tire's own curve at the wheel's
  mean load (least squares of the magic formula on the simulator's pure-longitudinal Fx / Fz over
  slip -0.3..0.3), sd 5 on B C D and 0.1 on C and E;
* ``shape known``: the same prior with sd 0.5 on B C D and 0.02 on C and E (a tire whose shape a test rig gave).

The 90 % interval's lower end over the truth is the usable lower bound such a fit would give if it stood the whole
drive. One fit per wheel (the axle estimate pools two wheels whose loads differ; the wheel is the cleaner case).

Usage:  python benchmarks/grip_information_limit.py [--vehicle hmmwv] [--scenario constant_dry] [--seed 0]
        [--bag DIR] [--points 1500] [--json OUT]
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import json
import os
import tempfile
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

from vehcal_ros.estimation.grip.fit import GripConfig, GripEstimator
from vehcal_ros.estimation.grip.friction_samples import GripSignalConfig
from vehcal_ros.estimation.grip.pipeline import fit_config_from
from vehcal_ros.io import bags
from vehcal_ros.io.scenarios import load_scenario
from vehcal_ros.io.simulate import ScenarioRun
from vehcal_ros.models.pacejka import mf_curve
from vehcal_ros.models.vehicle14.params import load_simulator_params
from vehcal_ros.models.vehicle14.tires import mu_curve, pack_tire
from vehcal_ros.records import WHEELS, GroundTruth, OdomSample
from vehcal_ros.replay.params import GRIP_NODE, resolve_params

SHAPE_SD = {"shape ~": (5.0, 0.1), "shape known": (0.5, 0.02)}
"""State of knowledge -> (sd of B C D, sd of C and E) of the Gaussian shape prior."""


def drive_samples(bag: Path, max_slip_angle: float) -> tuple[np.ndarray, ...]:
    """Per ground-truth record while driving (u >= 3 m/s from the odometry in force): true slip, Fx / Fz, Fz and
    mu_max of the four wheels, and the mask of pure-slip samples (|slip angle| <= ``max_slip_angle``)."""
    u = 0.0
    rows = []
    for _, rec in bags.read_bag(bag):
        if isinstance(rec, OdomSample):
            u = rec.u
        elif isinstance(rec, GroundTruth) and rec.fx is not None and u >= 3.0:
            rows.append((rec.slip, rec.fx / rec.fz, rec.fz, rec.mu_max, np.abs(rec.slip_angle) <= max_slip_angle))
    slip, mu, fz, mu_max, pure = (np.array([r[k] for r in rows]) for k in range(5))
    return slip, mu, fz, mu_max, pure


def tire_shape(vehicle: str, fz: float, mu_road: float) -> tuple[float, float, float]:
    """(B C D, C, E) of the magic formula closest (least squares over slip -0.3..0.3) to the simulated tire's
    pure-longitudinal Fx / Fz at load ``fz`` on a road of ``mu_road``."""
    p = load_simulator_params(vehicle)
    tp = pack_tire(p.tire, p.tire.fz_mu_ref if p.tire.fz_mu_ref is not None else p.total_mass * p.gravity / 4.0)
    s = np.linspace(-0.3, 0.3, 601)
    target = mu_curve(tp, fz, mu_road, s)

    def resid(x: np.ndarray) -> np.ndarray:
        return mf_curve(s, np.array([x[0], x[1], x[2], x[3], 0.0, 0.0])) - target

    fit = least_squares(resid, x0=np.array([10.0, 1.6, mu_road, 0.0]),
                        bounds=([0.1, 1.0, 0.05, -5.0], [80.0, 2.5, 2.0, 1.0]))
    b, c, d, e = fit.x
    return float(b * c * d), float(c), float(e)


def oracle_fit(s: np.ndarray, mu: np.ndarray, points: int, shape: tuple | None, seed: int,
               base: GripConfig) -> dict:
    """Algorithm 1 on ``points`` evenly spread of the true samples with the fit settings ``base``, optional shape
    prior."""
    sel = np.linspace(0, s.size - 1, min(points, s.size)).astype(int)
    cfg = dataclasses.replace(base, shape_prior=shape, seed=seed)
    est = GripEstimator(cfg).fit(s[sel], mu[sel])
    return {"mean": est.mu_max_mean, "lower": est.mu_max_lower, "upper": est.mu_max_upper,
            "converged": bool(est.converged), "n": int(sel.size)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vehicle", default="hmmwv")
    ap.add_argument("--scenario", default="constant_dry")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--bag", type=Path, help="an existing bag of the scenario (default: simulate one)")
    ap.add_argument("--points", type=int, default=1500)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        bag = a.bag
        if bag is None:
            bag = Path(tmp) / "drive"
            bags.write_bag(bag, ScenarioRun(load_scenario(a.scenario, vehicle=a.vehicle).with_seed(a.seed)))
        slip, mu, fz, mu_max, pure = drive_samples(bag, GripSignalConfig.max_slip_angle)
    base = fit_config_from(resolve_params()[GRIP_NODE])   # the grip node's shipped fit settings
    rows = []
    for w, name in enumerate(WHEELS):
        m = pure[:, w]
        s_w, mu_w, truth = slip[m, w], mu[m, w], float(np.mean(mu_max[m, w]))
        row = {"wheel": name, "samples": int(m.sum()), "truth": truth,
               "max_utilisation": float(np.max(np.abs(mu_w)) / truth)}
        centre = tire_shape(a.vehicle, float(np.mean(fz[m, w])), truth)
        for label in ("free", *SHAPE_SD):
            shape = None
            if label in SHAPE_SD:
                sd_k, sd_ce = SHAPE_SD[label]
                shape = (centre, ((sd_k ** 2, 0.0, 0.0), (0.0, sd_ce ** 2, 0.0), (0.0, 0.0, sd_ce ** 2)))
            r = oracle_fit(s_w, mu_w, a.points, shape, a.seed, base)
            r["usable"] = min(r["lower"] / truth, 1.0)
            row[label] = r
        row["shape_centre"] = centre
        rows.append(row)
        print(f"{name}: {row['samples']} samples, truth {truth:.3f}, peak |Fx/Fz| {row['max_utilisation']:.2f} of it; "
              + "; ".join(f"{k} {row[k]['mean']:.3f} [{row[k]['lower']:.3f}, {row[k]['upper']:.3f}] usable "
                          f"{row[k]['usable']:.2f}" for k in ("free", *SHAPE_SD)), flush=True)
    out = {"vehicle": a.vehicle, "scenario": a.scenario, "seed": a.seed, "points": a.points,
           "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
           "load": list(os.getloadavg()[:2]), "wheels": rows}
    if a.json:
        a.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
