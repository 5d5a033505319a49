"""An embedded broker in the network (ActiveMQ's "embedded brokers" topology): a service's own
durable broker linked to a hub by a Classic network connector URI (`static:(...)`), the hub a
group whose topology accepts edges and lists the service nowhere. In one process here (the
real-process test with a cut network and kill -9 is tests/embedded/test_edge_processes.py):
messages go both ways with `duplex`, one way without; while the hub is away the service gets
its receipts from its own broker and what waited moves, exactly once, when the hub is back."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cluster.group_file import GroupConfig
from raftmq.client.sync import Client
from raftmq.embedded import EmbeddedBroker
from raftmq.processes import free_ports
from raftmq.security import TlsConfig
from tests.helpers.edge_hub import hub_group
from tests.helpers.service_peer import until
from tests.helpers.tls_certs import make_certificates

pytestmark = pytest.mark.integration

TIMEOUT = 20.0


@pytest.fixture
def hub_config(tmp_path: Path) -> GroupConfig:
    return hub_group(tmp_path / "hub")


@pytest.fixture
def hub(hub_config: GroupConfig) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(config=hub_config) as running:
        yield running


def collect(subscription: Any, count: int, timeout: float = TIMEOUT) -> list[str]:
    got: list[str] = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        message = subscription.receive(0.2)
        if message is not None:
            got.append(message.body.decode())
            subscription.ack(message)
    return got


def link_state(broker: EmbeddedBroker) -> dict[str, Any]:
    links = broker.status().get("cluster", {}).get("links", [])
    return {link["to"]: link for link in links}


def edge_uri(hub: EmbeddedBroker, query: str = "") -> str:
    """A `static:` network URI naming `hub`'s member."""
    host, port = hub.addresses[0]
    return f"static:(stomp://{host}:{port}){query}"


def wait_linked(edge: EmbeddedBroker, to: str = "hub") -> None:
    assert until(lambda: link_state(edge).get(to, {}).get("state") == "connected", TIMEOUT), link_state(edge)


def test_a_duplex_edge_sends_to_the_hub_and_receives_from_it(hub: EmbeddedBroker, tmp_path: Path) -> None:
    with EmbeddedBroker(name="svc", data_dir=tmp_path / "svc", network=[edge_uri(hub, "?duplex=true")]) as edge, \
            Client.connect(hub.url) as at_hub, Client.connect("vm://svc") as in_service:
        orders = at_hub.subscribe("/queue/orders", ack="client-individual")
        replies = in_service.subscribe("/queue/replies.svc", ack="client-individual")
        wait_linked(edge)
        for number in range(100):
            in_service.send("/queue/orders", f"order-{number}")
        assert sorted(collect(orders, 100)) == sorted(f"order-{n}" for n in range(100))
        for number in range(50):
            at_hub.send("/queue/replies.svc", f"reply-{number}")
        assert sorted(collect(replies, 50)) == sorted(f"reply-{n}" for n in range(50))
        assert collect(orders, 1, timeout=1) == [] and collect(replies, 1, timeout=1) == []  # once each
        hub_links = link_state(hub)
        assert hub_links["svc"]["opened_by"] == "svc" and hub_links["svc"]["state"] == "connected"


def test_without_duplex_the_hubs_messages_stay_at_the_hub(hub: EmbeddedBroker, tmp_path: Path) -> None:
    with EmbeddedBroker(name="oneway", data_dir=tmp_path / "oneway", network=[edge_uri(hub)]) as edge, \
            Client.connect(hub.url) as at_hub, Client.connect("vm://oneway") as in_service:
        orders = at_hub.subscribe("/queue/orders", ack="client-individual")
        replies = in_service.subscribe("/queue/replies.oneway", ack="client-individual")
        wait_linked(edge)
        in_service.send("/queue/orders", "one way")
        assert collect(orders, 1) == ["one way"]
        at_hub.send("/queue/replies.oneway", "stays")
        assert collect(replies, 1, timeout=3) == []


