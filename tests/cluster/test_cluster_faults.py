"""Cluster connections under faults: groups of three real member processes; kill -9 a
leader mid-forwarding on either side of a link, or in the middle of a chain, or stop a whole
target group and start it again. In every case every receipted message reaches the consumer,
and a message seen twice is a redelivery (flagged), never a second stored copy."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from raftmq.client.failover import FailoverClient, connect_failover
from raftmq.protocol.frame import Frame
from tests.helpers.cluster_harness import Cluster, sync

pytestmark = pytest.mark.integration

COUNT = 600


@pytest.fixture
def clusters(tmp_path: Path) -> Iterator[list[Cluster]]:
    started: list[Cluster] = []
    yield started
    for cluster in started:
        cluster.close()


def start(clusters: list[Cluster], tmp_path: Path, groups: list[str], **connection: Any) -> Cluster:
    cluster = Cluster(tmp_path, groups, size=3, **connection)
    clusters.append(cluster)
    cluster.start()
    cluster.wait_links(timeout=40)
    return cluster


def url(cluster: Cluster, group: str) -> str:
    return "failover:(" + ",".join(f"stomp://{h}:{p}" for h, p in cluster.addresses(group)) + ")?randomize=false"


class Consumer:
    """A failover consumer acking each message; records (body, redelivered) per delivery."""

    def __init__(self) -> None:
        self.deliveries: list[tuple[bytes, bool]] = []
        self.client: FailoverClient | None = None

    async def start(self, target: str, destination: str) -> None:
        self.client = client = await connect_failover(target)

        def on_message(frame: Frame) -> None:
            self.deliveries.append((frame.body, frame.get("redelivered") == "true"))
            client.ack_nowait(frame)

        client.subscribe(destination, ack="client-individual", prefetch=50, callback=on_message)

    def check(self, sent: set[bytes]) -> None:
        """Everything sent arrived; a body seen again came back as a redelivery."""
        seen: set[bytes] = set()
        for body, redelivered in self.deliveries:
            assert body not in seen or redelivered, f"{body!r} delivered twice without the redelivered flag"
            seen.add(body)
        missing = sent - seen
        assert not missing, f"{len(missing)} receipted messages lost, e.g. {sorted(missing)[:5]}"
        assert seen <= sent, f"unexpected messages: {sorted(seen - sent)[:5]}"

    async def close(self) -> None:
        if self.client is not None:
            await self.client.close()


async def produce(target: str, destination: str, count: int, during: Any = None, at: int = 0) -> set[bytes]:
    """Send `count` messages with receipts, 50 in flight at a time, so forwards are under way
    when a fault strikes (the failover client resends what a broken connection left
    unconfirmed, with the same duplicate id); call `during()` once `at` of them are confirmed.
    Returns what was receipted."""
    client = await connect_failover(target)
    confirmed: set[bytes] = set()
    try:
        for start in range(0, count, 50):
            bodies = [f"m{index:05d}".encode() for index in range(start, min(start + 50, count))]
            futures = [client.send_nowait(destination, body, receipt=True) for body in bodies]
            for body, future in zip(bodies, futures, strict=True):
                await future
                confirmed.add(body)
            if during is not None and start < at <= start + 50:
                await asyncio.get_running_loop().run_in_executor(None, during)
    finally:
        await client.close()
    return confirmed


async def settle(consumer: Consumer, sent: set[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not sent <= {body for body, _ in consumer.deliveries}:
        await asyncio.sleep(0.1)


def kill_leader(cluster: Cluster, group: str) -> str:
    g = cluster.groups[group]
    leader = g.leader()
    g.kill(leader)
    return leader


async def kill_mid_forwarding(cluster: Cluster, consumer_group: str, victim: str, destination: str) -> None:
    """A consumer on `consumer_group`, a producer on g1; `victim`'s leader is killed a third of
    the way through; every receipted message must reach the consumer."""
    consumer = Consumer()
    await consumer.start(url(cluster, consumer_group), destination)
    await asyncio.sleep(1.5)  # the consumer is advertised to g1 (through g2 in a chain)
    sent = await produce(url(cluster, "g1"), destination, COUNT, during=lambda: kill_leader(cluster, victim),
                         at=COUNT // 3)
    try:
        await settle(consumer, sent, 60)
        consumer.check(sent)
    finally:
        await consumer.close()


@pytest.mark.parametrize("victim", ["g1", "g2"])  # the source's leader, the target's
@sync
async def test_a_leader_killed_mid_forwarding_loses_and_doubles_nothing(
        clusters: list[Cluster], tmp_path: Path, victim: str) -> None:
    cluster = start(clusters, tmp_path, ["g1", "g2"])
    await kill_mid_forwarding(cluster, "g2", victim, "/queue/faults")


@sync
async def test_the_middle_of_a_chain_losing_its_leader_loses_nothing(clusters: list[Cluster], tmp_path: Path) -> None:
    cluster = start(clusters, tmp_path, ["g1", "g2", "g3"], links="chain", max_hops=2)
    await kill_mid_forwarding(cluster, "g3", "g2", "/queue/chain")


@sync
async def test_a_stopped_target_group_gets_its_messages_once_it_is_back(clusters: list[Cluster],
                                                                         tmp_path: Path) -> None:
    cluster = start(clusters, tmp_path, ["g1", "g2"], retry_interval_ms=200, retry_interval_multiplier=2.0,
                    max_retry_interval_ms=2000)
    consumer = Consumer()
    await consumer.start(url(cluster, "g2"), "/queue/later")  # it keeps reconnecting while g2 is down
    await asyncio.sleep(1.0)
    g2 = cluster.groups["g2"]
    g2.close()  # every member: kill -9
    for node_id in g2.members:
        g2.wait_exit(node_id)
    sent = await produce(url(cluster, "g1"), "/queue/later", 200)
    link = (cluster.cluster_status("g1") or {})["links"][0]
    # g1 still routes to g2's consumer (g2 cannot say otherwise): the messages wait to be forwarded.
    assert link["state"] in ("retrying", "connecting") and link["waiting"] == 200
    observed: list[float] = []
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        status = cluster.cluster_status("g1") or {}
        retry_in = status["links"][0].get("retry_in_s") if status.get("links") else None
        if retry_in is not None:
            observed.append(retry_in)
        await asyncio.sleep(0.2)
    assert observed and max(observed) <= 2.0 + 0.5  # the back-off stops at max_retry_interval_ms
    g2.start()
    cluster.wait_links(timeout=40)
    try:
        await settle(consumer, sent, 60)
        consumer.check(sent)
    finally:
        await consumer.close()


@sync
async def test_a_bridge_in_a_long_back_off_retries_as_soon_as_its_neighbour_is_back(
        clusters: list[Cluster], tmp_path: Path) -> None:
    back_off = 8.0
    cluster = Cluster(tmp_path, ["g1", "g2"], size=1, retry_interval_ms=int(back_off * 1000),
                      retry_interval_multiplier=1.0, max_retry_interval_ms=int(back_off * 1000))
    clusters.append(cluster)
    cluster.start()
    cluster.wait_links(timeout=40)
    g2 = cluster.groups["g2"]
    g2.close()
    for node_id in g2.members:
        g2.wait_exit(node_id)
    deadline = time.monotonic() + 20
    link: dict[str, Any] = {}
    while time.monotonic() < deadline:  # g1's bridge has failed an attempt and waits out its back-off
        link = ((cluster.cluster_status("g1") or {}).get("links") or [{}])[0]
        if link.get("state") == "retrying" and (link.get("retry_in_s") or 0) > back_off / 2:
            break
        await asyncio.sleep(0.05)
    else:
        raise AssertionError(f"g1's bridge never waited in its back-off: {link}")
    g2.start()
    back = time.monotonic()
    cluster.wait_links(timeout=20)
    # Not at the end of the back-off: once g2's own bridge advertised to g1, g1 retried at once.
    assert time.monotonic() - back < back_off / 2
    assert (cluster.cluster_status("g1") or {})["links"][0]["retries_now"] >= 1


@pytest.mark.parametrize("victim", ["g1", "g2"])  # the passive source's leader, the pulling target's
@sync
async def test_a_leader_killed_mid_pull_over_a_one_connection_link_loses_and_doubles_nothing(
        clusters: list[Cluster], tmp_path: Path, victim: str) -> None:
    # g2 alone opens the link (a duplex network connector): g1's messages reach g2 only by
    # g2's bridge pulling them (raftmq.server.links.passive_link).
    cluster = start(clusters, tmp_path, ["g1", "g2"], network=[{"group": "g2", "to": "g1", "duplex": True}])
    await kill_mid_forwarding(cluster, "g2", victim, "/queue/pulled")


@sync
async def test_what_a_puller_took_but_its_group_never_committed_is_pulled_again(
        clusters: list[Cluster], tmp_path: Path) -> None:
    # g2's followers stop, so its leader (kept leading by a long fallback timeout) takes g1's
    # messages over the pull subscription and cannot commit them; it is then killed. A puller
    # that ACKed on receipt would lose them all; raftmq's ACKs only what g2 applied.
    cluster = start(clusters, tmp_path, ["g1", "g2"], network=[{"group": "g2", "to": "g1", "duplex": True}],
                    raft={"leader_fallback_timeout_ms": 15_000})
    consumer = Consumer()
    await consumer.start(url(cluster, "g2"), "/queue/stalled")
    await asyncio.sleep(1.5)  # the consumer is advertised to g1
    g2 = cluster.groups["g2"]
    leader = g2.leader()
    followers = [node for node in g2.members if node != leader]
    for node in followers:
        g2.signal(node, signal.SIGSTOP)
    try:
        sent = await produce(url(cluster, "g1"), "/queue/stalled", 300)
        await asyncio.sleep(1.5)  # pulled by g2's leader, not committable there
        g2.kill(leader)
    finally:
        for node in followers:
            g2.signal(node, signal.SIGCONT)
    try:
        await settle(consumer, sent, 60)
        consumer.check(sent)
    finally:
        await consumer.close()
