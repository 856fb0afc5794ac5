"""``vehcal grip`` end to end: JSON fields, plot, one-line errors with exit status 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from vehcal_ros.cli import main
from vehcal_ros.models.pacejka import mf_curve

TRUE = np.array([15.4, 1.60, 0.871, -1.09, 0.0, 0.0])


@pytest.fixture()
def csv_file(tmp_path: Path) -> Path:
    rng = np.random.default_rng(3)
    s = rng.uniform(0, 0.4, 100)
    mu = mf_curve(s, TRUE) + 0.0253 * rng.standard_normal(100)
    p = tmp_path / "data.csv"
    p.write_text("time,slip,mu\n" + "".join(f"{i * 0.01:.2f},{a:.6f},{b:.6f}\n" for i, (a, b) in enumerate(zip(s, mu))))
    return p


def test_cli_main_json_and_plot(csv_file, tmp_path, capsys):
    out, png = tmp_path / "o" / "grip.json", tmp_path / "grip.png"
    rc = main(["grip", str(csv_file), "--json", str(out), "--plot", str(png), "--seed", "2", "--chains", "4",
               "--steps", "6000", "--max-peak-slip", "0.12"])
    assert rc == 0
    d = json.loads(out.read_text())
    assert set(d["mu_max"]) == {"mean", "std", "lower", "upper", "prob"}
    assert set(d["slip_at_peak"]) == {"mean", "std"}
    assert set(d["theta"]) == {"B", "C", "D", "E", "s_h", "s_v"}
    for key in ("r_hat_max", "ess_bulk_min", "converged", "n_points", "elapsed_s"):
        assert key in d
    assert d["n_points"] == 100 and d["max_peak_slip"] == 0.12 and len(d["acceptance"]) == 4
    assert abs(d["mu_max"]["mean"] - 0.871) < 0.05
    assert png.stat().st_size > 10_000 and png.read_bytes()[:4] == b"\x89PNG"
    assert "mu_max" in capsys.readouterr().out


def _declared(name: str):
    from vehcal_ros.nodes.grip_estimator import PARAMS
    return next(p.default for p in PARAMS if p.name == name)


def _bad_inputs(tmp_path: Path) -> dict[str, list[str]]:
    (tmp_path / "empty.csv").write_text("")
    (tmp_path / "nocol.csv").write_text("slip,force\n0.01,1\n")
    (tmp_path / "text.csv").write_text("slip,mu\n0.01,0.1\n0.02,abc\n")
    (tmp_path / "header.csv").write_text("slip,mu\n")
    (tmp_path / "few.csv").write_text("slip,mu\n0.01,0.1\n0.02,0.2\n")
    return {
        "missing": [str(tmp_path / "nope.csv")],
        "empty": [str(tmp_path / "empty.csv")],
        "nocol": [str(tmp_path / "nocol.csv")],
        "text": [str(tmp_path / "text.csv")],
        "header_only": [str(tmp_path / "header.csv")],
        "bad_peak": [str(tmp_path / "few.csv"), "--max-peak-slip", "2"],
        "bad_chains": [str(tmp_path / "few.csv"), "--chains", "0"],
    }


def test_cli_bad_inputs_exit_2_one_line(tmp_path, capsys):
    for name, args in _bad_inputs(tmp_path).items():
        rc = main(["grip", *args])
        err = capsys.readouterr().err
        assert rc == 2, name
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, (name, err)
        assert err.startswith("vehcal grip: error:"), err
    # too few points is an estimation failure (exit 1), still one line
    rc = main(["grip", str(tmp_path / "few.csv")])
    err = capsys.readouterr().err
    assert rc == 1 and len(err.strip().splitlines()) == 1 and "too few" in err


def test_cli_subprocess(csv_file, tmp_path):
    out = tmp_path / "sub.json"
    env = dict(os.environ, NUMBA_NUM_THREADS="1")
    code = "import sys; from vehcal_ros.cli import main; sys.exit(main(sys.argv[1:]))"
    p = subprocess.run([sys.executable, "-c", code, "grip", str(csv_file), "--json", str(out), "--steps", "1000",
                        "--chains", "2"], capture_output=True, text=True, timeout=240, env=env)
    assert p.returncode == 0, p.stderr
    assert "grip potential mu_max" in p.stdout
    d = json.loads(out.read_text())
    assert d["n_points"] == 100
    # no flag: the grip_estimator node's declared prior (the shipped fit settings, not the paper's 0.1)
    assert d["max_peak_slip"] == _declared("max_peak_slip") == 0.25
    bad = subprocess.run([sys.executable, "-c", code, "grip", str(tmp_path / "missing.csv")],
                         capture_output=True, text=True, timeout=120, env=env)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "Traceback" not in bad.stderr
