"""Bag replay: the live estimators over a rosbag2 file, on the bag's clock, as fast as the CPU allows.

``replay_bag`` streams a bag (mcap or sqlite3, :func:`vehcal_ros.io.bags.read_bag`, header-stamp order) into
the *same* estimation objects the nodes run — :class:`~vehcal_ros.estimation.grip_pipeline.GripPipeline`
(``grip_estimator``) and, when present, ``CalibrationPipeline`` (``model_calibrator``) — built from the same
ROS parameters (a params YAML in ``ros__parameters`` form, default ``config/estimate.yaml``). Each node's timer
becomes a tick on the bag's clock: every ``fit_period`` (grip) or ``calibration_period`` (calibrator) s of
bag time (first tick one period after the first stamp) a cycle runs synchronously (snapshot + fit + commit)
before the next record is fed; a tick with nothing to fit does no work, as in the nodes. At the end of the bag
one more cycle runs (``final_cycle``). Seeds follow the pipelines' rule (``seed + 1000 * cycle + k``), so the
same bag and seed give the same numbers in either storage, and the numbers of a live run whose timers fired at
the same bag times (docs/replay.md).

Memory is bounded by the pipelines' rolling buffers plus one entry per published estimate (and a 10 Hz
decimated ground-truth trace); the bag is never loaded whole. Nothing here imports rclpy.

Outputs: :class:`ReplayResult` (``to_dict()`` -> JSON with the field names of docs/cli.md) and
:func:`record_outputs`, which writes what the nodes would have published (``<prefix>/grip/<scope>``
Vector3Stamped, ``<prefix>/grip_curve/<scope>`` Float64MultiArray, ``/vehcal/model_parameters``
DiagnosticArray) to a new bag for later comparison.
"""

from __future__ import annotations

import importlib
import inspect
import math
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from vehcal_ros.errors import InputError
from vehcal_ros.estimation.calibration import finite_or_none as _f
from vehcal_ros.estimation.calibration import jsonable
from vehcal_ros.estimation.grip_belief import belief_timeline
from vehcal_ros.estimation.grip_fit import GripEstimate
from vehcal_ros.estimation.grip_pipeline import GripPipeline, pipeline_from_params
from vehcal_ros.estimation.grip_signals import ScopeData
from vehcal_ros.estimation.position import PositionTracker, grip_by_place
from vehcal_ros.io import bags
from vehcal_ros.io.params_yaml import absolute_topic, flatten_params, load_params_document, node_name
from vehcal_ros.io.replay_guard import replay_guards
from vehcal_ros.records import GnssFix, GroundTruth, OdomSample
from vehcal_ros.resources import find_resource, searched
from vehcal_ros.vehicle.description import load_vehicle

GRIP_NODE = "grip_estimator"
CALIBRATOR_NODE = "model_calibrator"
CALIBRATION_MODULE = "vehcal_ros.estimation.calibration_pipeline"
MODEL_PARAMETERS_TOPIC = "/vehcal/model_parameters"
TRUTH_PERIOD = 0.1
"""s of bag time between kept ground-truth samples (the truth trace of the mu_max plot)."""

ProgressFn = Callable[["ReplayProgress"], None]
"""``progress(ReplayProgress)``; called every ``progress_every`` records (and while waiting for fits) and at the end."""

# grip_estimator parameter -> read_bag sensor key (the node subscribes to these; ground truth is replay-only)
_GRIP_TOPIC_PARAMS = {"wheel_speeds_topic": "wheel_speeds", "tire_forces_topic": "tire_forces",
                      "odom_topic": "odom", "controls_topic": "controls"}


# --------------------------------------------------------------------------------------------------- params
def default_params_file() -> Path:
    """The package's ``config/estimate.yaml`` (:func:`vehcal_ros.resources.find_resource`)."""
    found = find_resource("config", "estimate.yaml")
    if found is None:
        raise InputError(f"config/estimate.yaml not found (looked in {searched('config', 'estimate.yaml')})")
    return found


def _read_params_yaml(path: str | os.PathLike) -> dict[str, dict]:
    """``{node: ros__parameters}`` of a params YAML (structure only; the CLI validates values against PARAMS)."""
    path = Path(path)
    doc = load_params_document(path)
    out: dict[str, dict] = {}
    for key, body in doc.items():
        name = node_name(key)
        if not isinstance(body, dict) or not isinstance(body.get("ros__parameters") or {}, dict):
            raise InputError(f"params file {path}: {key}: expected 'ros__parameters' mapping")
        out.setdefault(name, {}).update(flatten_params(body.get("ros__parameters") or {}))  # /**/name + name
    return out


def resolve_params(params: Mapping[str, Mapping] | str | os.PathLike | None = None) -> dict[str, dict]:
    """Per-node parameter values: the package defaults (config/estimate.yaml, which lists every declared
    parameter with its node default), then the ``/**`` wildcard, then the node's own section.

    ``params``: ``{node: {param: value}}`` (as :func:`vehcal_ros.nodes.params_file.validate_params_file`
    returns), a params YAML path, or None for the defaults only.
    """
    defaults = _read_params_yaml(default_params_file())
    given = _read_params_yaml(params) if isinstance(params, (str, os.PathLike)) else dict(params or {})
    out: dict[str, dict] = {}
    for node in sorted((set(defaults) | set(given) | {GRIP_NODE}) - {"/**"}):
        values = dict(defaults.get(node, {}))
        values.update(given.get("/**", {}))
        values.update(given.get(node, {}))
        out[node] = values
    return out


def grip_pipeline_from(values: Mapping[str, Any]) -> GripPipeline:
    """The GripPipeline the ``grip_estimator`` node builds from these parameter values (the same function)."""
    try:
        return pipeline_from_params(values, load_vehicle(values.get("vehicle") or None))
    except KeyError as exc:
        raise InputError(f"{GRIP_NODE}: parameter {exc.args[0]!r} missing (and no package default)") from None
    except (TypeError, ValueError) as exc:
        raise InputError(f"{GRIP_NODE}: {exc}") from None


