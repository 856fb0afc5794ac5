"""A fit can be stopped between SMC rounds, and a stopped fit leaves nothing behind.

Without ROS: ``run_smc(stop=)`` raises ``Cancelled`` at the round after ``stop()`` turns true (and a ``stop``
that never fires changes no number); ``CalibrationPipeline.fit`` with its ``cancel`` event set returns no outcome,
so a commit changes nothing; the pipeline pickles (a parallel replay returns it from a worker) with a fresh event.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from vehcal_ros.errors import Cancelled
from vehcal_ros.inference.smc import Prior, Uniform, run_smc


def gauss_ll(theta: np.ndarray) -> np.ndarray:
    return -0.5 * np.sum((theta - np.array([1.0, -2.0])) ** 2 / np.array([0.5, 1.5]) ** 2, axis=1)


def test_run_smc_stops_at_the_next_round() -> None:
    prior = Prior(("a", "b"), (Uniform(-10, 10), Uniform(-10, 10)))
    rounds = []

    def stop() -> bool:
        rounds.append(1)
        return len(rounds) > 3
    with pytest.raises(Cancelled, match="stopped on request"):
        run_smc(gauss_ll, prior, n_particles=200, n_chains=2, seed=1, stop=stop)
    assert len(rounds) == 4                      # asked once per round, stopped at the 4th
    free = run_smc(gauss_ll, prior, n_particles=200, n_chains=2, seed=1)
    never = run_smc(gauss_ll, prior, n_particles=200, n_chains=2, seed=1, stop=lambda: False)
    assert np.array_equal(free.draws, never.draws)


def test_cancelled_calibration_fit_yields_nothing_and_pipeline_pickles() -> None:
    from calibration_drive import drive_records

    from vehcal_ros.estimation.calibration.pipeline import CalibrationPipeline, config_from
    from vehcal_ros.replay.params import resolve_params

    values = {**resolve_params(None)["model_calibrator"], "stages": ["rolling_resistance"], "n_chains": 2,
              "n_draws": 100}
    pipe = CalibrationPipeline(config_from(values))
    for rec in drive_records(seed=1, t0=100.0, duration=10.0):
        pipe.add(rec)
    jobs = pipe.snapshot(final=True)
    assert [j.stage for j in jobs] == ["rolling_resistance"]
    pipe.cancel.set()
    assert pipe.fit(jobs) == []
    assert pipe.commit([]) == [] and pipe.status["rolling_resistance"].result is None
    copy = pickle.loads(pickle.dumps(pipe))
    assert not copy.cancel.is_set() and copy.fill() == pipe.fill()
