"""Networks of brokers in ActiveMQ Classic's words ([[network_connector]], cluster.network) on
real processes: single-node groups on 127.0.0.1, stomp.py as the independent client. Every
option's effect on routing is also shown on cores in tests/core/test_cluster_routing_network.py."""

from __future__ import annotations

import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import stomp

from tests.helpers.cluster_harness import Cluster

pytestmark = pytest.mark.integration


@pytest.fixture
def make_cluster(tmp_path: Path) -> Iterator[Any]:
    started: list[Cluster] = []

    def make(groups: list[str], network: list[dict[str, Any]], learners: list[str]) -> Cluster:
        directory = tmp_path / f"c{len(started)}"
        directory.mkdir()
        cluster = Cluster(directory, groups, network=network)
        started.append(cluster)
        cluster.start()
        cluster.wait_links(learners=learners)
        return cluster

    yield make
    for cluster in started:
        cluster.close()


class Consumer:
    """A stomp.py consumer (client-individual acks, each acked as it arrives)."""

    def __init__(self, cluster: Cluster, group: str, destination: str) -> None:
        host, port = cluster.addresses(group)[0]
        self.bodies: list[str] = []
        self.connection = stomp.Connection12([(host, port)])
        self.connection.set_listener("", self)
        self.connection.connect(wait=True)
        self.connection.subscribe(destination, id="1", ack="client-individual",
                                  headers={"activemq.prefetchSize": "100"})

    def on_message(self, frame: Any) -> None:
        self.bodies.append(frame.body)
        self.connection.ack(frame.headers["ack"])

    def close(self) -> None:
        self.connection.disconnect()


def produce(cluster: Cluster, group: str, destination: str, count: int) -> None:
    host, port = cluster.addresses(group)[0]
    connection = stomp.Connection12([(host, port)])
    connection.connect(wait=True)
    for i in range(count):
        connection.send(destination, f"m{i}", headers={"receipt": f"r{i}"} if i == count - 1 else None)
    time.sleep(0.2)
    connection.disconnect(receipt="bye")