def calibration_module():
    """``vehcal_ros.estimation.calibration_pipeline`` or None while it does not exist."""
    try:
        return importlib.import_module(CALIBRATION_MODULE)
    except ModuleNotFoundError as exc:
        if exc.name != CALIBRATION_MODULE:
            raise
        return None


def calibration_pipeline_from(values: Mapping[str, Any]):
    """The CalibrationPipeline the ``model_calibrator`` node builds from these values (the same
    ``config_from``), or None while ``estimation.calibration_pipeline`` does not exist."""
    mod = calibration_module()
    if mod is None:
        return None
    try:
        return mod.CalibrationPipeline(mod.config_from(values))
    except InputError as exc:
        raise InputError(f"{CALIBRATOR_NODE}: {exc}") from None
    except (TypeError, ValueError) as exc:
        raise InputError(f"{CALIBRATOR_NODE}: {exc}") from None


def _calibration_period(values: Mapping[str, Any]) -> float:
    """The node's timer period (``calibration_period``; 5 s, its declared default, when absent)."""
    return float(values.get("calibration_period", 5.0))


def topic_map_from(node_values: Mapping[str, Mapping[str, Any]],
                   remap: Mapping[str, str] | None = None) -> dict[str, str]:
    """Canonical topic -> topic in the bag: the nodes' ``*_topic`` parameters, then ``remap`` (``FROM -> TO``
    where FROM is a canonical topic, a sensor key such as ``imu``, or the topic a node parameter names)."""
    out: dict[str, str] = {}
    for node, values in node_values.items():
        for key, val in values.items():
            if not key.endswith("_topic") or not isinstance(val, str):
                continue
            val = absolute_topic(val)  # the nodes' relative defaults, in the root namespace of a bag
            sensor = _GRIP_TOPIC_PARAMS.get(key, key[: -len("_topic")])
            canonical = bags.DEFAULT_TOPICS.get(sensor)
            if canonical is None or canonical == "/clock":
                continue
            if canonical in out and out[canonical] != val:
                raise InputError(f"{node}.{key} = {val!r} but another node reads {canonical} from "
                                 f"{out[canonical]!r}; a bag replay needs one name per topic")
            out[canonical] = val
    for src, dst in (remap or {}).items():
        if not isinstance(dst, str) or not dst.startswith("/"):
            raise InputError(f"remap {src}:={dst}: the target must be an absolute topic name")
        hits = [c for c in bags.TOPIC_TYPES if c != "/clock" and src in (c, out.get(c), _sensor_key(c))]
        if not hits:
            known = ", ".join(sorted({out.get(c, c) for c in bags.TOPIC_TYPES if c != "/clock"}))
            raise InputError(f"remap {src}:={dst}: {src!r} is not a topic the estimators read (known: {known})")
        for c in hits:
            out[c] = dst
    return {c: t for c, t in out.items() if t != c}


def _sensor_key(canonical: str) -> str | None:
    return next((k for k, v in bags.DEFAULT_TOPICS.items() if v == canonical), None)


# --------------------------------------------------------------------------------------------------- results
def _fl(a: Any) -> list:
    return [_f(x) for x in np.asarray(a, dtype=float).reshape(-1)]


@dataclass(frozen=True)
class GripSeries:
    """Published grip estimates of one scope over the replay (one entry per accepted fit).

    Arrays have shape ``(n,)`` except ``curves`` ``(n, 3, n_grid)`` (rows q05, q50, q95 over ``curve_slip``).
    ``t``: bag time of the cycle that produced the estimate (s); ``stamp``: newest sample in its data (the
    header stamp the node publishes). ``truth``: mean true mu_max under the scope's wheels at ``t`` (NaN when
    the bag has no ``/vehicle/ground_truth``).
    """

    scope: str
    wheels: tuple[str, ...]
    t: np.ndarray
    stamp: np.ndarray
    mean: np.ndarray
    std: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    truth: np.ndarray
    slip_at_peak: np.ndarray
    r_hat: np.ndarray
    ess_bulk: np.ndarray
    converged: np.ndarray
    n_points: np.ndarray
    curve_slip: np.ndarray
    curves: np.ndarray = field(repr=False)
    interval_prob: float = float("nan")
    final: GripEstimate | None = field(default=None, repr=False)
    data: ScopeData | None = field(default=None, repr=False)
    """(t, slip, mu) samples the final estimate was fitted on."""
    truth_t: np.ndarray = field(default_factory=lambda: np.empty(0), repr=False)
    truth_mu_max: np.ndarray = field(default_factory=lambda: np.empty(0), repr=False)
    """Decimated (``TRUTH_PERIOD``) ground-truth trace of mu_max under the scope's wheels."""
    level: int = 1
    message: str = ""
    n_fits: int = 0
    n_failed: int = 0
    n_not_converged: int = 0
    in_force: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    """The belief in force every ``TRUTH_PERIOD`` s (estimation/grip_belief.py ``belief_timeline``): arrays ``t``,
    ``mean``, ``lower``, ``upper``, ``age``, ``distance``, ``p_change``, ``known``, and ``speed`` (m/s) and
    ``truth`` (the lower of the scope's wheels' true mu_max; NaN without ground truth) at the same times."""

    def to_dict(self) -> dict:
        return {
            "scope": self.scope, "wheels": list(self.wheels), "n_estimates": int(self.t.size),
            "t": _fl(self.t), "stamp": _fl(self.stamp),
            "mu_max": {"mean": _fl(self.mean), "std": _fl(self.std), "lower": _fl(self.lower),
                       "upper": _fl(self.upper), "prob": _f(self.interval_prob)},
            "truth_mu_max": _fl(self.truth), "slip_at_peak": _fl(self.slip_at_peak),
            "r_hat": _fl(self.r_hat), "ess_bulk": _fl(self.ess_bulk),
            "converged": [bool(x) for x in self.converged], "n_points": [int(x) for x in self.n_points],
            "final": None if self.final is None else self.final.to_dict(),
            "ground_truth": {"t": _fl(self.truth_t), "mu_max": _fl(self.truth_mu_max)},
            "status": {"level": int(self.level), "message": self.message, "n_fits": self.n_fits,
                       "n_failed": self.n_failed, "n_not_converged": self.n_not_converged},
            "in_force": {k: ([bool(x) for x in v] if v.dtype == bool else _fl(v)) for k, v in self.in_force.items()},
        }


