"""An embedded broker's network URIs (cluster.network_uris): what a multicast:// URI makes, and
a clear error naming the URI for each thing wrong with one."""

from __future__ import annotations

import pytest

from cluster.network_uris import DEFAULT_BROADCAST_PERIOD_MS, DEFAULT_REFRESH_TIMEOUT_MS, parse_network
from raftmq.errors import ConfigError
from raftmq.routing.cluster_connection import ClusterView


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
