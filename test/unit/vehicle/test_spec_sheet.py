"""A vehicle description from a spec sheet (vehicle/spec_sheet.py, ``vehcal vehicle from-spec``).

Expected values are computed by hand for the example spec of docs/vehicle_description.md ("From a spec sheet"),
not by re-running the module's formulas.
"""

from __future__ import annotations

import copy

import pytest
import yaml

from vehcal_ros.cli import main
from vehcal_ros.errors import InputError
from vehcal_ros.vehicle.description import VehicleDescription, description_from_dict
from vehcal_ros.vehicle.spec_sheet import (
    description_document_from_spec,
    description_yaml_from_spec,
    parse_tire_size,
    unloaded_radius,
)

SPEC = {"name": "my_car", "spec_sheet": {
    "mass": 1350, "front_axle_share": 0.6, "wheelbase": 2.6, "track": [1.5, 1.5], "cg_height": 0.55,
    "tire": "195/65R15", "drive": "FWD", "steering_ratio": 15.5, "steering_input": "steering_wheel_angle"}}


def load(doc: dict) -> VehicleDescription:
    """The validated description of a generated document."""
    return description_from_dict(doc, source="spec")


def test_tire_size():
    # 195/65R15: rim 15 in x 25.4 mm / 2 = 190.5 mm, sidewall 195 mm x 0.65 = 126.75 mm
    assert unloaded_radius("195/65R15") == pytest.approx(0.31725, abs=1e-9)
    assert parse_tire_size("225/65 R16 112R") == pytest.approx((0.225, 0.65, 0.4064))
    assert unloaded_radius("245/40ZR18") == pytest.approx(0.2286 + 0.098)


def test_example_spec_by_hand():
    doc = description_document_from_spec(SPEC)
    assert "powertrain" not in doc
    assert doc["torque_source"] == "measured"
    # the schema's r0: rolling radius 0.31218 + static deflection 0.01521 = 0.32739 m (= R0 + 2/3 x 0.01521)
    assert doc["tire"]["unloaded_radius"] == pytest.approx(0.32739, abs=1e-5)
    d = load(doc)
    weight = 1350 * 9.81                                        # 13243.5 N
    front, rear = d.static_axle_loads()
    assert front + rear == pytest.approx(weight, rel=1e-6)
    assert front == pytest.approx(0.6 * weight, rel=1e-5)      # 7946.1 N
    assert rear == pytest.approx(5297.4, rel=1e-5)
    assert d.total_mass == pytest.approx(1350, rel=1e-6)
    assert d.wheelbase == pytest.approx(2.6, rel=1e-6)
    assert (d.cf, d.cr) == (1.5, 1.5)
    assert d.driven_axles == ("front",) and d.front_share == 1.0
    assert d.steering_source == "ratio" and d.steer_gain == pytest.approx(1 / 15.5, rel=1e-5)   # 0.0645161
    # one stiffness from the mean wheel load 3310.875 N at a deflection of 12 % x 0.12675 m = 0.01521 m
    assert d.ktf == d.ktr == pytest.approx(217677.5, rel=1e-5)
    # rolling radius 0.31725 - 0.01521 / 3 = 0.31218 m
    assert d.rolling_radius == pytest.approx(0.31218, abs=1e-5)
    assert d.rolling_radius_at(4000.0, 2000.0) == (d.rolling_radius, d.rolling_radius)
    assert d.powertrain == "none" and d.torque_source == "measured"
    assert 150e3 <= d.ktf <= 300e3
    assert 25.0 < d.muf < 60.0 and d.muf == d.mur             # a car's corner
    assert 0.5 < d.Jw_f < 2.0
    assert 0.0 <= d.hrcf <= d.h and 0.0 <= d.hrcr <= d.h
    assert d.nominal["rr"] == pytest.approx(0.010 * 0.31218, rel=1e-4)
    # drive-torque lever at the static front load 3973.05 N: the loaded radius R0 - 3973.05 / 217677.5
    lever = d.r0 - d.rolling_excess - 3973.05 / d.ktf
    assert lever == pytest.approx(0.31725 - 0.018252, abs=1e-5)


def test_yaml_text_round_trips_and_comments_every_derived_value():
    text = description_yaml_from_spec(SPEC)
    assert yaml.safe_load(text) == description_document_from_spec(SPEC)
    for line in text.splitlines():
        if ": " in line and not line.lstrip().startswith(("#", "name:", "note:", "gravity:")):
            assert "#" in line, line


def test_axle_loads_and_other_inputs():
    spec = copy.deepcopy(SPEC)
    del spec["spec_sheet"]["front_axle_share"]
    spec["spec_sheet"]["axle_loads"] = [810, 540]
    d = load(description_document_from_spec(spec))
    assert d.static_axle_loads()[0] == pytest.approx(810 * 9.81, rel=1e-5)
    spec["spec_sheet"].update(drive="RWD", steering_input="road_wheel_angle", track=1.52)
    d = load(description_document_from_spec(spec))
    assert d.driven_axles == ("rear",) and d.front_share == 0.0
    assert d.steering_source == "measured" and (d.cf, d.cr) == (1.52, 1.52)
    spec["spec_sheet"].update(drive="AWD", drive_front_share=0.4)
    d = load(description_document_from_spec(spec))
    assert d.driven_axles == ("front", "rear") and d.front_share == 0.4


