"""A follower that was down through heavy traffic and many compactions catches up (by a
snapshot install, fetching the bodies it references from a peer); a corrupted body segment
is detected: the member refuses to start, naming the file."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

from raftmq.errors import BrokerRefused
from tests.helpers.group_harness import Group, Producer, body_for, connect_leader, drain_queue

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

SIZE = 700


async def consume_some(addresses: list[tuple[str, int]], destination: str, count: int) -> list[str]:
    """Consume and ack `count` messages, one ACK with a receipt at the end."""
    client = await connect_leader(addresses)
    subscription = client.subscribe(destination, ack="client-individual", prefetch=200)
    ids = []
    for _ in range(count):
        frame = await asyncio.wait_for(subscription.get(), 10)
        ids.append(frame.get("_AMQ_DUPL_ID"))
        client.ack_nowait(frame)
    await client.disconnect(timeout=10)
    return ids


def test_lagging_follower_catches_up_by_snapshot_and_corruption_is_detected(tmp_path: Path) -> None:
    # Longer election timeouts: this is about catching up, and with one member down a leader that
    # the loaded machine starves for 300 ms loses its leadership, which the consumer below would
    # see as `not the leader` (failed once in five suite runs on four workers).
    group = Group(
        tmp_path,
        raft={"compact_after_bytes": 64 * 1024,  # a snapshot every few entries
              "election_timeout_min_ms": 1500, "election_timeout_max_ms": 3000},
        journal={"segment_bytes": 64 * 1024, "body_cache_bytes": 1024 * 1024},
    )
    try:
        group.start()
        leader = group.leader()
        lagging = next(i for i in group.members if i != leader)
        group.kill(lagging)
        addresses = group.client_addresses()
        destination = "/queue/catchup"

        # Heavy traffic while it is down: 4000 messages in, 2500 consumed (acked) in between.
        producer = Producer(addresses, destination, "c", count=4000, window=100, size=SIZE)

        async def traffic() -> list[str]:
            produce = asyncio.create_task(producer.run(timeout=40))
            while len(producer.receipted) < 1500:
                await asyncio.sleep(0.01)
            consumed = await consume_some(addresses, destination, 2500)
            await produce
            return consumed

        consumed = asyncio.run(traffic())
        assert producer.receipted == set(producer.ids), producer.errors[-3:]
        before = group.status(leader)
        assert before["raft"]["journal_first_index"] > 50, "the leader never compacted"
        assert before["bodies"]["segments_deleted"] > 0, "no body segment was ever released"

        # The follower comes back: far behind the leader's first entry, so only a snapshot
        # (whose references it resolves by fetching the bodies from a peer) brings it up to date.
        group.start(lagging)
        target = group.status(leader)["applied_index"]
        caught_up = group.wait_applied(lagging, target, timeout=20)
        assert "node.bodies_fetched" in group.members[lagging].stderr()
        assert caught_up["bodies"]["missing_indexes"] == 0
        leader_queue = group.status(leader)["broker"]["destinations"][destination]
        assert caught_up["broker"]["destinations"][destination] == leader_queue
        assert leader_queue["depth"] == 4000 - 2500
        verified = group.status(lagging, verify=True)["verify"]
        assert verified == {"references": 1500, "unreadable": 0}

        # The group still has every message, whoever leads next.
        group.kill(leader)
        group.leader(timeout=10)
        delivered = asyncio.run(drain_queue(addresses, destination))
        remaining = sorted(set(producer.ids) - set(consumed))
        assert sorted(message_id for message_id, _body, _headers in delivered) == remaining
        assert all(body == body_for(message_id, SIZE) for message_id, body, _headers in delivered)

        # With receipts (and the producer's failover): under load the two-member group can
        # change leaders here, and a SEND the broker never confirmed may rightly be gone.
        late = Producer(addresses, destination, "late", count=100, window=20, size=SIZE)
        asyncio.run(late.run(timeout=30))
        assert late.receipted == set(late.ids), late.errors[-3:]
        # Its segments must hold the late batch too before it is stopped (else one segment).
        group.wait_applied(lagging, group.status(group.leader(timeout=10))["applied_index"])

        # Corrupt one byte inside a body segment of the caught-up member (a segment followed
        # by another, so it cannot pass for a torn tail): it must refuse to start, naming it.
        group.kill(lagging)
        segments = sorted((group.data_dir / lagging / "bodies").glob("*.seg"))
        assert len(segments) >= 2, segments
        victim = segments[0]
        data = bytearray(victim.read_bytes())
        data[60] ^= 0xFF  # inside the first batch's lz4 frame
        victim.write_bytes(bytes(data))
        group.start(lagging, wait=False)
        code = group.wait_exit(lagging, timeout=20)
        stderr = group.members[lagging].stderr()
        last_line = stderr.strip().splitlines()[-1]
        assert code != 0
        assert str(victim) in last_line and "refusing to start" in last_line, stderr[-2000:]
        assert "Traceback" not in stderr

        # As the message says: without its data directory the member resyncs from its peers.
        shutil.rmtree(group.data_dir / lagging)
        group.start(lagging)
        survivor = group.leader(timeout=10)
        replaced = group.wait_applied(lagging, group.status(survivor)["applied_index"])
        assert replaced["broker"]["destinations"][destination]["depth"] == 100
        assert group.status(lagging, verify=True)["verify"] == {"references": 100, "unreadable": 0}
    finally:
        group.close()


def test_concurrent_corruption_is_never_served(tmp_path: Path) -> None:
    """A body that goes bad on disk while the member runs (after the cache forgot it) fails
    its checksum on read: `verify` reports it, and it is never delivered from that member."""
    group = Group(tmp_path, size=1, journal={"segment_bytes": 32 * 1024, "body_cache_bytes": 4096, "cache_bytes": 4096})
    try:
        group.start()
        addresses = group.client_addresses()

        async def send() -> None:
            client = await connect_leader(addresses)
            for i in range(200):
                client.send_nowait("/queue/rot", body_for(f"r-{i}", SIZE), [("_AMQ_DUPL_ID", f"r-{i}")])
            await client.disconnect()

        asyncio.run(send())
        assert group.status("n1", verify=True)["verify"] == {"references": 200, "unreadable": 0}
        segments = sorted((group.data_dir / "n1" / "bodies").glob("*.seg"))
        assert len(segments) >= 2
        data = bytearray(segments[0].read_bytes())
        data[60] ^= 0xFF
        segments[0].write_bytes(bytes(data))
        verified = group.status("n1", verify=True)["verify"]
        assert verified["references"] == 200 and verified["unreadable"] > 0

        async def consume() -> tuple[list[tuple[str, bytes]], BaseException | None]:
            client = await connect_leader(addresses)
            got: list[tuple[str, bytes]] = []
            client.subscribe("/queue/rot", ack="client-individual", prefetch=500,
                             callback=lambda f: got.append((f.get("_AMQ_DUPL_ID"), f.body)))
            cause = await asyncio.wait_for(client.closed, 10)
            return got, cause

        delivered, cause = asyncio.run(consume())
        assert isinstance(cause, BrokerRefused) and cause.headers["message"] == "message body unavailable"
        for message_id, body in delivered:
            assert body == body_for(message_id, SIZE)  # whatever is served is intact
        assert len(delivered) < 200
        status = group.status("n1")
        assert status["body_failures"] > 0
        assert "node.body_unavailable" in group.members["n1"].stderr()
    finally:
        group.close()
