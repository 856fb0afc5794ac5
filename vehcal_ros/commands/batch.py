"""``vehcal batch INPUTS... --out DIR``: calibrate many inputs (vehicles or days) as independent tasks;
``vehcal batch --fleet FLEET.yaml --out DIR`` (or bags as INPUTS): replay a fleet's bags, each vehicle's in a chain.

Each input is one task on the chosen backend (:func:`vehcal_ros.inference.executors.make_executor`). Results are
written as each task completes (``DIR/<input stem>.json``, and ``DIR/summary.json`` rewritten after every
completion), so nothing computed is lost if the batch is interrupted; ``--resume`` skips inputs whose result
file already exists. A progress bar goes to stderr, a summary table to stdout.

Faults: a task that raises (bad file, no convergence) is recorded as failed with its input name and the others
go on. A worker process that dies breaks a process pool: the pool is rebuilt and the tasks that were in flight
are resubmitted once, each ALONE (one task in flight), so the input that kills its worker is identified
exactly and reported ("worker died") while the innocent ones finish. On Dask the scheduler itself reschedules
the task of a dead worker (``distributed.scheduler.allowed-failures``, default 3) and then reports
``KilledWorker``; that input is reported the same way.

Task body (:func:`calibrate_input`, chosen by ``--stage``; ``auto`` looks at the CSV header):

* ``grip``: CSV with columns slip,mu -> :class:`vehcal_ros.estimation.grip.fit.GripEstimator` (auto: header
  has slip and mu);
* ``longitudinal`` / ``lateral`` / ``rolling_resistance`` / ``all``: calibration CSV ->
  :mod:`vehcal_ros.estimation.calibration.fit` (auto: all calibration columns present -> ``all``);
* ``brake``: brake CSV (time, throttle, brake, steering, u, w_lf, w_lr, w_rf, w_rr [, maneuver]) ->
  :func:`vehcal_ros.estimation.calibration.brake_fit.fit_brake` (auto: the brake columns without the lateral ones).

Fleet (bags; docs/fleet.md): ``--fleet FILE`` (io/fleet.py: vehicle_id -> vehicle description, bag globs, optional
params and starting state file) or bags given directly (grouped by their metadata ``vehicle_id``, else
``--vehicle-id``, else the ``--vehicle`` name). Every bag is one task, :func:`vehcal_ros.replay.fleet.replay_drive`: the
replay of ``vehcal replay`` with the model calibrator started from the vehicle's state (each accepted stage carried
forward: estimation/calibration/carry_forward.py). A vehicle's bags run in time order (bag start stamp), one after
another (a chain: its next bag is submitted when the previous one is done, with the state that one returned); different
vehicles run side by side. Results: ``DIR/<vehicle_id>/<bag stem>.json`` (the replay JSON with a ``fleet``
section), ``DIR/<vehicle_id>/state.json`` (the state file, version 2, written atomically after each done bag),
``DIR/<vehicle_id>/parameters.png`` and ``DIR/summary.json`` with the fleet summary (io/fleet_summary.py:
parameters over drives, 90 % intervals, drift flags), rewritten as tasks complete. At the end, the grip by place of
every done drive (the replay JSON's ``grip_by_place`` rows): ``DIR/fleet_grip_map.geojson``, ``.csv``, ``.png``
(io/grip_map.py) and ``DIR/<vehicle_id>/grip_by_place.png``, listed under ``grip_map`` in summary.json. The
faults above apply per bag; a bag whose metadata cannot be read is reported failed before any task runs, and its
chain goes on from the unchanged state. ``--resume`` skips bags whose drive is in the vehicle's state history and
whose result file exists.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, BrokenExecutor, Future, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from vehcal_ros.errors import InputError

STAGES = ("auto", "grip", "brake", "longitudinal", "lateral", "rolling_resistance", "all")
BAG_SUFFIXES = (".mcap", ".db3")


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("batch", help="calibrate many inputs as independent tasks (local or Dask)",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("inputs", nargs="*", metavar="INPUT", help="calibration/grip/brake CSV files, or bags (a fleet)")
    p.add_argument("--fleet", metavar="FILE", default=None,
                   help="fleet file (YAML: vehicle_id -> vehicle description, bag globs, optional params; "
                        "docs/fleet.md): every bag replayed, each vehicle's bags chained through its state file")
    p.add_argument("--vehicle-id", default=None, metavar="ID",
                   help="vehicle_id of bags given directly whose metadata names none (default: the --vehicle name)")
    p.add_argument("--params", default=None, metavar="FILE",
                   help="ROS params YAML of bags given directly (default: the package's config/estimate.yaml)")
    p.add_argument("--out", required=True, metavar="DIR", help="directory for <input>.json and summary.json")
    p.add_argument("--executor", default="local", metavar="SPEC",
                   help="serial | threads | local | dask://HOST:PORT (default local)")
    p.add_argument("--workers", type=int, default=None, metavar="N", help="workers for threads/local (default: CPUs)")
    p.add_argument("--stage", default="auto", choices=STAGES, help="what to fit (default auto, from the CSV header)")
    p.add_argument("--seed", type=int, default=0, help="random seed of every task (default 0)")
    p.add_argument("--chains", type=int, default=None, help="grip chains / calibration SMC runs (default: theirs)")
    p.add_argument("--draws", type=int, default=None, help="calibration particles per run (default: theirs)")
    p.add_argument("--resume", action="store_true",
                   help="skip inputs whose DIR/<input>.json already exists (bags: whose drive is in the vehicle's "
                        "DIR/<vehicle_id>/state.json history and has its result file; the chain goes on from it)")
    from vehcal_ros.commands.vehicle_option import add_vehicle_argument
    add_vehicle_argument(p)
    p.set_defaults(func=run)


# ------------------------------------------------------------------------------------------------ task body
def _csv_header(path: str) -> list[str]:
    try:
        with open(path, encoding="utf-8-sig") as f:
            line = f.readline()
    except UnicodeDecodeError:
        raise InputError(f"{path}: not a text CSV file") from None
    if not line.strip():
        raise InputError(f"{path}: empty file")
    return [h.strip().lower() for h in line.split(",")]


def detect_stage(path: str) -> str:
    """The task ``auto`` picks for ``path`` (module doc)."""
    from vehcal_ros.estimation.calibration import brake_fit
    from vehcal_ros.estimation.calibration import fit as calibration

    header = set(_csv_header(path))
    if {"slip", "mu"} <= header:
        return "grip"
    if set(calibration.CSV_COLUMNS) <= header:
        return "all"
    if set(brake_fit.CSV_COLUMNS) <= header:
        return "brake"
    raise InputError(f"{path}: header fits no task (need slip,mu; the calibration columns "
                     f"{','.join(calibration.CSV_COLUMNS)}; or the brake columns {','.join(brake_fit.CSV_COLUMNS)})")


def calibrate_input(path: str, stage: str = "auto", seed: int = 0, chains: int | None = None,
                    draws: int | None = None, vehicle: str | None = None) -> dict[str, Any]:
    """Calibrate one input; returns a JSON-ready dict. Module level so process and Dask workers can import it.
    ``vehicle``: vehicle description name or file (8-DOF constants, maps, priors; None = hmmwv)."""
    import numpy as np

    t0 = time.perf_counter()
    p = Path(path)
    if p.is_dir() or p.suffix.lower() in BAG_SUFFIXES:
        raise InputError(f"{path}: a bag is replayed by 'vehcal batch --fleet' (or bags as inputs), not by "
                         "calibrate_input")
    if not p.exists():
        raise InputError(f"no such file: {path}")
    task = detect_stage(path) if stage == "auto" else stage
    if task == "grip":
        from vehcal_ros.commands.grip import read_slip_mu
        from vehcal_ros.estimation.grip.fit import GripConfig, GripEstimator

        slip, mu = read_slip_mu(path)
        kw = {"seed": seed}
        if chains:
            kw["n_chains"] = chains
        result = GripEstimator(GripConfig(**kw)).fit(np.asarray(slip), np.asarray(mu)).to_dict()
    elif task == "brake":
        from vehcal_ros.estimation.calibration.brake_fit import fit_brake, load_brake_csv
        from vehcal_ros.models.vehicle_8dof import VehicleConstants

        constants = VehicleConstants.from_description(vehicle) if vehicle else None
        result = fit_brake(load_brake_csv(path), constants=constants).to_dict()
    else:
        from vehcal_ros.estimation.calibration import fit as calibration

        seg = calibration.Segment.from_csv(path)
        kw = {"seed": seed, "vehicle": vehicle}
        if chains:
            kw["n_chains"] = chains
        if draws:
            kw["n_draws"] = draws
        if task == "all":  # every stage the segment excites, in chain order, each on the earlier stages' means
            from vehcal_ros.errors import EstimationError
            from vehcal_ros.estimation.calibration.stage_order import CHAIN_ORDER

            result, skipped, known = {}, {}, {}
            for name in CHAIN_ORDER:
                try:
                    calibration.check_segment(seg, calibration.stage_spec(name, vehicle=vehicle), vehicle=vehicle)
                except (EstimationError, InputError) as exc:
                    skipped[name] = str(exc)
                    continue
                r = calibration.calibrate_stage(seg, name, previous=known, check=False, **kw)
                known.update(r.posterior_means())
                result[name] = r.to_dict()
            if not result:
                raise EstimationError(f"{path}: no calibration stage is excited: " + "; ".join(skipped.values()))
            result["skipped_stages"] = skipped
        else:
            result = calibration.calibrate_stage(seg, task, **kw).to_dict()
    return {"input": str(path), "task": task, "result": result, "task_elapsed_s": time.perf_counter() - t0,
            "worker_pid": os.getpid()}


# ------------------------------------------------------------------------------------------------ runner
@dataclass
class InputOutcome:
    """What became of one input."""

    input: str
    status: str = "pending"
    """"ok", "failed" or "skipped" (``--resume``)."""
    result_file: str | None = None
    error: str | None = None
    attempts: int = 0
    """Submissions of this input (2 when it was resubmitted after a worker death)."""
    elapsed_s: float | None = None
    task: str | None = None
    vehicle_id: str | None = None
    """the vehicle of a fleet's bag (None for a CSV input)."""
    drive: str | None = None
    """the drive's name (its result file's stem under DIR/<vehicle_id>/), None for a CSV input."""

    def to_dict(self) -> dict[str, Any]:
        out = {"input": self.input, "status": self.status, "task": self.task, "result_file": self.result_file,
               "error": self.error, "attempts": self.attempts, "elapsed_s": self.elapsed_s}
        if self.vehicle_id is not None:
            out.update(vehicle_id=self.vehicle_id, drive=self.drive)
        return out


