"""Wildcard topic subscriptions on real processes, with an independent client (stomp.py):
a `/topic/prices.>` subscriber on g2 and a `/topic/prices.*` one on g3 get what is published
on g1 and matches, each once, with its real topic in the MESSAGE; a misplaced wildcard is an
ERROR, never a subscription that receives nothing."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import pytest
import stomp

from tests.cluster.test_cluster_connections import send_all
from tests.helpers.cluster_harness import Cluster, sync

pytestmark = pytest.mark.integration


@pytest.fixture
def cluster(three_groups: Cluster) -> Cluster:
    return three_groups


def subscriber(cluster: Cluster, group: str, destination: str) -> tuple[stomp.Connection12, Any]:
    host, port = cluster.addresses(group)[0]
    connection = stomp.Connection12([(host, port)])
    listener = stomp.listener.TestListener()
    connection.set_listener("", listener)
    connection.connect(wait=True)
    connection.subscribe(destination, id="w", ack="auto", headers={"receipt": "subscribed"})
    return connection, listener


@sync
async def test_wildcard_subscribers_in_other_groups_get_what_matches_once(cluster: Cluster) -> None:
    rest, rest_heard = subscriber(cluster, "g2", "/topic/prices.>")
    one, one_heard = subscriber(cluster, "g3", "/topic/prices.*")
    producer = await cluster.client("g1")
    try:
        time.sleep(1.5)  # the subscriptions' bindings reach g1
        names = ["prices.eur", "prices.usd.spot", "volumes.eur", "prices"]
        for name in names:
            await send_all(producer, f"/topic/{name}", [f"{name}-{i}".encode() for i in range(50)])
        deadline = time.monotonic() + 20
        while (len(rest_heard.message_list) < 100 or len(one_heard.message_list) < 50) and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.5)  # nothing more may arrive
        rest_got = Counter((headers["destination"], body) for headers, body in rest_heard.message_list)
        one_got = Counter((headers["destination"], body) for headers, body in one_heard.message_list)
        assert set(rest_got.values()) == {1} and set(one_got.values()) == {1}
        assert {d for d, _ in rest_got} == {"/topic/prices.eur", "/topic/prices.usd.spot"} and len(rest_got) == 100
        assert {d for d, _ in one_got} == {"/topic/prices.eur"} and len(one_got) == 50
    finally:
        await producer.disconnect()
        rest.disconnect()
        one.disconnect()


class Errors(stomp.ConnectionListener):  # type: ignore[misc]
    def __init__(self) -> None:
        self.frames: list[Any] = []

    def on_error(self, frame: Any) -> None:
        self.frames.append(frame)


def test_a_misplaced_wildcard_is_an_error(cluster: Cluster) -> None:
    host, port = cluster.addresses("g1")[0]
    connection = stomp.Connection12([(host, port)])
    listener = Errors()
    connection.set_listener("", listener)
    connection.connect(wait=True)
    connection.subscribe("/topic/prices.>.eur", id="bad", ack="auto", headers={"receipt": "r1"})
    deadline = time.monotonic() + 10
    while not listener.frames and time.monotonic() < deadline:
        time.sleep(0.05)
    assert listener.frames, "no ERROR for a misplaced wildcard"
    frame = listener.frames[0]
    assert frame.headers["message"] == "invalid destination" and "'>' must be the last element" in frame.body
    if connection.is_connected():
        connection.disconnect()


def test_a_wildcard_queue_consumer_gets_every_matching_queue_in_its_group_and_others_once(cluster: Cluster) -> None:
    wild, heard = subscriber(cluster, "g2", "/queue/jobs.>")
    try:
        time.sleep(1.5)  # the pattern's binding reaches g1 and g3
        here = stomp.Connection12([cluster.addresses("g2")[0]])
        here.connect(wait=True)
        there = stomp.Connection12([cluster.addresses("g1")[0]])
        there.connect(wait=True)
        sent = []
        for i in range(20):
            for connection, name in ((here, "jobs.local"), (there, f"jobs.remote.{i % 3}"), (there, "other")):
                connection.send(f"/queue/{name}", f"{name}-{i}", headers={"receipt": f"{name}-{i}"})
                if name != "other":
                    sent.append((f"/queue/{name}", f"{name}-{i}"))
        deadline = time.monotonic() + 20
        while len(heard.message_list) < len(sent) and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.5)
        got = Counter((headers["destination"], body) for headers, body in heard.message_list)
        assert got == Counter(sent)
        assert cluster.queue_depths("/queue/other")["g1"] == 20
        here.disconnect()
        there.disconnect()
    finally:
        wild.disconnect()
