"""Brake-coefficient estimation from wheel speeds: the parallel-estimation paper's test problem for this project.

The paper ("Optimization Results") estimates four brake friction coefficients of a full-vehicle model from the
four wheel speeds of a braking maneuver by least squares (Eq. 11) with a parallel finite-difference Jacobian,
and reports sigma^2 (J^T J)^-1 confidence intervals. Here the model is the 8-DOF model
(:mod:`vehcal_ros.models.vehicle_8dof`), whose wheel-spin equations carry one brake gain per wheel (N m at full
brake input). The four fitted coefficients are the paper's four per-wheel brake coefficients::

    p = (brake_gain_lf, brake_gain_rf, brake_gain_lr, brake_gain_rr)     [N m]

The front/rear split is seen through the tire slip, which also depends on the slip stiffnesses; those are held
at their (longitudinal-stage) values here, as the paper holds its tire model fixed.

Residual (one segment per maneuver, :class:`~vehcal_ros.inference.least_squares.parallel.SegmentedResidual`):
``(simulated - measured) / sigma_c`` for the channels u, w_lf, w_lr, w_rf, w_rr at the measurement times
(the paper's Eq. 10-11 with each channel scaled by its nominal noise level so that m/s and rad/s can be summed).
The simulation starts from the measured state at the start of the maneuver (mean of the first ``n_init``
samples, straight line: v = psi = phi = rates = 0), as the calibration paper's stages do.

A second, cheap residual, :class:`GripResidual`, is the magic formula f(s, theta) - mu against friction data.
"""

from __future__ import annotations

import csv
import itertools
import os
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass

import numpy as np

from vehcal_ros.errors import InputError
from vehcal_ros.inference.least_squares.parallel import ParallelFit, parallel_least_squares
from vehcal_ros.models import pacejka
from vehcal_ros.models.vehicle_8dof import (
    DEFAULT_PARAMETERS,
    PARAM_INDEX,
    STATE_INDEX,
    Simulator8Dof,
    VehicleConstants,
    parameter_vector,
)

FIT_NAMES: tuple[str, ...] = ("brake_gain_lf", "brake_gain_rf", "brake_gain_lr", "brake_gain_rr")
"""The four fitted coefficients (module doc)."""
TRUE_PARAMETERS: dict[str, float] = {"brake_gain_lf": 3500.0, "brake_gain_rf": 3300.0, "brake_gain_lr": 2700.0,
                                     "brake_gain_rr": 2500.0}
"""Coefficients used to generate the synthetic test data (front brakes stronger than rear, a slight left/right
imbalance as a worn pad would give)."""
START: dict[str, float] = {n: DEFAULT_PARAMETERS[n] for n in FIT_NAMES}
"""Initial guess p0: the model's defaults (the paper's Eq. 16 takes the vehicle model's defaults too)."""
BOUNDS: dict[str, tuple[float, float]] = {n: (500.0, 8000.0) for n in FIT_NAMES}
"""Box constraints (Eq. 12): 1/8 to 2 times the nominal brake torque (the HMMWV's 4000 N m)."""


def vehicle_start_bounds(constants: VehicleConstants | None) -> tuple[dict[str, float], dict[str, tuple[float, float]]]:
    """Initial guess and box of the four brake gains for a vehicle: its description's brake torques per wheel at
    full pedal, and 1/8 to 2 times them (``START``/``BOUNDS`` for the default HMMWV constants)."""
    if constants is None:
        return dict(START), dict(BOUNDS)
    d = constants.default_parameters()
    start = {n: float(d[n]) for n in FIT_NAMES}
    return start, {n: (0.125 * v, 2.0 * v) for n, v in start.items()}
CHANNELS: tuple[str, ...] = ("u", "w_lf", "w_lr", "w_rf", "w_rr")
"""Measured channels: forward speed (m/s) and the four wheel speeds (rad/s)."""
SIGMA: dict[str, float] = {"u": 0.05, "w_lf": 0.1, "w_lr": 0.1, "w_rf": 0.1, "w_rr": 0.1}
"""Nominal noise standard deviations per channel (also the synthetic data's noise)."""
CSV_COLUMNS = ("time", "throttle", "brake", "steering") + CHANNELS
"""Brake CSV header (names as the calibration CSV, :data:`vehcal_ros.estimation.calibration.fit.CSV_COLUMNS`)."""


