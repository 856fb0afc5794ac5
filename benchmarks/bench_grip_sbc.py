"""Simulation-based calibration of the grip posterior (Talts et al. 2018, arXiv:1804.06788).

For each of ``--sets`` data sets: theta ~ the fit's own prior (uniform in the Table 3 bounds, truncated to
physical tires: curve peak at slip <= 0.1, Section 4.2.2 of the friction paper); sigma ~ its prior where it is
a parameter; data simulated at low excitation; one GripEstimator fit at the live settings; then the rank of
each true quantity among L thinned posterior draws and whether the 50 % / 90 % equal-tailed mu_max intervals
contain the true mu_max. If the sampler computes the posterior of the model that generated the data, the ranks
are uniform on 0..L and the intervals cover 50 % / 90 % (binomial band for n sets).

Cases (``--case``):

* ``paper``: the paper's design (Section 4.1): 100 slips uniform on [0, s_lim] with s_lim the slip at which the
  curve reaches mu = min(0.3, 0.6 mu_max) (low excitation), friction noise sigma = 2.53e-2 (the paper's).
  sigma is sampled by the fit (Jeffreys prior); the data fix it to ~7 %, so a fixed true sigma is immaterial.
* ``live``: what the live pipeline feeds the fit: per-wheel 0.1 s block averages, i.e. clusters (cruise near
  mu = 0, a steady acceleration at mu = a, a ramp up to b), slip noise of a block average
  sd_s = 1e-3 carried as ``slip_var``, friction noise 5e-3, 100 samples; a, b <= min(0.3, 0.6 mu_max).
  Friction values are drawn given the measured slips from the model the fit assumes (effective variance
  sigma^2 + f'(s)^2 sd_s^2): a check of the computation.
* ``live_latent``: as ``live`` but generated as the vehicle does: true slips t_i, measured s_i = t_i + noise,
  mu_i = f(t_i) + noise. The fit's Gaussian errors-in-variables likelihood is then an approximation (it
  assumes t_i | s_i ~ N(s_i, sd_s^2), i.e. a flat prior on the true slip); this case measures what that costs.
* ``live_window``: as ``live_latent`` but a whole window of the live pipeline, 600 blocks
  (cruise 420, acceleration 100, ramp 80: mostly unexcited, as a window of everyday driving), fitted as the
  pipeline fits it: ``grip_pipeline.subsample`` to ``max_fit_points`` = 100 (chosen by |slip|, each slip's
  posterior under the slip distribution deconvolved from all 600), then the fit with ``slip_prior="flat"``. The
  subsample itself is under test: if choosing on the slips biased the posterior, the ranks would show it.
* ``live_warm``: the warm-started fit, as the pipeline runs most fits. Two ``live_latent``
  data sets A and B from the same theta; a cold fit on A (the previous window), then the fit of the next window
  (A without its first ``WARM_SHIFT`` samples, plus B's first ``WARM_SHIFT``: one sixth of the window changed,
  as after a 5 s cycle of a 30 s window) warm-started from it exactly as ``GripPipeline`` does it (its
  ``warm_steps`` and ``warm_burn_in``; carried draws, independence proposal, end-of-burn-in refit). The ranks are
  those of the second fit: the warm start only chooses starts and proposals, so its posterior is still the
  posterior of its own window's data, and the ranks must be uniform.

``--e-upper X`` sets the prior's upper bound on E (Table 3: 0) in simulation AND fit.

    NUMBA_NUM_THREADS=1 .venv/bin/python benchmarks/bench_grip_sbc.py --case paper --sets 200 --jobs 2
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

N_POINTS = 100
WARM_SHIFT = 17   # samples of a 100-sample window that change from one cycle to the next (case live_warm)
SIGMA_PAPER = 2.53e-2
MAX_PEAK_SLIP = 0.1
L_RANK = 99  # ranks in 0..99: 100 possible values
QUANTITIES = ("mu_max", "B", "C", "D", "E", "s_h", "s_v")


def draw_theta(rng: np.random.Generator, bounds: np.ndarray) -> np.ndarray:
    """theta from the fit's prior (uniform in ``bounds``, peak at slip <= MAX_PEAK_SLIP) restricted to physical
    tires: mu_max >= 0.2 and |f(0)| <= 0.05 (a tire transmits little force at zero slip). The data pin f(0) to
    ~sigma/sqrt(N) and mu_max above the data, so the fit's posterior mass outside this subset is negligible and
    the ranks stay uniform (Talts et al. need the simulation prior to be the fit's prior)."""
    from vehcal_ros.models.pacejka import mf, peak, peak_slip_at_most

    while True:
        th = bounds[:, 0] + (bounds[:, 1] - bounds[:, 0]) * rng.random(6)
        if peak_slip_at_most(th, MAX_PEAK_SLIP) and peak(th)[0] >= 0.2 and abs(mf(0.0, *th)) <= 0.05:
            return th


def excitation_level(theta: np.ndarray) -> float:
    """Highest friction the low-excitation data reach: min(0.3, 0.6 mu_max), and at least 0.05 above f(0)."""
    from vehcal_ros.models.pacejka import mf, peak

    mu_max = peak(theta)[0]
    return max(min(0.3, 0.6 * mu_max), mf(0.0, *theta) + 0.05)


def simulate(case: str, theta: np.ndarray, rng: np.random.Generator) -> dict:
    """One data set: slip, mu and (live cases) slip_var."""
    from vehcal_ros.models.pacejka import mf_curve, slip_at_friction, slope

    level = excitation_level(theta)
    s_lim = slip_at_friction(theta, level)
    if case == "paper":
        s = rng.uniform(0.0, s_lim, N_POINTS)
        return {"slip": s, "mu": mf_curve(s, theta) + SIGMA_PAPER * rng.standard_normal(N_POINTS)}
    sd_s, sd_mu = 1e-3, 5e-3
    s0 = slip_at_friction(theta, 0.0) if mf_curve(np.zeros(1), theta)[0] < 0.0 else 0.0
    a = slip_at_friction(theta, max(mf_curve(np.zeros(1), theta)[0], 0.0) + rng.uniform(0.3, 0.8) * (
        level - max(mf_curve(np.zeros(1), theta)[0], 0.0)))
    n_cruise, n_acc, n_ramp = (420, 100, 80) if case == "live_window" else (35, 35, 30)
    t = np.concatenate([np.full(n_cruise, s0) + 2e-4 * rng.standard_normal(n_cruise),
                        np.full(n_acc, a) + 2e-4 * rng.standard_normal(n_acc),
                        rng.uniform(s0, s_lim, n_ramp)])
    vs = np.full(t.size, sd_s**2)
    if case == "live":
        s = t  # measured slips; friction drawn given them from the model the fit assumes
        sd = np.sqrt(sd_mu**2 + slope(s, theta) ** 2 * vs)
        mu = mf_curve(s, theta) + sd * rng.standard_normal(s.size)
    else:  # live_latent: measurement noise on the slip, the friction at the true slip
        s = t + sd_s * rng.standard_normal(t.size)
        mu = mf_curve(t, theta) + sd_mu * rng.standard_normal(t.size)
    return {"slip": s, "mu": mu, "slip_var": vs}


def one(args: tuple) -> dict:
    """(case, k, seed, n_steps, max_steps[, n_chains[, shift_bounds[, e_upper[, window_rule[, warm_steps]]]]])
    -> the fit's ranks and interval hits for data set k. ``shift_bounds`` = (s_h limit, s_v limit) replaces
    Table 3's shift bounds by +-limit in BOTH the simulation prior and the fit's prior (SBC needs them equal), so
    it is also a narrower SBC design;
    ``e_upper`` likewise replaces the upper bound of E; ``window_rule`` "even" (case live_window) takes the 100
    samples evenly in time (a control); ``warm_steps`` (case live_warm) replaces
    the pipeline's ``warm_steps``."""
    case, k, seed, n_steps, max_steps, *rest = args
    from vehcal_ros.errors import EstimationError
    from vehcal_ros.estimation.grip.fit import GripConfig, GripEstimator
    from vehcal_ros.estimation.grip.ml_fit import TABLE3_BOUNDS
    from vehcal_ros.models.pacejka import peak

    rng = np.random.default_rng([seed, k])
    b = np.asarray(TABLE3_BOUNDS, dtype=float)
    if len(rest) > 1 and rest[1] is not None:
        b[4:6] = [[-rest[1][0], rest[1][0]], [-rest[1][1], rest[1][1]]]
    if len(rest) > 2 and rest[2] is not None:
        b[3, 1] = rest[2]
    theta = draw_theta(rng, b)
    data = simulate("live_latent" if case == "live_warm" else case, theta, rng)
    previous = None
    if case == "live_warm":   # the window before: A; this window: A shifted by WARM_SHIFT samples of B
        previous, later = data, simulate("live_latent", theta, rng)
        data = {key: np.concatenate([previous[key][WARM_SHIFT:], later[key][:WARM_SHIFT]]) for key in previous}
    slip_prior = "flat" if case == "live" else GripConfig.slip_prior
    if case == "live_window":   # the pipeline's subsample of the window (module docstring)
        from vehcal_ros.estimation.grip.friction_samples import ScopeData
        from vehcal_ros.estimation.grip.pipeline import subsample

        n = data["slip"].size
        window = ScopeData("front_axle", np.arange(n) * 0.05, data["slip"], data["mu"], data["slip_var"])
        chosen = subsample(window, N_POINTS, rest[3] if len(rest) > 3 else "excitation")
        data = {"slip": chosen.slip, "mu": chosen.mu, "slip_var": chosen.slip_var}
        slip_prior = "flat" if chosen.slip_is_latent else slip_prior
    true_mu_max = float(peak(theta)[0])
    cfg = GripConfig.paper_case(seed=k, n_steps=n_steps, max_steps=max_steps, max_peak_slip=MAX_PEAK_SLIP,
                     keep_negative_slip=True, n_chains=int(rest[0]) if rest and rest[0] else GripConfig.n_chains,
                     bounds=tuple(map(tuple, b.tolist())),
                     slip_prior=slip_prior)
    out = {"k": k, "theta": theta.tolist(), "mu_max": true_mu_max, "level": excitation_level(theta)}
    try:
        warm = None
        if previous is not None:
            from vehcal_ros.estimation.grip.pipeline import GripPipeline

            warm = GripEstimator(cfg).fit(previous["slip"], previous["mu"], slip_var=previous["slip_var"])
            warm_steps = rest[4] if len(rest) > 4 and rest[4] else GripPipeline.warm_steps
            cfg = dataclasses.replace(cfg, seed=k + 1_000_000, n_steps=int(warm_steps),
                                      burn_in=GripPipeline.warm_burn_in)
        e = GripEstimator(cfg).fit(data["slip"], data["mu"], slip_var=data.get("slip_var"), warm_start=warm)
    except EstimationError as exc:
        out["failed"] = str(exc)
        return out
    out.update(score_fit(e, theta))
    return out


def score_fit(e, theta: np.ndarray) -> dict:
    """A fit's SBC figures against the true ``theta``: the rank of each true quantity among ``L_RANK`` thinned
    posterior draws of every chain, whether the equal-tailed 50 % / 90 % mu_max intervals of the draws hold the
    true mu_max, and the fit's published interval and diagnostics."""
    from vehcal_ros.models.pacejka import peak, peak_batch

    true_mu_max = float(peak(theta)[0])
    draws = e.chains.draws
    flat = draws.reshape(-1, draws.shape[2])
    mm = peak_batch(np.ascontiguousarray(flat[:, :6]))[0]
    idx = np.round(np.linspace(0, flat.shape[0] - 1, L_RANK)).astype(int)  # thinned draws, every chain
    truth = {"mu_max": true_mu_max, **dict(zip(QUANTITIES[1:], theta))}
    post = {"mu_max": mm, **{q: flat[:, j] for j, q in enumerate(QUANTITIES[1:])}}
    return {"rank": {q: int(np.sum(post[q][idx] < truth[q])) for q in QUANTITIES},
            "in50": bool(np.quantile(mm, 0.25) <= true_mu_max <= np.quantile(mm, 0.75)),
            "in90": bool(np.quantile(mm, 0.05) <= true_mu_max <= np.quantile(mm, 0.95)),
            "mean": e.mu_max.mean, "lower": e.mu_max.lower, "upper": e.mu_max.upper, "converged": e.converged,
            "prior_dominated": e.prior_dominated, "r_hat_max": e.r_hat_max, "ess_bulk_min": e.ess_bulk_min,
            "ess_tail_min": e.ess_tail_min, "n_steps_used": e.n_steps_used, "elapsed_s": e.elapsed_s}


def binomial_band(n: int, p: float, level: float = 0.95) -> tuple[float, float]:
    from scipy.stats import binom

    a = (1 - level) / 2
    return binom.ppf(a, n, p) / n, binom.ppf(1 - a, n, p) / n


def summarise(results: list[dict]) -> dict:
    from scipy.stats import chisquare

    ok = [r for r in results if "rank" in r]
    n = len(ok)
    summ = {"n_sets": len(results), "n_fitted": n, "n_failed": len(results) - n}
    if not n:
        return summ
    summ["coverage50"] = float(np.mean([r["in50"] for r in ok]))
    summ["coverage90"] = float(np.mean([r["in90"] for r in ok]))
    summ["band50"] = binomial_band(n, 0.5)
    summ["band90"] = binomial_band(n, 0.9)
    summ["converged_share"] = float(np.mean([r["converged"] for r in ok]))
    summ["prior_dominated_share"] = float(np.mean([r["prior_dominated"] for r in ok]))
    summ["median_fit_s"] = float(np.median([r["elapsed_s"] for r in ok]))
    summ["median_steps"] = float(np.median([r["n_steps_used"] for r in ok]))
    summ["median_width90"] = float(np.median([r["upper"] - r["lower"] for r in ok]))
    summ["median_rel_err"] = float(np.median([abs(r["mean"] / r["mu_max"] - 1) for r in ok]))
    bins = 10
    summ["rank_chi2_p"] = {}
    for q in QUANTITIES:
        ranks = np.array([r["rank"][q] for r in ok])
        counts = np.histogram(ranks, bins=bins, range=(0, L_RANK + 1))[0]
        summ["rank_chi2_p"][q] = float(chisquare(counts).pvalue)
    return summ


def plot(results: list[dict], summ: dict, case: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [r for r in results if "rank" in r]
    fig, axes = plt.subplots(2, 4, figsize=(12, 5.5))
    bins = 20
    expect = len(ok) / bins
    from scipy.stats import binom

    lo, hi = binom.ppf([0.005, 0.995], len(ok), 1 / bins)
    for ax, q in zip(axes.ravel(), QUANTITIES):
        ranks = np.array([r["rank"][q] for r in ok])
        ax.axhspan(lo, hi, color="0.85", label="99 % band (uniform)")
        ax.axhline(expect, color="0.5", lw=1)
        ax.hist(ranks, bins=bins, range=(0, L_RANK + 1), color="C0", edgecolor="w")
        ax.set_title(f"{q} (chi2 p = {summ['rank_chi2_p'][q]:.2f})", fontsize=9)
        ax.set_yticks([])
    ax = axes.ravel()[-1]
    ax.axis("off")
    ax.text(0, 0.9, f"case: {case}\n{summ['n_fitted']} data sets\n"
            f"90 % coverage {summ['coverage90']:.1%}\n  band {summ['band90'][0]:.0%}-{summ['band90'][1]:.0%}\n"
            f"50 % coverage {summ['coverage50']:.1%}\n  band {summ['band50'][0]:.0%}-{summ['band50'][1]:.0%}\n"
            f"converged {summ['converged_share']:.0%}\nprior-dominated {summ['prior_dominated_share']:.0%}",
            va="top", fontsize=9, transform=ax.transAxes)
    fig.suptitle(f"SBC rank histograms (rank of the true value among {L_RANK} posterior draws)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def run(case: str, n_sets: int, jobs: int, seed: int, n_steps: int, max_steps: int,
        partial: Path | None = None, shift_bounds: tuple[float, float] | None = None,
        e_upper: float | None = None, window_rule: str = "excitation",
        warm_steps: int | None = None) -> tuple[list[dict], dict]:
    """Fit the data sets (in ``jobs`` processes); with ``partial``, results so far are rewritten there every 10
    sets and data sets already in it are not refitted (a long run can be resumed)."""
    done: dict[int, dict] = {}
    if partial is not None and partial.exists():
        done = {r["k"]: r for r in json.loads(partial.read_text())["results"]}
    tasks = [(case, k, seed, n_steps, max_steps, None, shift_bounds, e_upper, window_rule, warm_steps)
             for k in range(n_sets) if k not in done]
    results = list(done.values())

    def save() -> None:
        if partial is not None:
            partial.write_text(json.dumps({"results": sorted(results, key=lambda r: r["k"])}))

    if jobs > 1:
        with ProcessPoolExecutor(jobs) as ex:
            for r in ex.map(one, tasks):
                results.append(r)
                if len(results) % 10 == 0:
                    save()
    else:
        for task in tasks:
            results.append(one(task))
            if len(results) % 10 == 0:
                save()
    save()
    results.sort(key=lambda r: r["k"])
    return results, summarise(results)


def _cpu_s() -> float:
    """CPU seconds of this process and its finished worker processes (the --jobs pool)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", choices=("paper", "live", "live_latent", "live_window", "live_warm"), default="paper")
    ap.add_argument("--sets", type=int, default=200)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--seed", type=int, default=2018)
    ap.add_argument("--steps", type=int, default=40_000, help="n_steps (live setting)")
    ap.add_argument("--max-steps", type=int, default=120_000, help="max_steps (live setting)")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "figures"))
    ap.add_argument("--shift-bounds", type=float, nargs=2, default=None, metavar=("SH", "SV"),
                    help="prior |s_h| <= SH, |s_v| <= SV in simulation AND fit (default: Table 3, 0.05 / 0.3)")
    ap.add_argument("--e-upper", type=float, default=None,
                    help="prior E <= this in simulation AND fit (default: Table 3, 0; Pacejka's limit is 1)")
    ap.add_argument("--window-subsample", choices=("excitation", "even"), default="excitation",
                    help="live_window: the pipeline's subsample (default) or evenly in time (the former rule)")
    ap.add_argument("--warm-steps", type=int, default=None,
                    help="live_warm: steps before the warm fit's first check (default: the pipeline's warm_steps)")
    args = ap.parse_args()
    sb = args.shift_bounds
    tag = args.case if sb is None else f"{args.case}_shift{sb[0]:g}_{sb[1]:g}"
    tag += "" if args.e_upper is None else f"_E{args.e_upper:g}"
    tag += "" if args.window_subsample == "excitation" else f"_{args.window_subsample}"
    tag += "" if args.warm_steps is None else f"_warm{args.warm_steps}"
    t0 = time.perf_counter()
    cpu0 = _cpu_s()
    load0 = os.getloadavg()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results, summ = run(args.case, args.sets, args.jobs, args.seed, args.steps, args.max_steps,
                        partial=out / f"grip_sbc_{tag}.partial.json", shift_bounds=args.shift_bounds,
                        e_upper=args.e_upper, window_rule=args.window_subsample, warm_steps=args.warm_steps)
    summ.update(wall_s=time.perf_counter() - t0, cpu_s=_cpu_s() - cpu0, load_start=load0, load_end=os.getloadavg(),
                date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), case=args.case,
                shift_bounds=args.shift_bounds, e_upper=args.e_upper)
    (out / f"grip_sbc_{tag}.json").write_text(json.dumps({"summary": summ, "results": results}, indent=1))
    plot(results, summ, tag, out / f"grip_sbc_{tag}.png")
    print(json.dumps(summ, indent=1))


if __name__ == "__main__":
    # one core per fit; set here, not at import, so importing this module (the fast SBC test) changes nothing
    os.environ.setdefault("NUMBA_NUM_THREADS", "1")
    main()
