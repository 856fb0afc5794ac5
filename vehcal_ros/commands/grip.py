"""``vehcal grip DATA.csv``: one grip fit (friction paper, Algorithm 1) on a CSV with columns slip,mu."""

from __future__ import annotations

import argparse
import csv
import json
import math
from pathlib import Path

from vehcal_ros.errors import InputError


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("grip", help="fit the friction curve and grip potential to slip,mu samples",
                              description=__doc__)
    p.add_argument("data", metavar="DATA.csv", help="CSV with header columns slip,mu (others ignored)")
    p.add_argument("--json", metavar="OUT", help="write the estimate as JSON")
    p.add_argument("--plot", metavar="PNG", help="write a figure of data, ML curve and posterior band")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--max-peak-slip", type=float, default=None,
                   help="physical prior: largest slip at the curve maximum (default: the grip_estimator's, 0.25)")
    p.add_argument("--chains", type=int, default=None, help="adaptive Metropolis chains (default: the node's, 8)")
    p.add_argument("--steps", type=int, default=None,
                   help="steps per chain before the first convergence check (default: the node's, 40000)")
    p.add_argument("--max-steps", type=int, default=None,
                   help="chains failing the convergence rule (split R-hat <= 1.01, bulk and tail ESS >= 400) are "
                        "extended up to this many steps (default: the node's, 120000)")
    p.add_argument("--prior", choices=("truncated", "posthoc"), default="truncated",
                   help="physical prior inside the posterior (truncated) or applied to the draws (posthoc)")
    p.add_argument("--braking", choices=("keep", "mirror", "drop"), default="keep",
                   help="samples with slip < 0: keep them (one odd curve through traction and braking, as the node "
                        "fits), mirror them to (-slip, -mu), or drop them (default keep)")
    p.set_defaults(func=run)


def read_slip_mu(path: str | Path) -> tuple[list[float], list[float]]:
    """Columns ``slip`` and ``mu`` of a CSV file; InputError naming the file/line for any problem."""
    path = Path(path)
    if not path.exists():
        raise InputError(f"no such file: {path}")
    if path.is_dir():
        raise InputError(f"is a directory, expected a CSV file: {path}")
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not a text CSV file ({exc.reason})") from None
    if not text.strip():
        raise InputError(f"{path}: empty file, expected a header with columns slip,mu")
    reader = csv.reader(text.splitlines())
    header = [h.strip().lower() for h in next(reader)]
    missing = [c for c in ("slip", "mu") if c not in header]
    if missing:
        raise InputError(f"{path}: missing column(s) {', '.join(missing)} in header {','.join(header)!r}")
    i_s, i_m = header.index("slip"), header.index("mu")
    slip: list[float] = []
    mu: list[float] = []
    for line_no, row in enumerate(reader, start=2):
        if not row or all(not c.strip() for c in row):
            continue
        try:
            slip.append(float(row[i_s]))
            mu.append(float(row[i_m]))
        except IndexError:
            raise InputError(f"{path}: line {line_no} has {len(row)} fields, expected at least "
                             f"{max(i_s, i_m) + 1}") from None
        except ValueError:
            raise InputError(f"{path}: line {line_no}: non-numeric slip/mu value "
                             f"{row[i_s].strip()!r}, {row[i_m].strip()!r}") from None
    if not slip:
        raise InputError(f"{path}: no data rows after the header")
    return slip, mu


def run(args: argparse.Namespace) -> int:
    if args.max_peak_slip is not None and not (0.0 < args.max_peak_slip < 1.0 and math.isfinite(args.max_peak_slip)):
        raise InputError(f"--max-peak-slip must be in (0, 1), got {args.max_peak_slip}")
    if args.chains is not None and not 1 <= args.chains <= 1024:
        raise InputError(f"--chains must be in [1, 1024], got {args.chains}")
    if args.steps is not None and args.steps < 100:
        raise InputError(f"--steps must be >= 100, got {args.steps}")
    slip, mu = read_slip_mu(args.data)  # before the heavy imports: bad input fails fast
    import numpy as np

    from vehcal_ros.estimation.grip.fit import GripConfig, GripEstimator

    shipped = GripConfig()   # the grip_estimator node's fit settings, unless a flag says otherwise
    steps = args.steps if args.steps is not None else shipped.n_steps
    max_steps = args.max_steps if args.max_steps is not None else max(shipped.max_steps, steps)
    if max_steps < steps:
        raise InputError(f"--max-steps must be >= --steps ({steps}), got {max_steps}")
    finite_s = [abs(x) for x in slip if math.isfinite(x)]
    s_top = min(1.0, max([0.3, *finite_s]))
    given = {"max_peak_slip": args.max_peak_slip, "n_chains": args.chains}
    cfg = GripConfig(slip_grid=(0.0, s_top, 61), seed=args.seed, n_steps=steps, max_steps=max_steps,
                     thin=max(1, min(20, steps // 200)), prior_mode=args.prior,
                     keep_negative_slip=args.braking == "keep", mirror_braking=args.braking == "mirror",
                     **{k: v for k, v in given.items() if v is not None})
    est = GripEstimator(cfg).fit(np.asarray(slip), np.asarray(mu))
    d = est.to_dict()
    m = est.mu_max
    print(f"grip potential mu_max = {m.mean:.4f} +- {m.std:.4f}  ({m.prob:.0%} interval "
          f"[{m.lower:.4f}, {m.upper:.4f}])")
    print(f"slip at peak = {est.slip_at_peak_mean:.4f} +- {est.slip_at_peak_std:.4f};  ML mu_max = "
          f"{est.mu_max_ml:.4f};  sigma = {est.sigma:.4g}")
    braking = {"keep": "kept", "mirror": "mirrored", "drop": "dropped"}[args.braking]
    print(f"points {est.n_points} (removed non-finite {est.n_removed_nonfinite}; braking {est.n_braking} {braking}); "
          f"R-hat max {est.r_hat_max:.4f}, ESS min bulk {est.ess_bulk_min:.0f} / tail {est.ess_tail_min:.0f} "
          f"after {est.n_steps_used} steps x {cfg.n_chains} chains; {est.elapsed_s:.2f} s")
    print("converged (split R-hat <= 1.01, bulk and tail ESS >= 400 on B, C, D, E, s_h, s_v, sigma, mu_max): "
          + ("yes" if est.converged else "NO - the interval above is not a converged posterior summary"))
    if est.prior_dominated:
        print(f"prior-dominated: the data do not identify the curve maximum (posterior std of mu_max "
              f"{est.mu_max.std:.3f} vs {est.mu_max_prior_std:.3f} under the prior alone)")
    if args.json:
        from vehcal_ros.atomic_files import write_atomic

        write_atomic(args.json, json.dumps(d, indent=2, allow_nan=False) + "\n")
    if args.plot:
        from vehcal_ros.io.grip_plots import plot_grip_fit

        plot_grip_fit(args.plot, np.asarray(slip), np.asarray(mu), est)
    return 0
