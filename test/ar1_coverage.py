"""Coverage of the AR(1) likelihood on data the 8-DOF model generates with AR(1) residuals (not a test module).

Simulation-based calibration (Talts et al. 2018) reduced to interval coverage: each replicate draws the
rolling-resistance stage's parameters (rr, sigma_u, rho_u) from the stage's prior, simulates the coast-down of
:mod:`calibration_drive` with the 8-DOF model at the stage's own step, adds stationary AR(1) noise of that
(sigma_u, rho_u), calibrates the stage and records whether the central 90 % posterior interval of each
parameter contains the drawn value. An exact posterior covers with probability 0.90 averaged over the prior.
Shared by test_ar1_likelihood.py and benchmarks/bench_ar1_coverage.py.
"""

from __future__ import annotations

import numpy as np
from calibration_drive import drive_inputs, drive_states
from calibration_synthetic import TRUTH

from vehcal_ros.estimation.calibration.fit import (
    Segment,
    StageProblem,
    base_parameters,
    calibrate_stage,
    stage_spec,
)
from vehcal_ros.models.vehicle_8dof import STATE_INDEX

WINDOW = (5.0, 10.0)
"""The drive's coast-down (s): throttle off from 5 s, steering from 10 s."""


def ar1_noise(rng: np.random.Generator, n: int, sigma: float, rho: float) -> np.ndarray:
    """A stationary AR(1) series: ``e_0 ~ N(0, sigma^2)``, ``e_t = rho e_{t-1} + eta_t``, ``eta_t ~ N(0, sigma^2
    (1 - rho^2))`` (marginal sd ``sigma``, lag-one correlation ``rho``)."""
    eta = rng.normal(0.0, sigma * np.sqrt(1.0 - rho * rho), n)
    e = np.empty(n)
    e[0] = rng.normal(0.0, sigma)
    for t in range(1, n):
        e[t] = rho * e[t - 1] + eta[t]
    return e


def coast_down_segment() -> Segment:
    """The noise-free coast-down window of the synthetic drive (inputs and 8-DOF initial state)."""
    t, x = drive_states()
    _, thr, brk, steer = drive_inputs()
    sel = (t >= WINDOW[0] - 1e-9) & (t <= WINDOW[1] + 1e-9)
    meas = {"u": x[sel, STATE_INDEX["u"]]}
    return Segment.from_arrays(t[sel], thr[sel], brk[sel], steer[sel], meas, x[sel][0], "synthetic coast-down")


def replicate(seed: int, *, chains: int = 2, draws: int = 200, noise_models: tuple[str, ...] = ("ar1",),
              generator: str = "ar1") -> dict:
    """One replicate: truth from the ``generator`` noise model's prior (seeded), data from that model (``ar1``:
    AR(1) residuals; ``discrepancy``: white noise plus an AR(1) discrepancy), a calibration per noise model.
    Returns ``{"truth": {name: value}, model: {name: (q05, q95)}}``."""
    rng = np.random.default_rng(seed)
    seg = coast_down_segment()
    spec = stage_spec("rolling_resistance")
    base = base_parameters(spec, TRUTH)
    problem = StageProblem(seg, spec, base, noise_model=generator)
    truth = problem.prior.sample(rng, 1)[0]
    names = problem.prior.names
    y = problem.responses(truth[None, : problem.n_model])[0][:, 0]
    if generator == "discrepancy":
        y = y + rng.normal(0.0, truth[names.index("sigma_u")], y.size) + ar1_noise(
            rng, y.size, truth[names.index("delta_u")], truth[names.index("rho_u")])
    else:
        y = y + ar1_noise(rng, y.size, truth[names.index("sigma_u")], truth[names.index("rho_u")])
    data = Segment.from_arrays(seg.time, seg.throttle, seg.brake, seg.steering, {"u": y}, seg.initial_state,
                               f"AR(1) coast-down, seed {seed}")
    out: dict = {"truth": dict(zip(names, map(float, truth)))}
    for model in noise_models:
        res = calibrate_stage(data, "rolling_resistance", previous=TRUTH, n_chains=chains, n_draws=draws,
                              seed=seed, predictive_draws=2, check=False, noise_model=model)
        flat = res.draws.reshape(-1, res.draws.shape[-1])
        out[model] = {n: tuple(map(float, np.quantile(flat[:, j], [0.05, 0.95]))) for j, n in enumerate(res.names)}
    return out
