"""Benchmark: this project's tempered SMC against PyMC's ``sample_smc`` on the same model, data and settings.

The paper's lateral stage (8-DOF paper Section 3.4; the Chrono ramp-steer window, rows 700-1069 of
shared data/chrono_hmmwv, with the paper's Section 3.1 noise, seed 0): five uniform parameters (Cyf, Cyr,
kphi_f, kphi_r, bphi), four half-normal noise sigmas and four uniform residual AR(1) coefficients rho (the
default likelihood, calibration.py Eq. A1). Both samplers get

* the same log likelihood: this project's numba 8-DOF AR(1) log likelihood
  (:meth:`~vehcal_ros.estimation.calibration.fit.StageProblem.log_likelihood`); PyMC sees it as a black-box
  pytensor ``Op`` (one particle per call, as PyMC's SMC evaluates it) inside ``pm.Potential``;
* the same priors and transforms (uniform -> interval/logit, half-normal -> log, Jacobians included);
* the same chains x draws (default 8 x 1000) and ESS threshold 0.5 for the tempering.

PyMC runs its defaults otherwise (IMH kernel, ``correlation_threshold=0.01``); this project runs
``calibrate_stage``'s sampler settings. Each side runs in its own child process (``--side``), one after the
other, warmed up first (numba cache; PyMC's start-up is measured by a 1 x 50 run and subtracted from its CPU
time, in PyMC's favour). Reported per side: wall and CPU seconds (all threads and child processes), likelihood
evaluations (for this project also the equivalent full simulations after its exact early rejection), SMC
stages, max R-hat, min bulk/tail ESS, min bulk ESS per CPU second, posterior means; and the ratio. ESS is
computed by arviz on the draws as each sampler returns them and, because the order of an SMC population means
nothing, also on draws shuffled within each chain (both sides alike); the ratio uses the smaller.

Needs the optional benchmark environment (never a dependency of the package): ``make bench-peers``, or
``.venv-bench/bin/python benchmarks/bench_vs_pymc.py [--chains 8 --draws 1000 --seed 0 --vehcal-threads 1
--json OUT]`` (this project's side on one thread by default, so both sides' CPU seconds are one core's).

``--pymc-model pytensor``: PyMC's side is instead the model as a PyMC user writes it from the paper, the 8-DOF
equations in pytensor (``pymc_8dof_pytensor.py``: ``pytensor.scan`` over the 369 time steps, the AR(1)
density per channel as a ``pm.Potential``; its log likelihood equals this project's to ~1e-15 relative,
``check_against_numba`` at 5 prior draws rho included: 4.1e-15), compiled by pytensor's C
backend (``--pytensor-mode default``) or its numba backend (``--pytensor-mode NUMBA``). Slow: 0.7-2.3 ms per
evaluation instead of ~0.06 ms; try a reduced ``--chains``/``--draws`` first.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_calibration import chrono_segment  # noqa: E402

from vehcal_ros.estimation.calibration.fit import StageProblem, base_parameters, calibrate_stage, stage_spec  # noqa: E402
from vehcal_ros.inference.diagnostics import summarize_draws  # noqa: E402
from vehcal_ros.inference.smc import HalfNormal, Uniform  # noqa: E402

STAGE = "lateral"


def lateral_problem(seed: int = 0) -> StageProblem:
    """The stage's likelihood on the Chrono window with the paper's noise (as bench_calibration.py)."""
    spec = stage_spec(STAGE)
    return StageProblem(chrono_segment(STAGE, seed), spec, base_parameters(spec, None))


def _cpu_s() -> float:
    """CPU seconds of this process (all threads) and its waited-for children."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    ch = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + ch.ru_utime + ch.ru_stime


# ------------------------------------------------------------------------------------------------ this project
def side_ours(chains: int, draws: int, seed: int, roll_split: bool = False) -> dict:
    """``calibrate_stage`` as the product runs it (its sampler settings; the CPU time includes its summaries and
    posterior-predictive check, ~1 % of the total). ``roll_split`` False: kphi_f, kphi_r sampled as such, the
    PyMC model's parametrisation; True: the product's default (total and front fraction, same posterior)."""
    seg = chrono_segment(STAGE, 0)
    calibrate_stage(seg, STAGE, n_chains=1, n_draws=50, seed=seed + 99, predictive_draws=2)  # numba cache warm
    c0, w0 = _cpu_s(), time.perf_counter()
    res = calibrate_stage(seg, STAGE, n_chains=chains, n_draws=draws, seed=seed, roll_split=roll_split)
    wall, cpu = time.perf_counter() - w0, _cpu_s() - c0
    smc = res.smc
    name = "vehcal_ros calibrate_stage" + (" (roll split)" if roll_split else "")
    return {"sampler": name, "wall_s": wall, "sampling_wall_s": res.sampling_s,
            "cpu_s": cpu, "evaluations": smc["n_evaluations"],
            "evaluation_equivalents": smc["evaluation_equivalents"], "stages": res.n_stages,
            "names": list(res.names), "draws": res.draws.tolist(),
            "mutation_steps_per_stage_chain0": smc["mutation_steps"][0],
            "acceptance_chain0": [round(a, 3) for a in smc["acceptance"][0]]}


