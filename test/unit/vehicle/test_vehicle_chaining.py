"""Any vehicle in the 8-DOF model and stages chained across files.

* ``vehcal calibrate --model FILE``: the stage holds the earlier result's values (JSON result: its ``fixed`` then
  its posterior means; params YAML: its ``model`` mapping), checked on the ``fixed`` values the new result records;
* measured per-wheel torque drives the wheels: checked against the closed-form straight-line momentum balance;
* the sedan's engine map and automatic: the acceleration step at the first upshift equals the ratio of the wheel
  torques read off the description's map and gears.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from calibration_synthetic import synthetic_segment, write_csv

from vehcal_ros.cli import main
from vehcal_ros.estimation.calibration.fit import Segment
from vehcal_ros.models.vehicle_8dof import STATE_INDEX, Simulator8Dof, VehicleConstants, default_vehicle_constants
from vehcal_ros.vehicle.description import load_description


@pytest.fixture(scope="module")
def coast_csv(tmp_path_factory) -> Path:
    noisy, clean = synthetic_segment("rolling_resistance", seed=4)
    meas = {k: np.concatenate([clean.measured[k][:1], v[1:]]) for k, v in noisy.measured.items()}
    seg = Segment.from_arrays(noisy.time, noisy.throttle, noisy.brake, noisy.steering, meas)
    return write_csv(tmp_path_factory.mktemp("chain") / "coast.csv", seg)


def _run(csv: Path, model: Path, out: Path) -> dict:
    rc = main(["calibrate", str(csv), "--stage", "rolling_resistance", "--chains", "1", "--draws", "60",
               "--model", str(model), "--json", str(out)])
    assert rc == 0
    return json.loads(out.read_text())


def test_chained_stage_holds_the_earlier_results(tmp_path: Path, coast_csv: Path) -> None:
    earlier = {"stage": "lateral", "fixed": {"Cxf": 12345.0, "Cxr": 11111.0, "rr": 0.02, "brake_gain_lf": 3000.0},
               "parameters": {"Cyf": {"mean": 43210.0}, "Cyr": {"mean": 54321.0}, "kphi_f": {"mean": 30000.0},
                              "kphi_r": {"mean": 25000.0}, "bphi": {"mean": 8000.0}}}
    (tmp_path / "lat.json").write_text(json.dumps(earlier))
    doc = _run(coast_csv, tmp_path / "lat.json", tmp_path / "rr.json")
    fixed = doc["fixed"]
    assert (fixed["Cxf"], fixed["Cxr"], fixed["Cyf"], fixed["Cyr"]) == (12345.0, 11111.0, 43210.0, 54321.0)
    assert (fixed["kphi_f"], fixed["bphi_f"], fixed["bphi_r"], fixed["brake_gain_lf"]) == (30000.0, 4000.0, 4000.0,
                                                                                           3000.0)
    assert "rr" not in fixed and doc["model"].endswith("lat.json")
    # the chained result carries everything on: the next file sees all earlier values
    (tmp_path / "rr_as_model.json").write_text(json.dumps(doc))
    doc2 = _run(coast_csv, tmp_path / "rr_as_model.json", tmp_path / "rr2.json")
    assert doc2["fixed"]["Cyf"] == 43210.0 and doc2["fixed"]["Cxf"] == 12345.0


def test_chained_from_a_params_yaml(tmp_path: Path, coast_csv: Path) -> None:
    params = {"model_calibrator": {"ros__parameters": {"model": {"cxf": 9876.0, "cyr": 45678.0, "bphi": 6000.0,
                                                                 "rr": 0.011}}}}
    (tmp_path / "model.yaml").write_text(yaml.safe_dump(params))
    fixed = _run(coast_csv, tmp_path / "model.yaml", tmp_path / "rr.json")["fixed"]
    assert (fixed["Cxf"], fixed["Cyr"], fixed["bphi_f"]) == (9876.0, 45678.0, 3000.0)


@pytest.mark.parametrize("content, expect", [
    ('{"parameters": {"Cq": {"mean": 1.0}}}', "unknown parameter 'Cq'"),
    ('{"parameters": {"Cxf": {"mean": null}}}', "Cxf = None: expected a finite number"),
    ("just: text", "expected a params YAML"),
])
def test_bad_model_file_is_one_line(tmp_path: Path, coast_csv: Path, capsys, content: str, expect: str) -> None:
    path = tmp_path / ("m.json" if content.startswith("{") else "m.yaml")
    path.write_text(content)
    rc = main(["calibrate", str(coast_csv), "--stage", "rolling_resistance", "--model", str(path)])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and expect in err and "\n" not in err


def _rolling(c: VehicleConstants, u0: float) -> tuple[dict[str, float], float, float]:
    """Straight-line state at ``u0`` m/s with the wheels rolling at their static loaded radii (and the radii)."""
    wf, wr = c.static_wheel_loads()
    r_f, r_r = c.r0 - wf / c.ktf, c.r0 - wr / c.ktr
    return ({"u": u0, "v": 0.0, "phi": 0.0, "wx": 0.0, "wz": 0.0, "w_lf": u0 / r_f, "w_rf": u0 / r_f,
             "w_lr": u0 / r_r, "w_rr": u0 / r_r}, r_f, r_r)


def test_measured_wheel_torque_momentum_balance() -> None:
    """Straight line, 150 N m on every wheel, rr = 0: m_t du/dt = sum (T - Jw dw/dt) / r (closed form with the
    wheels rolling, dw/dt = du/dt / r)."""
    c = default_vehicle_constants()
    t = np.arange(0.0, 3.0001, 0.01)
    x0, r_f, r_r = _rolling(c, 10.0)
    torque = np.full((t.size, 4), 150.0)
    sim = Simulator8Dof(x0, t, np.zeros(t.size), np.ones(t.size), np.zeros(t.size), dt=0.001, output_dt=0.01,
                        wheel_torque=torque)   # brake 1 is ignored: the measured torque is the net torque
    out = sim.run({"rr": 0.0})
    r = 0.5 * (r_f + r_r)
    accel = 4 * 150.0 / r / (c.total_mass + 2 * (c.Jw + c.Jw_r) / r ** 2)
    u = out[:, STATE_INDEX["u"]]
    measured = (u[-1] - u[100]) / (t[-1] - t[100])
    assert measured == pytest.approx(accel, rel=0.02)


def test_sedan_upshift_changes_the_wheel_torque_by_the_gear_ratio() -> None:
    d = load_description("sedan")
    c = VehicleConstants.from_description(d)
    t = np.arange(0.0, 8.0001, 0.01)
    x0, _, _ = _rolling(c, 4.0)
    throttle = np.full(t.size, 0.3)
    out = Simulator8Dof(x0, t, throttle, np.zeros(t.size), np.zeros(t.size), dt=0.002, output_dt=0.01,
                        constants=c).run({"rr": 0.0})
    w_front = 0.5 * (out[:, STATE_INDEX["w_lf"]] + out[:, STATE_INDEX["w_rf"]])
    g1, g2, fd = d.gear_ratios[0], d.gear_ratios[1], d.final_drive
    shift = int(np.argmax(w_front / (g1 * fd) > d.shift_up[0]))
    assert 0 < shift < t.size - 60, "no upshift at 4000 rpm"
    du = np.gradient(out[:, STATE_INDEX["u"]], t)
    a_before, a_after = du[shift - 20], du[shift + 40]

    def wheel_torque(w: float, g: float) -> float:
        we = w / (g * fd)
        tf = np.interp(we, d.engine_speed, d.torque_full)
        tz = np.interp(we, d.engine_speed, d.torque_zero)
        return (0.3 * tf + 0.7 * tz) / (g * fd)

    expect = wheel_torque(w_front[shift - 20], g1) / wheel_torque(w_front[shift + 40], g2)
    assert a_before / a_after == pytest.approx(expect, rel=0.05)
