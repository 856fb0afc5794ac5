"""Simulation-based calibration of the live grip fit on the designs of real windows (Talts et al. 2018).

bench_grip_sbc.py's live cases draw their slips from a made-up window (cruise, one acceleration, a ramp). A window
of everyday driving is made otherwise: 70-90 % cruise blocks, a few short maneuvers, slip angles under the
friction ellipse, each block with its own stated slip and friction variance. This script keeps exactly that make-
up and replaces only what the road and the sensors did:

* the design: every window the grip pipeline fitted while replaying a simulated bag (``--bag``, with the shipped
  defaults and the ``--vehicle`` description; those whose recorded friction passed its excitation gate): per
  block its TRUE slip (the simulator's ground truth over the
  block, braking blocks mirrored as the pipeline mirrors them), its stated slip and friction variances and its
  |sin alpha| / rho, as the fit was given them;
* for each of ``--sets`` data sets, a window of that design (cycled) and theta from the live fit's own prior (the
  grip node's bounds and peak-slip limit, restricted like bench_grip_sbc.draw_theta to physical tires); then
  measured slips = true + N(0, stated slip variance), friction = the magic formula under the ellipse at the true
  slip + N(0, stated friction variance): the model the fit assumes, on a real window's design. theta is drawn
  again until its data pass the pipeline's excitation gate (``min_excitation``): a gate on the data leaves each
  posterior, and so its coverage, as it is;
* the fit exactly as the pipeline runs it: its subsample (``max_fit_points``, the window's slips deconvolved with
  ``slip_prior="deconvolved"``), then GripEstimator with the node's fit settings; ``--slip-prior flat`` refits the
  same data sets with the flat slip prior instead; ``--slip-posterior slices`` takes the same subsample's measured
  slips with the window's deconvolved distribution and the posteriors as slices (``GripConfig.slip_posterior``);
  ``--oracle-prior BIN`` takes the posteriors under the design's own true-slip distribution instead.

If the fit computes its model's posterior, the 90 % intervals hold the true mu_max in 90 % of the sets (binomial
band) and the ranks are uniform. Power: with 200 sets the two-sided 95 % band of the 90 % coverage is 85.5-94 %;
a true coverage of 80 % falls below 85.5 % with probability 0.98.

    .venv/bin/python benchmarks/grip_sbc_recorded.py --bag BAG --vehicle hmmwv_sim --sets 200 --jobs 2
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import multiprocessing
import os
import pickle
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_grip_sbc import score_fit, summarise  # noqa: E402

MAX_DRAWS = 2000
"""prior draws per data set before its window is given up as unable to pass the excitation gate"""


def designs(bag: Path, vehicle: str, cache: Path) -> list[dict]:
    """The windows the pipeline fitted on ``bag`` (both axles), each as arrays: true slip, slip_var, mu_var, lat
    (cached in ``cache``)."""
    if cache.exists():
        return pickle.loads(cache.read_bytes())
    import diag_grip_windows as dg

    from vehcal_ros.estimation.grip.pipeline import excitation_of

    rec = dg.recorded_windows(bag, replay_params(vehicle))
    truth, _, _ = dg.read_signals(bag)
    rho = live_pipeline(vehicle).signal_config.lateral_ratio
    out = []
    for r in rec:
        k = dg.since_change(r)
        if k.t.size < 20:
            continue
        wheels = [0, 1] if r["scope"].startswith("front") else [2, 3]
        tb = dg.block_truth(truth, k.t, k.mu, wheels, rho)
        zeros = np.zeros(k.t.size)
        out.append({"scope": r["scope"], "t_end": float(r["t_end"]), "t": k.t.copy(),
                    "recorded_excitation": float(excitation_of(k)),
                    "true_slip": np.abs(tb[:, 0]) * np.sign(np.where(k.mu == 0.0, 1.0, k.mu)),
                    "slip_var": zeros if k.slip_var is None else k.slip_var.copy(),
                    "mu_var": zeros if k.mu_var is None else k.mu_var.copy(),
                    "lat": zeros if k.lat is None else k.lat.copy()})
    cache.write_bytes(pickle.dumps(out))
    return out


def replay_params(vehicle: str) -> dict:
    """The grip node's parameters of ``vehcal replay --vehicle V`` with estimated forces (the rest its defaults)."""
    return {"force_source": "estimated", "vehicle": vehicle}