# ------------------------------------------------------------------------------------------------------- PyMC
def _pymc_model(problem: StageProblem, counter: list[int]):
    import pymc as pm
    import pytensor.tensor as pt
    from pytensor.graph.op import Op

    class LogLike(Op):
        """This project's 8-DOF log likelihood as a black box: theta (9,) -> scalar."""

        itypes = [pt.dvector]
        otypes = [pt.dscalar]

        def perform(self, node, inputs, outputs):  # noqa: ARG002 - pytensor's signature
            counter[0] += 1
            outputs[0][0] = np.asarray(problem.log_likelihood(np.asarray(inputs[0])[None, :])[0])

    with pm.Model() as model:
        rvs = []
        for name, dist in zip(problem.prior.names, problem.prior.dists):
            if isinstance(dist, Uniform):
                rvs.append(pm.Uniform(name, lower=dist.low, upper=dist.high))
            elif isinstance(dist, HalfNormal):
                rvs.append(pm.HalfNormal(name, sigma=dist.scale))
            else:  # pragma: no cover
                raise TypeError(dist)
        pm.Potential("log_likelihood", LogLike()(pt.stack(rvs)))
    return model


def _counting_imh(counter: list[int]):
    """PyMC's IMH kernel counting its likelihood evaluations (for a model without a black-box Op): the kernel's
    compiled likelihood function, once ``set_rng`` has copied it for a chain, wrapped by a counter."""
    import pymc as pm

    class CountingIMH(pm.smc.IMH):
        def set_rng(self, rng):
            self.likelihood_logp_func = getattr(self, "_compiled_likelihood", self.likelihood_logp_func)
            super().set_rng(rng)
            compiled = self._compiled_likelihood = self.likelihood_logp_func

            def likelihood(x):
                counter[0] += 1
                return compiled(x)

            self.likelihood_logp_func = likelihood

    return CountingIMH


def side_pymc(chains: int, draws: int, seed: int, cores: int, pymc_model: str = "blackbox",
              pytensor_mode: str = "default") -> dict:
    """PyMC's ``sample_smc`` on the stage. ``pymc_model``: "blackbox" = this project's numba log likelihood as a
    pytensor Op; "pytensor" = the 8-DOF equations written in pytensor (``pymc_8dof_pytensor.py``: scan over the
    time steps, ``pm.Normal`` likelihood), compiled by pytensor's ``pytensor_mode`` ("default": its C backend;
    "NUMBA": its numba backend, ``compile_kwargs={"mode": "NUMBA"}``)."""
    import logging

    import pymc as pm

    logging.getLogger("pymc").setLevel(logging.ERROR)
    problem = lateral_problem()
    counter = [0]
    compile_kwargs = None
    if pymc_model == "pytensor":
        from pymc_8dof_pytensor import pytensor_lateral_model

        model = pytensor_lateral_model(problem)
        kernel = _counting_imh(counter)
        if pytensor_mode != "default":
            compile_kwargs = {"mode": pytensor_mode}
    else:
        model = _pymc_model(problem, counter)
        kernel = pm.smc.IMH
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        c0, w0 = _cpu_s(), time.perf_counter()
        with model:  # start-up: compile the logp functions, a tiny run
            pm.sample_smc(draws=50, chains=1, cores=1, random_seed=seed + 99, progressbar=False,
                          compute_convergence_checks=False, compile_kwargs=compile_kwargs)
        startup_cpu, startup_wall = _cpu_s() - c0, time.perf_counter() - w0
        counter[0] = 0
        c0, w0 = _cpu_s(), time.perf_counter()
        with model:
            idata = pm.sample_smc(draws=draws, chains=chains, cores=cores, random_seed=seed, progressbar=False,
                                  kernel=kernel, threshold=0.5, correlation_threshold=0.01,
                                  compute_convergence_checks=False, compile_kwargs=compile_kwargs)
        wall, cpu = time.perf_counter() - w0, _cpu_s() - c0
    post = idata.posterior
    names = list(problem.prior.names)
    drawn = np.stack([post[n].values for n in names], axis=-1)
    betas = _per_chain(idata.sample_stats["beta"].values)
    acc0 = _per_chain(idata.sample_stats["accept_rate"].values)[0]
    label = (f"PyMC {pm.__version__} sample_smc (IMH)" if pymc_model == "blackbox" else
             f"PyMC {pm.__version__} sample_smc (IMH), model in pytensor (scan), {pytensor_mode} backend")
    return {"sampler": label, "settings": {"threshold": 0.5, "correlation_threshold": 0.01, "cores": cores,
            "model": pymc_model, "pytensor_mode": pytensor_mode}, "wall_s": wall, "cpu_s": cpu,
            "cpu_s_minus_startup": max(cpu - startup_cpu, 0.0), "startup_cpu_s": startup_cpu,
            "startup_wall_s": startup_wall,
            "evaluations": counter[0] if cores == 1 else None,
            "stages": max(b.size for b in betas), "acceptance_chain0": [round(float(a), 3) for a in acc0],
            "names": names, "draws": drawn.tolist()}


