"""Bag replay: the live estimators over a rosbag2 file, on the bag's clock, as fast as the CPU allows.

:func:`replay_bag` streams a bag (mcap or sqlite3, :func:`vehcal_ros.io.bags.read_bag`, header-stamp order) into
the *same* estimation objects the nodes run — :class:`~vehcal_ros.estimation.grip.pipeline.GripPipeline`
(``grip_estimator``) and :class:`~vehcal_ros.estimation.calibration.pipeline.CalibrationPipeline`
(``model_calibrator``) — built from the same ROS parameters (:mod:`vehcal_ros.replay.params`). Each node's timer
becomes a tick on the bag's clock: every ``fit_period`` (grip) or ``calibration_period`` (calibrator) s of
bag time (first tick one period after the first stamp) a cycle runs (snapshot + fit + commit) before the next
record is fed; a tick with nothing to fit does no work, as in the nodes. At the end of the bag one more cycle runs
(``final_cycle``). Seeds follow the pipelines' rule (``seed + 1000 * cycle + k``), so the same bag and seed give
the same numbers in either storage, on this serial schedule or the parallel one (:mod:`vehcal_ros.replay.parallel`),
and the numbers of a live run whose timers fired at the same bag times (docs/replay.md).

The bag is never loaded whole. Nothing here imports rclpy.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Mapping
from typing import Any

from vehcal_ros.errors import InputError
from vehcal_ros.estimation.grip.pipeline import GripPipeline
from vehcal_ros.io import bags
from vehcal_ros.records import GnssFix, GroundTruth, OdomSample
from vehcal_ros.replay.guards import replay_guards
from vehcal_ros.replay.parallel import replay_parallel
from vehcal_ros.replay.params import (
    CALIBRATOR_NODE,
    GRIP_NODE,
    calibration_period,
    calibration_pipeline_from,
    frames_from,
    grip_pipeline_from,
    node_values,
    topic_map_from,
)
from vehcal_ros.replay.results import CalibrationRecorder, GripRecorder, ReplayResult, replay_result
from vehcal_ros.replay.stream import (
    ProgressFn,
    ReplayJob,
    ReplayProgress,
    StreamStats,
    Timer,
    progress_reporter,
    stream_bag,
)


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
    workers, executor: where the fits run (:mod:`vehcal_ros.replay.parallel`): ``workers`` processes of
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
    values = node_values(params, seed)
    grip_values, cal_values = values[GRIP_NODE], dict(values.get(CALIBRATOR_NODE, {}))
    tmap = topic_map_from({n: v for n, v in values.items() if n in (GRIP_NODE, CALIBRATOR_NODE)}, topic_map)
    frames = frames_from(grip_values)
    grip = grip_pipeline_from(grip_values)
    recorder = GripRecorder(grip.collector.scopes(), frames.wheel_names)
    cal, cal_note = None, ""
    if calibration:
        cal = calibration_pipeline_from(cal_values)
        if calibration_start is not None:
            calibration_start(cal)
    else:
        cal_note = "calibration disabled"
    wanted = {tmap.get(c, c) for c in bags.TOPIC_TYPES if c != "/clock"}
    total = sum(n for topic, (_, n) in bags.bag_topics(path).items() if topic in wanted)
    span = bags.bag_span(path)
    job = ReplayJob(path=os.fspath(path), tmap=tmap, frames=frames, grip_values=grip_values,
                    cal_values=cal_values if cal is not None else None, grip_period=float(grip_values.get(
                        "fit_period", 5.0)), cal_period=calibration_period(cal_values), final_cycle=final_cycle,
                    progress_every=progress_every)
    report = progress_reporter(progress, span, total, t_wall)
    # with estimated tire forces the grip data depend on the calibrated model: no independent streams
    coupled = cal is not None and grip_values.get("force_source", "measured") != "measured"
    if _is_serial(workers, executor) or coupled or calibration_start is not None:
        stats, cal_rec, fed = _replay_serial(job, grip, recorder, cal, report)
    else:
        stats, cal_rec, fed = replay_parallel(job, grip, recorder, workers, executor, report)
    if progress is not None:
        progress(ReplayProgress(stats.t_end, stats.t_end, *span, time.perf_counter() - t_wall, stats.n,
                                max(total, stats.n), finished=True))
    return replay_result(job, values, seed, grip, fed, recorder, cal_rec, stats, cal_note,
                         time.perf_counter() - t_wall)


def _is_serial(workers: int | None, executor: Any) -> bool:
    if workers is not None and (not isinstance(workers, int) or isinstance(workers, bool) or workers < 1):
        raise InputError(f"workers must be a positive integer, got {workers!r}")
    return executor is None or executor == "serial" or workers == 1


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
