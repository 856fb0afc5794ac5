"""``vehcal calibrate INPUT --stage S``: staged Bayesian calibration of the 8-DOF model (docs/cli.md).

INPUT is a CSV (columns ``time, throttle, brake, steering, u, v, yaw_rate, roll, roll_rate, w_lf, w_rf, w_lr,
w_rr``; SI units, rad and rad/s; first row = initial state) or a rosbag2 (.mcap, .db3 or a bag directory):
its wheel speeds, IMU, odometry and controls are read with ``io.bags.read_bag``, resampled to 100 Hz and
searched for the stage's qualifying maneuver (:mod:`vehcal_ros.estimation.calibration.segments`; the most excited
one), or cut at ``--t-start``/``--t-end``. Method:
Unjhawala et al. 2023, doi:10.1115/1.4062199, Section 3, via :mod:`vehcal_ros.estimation.calibration.fit`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from vehcal_ros.estimation.calibration.noise_models import DEFAULT_NOISE_MODEL, NOISE_MODEL_CHOICES

STAGE_CHOICES = ("longitudinal", "lateral", "rolling_resistance", "all")
BAG_SUFFIXES = (".mcap", ".db3")


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "calibrate", help="calibrate the 8-DOF model (tempered SMC, staged as the 8-DOF paper)",
        description="Staged Bayesian calibration of the 8-DOF vehicle model from one maneuver "
                    "(CSV or rosbag2). Prints a summary; --json writes parameters, noise and diagnostics.")
    p.add_argument("input", help="calibration CSV, or a rosbag2 (.mcap, .db3, directory)")
    p.add_argument("--stage", required=True, choices=STAGE_CHOICES,
                   help="stage to calibrate ('all': rolling_resistance -> longitudinal -> lateral, each holding the "
                        "earlier ones; a single stage warns when a stage it depends on has not been chained in "
                        "with --model)")
    p.add_argument("--json", metavar="OUT", help="write the result as JSON ('-' for stdout)")
    p.add_argument("--report", metavar="DIR", help="write posterior, trace, ESS, pair and response plots here")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--chains", type=int, default=8, help="independent SMC runs = chains (default 8)")
    p.add_argument("--draws", type=int, default=1000, help="particles per run = draws per chain (default 1000)")
    p.add_argument("--separate-bphi", action="store_true",
                   help="lateral: sample bphi_f and bphi_r separately (non-identifiable; paper Sec. 4.2)")
    p.add_argument("--t-start", type=float, default=None, help="use samples from this time on (s)")
    p.add_argument("--t-end", type=float, default=None, help="use samples up to this time (s)")
    p.add_argument("--model", metavar="FILE", default=None,
                   help="earlier stages' results held fixed (the paper's chaining): a previous 'vehcal calibrate "
                        "--json' result (its fixed values and parameters.<name>.mean) or a params YAML the "
                        "calibrator wrote")
    p.add_argument("--noise-prior-factor", type=float, default=1.0, metavar="F",
                   help="x the paper's half-normal noise-sigma scales (default 1 = the paper's; ~10 for data the "
                        "8-DOF model cannot reproduce exactly, e.g. the 14-DOF simulator or a real vehicle, as the "
                        "live calibrator uses)")
    p.add_argument("--noise-model", choices=NOISE_MODEL_CHOICES, default=DEFAULT_NOISE_MODEL,
                   help=f"residual model of the likelihood (default {DEFAULT_NOISE_MODEL}): auto (per stage: white "
                        "for longitudinal, ar1 for lateral and rolling resistance), ar1 (per-channel AR(1) "
                        "residuals, rho sampled), discrepancy (white sensor noise + an AR(1) model discrepancy per "
                        "channel), white (the paper's independent Gaussian); docs/calibration.md, 'Likelihood'")
    p.add_argument("--vehicle", metavar="NAME|FILE", default=None,
                   help="vehicle description (config/vehicles/<NAME>.yaml or a file; default hmmwv): 8-DOF "
                        "constants, drive/brake/steering maps, priors")
    p.add_argument("--holdout", type=float, default=0.0, metavar="F",
                   help="single stage: hold back the last F (0..0.5) of the segment, fit the rest, and judge the fit "
                        "on it against the model it replaces (--model's values, else the description's nominal "
                        "ones): held-out RMSE per channel, 90 %% band coverage, accepted or refused, as the live "
                        "calibrator (JSON 'holdout'; a refusal warns on stderr); default 0 = off")
    p.add_argument("--holdout-band", choices=("warn", "refuse"), default="warn",
                   help="with --holdout: a 90 %% band holding too few held-back samples warns (default) or refuses, "
                        "as the calibrator's holdout_band")
    p.set_defaults(func=run)
    return p


def _read_input(path: str, stages: tuple[str, ...], t_start: float | None, t_end: float | None, vehicle=None):
    """A Segment (CSV, or a bag cut at --t-start/--t-end) or, for a bag without times, stage -> Segment; the
    windows of a bag qualify through ``vehicle``'s steering map (None: the default vehicle)."""
    from vehcal_ros.errors import EstimationError, InputError
    from vehcal_ros.estimation.calibration.fit import Segment

    if not (path.lower().endswith(BAG_SUFFIXES) or os.path.isdir(path)):
        segment = Segment.from_csv(path)
        if t_start is not None or t_end is not None:
            t0 = segment.time[0] if t_start is None else t_start
            t1 = segment.time[-1] if t_end is None else t_end
            segment = segment.window(t0, t1)
        return segment
    if not os.path.exists(path):
        raise InputError(f"no such file: {path}")
    from vehcal_ros.estimation.calibration import segments as sg
    from vehcal_ros.io.bags import read_bag

    sources = sg.records_to_sources(read_bag(path))
    config = sg.SegmentConfig()
    r = sg.resample(sources, config.rate, config.max_gap, config.yaw_rate_source)
    if t_start is not None or t_end is not None:
        t0 = float(r.time[0]) if t_start is None else t_start
        t1 = float(r.time[-1]) if t_end is None else t_end
        return sg.build_segment(r, t0, t1, config, source=path)
    out = {}
    reasons = []
    for stage in stages:
        windows, why = sg.find_windows(r, stage, config, vehicle)
        if windows:
            best = max(windows, key=lambda w: w.score)
            out[stage] = sg.build_segment(r, best.t_start, best.t_end, config, source=f"{path} ({stage})")
            print(f"vehcal calibrate: {stage} segment [{best.t_start:.2f}, {best.t_end:.2f}] s, excitation "
                  f"{best.score:.3g}", file=sys.stderr)
        else:
            reasons.append(f"{stage}: {why}")
    if not out:
        raise EstimationError(f"{path}: no qualifying segment ({'; '.join(reasons)}); give --t-start/--t-end")
    return out