def wait_total(consumers: list[Consumer], count: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while sum(len(c.bodies) for c in consumers) < count and time.monotonic() < deadline:
        time.sleep(0.05)


def wait_known(cluster: Cluster, group: str, destination: str, consumers: int, timeout: float = 10.0) -> None:
    """Until `group`'s leader knows `consumers` consumers of `destination` elsewhere."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        bindings = (cluster.cluster_status(group) or {}).get("bindings", {}).get(destination, {})
        if sum(entry["consumers"] for entry in bindings.values()) >= consumers:
            return
        time.sleep(0.05)
    raise AssertionError(f"{group} never learned of {consumers} consumer(s) of {destination}: "
                         f"{cluster.cluster_status(group)}")


@pytest.mark.parametrize(("conduit", "expected"), [(True, [15, 15]), (False, [10, 20])])
def test_the_classic_documentation_split_with_and_without_conduit_subscriptions(
        make_cluster: Any, conduit: bool, expected: list[int]) -> None:
    # ActiveMQ's "conduit subscriptions" example: a producer and a consumer on one broker, two
    # consumers on the other; 30 messages. One conduit for the two remote consumers: 15 / 15
    # (7 or 8 each over there); without: 10 / 10 / 10.
    cluster = make_cluster(["g1", "g2"], [{"group": "g1", "to": "g2", "conduitSubscriptions": conduit}], ["g1"])
    local = Consumer(cluster, "g1", "/queue/work")
    remote = [Consumer(cluster, "g2", "/queue/work") for _ in range(2)]
    try:
        wait_known(cluster, "g1", "/queue/work", 2)
        produce(cluster, "g1", "/queue/work", 30)
        wait_total([local, *remote], 30, 20)
        assert [len(local.bodies), len(remote[0].bodies) + len(remote[1].bodies)] == expected
        assert Counter(b for c in (local, *remote) for b in c.bodies) == Counter(f"m{i}" for i in range(30))
        if not conduit:
            assert sorted(len(c.bodies) for c in remote) == [10, 10]
    finally:
        for consumer in (local, *remote):
            consumer.close()


def test_a_connector_forwards_one_way_and_a_duplex_one_both_ways(make_cluster: Any) -> None:
    one_way = make_cluster(["g1", "g2"], [{"group": "g1", "to": "g2"}], ["g1"])
    consumers = {group: Consumer(one_way, group, "/queue/mail") for group in ("g1", "g2")}
    try:
        wait_known(one_way, "g1", "/queue/mail", 1)
        produce(one_way, "g1", "/queue/mail", 20)
        wait_total(list(consumers.values()), 20, 20)
        assert [len(consumers[g].bodies) for g in ("g1", "g2")] == [10, 10]
        for consumer in consumers.values():
            consumer.close()
        only_g1 = Consumer(one_way, "g1", "/queue/back")
        produce(one_way, "g2", "/queue/back", 20)  # g2 has no connector to g1: it keeps them
        time.sleep(1.5)
        assert only_g1.bodies == [] and one_way.queue_depths("/queue/back")["g2"] == 20
        only_g1.close()
    finally:
        for consumer in consumers.values():
            consumer.close()
    duplex = make_cluster(["g1", "g2"], [{"group": "g1", "to": "g2", "duplex": True}], ["g1", "g2"])
    on_g1 = Consumer(duplex, "g1", "/queue/back")
    try:
        wait_known(duplex, "g2", "/queue/back", 1)
        produce(duplex, "g2", "/queue/back", 20)
        wait_total([on_g1], 20, 20)
        assert sorted(on_g1.bodies) == sorted(f"m{i}" for i in range(20))
        # Both directions on one connection, opened by g1 (the spoke behind a firewall): g2's
        # node has no connection of its own to g1's port.
        g1_port, g2_port = duplex.addresses("g1")[0][1], duplex.addresses("g2")[0][1]
        assert g2_port in remote_ports(node_pid(duplex, "g1"))
        assert g1_port not in remote_ports(node_pid(duplex, "g2"))
    finally:
        on_g1.close()


def node_pid(cluster: Cluster, group: str) -> int:
    (member,) = cluster.groups[group].members.values()
    assert member.proc is not None
    return member.proc.pid


def remote_ports(pid: int) -> set[int]:
    """The remote ports of the established TCP connections process `pid` holds (ss -tnp)."""
    lines = subprocess.run(["ss", "-tnpH", "state", "established"], capture_output=True, text=True, check=True).stdout
    ports = set()
    for line in lines.splitlines():
        if f"pid={pid}," in line:
            ports.add(int(line.split()[3].rsplit(":", 1)[1]))
    return ports


@pytest.mark.parametrize("ttl", [1, 2])
def test_network_ttl_decides_whether_a_consumer_two_brokers_away_is_reached(make_cluster: Any, ttl: int) -> None:
    network = [{"group": "g1", "to": "g2", "duplex": True, "networkTTL": ttl},
               {"group": "g2", "to": "g3", "duplex": True, "networkTTL": ttl}]
    cluster = make_cluster(["g1", "g2", "g3"], network, ["g1", "g2", "g3"])
    far = Consumer(cluster, "g3", "/queue/far")
    try:
        if ttl == 2:
            wait_known(cluster, "g1", "/queue/far", 1)
        else:
            wait_known(cluster, "g2", "/queue/far", 1)
            time.sleep(0.5)  # g2's advert to g1 has come and gone without it
            assert "/queue/far" not in (cluster.cluster_status("g1") or {}).get("bindings", {})
        produce(cluster, "g1", "/queue/far", 30)
        wait_total([far], 30, 10 if ttl == 2 else 2)
        assert len(far.bodies) == (30 if ttl == 2 else 0)
        assert cluster.queue_depths("/queue/far").get("g1", 0) == (0 if ttl == 2 else 30)
    finally:
        far.close()
