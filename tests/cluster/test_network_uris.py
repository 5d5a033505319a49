"""An embedded broker's network URIs (cluster.network_uris): what a multicast:// URI makes, and
a clear error naming the URI for each thing wrong with one."""

from __future__ import annotations

import pytest

from cluster.network_uris import DEFAULT_BROADCAST_PERIOD_MS, DEFAULT_REFRESH_TIMEOUT_MS, parse_network
from raftmq.errors import ConfigError
from raftmq.routing.cluster_connection import ClusterConnection, ClusterView, cluster_view


def test_a_multicast_uri_is_a_discovery_connection_and_a_broadcast_group() -> None:
    network = parse_network(["multicast://239.255.2.3:6155?group=shop&broadcastPeriod=250&refreshTimeout=4000"
                             "&interface=127.0.0.1"], "secret")
    (connection,), (broadcast,) = network.connections, network.broadcast
    assert connection.name == "shop" and connection.links == () and connection.cluster_password == "secret"
    assert connection.discovery is not None
    assert (connection.discovery.group_address, connection.discovery.group_port) == ("239.255.2.3", 6155)
    assert (connection.discovery.refresh_timeout_ms, connection.discovery.local_bind_address) == (4000, "127.0.0.1")
    assert (broadcast.group_address, broadcast.group_port, broadcast.broadcast_period_ms) == ("239.255.2.3", 6155, 250)
    view = ClusterView("a", network.connections)
    assert view.accepts("b") and not view.accepts("a")  # every other broker found is a neighbour


def test_defaults() -> None:
    (connection,), (broadcast,) = (lambda n: (n.connections, n.broadcast))(parse_network(["multicast://239.1.2.3:7"]))
    assert connection.name == "default" and connection.cluster_password is None
    assert connection.discovery is not None and connection.discovery.refresh_timeout_ms == DEFAULT_REFRESH_TIMEOUT_MS
    assert broadcast.broadcast_period_ms == DEFAULT_BROADCAST_PERIOD_MS and broadcast.local_bind_address is None


@pytest.mark.parametrize(("uris", "message"), [
    (["tcp://127.0.0.1:61616"], "expected multicast://ADDRESS:PORT"),
    (["multicast://10.0.0.1:6155"], "10.0.0.1 is not a multicast address"),
    (["multicast://239.1.2.3"], "name the multicast address and port"),
    (["multicast://239.1.2.3:99999"], "'multicast://239.1.2.3:99999'"),
    (["multicast://239.1.2.3:6155?ttl=3"], "unknown option 'ttl'"),
    (["multicast://239.1.2.3:6155?group=a/b"], "group must be letters"),
    (["multicast://239.1.2.3:6155?broadcastPeriod=soon"], "broadcastPeriod must be a whole number of ms"),
    (["multicast://239.1.2.3:6155?broadcastPeriod=500&refreshTimeout=400"], "refreshTimeout must be longer"),
    (["multicast://239.1.2.3:6155", "multicast://239.1.2.4:6155"], "two multicast URIs with group 'default'"),
    ("multicast://239.1.2.3:6155", "a list of URIs, not one string"),
])
def test_what_is_wrong_is_named(uris: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace("?", r"\?")):
        parse_network(uris)


def test_a_static_uri_is_an_edges_link_to_a_hub_with_the_connectors_options() -> None:
    network = parse_network(["static:(stomp://10.0.0.1:61613,tcp://10.0.0.2:61613)?duplex=true&networkTTL=2"
                             "&excludedDestinations=queue://audit.>,topic://debug.>&userName=cluster"
                             "&initialReconnectDelay=100&maxReconnectDelay=2000"], "secret", group="svc")
    (connection,) = network.connections
    assert network.broadcast == ()
    assert connection.hub is not None
    assert (connection.hub.edge, connection.hub.addresses, connection.hub.duplex) == (
        "svc", ("10.0.0.1:61613", "10.0.0.2:61613"), True)
    assert connection.links == () and connection.max_hops == 2
    assert (connection.cluster_user, connection.cluster_password) == ("cluster", "secret")
    assert not connection.address.covers("/queue/audit.x") and connection.address.covers("/queue/orders")
    assert not connection.address.covers("/topic/debug.y")
    assert (connection.retry.retry_interval_ms, connection.retry.max_retry_interval_ms) == (100, 2000)
    view = ClusterView("svc", network.connections)
    assert view.hubs == (connection,) and view.dynamic and view.accepts("hub")
    assert view.opens("hub") and view.pulls_from("hub") and not view.pulled_by("hub")
    assert connection.forwards_to("svc", "hub") and connection.forwards_to("hub", "svc")  # duplex


def test_without_duplex_the_hub_forwards_nothing_to_the_edge() -> None:
    (connection,) = parse_network(["static:(stomp://10.0.0.1:61613)"], group="svc").connections
    assert connection.forwards_to("svc", "hub") and not connection.forwards_to("hub", "svc")


def test_a_hubs_view_of_its_edges() -> None:
    edges = ClusterConnection(name="edges", links=(), edge_hubs=("hub",))
    view = ClusterView("hub", (edges,))
    assert view.accepts_edges and view.dynamic and view.neighbours == ()
    assert view.accepts("svc") and not view.accepts("hub")
    assert view.pulled_by("svc") and not view.opens("svc")
    assert edges.forwards_to("svc", "hub") and edges.forwards_to("hub", "svc")
    assert not edges.forwards_to("a", "b")  # two edges never forward to each other through it
    assert cluster_view("hub", (edges,)) == view and cluster_view("other", (edges,)) is None


@pytest.mark.parametrize(("uri", "message"), [
    ("static:stomp://h:1", "expected static:\\(stomp://HOST:PORT,...\\)"),
    ("static:(stomp://h)", "'stomp://h' is not a hub member's address"),
    ("static:(stomp+ssl://h:1)", "a stomp\\+ssl:// hub needs caFile=PATH"),
    ("static:(stomp+ssl://h:1,stomp://h:2)?caFile=x", "mixes TLS"),
    ("static:(stomp://h:1)?caFile=ca.pem", "caFile is for stomp\\+ssl:// addresses"),
    ("static:(stomp+ssl://h:1)?caFile=/nonexistent/ca.pem", "is not a file"),
    ("static:(http://h:1)", "is not a hub member's address"),
    ("static:(stomp://h:1)?password=x", "pass it as the broker's cluster_password"),
    ("static:(stomp://h:1)?duplex=maybe", "duplex must be true or false"),
    ("static:(stomp://h:1)?bogus=1", "bogus is not a static: URI option"),
    ("static:(stomp://h:1)?excludedDestinations=audit", "name the kind"),
])
def test_what_is_wrong_with_a_static_uri_is_named(uri: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_network([uri], group="svc")