@dataclass(frozen=True)
class BrakeManeuver:
    """One straight-line maneuver: inputs and measurements at the times ``t`` (s), arrays of length N."""

    t: np.ndarray
    throttle: np.ndarray
    brake: np.ndarray
    steering: np.ndarray
    measured: np.ndarray
    """[N, 5] measured ``CHANNELS``."""
    x0: tuple[float, ...] | None = None
    """Known initial values of ``CHANNELS`` at ``t[0]`` (e.g. from a filtered high-rate source, or the
    generator's truth); None: estimated from the first samples (see :meth:`initial_state`)."""

    def initial_state(self, n_init: int = 5) -> dict[str, float]:
        """Straight-line initial state: ``x0`` when known, else the mean of the first ``n_init`` samples.

        The estimate carries the measurement noise into the whole simulated trajectory (the wheel speeds
        integrate torque), which biases the fit by several standard errors at the default noise levels;
        with noisy data prefer a known ``x0``.
        """
        if self.x0 is not None:
            state = {c: float(v) for c, v in zip(CHANNELS, self.x0)}
            state.update(v=0.0, phi=0.0, wx=0.0, wz=0.0)
            return state
        mean = self.measured[:n_init].mean(axis=0)
        state = {c: float(v) for c, v in zip(CHANNELS, mean)}
        state.update(v=0.0, phi=0.0, wx=0.0, wz=0.0)
        return state

    def to_dict(self) -> dict[str, list[float]]:
        d = {"t": self.t.tolist(), "throttle": self.throttle.tolist(), "brake": self.brake.tolist(),
             "steering": self.steering.tolist()}
        d.update({c: self.measured[:, i].tolist() for i, c in enumerate(CHANNELS)})
        return d


_SIM_CACHE: OrderedDict[tuple[int, int, int, float], Simulator8Dof] = OrderedDict()
_token_counter = itertools.count()


class BrakeResidual:
    """Weighted residual of the brake problem, one segment per maneuver (module doc). Picklable.

    ``dt``: integration step (s); the output grid is the measurement grid (a multiple of ``dt``).
    ``base``: the other 8-DOF parameters (defaults: ``DEFAULT_PARAMETERS``). Simulators are built lazily and
    cached per process, so a worker pays the set-up once per residual.
    """

    def __init__(self, maneuvers: Sequence[BrakeManeuver], *, names: Sequence[str] = FIT_NAMES,
                 base: Mapping[str, float] | None = None, dt: float = 0.005, n_init: int = 5,
                 sigma: Mapping[str, float] | None = None, constants: VehicleConstants | None = None) -> None:
        if not maneuvers:
            raise ValueError("at least one maneuver is needed")
        self.maneuvers = list(maneuvers)
        self.names = tuple(names)
        self.idx = np.array([PARAM_INDEX[n] for n in self.names], dtype=np.int64)
        self.constants = constants
        self.base = parameter_vector(dict(base or {}), None if constants is None else constants.default_parameters())
        self.dt = float(dt)
        self.n_init = int(n_init)
        sig = {**SIGMA, **(sigma or {})}
        self.weights = np.array([1.0 / sig[c] for c in CHANNELS])
        self.chan = np.array([STATE_INDEX[c] for c in CHANNELS], dtype=np.int64)
        self.n_segments = len(self.maneuvers)
        self._token = (os.getpid(), next(_token_counter))

    def _sim(self, k: int) -> Simulator8Dof:
        key = (*self._token, k, self.dt)
        sim = _SIM_CACHE.get(key)
        if sim is None:
            mv = self.maneuvers[k]
            out_dt = float(np.median(np.diff(mv.t)))
            sim = Simulator8Dof(mv.initial_state(self.n_init), mv.t, mv.throttle, mv.brake, mv.steering,
                                dt=self.dt, output_dt=out_dt, n_out=mv.t.size, constants=self.constants)
            _SIM_CACHE[key] = sim
            while len(_SIM_CACHE) > 32:
                _SIM_CACHE.popitem(last=False)
        return sim

    def full_parameters(self, p: np.ndarray) -> np.ndarray:
        full = self.base.copy()
        full[self.idx] = p
        return full

    def simulate(self, p: np.ndarray, k: int) -> np.ndarray:
        """Simulated ``CHANNELS`` [N, 5] of maneuver ``k`` at parameters ``p`` (``names`` order)."""
        states = self._sim(k).run(self.full_parameters(np.asarray(p, dtype=float)))
        return states[:, self.chan]

    def segment_cost(self, k: int) -> float:
        """Relative cost of segment ``k``: its integration steps (balances the parallel tasks)."""
        t = self.maneuvers[k].t
        return float(round((t[-1] - t[0]) / self.dt))

    def segment(self, p: np.ndarray, k: int) -> np.ndarray:
        """Weighted residual of maneuver ``k`` (first sample excluded: it is the initial state)."""
        sim = self.simulate(p, k)[1:]
        return ((sim - self.maneuvers[k].measured[1:]) * self.weights).ravel()

    def __call__(self, p: np.ndarray) -> np.ndarray:
        return np.concatenate([self.segment(p, k) for k in range(self.n_segments)])