@dataclass(frozen=True)
class CalibrationSeries:
    """Accepted calibrations of one stage over the replay: ``t`` (bag time of the cycle, s) and per parameter
    name the (mean, std, hdi_low, hdi_high, r_hat, ess_bulk) at each update; ``final`` the last result."""

    stage: str
    t: np.ndarray
    parameters: dict[str, dict[str, np.ndarray]]
    converged: np.ndarray
    final: Any = field(default=None, repr=False)
    segment: Any = field(default=None, repr=False)
    level: int = 1
    message: str = ""
    n_fits: int = 0
    n_failed: int = 0
    n_confirmed: int = 0   #: windows that confirmed the accepted model (no fit ran; recalibration_check)
    holdout: dict | None = None       #: the accepted fit's predictive check (acceptance.HoldoutCheck.to_dict)
    last_holdout: dict | None = None  #: the newest predictive check (accepted or refused)
    n_refused_holdout: int = 0        #: converged fits refused because they did not predict their held-back part

    def to_dict(self) -> dict:
        final = None
        if self.final is not None:
            final = self.final.to_dict()
            if self.holdout is not None:
                final["holdout"] = jsonable(self.holdout)
        return {
            "stage": self.stage, "n_updates": int(self.t.size), "t": _fl(self.t),
            "parameters": {k: {f: _fl(a) for f, a in v.items()} for k, v in self.parameters.items()},
            "converged": [bool(x) for x in self.converged], "final": final,
            "status": {"level": int(self.level), "message": self.message, "n_fits": self.n_fits,
                       "n_failed": self.n_failed, "n_confirmed": self.n_confirmed,
                       "n_refused_holdout": self.n_refused_holdout},
            "holdout": jsonable(self.holdout), "last_holdout": jsonable(self.last_holdout),
        }


@dataclass(frozen=True)
class ReplayResult:
    """What a replay produced. ``grip``: scope -> :class:`GripSeries`; ``calibration``: stage ->
    :class:`CalibrationSeries` (empty when the calibration pipeline is absent: see ``calibration_note``)."""

    bag: str
    seed: int | None
    params: dict[str, dict]
    topic_map: dict[str, str]
    grip: dict[str, GripSeries]
    calibration: dict[str, CalibrationSeries]
    model_parameters: dict[str, float]
    counters: dict[str, Any]
    n_messages: int
    t_start: float
    t_end: float
    elapsed_s: float
    calibration_note: str = ""
    outputs: tuple = field(default=(), repr=False, compare=False)
    """(topic, kind, t, payload) of every publication, for :func:`record_outputs`."""
    grip_by_place: tuple[dict, ...] = field(default=(), repr=False)
    """Per GNSS fix (one per second of bag time) and grip scope, the belief in force there: dicts of
    ``estimation.position.PLACE_FIELDS`` (empty when the bag has no ``/vehicle/gnss/fix``)."""
    calibration_pipeline: Any = field(default=None, repr=False, compare=False)
    """the calibration pipeline at the end of the bag (its accepted results: a state file), None without one."""

    @property
    def bag_duration_s(self) -> float:
        return max(0.0, self.t_end - self.t_start) if math.isfinite(self.t_start) else 0.0

    def to_dict(self) -> dict:
        return {
            "bag": self.bag, "seed": self.seed, "n_messages": self.n_messages,
            "t_start": _f(self.t_start), "t_end": _f(self.t_end), "bag_duration_s": _f(self.bag_duration_s),
            "elapsed_s": self.elapsed_s,
            "realtime_factor": _f(self.bag_duration_s / self.elapsed_s) if self.elapsed_s > 0 else None,
            "topic_map": dict(self.topic_map), "counters": self.counters,
            "grip": {s: g.to_dict() for s, g in self.grip.items()},
            "calibration": {s: c.to_dict() for s, c in self.calibration.items()},
            "model_parameters": {k: _f(v) for k, v in self.model_parameters.items()},
            "calibration_note": self.calibration_note,
            "params": jsonable(self.params),
            "grip_by_place": [dict(r) for r in self.grip_by_place],
        }