def _per_chain(values: np.ndarray) -> list[np.ndarray]:
    """PyMC's per-stage sample stats, one float array per chain: ``(chain, stage)`` floats when all chains took the
    same number of stages, else an object array holding one list per chain (arviz gives it shape ``(1, chain)``)."""
    values = np.asarray(values)
    if values.dtype == object and values.size and np.ndim(values.ravel()[0]) > 0:
        return [np.asarray(x, dtype=float).ravel() for x in values.ravel()]
    return [np.asarray(row, dtype=float).ravel() for row in values]


# ---------------------------------------------------------------------------------------------------- compare
def _summary(draws: np.ndarray, names: list[str], seed: int) -> dict:
    s_own = summarize_draws(draws, names)
    rng = np.random.default_rng(seed)
    shuffled = np.stack([c[rng.permutation(c.shape[0])] for c in draws])
    s_shuf = summarize_draws(shuffled, names)
    distinct = [int(np.unique(c, axis=0).shape[0]) for c in draws]
    return {
        "max_r_hat": max(max(s.r_hat for s in s_own.values()), max(s.r_hat for s in s_shuf.values())),
        "min_ess_bulk_as_returned": min(s.ess_bulk for s in s_own.values()),
        "min_ess_tail_as_returned": min(s.ess_tail for s in s_own.values()),
        "min_ess_bulk_shuffled": min(s.ess_bulk for s in s_shuf.values()),
        "min_ess_tail_shuffled": min(s.ess_tail for s in s_shuf.values()),
        "min_ess_bulk": min(min(s.ess_bulk for s in s_own.values()), min(s.ess_bulk for s in s_shuf.values())),
        "distinct_draws_per_chain_min": min(distinct),
        "mean": {k: v.mean for k, v in s_own.items()}, "sd": {k: v.std for k, v in s_own.items()},
    }


def _run_side(side: str, args: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / f"{side}.json"
        cmd = [sys.executable, __file__, "--side", side, "--chains", str(args.chains), "--draws", str(args.draws),
               "--seed", str(args.seed), "--pymc-cores", str(args.pymc_cores), "--json", str(out),
               "--roll-split", args.roll_split, "--pymc-model", args.pymc_model, "--pytensor-mode", args.pytensor_mode]
        env = dict(os.environ)
        if side == "ours":  # numba's and the batch pool's threads (PyMC's side runs on one core, --pymc-cores)
            env["NUMBA_NUM_THREADS"] = str(args.vehcal_threads)
        load0 = os.getloadavg()
        subprocess.run(cmd, check=True, env=env)
        res = json.loads(out.read_text())
        res["load_average_before"] = load0
        res["load_average_after"] = os.getloadavg()
        return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chains", type=int, default=8)
    ap.add_argument("--draws", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--pymc-cores", type=int, default=1,
                    help="PyMC's cores (1: chains in-process and likelihood evaluations counted)")
    ap.add_argument("--vehcal-threads", type=int, default=1,
                    help="threads of this project's batch likelihood (1: both sides' CPU seconds are one core's)")
    ap.add_argument("--roll-split", choices=("off", "on"), default="off",
                    help="this project's lateral stage: off = kphi_f, kphi_r as PyMC samples them (same transforms); "
                         "on = the product default (total roll stiffness and front fraction, same posterior)")
    ap.add_argument("--pymc-model", choices=("blackbox", "pytensor"), default="blackbox",
                    help="PyMC's model: blackbox = this project's numba log likelihood as an Op (same model code); "
                         "pytensor = the 8-DOF equations written in pytensor, as a PyMC user would (slow)")
    ap.add_argument("--pytensor-mode", default="default",
                    help="pytensor backend for --pymc-model pytensor: default (C) or NUMBA")
    ap.add_argument("--side", choices=("ours", "pymc"), default=None, help=argparse.SUPPRESS)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    if args.side:
        res = (side_ours(args.chains, args.draws, args.seed, args.roll_split == "on") if args.side == "ours"
               else side_pymc(args.chains, args.draws, args.seed, args.pymc_cores, args.pymc_model,
                              args.pytensor_mode))
        Path(args.json).write_text(json.dumps(res))
        return
    if importlib.util.find_spec("pymc") is None:
        print("bench_vs_pymc: skipped, PyMC is not installed in this environment (it is a benchmark-only peer: "
              "`make bench-peers` builds .venv-bench with it)")
        return
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    sides = {"vehcal": _run_side("ours", args), "pymc": _run_side("pymc", args)}
    for i, r in enumerate(sides.values()):
        r.update(_summary(np.asarray(r.pop("draws")), r["names"], args.seed + i))
        cpu = r.get("cpu_s_minus_startup", r["cpu_s"])
        r["ess_per_cpu_s"] = r["min_ess_bulk"] / cpu if cpu > 0.0 else float("nan")
    v, p = sides["vehcal"], sides["pymc"]
    diff_sd = {k: (v["mean"][k] - p["mean"][k]) / p["sd"][k] for k in p["mean"]}
    report = {"started": started, "chains": args.chains, "draws": args.draws, "seed": args.seed,
              "vehcal_threads": args.vehcal_threads, "roll_split": args.roll_split, "pymc_model": args.pymc_model,
              "pytensor_mode": args.pytensor_mode,
              "cpus": os.cpu_count(), "sides": sides,
              "ratio_ess_per_cpu_s": v["ess_per_cpu_s"] / p["ess_per_cpu_s"],
              "ratio_cpu_s": p.get("cpu_s_minus_startup", p["cpu_s"]) / v["cpu_s"],
              "mean_difference_in_pymc_sd": diff_sd, "max_abs_mean_difference_sd": max(map(abs, diff_sd.values()))}
    print(_table(report))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))


