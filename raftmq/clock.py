"""Clocks: the one place time enters raftmq outside the core.

The core never reads a clock (time arrives in `command.now`); the shells around it do, for the
`now` of the commands they make and for timeouts. They take a `Clock` so that a test or the
simulator can hand them a `ManualClock` and decide when time passes, instead of sleeping.

Two readings, because they answer different questions: `now_ms()` is wall-clock time (ms since
the epoch) that goes into commands and may jump (NTP steps, a new leader's clock); `monotonic()`
is seconds on a clock that never goes back, for intervals and deadlines.
"""

from __future__ import annotations

import time
from typing import Protocol, runtime_checkable

__all__ = ["Clock", "ManualClock", "SystemClock"]


@runtime_checkable
class Clock(Protocol):
    def now_ms(self) -> int:
        """Wall-clock time in ms since the epoch (the `now` of commands)."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (intervals, deadlines)."""
        ...


class SystemClock:
    """The machine's clocks."""

    __slots__ = ()

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic(self) -> float:
        return time.monotonic()


class ManualClock:
    """A clock that moves only when told: `advance` moves both readings, `jump` only the wall
    clock (either way, as an NTP step or a failover to a node with another clock does)."""

    __slots__ = ("_now_ms", "_monotonic")

    def __init__(self, now_ms: int = 1_700_000_000_000, monotonic: float = 0.0) -> None:
        self._now_ms = now_ms
        self._monotonic = monotonic

    def now_ms(self) -> int:
        return self._now_ms

    def monotonic(self) -> float:
        return self._monotonic

    def advance(self, ms: int) -> None:
        if ms < 0:
            raise ValueError(f"time cannot go back on a monotonic clock (advance by {ms} ms)")
        self._now_ms += ms
        self._monotonic += ms / 1000

    def jump(self, ms: int) -> None:
        self._now_ms += ms
