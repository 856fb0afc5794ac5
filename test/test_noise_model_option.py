"""The likelihood's residual model is one declared choice: the CLI, the calibration pipeline and the
model_calibrator's ``noise_model`` parameter take it from estimation/noise_models.py, and a bad value is refused
naming the parameter and the choices."""

from __future__ import annotations

import pytest
import yaml

from vehcal_ros.errors import InputError
from vehcal_ros.estimation.calibration_pipeline import CalibrationPipelineConfig, config_from
from vehcal_ros.estimation.noise_models import DEFAULT_NOISE_MODEL, NOISE_MODELS
from vehcal_ros.resources import find_resource


def test_pipeline_takes_the_declared_noise_model() -> None:
    assert CalibrationPipelineConfig().noise_model == DEFAULT_NOISE_MODEL
    for model in NOISE_MODELS:
        assert config_from({"noise_model": model}).noise_model == model


def test_a_bad_noise_model_is_refused_naming_it() -> None:
    with pytest.raises(InputError, match=r"noise_model = 'gaussian' is not one of ar1, white, discrepancy"):
        config_from({"noise_model": "gaussian"})


def test_node_parameter_cli_and_shipped_yaml_follow_the_declaration() -> None:
    from vehcal_ros.cli import build_parser
    from vehcal_ros.nodes.model_calibrator import PARAMS

    spec = next(p for p in PARAMS if p.name == "noise_model")
    assert (spec.default, tuple(spec.choices)) == (DEFAULT_NOISE_MODEL, NOISE_MODELS)
    args = build_parser().parse_args(["calibrate", "x.csv", "--stage", "lateral"])
    assert args.noise_model == DEFAULT_NOISE_MODEL
    shipped = yaml.safe_load(open(find_resource("config", "estimate.yaml")).read())
    assert shipped["/**/model_calibrator"]["ros__parameters"]["noise_model"] == DEFAULT_NOISE_MODEL
