"""What a replay found: the grip estimates and the calibrated model over bag time (:class:`ReplayResult`, JSON
with the field names of docs/cli.md), recorded as the nodes would have published them.

Memory is bounded by one entry per published estimate (and a 10 Hz decimated ground-truth trace).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vehcal_ros.estimation.grip.belief import belief_timeline
from vehcal_ros.estimation.grip.fit import GripEstimate
from vehcal_ros.estimation.grip.friction_samples import ScopeData
from vehcal_ros.estimation.grip.pipeline import GripPipeline
from vehcal_ros.estimation.sensing.position import PositionTracker, grip_by_place
from vehcal_ros.json_values import finite_or_none as _f
from vehcal_ros.json_values import jsonable
from vehcal_ros.records import GnssFix, GroundTruth, OdomSample
from vehcal_ros.replay.params import CALIBRATOR_NODE, output_prefix
from vehcal_ros.replay.stream import ReplayJob, StreamStats

TRUTH_PERIOD = 0.1
"""s of bag time between kept ground-truth samples (the truth trace of the mu_max plot)."""


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
    """The belief in force every ``TRUTH_PERIOD`` s (estimation/grip/belief.py ``belief_timeline``): arrays ``t``,
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
    ``estimation.sensing.position.PLACE_FIELDS`` (empty when the bag has no ``/vehicle/gnss/fix``)."""
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


def replay_result(job: ReplayJob, node_values: dict, seed: int | None, grip: GripPipeline, grip_counters: Any,
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
    prefix = output_prefix(job.grip_values)
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