@dataclass
class BatchSummary:
    """Outcome of :func:`run_batch` (also written as DIR/summary.json)."""

    outcomes: list[InputOutcome]
    executor: str
    workers: int
    elapsed_s: float = 0.0
    executor_rebuilds: int = 0
    finished: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def n_ok(self) -> int:
        return sum(o.status in ("ok", "skipped") for o in self.outcomes)

    @property
    def failed(self) -> list[InputOutcome]:
        return [o for o in self.outcomes if o.status == "failed"]

    def to_dict(self) -> dict[str, Any]:
        return {"executor": self.executor, "workers": self.workers, "elapsed_s": self.elapsed_s,
                "finished": self.finished, "n_inputs": len(self.outcomes), "n_ok": self.n_ok,
                "n_failed": len(self.failed), "executor_rebuilds": self.executor_rebuilds,
                "inputs_per_minute": (60.0 * len(self.outcomes) / self.elapsed_s) if self.elapsed_s > 0 else None,
                "inputs": [o.to_dict() for o in self.outcomes], **self.extra}


class ProgressBar:
    """``[#####.....] 5/10 ok 4 failed 1 12.3 s`` on a stream; redrawn in place on a TTY, one line otherwise."""

    def __init__(self, total: int, stream: TextIO | None = None, width: int = 30) -> None:
        self.total, self.width = total, width
        self.stream = stream if stream is not None else sys.stderr
        self.t0 = time.perf_counter()
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())

    def update(self, done: int, failed: int, last: str = "") -> None:
        frac = done / self.total if self.total else 1.0
        fill = int(round(self.width * frac))
        line = (f"[{'#' * fill}{'.' * (self.width - fill)}] {done}/{self.total} done, {done - failed} ok, "
                f"{failed} failed, {time.perf_counter() - self.t0:.1f} s  {last}")
        self.stream.write(("\r" + line + "\033[K") if self.tty else line + "\n")
        if self.tty and done == self.total:
            self.stream.write("\n")
        self.stream.flush()


