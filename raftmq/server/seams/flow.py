"""BLOCK, the leader's side of producer flow control (raftmq.core.address_settings): a
connection about to propose a SEND to a destination that is full under `address_full_policy =
"BLOCK"` proposes nothing more and reads nothing more (TCP pushes back on the producer, and no
RECEIPT goes out), until the destination has room. Only that connection waits: producers of
other destinations, and consumers, go on; the consumers' ACKs are what make room.

SENDs proposed but not yet applied count too (`proposing` / `applied`), so several frames
read at once cannot all slip past a limit before the first is applied.

The gate re-checks its waiting connections whenever a proposal of this node completes (a
consumer's ACK applied is what makes room: `poke`), and every `CHECK_SECONDS` while any wait,
in the order they began to wait, so the first blocked is the first released. A check costs a
dict lookup and the destination's counters per waiting connection.

A SEND in a transaction counts when it is proposed; what reaches the core past a limit anyway
(after a change of leader, whose gate starts empty) is stored.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

from raftmq.core.commands import Command, Send
from raftmq.core.model import Store

CHECK_SECONDS = 0.005


class FlowWaiter(Protocol):
    def flow_release(self) -> bool:
        """Propose what it held while there is room; True when it holds nothing more."""


class FlowGate:
    def __init__(self, loop: asyncio.AbstractEventLoop, blocked: Callable[[str, int, int], bool]) -> None:
        self._loop = loop
        # Is this destination full under BLOCK, counting (messages, bytes) proposed but not applied?
        self._blocked = blocked
        self._waiting: dict[FlowWaiter, None] = {}
        # SENDs proposed and not yet applied, per destination: (messages, body bytes). The leader
        # proposes every SEND of its group, so with these BLOCK holds a limit exactly.
        self._proposed: dict[str, list[int]] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._checking = False  # releasing proposes, whose completion may poke again
        self.blocks = 0  # connections that had to wait, since start (for /status)

    def blocked_at(self, commands: Sequence[Command]) -> int | None:
        """The position of the first SEND among `commands` whose destination is full under BLOCK,
        counting what is proposed and the SENDs before it in `commands`; None if all fit."""
        blocked, proposed = self._blocked, self._proposed
        ahead: dict[str, list[int]] = {}
        for position, command in enumerate(commands):
            if type(command) is Send:
                destination = command.destination
                pending = proposed.get(destination, (0, 0))
                mine = ahead.setdefault(destination, [0, 0])
                if blocked(destination, pending[0] + mine[0], pending[1] + mine[1]):
                    return position
                mine[0] += 1
                mine[1] += len(command.body) if isinstance(command.body, bytes) else 0
        return None

    def proposing(self, commands: Iterable[Command]) -> list[tuple[str, int]] | None:
        """Count these commands' SENDs as proposed; returns what `applied` takes back."""
        sends = [(c.destination, len(c.body) if isinstance(c.body, bytes) else 0) for c in commands if type(c) is Send]
        for destination, size in sends:
            counts = self._proposed.setdefault(destination, [0, 0])
            counts[0] += 1
            counts[1] += size
        return sends or None

    def applied(self, sends: list[tuple[str, int]]) -> None:
        """Those SENDs committed (or failed): the core's counters hold them now."""
        for destination, size in sends:
            counts = self._proposed.get(destination)
            if counts is not None:
                counts[0] -= 1
                counts[1] -= size
                if counts[0] <= 0:
                    del self._proposed[destination]

    def wait(self, waiter: FlowWaiter) -> None:
        if waiter not in self._waiting:
            self._waiting[waiter] = None
            self.blocks += 1
        if self._timer is None:
            self._timer = self._loop.call_later(CHECK_SECONDS, self._check)

    def forget(self, waiter: FlowWaiter) -> None:
        self._waiting.pop(waiter, None)

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def poke(self) -> None:
        """Something was applied (a consumer's ACK makes room): look at the waiting at once,
        rather than at the next timer."""
        if self._waiting and not self._checking:
            self._check()

    def _check(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = None
        self._checking = True
        try:
            released = [waiter for waiter in list(self._waiting) if waiter.flow_release()]
        finally:
            self._checking = False
        for waiter in released:
            self._waiting.pop(waiter, None)
        if self._waiting:
            self._timer = self._loop.call_later(CHECK_SECONDS, self._check)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._waiting.clear()


class Fairness:
    """`fair_queue_depth`: a queue whose consumers are taking messages (its dequeued count moved
    in the last `STALL_SECONDS`) holds its producers once it holds `depth` messages, ready or in
    flight (prefetched messages wait in a consumer's buffer just the same), counting SENDs
    proposed and not applied. Consumers that stop taking for that long release them: the
    backlog then pages, as without fairness."""

    STALL_SECONDS = 1.0

    def __init__(self, depth: int, clock: Callable[[], float]) -> None:
        self.depth = depth
        self._clock = clock
        self._progress: dict[str, tuple[int, float]] = {}  # queue -> (dequeued, when it last moved)

    def holds(self, store: Store, proposed: int) -> bool:
        # In flight counts: messages prefetched by a consumer wait in its buffer just the same.
        if not store.consumers or store.depth + store.in_flight + proposed < self.depth:
            return False
        now = self._clock()
        seen = self._progress.get(store.destination)
        if seen is None or seen[0] != store.dequeued:
            if len(self._progress) > 10_000:
                self._progress.clear()
            self._progress[store.destination] = (store.dequeued, now)
            return True
        return now - seen[1] < self.STALL_SECONDS
