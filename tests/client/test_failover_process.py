"""Failover across real `python -m raftmq node` processes killed with SIGKILL mid-stream.

A single node does not replicate, so these tests check the client, not durability: it moves to
the next node, every SEND ends with a RECEIPT or an error (none hangs), resent SENDs keep their
`_AMQ_DUPL_ID`, subscriptions come back, and exhausted attempts fail what is pending."""

from __future__ import annotations

import asyncio
import os
import re
import select
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import pytest

from raftmq import processes
from raftmq.client import Address, FailoverEvent, FailoverExhausted, connect, connect_failover
from raftmq.client.failover_outbox import new_dupl_id as _new_dupl_id
from raftmq.errors import ClientError
from raftmq.protocol.frame import Frame

pytestmark = pytest.mark.integration

TEST_TIMEOUT = 30.0
READY_TIMEOUT = 15.0
WINDOW = 100  # receipts in flight


class NodeProcess:
    """One node subprocess on a free loopback port, killed by pid."""

    def __init__(self) -> None:
        self.port = processes.free_port()
        self.address = Address("127.0.0.1", self.port)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "raftmq", "node", "--mqtt", "off",
             "--listen", f"127.0.0.1:{self.port}", "--in-memory"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )

    def wait_ready(self) -> None:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.proc.stdout], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                break
            line = self.proc.stdout.readline()
            if not line:
                break
            if line.startswith(f"raftmq node listening on 127.0.0.1:{self.port} "):
                return
        raise RuntimeError(f"node on port {self.port} not ready (exit code {self.proc.poll()})")

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


@pytest.fixture
def two_nodes() -> Iterator[tuple[NodeProcess, NodeProcess]]:
    started: list[NodeProcess] = []
    try:
        started = [NodeProcess(), NodeProcess()]  # both boot at once
        for node in started:
            node.wait_ready()
        yield started[0], started[1]
    finally:
        for node in started:
            node.kill()


def run(coro: Coroutine[Any, Any, Any]) -> Any:
    async def bounded() -> Any:
        async with asyncio.timeout(TEST_TIMEOUT):
            return await coro

    return asyncio.run(bounded())


def queue_name() -> str:
    return f"/queue/failover-{uuid.uuid4().hex[:10]}"


async def stream(
    client: Any,
    destination: str,
    total: int,
    on_sent: Callable[[int], None],
    on_done: Callable[[int, asyncio.Future[Frame | None]], None] | None = None,
) -> list[asyncio.Future[Frame | None]]:
    """Send `total` receipted messages with at most WINDOW receipts outstanding."""
    in_flight: set[asyncio.Future[Frame | None]] = set()
    futures = []
    for i in range(total):
        while len(in_flight) >= WINDOW:
            _, in_flight = await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
        future = client.send_nowait(destination, str(i).encode())
        in_flight.add(future)
        if on_done is not None:
            future.add_done_callback(lambda f, i=i: on_done(i, f))
        futures.append(future)
        on_sent(i)
    return futures


