"""The `queue` workload's clients: producers and consumers on independent connections that
fail over like real clients (raftmq's failover client), each recording what it does. The
helpers at the end (connect, close, ack) serve the other workloads' clients too.

- A producer sends unique values `p<n>-<seq>` (the value is the body and the `_AMQ_DUPL_ID`),
  each with a receipt: `ok` at the RECEIPT, `fail` when the broker refused the frame itself,
  `info` when the outcome is unknown (the client gave up waiting: it may be stored).
- A consumer acknowledges each delivery (client-individual) a few milliseconds after it
  arrived, so a consumer that crashes leaves deliveries unacknowledged; every delivery is
  recorded as `receive` `ok` with the broker's `redelivered` flag. `crash` aborts its
  connection (the failover client reconnects and subscribes again; the broker redelivers).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Coroutine, Iterable, Sequence
from typing import Any, Protocol

from chaos.checker import QueueResult, check_queue
from chaos.history import FAIL, INFO, INVOKE, OK, History, Op
from chaos.workload import Workload
from raftmq.client.failover import FailoverClient, connect_failover
from raftmq.errors import BrokerRefused, ClientError
from raftmq.protocol.frame import Frame

DESTINATION = "/queue/chaos"
SEND_TIMEOUT_MS = 10_000  # a SEND without a RECEIPT after this long is recorded as info
ACK_DELAY_S = 0.02
CLIENT_OPTIONS: dict[str, Any] = {
    "timeout_ms": SEND_TIMEOUT_MS, "initial_reconnect_delay_ms": 50, "max_reconnect_delay_ms": 1000,
    "heartbeat": (1000, 1000), "randomize": False,
}


class Producer:
    """With `group` (its URL's index) it first records `open` `ok` `{"group": g}`: a checker of
    several groups needs to know where each value entered the cluster."""

    def __init__(self, name: str, url: str, history: History, interval_s: float,
                 destination: str = DESTINATION, group: int | None = None) -> None:
        self.name, self.url, self.history, self.interval_s = name, url, history, interval_s
        self.destination, self.group = destination, group
        self.seq = 0

    async def run(self, stop: asyncio.Event) -> None:
        client = await connect(self.url, stop)
        if client is None:
            return
        if self.group is not None:
            self.history.record(self.name, OK, "open", {"group": self.group}, node=node_of(client))
        try:
            while not stop.is_set():
                value = f"{self.name}-{self.seq}"
                self.seq += 1
                self.history.record(self.name, INVOKE, "send", value)
                try:
                    await client.send(self.destination, value.encode(), [("_AMQ_DUPL_ID", value)], receipt=True)
                except BrokerRefused as exc:
                    self.history.record(self.name, FAIL, "send", value, error=str(exc))
                except ClientError as exc:
                    self.history.record(self.name, INFO, "send", value, error=str(exc))
                else:
                    self.history.record(self.name, OK, "send", value, node=node_of(client))
                await asyncio.sleep(self.interval_s)
        finally:
            await close_quietly(client)


class Consumer:
    def __init__(self, name: str, url: str, history: History, destination: str = DESTINATION) -> None:
        self.name, self.url, self.history, self.destination = name, url, history, destination
        self.client: FailoverClient | None = None
        self.last_delivery = time.monotonic()

    async def start(self, stop: asyncio.Event) -> bool:
        self.client = client = await connect(self.url, stop)
        if client is None:
            return False
        loop = asyncio.get_running_loop()

        def on_message(frame: Frame) -> None:
            self.last_delivery = time.monotonic()
            self.history.record(self.name, OK, "receive", frame.body.decode(errors="replace"), node=node_of(client),
                                redelivered=frame.get("redelivered") == "true")
            loop.call_later(ACK_DELAY_S, ack_quietly, client, frame)

        client.subscribe(self.destination, ack="client-individual", prefetch=10, callback=on_message)
        return True

    def crash(self) -> None:
        """Drop the connection as a crashing process would: unacknowledged deliveries go back."""
        crash(self.client)

    async def close(self) -> None:
        if self.client is not None:
            await close_quietly(self.client)


class QueueWorkload(Workload):
    """Producers and consumers on one queue, spread over the groups; consumers crash now and then."""

    name = "queue"
    summary = "producers and crashing consumers on one queue (lost, unexpected, stored duplicates)"

    async def start(self, stop: asyncio.Event) -> None:
        env = self.env
        self.consumers = [Consumer(f"c{i}", env.urls[i % len(env.urls)], env.history) for i in range(env.concurrency)]
        if not env.backlog:
            for consumer in self.consumers:
                await consumer.start(stop)

    async def before_drain(self, stop: asyncio.Event) -> None:
        # With a backlog, what a fault could lose is still waiting: a write the broker
        # acknowledged but did not keep (no fsync, say) shows as lost instead of having been
        # consumed before the fault struck.
        if self.env.backlog:
            for consumer in self.consumers:
                consumer.last_delivery = time.monotonic()
                await consumer.start(stop)

    def load(self, stop: asyncio.Event) -> list[Coroutine[Any, Any, None]]:
        env = self.env
        producers = [Producer(f"p{i}", env.urls[i % len(env.urls)], env.history, env.interval_s)
                     for i in range(env.concurrency)]
        return [*(p.run(stop) for p in producers), crash_some(self.consumers, random.Random(env.seed), stop)]

    @property
    def last_delivery(self) -> float:
        return max(c.last_delivery for c in self.consumers)

    async def close(self) -> None:
        for consumer in self.consumers:
            await consumer.close()

    @staticmethod
    def check(history: Iterable[Op]) -> QueueResult:
        return check_queue(history)


class Crashable(Protocol):
    def crash(self) -> None: ...


async def crash_some(consumers: Sequence[Crashable], rng: random.Random, stop: asyncio.Event,
                     every_s: float = 4.0) -> None:
    """Every `every_s`, with even odds, crash one of `consumers` (objects with `crash()`)."""
    while not stop.is_set():
        await asyncio.sleep(every_s)
        if consumers and rng.random() < 0.5:
            rng.choice(consumers).crash()


async def connect(url: str, stop: asyncio.Event, **options: Any) -> FailoverClient | None:
    """A failover client for `url`, retrying until connected or `stop`; extra `options` go to
    `connect_failover` (e.g. `connect_headers`)."""
    while not stop.is_set():
        try:
            return await connect_failover(url, **{**CLIENT_OPTIONS, **options})
        except ClientError:
            await asyncio.sleep(0.2)
    return None


def crash(client: FailoverClient | None) -> None:
    """Abort `client`'s connection without DISCONNECT (it reconnects as after a failure)."""
    if client is not None and client.stomp_client is not None:
        client.stomp_client.abort_connection("chaos: consumer crash")


def ack_quietly(client: FailoverClient, frame: Frame) -> None:
    try:
        client.ack_nowait(frame)
    except ClientError:
        pass  # closed meanwhile: the broker redelivers


async def close_quietly(client: FailoverClient) -> None:
    try:
        await client.close(timeout=5.0)
    except ClientError:
        pass


def node_of(client: FailoverClient) -> str | None:
    return None if client.address is None else str(client.address)
