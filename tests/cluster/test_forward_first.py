"""Forward first, end to end: a SEND the balancing sends to another group goes to that group's
leader before it is stored anywhere, and falls back to store-and-forward, exactly once, when
the link or the target fails (single-node groups as real processes on 127.0.0.1)."""

from __future__ import annotations

import asyncio
import signal
import time
from collections import Counter
from typing import Any

import pytest

from raftmq.client import StompClient
from tests.cluster.test_cluster_connections import consume
from tests.helpers.cluster_harness import Cluster, sync, wait_for

pytestmark = pytest.mark.integration



@pytest.fixture
def cluster(three_groups: Cluster) -> Cluster:
    return three_groups


def first_counts(cluster: Cluster, group: str) -> tuple[int, int, int]:
    """(forwarded first, fell back, stored for the store-and-forward queue to g3) on `group`'s leader."""
    status = cluster.cluster_status(group) or {}
    return (int(status.get("forwarded_first", -1)), int(status.get("fell_back", -1)),
            int(status.get("forwarded", {}).get("g3", 0)))


async def subscribed_on_g3(cluster: Cluster, consumer: StompClient, destination: str, count: int,
                           timeout: float) -> asyncio.Future[list[Any]]:
    got = asyncio.ensure_future(consume(consumer, destination, count, timeout))
    assert await wait_for(lambda: destination in (cluster.cluster_status("g1") or {}).get("bindings", {}), 10)
    return got


@sync
async def test_a_send_for_g3_is_stored_only_there_and_receipted_once_g3_has_it(cluster: Cluster) -> None:
    consumer = await cluster.client("g3")
    producer = await cluster.client("g1")
    try:
        got_task = await subscribed_on_g3(cluster, consumer, "/queue/first", 300, 30)
        for index in range(300):
            await producer.send("/queue/first", f"m{index}".encode(), receipt=True)
        got = await got_task
        bodies = Counter(frame.body for frame in got)
        assert len(bodies) == 300 and set(bodies.values()) == {1}
        assert all(not name.startswith("_raftmq_") for frame in got for name, _ in frame.headers)
        # Every SEND went first; none was stored in g1's store-and-forward queue.
        assert first_counts(cluster, "g1") == (300, 0, 0)
        assert cluster.queue_depths("/queue/first").get("g1", 0) == 0
    finally:
        await consumer.disconnect()
        await producer.disconnect()


@sync
async def test_a_send_while_the_link_is_down_takes_the_store_path_and_arrives_once(cluster: Cluster) -> None:
    consumer = await cluster.client("g3")
    producer = await cluster.client("g1")
    g3 = cluster.groups["g3"]
    node = next(iter(g3.members))
    try:
        got_task = await subscribed_on_g3(cluster, consumer, "/queue/later", 60, 40)
        g3.signal(node, signal.SIGSTOP)
        assert await wait_for(lambda: any(link["to"] == "g3" and link["state"] != "connected"
                                          for link in (cluster.cluster_status("g1") or {}).get("links", [])), 10)
        started = time.monotonic()
        for index in range(60):
            await producer.send("/queue/later", f"m{index}".encode(), receipt=True)
        assert time.monotonic() - started < 10  # receipted by g1's majority, not held for g3
        forwarded_first, fell_back, stored = first_counts(cluster, "g1")
        assert (forwarded_first, fell_back) == (0, 0) and stored == 60
        g3.signal(node, signal.SIGCONT)
        got = await got_task
        bodies = Counter(frame.body for frame in got)
        assert len(bodies) == 60 and set(bodies.values()) == {1}
    finally:
        g3.signal(node, signal.SIGCONT)
        await consumer.disconnect()
        await producer.disconnect()


