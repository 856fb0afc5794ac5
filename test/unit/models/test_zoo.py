"""The committed vehicle zoo (benchmarks/zoo/vehicles, made by benchmarks/zoo/make_zoo.py --n 32 --seed 2026) and
the published tire coefficient sets it draws its tires from (vehcal_ros/data/tire_coefficients.yaml).

Fast: loads every model file and scenario without running the simulator. The Pac02 peak check uses the simulator's
own friction scaling (tires.pack_tire / peak_mu) at each axle's static wheel load, taken from the spec sheet's
front-axle share (measured on the simulator's static equilibrium when the zoo was generated).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import yaml

from vehcal_ros.io.scenarios import load_scenario
from vehcal_ros.models.vehicle14.params import HmmwvParams
from vehcal_ros.models.vehicle14.tires import pack_tire, peak_mu

ROOT = Path(__file__).resolve().parents[3]
ZOO = ROOT / "benchmarks" / "zoo" / "vehicles"
VEHICLES = sorted(p for p in ZOO.glob("zoo_*") if p.is_dir())
ROAD_MUS = (1.0, 0.8, 0.6, 0.4, 0.3)
SPEC_KEYS = ["mass", "front_axle_share", "wheelbase", "track", "cg_height", "tire", "drive", "steering_ratio",
             "steering_input", "steering_lock_deg"]
TIRES = yaml.safe_load((ROOT / "vehcal_ros" / "data" / "tire_coefficients.yaml").read_text())
MANIFEST = yaml.safe_load((ZOO / "manifest.yaml").read_text())


def _spec(vdir: Path) -> dict:
    return yaml.safe_load((vdir / "spec_sheet.yaml").read_text())


def _layout(params: HmmwvParams) -> str:
    frac = params.powertrain.wheel_fraction
    if frac[0] > 0.0 and frac[2] > 0.0:
        return "AWD"
    return "FWD" if frac[0] > 0.0 else "RWD"


def test_zoo_size_and_mass_range() -> None:
    assert len(VEHICLES) >= 30
    masses = [HmmwvParams.from_yaml(v / f"{v.name}.yaml").total_mass for v in VEHICLES]
    assert min(masses) >= 900.0 and max(masses) <= 3500.0
    assert min(masses) < 1100.0 and max(masses) > 3300.0  # the range is covered, not just respected


def test_layout_mix_and_spec_sheets() -> None:
    counts = {"FWD": 0, "RWD": 0, "AWD": 0}
    for v in VEHICLES:
        p = HmmwvParams.from_yaml(v / f"{v.name}.yaml")
        spec = _spec(v)
        assert spec["name"] == v.name
        assert list(spec["spec_sheet"]) == SPEC_KEYS
        s = spec["spec_sheet"]
        assert s["drive"] == _layout(p)
        counts[s["drive"]] += 1
        assert abs(s["mass"] - p.total_mass) <= 1.0
        assert s["steering_input"] == "normalised"
        gain = next(m for m in MANIFEST["vehicles"] if m["name"] == spec["name"])["measured"]["steering_gain"]
        assert s["steering_lock_deg"] == pytest.approx(math.degrees(gain), abs=0.006)   # the model's lock
        assert 0.4 < s["front_axle_share"] < 0.7 and 2.0 < s["wheelbase"] < 4.0 and 0.3 < s["cg_height"] < 1.2
        sf = p.front.hardpoints["SPINDLE"]
        sr = p.rear.hardpoints["SPINDLE"]
        assert s["wheelbase"] == pytest.approx(sf[0] - sr[0], abs=2e-3)
        assert s["track"] == pytest.approx([2 * sf[1], 2 * sr[1]], abs=2e-3)
    n = len(VEHICLES)
    assert all(abs(c - n / 3) <= 2 for c in counts.values()), counts


def test_tires_come_from_the_zoo_set() -> None:
    zoo = [t for t in TIRES["sets"] if t["split"] == "zoo"]
    for v in VEHICLES:
        p = HmmwvParams.from_yaml(v / f"{v.name}.yaml")
        match = [t for t in zoo if t["longitudinal"]["PKX1"] == p.tire.pkx1 and t["longitudinal"]["PDX1"] == p.tire.pdx1
                 and t["longitudinal"]["PEX1"] == p.tire.pex1 and t["FNOMIN"] == p.tire.fnomin]
        assert match, f"{v.name}: tire is not a ZOO set"
        assert _spec(v)["spec_sheet"]["tire"] == match[0]["size"]


def test_pac02_peak_at_static_load_matches_road() -> None:
    """Each axle's Pac02 peak Fx/Fz at its static wheel load is within 5 % of the road's friction."""
    for v in VEHICLES:
        p = HmmwvParams.from_yaml(v / f"{v.name}.yaml")
        share = _spec(v)["spec_sheet"]["front_axle_share"]
        w = p.total_mass * p.gravity
        tp = pack_tire(p.tire, w / 4.0)
        sc = load_scenario(v / "scenario.yaml")
        for mu in {pt.mu for pt in sc.road.patches}:
            for fz in (share * w / 2.0, (1.0 - share) * w / 2.0):
                assert peak_mu(tp, fz, mu) == pytest.approx(mu, rel=0.05), (v.name, mu, fz)


def test_scenarios() -> None:
    for v in VEHICLES:
        sc = load_scenario(v / "scenario.yaml")
        assert Path(sc.vehicle).resolve() == (v / f"{v.name}.yaml").resolve()
        assert 120.0 <= sc.duration <= 160.0
        mus = [pt.mu for pt in sc.road.patches]
        assert set(mus) <= set(ROAD_MUS)
        assert 2 <= len(mus) - 1 <= 3
        assert all(a != b for a, b in zip(mus, mus[1:]))
        assert sc.road.patches[-1].x1 > 2000.0  # the last section outlasts the drive
        assert sc.driver.speed_control is not None


def test_tire_coefficient_sets_and_split_rule() -> None:
    sets = TIRES["sets"]
    assert len(sets) >= 12
    assert len({s["family"] for s in sets}) >= 8
    order = TIRES["family_order"]
    first = list(dict.fromkeys(s["family"] for s in sets))
    assert first == order
    for s in sets:
        assert s["split"] == ("prior" if order.index(s["family"]) % 2 == 0 else "zoo")
        assert s["source"]["repository"] and s["source"]["path"]
        lo = s["longitudinal"]
        assert set(lo) == {"PCX1", "PDX1", "PDX2", "PEX1", "PEX2", "PEX3", "PEX4", "PKX1", "PKX2", "PKX3", "PHX1",
                           "PHX2", "PVX1", "PVX2"}
        assert np.isfinite(list(lo.values())).all()
        if s["load_range"] is not None:  # null: not published in the source file
            assert s["load_range"][0] < s["FNOMIN"] < s["load_range"][1]
        if s["split"] == "zoo" and s["id"] in {t["tire"]["set"] for t in MANIFEST["vehicles"]}:
            assert s["VERTICAL_STIFFNESS"] > 0.0 and s["UNLOADED_RADIUS"] > 0.0
    assert {s["split"] for s in sets} == {"prior", "zoo"}


def test_drive_layouts_put_torque_on_the_driven_wheels() -> None:
    """One zoo vehicle per layout, 0.3 s at 30 % throttle from 5 m/s: the drive torque reaches exactly the driven
    wheels (FL, FR, RL, RR) of the spec sheet's layout (the engine-map powertrain with driveline_2wd front/rear or
    driveline_4wd of models/vehicle14/params.py)."""
    from vehcal_ros.models.vehicle14 import Hmmwv14

    driven = {"FWD": [1, 1, 0, 0], "RWD": [0, 0, 1, 1], "AWD": [1, 1, 1, 1]}
    seen: set[str] = set()
    for v in VEHICLES:
        layout = _spec(v)["spec_sheet"]["drive"]
        if layout in seen:
            continue
        seen.add(layout)
        sim = Hmmwv14(str(v / f"{v.name}.yaml"))
        sim.reset(speed=5.0)
        sim.step(0.3, 0.0, 0.0, n_steps=300)
        tq = np.asarray(sim.outputs()["wheel_torque"])
        on = np.array(driven[layout], dtype=bool)
        assert np.all(tq[on] > 50.0), (v.name, layout, tq)
        assert np.all(np.abs(tq[~on]) < 1e-9), (v.name, layout, tq)
    assert seen == set(driven)
