"""The seam between a run and its workload (Jepsen's client + generator + checker for one kind
of load). `chaos.run` drives any `Workload` the same way:

    workload = WORKLOADS[name](env)
    await workload.start(stop_all)            # consumers / subscribers connected, before any load
    tasks = workload.load(stop_producing)     # producers, crashes, migrations: until the event
    ... time limit, heal ...
    drain while draining(time.monotonic() - workload.last_delivery, workload.awaited())
    stop_all.set(); await workload.close()
    result = workload.check(history.ops)     # pure: the verdict, a QueueResult (or an extension)

`Env` is all a workload may know of the deployment: one failover URL per group and, for MQTT
clients (which find a group's leader by trying its members in turn), each group's members' MQTT
addresses, in the order of the URL's members.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Coroutine, Iterable
from dataclasses import dataclass
from typing import Any, ClassVar

from chaos.checker import QueueResult
from chaos.history import OK, History, Op
from raftmq.errors import RaftmqError


@dataclass(frozen=True)
class Env:
    urls: tuple[str, ...]  # a failover URL per group, in the topology's order
    history: History
    concurrency: int  # producers (and as many consumers)
    interval_s: float  # between one producer's sends (or transactions)
    seed: int
    backlog: bool = False  # consumers wait for the drain: everything sent stays queued through the faults
    # per group, each member's MQTT address ("host:port"; "" for a member without an MQTT listener)
    mqtt: tuple[tuple[str, ...], ...] = ()


class Workload(ABC):
    """One kind of load. Subclasses set `name`, `summary` and (when they need several groups)
    `min_groups`, and implement the four steps; `check` must be a pure function."""

    name: ClassVar[str]
    summary: ClassVar[str]
    min_groups: ClassVar[int] = 1

    def __init__(self, env: Env) -> None:
        self.env = env
        self._awaited = AwaitedValues(env.history)

    @abstractmethod
    async def start(self, stop: asyncio.Event) -> None:
        """Connect what consumes (it must be there before the first send); `stop` ends them."""

    @abstractmethod
    def load(self, stop: asyncio.Event) -> list[Coroutine[Any, Any, None]]:
        """What acts while the run lasts (producers, consumer crashes, ...), each until `stop`."""

    @property
    @abstractmethod
    def last_delivery(self) -> float:
        """Monotonic time of the latest delivery to any consumer: the drain waits for quiet."""

    def awaited(self) -> int:
        """How many acknowledged values no consumer has had yet: the drain waits longer for these
        than for quiet alone."""
        return self._awaited.count()

    async def before_drain(self, stop: asyncio.Event) -> None:
        """The load stopped and the faults are healed; the drain begins next."""

    @abstractmethod
    async def close(self) -> None:
        """Close every client still open."""

    @staticmethod
    @abstractmethod
    def check(history: Iterable[Op]) -> QueueResult:
        """The verdict on a history of this workload (no I/O, no clock)."""


class AwaitedValues:
    """The acknowledged values (`send` ok, or the values of a `txn` ok: committed) that no
    consumer has had yet (`receive` ok), read from a history as it grows: what the drains wait for."""

    def __init__(self, history: History) -> None:
        self.history = history
        self._pending: set[Any] = set()  # acknowledged, not received yet
        self._received: set[Any] = set()
        self._read = 0  # how far into the history it has read

    def count(self) -> int:
        ops, pending, received = self.history.ops, self._pending, self._received
        for op in ops[self._read:]:
            if op.type != OK:
                continue
            if op.f in ("send", "txn"):
                pending.update(value for value in (op.value["values"] if op.f == "txn" else (op.value,))
                               if value not in received)
            elif op.f == "receive":  # the value, or {"value": ..., "term": ...} (stale)
                value = op.value["value"] if isinstance(op.value, dict) else op.value
                received.add(value)
                pending.discard(value)
        self._read = len(ops)
        return len(pending)


class NeedsCluster(RaftmqError):
    """The workload needs more groups than the deployment has."""