def test_kill_9_mid_stream_fails_over_resending_with_the_same_ids(two_nodes: tuple[NodeProcess, NodeProcess]) -> None:
    first, second = two_nodes
    total, kill_after = 1500, 400
    destination, watched = queue_name(), queue_name()

    async def scenario() -> None:
        assigned: list[str] = []

        def recording_ids() -> str:
            assigned.append(_new_dupl_id())
            return assigned[-1]

        url = f"failover:(stomp://{first.address},stomp://{second.address})?randomize=false&maxReconnectDelay=100"
        client = await connect_failover(url, dupl_id_factory=recording_ids)
        events: list[FailoverEvent] = []
        client.events.append(events.append)
        assert client.address == first.address
        subscription = client.subscribe(watched, id="watch", ack="client-individual")
        await subscription.receipt

        completed_on: dict[int, int] = {}  # message number -> connection whose RECEIPT completed it
        outstanding_at_kill: list[int] = []

        def on_sent(i: int) -> None:
            # Kill once past `kill_after` with a good part of the window still unreceipted.
            if i >= kill_after and not outstanding_at_kill and client.pending_sends >= WINDOW // 2:
                outstanding_at_kill.append(client.pending_sends)
                first.kill()

        def track(i: int, future: asyncio.Future[Frame | None]) -> None:
            if not future.cancelled() and future.exception() is None:
                completed_on[i] = client.connection_number

        futures = await stream(client, destination, total, on_sent, track)
        started = time.monotonic()
        outcomes = await asyncio.wait_for(asyncio.gather(*futures, return_exceptions=True), 15)
        assert time.monotonic() - started < 15
        await asyncio.sleep(0)  # the last tracking callbacks
        errors = [o for o in outcomes if isinstance(o, BaseException)]
        assert not errors, errors[:3]  # the second node is up: every SEND gets its RECEIPT
        assert all(isinstance(o, Frame) and o.command == "RECEIPT" for o in outcomes)
        assert outstanding_at_kill and outstanding_at_kill[0] >= WINDOW // 2

        kinds = [(e.kind, e.address) for e in events]
        assert ("disconnected", first.address) in kinds and ("connected", second.address) in kinds
        connected = next(e for e in events if e.kind == "connected")
        assert client.address == second.address and connected.group == 0
        resent = connected.resent
        assert resent, "SENDs without a RECEIPT at the kill must be written again"

        # What the second node stored: everything it acknowledged, each once, in send order,
        # each under the id the client gave it first.
        on_second = sorted(i for i, connection in completed_on.items() if connection == 2)
        assert len(completed_on) == total
        reader = await connect(second.address.host, second.address.port)
        stored = reader.subscribe(destination, ack="auto")
        received: list[Frame] = []
        for _ in range(len(on_second)):
            received.append(await asyncio.wait_for(stored.get(), 5))
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(stored.get(), 0.3)
        numbers = [int(frame.body) for frame in received]
        assert numbers == on_second
        for frame in received:
            dupl_id = frame.get("_AMQ_DUPL_ID")
            assert dupl_id is not None and re.fullmatch(r"raftmq-[0-9a-f]{32}-[0-9]+", dupl_id)
            assert dupl_id == assigned[int(frame.body)]
        assert set(resent) <= {frame.get("_AMQ_DUPL_ID") for frame in received}
        assert [assigned.index(dupl_id) for dupl_id in resent] == sorted(assigned.index(d) for d in resent)

        # The subscription came back on the second node under the same id.
        await client.send(watched, b"after failover")
        message = await asyncio.wait_for(subscription.get(), 5)
        assert message.body == b"after failover" and message.get("subscription") == "watch"
        assert message.connection == 2 and await client.ack(message, receipt=True) is True
        await reader.disconnect()
        await client.close()

    run(scenario())


def test_exhausted_reconnect_attempts_end_every_send_with_a_client_error(
    two_nodes: tuple[NodeProcess, NodeProcess],
) -> None:
    only, _ = two_nodes
    destination = queue_name()

    async def scenario() -> None:
        url = f"failover:(stomp://{only.address})?maxReconnectAttempts=3&initialReconnectDelay=20"
        client = await connect_failover(url)
        events: list[FailoverEvent] = []
        client.events.append(events.append)
        subscription = client.subscribe(destination, ack="client")

        def on_sent(i: int) -> None:
            if i == 200:
                only.kill()

        started = time.monotonic()
        futures = await stream(client, destination, 300, on_sent)
        outcomes = await asyncio.wait_for(asyncio.gather(*futures, return_exceptions=True), 10)
        receipts = [o for o in outcomes if isinstance(o, Frame)]
        failures = [o for o in outcomes if isinstance(o, BaseException)]
        assert len(receipts) + len(failures) == 300
        assert failures and all(isinstance(f, ClientError) for f in failures)
        assert all(r.command == "RECEIPT" for r in receipts)
        cause = await client.closed
        assert isinstance(cause, FailoverExhausted)
        # 3 attempts after waits of 20, 40 and 80 ms.
        assert [e.kind for e in events].count("attempt_failed") == 3
        assert time.monotonic() - started < 5
        with pytest.raises(ClientError):
            await subscription.get()
        with pytest.raises(ClientError):
            await client.send(destination, b"late")

    run(scenario())