# --------------------------------------------------------------------------------------------------- replay
class _GripTrack:
    """Accumulates one scope's published estimates (bounded by the number of cycles)."""

    def __init__(self, scope: str, wheel_idx: tuple[int, ...], wheel_names: tuple[str, ...]) -> None:
        self.scope, self.wheel_idx = scope, wheel_idx
        self.wheels = tuple(wheel_names[i] for i in wheel_idx)
        self.rows: list[tuple] = []
        self.curves: list[np.ndarray] = []
        self.grid = np.empty(0)
        self.data: ScopeData | None = None
        self.truth_t: list[float] = []
        self.truth_mu: list[float] = []
        self.events: list[tuple] = []     # (t in force, "estimate" | "floor", GripEstimate | MuMax, data stamp)
        self.samples: list[np.ndarray] = []   # the friction samples as they entered the buffer (rows t, slip, ...)
        self.sampled_to = -math.inf

    def add(self, t: float, stamp: float, est: GripEstimate, truth: float, data: ScopeData | None) -> None:
        self.rows.append((t, stamp, est.mu_max_mean, est.mu_max_std, est.mu_max_lower, est.mu_max_upper, truth,
                          est.slip_at_peak_mean, est.mu_max_r_hat, est.mu_max_ess_bulk, est.converged,
                          est.n_points))
        self.grid = np.asarray(est.curve_slip, dtype=float)
        self.curves.append(np.vstack([est.curve_q05, est.curve_q50, est.curve_q95]))
        self.data = data
        self.events.append((t, "estimate", est, stamp))

    def in_force(self, hazard: Any, prob: float, speed_t: np.ndarray, speed_u: np.ndarray,
                 test: Any = None) -> dict[str, np.ndarray]:
        """The belief in force on the truth trace's times (or every TRUTH_PERIOD s over the speed trace)."""
        if self.truth_t:
            grid, truth = np.asarray(self.truth_t), np.asarray(self.truth_mu)
        elif speed_t.size:
            grid = np.arange(speed_t[0], speed_t[-1] + 1e-9, TRUTH_PERIOD)
            truth = np.full(grid.size, np.nan)
        else:
            return {}
        rows = np.concatenate(self.samples) if self.samples else np.empty((0, 6))
        samples = ScopeData(scope=self.scope, t=rows[:, 0], slip=rows[:, 1], mu=rows[:, 2], slip_var=rows[:, 3],
                            mu_var=rows[:, 4], lat=rows[:, 5])
        out = belief_timeline(self.events, speed_t, speed_u, grid, hazard, prob, samples, test)
        out["speed"] = np.interp(grid, speed_t, np.abs(speed_u)) if speed_t.size else np.full(grid.size, np.nan)
        out["truth"] = truth
        return out

    def series(self, status: Any, prob: float, in_force: dict[str, np.ndarray] | None = None) -> GripSeries:
        cols = list(zip(*self.rows)) if self.rows else [()] * 12
        arr = [np.asarray(c, dtype=float) for c in cols]
        curves = np.stack(self.curves) if self.curves else np.empty((0, 3, self.grid.size))
        return GripSeries(scope=self.scope, wheels=self.wheels, t=arr[0], stamp=arr[1], mean=arr[2], std=arr[3],
                          lower=arr[4], upper=arr[5], truth=arr[6], slip_at_peak=arr[7], r_hat=arr[8],
                          ess_bulk=arr[9], converged=arr[10].astype(bool), n_points=arr[11].astype(int),
                          curve_slip=self.grid, curves=curves, interval_prob=prob, final=status.estimate,
                          data=self.data, truth_t=np.asarray(self.truth_t), truth_mu_max=np.asarray(self.truth_mu),
                          level=int(status.level), message=str(status.message), n_fits=status.n_fits,
                          n_failed=status.n_failed, n_not_converged=status.n_not_converged,
                          in_force=in_force or {})


def _scope_wheels(scope: str, wheel_names: tuple[str, ...]) -> tuple[int, ...]:
    base = scope[: -len("_braking")] if scope.endswith("_braking") else scope
    if base == "front_axle":
        return (0, 1)
    if base == "rear_axle":
        return (2, 3)
    if base in wheel_names:
        return (wheel_names.index(base),)
    return tuple(range(len(wheel_names)))


_STAT_FIELDS = ("mean", "std", "hdi_low", "hdi_high", "r_hat", "ess_bulk")


def _truth_of(truth: GroundTruth | None, wheel_idx: tuple[int, ...]) -> float:
    """True mu_max of a scope: the lowest under its wheels (the grip the scope can rely on; NaN without ground
    truth)."""
    return float(np.min(truth.mu_max[list(wheel_idx)])) if truth is not None else float("nan")


class GripRecorder:
    """Published grip estimates -> per-scope tracks and the outputs the node would publish (serial and parallel
    replays commit through the same recorder, in cycle order)."""

    def __init__(self, scopes: tuple[str, ...], wheel_names: tuple[str, ...]) -> None:
        self.tracks = {s: _GripTrack(s, _scope_wheels(s, wheel_names), wheel_names) for s in scopes}
        self.outputs: list[tuple] = []     # (t_cycle, rank, (key, kind, stamp, payload))
        self.n_cycles = 0
        self.truth: GroundTruth | None = None
        self.doubts: list[str] = []        # the fed pipeline's doubtful description facts at the last tick
        self.speed_t: list[float] = []     # the odometry's speed trace (the belief's odometer)
        self.speed_u: list[float] = []
        self.position = PositionTracker()      # the latest GNSS fix and its 1 Hz track (grip by place)
        self.place_truths: list[dict[str, float]] = []   # per fix on the track: scope -> true mu_max then

    def add_fix(self, rec: GnssFix) -> None:
        """Feed a GNSS fix; one kept on the position track gets every scope's true mu_max at that instant (NaN
        without a ground-truth record in the last TRUTH_PERIOD s)."""
        if self.position.add(rec):
            fresh = self.truth is not None and 0.0 <= rec.t - float(self.truth.t) <= TRUTH_PERIOD
            self.place_truths.append(self.truths() if fresh else dict.fromkeys(self.tracks, math.nan))

    def add_speed(self, rec: OdomSample) -> None:
        """Keep the vehicle speed of an odometry record (the road-change hazard's odometer)."""
        self.speed_t.append(float(rec.t))
        self.speed_u.append(float(rec.u))

    def in_force(self, hazard: Any, prob: float, test: Any = None) -> dict[str, dict[str, np.ndarray]]:
        """Per scope, the belief in force over the replay (:meth:`_GripTrack.in_force`)."""
        t, u = np.asarray(self.speed_t, dtype=float), np.asarray(self.speed_u, dtype=float)
        return {s: tr.in_force(hazard, prob, t, u, test) for s, tr in self.tracks.items()}

    def take_samples(self, pipeline: Any) -> None:
        """Keep the friction samples that entered each scope's buffer since the last call, and the pipeline's
        doubtful description facts (called at every grip tick, before the snapshot, with the pipeline the records
        were fed to): the contradiction test of the belief in force reruns on the samples."""
        collector = pipeline.collector
        self.doubts = pipeline.doubtful_assumptions()
        for scope, tr in self.tracks.items():
            d = collector.recent(scope, tr.sampled_to)
            keep = d.t > tr.sampled_to
            if np.any(keep):
                tr.samples.append(np.column_stack([d.t, d.slip, d.mu, d.slip_var, d.mu_var, d.lat])[keep])
                tr.sampled_to = float(d.t[keep][-1])

    def truths(self) -> dict[str, float]:
        """The true mu_max of every scope now (kept with a cycle so a late commit labels it as the live one)."""
        return {s: _truth_of(self.truth, tr.wheel_idx) for s, tr in self.tracks.items()}

    def add_truth(self, rec: GroundTruth, last_t: float) -> float:
        """Keep the newest ground truth; every TRUTH_PERIOD s one sample of the decimated trace. Returns the
        time of the last kept sample."""
        self.truth = rec
        t = float(rec.t)
        if t - last_t < TRUTH_PERIOD - 1e-9:
            return last_t
        for tr in self.tracks.values():
            tr.truth_t.append(t)
            tr.truth_mu.append(_truth_of(rec, tr.wheel_idx))
        return t

    def committed(self, grip: GripPipeline, t_now: float, updated: list[str], by_scope: Mapping[str, ScopeData],
                  truths: Mapping[str, float]) -> None:
        """A cycle at bag time ``t_now`` was committed and changed the published estimates of ``updated``."""
        self.n_cycles += 1
        for scope in updated:
            st = grip.status[scope]
            est = st.estimate
            self.tracks[scope].add(t_now, st.estimate_stamp, est, truths.get(scope, float("nan")),
                                   by_scope.get(scope))
            rows = np.vstack([est.curve_slip, est.curve_q05, est.curve_q50, est.curve_q95])
            self.outputs.append((t_now, 0, (scope, "grip", st.estimate_stamp,
                                            (est.mu_max_mean, est.mu_max_lower, est.mu_max_upper, rows))))
        for scope, mu, stamp in grip.floor_updates:   # floor beliefs put in force (no curve: no grip output)
            self.tracks[scope].events.append((t_now, "floor", mu, stamp))


