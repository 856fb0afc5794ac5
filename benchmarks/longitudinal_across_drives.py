"""Across drives: the longitudinal stage's posterior sd, and what a residual-autocorrelation correction makes of it.

For each vehicle and daily drive (the bags of ``bench_holdout_vehicles.py``), the replay's last accepted
longitudinal fit is taken (the fit the replay reports as ``final``). For it, besides the posterior sd:

* the residual lag-one autocorrelation per channel at the posterior mean;
* the sandwich (Godambe) sd of the independent-residual likelihood, ``sqrt(diag(H^-1 J H^-1))``, with ``H`` the
  Gauss-Newton information (central differences of the 8-DOF responses at +-sd/2 per parameter, weighted by the
  fitted noise sigmas) and ``J`` the Newey-West (Bartlett) estimate of the per-sample scores' long-run variance
  at the lags ``--lags`` (0: the misspecification-robust sandwich without autocorrelation).

Across the drives, per parameter and sd: the RMS of the standardised pairwise differences
``(m_i - m_j) / sqrt(s_i^2 + s_j^2)`` (issue target [0.7, 1.5]) and the median 90 % width ``3.29 s`` over the
across-drive SD of the means (target <= 4).

    PYTHONPATH=. .venv/bin/python benchmarks/longitudinal_across_drives.py --work /tmp/holdout_vehicles \\
        --vehicles hmmwv sedan --seeds 0 1 2 3 4
"""

from __future__ import annotations

import argparse
import itertools
import math
import pickle
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from bench_holdout_vehicles import VEHICLES, daily_bag  # noqa: E402

from vehcal_ros.estimation.calibration.fit import StageProblem, base_parameters, stage_setup  # noqa: E402
from vehcal_ros.replay.params import resolve_params  # noqa: E402
from vehcal_ros.replay.serial import replay_bag  # noqa: E402
from vehcal_ros.vehicle.description import load_description  # noqa: E402

STAGE = "longitudinal"


def last_accepted_fit(bag: Path, description: str, spread_parts: int = 0) -> tuple | None:
    """Replay ``bag`` (calibration and grip, the CLI's defaults with ``vehicle`` and the calibrator's
    ``spread_parts``) and return the (job, outcome) of the last accepted longitudinal fit, or None."""
    params = resolve_params(None)
    for key in params:
        params[key]["vehicle"] = description
    params["model_calibrator"]["spread_parts"] = int(spread_parts)
    fits: list = []

    def capture(pipeline) -> None:
        fit = pipeline.fit

        def recorded(jobs):
            outcomes = fit(jobs)
            fits.extend((j, o) for j, o in zip(jobs, outcomes) if j.stage == STAGE and o.accepted)
            return outcomes
        pipeline.fit = recorded

    replay_bag(bag, params, workers=1, calibration_start=capture)
    return fits[-1] if fits else None


def sandwich_sds(job, outcome, description, lags: list[int]) -> dict:
    """Posterior sd, residual lag-one autocorrelations and the sandwich sds at ``lags`` of one accepted fit."""
    res = outcome.result
    spec, const, seg = stage_setup(job.segment, STAGE, vehicle=job.vehicle or description)
    problem = StageProblem(seg, spec, base_parameters(spec, job.previous, const.default_parameters()), const,
                           roll_split=True, noise_model="white")
    names = list(res.parameters)
    mean = np.array([res.parameters[n]["mean"] for n in names])
    sd = np.array([res.parameters[n]["std"] for n in names])
    sigma = np.array([res.noise[c]["mean"] for c in spec.channels])
    rows = [mean]
    for k in range(len(names)):
        for sign in (1.0, -1.0):
            row = mean.copy()
            row[k] += sign * 0.5 * sd[k]
            rows.append(row)
    f = problem.responses(np.array(rows))                                   # (2p+1, N, channels)
    resid = problem.data - f[0]
    sens = np.stack([(f[1 + 2 * k] - f[2 + 2 * k]) / sd[k] for k in range(len(names))], axis=-1)
    w = 1.0 / sigma ** 2
    info = np.einsum("ncj,nck,c->jk", sens, sens, w)
    score = np.einsum("nc,ncj,c->nj", resid, sens, w)
    h_inv = np.linalg.inv(info)
    out = {"names": names, "mean": mean, "post": sd,
           "rho": [float(np.corrcoef(resid[1:, c], resid[:-1, c])[0, 1]) for c in range(resid.shape[1])]}
    for lag in lags:
        j = score.T @ score
        for m in range(1, lag + 1):
            g = score[m:].T @ score[:-m]
            j += (1.0 - m / (lag + 1.0)) * (g + g.T)
        out[lag] = np.sqrt(np.diag(h_inv @ j @ h_inv))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", required=True, help="bench_holdout_vehicles.py's work directory (bags reused)")
    ap.add_argument("--vehicles", nargs="+", default=["hmmwv", "sedan"], choices=list(VEHICLES))
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    ap.add_argument("--lags", nargs="+", type=int, default=[0, 25, 50, 100])
    ap.add_argument("--spread-parts", type=int, default=0,
                    help="the calibrator's spread_parts (estimation/calibration/maneuver_spread.py; "
                         "0: off, the default)")
    args = ap.parse_args(argv)
    work = Path(args.work)
    for name in args.vehicles:
        description = VEHICLES[name][2]
        fits = {}
        for seed in args.seeds:
            tag = f"_parts{args.spread_parts}" if args.spread_parts else ""
            cache = work / name / f"longitudinal_fit_seed{seed}{tag}.pkl"
            if not cache.exists():
                cache.write_bytes(pickle.dumps(last_accepted_fit(daily_bag(name, seed, work), description,
                                                                 args.spread_parts)))
            fit = pickle.loads(cache.read_bytes())
            if fit is None:
                print(f"{name} seed {seed}: no accepted longitudinal fit")
                continue
            fits[seed] = sandwich_sds(*fit, load_description(description), args.lags)
            f = fits[seed]
            print(f"{name} seed {seed}: residual rho " + ", ".join(f"{r:.3f}" for r in f["rho"]) + "; " + "; ".join(
                f"{n} {f['mean'][k]:.5g} sd {f['post'][k]:.3g} sandwich "
                + "/".join(f"{f[lag][k]:.3g}" for lag in args.lags) for k, n in enumerate(f["names"])))
        if len(fits) < 2:
            continue
        print(f"\n{name}: {len(fits)} drives; z_rms (width / across-drive SD) per sd: posterior, sandwich at lags "
              f"{args.lags}")
        for k, n in enumerate(next(iter(fits.values()))["names"]):
            cells = []
            for key in ["post", *args.lags]:
                ms = [(f["mean"][k], f[key][k]) for f in fits.values()]
                z = [(a[0] - b[0]) / math.hypot(a[1], b[1]) for a, b in itertools.combinations(ms, 2)]
                spread = float(np.std([m for m, _ in ms], ddof=1))
                width = float(np.median([3.29 * s for _, s in ms]))
                cells.append(f"{np.sqrt(np.mean(np.square(z))):.2f} ({width / spread:.2f})")
            print(f"  {n}: " + " | ".join(cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