def _result_names(inputs: Sequence[str]) -> list[str]:
    """Unique result-file stems: the input's stem, with its index appended when stems collide."""
    stems = [Path(p).stem or "input" for p in inputs]
    return [f"{s}_{i}" if stems.count(s) > 1 else s for i, s in enumerate(stems)]


def _write_json(path: Path, obj: Any) -> None:
    from vehcal_ros.atomic_files import write_atomic

    write_atomic(path, json.dumps(obj, indent=2, default=_json_default) + "\n")   # a reader never sees half a file


def _json_default(obj: Any) -> Any:
    import numpy as np

    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, np.generic):
        return obj.item()
    return str(obj)


class _Queue:
    """Task indices submitted in order, as many as the executor takes (the CSV batch)."""

    def __init__(self, indices: Sequence[int]) -> None:
        self.q: deque[int] = deque(indices)

    def __bool__(self) -> bool:
        return bool(self.q)

    def take(self, n: int) -> list[int]:
        return [self.q.popleft() for _ in range(min(n, len(self.q)))]

    def put_back(self, i: int) -> None:
        self.q.appendleft(i)

    def done(self, i: int, elapsed_s: float | None = None) -> None:
        pass


class _Chains:
    """Task indices in chains (one per vehicle): a chain's next task is ready once its previous one is done
    (finished ok or failed); different chains run side by side. Of the ready chains, the one with the most work
    left goes first: the longest chain is the critical path, and a worker that frees up takes from it (list
    scheduling by remaining work). A chain's work left is the summed ``cost`` of its tasks not yet taken (task
    index -> cost estimate, e.g. s of bag; 1 each when absent) times its rate, in-task seconds per unit of cost:
    measured on the chain's own finished tasks after its first once it has such, else on all its finished tasks,
    else on every chain's, else 1. A vehicle whose bags take longer to replay per second of bag (more windows to
    fit, a slower model) is thus started earlier than one with as many seconds of bag that replay faster. A
    chain's first task is not typical of the rest: it fits every stage from the description's priors where the
    later ones start from the carried state, and it may be its worker's first (imports, numba cache loads)."""

    def __init__(self, chains: Mapping[str, Sequence[int]], cost: Mapping[int, float] | None = None) -> None:
        self.chains: dict[str, deque[int]] = {k: deque(v) for k, v in chains.items() if v}
        self.chain_of = {i: k for k, v in chains.items() for i in v}
        self.cost = dict(cost or {})
        self.busy: set[str] = set()
        self.finished: dict[str, list[tuple[float, float]]] = {}   # chain -> (in-task s, cost) per finished task

    def __bool__(self) -> bool:
        return any(self.chains.values())

    def rate(self, key: str) -> float:
        """In-task s per unit of cost of chain ``key`` (class docstring)."""
        own = self.finished.get(key, [])
        for tasks in (own[1:], own, [t for v in self.finished.values() for t in v]):
            if tasks:
                return sum(t for t, _ in tasks) / sum(c for _, c in tasks)
        return 1.0

    def remaining(self, key: str) -> float:
        """The estimated in-task s of a chain's tasks not yet taken."""
        return self.rate(key) * sum(self.cost.get(i, 1.0) for i in self.chains[key])

    def take(self, n: int) -> list[int]:
        ready = [k for k, q in self.chains.items() if q and k not in self.busy]
        ready.sort(key=self.remaining, reverse=True)    # stable: ties keep the fleet file's order
        out = []
        for key in ready[:max(n, 0)]:
            out.append(self.chains[key].popleft())
            self.busy.add(key)
        return out

    def put_back(self, i: int) -> None:
        key = self.chain_of[i]
        self.chains[key].appendleft(i)
        self.busy.discard(key)

    def done(self, i: int, elapsed_s: float | None = None) -> None:
        """Task ``i`` is over; ``elapsed_s``: its in-task s when it finished with a result (None: not measured)."""
        key = self.chain_of[i]
        self.busy.discard(key)
        if elapsed_s is not None and math.isfinite(elapsed_s) and elapsed_s > 0.0:
            self.finished.setdefault(key, []).append((float(elapsed_s), self.cost.get(i, 1.0)))


