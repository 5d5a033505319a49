"""SIGSTOP the leader past the election timeout: while paused it acknowledges and dispatches
nothing; after SIGCONT it steps down, tells its clients where the leader is, and the group has
one leader."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import pytest
from group_harness import Group, body_for, connect_leader, drain_queue

from raftmq.client import connect
from raftmq.errors import BrokerRefused

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
            consumer.subscribe(destination, ack="client-individual", callback=lambda f: got.append(f.get("_AMQ_DUPL_ID")))
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


def new_leader(statuses: dict) -> str:
    return next(i for i, s in statuses.items() if s["role"] == "leader")
