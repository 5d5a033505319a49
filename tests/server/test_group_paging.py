"""Paging in a real group (raftmq.core.paging with the body journal as the page store): a deep
queue's pages are records of the body journal, so a snapshot names them instead of holding
them; a member that restarts, or catches up from a snapshot (fetching pages from a peer like
bodies), serves the whole backlog in order, with stomp.py as the consumer."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import msgpack
import pytest
import stomp

from raftmq.core.snapshot import journal_indexes
from raftmq.replication.pysyncobj.snapshot_file import read_snapshot_file
from tests.helpers.group_harness import Group, Producer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

PAGE = 16
COUNT = 3000


class Collector(stomp.ConnectionListener):
    def __init__(self) -> None:
        self.ids: list[str] = []

    def on_message(self, frame: stomp.utils.Frame) -> None:
        self.ids.append(frame.headers.get("_AMQ_DUPL_ID", ""))


def consume_all(address: tuple[str, int], destination: str, expected: int, timeout: float = 60) -> list[str]:
    connection = stomp.Connection12([address], heartbeats=(0, 0))
    collector = Collector()
    connection.set_listener("c", collector)
    connection.connect(wait=True)
    try:
        connection.subscribe(destination, id="s", ack="auto")
        deadline = time.monotonic() + timeout
        while len(collector.ids) < expected and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.5)  # nothing more may come
    finally:
        connection.disconnect()
    return collector.ids


def test_a_paged_backlog_survives_restarts_and_snapshot_installs(tmp_path: Path) -> None:
    group = Group(
        tmp_path,
        core={"page_size": PAGE},
        raft={"compact_after_bytes": 256 * 1024},  # snapshots while the backlog grows
        journal={"segment_bytes": 256 * 1024},
    )
    try:
        group.start()
        leader = group.leader()
        lagging = next(i for i in group.members if i != leader)
        group.kill(lagging)
        addresses = group.client_addresses()
        destination = "/queue/deep"
        producer = Producer(addresses, destination, "d", count=COUNT, window=100, size=300)
        asyncio.run(producer.run(timeout=60))
        assert producer.receipted == set(producer.ids), producer.errors[-3:]

        # The leader's snapshot names pages in its body journal, not thousands of messages.
        status = group.status(leader)
        assert status["raft"]["journal_first_index"] > 10, "the leader never compacted"
        _last, _previous, _cluster, state = read_snapshot_file(str(group.data_dir / leader / "raft" / "raft.snapshot"))
        dump = msgpack.unpackb(state, raw=False)["broker"]
        (queue,) = [q for q in dump["queues"] if q["destination"] == destination]
        assert sum(len(lane) for lane in queue["lanes"]) <= 2 * PAGE
        pages = queue["tail"]["pages"]
        assert len(pages) > 50 and all(isinstance(page[3], list) for page in pages)  # (raft index, ordinal)
        assert {page[3][0] for page in pages} <= journal_indexes(dump)

        # The lagging member installs a snapshot and fetches the pages' records from a peer.
        group.start(lagging)
        caught_up = group.wait_applied(lagging, group.status(leader)["applied_index"], timeout=30)
        assert caught_up["bodies"]["missing_indexes"] == 0
        assert "node.bodies_fetched" in group.members[lagging].stderr()
        assert caught_up["broker"]["destinations"][destination]["depth"] == COUNT
        assert group.status(lagging, verify=True)["verify"] == {"references": COUNT, "unreadable": 0}

        # Every member restarts from its snapshot and journal; then the backlog is drained in order.
        for member in list(group.members):
            group.kill(member)
        for member in list(group.members):
            group.start(member, wait=False)
        new_leader = group.leader(timeout=30)
        assert group.status(new_leader)["broker"]["destinations"][destination]["depth"] == COUNT
        host, port = group.members[new_leader].client.split(":")
        got = consume_all((host, int(port)), destination, COUNT)
        assert got == producer.ids  # one producer, one queue: arrival order, each once
    finally:
        group.close()