def _table(rep: dict) -> str:
    v, p = rep["sides"]["vehcal"], rep["sides"]["pymc"]

    def row(label: str, fv, fp) -> str:
        return f"| {label} | {fv} | {fp} |"

    def f(x, fmt):
        return "n/a" if x is None else format(x, fmt)

    lines = [f"lateral stage, {rep['chains']} chains x {rep['draws']} draws, seed {rep['seed']}, "
             f"started {rep['started']}",
             "", f"| figure | {v['sampler']} | {p['sampler']} |", "|---|---|---|",
             row("wall s", f(v["wall_s"], ".1f") + f" ({rep.get('vehcal_threads', '?')} thread(s))",
                 f(p["wall_s"], ".1f") + f" ({p['settings']['cores']} core)"),
             row("CPU s", f(v["cpu_s"], ".1f"), f"{p['cpu_s']:.1f} (minus start-up: {p['cpu_s_minus_startup']:.1f})"),
             row("likelihood evaluations", f"{v['evaluations']:,} ({v['evaluation_equivalents']:,.0f} full-run "
                 "equivalents)", f(p["evaluations"], ",")),
             row("SMC stages", v["stages"], f(p["stages"], "d")),
             row("max R-hat", f"{v['max_r_hat']:.4f}", f"{p['max_r_hat']:.4f}"),
             row("min bulk ESS (as returned / shuffled)", f"{v['min_ess_bulk_as_returned']:.0f} / "
                 f"{v['min_ess_bulk_shuffled']:.0f}", f"{p['min_ess_bulk_as_returned']:.0f} / "
                 f"{p['min_ess_bulk_shuffled']:.0f}"),
             row("min tail ESS (as returned / shuffled)", f"{v['min_ess_tail_as_returned']:.0f} / "
                 f"{v['min_ess_tail_shuffled']:.0f}", f"{p['min_ess_tail_as_returned']:.0f} / "
                 f"{p['min_ess_tail_shuffled']:.0f}"),
             row("distinct draws per chain (min)", v["distinct_draws_per_chain_min"],
                 p["distinct_draws_per_chain_min"]),
             row("min bulk ESS per CPU s", f"{v['ess_per_cpu_s']:.0f}", f"{p['ess_per_cpu_s']:.0f}"),
             row("load average before -> after", _load(v), _load(p)),
             "", f"ratio of min-ESS per CPU s (vehcal / PyMC): **{rep['ratio_ess_per_cpu_s']:.2f}**; CPU s PyMC / "
             f"vehcal: {rep['ratio_cpu_s']:.2f}; largest mean difference {rep['max_abs_mean_difference_sd']:.3f} "
             "PyMC posterior sd", "", "| parameter | vehcal mean | PyMC mean | PyMC sd | difference / sd |",
             "|---|---|---|---|---|"]
    for k, d in rep["mean_difference_in_pymc_sd"].items():
        lines.append(f"| {k} | {v['mean'][k]:.5g} | {p['mean'][k]:.5g} | {p['sd'][k]:.3g} | {d:+.3f} |")
    return "\n".join(lines)


def _load(side: dict) -> str:
    return f"{side['load_average_before'][0]:.1f} -> {side['load_average_after'][0]:.1f}"


if __name__ == "__main__":
    main()