class CalibrationRecorder:
    """Runs the calibrator's cycles on the bag clock and keeps its accepted results and outputs (picklable: a
    parallel replay runs it in a worker process and returns it whole)."""

    def __init__(self, cal: Any, on_model: Callable[[dict], Any] | None = None) -> None:
        self.cal = cal
        self.on_model = on_model             # e.g. the grip pipeline's use_model_parameters (estimated forces)
        self.takes_final = "final" in inspect.signature(cal.snapshot).parameters
        self.rows: dict[str, list] = {}
        self.segments: dict[str, Any] = {}   # stage -> Segment of its last accepted fit (for the report)
        self.outputs: list[tuple] = []       # (t_cycle, rank, (key, kind, t, payload))
        self.n_cycles = 0

    def cycle(self, t_now: float, final: bool = False) -> None:
        """One timer tick of the model_calibrator at bag time ``t_now`` (snapshot, fit, commit)."""
        jobs = self.snapshot(final)
        if jobs:  # none: the node's timer submits no work (and the pipeline's cycle count stays)
            self.committed(t_now, jobs, self.cal.fit(jobs))

    def snapshot(self, final: bool = False) -> list:
        """The tick's jobs (the pipeline's snapshot; ``final``: the end of the bag)."""
        return self.cal.snapshot(final=True) if final and self.takes_final else self.cal.snapshot()

    def committed(self, t_now: float, jobs: list, outcomes: list) -> None:
        """Commit the outcomes of the tick at ``t_now`` and record what changed."""
        cal = self.cal
        updated = cal.commit(outcomes)
        self.n_cycles += 1
        for stage in updated:
            res = cal.status[stage].result
            if res is None:
                continue
            self.segments[stage] = next((j.segment for j in jobs if j.stage == stage), None)
            stats = {**res.parameters, **{f"sigma_{k}": v for k, v in res.noise.items()}}
            self.rows.setdefault(stage, []).append((t_now, bool(res.converged), stats))
        if updated:
            self.outputs.append((t_now, 1, ("", "model_parameters", t_now,
                                            cal.model_statuses(f"/{CALIBRATOR_NODE}"))))
            if self.on_model is not None:   # what the node's vehcal/model_parameters 'model' status carries
                self.on_model({**{f"model.{k.lower()}": v for k, v in cal.model_parameters().items()},
                               "calibrated": ",".join(cal.calibrated())})

    def series(self) -> dict[str, CalibrationSeries]:
        out = {}
        for stage, st in self.cal.status.items():
            rows = self.rows.get(stage, [])
            names = sorted({k for _, _, s in rows for k in s}) if rows else []
            pars = {k: {f: np.asarray([_stat(s.get(k), f) for _, _, s in rows]) for f in _STAT_FIELDS}
                    for k in names}
            out[stage] = CalibrationSeries(
                stage=stage, t=np.asarray([r[0] for r in rows], dtype=float), parameters=pars,
                converged=np.asarray([r[1] for r in rows], dtype=bool), final=getattr(st, "result", None),
                segment=self.segments.get(stage), level=int(getattr(st, "level", 1)),
                message=str(getattr(st, "message", "")), n_fits=int(getattr(st, "n_fits", 0)),
                n_failed=int(getattr(st, "n_failed", 0)), n_confirmed=int(getattr(st, "n_confirmed", 0)),
                holdout=getattr(st, "result_holdout", None), last_holdout=getattr(st, "last_holdout", None),
                n_refused_holdout=int(getattr(st, "n_refused_holdout", 0)))
        return out


@dataclass
class Timer:
    """A node timer on the bag clock: ``fire(t)`` every ``period`` s, the first one period after the first stamp."""

    period: float
    fire: Callable[[float], None]
    next: float = math.inf


