"""Every vehicle fact the grip estimator uses comes from the vehicle description; parameters only override it,
with a warning; ``--vehicle FILE`` is the only vehicle input a replay needs; no interval below its data."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from vehcal_ros.commands.replay import load_params
from vehcal_ros.commands.vehicle_option import apply_vehicle
from vehcal_ros.estimation.grip.friction_samples import ScopeData
from vehcal_ros.estimation.grip.pipeline import FitOutcome, observed_floor, pipeline_from_params
from vehcal_ros.estimation.sensing.tire_forces import TireForceVehicle
from vehcal_ros.replay.params import default_params_file, grip_pipeline_from, resolve_params
from vehcal_ros.vehicle.description import load_description, to_document

# config/vehicles/sedan.yaml, as written there
SEDAN = {"a": 1.4153, "b": 1.3588, "cf": 1.5943, "cr": 1.6056, "r0": 0.3538, "kt": 280835.3, "steer": 0.5896}


def grip_values(**over) -> dict:
    return {**resolve_params(None)["grip_estimator"], **over}


def test_geometry_comes_from_the_description() -> None:
    p = pipeline_from_params(grip_values(vehicle="sedan"))
    c = p.signal_config
    assert c.wheel_x == pytest.approx((SEDAN["a"], SEDAN["a"], -SEDAN["b"], -SEDAN["b"]))
    assert c.wheel_y == pytest.approx((SEDAN["cf"] / 2, -SEDAN["cf"] / 2, SEDAN["cr"] / 2, -SEDAN["cr"] / 2))
    assert c.steering_gain == pytest.approx(SEDAN["steer"])
    # the slips' effective rolling radius: the description's r0 - Fz/kt at the static loads (mean over the
    # axles), falling by a third of the deflection Fz/kt as the load changes (R_e ~ R0 - deflection/3)
    assert c.radius_mode == "load"
    assert (c.kt, c.kt_rear) == pytest.approx((3.0 * SEDAN["kt"], 3.0 * SEDAN["kt"]))
    loads = load_description("sedan").static_wheel_loads()
    static = [SEDAN["r0"] - fz / SEDAN["kt"] for fz in loads]
    assert np.mean([c.r0 - fz / c.kt for fz in loads]) == pytest.approx(np.mean(static), abs=1e-12)
    veh = p.force_estimator.config.vehicle if p.force_estimator is not None else None
    assert veh is None   # measured forces: no force estimator
    p = pipeline_from_params(grip_values(vehicle="sedan", force_source="estimated"))
    assert p.force_estimator.config.vehicle == TireForceVehicle.from_description(load_description("sedan"))
    assert p.config_warnings == []


def test_a_parameter_overrides_the_description_with_a_warning() -> None:
    p = pipeline_from_params(grip_values(vehicle="sedan", r0=0.34, track=1.6))
    c = p.signal_config
    assert (c.radius_mode, c.r0) == ("fixed", 0.34)
    assert c.wheel_y == pytest.approx((0.8, -0.8, 0.8, -0.8))
    assert len(p.config_warnings) == 2
    r0_warning = next(w for w in p.config_warnings if "'r0'" in w)
    assert "0.34" in r0_warning and "0.3538" in r0_warning


def test_load_independent_rolling_radius(tmp_path) -> None:
    doc = to_document(load_description("sedan"))
    doc["tire"]["rolling_radius"] = 0.339
    doc["torque_source"] = "measured"
    del doc["powertrain"]                           # optional with measured torque
    path = tmp_path / "car.yaml"
    path.write_text(yaml.safe_dump(doc))
    c = pipeline_from_params(grip_values(vehicle=str(path))).signal_config
    assert (c.radius_mode, c.r0) == ("fixed", 0.339)


def test_replay_takes_every_vehicle_fact_from_vehicle_file(tmp_path) -> None:
    """`vehcal replay BAG --vehicle FILE` with the shipped params file: the pipeline's geometry is the file's."""
    doc = to_document(load_description("sedan"))
    doc["cg"]["to_front_axle"] = 1.2
    doc["track"]["front"] = 1.45
    doc["steering"]["ratio"] = 0.07
    path = tmp_path / "car.yaml"
    path.write_text(yaml.safe_dump(doc))
    params = apply_vehicle(load_params(str(default_params_file())), str(path))
    p = grip_pipeline_from(resolve_params(params)["grip_estimator"])
    assert p.signal_config.wheel_x[0] == 1.2 and p.signal_config.wheel_y[0] == pytest.approx(0.725)
    assert p.signal_config.steering_gain == 0.07
    assert p.config_warnings == []


def window(mu: np.ndarray, mu_var: np.ndarray | None = None) -> ScopeData:
    n = mu.size
    return ScopeData(scope="rear_axle", t=np.arange(n, dtype=float), slip=np.full(n, -0.01), mu=mu,
                     mu_var=mu_var)


def test_observed_floor_is_the_data_beyond_their_noise() -> None:
    """200 braking samples at |mu| 0.22 with noise SD 0.01: the floor is 0.22 - z 0.01, z the normal quantile at
    1 - 0.01/200 (3.89): 0.181."""
    mu = np.full(200, -0.22)
    assert observed_floor(window(mu), sigma=0.01) == pytest.approx(0.22 - 3.8906 * 0.01, abs=1e-3)
    # stated variances add to the noise: SD 0.05 in all -> 0.22 - 3.89 x 0.05 < 0.03
    assert observed_floor(window(mu, np.full(200, 0.05 ** 2 - 0.01 ** 2)), sigma=0.01) < 0.03
    assert observed_floor(window(np.empty(0)), sigma=0.01) == 0.0


def test_no_interval_published_that_its_data_contradict() -> None:
    """A braking-only window (an undriven axle) whose fitted interval ends below the friction its own samples
    show beyond their noise is not published; the same fit with a floor inside its interval is. A real (short)
    fit on braking-only samples of a 0.6 road; the pipeline's commit applies the rule."""
    from vehcal_ros.estimation.grip.fit import GripConfig, GripEstimator
    from vehcal_ros.models.pacejka import mf_curve

    rng = np.random.default_rng(3)
    slip = -rng.uniform(0.0, 0.02, 120)
    mu = mf_curve(slip, np.array([12.0, 1.6, 0.6, 0.3, 0.0, 0.0])) + 0.01 * rng.standard_normal(120)
    est = GripEstimator(GripConfig.paper_case(n_chains=4, n_steps=2000, max_steps=2000, n_ml_starts=4, seed=1,
                                   keep_negative_slip=True, r_hat_threshold=2.0, ess_threshold=10.0,
                                   ess_tail_threshold=10.0)).fit(slip, mu)
    floor = observed_floor(window(mu), sigma=0.01)
    assert 0.1 < floor <= float(np.max(np.abs(mu)))
    pipe = pipeline_from_params(grip_values(vehicle="sedan", max_r_hat=2.0, min_ess=1.0, min_ess_tail=1.0,
                                            min_excitation=0.0))
    scope = "rear_axle"
    above = FitOutcome(scope=scope, stamp=10.0, n_points=120, excitation=0.2, estimate=est,
                       mu_floor=est.mu_max_upper + 0.01)
    assert pipe.commit([above]) == []
    st = pipe.status[scope]
    assert st.estimate is None and "contradicted by its data" in st.message
    inside = FitOutcome(scope=scope, stamp=11.0, n_points=120, excitation=0.2, estimate=est,
                        mu_floor=est.mu_max_lower)
    if not est.prior_dominated:
        assert pipe.commit([inside]) == [scope] and pipe.status[scope].estimate is est


