"""The `stale` workload: what a deposed leader still writes to its consumers. Producers (the queue
workload's, receipted) send to one queue; two kinds of consumer read it, client-individual ACK,
prefetch 50, each recording the `raftmq-term` of every frame it gets:

- plain consumers use stomp.py, an independent STOMP 1.2 client that knows nothing of terms.
  `b0`, `b1`, ... fail over by hand to the next member when a connection ends, heart-beating
  every 300 ms, so they leave a silent leader within a second and reach the new one; `m1`,
  `m2`, ... (one per member, always to that member) heart-beat not at all, so whichever member
  leads has a consumer that stays on its connection through any stall, as a client that never
  notices a silent broker would. Every CONNECTED is recorded (`connect` `ok` `{"term": T}`) as
  well as every MESSAGE: what they see is what any STOMP client would.
- raftmq's own failover clients (`c0`, `c1`, ...), every other one without heart-beats, which
  drop a MESSAGE from a term older than one they have seen (raftmq.client.terms); at the end
  each records how many it dropped (`floor` `ok` `{"dropped": N}`).

A deposed leader's frames can reach a client after the new leader's this way: the new leader
hands the unacknowledged deliveries of the old one's sessions to the consumers that came over,
while the old one, resumed, still holds its own consumers' connections.

A receive's value is `{"value": V, "term": T, "plain": bool}`; chaos.stale_checker judges the
history. Run it with the faults that stall a leader at arbitrary points: `--nemesis
pause,starve,stutter --target leader`.
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading
import time
from collections.abc import Coroutine, Iterable
from typing import Any

import stomp  # type: ignore[import-untyped]

from chaos.checker import QueueResult
from chaos.client import ACK_DELAY_S, Producer, ack_quietly, close_quietly, connect, node_of
from chaos.history import INFO, OK, History, Op
from chaos.stale_checker import check_stale
from chaos.workload import Workload
from raftmq.client.failover import FailoverClient
from raftmq.client.failover_url import Address, parse_failover_url
from raftmq.protocol.frame import TERM_HEADER, Frame

logging.getLogger("stomp.py").setLevel(logging.ERROR)  # not a line per heart-beat timeout in a run's output

DESTINATION = "/queue/stale"
PREFETCH = 50
HEARTBEAT_MS = 300
CONNECT_WAIT_S = 3.0


def _term(value: str | None) -> int:
    """A frame's `raftmq-term` header as a number (0 when it has none)."""
    return int(value) if value is not None and value.isdigit() else 0


class _Listener(stomp.ConnectionListener):  # type: ignore[misc]
    def __init__(self, consumer: PlainConsumer, address: str) -> None:
        self.consumer, self.address = consumer, address
        self.connected = threading.Event()
        self.gone = threading.Event()
        self.conn: Any = None

    def on_connected(self, frame: Any) -> None:
        self.consumer.history.record(self.consumer.name, OK, "connect", {"term": _term(frame.headers.get(TERM_HEADER))},
                                     node=self.address)
        self.connected.set()

    def on_message(self, frame: Any) -> None:
        consumer = self.consumer
        consumer.last_delivery = time.monotonic()
        value = {"value": frame.body if isinstance(frame.body, str) else frame.body.decode(errors="replace"),
                 "term": _term(frame.headers.get(TERM_HEADER)), "plain": True}
        consumer.history.record(consumer.name, OK, "receive", value, node=self.address,
                                redelivered=frame.headers.get("redelivered") == "true")
        try:
            self.conn.ack(frame.headers["ack"])
        except Exception:  # noqa: BLE001 - the connection went meanwhile: the broker redelivers
            pass

    def on_error(self, frame: Any) -> None:
        self.consumer.history.record(self.consumer.name, INFO, "error", frame.headers.get("message", ""),
                                     node=self.address)

    def on_disconnected(self) -> None:
        self.gone.set()