def test_while_the_hub_is_away_the_service_publishes_and_what_waited_moves_once(
        hub_config: GroupConfig, tmp_path: Path) -> None:
    hub = EmbeddedBroker(config=hub_config).start()
    host, port = hub.addresses[0]
    uri = f"static:(stomp://{host}:{port})?duplex=true&initialReconnectDelay=100&maxReconnectDelay=500"
    try:
        with EmbeddedBroker(name="svc", data_dir=tmp_path / "svc", network=[uri]) as edge, \
                Client.connect("vm://svc") as in_service:
            with Client.connect(hub.url) as at_hub:
                early = at_hub.subscribe("/queue/orders", ack="client-individual")  # the service learns of it
                wait_linked(edge)
                in_service.send("/queue/orders", "before")
                assert collect(early, 1) == ["before"]
            hub.stop()
            started = time.monotonic()
            for number in range(200):  # each receipted by the service's own broker
                in_service.send("/queue/orders", f"away-{number}", timeout=5)
            assert time.monotonic() - started < 10
            assert link_state(edge)["hub"]["state"] != "connected"
            hub = EmbeddedBroker(config=hub_config).start()
            with Client.connect(hub.url) as at_hub:
                orders = at_hub.subscribe("/queue/orders", ack="client-individual")
                assert sorted(collect(orders, 200, timeout=30)) == sorted(f"away-{n}" for n in range(200))
                assert collect(orders, 1, timeout=2) == []
    finally:
        hub.stop()


def test_a_hub_nobody_reaches_costs_the_service_nothing(tmp_path: Path) -> None:
    (port,) = free_ports(1)
    uri = f"static:(stomp://127.0.0.1:{port})?initialReconnectDelay=100"
    with EmbeddedBroker(name="alone", data_dir=tmp_path / "alone", network=[uri]) as edge, \
            Client.connect("vm://alone") as client:
        subscription = client.subscribe("/queue/local", ack="client-individual")
        client.send("/queue/local", "still served")
        assert collect(subscription, 1) == ["still served"]
        assert until(lambda: link_state(edge).get(f"hub at 127.0.0.1:{port}", {}).get("state") == "retrying", TIMEOUT)
        (link,) = link_state(edge).values()  # no hub known yet: nothing is routed to one
        assert link["to"] == f"hub at 127.0.0.1:{port}" and link["state"] == "retrying"
        assert f"127.0.0.1:{port}" in link["last_error"] and "cannot connect" in link["last_error"]


def test_a_hub_with_a_cluster_user_links_only_edges_logged_in_as_it(tmp_path: Path) -> None:
    with EmbeddedBroker(config=hub_group(tmp_path / "hub", "cluster", "pw")) as hub, hub.client() as at_hub:
        orders = at_hub.subscribe("/queue/orders", ack="client-individual")
        host, port = hub.addresses[0]
        anonymous = f"static:(stomp://{host}:{port})?initialReconnectDelay=100&maxReconnectDelay=300"
        with EmbeddedBroker(name="stranger", data_dir=tmp_path / "stranger", network=[anonymous]) as edge, \
                Client.connect("vm://stranger") as client:
            client.send("/queue/orders", "not from the cluster user")
            time.sleep(3)
            assert collect(orders, 1, timeout=1) == []
            assert "reserved destination" in (link_state(edge)["hub"]["last_error"] or "")  # says why
        logged_in = f"{anonymous}&userName=cluster"
        with EmbeddedBroker(name="member", data_dir=tmp_path / "member", network=[logged_in],
                            cluster_password="pw") as edge, Client.connect("vm://member") as client:
            wait_linked(edge)
            client.send("/queue/orders", "from the cluster user")
            assert collect(orders, 1) == ["from the cluster user"]


def test_an_edge_reaches_its_hub_over_tls_checking_its_certificate(tmp_path: Path) -> None:
    server, _client = make_certificates(tmp_path / "tls")
    other_ca, _ = make_certificates(tmp_path / "other", ca_name="another CA")
    tls = TlsConfig(cert_file=str(server.cert), key_file=str(server.key))
    with EmbeddedBroker(config=hub_group(tmp_path / "hub", tls=tls)) as hub:
        host, port = hub.addresses[0]
        with Client.connect(f"stomp+ssl://{host}:{port}", ca_file=str(server.ca)) as at_hub:
            orders = at_hub.subscribe("/queue/orders", ack="client-individual")
            trusted = f"static:(stomp+ssl://{host}:{port})?caFile={server.ca}&initialReconnectDelay=100"
            with EmbeddedBroker(name="secure", data_dir=tmp_path / "secure", network=[trusted]) as edge, \
                    Client.connect("vm://secure") as client:
                wait_linked(edge)
                client.send("/queue/orders", "over tls")
                assert collect(orders, 1) == ["over tls"]
        untrusted = f"static:(stomp+ssl://{host}:{port})?caFile={other_ca.ca}&initialReconnectDelay=100"
        with EmbeddedBroker(name="fooled", data_dir=tmp_path / "fooled", network=[untrusted]) as edge:
            assert until(lambda: "certificate verify failed" in str(
                link_state(edge).get(f"hub at {host}:{port}", {}).get("last_error")), TIMEOUT), link_state(edge)
