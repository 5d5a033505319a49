"""The clock seam: the system clock and a manual one."""

from __future__ import annotations

import time

import pytest

from raftmq.clock import Clock, ManualClock, SystemClock


def test_the_system_clock_reads_the_machines_clocks() -> None:
    clock = SystemClock()
    assert isinstance(clock, Clock)
    assert abs(clock.now_ms() - time.time() * 1000) < 1000
    first = clock.monotonic()
    assert clock.monotonic() >= first


def test_a_manual_clock_moves_only_when_told() -> None:
    clock = ManualClock(now_ms=5_000, monotonic=2.0)
    assert isinstance(clock, Clock)
    assert (clock.now_ms(), clock.monotonic()) == (5_000, 2.0)
    clock.advance(1_500)
    assert (clock.now_ms(), clock.monotonic()) == (6_500, 3.5)


def test_only_the_wall_clock_jumps_and_it_may_jump_back() -> None:
    clock = ManualClock(now_ms=5_000, monotonic=2.0)
    clock.jump(-300)
    assert (clock.now_ms(), clock.monotonic()) == (4_700, 2.0)
    with pytest.raises(ValueError):
        clock.advance(-1)