class PlainConsumer:
    """A stomp.py consumer in a thread of its own, connecting to each member in turn."""

    def __init__(self, name: str, addresses: list[Address], history: History, seed: int,
                 heartbeat_ms: int = HEARTBEAT_MS) -> None:
        self.name, self.addresses, self.history, self.heartbeat_ms = name, addresses, history, heartbeat_ms
        self.last_delivery = time.monotonic()
        self._next = random.Random(seed).randrange(len(self.addresses))
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"plain-{name}", daemon=True)
        self._conn: Any = None

    @property
    def subscribed(self) -> bool:
        return self._conn is not None

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._halt.is_set():
            address = self.addresses[self._next % len(self.addresses)]
            self._next += 1
            listener = _Listener(self, f"{address.host}:{address.port}")
            conn = listener.conn = stomp.Connection12([(address.host, address.port)],
                                                      heartbeats=(self.heartbeat_ms, self.heartbeat_ms),
                                                      reconnect_attempts_max=1, timeout=CONNECT_WAIT_S)
            conn.set_listener("chaos", listener)
            try:
                conn.connect(wait=False)
                if listener.connected.wait(CONNECT_WAIT_S):
                    self._conn = conn
                    conn.subscribe(DESTINATION, id="1", ack="client-individual",
                                   headers={"activemq.prefetchSize": str(PREFETCH)})
                    while not self._halt.is_set() and not listener.gone.wait(0.1):
                        pass
            except Exception:  # noqa: BLE001 - refused or broken: the next member
                pass
            self._conn = None
            self._quietly(conn.disconnect)
            if not self._halt.is_set() and not listener.connected.is_set():
                self._halt.wait(0.2)

    @staticmethod
    def _quietly(call: Any) -> None:
        try:
            call()
        except Exception:  # noqa: BLE001
            pass

    async def close(self) -> None:
        self._halt.set()
        await asyncio.to_thread(self._thread.join, 10)


class OwnConsumer:
    """raftmq's failover client, with its term floor."""

    def __init__(self, name: str, url: str, history: History, heartbeat_ms: int = HEARTBEAT_MS) -> None:
        self.name, self.url, self.history, self.heartbeat_ms = name, url, history, heartbeat_ms
        self.client: FailoverClient | None = None
        self.last_delivery = time.monotonic()

    async def start(self, stop: asyncio.Event) -> None:
        self.client = client = await connect(self.url, stop, heartbeat=(self.heartbeat_ms, self.heartbeat_ms))
        if client is None:
            return
        loop = asyncio.get_running_loop()

        def on_message(frame: Frame) -> None:
            self.last_delivery = time.monotonic()
            value = {"value": frame.body.decode(errors="replace"), "term": _term(frame.get(TERM_HEADER)),
                     "plain": False}
            self.history.record(self.name, OK, "receive", value, node=node_of(client),
                                redelivered=frame.get("redelivered") == "true")
            loop.call_later(ACK_DELAY_S, ack_quietly, client, frame)

        client.subscribe(DESTINATION, ack="client-individual", prefetch=PREFETCH, callback=on_message)

    async def close(self) -> None:
        if self.client is not None:
            self.history.record(self.name, OK, "floor", {"dropped": self.client.terms.dropped})
            await close_quietly(self.client)


class StaleWorkload(Workload):
    """Receipted producers on one queue; plain (stomp.py) and raftmq consumers, prefetch 50."""

    name = "stale"
    summary = "plain and raftmq consumers of a leader stalled at any point (stale deliveries, lost, duplicates)"

    async def start(self, stop: asyncio.Event) -> None:
        env = self.env
        urls = env.urls
        members = [address for url in urls for group in parse_failover_url(url).groups for address in group]
        self.plain = [PlainConsumer(f"b{i}", members, env.history, env.seed + i) for i in range(env.concurrency)]
        self.plain += [PlainConsumer(f"m{i + 1}", [member], env.history, 0, heartbeat_ms=0)
                       for i, member in enumerate(members)]
        self.own = [OwnConsumer(f"c{i}", urls[i % len(urls)], env.history, HEARTBEAT_MS if i % 2 == 0 else 0)
                    for i in range(env.concurrency)]
        for consumer in self.plain:
            consumer.start()
        for own in self.own:
            await own.start(stop)
        deadline = time.monotonic() + 10  # the plain consumers subscribed before the first send
        while time.monotonic() < deadline and not all(c.subscribed for c in self.plain):
            await asyncio.sleep(0.05)

    def load(self, stop: asyncio.Event) -> list[Coroutine[Any, Any, None]]:
        env = self.env
        return [Producer(f"p{i}", env.urls[i % len(env.urls)], env.history, env.interval_s, DESTINATION).run(stop)
                for i in range(env.concurrency)]

    @property
    def last_delivery(self) -> float:
        return max([c.last_delivery for c in self.plain] + [c.last_delivery for c in self.own])

    async def close(self) -> None:
        for plain in self.plain:
            await plain.close()
        for own in self.own:
            await own.close()

    @staticmethod
    def check(history: Iterable[Op]) -> QueueResult:
        return check_stale(history)