@pytest.mark.parametrize("field, value, named", [
    ("tire", "195/65", "spec_sheet.tire"),
    ("tire", None, "spec_sheet.tire"),
    ("front_axle_share", 1.5, "spec_sheet.front_axle_share"),
    ("wheelbase", None, "spec_sheet.wheelbase"),
    ("wheelbase", "long", "spec_sheet.wheelbase"),
    ("mass", -5, "spec_sheet.mass"),
    ("track", [1.5], "spec_sheet.track"),
    ("drive", "4WD", "spec_sheet.drive"),
    ("steering_ratio", 0.5, "spec_sheet.steering_ratio"),
    ("steering_input", "hand_wheel", "spec_sheet.steering_input"),
    ("colour", "red", "spec_sheet.colour"),
])
def test_bad_input_names_the_field(field, value, named):
    spec = copy.deepcopy(SPEC)
    if value is None:
        del spec["spec_sheet"][field]
    else:
        spec["spec_sheet"][field] = value
    with pytest.raises(InputError, match=named.replace(".", r"\.")):
        description_document_from_spec(spec)


def test_not_a_mapping():
    with pytest.raises(InputError, match="spec_sheet"):
        description_document_from_spec({"name": "x"})
    with pytest.raises(InputError, match="spec"):
        description_document_from_spec(["mass", 1350])


def test_cli_from_spec(tmp_path, capsys):
    spec = tmp_path / "car.spec.yaml"
    spec.write_text(yaml.safe_dump(SPEC))
    out = tmp_path / "car.yaml"
    assert main(["vehicle", "from-spec", str(spec), "--out", str(out)]) == 0
    assert yaml.safe_load(out.read_text()) == description_document_from_spec(SPEC)
    assert main(["vehicle", "from-spec", str(spec)]) == 0
    assert "rolling_radius: 0.31218" in capsys.readouterr().out
    bad = tmp_path / "bad.spec.yaml"
    bad.write_text(yaml.safe_dump({"name": "x", "spec_sheet": {**SPEC["spec_sheet"], "tire": "big"}}))
    assert main(["vehicle", "from-spec", str(bad)]) == 2
    assert "spec_sheet.tire" in capsys.readouterr().err


def test_a_spec_sheet_car_with_can_engine_torque():
    """``torque_source: engine`` with the gearbox's and final drive's ratios as a spec sheet states them (input /
    output speed): the description keeps their inverses, and the CAN conversion gives the wheel torque of an
    engine torque in a gear by hand."""
    from vehcal_ros.estimation.sensing.can_torque import CanTorqueConfig, CanWheelTorque
    from vehcal_ros.records import BrakePressure, DriveTorque, WheelSpeeds

    spec = copy.deepcopy(SPEC)
    spec["spec_sheet"].update(torque_source="engine", gear_ratios=[3.5, 2.0], final_drive=4.0,
                              brake_pressure_gain=[30.0, 12.0])
    desc = load(yaml.safe_load(description_yaml_from_spec(spec)))
    assert desc.torque_source == "engine" and desc.powertrain == "none"
    assert desc.gear_ratios == pytest.approx((1 / 3.5, 0.5)) and desc.final_drive == pytest.approx(0.25)
    assert (desc.brake_gain_front, desc.brake_gain_rear) == (30.0, 12.0)
    can = CanWheelTorque(CanTorqueConfig.from_description(desc))
    can.add(DriveTorque(t=1.0, engine=100.0, gear=2.0))
    can.add(BrakePressure(t=1.0, axle=-1, pressure=2.0e5))
    # FWD: 100 N m x 2.0 x 4.0 = 800 N m at the front axle, 400 per wheel; brakes 30 / 12 N m per bar x 2 bar
    assert can.fill(WheelSpeeds(t=1.0, omega=(20.0,) * 4)).torque == pytest.approx((340.0, 340.0, -24.0, -24.0))
    # without the gains: the full-pedal brake torque over 100 bar
    del spec["spec_sheet"]["brake_pressure_gain"]
    doc = description_document_from_spec(spec)
    assert doc["brakes"]["pressure_gain_front"] == pytest.approx(doc["brakes"]["torque_front"] / 100.0, rel=1e-5)


@pytest.mark.parametrize(("change", "message"), [
    ({"torque_source": "engine"}, "spec_sheet.gear_ratios: missing"),
    ({"torque_source": "engine", "gear_ratios": [3.5]}, "spec_sheet.final_drive: missing"),
    ({"gear_ratios": [3.5], "final_drive": 4.0}, "spec_sheet.gear_ratios: only with torque_source engine or axle"),
    ({"torque_source": "axle", "final_drive": 4.0}, "only with torque_source engine"),
    ({"torque_source": "can"}, "spec_sheet.torque_source = 'can'"),
])
def test_can_fields_refused_by_name(change, message):
    spec = copy.deepcopy(SPEC)
    spec["spec_sheet"].update(change)
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        description_document_from_spec(spec)