@functools.lru_cache(maxsize=4)
def live_pipeline(vehicle: str):
    """The grip pipeline of a replay with :func:`replay_params` (built once per process)."""
    from vehcal_ros.replay.params import GRIP_NODE, grip_pipeline_from, node_values

    return grip_pipeline_from(node_values({"grip_estimator": replay_params(vehicle)}, 0)[GRIP_NODE])


def live_fit_setup(vehicle: str):
    """(fit config, max_fit_points, min_excitation) of the grip node with its shipped defaults and ``vehicle``."""
    pipeline = live_pipeline(vehicle)
    return pipeline.fit_config, pipeline.max_fit_points, pipeline.min_excitation


def draw_theta(rng: np.random.Generator, bounds: np.ndarray, max_peak_slip: float) -> np.ndarray:
    """theta from the fit's prior (uniform in ``bounds``, peak at slip <= ``max_peak_slip``) restricted to tires
    that transmit little force at zero slip, |f(0)| <= 0.05: the window's cruise blocks pin f(0) far tighter, so
    the posterior's mass outside is negligible and the ranks stay uniform (as bench_grip_sbc.draw_theta argues;
    mu_max is NOT restricted: a gentle window's posterior reaches the prior's top)."""
    from vehcal_ros.models.pacejka import mf, peak_slip_at_most

    while True:
        th = bounds[:, 0] + (bounds[:, 1] - bounds[:, 0]) * rng.random(6)
        if peak_slip_at_most(th, max_peak_slip) and abs(mf(0.0, *th)) <= 0.05:
            return th


def oracle_distribution(true_slip: np.ndarray, bin_width: float):
    """The design's own true-slip distribution (what no fit can know): its true slips binned to ``bin_width``,
    each bin a component of the bin's weight and the variance of a uniform bin."""
    from vehcal_ros.estimation.grip.latent_slip import SlipMixture

    values, counts = np.unique(np.round(true_slip / bin_width) * bin_width, return_counts=True)
    return SlipMixture(counts / counts.sum(), values, np.full(values.size, bin_width**2 / 12.0), 0.0)


