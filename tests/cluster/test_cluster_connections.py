"""Cluster connections end to end: single-node groups as real processes on 127.0.0.1, joined
by one [[cluster_connection]] (the fault tests use groups of three: test_cluster_faults.py)."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import stomp

from raftmq.client import StompClient
from tests.helpers.cluster_harness import Cluster, sync, wait_for

pytestmark = pytest.mark.integration

GROUPS = ["g1", "g2", "g3"]


@pytest.fixture
def make_cluster(tmp_path: Path) -> Iterator[Any]:
    started: list[Cluster] = []

    def make(groups: list[str] = GROUPS, **connection: Any) -> Cluster:
        cluster = Cluster(tmp_path / f"c{len(started)}", groups, **connection)
        started.append(cluster)
        cluster.start()
        cluster.wait_links()
        return cluster

    (tmp_path / "c0").mkdir()
    for i in range(1, 4):
        (tmp_path / f"c{i}").mkdir()
    yield make
    for cluster in started:
        cluster.close()


async def send_all(client: StompClient, destination: str, bodies: list[bytes], headers: Any = None) -> None:
    for index, body in enumerate(bodies):
        await client.send(destination, body, headers, receipt=index % 50 == 49 or index == len(bodies) - 1)


async def consume(client: StompClient, destination: str, count: int, timeout: float, selector: str | None = None,
                  **subscribe: Any) -> list[Any]:
    """Up to `count` MESSAGE frames (each acked) within `timeout`; any after them are left
    unacknowledged (they return to the queue when the client disconnects)."""
    got: list[Any] = []
    done = asyncio.Event()

    def on_message(frame: Any) -> None:
        if len(got) >= count:
            return
        got.append(frame)
        client.ack_nowait(frame)
        if len(got) >= count:
            done.set()

    headers = [("selector", selector)] if selector else None
    client.subscribe(destination, ack="client-individual", callback=on_message, headers=headers, **subscribe)
    try:
        await asyncio.wait_for(done.wait(), timeout)
    except TimeoutError:
        pass
    return got


def wait_bindings(cluster: Cluster, group: str, destination: str, timeout: float = 10.0) -> None:
    """Until `group`'s leader knows `destination` somewhere else (an advert arrived)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = cluster.cluster_status(group)
        if status and destination in status.get("bindings", {}):
            return
        time.sleep(0.05)
    raise AssertionError(f"{group} never learned of {destination}: {cluster.cluster_status(group)}")


@sync
async def test_on_demand_a_producer_on_g1_reaches_a_consumer_on_g3_once(make_cluster: Any) -> None:
    cluster = make_cluster()
    consumer = await cluster.client("g3")
    producer = await cluster.client("g1")
    try:
        got_task = asyncio.ensure_future(consume(consumer, "/queue/orders", 500, 30))
        await asyncio.sleep(0.5)  # the SUBSCRIBE is advertised to g1
        await send_all(producer, "/queue/orders", [f"m{i}".encode() for i in range(500)])
        got = await got_task
        bodies = Counter(frame.body for frame in got)
        assert len(bodies) == 500 and set(bodies.values()) == {1}
        assert all(not name.startswith("_raftmq_") for frame in got for name, _ in frame.headers)
        assert cluster.queue_depths("/queue/orders").get("g1", 0) == 0
    finally:
        await consumer.disconnect()
        await producer.disconnect()


@sync
async def test_strict_spreads_over_every_group_without_consumers(make_cluster: Any) -> None:
    cluster = make_cluster(message_load_balancing="STRICT")
    creators = [await cluster.client(group) for group in GROUPS]
    try:
        # Every group has the queue: a consumer creates it and leaves. (A SEND would not do: once
        # g2 has heard of g1's queue, STRICT may balance g2's SEND to g1.)
        for client in creators:
            subscription = client.subscribe("/queue/spread", ack="client-individual")
            await subscription.unsubscribe(receipt=True)
        assert await wait_for(lambda: all(
            len((cluster.cluster_status(g) or {}).get("bindings", {}).get("/queue/spread", {})) == 2
            for g in GROUPS), 10), \
            {g: cluster.cluster_status(g) for g in GROUPS}
        await send_all(creators[0], "/queue/spread", [b"x"] * 3000)
        assert await wait_for(lambda: sum(cluster.queue_depths("/queue/spread").values()) == 3000, 30)
        depths = cluster.queue_depths("/queue/spread")
        assert all(abs(depths[g] - 1000) <= 1 for g in GROUPS), depths
    finally:
        for client in creators:
            await client.disconnect()


