"""``vehcal replay`` lets in exactly what the live nodes let in: the nodes' input guards on a bag.

A real rosbag2 (mcap) file holds a clean synthetic drive (test_replay_parallel's magic-formula slip sweep) plus
bad messages recorded where a live node would have received them: NaN and 1e300 values, a duplicated and a
backwards stamp, a zero stamp and a one-day clock jump. The bag's own order is the arrival order, so a
backwards stamp must be refused as the node refuses it, not sorted into place by the replay's stamp ordering.

* replay (serial and over 2 worker processes, calibrator included) of the bad bag publishes the clean bag's
  estimates bit for bit, and its report counts every bad message under the node's reason;
* the live grip_estimator fed the same messages over DDS in the same order publishes the same estimates and
  counts the same refusals.
"""

from __future__ import annotations

import dataclasses
import io

import numpy as np
import pytest
from grip_sweep import GRIP, RATE, live_grip_run, numbers, published, records

from vehcal_ros.commands.replay import print_summary
from vehcal_ros.io import bags
from vehcal_ros.replay.serial import replay_bag

GUARD_REASONS = ("nonfinite", "implausible", "duplicate", "out_of_order", "zero_stamp", "stamp_jump")
DT = 1.0 / RATE


def bad_items() -> tuple[list[tuple[str, object, float]], dict[str, int], dict[str, int]]:
    """(topic, record, arrival time) of the clean drive with bad messages inserted right after the step they
    arrive with, and the refusals expected per reason for the grip estimator and the calibrator."""
    clean = records()
    extra: dict[int, list[tuple[str, object]]] = {}

    def at(step: int, topic: str, make) -> None:
        t = (step + 1) * DT
        rec = next(r for tp, r in clean if tp == topic and r.t == t and getattr(r, "wheel", 0) in (0, 1))
        extra.setdefault(step, []).append((topic, make(rec, t)))

    rep = dataclasses.replace
    at(50, "/vehicle/tire_forces", lambda r, t: rep(r, fx=float("nan")))                  # grip: nonfinite
    for k in (60, 61, 62):                                                                 # a 1e300 burst
        at(k, "/vehicle/tire_forces", lambda r, t: rep(r, t=t + 0.5 * DT, fx=1e300))     # grip: implausible
    at(70, "/vehicle/odom", lambda r, t: rep(r, t=t + 0.5 * DT, u=1e300))                 # both: implausible
    at(80, "/vehicle/wheel_speeds", lambda r, t: rep(r, omega=np.asarray(r.omega) * 1.5))  # both: duplicate
    at(85, "/vehicle/tire_forces", lambda r, t: rep(r, fx=-r.fx))                         # grip: duplicate
    at(90, "/vehicle/controls", lambda r, t: rep(r, t=t - 2.5 * DT, steering=0.5))       # both: out_of_order
    at(100, "/vehicle/wheel_speeds", lambda r, t: rep(r, t=0.0))                           # both: zero_stamp
    at(110, "/vehicle/odom", lambda r, t: rep(r, t=t + 86400.0, u=3.0))                  # both: stamp_jump
    at(120, "/vehicle/controls", lambda r, t: rep(r, throttle=float("nan")))             # both: nonfinite
    out: list[tuple[str, object, float]] = []
    step_of = {}
    for topic, rec in clean:
        out.append((topic, rec, rec.t))
        step = int(round(rec.t / DT)) - 1
        if topic == "/vehicle/controls" and step in extra:   # controls close each step: the extras follow
            out += [(tp, r, rec.t) for tp, r in extra[step]]
            step_of[step] = True
    assert len(step_of) == len(extra)
    grip = {"nonfinite": 2, "implausible": 4, "duplicate": 2, "out_of_order": 1, "zero_stamp": 1, "stamp_jump": 1}
    cal = {"nonfinite": 1, "implausible": 1, "duplicate": 1, "out_of_order": 1, "zero_stamp": 1, "stamp_jump": 1}
    return out, grip, cal


@pytest.fixture(scope="module")
def two_bags(tmp_path_factory):
    d = tmp_path_factory.mktemp("replay_guard")
    items, grip, cal = bad_items()
    bags.write_bag(d / "clean", records(), storage="mcap")
    bags.write_bag(d / "bad", items, storage="mcap")   # log time = arrival: the bag's order is the arrival order
    return d / "clean", d / "bad", grip, cal


def _added(bad: dict, clean: dict) -> dict[str, int]:
    return {k: bad.get(k, 0) - clean.get(k, 0) for k in set(bad) | set(clean) if bad.get(k, 0) != clean.get(k, 0)}


def test_bad_bag_replays_as_the_clean_bag_and_counts_each_refusal(two_bags):
    clean_bag, bad_bag, want_grip, want_cal = two_bags
    params = {"grip_estimator": GRIP}
    clean = replay_bag(clean_bag, params, final_cycle=False, workers=1)
    bad = replay_bag(bad_bag, params, final_cycle=False, workers=1)
    assert all(len(v) >= 1 for v in published(clean).values())
    assert published(bad) == published(clean)                     # the garbage changed no estimate
    assert [o[:4] for o in bad.outputs] == [o[:4] for o in clean.outputs]
    c, b = clean.counters, bad.counters
    assert _added(b["grip_samples_dropped"], c["grip_samples_dropped"]) == want_grip
    assert _added(b["calibration_samples_dropped"], c["calibration_samples_dropped"]) == want_cal
    assert b["grip_samples_accepted"] == c["grip_samples_accepted"]
    assert bad.n_messages == clean.n_messages                       # only what no node took is left out
    assert bad.t_end == clean.t_end                                 # the day-ahead stamp moved no clock
    text = io.StringIO()
    print_summary(bad, text)   # what `vehcal replay` prints
    assert ("refused at input (as the live nodes): grip_estimator: nonfinite 2, implausible 4, zero_stamp 1, "
            "duplicate 2, out_of_order 1, stamp_jump 1; model_calibrator: nonfinite 1, implausible 1, zero_stamp 1, "
            "duplicate 1, out_of_order 1, stamp_jump 1") in text.getvalue()
    # the parallel replay (grip fits and the calibrator's stream in worker processes) admits the same
    par = replay_bag(bad_bag, params, final_cycle=False, workers=2)
    assert numbers(par) == numbers(bad)


@pytest.mark.ros
def test_live_node_refuses_what_the_replay_refuses(two_bags, rclpy_context):
    """The bad messages over DDS, in the bag's order, into a live grip_estimator on sim time (/clock stepped to
    each cycle time by arrival): the same estimates as the replay of the bad bag and the same refusals."""
    _, bad_bag, want_grip, _ = two_bags
    replayed = replay_bag(bad_bag, {"grip_estimator": GRIP}, calibration=False, final_cycle=False, workers=1)
    items, _, _ = bad_items()
    expected, got, dropped = live_grip_run(rclpy_context, items, replayed, "guard_live_probe")
    assert {r: dropped.get(r, 0) for r in GUARD_REASONS} == want_grip
    assert dropped == replayed.counters["grip_samples_dropped"]
    for scope, rows in expected.items():
        assert len(got[scope]) == len(rows), scope
        for (ts, *vals), (ts_live, *vals_live) in zip(rows, got[scope]):
            assert ts_live == pytest.approx(ts, abs=1e-9)
            assert vals_live == vals
