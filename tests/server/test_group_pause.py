"""SIGSTOP the leader past the election timeout: while paused it acknowledges and dispatches
nothing; after SIGCONT it steps down, tells its clients where the leader is, and the group has
one leader."""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from pathlib import Path

import pytest

from raftmq.client import connect
from raftmq.errors import BrokerRefused
from tests.helpers.group_harness import Group, body_for, connect_leader, drain_queue
from tests.helpers.stomp_raw import RawClient, RawFrame, frame_bytes

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]


def test_paused_leader_acknowledges_and_dispatches_nothing_then_steps_down(tmp_path: Path) -> None:
    group = Group(tmp_path)
    try:
        group.start()
        old = group.leader()
        others = tuple(i for i in group.members if i != old)
        destination = "/queue/paused"

        async def scenario() -> None:
            # A consumer and a producer on the leader, both working before the pause.
            consumer = await connect("127.0.0.1", group.members[old].client_port)
            got: list[str] = []
            consumer.subscribe(destination, ack="client-individual",
                               callback=lambda f: got.append(f.get("_AMQ_DUPL_ID")))
            producer = await connect("127.0.0.1", group.members[old].client_port)
            await producer.send(destination, body_for("before"), [("_AMQ_DUPL_ID", "before")], receipt=True)
            deadline = time.monotonic() + 5
            while got != ["before"] and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            assert got == ["before"]  # in flight to this consumer, never acked

            group.signal(old, signal.SIGSTOP)
            paused_at = time.monotonic()
            # Sent to the paused leader: the kernel buffers it; nothing may acknowledge it.
            during = producer.send_nowait(destination, body_for("paused"), [("_AMQ_DUPL_ID", "paused")], receipt=True)
            assert during is not None
            new = await asyncio.to_thread(group.leader, others, 10.0)
            # Traffic on the new leader; the paused leader's consumer must see none of it.
            fresh = await connect_leader(group.client_addresses())
            for i in range(20):
                await fresh.send(destination, body_for(f"new-{i}"), [("_AMQ_DUPL_ID", f"new-{i}")], receipt=True)
            await asyncio.sleep(max(0.0, paused_at + 1.0 - time.monotonic()))  # well past the election timeout
            assert not during.done() and got == ["before"]

            group.signal(old, signal.SIGCONT)
            # It steps down and closes its clients with an ERROR naming the new leader.
            cause = await asyncio.wait_for(producer.closed, 5)
            await asyncio.wait_for(consumer.closed, 5)
            assert isinstance(cause, BrokerRefused), cause
            assert cause.headers.get("leader") == group.members[new].client, cause.headers
            assert during.done() and during.exception() is not None  # never a receipt
            assert got == ["before"], "the deposed leader dispatched"
            await fresh.disconnect()
            status = await asyncio.to_thread(group.leader, None, 10.0)
            assert status == new

        asyncio.run(scenario())
        statuses = {i: group.status(i) for i in group.members}
        assert [i for i, s in statuses.items() if s["role"] == "leader"] == [new_leader(statuses)]
        assert statuses[old]["role"] == "follower" and len({s["term"] for s in statuses.values()}) == 1
        # Nothing was lost or invented: "before" (returned to the queue when the new leader
        # disconnected the old leader's sessions, so redelivered) and the 20 sent meanwhile.
        delivered = asyncio.run(drain_queue(group.client_addresses(), destination))
        ids = sorted(message_id for message_id, _body, _headers in delivered)
        assert ids == sorted(["before"] + [f"new-{i}" for i in range(20)]), ids
        before = next(headers for message_id, _body, headers in delivered if message_id == "before")
        assert before.get("redelivered") == "true"
    finally:
        group.close()


class Consumer:
    """A raw-socket consumer that acks each MESSAGE (client-individual) in its own thread."""

    def __init__(self, address: tuple[str, int], destination: str) -> None:
        self.client = RawClient(address)
        self.client.connect()
        self.client.send(frame_bytes("SUBSCRIBE", {"id": "s", "destination": destination, "ack": "client-individual",
                                                   "activemq.prefetchSize": "20"}))
        self.received = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                frame = self.client.read_frame(timeout=0.05)
            except (TimeoutError, OSError):
                if self.client.closed:
                    return
                continue
            if frame.command == "MESSAGE":
                self.received += 1
                self.client.send(frame_bytes("ACK", {"id": frame.headers["ack"]}))


