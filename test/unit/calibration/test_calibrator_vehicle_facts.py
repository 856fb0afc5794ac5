"""The model_calibrator's vehicle facts come from the vehicle description alone: the shipped parameters carry no
prior range, nominal value or tire radius of their own, and one a user sets overrides the description for any
vehicle, with a warning naming both values."""

from __future__ import annotations

import pytest

from vehcal_ros.errors import InputError
from vehcal_ros.estimation.calibration.fit import stage_spec
from vehcal_ros.estimation.calibration.pipeline import (
    MODEL_PARAMETERS,
    CalibrationPipeline,
    config_from,
    vehicle_overrides,
)
from vehcal_ros.replay.params import resolve_params
from vehcal_ros.vehicle.description import load_description

VEHICLES = ("hmmwv", "hmmwv_sim", "sedan")


def _shipped(vehicle: str) -> dict:
    """config/estimate.yaml's model_calibrator parameters (over the declared defaults) with ``vehicle``."""
    return {**resolve_params(None)["model_calibrator"], "vehicle": vehicle}


@pytest.mark.parametrize("vehicle", VEHICLES)
def test_shipped_parameters_take_every_vehicle_fact_from_the_description(vehicle: str) -> None:
    desc = load_description(vehicle)
    values = _shipped(vehicle)
    cfg = config_from(values)
    assert cfg.priors is None and cfg.defaults is None and cfg.vehicle == vehicle
    assert cfg.r0 == desc.r0
    assert vehicle_overrides(values) == []
    for stage in ("longitudinal", "lateral", "rolling_resistance"):
        for name, prior in stage_spec(stage, priors=cfg.priors, vehicle=cfg.vehicle).priors:
            assert (prior.low, prior.high) == tuple(desc.priors[name]), (vehicle, stage, name)
    model = CalibrationPipeline(cfg).model_parameters()   # before any stage: the description's nominal values
    nominal = {**desc.nominal, "bphi": desc.nominal["bphi_f"] + desc.nominal["bphi_r"]}
    assert model == {k: pytest.approx(nominal[k]) for k in MODEL_PARAMETERS}


@pytest.mark.parametrize("vehicle", VEHICLES)
def test_a_set_value_overrides_the_description_for_any_vehicle_and_says_so(vehicle: str) -> None:
    desc = load_description(vehicle)
    values = {**_shipped(vehicle), "prior.kphi_f": [5000.0, 150000.0], "model.rr": 0.004, "r0": 0.5}
    cfg = config_from(values)
    assert cfg.priors == {"kphi_f": (5000.0, 150000.0)} and cfg.defaults == {"rr": 0.004} and cfg.r0 == 0.5
    lateral = dict(stage_spec("lateral", priors=cfg.priors, vehicle=cfg.vehicle).priors)
    assert (lateral["kphi_f"].low, lateral["kphi_f"].high) == (5000.0, 150000.0)
    assert (lateral["kphi_r"].low, lateral["kphi_r"].high) == tuple(desc.priors["kphi_r"])
    assert CalibrationPipeline(cfg).model_parameters()["rr"] == 0.004
    warnings = vehicle_overrides(values)
    assert len(warnings) == 3, warnings
    lo, hi = desc.priors["kphi_f"]
    assert f"'prior.kphi_f' = [5000.0, 150000.0] overrides the vehicle description's [{lo}, {hi}]" in warnings[0]
    assert f"'model.rr' = 0.004 overrides the vehicle description's {desc.nominal['rr']:g}" in warnings[1]
    assert f"'r0' = 0.5 overrides the vehicle description's {desc.r0:g}" in warnings[2]


def test_a_bad_range_is_refused_naming_the_parameter() -> None:
    with pytest.raises(InputError, match=r"prior\.rr = \[0\.03, 0\.001\]: the lower bound must be below"):
        config_from({**_shipped("sedan"), "prior.rr": [0.03, 0.001]})
