"""The parallel bag replay gives the serial replay's numbers, and both give the live node's.

* replay-equals-live: the same records go (a) over real DDS into a real ``grip_estimator`` node on sim time,
  the test driving ``/clock`` to each cycle time and waiting (never sleeping) until the node has taken every
  message and finished its fit, and (b) into ``vehcal replay`` (serial and over 2 worker processes) with the
  timers only (``final_cycle=False``). Every published estimate (mean, interval, stamp) must agree bit for bit.
* parallel == serial with the model calibrator on an 8-DOF drive (its cycle stream runs in a worker process).
* the progress reports: bag time committed, speed, time left.

Synthetic data for speed: a known magic-formula curve (friction paper Section 4.1) under a slip sweep.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from grip_sweep import DURATION, GRIP, RATE, live_grip_run, numbers, published, records

from vehcal_ros.io import bags
from vehcal_ros.replay.serial import replay_bag
from vehcal_ros.replay.stream import ReplayProgress


@pytest.fixture(scope="module")
def grip_bag(tmp_path_factory):
    d = tmp_path_factory.mktemp("replay_parallel")
    bags.write_bag(d / "bag", records(), storage="mcap")
    return d / "bag"


@pytest.fixture(scope="module")
def serial(grip_bag):
    return replay_bag(grip_bag, {"grip_estimator": GRIP}, calibration=False, final_cycle=False, workers=1)


def test_parallel_replay_equals_serial_and_reports_progress(grip_bag, serial):
    seen: list[ReplayProgress] = []
    par = replay_bag(grip_bag, {"grip_estimator": GRIP}, calibration=False, final_cycle=False, workers=2,
                     progress=seen.append, progress_every=500)
    assert numbers(par) == numbers(serial)
    assert all(len(v) >= 1 for v in published(serial).values()), published(serial)
    assert serial.counters["grip_cycles"] == 3   # ticks at 3.04, 6.04 and 9.04 s
    # progress: committed bag time never runs ahead of what was read, never goes back; the last report is final
    assert seen and seen[-1].finished and seen[-1].fraction == 1.0 and seen[-1].time_left == 0.0
    done = [p.done_t for p in seen]
    assert all(p.done_t <= p.read_t + 1e-9 for p in seen) and done == sorted(done)
    assert seen[-1].t_last - seen[-1].t_first == pytest.approx(DURATION - 1 / RATE, abs=1e-6)
    assert all(p.speed >= 0.0 for p in seen)


def test_threads_and_serial_executor_agree(grip_bag, serial):
    threads = replay_bag(grip_bag, {"grip_estimator": GRIP}, calibration=False, final_cycle=False, workers=2,
                         executor="threads")
    assert numbers(threads) == numbers(serial)


def test_unexcited_windows_are_skipped_alike_in_parallel(grip_bag, serial):
    """min_excitation above every window's span: the pre-gate skips every fit (in the main process on the
    parallel schedule), counted per scope, nothing published, the same result as the serial replay."""
    gate = {**GRIP, "min_excitation": 2.0}
    ser = replay_bag(grip_bag, {"grip_estimator": gate}, calibration=False, final_cycle=False, workers=1)
    par = replay_bag(grip_bag, {"grip_estimator": gate}, calibration=False, final_cycle=False, workers=2)
    assert numbers(par) == numbers(ser)
    assert ser.counters["grip_skipped_unexcited"] == ser.counters["grip_fits"] == {"front_axle": 3, "rear_axle": 3}
    assert all(g.t.size == 0 for g in ser.grip.values())


@pytest.mark.ros
def test_replay_equals_live_node_over_dds(grip_bag, serial, rclpy_context):
    """The live grip_estimator on sim time, fed over DDS one message at a time with /clock stepped to each cycle
    time, publishes exactly the replay's estimates (same seeds, same data, same cycle times)."""
    expected, got, _ = live_grip_run(rclpy_context, [(topic, rec, rec.t) for topic, rec in records()], serial,
                                     "live_vs_replay_probe")
    for scope, rows in expected.items():
        assert len(got[scope]) == len(rows), scope
        for (ts, *vals), (ts_live, *vals_live) in zip(rows, got[scope]):
            assert ts_live == pytest.approx(ts, abs=1e-9)     # header stamps carry ns
            assert vals_live == vals                          # bit for bit


