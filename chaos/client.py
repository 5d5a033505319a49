"""The `queue` workload's clients: producers and consumers on independent connections that
fail over like real clients (raftmq's failover client), each recording what it does.

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
from typing import Any

from chaos.history import FAIL, INFO, INVOKE, OK, History
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
    def __init__(self, name: str, url: str, history: History, interval_s: float) -> None:
        self.name, self.url, self.history, self.interval_s = name, url, history, interval_s
        self.seq = 0

    async def run(self, stop: asyncio.Event) -> None:
        client = await _connect(self.url, stop)
        if client is None:
            return
        try:
            while not stop.is_set():
                value = f"{self.name}-{self.seq}"
                self.seq += 1
                self.history.record(self.name, INVOKE, "send", value)
                try:
                    await client.send(DESTINATION, value.encode(), [("_AMQ_DUPL_ID", value)], receipt=True)
                except BrokerRefused as exc:
                    self.history.record(self.name, FAIL, "send", value, error=str(exc))
                except ClientError as exc:
                    self.history.record(self.name, INFO, "send", value, error=str(exc))
                else:
                    self.history.record(self.name, OK, "send", value, node=_node(client))
                await asyncio.sleep(self.interval_s)
        finally:
            await _close(client)


class Consumer:
    def __init__(self, name: str, url: str, history: History) -> None:
        self.name, self.url, self.history = name, url, history
        self.client: FailoverClient | None = None
        self.last_delivery = time.monotonic()

    async def start(self, stop: asyncio.Event) -> bool:
        self.client = client = await _connect(self.url, stop)
        if client is None:
            return False
        loop = asyncio.get_running_loop()

        def on_message(frame: Frame) -> None:
            self.last_delivery = time.monotonic()
            self.history.record(self.name, OK, "receive", frame.body.decode(errors="replace"), node=_node(client),
                                redelivered=frame.get("redelivered") == "true")
            loop.call_later(ACK_DELAY_S, _ack, client, frame)

        client.subscribe(DESTINATION, ack="client-individual", prefetch=10, callback=on_message)
        return True

    def crash(self) -> None:
        """Drop the connection as a crashing process would: unacknowledged deliveries go back."""
        client = self.client
        if client is not None and client.stomp_client is not None:
            client.stomp_client.abort_connection("chaos: consumer crash")

    async def close(self) -> None:
        if self.client is not None:
            await _close(self.client)


async def crash_some(consumers: list[Consumer], rng: random.Random, stop: asyncio.Event, every_s: float = 4.0) -> None:
    while not stop.is_set():
        await asyncio.sleep(every_s)
        if consumers and rng.random() < 0.5:
            rng.choice(consumers).crash()


async def _connect(url: str, stop: asyncio.Event) -> FailoverClient | None:
    while not stop.is_set():
        try:
            return await connect_failover(url, **CLIENT_OPTIONS)
        except ClientError:
            await asyncio.sleep(0.2)
    return None


def _ack(client: FailoverClient, frame: Frame) -> None:
    try:
        client.ack_nowait(frame)
    except ClientError:
        pass  # closed meanwhile: the broker redelivers


async def _close(client: FailoverClient) -> None:
    try:
        await client.close(timeout=5.0)
    except ClientError:
        pass


def _node(client: FailoverClient) -> str | None:
    return None if client.address is None else str(client.address)