def _stage_json(res) -> dict:
    keep = ("mean", "std", "hdi_low", "hdi_high", "r_hat", "ess_bulk", "ess_tail", "mcse_mean")
    d = res.to_dict()
    d["parameters"] = {k: {f: v.get(f) for f in keep} for k, v in d["parameters"].items()}
    d["noise"] = {k: {f: v.get(f) for f in keep} for k, v in d["noise"].items()}
    return d


def _print_summary(res, out) -> None:
    print(f"stage {res.stage}: converged={res.converged} smc_stages={res.n_stages} "
          f"elapsed={res.elapsed_s:.1f}s log_evidence={res.log_evidence:.2f}", file=out)
    print(f"  {'name':<16}{'mean':>12}{'std':>11}{'hdi_3%':>12}{'hdi_97%':>12}{'r_hat':>8}{'ess_bulk':>10}",
          file=out)
    rows = (list(res.parameters.items()) + [(f"sigma_{k}", v) for k, v in res.noise.items()]
            + [(f"delta_{k}", v) for k, v in res.discrepancy.items()]
            + [(f"rho_{k}", v) for k, v in res.residual_correlation.items()])
    for name, s in rows:
        print(f"  {name:<16}{s['mean']:>12.5g}{s['std']:>11.3g}{s['hdi_low']:>12.5g}{s['hdi_high']:>12.5g}"
              f"{s['r_hat']:>8.4f}{s['ess_bulk']:>10.0f}", file=out)
    for ch in res.rmse_posterior:
        print(f"  rmse {ch:<11} prior {res.rmse_prior[ch]:.4g}  posterior {res.rmse_posterior[ch]:.4g}", file=out)


def _holdout(fitted, held, res, previous: dict[str, float] | None, vehicle, args: argparse.Namespace,
             out) -> dict:
    """The predictive check of ``res`` (fitted on the segment ``fitted``) on the held-back ``held``
    (estimation/calibration/acceptance.py) against ``--model``'s values of the stage's parameters (else the
    description's nominal values); printed, JSON-ready."""
    from vehcal_ros.estimation.calibration.acceptance import predictive_check
    from vehcal_ros.estimation.calibration.fit import stage_spec

    names = stage_spec(res.stage, separate_bphi=res.separate_bphi, vehicle=vehicle).parameter_names
    prev = dict(previous or {})
    if "bphi" in names and "bphi_f" in prev and "bphi_r" in prev:
        names = (*[n for n in names if n != "bphi"], "bphi_f", "bphi_r")
    replaced = {n: prev[n] for n in names if n in prev}
    chk = predictive_check(held, res, prev, replaced or None, vehicle=vehicle, seed=args.seed,
                           fitted=(float(fitted.time[0]), float(fitted.time[-1])),
                           label="--model" if replaced else "nominal", band=args.holdout_band)
    print(f"  holdout: {chk.describe()} -> {'accepted' if chk.passed else 'REFUSED'}", file=out)
    for line in chk.warnings():
        print(f"vehcal calibrate: warning: its 90 % band is too narrow: {line}", file=sys.stderr)
    if not chk.passed:
        print(f"vehcal calibrate: warning: the fit does not predict its {chk.describe()}", file=sys.stderr)
    return chk.to_dict()


