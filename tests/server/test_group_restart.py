"""Whole-group crashes and restarts: every receipted message survives kill -9 of all members;
a group of one member works and keeps its messages across restarts."""

from __future__ import annotations

import asyncio
import collections
import signal
import time
from pathlib import Path

import pytest

from tests.helpers.group_harness import Group, Producer, body_for, connect_leader, drain_queue

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]


def test_kill_all_members_mid_stream_keeps_every_receipted_message(tmp_path: Path) -> None:
    # A small compaction threshold, so the restart goes through snapshots and the body journal.
    group = Group(tmp_path, raft={"compact_after_bytes": 256 * 1024}, journal={"segment_bytes": 128 * 1024})
    try:
        group.start()
        group.leader()
        addresses = group.client_addresses()
        destination = "/queue/crash"
        producer = Producer(addresses, destination, "crash", count=100_000, window=50, size=512)

        async def stream_then_crash() -> None:
            task = asyncio.create_task(producer.run(timeout=30.0))
            deadline = time.monotonic() + 20
            while len(producer.receipted) < 3000 and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            assert len(producer.receipted) >= 3000, producer.errors[-3:]
            for node_id in group.members:  # as close together as a power cut allows
                group.signal(node_id, signal.SIGKILL)
            producer.stopped = True
            await task

        asyncio.run(stream_then_crash())
        for node_id in group.members:
            group.kill(node_id)
        receipted = set(producer.receipted)
        assert receipted and len(receipted) < len(producer.ids)
        for node_id in group.members:  # the restart goes through a snapshot on every member
            assert (group.data_dir / node_id / "raft" / "raft.snapshot").exists()

        group.start()
        leader = group.leader(timeout=15)
        stderr = "".join(m.stderr() for m in group.members.values())
        assert "Traceback" not in stderr, stderr[-3000:]
        delivered = asyncio.run(drain_queue(addresses, destination))
        counts = collections.Counter(message_id for message_id, _body, _headers in delivered)
        assert not [i for i, n in counts.items() if n > 1], "a message was stored twice"
        lost = receipted - set(counts)
        assert not lost, f"{len(lost)} receipted messages lost after the restart, e.g. {sorted(lost)[:5]}"
        assert all(body == body_for(message_id, 512) for message_id, body, _headers in delivered)
        assert group.status(leader)["broker"]["destinations"][destination]["depth"] == 0
    finally:
        group.close()


def test_group_of_one_serves_and_keeps_messages_across_restarts(tmp_path: Path) -> None:
    group = Group(tmp_path, size=1)
    try:
        group.start()
        assert group.leader() == "n1"
        addresses = group.client_addresses()

        async def send(prefix: str, count: int) -> None:
            client = await connect_leader(addresses)
            for i in range(count):
                await client.send("/queue/solo", body_for(f"{prefix}-{i}"), [("_AMQ_DUPL_ID", f"{prefix}-{i}")],
                                  receipt=True)
            await client.disconnect()

        asyncio.run(send("a", 30))
        group.signal("n1", signal.SIGTERM)  # graceful: nobody to hand over to
        assert group.wait_exit("n1") == 0
        group.start()
        asyncio.run(send("b", 20))
        group.kill("n1")  # and a crash
        group.start()
        group.leader()
        delivered = asyncio.run(drain_queue(addresses, "/queue/solo"))
        assert [message_id for message_id, _body, _headers in delivered] == [f"a-{i}" for i in range(30)] + [
            f"b-{i}" for i in range(20)
        ]
        status = group.status("n1")
        assert status["role"] == "leader" and status["raft"]["term"] >= 1 and status["failure"] is None
        assert "Traceback" not in group.members["n1"].stderr()
    finally:
        group.close()
