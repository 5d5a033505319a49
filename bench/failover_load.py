"""The load of the failover bench: one producer through `raftmq.client.failover` that never
stops while leaders die, and a consumer that drains the queue at the end to check it.

Every message carries `fb-seq` (its producer sequence number); the failover client stamps an
`_AMQ_DUPL_ID` and resends unreceipted SENDs after a reconnect, so the broker must store each
sequence number once. `ResumeWatch` tells the kill loop when publishing resumed: the first
RECEIPT that came over a connection made after the kill.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass, field

from raftmq.client import FailoverClient, FailoverEvent, connect_failover
from raftmq.errors import ClientError

SEQ_HEADER = "fb-seq"


@dataclass
class ResumeWatch:
    """Armed at a kill; fires on the first receipt over a connection newer than `generation`."""

    generation: int
    killed_at: float
    reconnected_at: float | None = None
    resumed_at: float | None = None
    reconnected_to: str | None = None
    resent: int = 0  # SENDs written again on the new connection
    fired: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass
class ProducerStats:
    sent: int = 0
    receipted: set[int] = field(default_factory=set)
    failed: dict[str, int] = field(default_factory=dict)  # outcome unknown (no receipt), by reason
    receipt_times: list[float] = field(default_factory=list)  # monotonic, for "steady again" checks
    connections: int = 0


class FailoverProducer:
    """Publishes 1 KiB persistent messages with receipts, `window` in flight, until stopped."""

    def __init__(self, url: str, destination: str, window: int, size: int = 1024) -> None:
        self.url = url
        self.destination = destination
        self.window = window
        self.body = os.urandom(size)
        self.stats = ProducerStats()
        self.client: FailoverClient | None = None
        self.watch: ResumeWatch | None = None
        self._stopping = False
        self._slots = asyncio.Semaphore(window)
        self._task: asyncio.Task[None] | None = None
        self._in_flight: set[asyncio.Future] = set()

    async def start(self, connect_timeout: float) -> None:
        self.client = await asyncio.wait_for(connect_failover(self.url), connect_timeout)
        self.client.events.append(self._on_event)
        self._task = asyncio.get_running_loop().create_task(self._run())

    def arm(self, killed_at: float) -> ResumeWatch:
        assert self.client is not None
        self.watch = ResumeWatch(self.client.connection_number, killed_at)
        return self.watch

    @property
    def address(self) -> str | None:
        client = self.client
        return None if client is None or client.address is None else str(client.address)

    def receipts_since(self, moment: float) -> int:
        times = self.stats.receipt_times
        count = 0
        for t in reversed(times):  # appended in time order
            if t < moment:
                break
            count += 1
        return count

    async def _run(self) -> None:
        client = self.client
        assert client is not None
        seq = 0
        while not self._stopping:
            await self._slots.acquire()
            if self._stopping:
                self._slots.release()
                break
            seq += 1
            try:
                future = client.send_nowait(
                    self.destination, self.body, {SEQ_HEADER: str(seq), "persistent": "true"}, receipt=True
                )
            except ClientError as exc:  # the client gave up: nothing more can be sent
                self._slots.release()
                self._fail(f"send refused: {exc}")
                break
            self.stats.sent += 1
            self._in_flight.add(future)
            future.add_done_callback(lambda fut, n=seq: self._settled(n, fut))

    def _settled(self, seq: int, future: asyncio.Future) -> None:
        self._in_flight.discard(future)
        self._slots.release()
        if future.cancelled():
            self._fail("cancelled")
            return
        error = future.exception()
        if error is not None:
            self._fail(f"{type(error).__name__}: {error}")
            return
        now = time.monotonic()
        self.stats.receipted.add(seq)
        self.stats.receipt_times.append(now)
        watch = self.watch
        client = self.client
        if (watch is not None and watch.resumed_at is None and client is not None
                and client.connection_number > watch.generation):
            watch.resumed_at = now
            watch.fired.set()

    def _on_event(self, event: FailoverEvent) -> None:
        if event.kind == "connected":
            self.stats.connections += 1
            watch = self.watch
            if watch is not None and watch.reconnected_at is None:
                watch.reconnected_at = time.monotonic()
                watch.reconnected_to = str(event.address)
                watch.resent = len(event.resent)

    def _fail(self, reason: str) -> None:
        key = reason[:200]
        self.stats.failed[key] = self.stats.failed.get(key, 0) + 1

    async def stop(self, timeout: float) -> None:
        """Stop sending, wait (bounded) for outstanding receipts, close the client."""
        self._stopping = True
        self._slots.release()  # wake the loop if it waits for a slot
        if self._task is not None:
            await asyncio.wait([self._task], timeout=timeout)
        pending = list(self._in_flight)
        if pending:
            await asyncio.wait(pending, timeout=timeout)
        if self.client is not None:
            await self.client.close(timeout=timeout)


@dataclass
class DrainResult:
    deliveries: int = 0
    distinct: int = 0
    duplicated: int = 0  # deliveries of an already-seen sequence without redelivered:true
    redelivered: int = 0
    foreign: int = 0  # messages without our header
    seconds: float = 0.0
    timed_out: bool = False
    seen: set[int] = field(default_factory=set)


async def drain(url: str, destination: str, expected: set[int], idle_seconds: float, timeout: float) -> DrainResult:
    """Consume everything (client-individual ACK per message) until every `expected`
    sequence arrived and nothing more came for `idle_seconds`, or `timeout` passed."""
    result = DrainResult()
    counts: dict[int, int] = {}
    started = time.monotonic()
    deadline = started + timeout
    client = await asyncio.wait_for(connect_failover(url), timeout)
    try:
        subscription = client.subscribe(destination, ack="client-individual", prefetch=1000)
        while True:
            now = time.monotonic()
            if now >= deadline:
                result.timed_out = True
                break
            complete = expected <= result.seen
            wait = min(idle_seconds if complete else 1.0, deadline - now)
            try:
                message = await asyncio.wait_for(subscription.get(), wait)
            except TimeoutError:
                if complete:
                    break
                continue
            await client.ack(message)
            result.deliveries += 1
            raw = message.get(SEQ_HEADER)
            if raw is None:
                result.foreign += 1
                continue
            seq = int(raw)
            redelivered = message.get("redelivered") == "true"
            if redelivered:
                result.redelivered += 1
            if counts.get(seq, 0) and not redelivered:
                result.duplicated += 1
            counts[seq] = counts.get(seq, 0) + 1
            result.seen.add(seq)
    finally:
        await client.close(timeout=5.0)
    result.distinct = len(result.seen)
    result.seconds = time.monotonic() - started
    return result
