"""The ``vehcal`` command offers every verb, and a verb that cannot be loaded stops it with one line."""

from __future__ import annotations

import pytest

from vehcal_ros import cli


def test_every_verb_is_offered(capsys) -> None:
    with pytest.raises(SystemExit) as stop:
        cli.main(["--help"])
    assert stop.value.code == 0
    usage = capsys.readouterr().out
    for verb in cli.VERBS:
        assert verb in usage


def test_a_verb_that_cannot_be_loaded_stops_the_command(monkeypatch, capsys) -> None:
    """A missing verb module is a broken installation: the command says so and exits 1, it does not drop the verb
    and go on."""
    monkeypatch.setattr(cli, "VERBS", (*cli.VERBS, "no_such_verb"))
    assert cli.main(["simulate", "--help"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no_such_verb" in err[0] and "reinstall" in err[0]