def _order_warnings(segments: dict, previous: dict[str, float] | None, model: str | None,
                    vehicle) -> tuple[set[str], list[str]]:
    """(names ``--model``'s chain calibrated, one warning per stage about to run whose fit depends on a parameter
    no earlier stage calibrated: :mod:`vehcal_ros.estimation.calibration.stage_order`)."""
    from vehcal_ros.estimation.calibration.stage_order import CALIBRATED_BY, CHAIN_ORDER, order_warning
    from vehcal_ros.io.model_file import calibrated_names
    from vehcal_ros.models.vehicle_8dof import VehicleConstants

    before = calibrated_names(model) if model else set()
    held = {**VehicleConstants.from_description(vehicle).default_parameters(), **(previous or {})}
    known = set(before)
    warnings = []
    for stage in CHAIN_ORDER:
        if stage not in segments:
            continue
        msg = order_warning(stage, known, held)
        if msg:
            warnings.append(f"vehcal calibrate: warning: {msg}")
        known |= {name for name, st in CALIBRATED_BY.items() if st == stage}
    return before, warnings


def run(args: argparse.Namespace) -> int:
    from vehcal_ros.errors import InputError
    from vehcal_ros.estimation.calibration import fit as cal

    if args.chains < 1 or args.chains > 64:
        raise InputError(f"--chains must be in 1..64, got {args.chains}")
    if args.draws < 50 or args.draws > 100000:
        raise InputError(f"--draws must be in 50..100000, got {args.draws}")
    if not 0.0 <= args.holdout <= 0.5:
        raise InputError(f"--holdout must be in 0..0.5, got {args.holdout}")
    if args.holdout > 0.0 and args.stage == "all":
        raise InputError("--holdout works on a single --stage")
    stages = cal.STAGE_NAMES if args.stage == "all" else (args.stage,)
    vehicle = None
    if args.vehicle:
        from vehcal_ros.vehicle.description import load_description
        vehicle = load_description(args.vehicle)
    previous = None
    if args.model:
        from vehcal_ros.io.model_file import load_model_file
        previous = load_model_file(args.model)
    loaded = _read_input(args.input, stages, args.t_start, args.t_end, vehicle)
    segments = loaded if isinstance(loaded, dict) else dict.fromkeys(stages, loaded)
    calibrated, order_warnings = _order_warnings(segments, previous, args.model, vehicle)
    if args.stage == "all":
        results = cal.calibrate_all(segments, n_chains=args.chains, n_draws=args.draws, seed=args.seed,
                                    separate_bphi=args.separate_bphi, previous=previous, vehicle=vehicle,
                                    noise_prior_factor=args.noise_prior_factor, noise_model=args.noise_model)
    else:
        held = None
        if args.holdout > 0.0:
            from vehcal_ros.estimation.calibration.acceptance import split_segment

            segments[args.stage], held = split_segment(segments[args.stage], args.holdout)
        results = {args.stage: cal.calibrate_stage(segments[args.stage], args.stage, n_chains=args.chains,
                                                   n_draws=args.draws, seed=args.seed,
                                                   separate_bphi=args.separate_bphi, previous=previous,
                                                   vehicle=vehicle, noise_prior_factor=args.noise_prior_factor,
                                                   noise_model=args.noise_model)}
    for line in order_warnings:   # after the fit, so that a refused segment stays a one-line error
        print(line, file=sys.stderr)
    summary_out = sys.stderr if args.json == "-" else sys.stdout
    for res in results.values():
        _print_summary(res, summary_out)
    if args.stage == "all":
        stages = {k: _stage_json(v) for k, v in results.items()}
        doc = {
            "stage": "all", "converged": all(r.converged for r in results.values()),
            "elapsed_s": sum(r.elapsed_s for r in results.values()),
            "parameters": {k: v for s in stages.values() for k, v in s["parameters"].items()},
            "noise": {f"{st}.{k}": v for st, s in stages.items() for k, v in s["noise"].items()},
            "stages": stages,
        }
    else:
        doc = _stage_json(results[args.stage])
        if held is not None:
            doc["holdout"] = _holdout(segments[args.stage], held, results[args.stage], previous, vehicle, args,
                                      summary_out)
    doc["input"] = os.fspath(args.input)
    doc["seed"] = args.seed
    doc["vehicle"] = vehicle.name if vehicle is not None else "hmmwv"
    doc["calibrated"] = sorted(calibrated | {k for r in results.values() for k in r.parameters})
    if args.model:
        doc["model"] = os.fspath(args.model)
    if args.json == "-":
        json.dump(doc, sys.stdout, indent=2)
        print()
    elif args.json:
        from vehcal_ros.atomic_files import write_atomic

        write_atomic(args.json, json.dumps(doc, indent=2))
    if args.report:
        from vehcal_ros.io.calibration_plots import write_report

        for res in results.values():
            out_dir = os.path.join(args.report, res.stage) if len(results) > 1 else args.report
            write_report(segments[res.stage], res, out_dir)
    if not all(r.converged for r in results.values()):
        print("vehcal calibrate: warning: not converged (R-hat >= 1.01 or bulk ESS <= 400); "
              "raise --draws/--chains", file=sys.stderr)
    return 0
