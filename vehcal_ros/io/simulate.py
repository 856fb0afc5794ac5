"""The simulation loop shared by the ``vehicle_simulator`` node and ``vehcal simulate`` (no rclpy).

``ScenarioRun`` steps the 14-DOF model at the scenario's ``dt``, updates the driver inputs at the driver rate,
samples the sensors when due (models/sensors.py) and yields ``(topic, record, release_time)`` in release
order; the model is stepped in batches between events. ``run_scenario`` drives it, optionally paced to a
real-time factor, and calls ``on_record(topic, record)``. Topics are the canonical names of
docs/nodes.md (``/vehicle/imu``, ..., ``/clock``). A diverging model (``FloatingPointError``
or a non-finite output) stops the run with ``SimulationDiverged`` naming the scenario and the time; nothing
computed from the diverged state is emitted.
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from vehcal_ros.errors import EstimationError
from vehcal_ros.io.scenarios import DriverProgram, Scenario
from vehcal_ros.models.sensors import SensorSuite, period_steps

ControlsSource = Callable[[float], "tuple[float, float, float] | None"]


class SimulationDiverged(EstimationError):
    """The model's state became non-finite; the message names the scenario and the simulation time."""


@dataclass(frozen=True)
class SimulationSummary:
    """What a finished (or stopped) run did."""

    scenario: str
    t_end: float                  # s, simulation time reached
    steps: int                    # model steps taken
    records: dict[str, int]       # topic -> records emitted
    wall_s: float                 # s, wall-clock duration
    realtime_factor: float        # achieved simulation time / wall time
    stopped: bool = False         # True when stopped early on request


def make_model(scenario: Scenario, vehicle: str | None = None):
    """The 14-DOF model of ``vehicle`` (default: the scenario's, else the HMMWV; a shipped name or a model
    file) on the scenario's road, reset to its initial speed and pose."""
    from vehcal_ros.models.vehicle14 import Hmmwv14, load_simulator_params

    params = load_simulator_params(vehicle or scenario.vehicle or None)
    sim = Hmmwv14(params=params, road=scenario.road.to_road_map(), dt=scenario.dt)
    ini = scenario.initial
    sim.reset(speed=ini.speed, x=ini.x, y=ini.y, yaw=ini.yaw)
    return sim


def _scalar(v: Any) -> float | None:
    if isinstance(v, (int, float, np.floating, np.integer)) and not isinstance(v, bool) and math.isfinite(float(v)):
        return float(v)
    return None


def model_constants(sim: Any) -> dict[str, float]:
    """True model constants for ground truth: the scalar fields of the model's parameter record (one level
    of the nested ``tire``, ``chassis`` and ``steering`` records as ``tire.<field>``) and ``total_mass`` (kg)."""
    params = getattr(sim, "params", None)
    out: dict[str, float] = {}
    if params is None or not dataclasses.is_dataclass(params):
        return out
    for f in dataclasses.fields(params):
        v = getattr(params, f.name)
        if (x := _scalar(v)) is not None:
            out[f.name] = x
        elif dataclasses.is_dataclass(v):
            if f.name not in ("tire", "chassis", "steering"):
                continue
            for g in dataclasses.fields(v):
                if (y := _scalar(getattr(v, g.name))) is not None:
                    out[f"{f.name}.{g.name}"] = y
    if (m := _scalar(getattr(params, "total_mass", None))) is not None:
        out["total_mass"] = m
    return out


def _non_finite(out: Mapping[str, Any]) -> str | None:
    """Name of the first numeric output that is not finite, else None (arrays: via their sum)."""
    isfinite = math.isfinite
    for k, v in out.items():
        if isinstance(v, float):
            if not isfinite(v):
                return k
        elif isinstance(v, np.ndarray):
            if v.dtype.kind == "f" and not isfinite(float(v.sum())):  # a sum past 1e308 is divergence too
                return k
    return None


