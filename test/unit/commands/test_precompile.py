"""``vehcal precompile`` refuses a bad ``--jobs`` with one line. (Its compiling is checked where the cache starts
empty: test_install_layout.py runs the installed command into a fresh prefix's cache before starting the nodes.)"""

from __future__ import annotations

from vehcal_ros.cli import main


def test_jobs_below_one_is_refused_with_one_line(capsys) -> None:
    assert main(["precompile", "--jobs", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--jobs 0" in err[0], err