@sync
async def test_forwards_cut_off_in_flight_fall_back_and_are_stored_once(cluster: Cluster) -> None:
    """g3 stops (SIGSTOP) while SENDs forwarded first are on their way: they are not confirmed,
    take the store path in g1 (the producer's RECEIPTs come from there), and when g3 runs again
    the copies it had read already and the store path's are one message each."""
    consumer = await cluster.client("g3")
    producer = await cluster.client("g1")
    g3 = cluster.groups["g3"]
    node = next(iter(g3.members))
    total = 2000
    try:
        got_task = await subscribed_on_g3(cluster, consumer, "/queue/cut", total, 60)
        receipts = [producer.send_nowait("/queue/cut", f"m{index}".encode(), receipt=True)
                    for index in range(total // 2)]
        await asyncio.sleep(0.01)
        g3.signal(node, signal.SIGSTOP)
        receipts += [producer.send_nowait("/queue/cut", f"m{index}".encode(), receipt=True)
                     for index in range(total // 2, total)]
        done = await asyncio.wait_for(asyncio.gather(*[r for r in receipts if r is not None]), 30)
        assert len(done) == total  # every SEND receipted while g3 was stopped
        forwarded_first, fell_back, _ = first_counts(cluster, "g1")
        assert fell_back > 0, (forwarded_first, fell_back)
        g3.signal(node, signal.SIGCONT)
        got = await got_task
        bodies = Counter(frame.body for frame in got)
        assert len(bodies) == total and set(bodies.values()) == {1}
        await asyncio.sleep(1.0)  # nothing more arrives: a duplicate would be left for the next look
        assert sum(cluster.queue_depths("/queue/cut").values()) == 0
    finally:
        g3.signal(node, signal.SIGCONT)
        await consumer.disconnect()
        await producer.disconnect()


@sync
async def test_a_pipelining_producer_goes_first_once_the_route_exists(cluster: Cluster) -> None:
    """Its first SENDs are stored in g1 (nobody consumes yet), and there are always some of them
    waiting for the log while it pipelines: once g3 has a consumer, its SENDs still go first
    (each waits for those before it), rather than staying on the store path for ever."""
    consumer = await cluster.client("g3")
    producer = await cluster.client("g1")
    got: list[Any] = []

    def on_message(frame: Any) -> None:
        got.append(frame)
        consumer.ack_nowait(frame)

    try:
        window: list[Any] = []  # 100 receipts in flight, as `raftmq bench` keeps them
        route: asyncio.Task[bool] | None = None
        known_at: int | None = None  # SENDs made when g1 knew of g3's consumer
        index = 0
        # At least 3,000, and 1,500 after g1 knew of the consumer (how soon it learns depends on
        # the machine's load), at most 12,000.
        while index < 3000 or known_at is None or index < known_at + 1500:
            window.append(producer.send_nowait("/queue/piped", f"m{index}".encode(), receipt=True))
            index += 1
            if len(window) >= 100:
                await asyncio.wait_for(window.pop(0), 30)
            if index == 300:
                consumer.subscribe("/queue/piped", ack="client-individual", callback=on_message)
                route = asyncio.ensure_future(wait_for(
                    lambda: "/queue/piped" in (cluster.cluster_status("g1") or {}).get("bindings", {}), 20))
            if known_at is None and route is not None and route.done():
                assert route.result(), "g1 never learned of g3's consumer"
                known_at = index
            if index >= 12_000:
                break
        await asyncio.wait_for(asyncio.gather(*window), 30)
        assert known_at is not None
        total = index
        assert await wait_for(lambda: len(got) >= total, 60), (len(got), total)
        bodies = Counter(frame.body for frame in got)
        assert len(bodies) == total and set(bodies.values()) == {1}
        forwarded_first, fell_back, _ = first_counts(cluster, "g1")
        # Stuck on the store path (the bug) forwards almost none first. Of the SENDs made after g1
        # knew of the consumer, all but those behind the ones stored before go first (alone: more
        # than half of all 3,000; under the whole suite's load 994 of 3,000 once, with g1 learning late).
        assert forwarded_first > (total - known_at) // 2, (forwarded_first, fell_back, known_at, total)
    finally:
        await consumer.disconnect()
        await producer.disconnect()