def _run_tasks(ex: Any, executor: str, workers: int | None, outcomes: list[InputOutcome],
               source: _Queue | _Chains, submit: Callable[[Any, int], Future], finish: Callable[..., None],
               summary: BatchSummary) -> None:
    """Submit the tasks ``source`` makes ready on ``ex`` (made by ``make_executor(executor, workers)``, rebuilt
    the same way after a worker death) until all are done (module doc, "Faults"); ``finish(i, status,
    error=..., value=...)`` records each outcome once, then ``source.done(i)``. Shuts the executor down."""
    from vehcal_ros.inference.executors import executor_workers, is_worker_lost, make_executor

    def done(i: int, status: str, **kw: Any) -> None:
        finish(i, status, **kw)
        source.done(i, outcomes[i].elapsed_s)

    suspects: deque[int] = deque()
    inflight: dict[Future, int] = {}
    try:
        while source or suspects or inflight:
            cap = executor_workers(ex)
            broken = False
            to_submit: list[int] = []
            if suspects:
                if not inflight:
                    to_submit.append(suspects.popleft())
            else:
                to_submit = source.take(max(0, cap - len(inflight)))
            for k, i in enumerate(to_submit):
                try:
                    fut = submit(ex, i)
                except BrokenExecutor:
                    for j in reversed(to_submit[k:]):
                        source.put_back(j)  # not run: no attempt used
                    broken = True
                    break
                outcomes[i].attempts += 1
                inflight[fut] = i
            lost: list[int] = []
            if inflight and not broken:
                finished, _ = wait(list(inflight), return_when=FIRST_COMPLETED)
                for fut in finished:
                    i = inflight.pop(fut)
                    exc = fut.exception()
                    if exc is None:
                        done(i, "ok", value=fut.result())
                    elif isinstance(exc, BrokenExecutor):
                        lost.append(i)
                        broken = True
                    elif is_worker_lost(exc):
                        done(i, "failed", error=f"worker died while processing this input ({type(exc).__name__})")
                    else:
                        done(i, "failed", error=f"{type(exc).__name__}: {exc}")
            if broken:
                # every other task of a broken pool is lost too; collect those that still finished fine
                if inflight:
                    wait(list(inflight))
                for fut, i in list(inflight.items()):
                    exc = fut.exception()
                    if exc is None:
                        done(i, "ok", value=fut.result())
                    else:
                        lost.append(i)
                inflight.clear()
                for i in lost:
                    if outcomes[i].attempts >= 2:
                        done(i, "failed", error=f"worker died while processing this input "
                                                f"(attempts: {outcomes[i].attempts})")
                    else:
                        suspects.append(i)
                ex.shutdown(wait=True)
                ex = make_executor(executor, workers)
                summary.executor_rebuilds += 1
        summary.finished = True
    finally:
        for fut in inflight:
            fut.cancel()
        ex.shutdown(wait=True)