def test_only_a_well_conditioned_combined_slip_law_reaches_the_fit() -> None:
    """The HMMWV's MF2002 weighting reduces samples to pure slip; a friction-ellipse tire's samples are fitted as
    pure slip (grip_pipeline.vehicle_signal_config: the ellipse's share at everyday slips is set by the slip
    angle's error and overstated the sedan's grip)."""
    assert pipeline_from_params(grip_values(vehicle="hmmwv_sim")).signal_config.combined_slip == "mf"
    assert load_description("sedan").combined_slip == "ellipse"
    assert pipeline_from_params(grip_values(vehicle="sedan")).signal_config.combined_slip == "none"


def test_a_prior_dominated_estimate_is_published_with_the_datas_floor_as_its_lower_bound() -> None:
    """Weak data (a 0.3 road seen up to |mu| ~0.2) leave mu_max prior-dominated: its
    posterior lower quantile comes from the prior's bulk. The pipeline publishes it with the lower bound lowered to
    the window's floor, so the interval holds the 0.3 road; a floor above the posterior's lower end changes
    nothing. A real (short) fit; the pipeline's commit applies the rule."""
    import dataclasses

    from vehcal_ros.estimation.grip.fit import GripConfig, GripEstimator
    from vehcal_ros.models.pacejka import mf_curve

    rng = np.random.default_rng(5)
    theta = np.array([20.0, 1.6, 0.3, 0.5, 0.0, 0.0])   # a snowy road, mu_max 0.3
    slip = rng.uniform(0.0, 0.015, 120)
    mu = mf_curve(slip, theta) + 0.01 * rng.standard_normal(120)
    est = GripEstimator(GripConfig.paper_case(n_chains=4, n_steps=2000, max_steps=2000, n_ml_starts=4, seed=1,
                                   r_hat_threshold=2.0, ess_threshold=10.0, ess_tail_threshold=10.0)).fit(slip, mu)
    est = dataclasses.replace(est, prior_dominated=True)
    floor = observed_floor(ScopeData("rear_axle", np.arange(120.0), slip, mu, np.zeros(120), np.zeros(120),
                                     np.zeros(120)), sigma=0.01)
    assert 0.1 < floor < 0.3 < est.mu_max_upper
    assert floor < est.mu_max_lower   # the case the rule is for: the prior lifts the posterior's lower end
    pipe = pipeline_from_params(grip_values(vehicle="sedan", max_r_hat=2.0, min_ess=1.0, min_ess_tail=1.0,
                                            min_excitation=0.0))
    out = FitOutcome(scope="rear_axle", stamp=10.0, n_points=120, excitation=0.2, estimate=est, mu_floor=floor)
    assert pipe.commit([out]) == ["rear_axle"]
    published = pipe.status["rear_axle"].estimate
    assert published.mu_max_lower == pytest.approx(min(floor, est.mu_max_lower))
    assert published.mu_max_lower <= 0.3 <= published.mu_max_upper
    assert published.mu_max_upper == est.mu_max_upper and published.mu_max_mean == est.mu_max_mean
    assert pipe.status["rear_axle"].n_prior_dominated == 1
    above = FitOutcome(scope="rear_axle", stamp=11.0, n_points=120, excitation=0.2, estimate=est,
                       mu_floor=est.mu_max_lower)   # a floor at the lower end: nothing to lower
    pipe.commit([above])
    assert pipe.status["rear_axle"].estimate.mu_max_lower == pytest.approx(est.mu_max_lower)