@sync
async def test_off_keeps_every_message_local(make_cluster: Any) -> None:
    cluster = make_cluster(message_load_balancing="OFF")
    consumer = await cluster.client("g2")
    producer = await cluster.client("g1")
    try:
        consumer.subscribe("/queue/local", ack="client-individual")
        await asyncio.sleep(0.5)
        await send_all(producer, "/queue/local", [b"x"] * 200)
        await asyncio.sleep(1.0)
        assert cluster.queue_depths("/queue/local")["g1"] == 200
    finally:
        await consumer.disconnect()
        await producer.disconnect()


@sync
async def test_a_selector_on_g2_takes_only_red_messages(make_cluster: Any) -> None:
    cluster = make_cluster()
    consumer = await cluster.client("g2")
    producer = await cluster.client("g1")
    try:
        got_task = asyncio.ensure_future(consume(consumer, "/queue/paint", 100, 20, selector="color = 'red'"))
        await asyncio.sleep(0.5)
        for i in range(200):
            color = "red" if i % 2 == 0 else "blue"
            await producer.send("/queue/paint", f"{color}{i}".encode(), [("color", color)], receipt=i == 199)
        got = await got_task
        assert len(got) == 100 and all(frame.body.startswith(b"red") for frame in got)
        await asyncio.sleep(0.5)
        assert cluster.queue_depths("/queue/paint")["g1"] == 100  # the blue ones wait at home
    finally:
        await consumer.disconnect()
        await producer.disconnect()


@sync
async def test_a_topic_subscriber_on_each_group_gets_every_message_once(make_cluster: Any) -> None:
    cluster = make_cluster()
    subscribers = {group: await cluster.client(group) for group in GROUPS}
    producer = await cluster.client("g1")
    # An independent client (stomp.py) as a durable subscriber on g3 that is offline meanwhile.
    g3_host, g3_port = cluster.addresses("g3")[0]
    durable = stomp.Connection12([(g3_host, g3_port)])
    listener = stomp.listener.TestListener()
    durable.set_listener("", listener)
    durable.connect(wait=True, headers={"client-id": "audit"})
    durable.subscribe("/topic/news", id="d1", ack="auto", headers={"activemq.subscriptionName": "audit"})
    time.sleep(0.3)
    durable.disconnect()
    try:
        tasks = {g: asyncio.ensure_future(consume(c, "/topic/news", 300, 30)) for g, c in subscribers.items()}
        await asyncio.sleep(0.8)
        await send_all(producer, "/topic/news", [f"n{i}".encode() for i in range(300)])
        for group, task in tasks.items():
            got = Counter(frame.body for frame in await task)
            assert len(got) == 300 and set(got.values()) == {1}, group
        durable = stomp.Connection12([(g3_host, g3_port)])
        listener = stomp.listener.TestListener()
        durable.set_listener("", listener)
        durable.connect(wait=True, headers={"client-id": "audit"})
        durable.subscribe("/topic/news", id="d1", ack="auto", headers={"activemq.subscriptionName": "audit"})
        deadline = time.monotonic() + 20
        while len(listener.message_list) < 300 and time.monotonic() < deadline:
            time.sleep(0.1)
        bodies = Counter(body for _, body in listener.message_list)
        durable.disconnect()
        assert len(bodies) == 300 and set(bodies.values()) == {1}
    finally:
        for client in (*subscribers.values(), producer):
            await client.disconnect()


@pytest.mark.parametrize("policy", ["ON_DEMAND", "OFF_WITH_REDISTRIBUTION"])
@sync
async def test_a_backlog_follows_its_consumer_to_another_group(make_cluster: Any, policy: str) -> None:
    cluster = make_cluster(message_load_balancing=policy, redistribution_delay_ms=500)
    producer = await cluster.client("g1")
    first = await cluster.client("g1")
    try:
        await send_all(producer, "/queue/backlog", [f"b{i}".encode() for i in range(1000)])
        taken = await consume(first, "/queue/backlog", 300, 20, prefetch=10)
        await first.disconnect()  # its RECEIPT: the 300 ACKs were applied; the rest in flight went back
        assert len(taken) == 300
        second = await cluster.client("g2")
        started = time.monotonic()
        rest = await consume(second, "/queue/backlog", 1000 - len(taken), 20)
        elapsed = time.monotonic() - started
        await second.disconnect()
        bodies = Counter(frame.body for frame in (*taken, *rest))
        assert len(bodies) == 1000, (len(taken), len(rest))
        assert set(bodies.values()) == {1}
        assert elapsed < 0.5 + 5.0
        assert cluster.queue_depths("/queue/backlog").get("g1", 0) == 0
    finally:
        await producer.disconnect()