def run_batch(inputs: Sequence[str], out_dir: str | os.PathLike, *, executor: str = "local",
              workers: int | None = None, stage: str = "auto", seed: int = 0, chains: int | None = None,
              draws: int | None = None, resume: bool = False, task: Callable[..., dict] = calibrate_input,
              progress: TextIO | None | bool = True) -> BatchSummary:
    """Run ``task(path, stage, seed, chains, draws)`` for every input on the ``executor`` backend (module doc).

    ``task`` must be picklable (module level). Returns the :class:`BatchSummary`; never raises for a failing
    input. ``progress``: True for stderr, a stream, or False for none.
    """
    from vehcal_ros.inference.executors import executor_workers, make_executor

    t0 = time.perf_counter()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    names = _result_names(inputs)
    outcomes = [InputOutcome(input=str(p)) for p in inputs]
    ex = make_executor(executor, workers)
    summary = BatchSummary(outcomes=outcomes, executor=executor, workers=executor_workers(ex))
    bar = ProgressBar(len(inputs), None if progress is True else progress) if progress else None
    n_done = n_failed = 0

    def finish(i: int, status: str, *, error: str | None = None, value: dict | None = None) -> None:
        nonlocal n_done, n_failed
        o = outcomes[i]
        o.status = status
        o.error = error
        if value is not None:
            f = out / f"{names[i]}.json"
            _write_json(f, value)
            o.result_file = str(f)
            o.task = value.get("task")
            o.elapsed_s = value.get("task_elapsed_s")
        n_done += 1
        n_failed += status == "failed"
        summary.elapsed_s = time.perf_counter() - t0
        _write_json(out / "summary.json", summary.to_dict())
        if bar:
            bar.update(n_done, n_failed, f"{Path(o.input).name}: {status}")

    pending: list[int] = []
    for i, name in enumerate(names):
        if resume and (out / f"{name}.json").exists():
            outcomes[i].status = "skipped"
            outcomes[i].result_file = str(out / f"{name}.json")
            n_done += 1
        else:
            pending.append(i)
    try:
        _run_tasks(ex, executor, workers, outcomes, _Queue(pending),
                   lambda ex, i: ex.submit(task, outcomes[i].input, stage, seed, chains, draws), finish, summary)
    finally:
        summary.elapsed_s = time.perf_counter() - t0
        _write_json(out / "summary.json", summary.to_dict())
    return summary


# ------------------------------------------------------------------------------------------------ fleet
@dataclass
class Drive:
    """One bag of a fleet: its vehicle, result name (unique per vehicle) and start stamp."""

    vehicle_id: str
    bag: str
    name: str
    start: float = float("nan")
    duration: float = 0.0    #: s of bag time (the task's cost estimate: a chain's remaining work)


def plan_drives(fleet: Any) -> tuple[list[Drive], dict[int, str]]:
    """Every bag of the fleet as a :class:`Drive`, each vehicle's in time order (bag start stamp, then name), and
    the errors of bags whose start cannot be read (index -> one line), reported as failed inputs."""
    from vehcal_ros.io.fleet import bag_times, drive_name

    drives: list[Drive] = []
    errors: dict[int, str] = {}
    for v in fleet.vehicles:
        mine = []
        stems = [drive_name(b) for b in v.bags]
        for k, bag in enumerate(v.bags):
            name = f"{stems[k]}_{k}" if stems.count(stems[k]) > 1 else stems[k]
            d = Drive(v.vehicle_id, bag, name)
            try:
                d.start, d.duration = bag_times(bag)
            except InputError as exc:
                errors[id(d)] = str(exc)
            mine.append(d)
        mine.sort(key=lambda d: (math.isnan(d.start), d.start if not math.isnan(d.start) else 0.0, d.name))
        drives += mine
    return drives, {i: errors[id(d)] for i, d in enumerate(drives) if id(d) in errors}