def one(args: tuple) -> dict:
    """(k, seed, window, vehicle, slip_prior, max_fit_points or None, slip_noise scale, slip_posterior, oracle bin
    width or 0) -> the fit's ranks and interval hits for data set k."""
    k, seed, w, vehicle, slip_prior, fit_points, slip_noise, slip_posterior, oracle_bin = args
    from vehcal_ros.errors import EstimationError
    from vehcal_ros.estimation.grip.fit import GripEstimator
    from vehcal_ros.estimation.grip.friction_samples import ScopeData
    from vehcal_ros.estimation.grip.latent_slip import true_slip_distribution
    from vehcal_ros.estimation.grip.pipeline import excitation_of, subsample
    from vehcal_ros.models.pacejka import combined, mf_and_slope, mf_curve, peak

    cfg, n_max, gate = live_fit_setup(vehicle)
    n_max = fit_points or n_max
    slip_var = w["slip_var"] * slip_noise ** 2 if slip_noise > 0.0 else np.full(w["slip_var"].size, 1e-12)
    rng = np.random.default_rng([seed, k])
    b = np.asarray(cfg.bounds, dtype=float)
    t_true = w["true_slip"]
    draws = 0
    while True:   # theta from the prior, kept when its data pass the pipeline's excitation gate
        draws += 1
        theta = draw_theta(rng, b, cfg.max_peak_slip)
        # a span half the gate's without noise (the pure-slip curve, above the ellipse's) cannot pass with it
        if np.ptp(np.abs(mf_curve(np.abs(t_true), theta))) < 0.5 * gate:
            if draws >= MAX_DRAWS:
                return {"k": k, "window": f"{w['scope']}@{w['t_end']:.1f}", "failed": "design below the gate"}
            continue
        B, C, D, E, sh, sv = theta
        mu_true = np.empty(t_true.size)
        for i, (x, la) in enumerate(zip(t_true, w["lat"])):   # the likelihood's own curve (pacejka._eiv_residuals)
            f0, df0 = mf_and_slope(float(x), B, C, D, E, sh)
            mu_true[i] = combined(float(x), f0 + sv, df0, la / max(D + sv, 1e-6))[0]
        slip = t_true + np.sqrt(slip_var) * rng.standard_normal(t_true.size)
        mu = mu_true + np.sqrt(w["mu_var"]) * rng.standard_normal(t_true.size)
        data = ScopeData(w["scope"], w["t"], slip, mu, slip_var, w["mu_var"], w["lat"])
        if excitation_of(data) >= gate:
            break
        if draws >= MAX_DRAWS:
            return {"k": k, "window": f"{w['scope']}@{w['t_end']:.1f}", "failed": "design below the gate"}
    cfg = dataclasses.replace(cfg, seed=k, slip_prior=slip_prior, slip_posterior=slip_posterior)
    distribution = None
    if slip_posterior == "moments" and not oracle_bin:   # the pipeline's own subsample (slips: posterior moments)
        d = subsample(data, n_max, "even", slip_prior == "deconvolved")
        if d.slip_is_latent:
            cfg = dataclasses.replace(cfg, slip_prior="flat")
    else:   # the measured slips of the same subsample, their posteriors under the window's distribution
        d = subsample(data, n_max, "even", deconvolve=False)
        distribution = oracle_distribution(t_true, oracle_bin) if oracle_bin else true_slip_distribution(slip, slip_var)
    true_mu_max = float(peak(theta)[0])
    out = {"k": k, "theta": theta.tolist(), "mu_max": true_mu_max, "window": f"{w['scope']}@{w['t_end']:.1f}",
           "max_abs_mu": float(np.max(np.abs(mu_true))), "prior_draws": draws}
    try:
        e = GripEstimator(cfg).fit(d.slip, d.mu, slip_var=d.slip_var, mu_var=d.mu_var, lateral=d.lat,
                                   slip_distribution=distribution)
    except EstimationError as exc:
        out["failed"] = str(exc)
        return out
    out.update(score_fit(e, theta))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bag", required=True, help="a simulated bag with the ground-truth topic")
    ap.add_argument("--vehicle", required=True, help="its vehicle description (name or file)")
    ap.add_argument("--sets", type=int, default=200)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1804)
    ap.add_argument("--slip-prior", choices=("deconvolved", "flat"), default="deconvolved")
    ap.add_argument("--max-fit-points", type=int, default=None,
                    help="fit this many of the window's samples (default: the node's max_fit_points)")
    ap.add_argument("--slip-noise", type=float, default=1.0,
                    help="scale of the stated slip noise in the data and the fit (0: exact slips)")
    ap.add_argument("--slip-posterior", choices=("moments", "slices"), default="moments",
                    help="how each true slip's posterior enters the likelihood (GripConfig.slip_posterior)")
    ap.add_argument("--oracle-prior", type=float, default=0.0, metavar="BIN",
                    help="take the posteriors under the design's TRUE slip distribution (binned to BIN) instead of "
                         "the deconvolved one: what the fit would do if it knew it")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "figures"))
    args = ap.parse_args()
    bag = Path(args.bag)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0, load0 = time.perf_counter(), os.getloadavg()
    ws = designs(bag, args.vehicle, out / f"grip_sbc_recorded_{bag.name}.designs.pkl")
    gate = live_fit_setup(args.vehicle)[2]
    ws = [w for w in ws if w["recorded_excitation"] >= gate]   # the windows the pipeline fitted on the real road
    tasks = [(k, args.seed, ws[k % len(ws)], args.vehicle, args.slip_prior, args.max_fit_points, args.slip_noise,
              args.slip_posterior, args.oracle_prior) for k in range(args.sets)]
    if args.jobs > 1:
        # spawned, not forked: extracting the designs ran numba's OpenMP threads in this process
        with ProcessPoolExecutor(args.jobs, mp_context=multiprocessing.get_context("spawn")) as ex:
            results = list(ex.map(one, tasks))
    else:
        results = [one(t) for t in tasks]
    summ = summarise(results)
    summ.update(bag=str(bag), vehicle=args.vehicle, slip_prior=args.slip_prior, windows=len(ws),
                max_fit_points=args.max_fit_points, slip_noise=args.slip_noise,
                slip_posterior=args.slip_posterior, oracle_prior=args.oracle_prior,
                wall_s=time.perf_counter() - t0, load_start=load0, load_end=os.getloadavg(),
                date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
    tag = f"{bag.name}_{args.slip_prior}"
    tag += "" if args.max_fit_points is None else f"_n{args.max_fit_points}"
    tag += "" if args.slip_noise == 1.0 else f"_slipnoise{args.slip_noise:g}"
    tag += "" if args.slip_posterior == "moments" else f"_{args.slip_posterior}"
    tag += f"_oracle{args.oracle_prior:g}" if args.oracle_prior else ""
    (out / f"grip_sbc_recorded_{tag}.json").write_text(json.dumps({"summary": summ, "results": results}, indent=1))
    print(json.dumps(summ, indent=1))


if __name__ == "__main__":
    os.environ.setdefault("NUMBA_NUM_THREADS", "1")
    main()