@dataclass
class StreamStats:
    """What streaming a bag saw: messages (total and per canonical topic) and the first/last header stamps."""

    n: int = 0
    per_topic: dict[str, int] = field(default_factory=dict)
    t_start: float = float("nan")
    t_end: float = float("nan")


def stream_bag(path: str | os.PathLike, tmap: Mapping[str, str], frames: bags.Frames, timers: list[Timer],
               feed: Callable[[str, Any], None], on_progress: Callable[[StreamStats, float], None] | None = None,
               progress_every: int = 5000, admit: Callable[[str, Any], bool] | None = None) -> StreamStats:
    """Feed a bag's records in header-stamp order; before each record, fire every timer due at or before its
    stamp (one tick each, in time order; ties in the order of ``timers``), as the nodes' timers would have.
    A timer that fell several periods behind fires once and is re-armed past the record (the node skips too).
    ``admit``: the input guards, in arrival order (:func:`vehcal_ros.io.bags.read_bag`)."""
    st = StreamStats()
    for topic, rec in bags.read_bag(path, tmap, frames=frames, admit=admit):
        t = float(rec.t)
        if st.n == 0:
            st.t_start = t
            for tm in timers:
                tm.next = t + tm.period
        while timers and t >= min(tm.next for tm in timers):
            tm = min(timers, key=lambda x: x.next)   # the first of equals: the list order
            tm.fire(tm.next)
            tm.next += tm.period * max(1, math.floor((t - tm.next) / tm.period) + 1)
        st.n += 1
        st.per_topic[topic] = st.per_topic.get(topic, 0) + 1
        st.t_end = t if not math.isfinite(st.t_end) else max(st.t_end, t)
        feed(topic, rec)
        if on_progress is not None and st.n % progress_every == 0:
            on_progress(st, t)
    return st


@dataclass(frozen=True)
class ReplayProgress:
    """Where a replay is: ``done_t`` = bag time up to which every estimator has committed its cycles;
    ``read_t`` = bag time read so far; ``t_first``/``t_last`` = the bag's span (metadata); ``elapsed`` = wall s."""

    done_t: float
    read_t: float
    t_first: float
    t_last: float
    elapsed: float
    n_messages: int
    total: int
    finished: bool = False
    detail: str = ""

    @property
    def fraction(self) -> float:
        span = self.t_last - self.t_first
        if self.finished:
            return 1.0
        return min(1.0, max(0.0, (self.done_t - self.t_first) / span)) if span > 0 else 0.0

    @property
    def speed(self) -> float:
        """Bag seconds replayed per wall second (x real time)."""
        return max(0.0, self.done_t - self.t_first) / self.elapsed if self.elapsed > 0 else 0.0

    @property
    def time_left(self) -> float:
        """Wall seconds left at the speed so far (inf before any progress)."""
        if self.finished:
            return 0.0
        v = self.speed
        return max(0.0, self.t_last - self.done_t) / v if v > 0 else math.inf


def _node_values(params: Mapping[str, Mapping] | str | os.PathLike | None, seed: int | None) -> dict[str, dict]:
    node_values = resolve_params(params)
    grip_values = dict(node_values.get(GRIP_NODE, {}))
    cal_values = dict(node_values.get(CALIBRATOR_NODE, {}))
    if seed is not None:
        if not 0 <= int(seed) < 2**31:
            raise InputError(f"seed {seed}: must be in [0, 2147483647]")
        grip_values["seed"] = int(seed)
        cal_values["seed"] = int(seed)
    node_values = {**node_values, GRIP_NODE: grip_values}
    if cal_values:
        node_values[CALIBRATOR_NODE] = cal_values
    return node_values


def _frames(grip_values: Mapping[str, Any]) -> bags.Frames:
    wheel_names = tuple(grip_values.get("wheel_names", bags.WHEELS))
    axes = tuple(int(a) for a in grip_values.get("controls_axes", (0, 1, 2)))
    if len(wheel_names) != 4 or len(axes) != 3:
        raise InputError(f"{GRIP_NODE}: wheel_names needs 4 names and controls_axes 3 indices")
    return bags.Frames(wheel_names=wheel_names, axes=axes)