class GripResidual:
    """Magic-formula residual f(s_i, theta) - mu_i (friction paper, Eq. 5 and 14). Picklable."""

    def __init__(self, s: np.ndarray, mu: np.ndarray) -> None:
        self.s = np.ascontiguousarray(s, dtype=float)
        self.mu = np.ascontiguousarray(mu, dtype=float)

    def __call__(self, theta: np.ndarray) -> np.ndarray:
        return pacejka.residuals(self.s, self.mu, np.ascontiguousarray(theta, dtype=float))


def synthetic_maneuver(params: Mapping[str, float] | None = None, *, u0: float = 20.0, brake_level: float = 0.25,
                       throttle_level: float = 0.4, duration: float = 6.0, rate_hz: float = 100.0,
                       dt: float = 0.001, seed: int | None = 0, noise: bool = True,
                       known_x0: bool = True) -> BrakeManeuver:
    """Straight-line test maneuver simulated with the 8-DOF model at known ``params`` (default TRUE_PARAMETERS).

    Cruise at ``u0`` m/s (0-0.5 s), throttle ramp to ``throttle_level`` (0.5-1.5 s, held to 2.5 s), coast to
    3.0 s, brake ramp to ``brake_level`` (3.0-4.0 s) held to ``duration``; scaled to ``duration`` when it is not
    6 s. Measurements at ``rate_hz`` with Gaussian noise ``SIGMA`` (seeded) when ``noise``; ``known_x0``
    stores the true initial state in the maneuver.
    """
    truth = {**TRUE_PARAMETERS, **(params or {})}
    n = int(round(duration * rate_hz)) + 1
    t = np.arange(n) / rate_hz
    sc = duration / 6.0
    throttle = np.interp(t, np.array([0.0, 0.5, 1.5, 2.5, 3.0]) * sc, [0.0, 0.0, throttle_level, throttle_level,
                                                                         0.0])
    brake = np.interp(t, np.array([0.0, 3.0, 4.0, 6.0]) * sc, [0.0, 0.0, brake_level, brake_level])
    steering = np.zeros(n)
    full = parameter_vector(truth)
    r_eff = 0.47 - 2097.85 * 9.8 / 4 / 326332.0
    x0 = {"u": u0, "v": 0.0, "phi": 0.0, "wx": 0.0, "wz": 0.0}
    x0.update({w: u0 / r_eff for w in ("w_lf", "w_lr", "w_rf", "w_rr")})
    sim = Simulator8Dof(x0, t, throttle, brake, steering, dt=dt, output_dt=1.0 / rate_hz, n_out=n)
    clean = sim.run(full)[:, [STATE_INDEX[c] for c in CHANNELS]]
    if noise:
        rng = np.random.default_rng(seed)
        clean = clean + rng.standard_normal(clean.shape) * np.array([SIGMA[c] for c in CHANNELS])
    x_init = tuple(float(x0[c]) for c in CHANNELS)
    return BrakeManeuver(t=t, throttle=throttle, brake=brake, steering=steering, measured=clean,
                         x0=x_init if known_x0 else None)


