"""The model calibrator's parameters, each declared once (name, default, range, description) next to the
configuration they fill (:func:`~vehcal_ros.estimation.calibration.pipeline.config_from`): the stages and their
order, the window and the schedule of refits, predictive acceptance, the spread within a window, the sampler and
its convergence rule, the segment finder's thresholds (declared with their units in
:class:`~vehcal_ros.estimation.calibration.segments.SegmentConfig`) and the priors; and the ``model.<name>``
parameters (:data:`MODEL_SPECS`) that carry the model the calibrator publishes. The model_calibrator node adds its
topics, outputs, state file and timing (vehcal_ros/nodes/parameters.py); docs/nodes.md's table and
config/estimate.yaml are generated from both (tools/param_reference.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vehcal_ros.errors import InputError
from vehcal_ros.estimation.calibration.fit import STAGE_NAMES, check_prior_ranges
from vehcal_ros.estimation.calibration.maneuver_spread import DEFAULT_MIN_PART_S, DEFAULT_PARTS, MIN_PARTS
from vehcal_ros.estimation.calibration.noise_models import DEFAULT_NOISE_MODEL, NOISE_MODEL_CHOICES
from vehcal_ros.estimation.calibration.pipeline import MODEL_PARAMETERS, config_from
from vehcal_ros.estimation.calibration.qualification import declared
from vehcal_ros.estimation.calibration.segments import SegmentConfig
from vehcal_ros.parameters import ParamSpec
from vehcal_ros.vehicle.description import CALIBRATED, load_description


def _stages_check(v: Any) -> str | None:
    if not v or len(set(v)) != len(v) or any(s not in STAGE_NAMES for s in v):
        return f"parameter 'stages' must list distinct stages among {', '.join(STAGE_NAMES)}, got {list(v)}"
    return None


def _vehicle_check(v: Any) -> str | None:
    try:
        load_description(str(v))
    except InputError as exc:
        return f"parameter 'vehicle': {exc}"
    return None


def _prior_check(name: str):
    def check(v: Any) -> str | None:
        if len(v) == 0:
            return None   # the vehicle description's range
        try:
            check_prior_ranges({name: v}, label="parameter 'prior.{}'")
        except InputError as exc:
            return str(exc)
        return None
    return check


_PRIOR_UNITS = {"Cxf": "N", "Cxr": "N", "Cyf": "N/rad", "Cyr": "N/rad", "kphi_f": "N m/rad", "kphi_r": "N m/rad",
                "bphi": "N m s/rad (total)", "rr": "m", "Jd": "kg m^2 (per driven wheel)"}
PRIOR_SPECS: tuple[ParamSpec, ...] = tuple(
    ParamSpec(f"prior.{name.lower()}", [], f"uniform prior [lower, upper] of {name}, {_PRIOR_UNITS[name]} "
              "(floats): overrides the vehicle description's range ([] = the description's)",
              check=_prior_check(name), item_type=float)
    for name in CALIBRATED)
"""Calibration priors: ``prior.<name>`` = [lower, upper] of the uniform prior; [] (the default) takes the vehicle
description's range."""


def _segment_spec(d: dict) -> ParamSpec:
    """The declared parameter of one :class:`SegmentConfig` field (its unit appended to the description)."""
    unit = f", {d['unit']}" if d["unit"] and d["unit"] != "-" else ""
    return ParamSpec(d["name"], d["default"], d["doc"] + unit, d["lo"], d["hi"],
                     choices=tuple(d["choices"]) if d["choices"] else None)


SEGMENT_SPECS: tuple[ParamSpec, ...] = tuple(_segment_spec(d) for d in declared(SegmentConfig))
"""The segment finder's windowing and stage thresholds (physical units), one parameter per
:class:`~vehcal_ros.estimation.calibration.segments.SegmentConfig` field: default, unit, range and meaning come from its
declaration (estimation/calibration/qualification.py says why each threshold has its value)."""