def replay_bag(path: str | os.PathLike, params: Mapping[str, Mapping] | str | os.PathLike | None = None,
               topic_map: Mapping[str, str] | None = None, seed: int | None = None,
               progress: ProgressFn | None = None, *, calibration: bool = True, final_cycle: bool = True,
               progress_every: int = 5000, workers: int | None = None, executor: Any = "local",
               calibration_start: Callable[[Any], None] | None = None) -> ReplayResult:
    """Run the estimators over a bag; see the module docstring.

    params: ``{node: {param: value}}``, a params YAML path, or None (config/estimate.yaml).
    topic_map: remaps on top of the nodes' ``*_topic`` parameters, ``{FROM: TO}`` (see :func:`topic_map_from`).
    seed: overrides both nodes' ``seed`` parameter. calibration: False skips the model calibrator.
    final_cycle: at the end of the bag run one more cycle of each pipeline at the last stamp (the calibrator
    with ``snapshot(final=True)``: a maneuver reaching the end of the bag is taken as it is); False gives
    exactly the timer ticks of a live node.
    workers, executor: where the fits run (:mod:`vehcal_ros.io.replay_parallel`): ``workers`` processes of
    the ``executor`` backend (``"local"``, ``"threads"``, ``"dask://HOST:PORT"`` or an Executor); None = one
    per core; ``workers=1`` or ``executor="serial"`` runs everything in this thread (the reference). Either
    way the numbers are the same.
    progress: called with a :class:`ReplayProgress` every ``progress_every`` records and at the end.
    calibration_start: called with the calibration pipeline before the first record (e.g. a state file's
    carried-forward start, io/calibration_state.py); the replay then runs in this thread (serial schedule).
    InputError: a bag that is missing, truncated or corrupt, with no relevant topic, or with an unexpected
    message type on a relevant topic (raised while streaming, before anything is returned).
    """
    t_wall = time.perf_counter()
    node_values = _node_values(params, seed)
    grip_values, cal_values = node_values[GRIP_NODE], dict(node_values.get(CALIBRATOR_NODE, {}))
    tmap = topic_map_from({n: v for n, v in node_values.items() if n in (GRIP_NODE, CALIBRATOR_NODE)}, topic_map)
    frames = _frames(grip_values)
    grip = grip_pipeline_from(grip_values)
    recorder = GripRecorder(grip.collector.scopes(), frames.wheel_names)
    cal, cal_note = None, ""
    if calibration:
        cal = calibration_pipeline_from(cal_values)
        if cal is not None and calibration_start is not None:
            calibration_start(cal)
        if cal is None:
            cal_note = f"{CALIBRATION_MODULE} is not available: calibration skipped"
    else:
        cal_note = "calibration disabled"
    wanted = {tmap.get(c, c) for c in bags.TOPIC_TYPES if c != "/clock"}
    total = sum(n for topic, (_, n) in bags.bag_topics(path).items() if topic in wanted)
    span = bags.bag_span(path)
    job = ReplayJob(path=os.fspath(path), tmap=tmap, frames=frames, grip_values=grip_values,
                    cal_values=cal_values if cal is not None else None, grip_period=float(grip_values.get(
                        "fit_period", 5.0)), cal_period=_calibration_period(cal_values), final_cycle=final_cycle,
                    progress_every=progress_every)
    report = _progress_reporter(progress, span, total, t_wall)
    # with estimated tire forces the grip data depend on the calibrated model (i11c): no independent streams
    coupled = cal is not None and grip_values.get("force_source", "measured") != "measured"
    if _is_serial(workers, executor) or coupled or calibration_start is not None:
        stats, cal_rec, fed = _replay_serial(job, grip, recorder, cal, report)
    else:
        from vehcal_ros.io.replay_parallel import replay_parallel

        stats, cal_rec, fed = replay_parallel(job, grip, recorder, workers, executor, report)
    if progress is not None:
        progress(ReplayProgress(stats.t_end, stats.t_end, *span, time.perf_counter() - t_wall, stats.n,
                                max(total, stats.n), finished=True))
    return _result(job, node_values, seed, grip, fed, recorder, cal_rec, stats, cal_note,
                   time.perf_counter() - t_wall)


@dataclass(frozen=True)
class ReplayJob:
    """Everything a replay stream needs (picklable: a parallel replay sends it to a worker)."""

    path: str
    tmap: dict[str, str]
    frames: bags.Frames
    grip_values: dict[str, Any]
    cal_values: dict[str, Any] | None
    grip_period: float
    cal_period: float
    final_cycle: bool = True
    progress_every: int = 5000


def _is_serial(workers: int | None, executor: Any) -> bool:
    if workers is not None and (not isinstance(workers, int) or isinstance(workers, bool) or workers < 1):
        raise InputError(f"workers must be a positive integer, got {workers!r}")
    return executor is None or executor == "serial" or workers == 1


def _progress_reporter(progress: ProgressFn | None, span: tuple[float, float], total: int, t_wall: float
                       ) -> Callable[..., None] | None:
    """``report(done_t, read_t, n, detail)`` -> ``progress(ReplayProgress)`` (None without a progress callback)."""
    if progress is None:
        return None

    def report(done_t: float, read_t: float, n: int, detail: str = "") -> None:
        progress(ReplayProgress(done_t, read_t, *span, time.perf_counter() - t_wall, n, total, detail=detail))
    return report


def _replay_serial(job: ReplayJob, grip: GripPipeline, recorder: GripRecorder, cal: Any,
                   report: Callable[..., None] | None) -> tuple[StreamStats, CalibrationRecorder | None, Any]:
    """Every cycle synchronously in this thread, at its tick (the reference schedule)."""
    # the grip estimator listens to the calibrated model when it estimates tire forces (use_model_parameters)
    cal_rec = CalibrationRecorder(cal, getattr(grip, "use_model_parameters", None)) if cal is not None else None
    last_truth = [-math.inf]
    guards = replay_guards(job.grip_values, job.cal_values if cal is not None else None,  # what the live
                           grip.collector.reject, cal.reject if cal is not None else None)  # nodes let in

    def grip_cycle(t_now: float) -> None:
        recorder.take_samples(grip)
        snaps = grip.snapshot()
        if not snaps:  # the node's timer submits no work then (and the pipeline's cycle count stays)
            return
        truths = recorder.truths()
        updated = grip.commit(grip.fit(snaps))
        recorder.committed(grip, t_now, updated, {d.scope: d for d in snaps}, truths)

    def feed(topic: str, rec: Any) -> None:
        if isinstance(rec, GroundTruth):
            last_truth[0] = recorder.add_truth(rec, last_truth[0])
            return
        if isinstance(rec, GnssFix):
            recorder.add_fix(rec)
        if guards.lets_in(0, topic, rec):
            grip.add(rec)
            if isinstance(rec, OdomSample):
                recorder.add_speed(rec)
        if cal is not None and guards.lets_in(1, topic, rec):
            cal.add(rec)
        guards.fed(rec)

    timers = [Timer(job.grip_period, grip_cycle)]
    if cal_rec is not None:
        timers.append(Timer(job.cal_period, cal_rec.cycle))
    on_progress = None if report is None else (lambda st, t: report(t, t, st.n))
    stats = stream_bag(job.path, job.tmap, job.frames, timers, feed, on_progress, job.progress_every,
                       admit=guards.admit)
    if job.final_cycle and stats.n:  # the bag ended: one last cycle each on the data since the last tick
        grip_cycle(stats.t_end)
        if cal_rec is not None:
            cal_rec.cycle(stats.t_end, final=True)
    return stats, cal_rec, grip.collector.counters