class ScenarioRun:
    """One run of a scenario, iterated as ``(topic, record, release_time_s)``.

    model: a model with the Hmmwv14 interface (default: ``make_model(scenario)``).
    controls_source: if given, called at the driver rate with the time; returns (throttle, brake, steering)
        or None (then 0, 0, 0); replaces the scenario's driver.
    stop: set it to end the run early (checked between batches).
    duration: s, overrides the scenario's duration.
    Attributes while running: ``t`` (s), ``steps``, ``controls``, ``outputs`` (last model outputs).
    """

    def __init__(self, scenario: Scenario, *, model: Any = None, controls_source: ControlsSource | None = None,
                 stop: threading.Event | None = None, duration: float | None = None) -> None:
        self.scenario = scenario
        self.sim = model if model is not None else make_model(scenario)
        self.controls_source = controls_source
        self.stop = stop
        self.duration = float(scenario.duration if duration is None else duration)
        constants = model_constants(self.sim)
        constants["dt"] = scenario.dt
        self.sensors = SensorSuite(scenario.sensors, scenario.dt, scenario.seed, constants, origin=scenario.origin)
        self.driver = DriverProgram(scenario.driver)
        self.t = 0.0
        self.steps = 0
        self.controls = (0.0, 0.0, 0.0)
        self.outputs: Mapping[str, Any] = {}
        self.stopped = False
        self.counts: dict[str, int] = {}

    def _diverged(self, t: float, why: str) -> SimulationDiverged:
        return SimulationDiverged(f"scenario '{self.scenario.name}': the model diverged at t = {t:.3f} s "
                                  f"({why}); stopped, nothing after the last finite state was emitted")

    def _inputs(self, t: float) -> tuple[float, float, float]:
        if self.controls_source is not None:
            c = self.controls_source(t)
            if c is None:
                return (0.0, 0.0, 0.0)
            th, br, st = (float(x) for x in c)
            return (min(1.0, max(0.0, th)), min(1.0, max(0.0, br)), min(1.0, max(-1.0, st)))
        return self.driver.inputs_at(t, self.outputs)

    def __iter__(self) -> Iterator[tuple[str, object, float]]:
        dt = self.scenario.dt
        ctrl = period_steps(self.scenario.driver.rate, dt)
        n_end = int(round(self.duration / dt))
        sensors = self.sensors
        n = 0
        self.outputs = self.sim.outputs()
        bad = _non_finite(self.outputs)
        if bad:
            raise self._diverged(0.0, f"initial output '{bad}' is not finite")
        while True:
            t = sensors.time(n)
            self.t = t
            if n % ctrl == 0:
                self.controls = self._inputs(t)
            sensors.measure(n, self.outputs, self.controls)
            for topic, rec in sensors.release(n):
                self.counts[topic] = self.counts.get(topic, 0) + 1
                yield topic, rec, t
            if n >= n_end:
                break
            if self.stop is not None and self.stop.is_set():
                self.stopped = True
                return
            nxt = min(sensors.next_event(n), (n // ctrl + 1) * ctrl, n_end)
            th, br, st = self.controls
            try:
                self.sim.step(th, br, st, n_steps=nxt - n)
            except (FloatingPointError, ZeroDivisionError, OverflowError) as exc:
                t_model = getattr(self.sim, "t", None)
                t_bad = float(t_model) if isinstance(t_model, float) and math.isfinite(t_model) else sensors.time(nxt)
                raise self._diverged(t_bad, f"{exc.__class__.__name__}: {exc}") from None
            self.steps += nxt - n
            n = nxt
            self.outputs = self.sim.outputs()
            bad = _non_finite(self.outputs)
            if bad:
                raise self._diverged(sensors.time(n), f"output '{bad}' is not finite")
        # records still held back by their latency: release them at their own release times
        while sensors.pending():
            n += 1
            for topic, rec in sensors.release(n):
                self.counts[topic] = self.counts.get(topic, 0) + 1
                yield topic, rec, sensors.time(n)


def run_scenario(scenario: Scenario, on_record: Callable[[str, object], None],
                 realtime_factor: float | Callable[[], float] | None = None, *, model: Any = None,
                 controls_source: ControlsSource | None = None, stop: threading.Event | None = None,
                 duration: float | None = None,
                 on_start: Callable[[ScenarioRun], None] | None = None) -> SimulationSummary:
    """Run ``scenario`` and call ``on_record(topic, record)`` for every record at its release time.

    realtime_factor: None or 0 = as fast as possible; r > 0 = simulation time advances r times faster than
    the wall clock (1.0 = real time). A callable is re-read at every record, so the factor can change while
    running (the pacing re-anchors at the change). Raises ``SimulationDiverged`` on divergence.
    ``on_start(run)`` is called before stepping (e.g. so a node can read ``run.t`` for its diagnostics).
    """
    run = ScenarioRun(scenario, model=model, controls_source=controls_source, stop=stop, duration=duration)
    if on_start is not None:
        on_start(run)
    factor_of = realtime_factor if callable(realtime_factor) else (lambda: realtime_factor)
    wall0 = time.monotonic()
    anchor_wall, anchor_sim, anchor_factor = wall0, 0.0, factor_of()
    for topic, rec, t_release in run:
        factor = factor_of()
        if factor != anchor_factor:
            anchor_wall, anchor_sim, anchor_factor = time.monotonic(), t_release, factor
        if factor is not None and factor > 0:
            ahead = anchor_wall + (t_release - anchor_sim) / factor - time.monotonic()
            if ahead > 0:
                if stop is not None:
                    if stop.wait(ahead):
                        run.stopped = True
                        break
                else:
                    time.sleep(ahead)
        on_record(topic, rec)
    wall = time.monotonic() - wall0
    return SimulationSummary(scenario=scenario.name, t_end=run.t, steps=run.steps, records=dict(run.counts),
                             wall_s=wall, realtime_factor=(run.t / wall) if wall > 0 else math.inf,
                             stopped=run.stopped)
