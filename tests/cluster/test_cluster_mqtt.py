"""MQTT across a cluster of groups: what an MQTT client publishes on one group reaches MQTT
subscribers on the others, through the cluster connection, once each;
a shared subscription on another group takes its copy as one consumer."""

from __future__ import annotations

import queue
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("paho.mqtt.client", reason="pip install -e '.[test]' (paho-mqtt)")

from tests.cluster.conftest import linked_groups  # noqa: E402
from tests.helpers.cluster_harness import Cluster  # noqa: E402
from tests.helpers.paho_clients import WAIT, Client  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    yield from linked_groups(tmp_path, mqtt=True)


def mqtt_port(cluster: Cluster, group: str) -> int:
    port = next(iter(cluster.groups[group].members.values())).mqtt_port
    assert port is not None
    return port


def test_an_mqtt_publication_reaches_the_other_groups_subscribers_once(cluster: Cluster) -> None:
    watchers = {group: Client(mqtt_port(cluster, group), 5, f"watch-{group}", keep=False) for group in ("g2", "g3")}
    members = [Client(mqtt_port(cluster, "g3"), 5, f"member-{n}", keep=False) for n in (1, 2)]
    publisher = Client(mqtt_port(cluster, "g1"), 4, "publisher", keep=False)
    clients = [*watchers.values(), *members, publisher]
    try:
        for watcher in watchers.values():
            watcher.subscribe("news/#", 1)
        for member in members:
            member.subscribe("$share/desk/news/#", 1)
        time.sleep(1.0)  # the groups learn of each other's subscriptions
        bodies = [f"n{i}".encode() for i in range(50)]
        for body in bodies:
            publisher.client.publish("news/world", body, qos=1).wait_for_publish(WAIT)
        for group, watcher in watchers.items():
            got = Counter(m.payload for m in watcher.received(50))
            assert set(got) == set(bodies) and set(got.values()) == {1}, group
            assert watcher.nothing_more()
        shared: list[bytes] = []
        deadline = time.monotonic() + WAIT
        while len(shared) < 50 and time.monotonic() < deadline:
            for member in members:
                try:
                    shared.append(member.messages.get(timeout=0.05).payload)
                except queue.Empty:
                    pass
        assert sorted(shared) == sorted(bodies)  # the share on g3: one copy, split between its members
        assert all(member.nothing_more(0.3) for member in members)
    finally:
        for client in clients:
            client.close()