def synthetic_data(n_maneuvers: int = 2, seed: int = 0, **kw) -> list[BrakeManeuver]:
    """``n_maneuvers`` synthetic maneuvers: brake levels 0.2-0.3 (no wheel lock), initial speeds 16-24 m/s."""
    levels = np.linspace(0.2, 0.3, n_maneuvers) if n_maneuvers > 1 else np.array([0.25])
    speeds = np.linspace(16.0, 24.0, n_maneuvers) if n_maneuvers > 1 else np.array([20.0])
    return [synthetic_maneuver(brake_level=float(b), u0=float(u), seed=seed * 1000 + i, **kw)
            for i, (b, u) in enumerate(zip(levels, speeds))]


def fit_brake(maneuvers: Sequence[BrakeManeuver], *, executor: Executor | None = None, method: str = "trf",
              diff: str = "forward", x0: Mapping[str, float] | None = None, dt: float = 0.001,
              residual: BrakeResidual | None = None, constants: VehicleConstants | None = None,
              **kwargs) -> ParallelFit:
    """Fit ``FIT_NAMES`` to the maneuvers with :func:`parallel_least_squares` (paper, "Optimization Results").

    ``dt`` (default 1 ms): integration step. Fitting at 5 ms data whose truth was integrated at 1 ms biases
    Cxf/Cxr by 3-7 standard errors (semi-implicit Euler error), so the default is the finer step.
    ``constants``: the vehicle (``VehicleConstants.from_description``; default the HMMWV): model, start and box.
    """
    res = residual or BrakeResidual(maneuvers, dt=dt, constants=constants)
    start0, bounds = vehicle_start_bounds(constants if constants is not None else res.constants)
    start = {**start0, **(x0 or {})}
    p0 = np.array([start[n] for n in res.names])
    lb = np.array([bounds[n][0] for n in res.names])
    ub = np.array([bounds[n][1] for n in res.names])
    return parallel_least_squares(res, p0, (lb, ub), executor=executor, method=method, diff=diff,
                                  names=res.names, **kwargs)


def load_brake_csv(path: str) -> list[BrakeManeuver]:
    """Maneuvers from a CSV with columns ``CSV_COLUMNS`` (+ optional ``maneuver`` id splitting the rows)."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            rows = list(csv.DictReader(f))
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not a text CSV file") from exc
    if not rows:
        raise InputError(f"{path}: no data rows")
    missing = [c for c in CSV_COLUMNS if c not in rows[0]]
    if missing:
        raise InputError(f"{path}: missing columns {missing}; a brake CSV needs {list(CSV_COLUMNS)}")
    try:
        data = {c: np.array([float(r[c]) for r in rows]) for c in CSV_COLUMNS}
    except (TypeError, ValueError) as exc:
        raise InputError(f"{path}: non-numeric value ({exc})") from exc
    ids = np.array([r.get("maneuver") or "0" for r in rows])
    out = []
    for mid in dict.fromkeys(ids):
        sel = ids == mid
        t = data["time"][sel]
        if t.size < 10 or np.any(np.diff(t) <= 0):
            raise InputError(f"{path}: maneuver {mid}: need >= 10 rows with strictly increasing t")
        out.append(BrakeManeuver(t=t, throttle=data["throttle"][sel], brake=data["brake"][sel],
                                 steering=data["steering"][sel],
                                 measured=np.column_stack([data[c][sel] for c in CHANNELS])))
    return out


def write_brake_csv(path: str, maneuvers: Sequence[BrakeManeuver]) -> None:
    """Inverse of :func:`load_brake_csv`."""
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(("maneuver",) + CSV_COLUMNS)
        for k, mv in enumerate(maneuvers):
            for i in range(mv.t.size):
                w.writerow([k, repr(float(mv.t[i])), repr(float(mv.throttle[i])), repr(float(mv.brake[i])),
                            repr(float(mv.steering[i]))] + [repr(float(v)) for v in mv.measured[i]])
