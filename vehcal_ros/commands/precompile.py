"""``vehcal precompile``: compile the package's JIT kernels into their on-disk cache, once per install or upgrade.

The kernels (14-DOF simulator, grip posterior, 8-DOF model and its likelihoods, tire-force filter) compile on
first use, over a minute of CPU in all; each process that finds the cache empty pays for what it uses. On a fresh
install the first simulator therefore stalls for tens of seconds before it publishes, and every node started at
the same time compiles the same kernels itself. This verb runs the product's own code paths on small
synthetic inputs, three groups on up to ``--jobs`` processes, so that the nodes, replays and CLI processes started
afterwards load the kernels from the cache (the cache directory is keyed by the kernels' sources, so it stays
valid until the package changes). The inputs are the built-in scenarios and the package's default vehicle; no
result is kept.

In a ROS 2 install: ``ros2 run vehcal_ros vehcal precompile`` after ``colcon build``.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("precompile", help="compile the JIT kernels into their cache (once per install)",
                              description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", "-j", type=int, default=None,
                   help=f"processes compiling at once (default: one per core, at most {len(GROUPS)}; 1 = this "
                        "process)")
    p.add_argument("--quiet", action="store_true", help="no summary line")
    p.set_defaults(func=run)


def _simulator() -> None:
    """The 14-DOF simulator with its sensors (a second of the built-in test maneuver) and the tire-force filter of
    ``force_source: estimated`` over its records."""
    from vehcal_ros.io.scenarios import load_scenario
    from vehcal_ros.io.simulate import ScenarioRun
    from vehcal_ros.replay.params import grip_pipeline_from, node_values

    scenario = load_scenario("test_maneuver").with_seed(0)
    values = {**node_values(None, 0)["grip_estimator"], "force_source": "estimated"}
    pipeline = grip_pipeline_from(values)
    for _, record, _ in ScenarioRun(scenario, duration=1.0):
        pipeline.add(record)


def _grip() -> None:
    """The grip fit (multi-start least squares, ML refinement, adaptive Metropolis chains, latent slip) on
    friction samples of a known curve, cold and warm-started, with the node's settings and a short budget."""
    import numpy as np

    from vehcal_ros.estimation.grip.fit import GripEstimator
    from vehcal_ros.estimation.grip.pipeline import fit_config_from
    from vehcal_ros.models.pacejka import mf_curve, slope
    from vehcal_ros.replay.params import node_values

    values = {**node_values(None, 0)["grip_estimator"], "n_chains": 2, "n_steps": 400, "max_steps": 400,
              "n_ml_starts": 2}
    config = fit_config_from(values)
    rng = np.random.default_rng(0)
    theta = np.array([12.0, 1.6, 0.8, 0.2, 0.0, 0.0])
    slip = rng.uniform(-0.02, 0.06, 300)
    mu = mf_curve(slip, theta) + rng.normal(0.0, 0.01, slip.size)
    extra = dict(slip_var=np.full(slip.size, 1e-6), mu_var=np.full(slip.size, 1e-4), lateral=np.full(slip.size, 0.05))
    first = GripEstimator(config).fit(slip, mu, **extra)
    GripEstimator(config).fit(slip, mu, warm_start=first, **extra)
    slope(slip, theta)


def _calibration() -> None:
    """The calibrator's three stages (8-DOF model, tempered SMC, the stage likelihoods, the held-back check) on an
    8-DOF drive of the default vehicle: a throttle ramp, a coast-down and a steering ramp, with small budgets."""
    import numpy as np

    from vehcal_ros.models.vehicle_8dof import STATE_INDEX, Simulator8Dof, default_vehicle_constants
    from vehcal_ros.records import Controls, ImuSample, OdomSample, WheelSpeeds
    from vehcal_ros.replay.params import calibration_pipeline_from, node_values

    t = np.arange(1451) / 100.0
    throttle = np.interp(t, [0.0, 1.0, 3.0, 4.0, 5.0, 14.5], [0.0, 0.0, 0.5, 0.5, 0.0, 0.0])
    steering = np.interp(t, [0.0, 10.0, 14.5], [0.0, 0.0, 0.2])
    brake = np.zeros_like(t)
    x0 = np.zeros(len(STATE_INDEX))
    x0[STATE_INDEX["u"]] = 4.0
    radius = default_vehicle_constants().r0
    for wheel in ("w_lf", "w_lr", "w_rf", "w_rr"):
        x0[STATE_INDEX[wheel]] = 4.0 / radius
    x = Simulator8Dof(x0, t, throttle, brake, steering, dt=0.005, output_dt=0.01, n_out=t.size).run({})
    rng = np.random.default_rng(0)

    def noisy(state: str, sd: float) -> np.ndarray:
        return x[:, STATE_INDEX[state]] + rng.normal(0.0, sd, t.size)

    u, v, r = noisy("u", 0.1), noisy("v", 0.05), noisy("wz", 0.02)
    roll, roll_rate = noisy("phi", 0.005), noisy("wx", 0.002)
    wheels = np.column_stack([noisy(w, 1.0) for w in ("w_lf", "w_rf", "w_lr", "w_rr")])
    values = {**node_values(None, 0)["model_calibrator"], "n_chains": 2, "n_draws": 60, "min_ess": 1.0,
              "min_ess_tail": 1.0, "max_r_hat": 10.0, "require_order": False}
    pipeline = calibration_pipeline_from(values)
    for k, tk in enumerate(t + 100.0):
        tk = float(tk)
        pipeline.add(WheelSpeeds(tk, wheels[k]))
        pipeline.add(ImuSample(tk, float(roll[k]), float(roll_rate[k]), float(r[k]), 0.0, 0.0))
        pipeline.add(OdomSample(tk, float(u[k]), float(v[k]), float(r[k])))
        pipeline.add(Controls(tk, float(throttle[k]), 0.0, float(steering[k])))
    pipeline.run_cycle(final=True)


WORKLOADS: dict[str, Callable[[], None]] = {"simulator": _simulator, "grip": _grip, "calibration": _calibration}
"""The kernel groups, each compiled by one task (of similar cost: 20-30 CPU-s each)."""
GROUPS = tuple(WORKLOADS)


def compile_group(name: str) -> tuple[str, float]:
    """Run group ``name``'s workload (its kernels land in the cache); returns (name, CPU seconds)."""
    start = time.process_time()
    WORKLOADS[name]()
    return name, time.process_time() - start


def run(args: argparse.Namespace) -> int:
    from vehcal_ros.errors import InputError
    from vehcal_ros.inference.executors import make_executor, map_over_executor, values_or_raise

    if args.jobs is not None and args.jobs < 1:
        raise InputError(f"--jobs {args.jobs}: must be >= 1")
    jobs = min(len(GROUPS), args.jobs or os.cpu_count() or 1)
    start = time.perf_counter()
    if jobs == 1:
        done = [compile_group(name) for name in GROUPS]
    else:
        with make_executor("local", jobs) as executor:
            done = values_or_raise(map_over_executor(compile_group, GROUPS, executor))
    if not args.quiet:
        cpu = ", ".join(f"{name} {seconds:.0f} CPU-s" for name, seconds in done)
        print(f"kernels compiled into {os.environ.get('NUMBA_CACHE_DIR', 'the cache')} in "
              f"{time.perf_counter() - start:.0f} s ({cpu})")
    return 0