def run_fleet(fleet: Any, params: Mapping[str, dict[str, dict[str, Any]]], out_dir: str | os.PathLike, *,
              executor: str = "local", workers: int | None = None, seed: int | None = None, resume: bool = False,
              task: Callable[..., dict] | None = None, progress: TextIO | None | bool = True,
              sections: Mapping[str, Callable[..., Any]] | None = None, plots: bool = True) -> BatchSummary:
    """Replay every bag of ``fleet`` (io/fleet.py ``Fleet``) as one task, each vehicle's bags as a chain through its
    state file (module doc, "Fleet"). ``params``: vehicle_id -> resolved params ``{node: {param: value}}`` (the
    vehicle description set). ``sections``: extra per-vehicle summary sections (io/fleet_summary.py). ``plots``:
    write the per-vehicle figures and the fleet grip map at the end (False: none of them). Never
    raises for a failing bag."""
    from vehcal_ros.inference.executors import executor_workers, make_executor
    from vehcal_ros.io import calibration_state as cs
    from vehcal_ros.io.fleet_summary import fleet_summary
    from vehcal_ros.replay.fleet import replay_drive

    task = task or replay_drive
    t0 = time.perf_counter()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    drives, plan_errors = plan_drives(fleet)
    vehicles = {v.vehicle_id: v for v in fleet.vehicles}
    outcomes = [InputOutcome(input=d.bag, vehicle_id=d.vehicle_id, drive=d.name) for d in drives]
    ex = make_executor(executor, workers)
    summary = BatchSummary(outcomes=outcomes, executor=executor, workers=executor_workers(ex))
    bar = ProgressBar(len(drives), None if progress is True else progress) if progress else None
    counts = {"done": 0, "failed": 0}
    states: dict[str, str | None] = {}
    histories: dict[str, list] = {}
    state_errors: dict[str, str] = {}
    drift = fleet.drift.to_dict()

    def state_path(vid: str) -> Path:
        return out / vid / "state.json"

    for vid, v in vehicles.items():
        (out / vid).mkdir(exist_ok=True)
        src = state_path(vid) if resume and state_path(vid).exists() else (Path(v.state) if v.state else None)
        text = None
        if src is not None and src.exists():
            text = src.read_text(encoding="utf-8")
            vehicle = params[vid].get("model_calibrator", {}).get("vehicle")
            try:
                histories[vid] = list(cs.parse_state(text, src, vid, vehicle).history)
            except cs.StateRefused as exc:
                state_errors[vid] = str(exc)
        states[vid] = text
        histories.setdefault(vid, [])

    def write_summary() -> None:
        summary.elapsed_s = time.perf_counter() - t0
        docs = None
        if sections:
            docs = {vid: [json.loads(Path(o.result_file).read_text(encoding="utf-8")) for o in outcomes
                          if o.vehicle_id == vid and o.result_file and Path(o.result_file).exists()]
                    for vid in vehicles}
        summary.extra["vehicles"] = fleet_summary(histories, fleet.drift, docs, sections)
        summary.extra["drift_model"] = drift
        _write_json(out / "summary.json", summary.to_dict())

    def finish(i: int, status: str, *, error: str | None = None, value: dict | None = None) -> None:
        o, d = outcomes[i], drives[i]
        o.status, o.error = status, error
        if value is not None:
            f = out / d.vehicle_id / f"{d.name}.json"
            _write_json(f, value["replay"])          # first the result, then the state that includes it
            o.result_file, o.task, o.elapsed_s = str(f), value.get("task"), value.get("task_elapsed_s")
            if value.get("state") is not None:
                from vehcal_ros.atomic_files import write_atomic

                states[d.vehicle_id] = value["state"]
                write_atomic(state_path(d.vehicle_id), value["state"])
                histories[d.vehicle_id] = list(json.loads(value["state"]).get("history", []))
        counts["done"] += 1
        counts["failed"] += status == "failed"
        write_summary()
        if bar:
            bar.update(counts["done"], counts["failed"], f"{d.vehicle_id}/{d.name}: {status}")

    done_names = {vid: {h.get("drive") for h in hist} for vid, hist in histories.items()} if resume else {}
    chains: dict[str, list[int]] = {vid: [] for vid in vehicles}
    early: list[tuple[int, str]] = []
    for i, d in enumerate(drives):
        if i in plan_errors:
            early.append((i, plan_errors[i]))
        elif d.vehicle_id in state_errors:
            early.append((i, state_errors[d.vehicle_id]))
        elif resume and d.name in done_names.get(d.vehicle_id, ()) and (out / d.vehicle_id / f"{d.name}.json").exists():
            outcomes[i].status = "skipped"
            outcomes[i].result_file = str(out / d.vehicle_id / f"{d.name}.json")
            counts["done"] += 1
        else:
            chains[d.vehicle_id].append(i)

    def submit(ex_: Any, i: int) -> Future:
        d = drives[i]
        return ex_.submit(task, d.bag, d.vehicle_id, params[d.vehicle_id], states[d.vehicle_id], seed, drift, d.name)

    try:
        for i, err in early:
            finish(i, "failed", error=err)
        cost = {i: max(d.duration, 1.0) for i, d in enumerate(drives)}
        _run_tasks(ex, executor, workers, outcomes, _Chains(chains, cost), submit, finish, summary)
    finally:
        summary.elapsed_s = time.perf_counter() - t0
        if plots:
            from vehcal_ros.io.fleet_plots import plot_vehicle

            made = {}
            for vid, body in fleet_summary(histories, fleet.drift).items():
                try:
                    p = plot_vehicle(vid, body, out / vid / "parameters.png")
                except (OSError, ValueError) as exc:   # a plot never fails the batch
                    p = f"not written: {exc}"
                if p:
                    made[vid] = str(p)
            summary.extra["plots"] = made
            summary.extra["grip_map"] = _write_grip_maps(out, drives, outcomes)
        write_summary()
    return summary