def _calibration_bag(tmp_path):
    """An 8-DOF drive and the same drive again 14.5 s later (the second window confirms the accepted model), as
    an mcap bag, and replay parameters that calibrate it in seconds."""
    from calibration_drive import DURATION, drive_records

    records = drive_records(seed=1) + drive_records(seed=1, t0=100.0 + DURATION + 0.01)
    bags.write_bag(tmp_path / "cal", [(None, r) for r in records], storage="mcap")
    params = {"grip_estimator": {"fit_period": 8.0},
              "model_calibrator": {"stages": ["rolling_resistance", "longitudinal", "lateral"], "n_chains": 2,
                                   "n_draws": 100, "min_ess": 20.0,
                                   "min_ess_tail": 20.0, "max_r_hat": 1.5, "recalibration_period": 0.0,
                                   "calibration_period": 7.0}}
    return tmp_path / "cal", params


@pytest.mark.slow
def test_parallel_calibration_stream_equals_serial(tmp_path):
    """The calibrator in the parallel replay (main process + fits on the workers) gives the serial replay's
    calibration, including a window of the same drive replayed again (same data 14.5 s later) that confirms the
    accepted model instead of being refitted (estimation/calibration/recalibration_check.py)."""
    pytest.importorskip("vehcal_ros.estimation.calibration.pipeline")
    bag, params = _calibration_bag(tmp_path)
    a = replay_bag(bag, params, seed=4, workers=1)
    b = replay_bag(bag, params, seed=4, workers=2)
    assert a.counters["calibration_cycles"] >= 1 and any(c.final is not None for c in a.calibration.values())
    assert numbers(b) == numbers(a)
    assert [o[:4] for o in b.outputs] == [o[:4] for o in a.outputs]
    assert sum(a.counters["calibration_confirmed"].values()) >= 1
    assert b.counters["calibration_confirmed"] == a.counters["calibration_confirmed"]
    assert b.counters["calibration_fits"] == a.counters["calibration_fits"]


class _HeldCalibrationFits(ThreadPoolExecutor):
    """A real thread pool whose calibration fits are held until ``release`` is set (at most ``HOLD_S``): the
    calibrator's next ticks then find its fit still running, however fast or slow the machine reads the bag."""

    HOLD_S = 60.0

    def __init__(self, release: threading.Event, **kwargs) -> None:
        super().__init__(**kwargs)
        self.release = release

    def submit(self, fn, /, *args, **kwargs):
        from vehcal_ros.replay.parallel import fit_calibration_jobs

        if fn is fit_calibration_jobs:
            def held(*a, **k):
                self.release.wait(timeout=self.HOLD_S)
                return fn(*a, **k)
            return super().submit(held, *args, **kwargs)
        return super().submit(fn, *args, **kwargs)


@pytest.mark.slow
def test_calibrator_waiting_for_its_fit_does_not_stop_the_read(tmp_path, monkeypatch):
    """A calibrator tick whose previous fit still runs is deferred with the records after it: the read goes on,
    and the calibration equals the serial replay's. The fit is held until two ticks wait behind it; a scheduler
    that stopped the read to wait for it would never defer them (the hold then times out and the check fails)."""
    from vehcal_ros.replay.parallel import CalibrationScheduler

    bag, params = _calibration_bag(tmp_path)
    deferred = []
    release = threading.Event()
    drain = CalibrationScheduler.drain

    def watched(self, wait_for, block=False):
        deferred.append(sum(kind == "tick" for kind, _ in self.deferred))
        if deferred[-1] >= 2:
            release.set()
        return drain(self, wait_for, block)

    monkeypatch.setattr(CalibrationScheduler, "drain", watched)
    a = replay_bag(bag, params, seed=4, workers=1)
    with _HeldCalibrationFits(release, max_workers=3) as ex:
        b = replay_bag(bag, params, seed=4, executor=ex)
    assert release.is_set() and max(deferred) >= 2   # two ticks waited behind the running fit while the read went on
    assert numbers(b) == numbers(a)
    assert [o[:4] for o in b.outputs] == [o[:4] for o in a.outputs]
    assert b.counters["calibration_fits"] == a.counters["calibration_fits"]


