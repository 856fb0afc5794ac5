"""The grip estimator's parameters, each declared once (name, default, range, description) next to the
configurations they fill (:func:`~vehcal_ros.estimation.grip.pipeline.pipeline_from_params`): the signal
conditioning, the fit (friction paper, Algorithm 1), the schedule's gates, the road-change test, the belief in
force and the forces from production sensors. The grip_estimator node adds its topics and timing
(vehcal_ros/nodes/parameters.py); docs/nodes.md's table and config/estimate.yaml are generated from both
(tools/param_reference.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from vehcal_ros.estimation.grip.belief import HazardModel
from vehcal_ros.estimation.grip.fit import GripConfig
from vehcal_ros.estimation.grip.friction_samples import BRAKING_MODES, SCOPE_MODES, GripSignalConfig
from vehcal_ros.estimation.grip.pipeline import FORCE_SOURCES, GripPipeline, fit_config_from
from vehcal_ros.estimation.grip.surface_change import SurfaceChangeConfig
from vehcal_ros.estimation.sensing.speed_reference import SPEED_REFERENCE_CHOICES
from vehcal_ros.estimation.sensing.tire_forces import TireForceConfig
from vehcal_ros.parameters import ParamSpec

THETA_NAMES = ("B", "C", "D", "E", "s_h", "s_v")

# the configurations the parameters fill: each parameter's default is its field's (one source per value)
_SIGNAL = GripSignalConfig   # its settings' defaults (the slip geometry has none: the vehicle description's)
_FIT = GripConfig()
_SURFACE = SurfaceChangeConfig()
_HAZARD = HazardModel()
_FORCES = TireForceConfig()


def _bounds_check(name: str, v: Any) -> str | None:
    if len(v) != 6 or not all(isinstance(x, (int, float)) and np.isfinite(x) for x in v):
        return f"parameter '{name}' needs 6 finite numbers (B, C, D, E, s_h, s_v), got {list(v)}"
    return None


def theta_order_problem(values: Mapping[str, Any]) -> str | None:
    """A message when some prior lower bound is not below its upper bound (a combination of two parameters)."""
    lo, hi = values["theta_lower"], values["theta_upper"]
    bad = [f"{n}: {a} >= {b}" for n, a, b in zip(THETA_NAMES, lo, hi) if not a < b]
    if bad:
        return f"parameters 'theta_lower' < 'theta_upper' required per element; not so for {', '.join(bad)}"
    return None


def check_combination(values: Mapping[str, Any], base: GripConfig | None = None) -> None:
    """Raise ValueError naming the problem when the grip_estimator parameter values ``values``, each valid alone,
    do not go together: prior bounds out of order (:func:`theta_order_problem`) or sampler settings
    :func:`~vehcal_ros.estimation.grip.pipeline.fit_config_from` refuses (``base``: the fit configuration they
    would change)."""
    problem = theta_order_problem(values)
    if problem:
        raise ValueError(problem)
    fit_config_from(values, base)


PARAMS: tuple[ParamSpec, ...] = (
    ParamSpec("scope", _SIGNAL.scope, "estimate per axle, per wheel or for the whole vehicle", choices=SCOPE_MODES,
              read_only=True),
    ParamSpec("braking", _SIGNAL.braking, "braking samples (Fx < 0): keep (fit the odd curve through both), mirror to "
              "traction, separate scope, or drop",
              choices=BRAKING_MODES, read_only=True),
    # vehicle facts come from the description (``vehicle``); these override it (0 = the description's), with a WARN
    ParamSpec("r0", 0.0, "override of the description's rolling radius, m: load-independent, or r0 - Fz/kt with kt "
              "(0 = the description's)", 0.0, 2.0,
              read_only=True),
    ParamSpec("kt", 0.0, "override of the description's tire vertical stiffness (radius r0 - Fz/kt), N/m "
              "(0 = the description's)", 0.0, 1e7, read_only=True),
    ParamSpec("wheelbase_front", 0.0, "override of the description's CM to front axle, m (0 = the description's)",
              0.0, 10.0, read_only=True),
    ParamSpec("wheelbase_rear", 0.0, "override of the description's CM to rear axle, m (0 = the description's)",
              0.0, 10.0, read_only=True),
    ParamSpec("track", 0.0, "override of the description's track width, m (0 = the description's)", 0.0, 5.0,
              read_only=True),
    ParamSpec("steering_gain", 0.0, "override of the description's road-wheel angle per unit steering input, rad "
              "(0 = the description's)", 0.0, 2.0, read_only=True),
    ParamSpec("min_speed", _SIGNAL.min_speed, "samples slower than this are dropped, m/s", 0.0, 50.0, read_only=True),
    ParamSpec("min_fz", _SIGNAL.min_fz, "samples with a lighter normal load are dropped, N", 0.0, 1e5, read_only=True),
    ParamSpec("max_abs_slip", _SIGNAL.max_abs_slip,
              "samples with a larger |slip ratio| are dropped", 0.01, 1.0, read_only=True),
    ParamSpec("max_steer", _SIGNAL.max_steer, "front samples with a larger road-wheel angle are dropped, rad", 0.0, 1.0,
              read_only=True),
    ParamSpec("max_lateral_mu", _SIGNAL.max_lateral_mu,
              "samples with a larger |Fy/Fz| are dropped (combined slip)", 0.0, 2.0,
              read_only=True),
    ParamSpec("max_slip_angle", _SIGNAL.max_slip_angle,
              "samples fitted as pure slip with a larger kinematic slip angle (steering and toe) are dropped "
              "(combined slip), rad", 0.001, 1.0, read_only=True),
    ParamSpec("sync_tolerance", _SIGNAL.sync_tolerance,
              "max gap to interpolate wheel speed / odometry at a force stamp, s",
              0.001, 1.0, read_only=True),
    ParamSpec("average_window", _SIGNAL.average_window,
              "per-wheel block average of the friction samples, s (0 = none)", 0.0, 1.0,
              read_only=True),
    ParamSpec("window", _SIGNAL.window,
              "friction samples older than this are forgotten, s", 1.0, 3600.0, read_only=True),
    ParamSpec("buffer_size", _SIGNAL.capacity,
              "maximum friction samples kept per scope", 10, 1_000_000, read_only=True),
    ParamSpec("min_new_points", GripPipeline.min_new_points,
              "a scope is refitted only after this many new samples", 0, 1_000_000),
    ParamSpec("min_points", _FIT.min_points, "fewest samples for a fit", 8, 1_000_000),
    ParamSpec("max_fit_points", GripPipeline.max_fit_points,
              "samples used per fit (the newest, subsampled evenly)", 8, 100_000),
    ParamSpec("n_ml_starts", _FIT.n_ml_starts, "maximum-likelihood starts (Algorithm 1, step 1)", 1, 100_000),
    ParamSpec("n_chains", _FIT.n_chains, "adaptive Metropolis chains", 2, 256),
    ParamSpec("n_steps", _FIT.n_steps, "steps per chain before the first convergence check", 500, 10_000_000),
    ParamSpec("max_steps", _FIT.max_steps, "chains failing the convergence rule are extended up to this many steps",
              500, 10_000_000),
    ParamSpec("max_r_hat", _FIT.r_hat_threshold,
              "publish only if every split R-hat (theta, sigma, mu_max) is at most this",
              1.0, 2.0),
    ParamSpec("min_ess", _FIT.ess_threshold,
              "publish only if every bulk ESS (theta, sigma, mu_max) is at least this", 0.0, 1e6),
    ParamSpec("min_ess_tail", _FIT.ess_tail_threshold,
              "publish only if every tail ESS (theta, sigma, mu_max) is at least this",
              0.0, 1e6),
    ParamSpec("min_excitation", GripPipeline.min_excitation,
              "publish only if the span of abs(mu) in the window (95th - 5th percentile) reaches this",
              0.0, 2.0),
    ParamSpec("require_new_excitation", GripPipeline.require_new_excitation,
              "refit (and re-stamp) a scope only when the samples since its published "
              "estimate's data reach min_excitation; the last estimate keeps its older stamp meanwhile"),
    ParamSpec("theta_lower", [lo for lo, _ in _FIT.bounds], "prior lower bounds of B, C, D, E, s_h, s_v "
              "(published tire data, docs/grip.md)", check=lambda v: _bounds_check("theta_lower", v)),
    ParamSpec("theta_upper", [hi for _, hi in _FIT.bounds], "prior upper bounds of B, C, D, E, s_h, s_v "
              "(published tire data, docs/grip.md)", check=lambda v: _bounds_check("theta_upper", v)),
    ParamSpec("max_peak_slip", _FIT.max_peak_slip,
              "physical prior: largest slip ratio at the curve peak (published tires: "
              "0.07-0.21 on a dry road)", 0.005, 1.0),
    ParamSpec("prior_mode", _FIT.prior_mode, "physical prior applied inside the posterior or after sampling",
              choices=("truncated", "posthoc")),
    ParamSpec("interval_prob", _FIT.interval_prob, "probability of the credible interval on mu_max", 0.5, 0.999),
    ParamSpec("seed", _FIT.seed, "base seed of the samplers (cycle k uses seed + 1000 k)", 0, 2**31 - 1),
    ParamSpec("warm_start", GripPipeline.warm_start, "start each fit from the previous posterior of its scope"),
    ParamSpec("warm_steps", GripPipeline.warm_steps,
              "steps per chain before the first convergence check of a warm-started fit "
              "(its chains go on from the previous fit's; 0 = n_steps)", 0, 10_000_000),
    ParamSpec("shape_prior", False, "fit with a tire-shape prior (B C D, C, E) learnt from the scope's published "
              "estimates (peak free per surface; off until measured, see benchmarks/README_grip.md)"),
    ParamSpec("surface_change_threshold", _SURFACE.threshold, "road-change test: CUSUM threshold h of "
              "the recursive residuals of the new samples' batch means against the published estimate (0 = off; "
              "estimation/grip/surface_change.py)", 0.0, 1000.0, read_only=True),
    ParamSpec("surface_change_drift", _SURFACE.drift, "road-change test: CUSUM allowance k per batch, "
              "standard deviations", 0.0, 10.0, read_only=True),
    ParamSpec("surface_change_batch", _SURFACE.batch, "road-change test: consecutive new samples per "
              "batch mean (the slips' serially correlated errors)", 1, 1000, read_only=True),
    ParamSpec("hazard_change_distance", _HAZARD.change_distance,
              "road-change hazard: mean road length between friction changes, m "
              "(a design assumption; estimation/grip/belief.py)", 1.0, 1e7, read_only=True),
    ParamSpec("hazard_change_time", _HAZARD.change_time,
              "road-change hazard: mean time between weather changes, s", 1.0, 1e7,
              read_only=True),
    ParamSpec("unknown_above", _HAZARD.unknown_above,
              "the belief is published as unknown (mean NaN, lower 0) when the probability "
              "of a road change since the estimate's data exceeds this, by the hazard alone and given the samples "
              "since, and those prove no friction beyond the road prior's lower end", 0.01, 1.0, read_only=True),
    ParamSpec("floor_belief", GripPipeline.floor_belief,
              "a window that publishes no fit may put a floor belief in force: mu_max at "
              "least the largest friction its samples show beyond their noise, up to the prior "
              "(estimation/grip/belief.py)", read_only=True),
    # --- tire forces from production sensors (estimation/sensing/tire_forces.py, docs/tire_forces.md)
    ParamSpec("force_source", GripPipeline.force_source,
              "tire forces from the transducer topic, estimated from wheel torque + "
              "IMU, or auto (measured while the tire-force topic is alive)", choices=FORCE_SOURCES, read_only=True),
    ParamSpec("vehicle", "hmmwv", "vehicle description (config/vehicles name or YAML file): every vehicle fact "
              "the estimator uses (geometry, rolling radius, steering, toe, loads, the force estimator's constants)",
              read_only=True),
    ParamSpec("force_timeout", GripPipeline.force_timeout,
              "auto: the tire-force topic counts as alive this long after a sample, s",
              0.01, 60.0, read_only=True),
    ParamSpec("speed_reference", "auto", "the slips' vehicle speed: auto (undriven_wheels on a two-wheel-drive "
              "vehicle, gnss_imu on an all-wheel-drive one), gnss_imu (GNSS velocity fused with the IMU's a_x and "
              "pitch, estimation/sensing/speed_reference.py), undriven_wheels (the free-rolling undriven axle for "
              "the driven wheels, not while braking; the undriven wheels take gnss_imu, or give floor beliefs only "
              "without GNSS) or odometry (the odometry topic's twist, which must then be independent of the wheels)",
              choices=SPEED_REFERENCE_CHOICES, read_only=True),
    ParamSpec("radius_learning", True, "learn each axle's effective rolling radius online from free rolling against "
              "the GNSS speed (estimation/sensing/rolling_radius.py); friction samples wait until it is known",
              read_only=True),
    ParamSpec("max_radius_sd", GripPipeline.max_radius_sd,
              "friction samples wait until the learnt radius's relative SD is at most "
              "this (both axles); until then they count toward floor beliefs only", 1e-5, 0.1, read_only=True),
    ParamSpec("wheel_speed_noise", _FORCES.wheel_speed_std,
              "std of a wheel-speed sample, rad/s: the tire-force filter's; the online "
              "rolling radius takes the larger of it and the free-rolling scatter, and /diagnostics names the wheel "
              "speeds when that scatter exceeds 3x it", 1e-4, 10.0, read_only=True),
    ParamSpec("torque_noise", _FORCES.torque_std, "std of a net wheel-torque sample (JointState.effort), N m", 0.0, 1e4,
              read_only=True),
    ParamSpec("fx_process_noise", _FORCES.fx_rate_psd,
              "random-walk intensity of Fx in the wheel filter, N^2/s", 1.0, 1e12,
              read_only=True),
    ParamSpec("accel_noise", _FORCES.accel_std, "std of an IMU acceleration sample, m/s^2", 0.0, 10.0, read_only=True),
    ParamSpec("fz_rel_std", _FORCES.fz_rel_std,
              "relative std of the estimated Fz from the vehicle constants (per sample, and as "
              "a friction-scale error common to a fit's samples that widens its mu_max interval)", 0.0, 1.0,
              read_only=True),
    ParamSpec("torque_scale_learning", False, "estimated forces: correct Fx by the reported wheel torques' scale "
              "learnt from the vehicle's acceleration (estimation/sensing/torque_scale.py); off: it is learnt and "
              "reported (torque_scale on /diagnostics, a WARN naming torques or mass when it departs from 1) but not "
              "applied",
              read_only=True),
)
"""The grip estimator's estimation parameters in declaration order."""
