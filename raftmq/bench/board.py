"""The scoreboard that bench workers and the conductor share, within one process or across many.

Each worker process owns one row of counters and is its only writer; the conductor only
reads rows (and sets the two events). With one process the row lives in a plain list; with
several, in a `multiprocessing.Array` (one aligned 64-bit word per counter).
"""

from __future__ import annotations

import threading
from collections.abc import MutableSequence
from dataclasses import dataclass
from typing import Any, Protocol


class EventLike(Protocol):
    def is_set(self) -> bool: ...

    def set(self) -> None: ...


FIELDS = ("sent", "receipted", "received", "producers_done", "consumers_ready", "errors", "finished")
_FIELD_INDEX = {name: i for i, name in enumerate(FIELDS)}


@dataclass
class Tally:
    """One worker's running counts (plain ints; copied to the board periodically)."""

    sent: int = 0
    receipted: int = 0
    received: int = 0  # distinct messages of this run
    producers_done: int = 0
    consumers_ready: int = 0
    errors: int = 0
    finished: int = 0


@dataclass(frozen=True, slots=True)
class Totals:
    sent: int
    receipted: int
    received: int
    producers_done: int
    consumers_ready: int
    errors: int
    finished: int


class Board:
    def __init__(self, workers: int, counters: MutableSequence[int], start: EventLike, stop: EventLike) -> None:
        self.workers = workers
        self.counters = counters
        self.start = start
        self.stop = stop

    @classmethod
    def local(cls, workers: int = 1) -> Board:
        return cls(workers, [0] * (workers * len(FIELDS)), threading.Event(), threading.Event())

    @classmethod
    def shared(cls, workers: int, context: Any) -> Board:
        """A board for worker processes of a multiprocessing `context`."""
        counters = context.Array("q", workers * len(FIELDS), lock=False)
        return cls(workers, counters, context.Event(), context.Event())

    def publish(self, worker: int, tally: Tally) -> None:
        base = worker * len(FIELDS)
        counters = self.counters
        for i, name in enumerate(FIELDS):
            counters[base + i] = getattr(tally, name)

    def get(self, worker: int, name: str) -> int:
        return self.counters[worker * len(FIELDS) + _FIELD_INDEX[name]]

    def totals(self) -> Totals:
        width = len(FIELDS)
        sums = [0] * width
        values = list(self.counters)
        for worker in range(self.workers):
            for i in range(width):
                sums[i] += values[worker * width + i]
        return Totals(*sums)