def _write_grip_maps(out: Path, drives: Sequence[Drive], outcomes: Sequence[InputOutcome]) -> dict[str, Any]:
    """The fleet's grip by place from the done drives' result files (their ``grip_by_place`` rows, each vehicle's
    drives in time order): ``out/fleet_grip_map.geojson``, ``.csv`` and ``.png`` over every vehicle
    (io/grip_map.py ``write_fleet_map``) and ``out/<vehicle_id>/grip_by_place.png`` per vehicle with rows. Returns
    the summary's ``grip_map`` section: ``files`` (the three fleet files, [] when no drive has a row), ``rows``
    (per vehicle), ``plots`` (per vehicle: the PNG path or ``not written: <reason>``). A file that cannot be
    written never fails the batch (its reason goes in ``error``)."""
    from vehcal_ros.io.grip_map import plot_grip_map, write_fleet_map

    rows: dict[str, list[dict[str, Any]]] = {}
    for d, o in zip(drives, outcomes):
        rows.setdefault(d.vehicle_id, [])
        if o.status not in ("ok", "skipped") or not o.result_file:
            continue
        try:
            doc = json.loads(Path(o.result_file).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        for r in doc.get("grip_by_place") or () if isinstance(doc, dict) else ():
            rows[d.vehicle_id].append({"drive": d.name, **r})
    section: dict[str, Any] = {"files": [], "rows": {vid: len(r) for vid, r in rows.items()}, "plots": {}}
    for vid, rs in rows.items():
        if not rs:
            continue
        try:
            section["plots"][vid] = str(plot_grip_map(rs, out / vid / "grip_by_place.png",
                                                      title=f"{vid}: grip by place over {len({r['drive'] for r in rs})}"
                                                            f" drives, {len(rs)} rows"))
        except (OSError, ValueError) as exc:
            section["plots"][vid] = f"not written: {exc}"
    if any(rows.values()):
        try:
            section["files"] = [str(p) for p in write_fleet_map({v: r for v, r in rows.items() if r}, out)]
        except (OSError, ValueError) as exc:
            section["error"] = f"fleet grip map not written: {exc}"
    return section


def _fleet_from_args(args: argparse.Namespace) -> tuple[Any, dict[str, dict[str, dict[str, Any]]]]:
    """The fleet of ``--fleet FILE`` or of bags given directly (grouped by their metadata vehicle_id, else
    ``--vehicle-id``, else the ``--vehicle`` name), and each vehicle's resolved params (validated)."""
    from vehcal_ros.commands.replay import load_params
    from vehcal_ros.commands.vehicle_option import apply_vehicle
    from vehcal_ros.io.fleet import Fleet, FleetVehicle, bag_root, bag_vehicle_id, load_fleet, vehicle_ref
    from vehcal_ros.replay.params import default_params_file

    if args.fleet:
        if args.inputs:
            raise InputError("give either --fleet FILE or bags, not both")
        fleet = load_fleet(args.fleet)
    else:
        vehicle = vehicle_ref(args.vehicle or "hmmwv", Path("."), "--vehicle")
        groups: dict[str, list[str]] = {}
        for b in args.inputs:
            root = bag_root(b)
            if root is None:
                raise InputError(f"{b}: not a bag (a directory with metadata.yaml, or a .mcap/.db3 file)")
            vid = bag_vehicle_id(root) or args.vehicle_id or Path(vehicle).stem
            groups.setdefault(vid, []).append(os.fspath(root))
        fleet = Fleet(tuple(FleetVehicle(vid, vehicle, tuple(sorted(dict.fromkeys(bs))), args.params)
                            for vid, bs in groups.items()))
    params = {}
    for v in fleet.vehicles:
        base = load_params(v.params or os.fspath(default_params_file()))
        params[v.vehicle_id] = apply_vehicle(base, v.vehicle)
    return fleet, params


def _is_bag(path: str) -> bool:
    p = Path(path)
    return p.is_dir() or p.suffix.lower() in BAG_SUFFIXES


def _headline(path: str) -> str:
    """One-line key result of a result file for the table."""
    try:
        d = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ""
    if isinstance(d, dict) and isinstance(d.get("calibration"), dict):   # a replay (fleet bag)
        finals = [c.get("final") or {} for c in d["calibration"].values() if isinstance(c, dict)]
        return " ".join(f"{k} {v.get('mean', float('nan')):.4g}" for f in finals
                        for k, v in (f.get("parameters") or {}).items())
    r = d.get("result", {}) if isinstance(d, dict) else {}
    if d.get("task") == "grip" and isinstance(r.get("mu_max"), dict):
        return f"mu_max {r['mu_max'].get('mean', float('nan')):.3f}"
    if d.get("task") == "brake" and "parameters" in r:
        return " ".join(f"{k} {v['value']:.4g}" for k, v in r["parameters"].items())
    if isinstance(r, dict):
        stages = [r] if "stage" in r else [v for v in r.values() if isinstance(v, dict) and "stage" in v]
        parts = []
        for st in stages:
            parts += [f"{k} {v.get('mean', float('nan')):.4g}" for k, v in st.get("parameters", {}).items()]
        return " ".join(parts)
    return ""


def print_table(summary: BatchSummary, stream: TextIO | None = None) -> None:
    """Summary table: input, status, task, seconds, key result or error."""
    stream = stream or sys.stdout
    rows = [(Path(o.input).name, o.status, o.task or "-", f"{o.elapsed_s:.2f}" if o.elapsed_s is not None else "-",
             (o.error or (_headline(o.result_file) if o.result_file else ""))[:100]) for o in summary.outcomes]
    head = ("input", "status", "task", "s", "result / error")
    widths = [max(len(r[k]) for r in rows + [head]) for k in range(4)]
    for r in [head] + rows:
        stream.write("  ".join(c.ljust(w) for c, w in zip(r[:4], widths)) + "  " + r[4] + "\n")
    rate = summary.to_dict()["inputs_per_minute"]
    stream.write(f"{summary.n_ok}/{len(summary.outcomes)} ok on {summary.executor} ({summary.workers} workers) in "
                 f"{summary.elapsed_s:.1f} s" + (f", {rate:.1f} inputs/min" if rate else "") + "\n")


def run(args: argparse.Namespace) -> int:
    bags_given = [p for p in args.inputs if _is_bag(p)]
    if args.fleet or bags_given:
        if len(bags_given) != len(args.inputs):
            raise InputError("give either CSV inputs or bags (a fleet), not both: "
                             f"{next(p for p in args.inputs if not _is_bag(p))} is not a bag")
        if args.stage != "auto" or args.chains is not None or args.draws is not None:
            raise InputError("--stage, --chains and --draws apply to CSV inputs; a bag's calibration settings come "
                             "from its params file (model_calibrator n_chains, n_draws, stages)")
        fleet, params = _fleet_from_args(args)
        summary = run_fleet(fleet, params, args.out, executor=args.executor, workers=args.workers,
                            seed=args.seed, resume=args.resume)
        print_table(summary)
        for o in summary.failed:
            print(f"vehcal batch: failed: {o.input}: {o.error}", file=sys.stderr)
        return 0 if not summary.failed else 1
    if not args.inputs:
        raise InputError("no inputs: give CSV files, bags, or --fleet FILE")
    if args.chains is not None and args.chains < 1:
        raise InputError(f"--chains must be >= 1, got {args.chains}")
    if args.draws is not None and args.draws < 10:
        raise InputError(f"--draws must be >= 10, got {args.draws}")
    extra = {}
    if args.vehicle:
        import functools

        from vehcal_ros.vehicle.description import load_description

        load_description(args.vehicle)   # a bad name or file: one line before any task starts
        extra["task"] = functools.partial(calibrate_input, vehicle=args.vehicle)
    summary = run_batch(args.inputs, args.out, executor=args.executor, workers=args.workers, stage=args.stage,
                        seed=args.seed, chains=args.chains, draws=args.draws, resume=args.resume, **extra)
    print_table(summary)
    for o in summary.failed:
        print(f"vehcal batch: failed: {o.input}: {o.error}", file=sys.stderr)
    return 0 if not summary.failed else 1
