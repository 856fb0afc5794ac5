"""RollingBuffer: order, duplicates, non-finite rows, clock jumps, time window and size bound."""

import math

import numpy as np
import pytest

from vehcal_ros.estimation.sensing.buffers import RollingBuffer


def test_rejects_and_counts_bad_rows() -> None:
    b = RollingBuffer(("x",), capacity=10, max_gap=1.0)
    assert b.append(0.0, [1.0])
    assert not b.append(0.0, [2.0])          # duplicate stamp
    assert not b.append(-0.1, [2.0])         # backwards
    assert not b.append(0.1, [math.nan])     # non-finite value
    assert not b.append(math.inf, [1.0])     # non-finite stamp
    assert b.append(0.2, [3.0])
    assert b.append(5.0, [4.0])              # clock jump clears what came before
    c = b.counters
    assert (c.n_duplicate, c.n_out_of_order, c.n_nonfinite, c.n_clock_jumps) == (1, 1, 2, 1)
    assert c.accepted == 3 and c.dropped == 4
    np.testing.assert_array_equal(b.array(), [[5.0, 4.0]])


def test_window_and_capacity_bound_memory() -> None:
    b = RollingBuffer(("x", "y"), capacity=50, window=2.0)
    for k in range(100_000):
        b.append(0.001 * k, [k, -k])
    a = b.array()
    assert len(b) == 50 and a.shape == (50, 3)
    assert np.all(np.diff(a[:, 0]) > 0)
    assert a[-1, 1] == 99_999
    b2 = RollingBuffer(("x",), capacity=10_000, window=2.0)
    for k in range(10_000):
        b2.append(0.01 * k, [k])
    assert b2.times()[-1] - b2.times()[0] <= 2.0
    np.testing.assert_array_equal(b2.since(99.0)[:, 0], b2.times()[b2.times() >= 99.0])


def test_allow_equal_and_argument_checks() -> None:
    b = RollingBuffer(("x",), capacity=4, allow_equal=True)
    for _ in range(3):
        assert b.append(1.0, [0.0])
    assert len(b) == 3
    with pytest.raises(ValueError, match="capacity"):
        RollingBuffer(("x",), capacity=0)
    with pytest.raises(ValueError, match="expected 1 values"):
        b.append(2.0, [1.0, 2.0])


def test_backward_clock_jump_restarts() -> None:
    b = RollingBuffer(("x",), capacity=10, max_gap=1.0)
    for t in (100.0, 100.1, 100.2):
        b.append(t, [t])
    assert not b.append(99.9, [0.0])          # a small step back: out of order, dropped
    assert b.append(0.5, [1.0])               # a simulator restarted at t = 0: a clock jump
    assert b.counters.n_clock_jumps == 1 and b.counters.n_out_of_order == 1
    np.testing.assert_array_equal(b.array(), [[0.5, 1.0]])
