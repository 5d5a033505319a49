"""Scheduled delivery and management across a cluster of groups, with stomp.py: a message
scheduled on g1 for a queue whose consumer is on g2 is published on g1's committed clock when
due and crosses to g2 once; a dead letter retried through the management API on g1 goes to its
consumer on g3; g1's overview shows the other groups' members."""

from __future__ import annotations

import json
import time
import urllib.request
from typing import Any

import pytest
import stomp

from tests.helpers.cluster_harness import Cluster

pytestmark = pytest.mark.integration


def consumer(cluster: Cluster, group: str, destination: str) -> tuple[stomp.Connection12, Any]:
    connection = stomp.Connection12([cluster.addresses(group)[0]])
    listener = stomp.listener.TestListener()
    connection.set_listener("", listener)
    connection.connect(wait=True)
    connection.subscribe(destination, id="c", ack="auto")
    return connection, listener


def test_a_message_scheduled_on_one_group_reaches_a_consumer_on_another_once_on_time(three_groups: Cluster) -> None:
    cluster = three_groups
    far, heard = consumer(cluster, "g2", "/queue/later")
    producer = stomp.Connection12([cluster.addresses("g1")[0]])
    producer.connect(wait=True)
    try:
        time.sleep(1.5)  # g2's binding reaches g1
        sent_at = time.time()
        for i in range(10):
            producer.send("/queue/later", f"m{i}", headers={"AMQ_SCHEDULED_DELAY": "2000", "_AMQ_DUPL_ID": f"d{i}"})
        time.sleep(max(0.0, sent_at + 1.8 - time.time()))
        assert heard.message_list == []  # not early
        deadline = time.monotonic() + 20
        while len(heard.message_list) < 10 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(1.0)  # a second copy would arrive meanwhile
        assert sorted(body for _h, body in heard.message_list) == [f"m{i}" for i in range(10)]
    finally:
        producer.disconnect()
        far.disconnect()


def test_a_dead_letter_retried_through_the_api_returns_to_its_queue_and_crosses_groups(three_groups: Cluster) -> None:
    cluster = three_groups
    g1 = cluster.groups["g1"]
    member = g1.members["n1"]
    nacker = stomp.Connection12([cluster.addresses("g1")[0]])
    listener = stomp.listener.TestListener()
    nacker.set_listener("", listener)
    nacker.connect(wait=True)
    nacker.subscribe("/queue/work", id="n", ack="client-individual")
    nacker.send("/queue/work", "poison")
    for _ in range(10):  # max_delivery_count: 10 NACKs and it is dead
        deadline = time.monotonic() + 10
        while not listener.message_list and time.monotonic() < deadline:
            time.sleep(0.02)
        headers, _body = listener.message_list.pop()
        nacker.nack(headers["ack"])
    nacker.disconnect()
    far, heard = consumer(cluster, "g3", "/queue/work")
    try:
        time.sleep(1.5)  # g3's binding reaches g1
        request = urllib.request.Request(f"http://{member.host}:{member.admin_port}/api/messages/retry",
                                         data=json.dumps({"from": "/queue/DLQ", "all": True}).encode(), method="POST",
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=15) as answer:
            assert json.loads(answer.read())["moved"] == 1
        deadline = time.monotonic() + 15
        while not heard.message_list and time.monotonic() < deadline:
            time.sleep(0.05)
        assert [body for _h, body in heard.message_list] == ["poison"]
        # The console's overview shows the other groups' members as they answer.
        with urllib.request.urlopen(f"http://{member.host}:{member.admin_port}/api/overview", timeout=15) as answer:
            overview = json.loads(answer.read())
        peers = {name: [(m["node"], m["role"], m["health"]) for m in members]
                 for name, members in overview["peers"].items()}
        assert peers == {"g2": [("n1", "leader", "ok")], "g3": [("n1", "leader", "ok")]}
    finally:
        far.disconnect()
