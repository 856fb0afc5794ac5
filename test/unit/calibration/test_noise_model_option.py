"""The likelihood's residual model is one declared choice: the CLI, the calibration pipeline and the
model_calibrator's ``noise_model`` parameter take it from estimation/calibration/noise_models.py, and a bad value is
refused naming the parameter and the choices. ``auto`` gives each stage its own model (white for the longitudinal stage,
AR(1) for the others) and a fit records the model it used."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from vehcal_ros.errors import InputError
from vehcal_ros.estimation.calibration.fit import CHANNELS, Segment, StageProblem, stage_spec
from vehcal_ros.estimation.calibration.noise_models import DEFAULT_NOISE_MODEL, NOISE_MODEL_CHOICES, NOISE_MODELS
from vehcal_ros.estimation.calibration.pipeline import CalibrationPipelineConfig, config_from
from vehcal_ros.models.vehicle_8dof import DEFAULT_PARAMETERS
from vehcal_ros.resources import find_resource


def test_pipeline_takes_the_declared_noise_model() -> None:
    assert CalibrationPipelineConfig().noise_model == DEFAULT_NOISE_MODEL
    for model in NOISE_MODEL_CHOICES:
        assert config_from({"noise_model": model}).noise_model == model


def test_a_bad_noise_model_is_refused_naming_it() -> None:
    with pytest.raises(InputError, match=r"noise_model = 'gaussian' is not one of auto, ar1, white, discrepancy"):
        config_from({"noise_model": "gaussian"})


def test_node_parameter_cli_and_shipped_yaml_follow_the_declaration() -> None:
    from vehcal_ros.cli import build_parser
    from vehcal_ros.nodes.model_calibrator import PARAMS

    spec = next(p for p in PARAMS if p.name == "noise_model")
    assert (spec.default, tuple(spec.choices)) == (DEFAULT_NOISE_MODEL, NOISE_MODEL_CHOICES)
    args = build_parser().parse_args(["calibrate", "x.csv", "--stage", "lateral"])
    assert args.noise_model == DEFAULT_NOISE_MODEL
    shipped = yaml.safe_load(open(find_resource("config", "estimate.yaml")).read())
    assert shipped["/**/model_calibrator"]["ros__parameters"]["noise_model"] == DEFAULT_NOISE_MODEL


def _segment() -> Segment:
    t = np.arange(0.0, 2.0 + 1e-9, 0.01)
    zero = np.zeros_like(t)
    x0 = np.zeros(12)
    x0[2] = 10.0
    meas = {c: np.full_like(t, 10.0 / 0.45 if c.startswith("w_") else (10.0 if c == "u" else 0.0)) for c in CHANNELS}
    return Segment.from_arrays(t, zero, zero, zero, meas, x0, "constant speed")


@pytest.mark.parametrize(("stage", "model"), [("longitudinal", "white"), ("lateral", "ar1"),
                                              ("rolling_resistance", "ar1")])
def test_auto_gives_each_stage_its_model_and_an_explicit_one_overrides(stage: str, model: str) -> None:
    seg, spec = _segment(), stage_spec(stage)
    assert StageProblem(seg, spec, DEFAULT_PARAMETERS, noise_model="auto").noise_model == model
    for explicit in NOISE_MODELS:
        assert StageProblem(seg, spec, DEFAULT_PARAMETERS, noise_model=explicit).noise_model == explicit
    with pytest.raises(InputError, match="noise_model must be one of auto, ar1, white, discrepancy"):
        StageProblem(seg, spec, DEFAULT_PARAMETERS, noise_model="gaussian")