def test_bad_bag_with_workers_is_one_line_and_exit_2(grip_bag, tmp_path, capsys):
    """A truncated bag with --jobs 2: one line, status 2."""
    import shutil

    from vehcal_ros.cli import main

    shutil.copytree(grip_bag, tmp_path / "cut")
    data = next((tmp_path / "cut").glob("*.mcap"))
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
    rc = main(["replay", str(tmp_path / "cut"), "--jobs", "2", "--quiet"])
    err = capsys.readouterr().err.splitlines()
    assert rc == 2 and len(err) == 1 and "truncated or corrupt bag" in err[0], err


@pytest.mark.filterwarnings("ignore:Port 8787 is already in use:UserWarning")
def test_dask_cluster_replay_equals_serial(grip_bag, serial):
    """The fits on a real Dask cluster (127.0.0.1, 2 worker processes) give the serial numbers."""
    distributed = pytest.importorskip("distributed")
    cl = distributed.LocalCluster(host="127.0.0.1", processes=True, n_workers=2, threads_per_worker=1,
                                  dashboard_address=None)
    try:
        spec = "dask://" + cl.scheduler_address.removeprefix("tcp://")
        par = replay_bag(grip_bag, {"grip_estimator": GRIP}, calibration=False, final_cycle=False, executor=spec)
    finally:
        cl.close()
    assert numbers(par) == numbers(serial)


def test_task_threads_and_kernel_threads_scope():
    """A task gets the cores the running ones leave (at least one); kernel_threads caps numba's threads and the
    SMC chunk pool for the calling thread only while it runs, and a thread count never changes the numbers
    (the batch likelihood on 1 thread equals it on every thread, bit for bit: independent rows)."""
    import threading

    import numba

    from vehcal_ros.models import chunked
    from vehcal_ros.models.vehicle_8dof import PARAM_INDEX, Simulator8Dof, parameter_vector
    from vehcal_ros.replay.parallel import kernel_threads, task_threads

    assert [task_threads(2, k) for k in (0, 1, 2, 5)] == [2, 1, 1, 1]
    before, pool_before = numba.get_num_threads(), chunked.n_threads()
    t = np.arange(201) / 100.0
    x0 = np.zeros(12)
    x0[2] = 8.0
    x0[8:] = 8.0 / 0.45
    sim = Simulator8Dof(x0, t, np.full_like(t, 0.3), np.zeros_like(t), np.zeros_like(t), dt=0.005, output_dt=0.01,
                        n_out=t.size)
    params = np.repeat(parameter_vector(None, sim.defaults)[None, :], 200, axis=0)
    params[:, PARAM_INDEX["Cxf"]] = np.linspace(5000.0, 50000.0, 200)        # Cxf over the rows
    chan, data = np.array([2, 8], dtype=np.int64), np.zeros((t.size, 2))
    w = np.ones((200, 2))
    sse_all, _ = sim.sse_bounded(params, chan, data, w, None)
    other: list[int] = []
    with kernel_threads(1):
        assert numba.get_num_threads() == 1 and chunked.n_threads() == 1
        th = threading.Thread(target=lambda: other.append(chunked.n_threads()))   # another thread: unaffected
        th.start()
        th.join()
        sse_one, _ = sim.sse_bounded(params, chan, data, w, None)
    assert other == [pool_before]
    assert numba.get_num_threads() == before and chunked.n_threads() == pool_before
    np.testing.assert_array_equal(sse_one, sse_all)