@pytest.mark.parametrize("max_hops", [2, 1])
@sync
async def test_a_chain_reaches_two_hops_only_when_allowed(make_cluster: Any, max_hops: int) -> None:
    cluster = make_cluster(links="chain", max_hops=max_hops)
    consumer = await cluster.client("g3")
    producer = await cluster.client("g1")
    try:
        got_task = asyncio.ensure_future(consume(consumer, "/queue/far", 100, 10 if max_hops == 2 else 4))
        await asyncio.sleep(1.0)
        await send_all(producer, "/queue/far", [f"f{i}".encode() for i in range(100)])
        got = await got_task
        if max_hops == 2:
            assert sorted(frame.body for frame in got) == sorted(f"f{i}".encode() for i in range(100))
            assert (cluster.cluster_status("g2") or {})["forwarded"].get("g3") == 100
        else:
            assert got == []
            assert cluster.queue_depths("/queue/far")["g1"] == 100
    finally:
        await consumer.disconnect()
        await producer.disconnect()


@sync
async def test_a_mesh_with_more_hops_than_groups_forwards_each_message_a_bounded_number_of_times(
        make_cluster: Any) -> None:
    cluster = make_cluster(max_hops=3)
    consumer = await cluster.client("g3")
    producer = await cluster.client("g1")
    try:
        got_task = asyncio.ensure_future(consume(consumer, "/queue/loop", 200, 20))
        await asyncio.sleep(1.0)
        await send_all(producer, "/queue/loop", [f"l{i}".encode() for i in range(200)])
        got = await got_task
        assert len({frame.body for frame in got}) == 200
        await asyncio.sleep(1.0)
        forwarded = {g: sum((cluster.cluster_status(g) or {})["forwarded"].values()) for g in GROUPS}
        assert sum(forwarded.values()) <= 200 * 2, forwarded  # at most max_hops - 1 extra hops, never a loop
    finally:
        await consumer.disconnect()
        await producer.disconnect()


@sync
async def test_local_first_keeps_messages_local_until_the_local_consumer_is_full_and_counts_what_went_on(
        make_cluster: Any) -> None:
    cluster = make_cluster(["g1", "g2"], message_load_balancing="LOCAL_FIRST")
    far, near, producer = await cluster.client("g2"), await cluster.client("g1"), await cluster.client("g1")
    try:
        held: list[Any] = []
        near.subscribe("/queue/lf", ack="client-individual", prefetch=1, callback=held.append)  # never acks
        got_task = asyncio.ensure_future(consume(far, "/queue/lf", 99, 30, prefetch=1000))
        await asyncio.sleep(0.5)  # both SUBSCRIBEs advertised: g2's consumer has room
        await send_all(producer, "/queue/lf", [f"m{i}".encode() for i in range(100)])
        got = await got_task
        assert len(held) == 1 and len({frame.body for frame in got}) == 99
        assert held[0].body == b"m0"  # the first stayed with the local consumer while it had room

        def counters(group: str) -> dict[str, Any]:
            for node_id in cluster.groups[group].members:
                status = cluster.groups[group].status(node_id, timeout=1.0)
                if status and status.get("role") == "leader":
                    return dict(status["broker"]["destinations"]["/queue/lf"])
            return {}

        assert await wait_for(lambda: counters("g1").get("forwarded") == 99, 5)
        g1, g2 = counters("g1"), counters("g2")
        assert (g1["enqueued"], g1["arrived"], g2["enqueued"], g2["arrived"], g2["forwarded"]) == (1, 0, 99, 99, 0)
        # The console's destinations API carries the same, with the rates its "Groups /s" column shows.
        group = cluster.groups["g1"]
        member = group.members[next(n for n in group.members if (group.status(n) or {}).get("role") == "leader")]
        with urllib.request.urlopen(f"http://{member.host}:{member.admin_port}/api/destinations", timeout=10) as answer:
            rows = {row["destination"]: row for row in json.loads(answer.read())["destinations"]}
        assert rows["/queue/lf"]["forwarded"] == 99 and {"rate_forward", "rate_arrive"} <= rows["/queue/lf"].keys()
    finally:
        for client in (far, near, producer):
            await client.disconnect()