class Producer:
    """Pipelines SENDs with receipts from its own thread, never waiting for them, and reads the
    receipts as they come: left unread, they fill the socket's buffers, and the leader holds the
    rest in its transport's buffer, written before the pause and sent only once it goes on (the
    test could not tell those from what a resumed leader writes)."""

    def __init__(self, address: tuple[str, int], destination: str, prefix: str) -> None:
        self.client = RawClient(address)
        self.client.connect()
        self.destination, self.prefix, self.sent = destination, prefix, 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set() and self.sent < 20_000:
            headers = {"destination": self.destination, "receipt": f"{self.prefix}-{self.sent}", "persistent": "true",
                       "_AMQ_DUPL_ID": f"{self.prefix}-{self.sent}"}
            try:
                self.client.send(frame_bytes("SEND", headers, b"x" * 200))
            except OSError:
                return
            self.sent += 1
            if self.sent % 20 == 0:
                time.sleep(0.002)  # keep a steady stream, not one burst the kernel buffers
                self._read_receipts()

    def _read_receipts(self) -> None:
        while not self.client.closed:
            try:
                self.client.read_frame(timeout=0.001)
            except (TimeoutError, OSError):
                return


def drain(client: RawClient, quiet: float = 0.3, limit: float = 5.0) -> list[RawFrame]:
    """Every frame the socket delivers until it stays quiet for `quiet` seconds."""
    frames: list[RawFrame] = []
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline and not client.closed:
        try:
            frames.append(client.read_frame(timeout=quiet))
        except TimeoutError:
            break
    return frames


def test_a_resumed_leader_writes_no_delivery_and_no_receipt(tmp_path: Path) -> None:
    # Under load, SIGSTOP the leader past the election timeout, then SIGCONT. Whatever it wrote
    # before the pause is read off its sockets while it is stopped; anything that arrives after
    # SIGCONT was written by a leader whose leadership had already passed to another member
    # (deliveries the new leader has since redelivered, receipts it never had to give). Without
    # the lease the stale writes showed in most pauses (13 of 18); three pauses in a row here.
    group = Group(tmp_path)
    try:
        group.start()
        stale: list[tuple[int, str, dict[str, str]]] = []
        for cycle in range(3):
            old = group.leader(timeout=15.0)
            address = ("127.0.0.1", group.members[old].client_port)
            destination = f"/queue/resumed-{cycle}"
            consumers = [Consumer(address, destination) for _ in range(2)]
            producer = Producer(address, destination, f"c{cycle}")
            deadline = time.monotonic() + 10
            while sum(c.received for c in consumers) < 300 and time.monotonic() < deadline:
                time.sleep(0.01)
            assert sum(c.received for c in consumers) >= 300, "no traffic flowed before the pause"
            for worker in (producer, *consumers):
                worker.stop.set()
            group.signal(old, signal.SIGSTOP)
            paused_at = time.monotonic()
            for worker in (producer, *consumers):
                worker.thread.join(5)
            clients = [producer.client] + [c.client for c in consumers]
            for client in clients:
                drain(client)  # written before the pause
            group.leader(tuple(i for i in group.members if i != old), timeout=10.0)
            time.sleep(max(0.0, paused_at + 1.0 - time.monotonic()))
            for client in clients:
                drain(client, quiet=0.1)
            group.signal(old, signal.SIGCONT)
            for client in clients:
                stale += [(cycle, f.command, f.headers) for f in drain(client, quiet=2.0, limit=8.0)
                          if f.command in ("MESSAGE", "RECEIPT")]
                client.close()
        assert not stale, f"{len(stale)} frames written after the leadership had passed, e.g. {stale[:3]}"
    finally:
        group.close()


def new_leader(statuses: dict) -> str:
    return next(i for i, s in statuses.items() if s["role"] == "leader")