PARAMS: tuple[ParamSpec, ...] = (
    ParamSpec("stages", list(STAGE_NAMES), "stages in calibration order", read_only=True, check=_stages_check),
    ParamSpec("vehicle", "hmmwv", "vehicle description: a name in config/vehicles/ or a YAML file (8-DOF constants, "
              "drive/brake/steering maps, priors, nominal values; docs/vehicle_description.md)", read_only=True,
              check=_vehicle_check),
    ParamSpec("require_order", False, "true: a stage waits until the stages before it have an accepted result; "
              "false: each stage is fitted when a segment qualifies, holding the other stages' latest accepted "
              "values (the description's nominal ones until then)"),
    ParamSpec("window", 120.0, "data kept per topic, s", 5.0, 86400.0, read_only=True),
    ParamSpec("buffer_size", 24000, "rows kept per topic", 100, 10_000_000, read_only=True),
    ParamSpec("recalibration_period", 60.0, "data time between two fits of one stage, s", 0.0, 86400.0),
    ParamSpec("confirm_max_shift", 3.5, "a due refit first fits the new window by least squares around the "
              "accepted model: within this many sd (Mahalanobis) the model is confirmed and no SMC runs; 0 = always "
              "refit (estimation/calibration/recalibration_check.py)", 0.0, 100.0),
    ParamSpec("holdout_fraction", 0.25, "share of each qualifying window held back from the fit (its last part, "
              ">= 0.5 s and 50 samples): a fit is accepted only if it predicts that part no worse than the model it "
              "replaces, within its 90 % predictive band; 0 = no predictive check "
              "(estimation/calibration/acceptance.py)", 0.0, 0.5),
    ParamSpec("holdout_tolerance", 3.0, "predictive check: a channel fails if its held-back RMSE exceeds the replaced "
              "model's by more than this many standard errors of the difference (autocorrelation counted) + 2 %; its "
              "90 % band is too narrow (holdout_band) when it holds fewer than 90 % - this many SE - 2 % of the "
              "samples",
              0.0, 10.0),
    ParamSpec("holdout_band", "warn", "what a fit's 90 % predictive band holding too few held-back samples does: warn "
              "(accepted on the RMSE rule, stage WARN, shortfall named) or refuse (while the likelihood's intervals "
              "miss model-form error, refuse rejects fits that predict better)", choices=("warn", "refuse")),
    ParamSpec("noise_model", DEFAULT_NOISE_MODEL, "the likelihood's residual model: auto (per stage: white for "
              "longitudinal, ar1 for lateral and rolling resistance), or one for every stage: ar1 (per-channel "
              "AR(1) residuals), discrepancy (white sensor noise + an AR(1) model discrepancy per channel) or white "
              "(independent, the paper's); docs/calibration.md, 'Likelihood'", choices=NOISE_MODEL_CHOICES),
    ParamSpec("spread_parts", DEFAULT_PARTS, "an accepted fit's window is cut into this many parts, each fitted "
              "alone by least squares; where they disagree beyond their noise (Cochran's Q, 5 %), the parameter's "
              "interval is widened by their spread (estimation/calibration/maneuver_spread.py; docs/calibration.md); "
              "0 = off, else >= 3",
              0, 20, check=lambda v: None if int(v) == 0 or int(v) >= MIN_PARTS else
              f"parameter 'spread_parts' = {v} must be 0 or in [{MIN_PARTS}, 20]"),
    ParamSpec("spread_min_part_s", DEFAULT_MIN_PART_S, "shortest part of spread_parts (a shorter window is cut into "
              "fewer parts; fewer than 3: no spread is estimated), s", 0.1, 60.0),
    ParamSpec("min_new_data", 2.0, "a stage's next segment must end this much after its last one, s", 0.0, 86400.0),
    ParamSpec("clock_jump", 1.0, "a stamp jump larger than this restarts the buffers, s", 0.01, 3600.0,
              read_only=True),
    ParamSpec("n_chains", 4, "independent SMC runs (chains)", 1, 64),
    ParamSpec("n_draws", 1000, "particles per run (draws per chain)", 20, 100_000),
    ParamSpec("seed", 0, "base seed (fit k of cycle c uses seed + 1000 c + k)", 0, 2**31 - 1),
    ParamSpec("max_r_hat", 1.01, "accept a fit only if every R-hat <= this", 1.0, 10.0),
    ParamSpec("min_ess", 400.0, "accept a fit only if every bulk ESS >= this", 0.0, 1e7),
    ParamSpec("min_ess_tail", 400.0, "accept a fit only if every tail ESS >= this", 0.0, 1e7),
    ParamSpec("retry_draws_factor", 2, "a fit failing the convergence rule is run once more with this many times "
              "n_draws particles per chain (1: no re-run)", 1, 16),
    ParamSpec("r0", 0.0, "override of the description's tire radius in the wheel-speed unit check, m "
              "(0 = the description's)", 0.0, 2.0),
    *SEGMENT_SPECS,
    *PRIOR_SPECS,
)
"""The model calibrator's estimation parameters in declaration order."""

_MODEL_UNITS = {"Cxf": "front longitudinal tire stiffness, N", "Cxr": "rear longitudinal tire stiffness, N",
                "Cyf": "front cornering stiffness, N/rad", "Cyr": "rear cornering stiffness, N/rad",
                "kphi_f": "front roll stiffness, N m/rad", "kphi_r": "rear roll stiffness, N m/rad",
                "bphi": "total roll damping (bphi_f = bphi_r = bphi/2), N m s/rad",
                "rr": "rolling resistance lever, m (T = -rr |Fz| sign(omega))",
                "Jd": "driveline spin inertia added to each driven wheel's (negative: the description's wheel "
                      "inertia was too high), kg m^2"}
MODEL_SPECS: tuple[ParamSpec, ...] = tuple(
    ParamSpec(f"model.{name.lower()}", 0.0, f"{_MODEL_UNITS[name]}: the latest accepted model (published); a "
              "start-up value other than 0 overrides the vehicle description's nominal value (0 = the description's)",
              -1e4 if name == "Jd" else 0.0, 1.0 if name == "rr" else 1e7)
    for name in MODEL_PARAMETERS)
"""Output parameters (read_only=False): the latest accepted model, the description's nominal values where not
calibrated yet; a start-up value other than 0 overrides the nominal value (with a WARN naming both; only ``Jd``
may be negative: the description's wheel inertia was too high)."""

OUTPUTS = frozenset(spec.name for spec in MODEL_SPECS)
"""Parameters the node writes (the model it publishes): read at start-up only, never applied on a later set."""


def check_combination(values: Mapping[str, Any]) -> None:
    """Raise ValueError naming the problem when the model_calibrator parameter values ``values``, each valid alone,
    do not go together (:func:`~vehcal_ros.estimation.calibration.pipeline.config_from` refuses them)."""
    try:
        config_from(values)
    except InputError as exc:
        raise ValueError(str(exc)) from None