def _result(job: ReplayJob, node_values: dict, seed: int | None, grip: GripPipeline, grip_counters: Any,
            recorder: GripRecorder, cal_rec: CalibrationRecorder | None, stats: StreamStats, cal_note: str,
            elapsed: float) -> ReplayResult:
    scopes = tuple(recorder.tracks)
    prob = float(grip.fit_config.interval_prob)
    in_force = recorder.in_force(grip.hazard, prob, grip.contradiction)
    counter_doc: dict[str, Any] = {
        "messages_per_topic": stats.per_topic,
        "grip_cycles": recorder.n_cycles, "calibration_cycles": cal_rec.n_cycles if cal_rec is not None else 0,
        "grip_samples_accepted": int(grip_counters.accepted),
        "grip_samples_dropped": {k: int(v) for k, v in grip_counters.dropped.items()},
        "grip_fits": {s: grip.status[s].n_fits for s in scopes},
        "grip_failed": {s: grip.status[s].n_failed for s in scopes},
        "grip_not_converged": {s: grip.status[s].n_not_converged for s in scopes},
        "grip_surface_changes": {s: list(grip.status[s].surface_change_times) for s in scopes},
        "grip_skipped_unexcited": {s: grip.status[s].n_skipped_unexcited for s in scopes},
        "grip_doubtful_assumptions": list(recorder.doubts),
    }
    cal_series: dict[str, CalibrationSeries] = {}
    model_params: dict[str, float] = {}
    outputs = list(recorder.outputs)
    if cal_rec is not None:
        cal_series = cal_rec.series()
        model_params = {k: float(v) for k, v in cal_rec.cal.model_parameters().items()}
        counter_doc["calibration_fits"] = {s: c.n_fits for s, c in cal_series.items()}
        counter_doc["calibration_failed"] = {s: c.n_failed for s, c in cal_series.items()}
        counter_doc["calibration_confirmed"] = {s: c.n_confirmed for s, c in cal_series.items()}
        cal_counters = cal_rec.cal.counters
        counter_doc["calibration_samples_dropped"] = {k: int(v) for k, v in cal_counters.dropped.items()}
        counter_doc["calibration_rolling_radius"] = cal_rec.cal.rolling_radius_report()
        outputs += cal_rec.outputs
    outputs.sort(key=lambda o: (o[0], o[1]))   # stable: cycle time, then grip before calibration (the timers' order)
    prefix = absolute_topic(str(job.grip_values.get("output_prefix", "vehcal"))).rstrip("/")
    return ReplayResult(
        bag=job.path, seed=seed, params=node_values, topic_map=job.tmap,
        grip={s: recorder.tracks[s].series(grip.status[s], prob, in_force[s]) for s in scopes},
        calibration=cal_series,
        model_parameters=model_params, counters=counter_doc, n_messages=stats.n, t_start=stats.t_start,
        t_end=stats.t_end, elapsed_s=elapsed, calibration_note=cal_note,
        outputs=tuple((prefix, *o[2]) for o in outputs),
        grip_by_place=tuple(grip_by_place(recorder.position.track, recorder.place_truths, in_force)),
        calibration_pipeline=cal_rec.cal if cal_rec is not None else None)


def _stat(s: Mapping | None, f: str) -> float:
    if not s:
        return float("nan")
    v = s.get(f)
    return float("nan") if v is None else float(v)


# --------------------------------------------------------------------------------------------------- record
def output_messages(result: ReplayResult) -> list[tuple[str, str, Any, int]]:
    """The publications of a replay as ``(topic, msgtype, rosbags_msg, stamp_ns)`` in publication order."""
    T = bags.rosbags_types()
    msgs: list[tuple[str, str, Any, int]] = []
    for prefix, key, kind, t, payload in result.outputs:
        ns = bags.sec_to_ns(t)
        if kind == "grip":
            mean, lower, upper, rows = payload
            msgs.append((f"{prefix}/grip/{key}", "geometry_msgs/msg/Vector3Stamped",
                         bags.vector3_stamped(T, t, key, mean, lower, upper), ns))
            msgs.append((f"{prefix}/grip_curve/{key}", "std_msgs/msg/Float64MultiArray",
                         bags.float64_multiarray(T, rows, ("slip,q05,q50,q95", "slip_grid")), ns))
        else:
            msgs.append((MODEL_PARAMETERS_TOPIC, "diagnostic_msgs/msg/DiagnosticArray",
                         bags.diagnostic_array(T, t, payload), ns))
    return msgs


def record_outputs(result: ReplayResult, out_path: str | os.PathLike, storage: str = "mcap") -> dict[str, int]:
    """Write the estimator outputs of ``result`` to a new bag at ``out_path`` (written beside it under a temporary
    name and renamed at the end; an existing ``out_path`` is refused). Returns messages per topic."""
    import shutil
    import tempfile

    out = Path(out_path)
    if storage not in bags.STORAGES:
        raise InputError(f"storage {storage!r} is not one of {', '.join(bags.STORAGES)}")
    if out.exists():
        raise InputError(f"{out}: already exists; refusing to overwrite")
    parent = out.parent if str(out.parent) else Path(".")
    if not parent.is_dir():
        raise InputError(f"{out}: the parent directory {parent} does not exist")
    tmp_root = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".partial", dir=parent))
    try:
        tmp = tmp_root / out.name
        counts = bags.write_topic_messages(tmp, output_messages(result), storage=storage)
        if out.exists():
            raise InputError(f"{out}: appeared while writing; refusing to overwrite")
        os.replace(tmp, out)
        return counts
    finally:
        shutil.rmtree(tmp_root, ignore_errors=True)


__all__ = ["ReplayResult", "GripSeries", "CalibrationSeries", "replay_bag", "record_outputs", "output_messages",
           "resolve_params", "grip_pipeline_from", "calibration_pipeline_from", "topic_map_from",
           "default_params_file", "GRIP_NODE", "CALIBRATOR_NODE"]
