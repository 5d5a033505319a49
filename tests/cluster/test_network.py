"""ActiveMQ Classic's network connectors compiled onto the cluster model (cluster.network):
what each option becomes, and the errors that name the file and the key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cluster.network import DEFAULT_REPLAY_DELAY_MS, parse_network_connectors
from raftmq.errors import ConfigError
from raftmq.routing.cluster_connection import ON_DEMAND, ClusterConnection, cluster_view

PATH = Path("/etc/raftmq/topology.toml")
MEMBERS = {
    "g1": ("127.0.0.1:1011", "127.0.0.1:1012", "127.0.0.1:1013"),
    "g2": ("127.0.0.1:1021", "127.0.0.1:1022", "127.0.0.1:1023"),
    "g3": ("127.0.0.1:1031",),
}


def uri(*groups: str) -> str:
    return "static:(" + ",".join(f"stomp://{a}" for g in groups for a in MEMBERS[g]) + ")"


def compile_(*entries: dict[str, Any]) -> tuple[ClusterConnection, ...]:
    return parse_network_connectors(PATH, list(entries), MEMBERS)


def test_a_connector_goes_one_way_and_duplex_both() -> None:
    (one_way,) = compile_({"group": "g1", "uri": uri("g2")})
    assert one_way.links == (("g1", "g2"),) and one_way.forwards == (("g1", "g2"),)
    view1, view2 = cluster_view("g1", (one_way,)), cluster_view("g2", (one_way,))
    assert view1 is not None and view2 is not None
    assert (view1.downstream, view1.upstream) == (("g2",), ())
    assert (view2.downstream, view2.upstream) == ((), ("g1",))
    (duplex,) = compile_({"group": "g1", "uri": uri("g2"), "duplex": True})
    assert duplex.forwards == (("g1", "g2"), ("g2", "g1"))


def test_classic_defaults() -> None:
    (connection,) = compile_({"group": "g1", "uri": uri("g2")})
    assert connection.max_hops == 1 and connection.advert_hops == 1  # networkTTL 1
    assert connection.message_load_balancing == ON_DEMAND  # dynamic: where the consumers are
    assert connection.conduit_subscriptions and not connection.prefer_local and not connection.dynamic_only
    assert connection.confirmation_window == 1000  # prefetchSize
    assert [connection.retry.delay_ms(i) for i in range(7)] == [1000, 2000, 4000, 8000, 16000, 30000, 30000]
    assert connection.redistribution_delay_ms == DEFAULT_REPLAY_DELAY_MS  # replays by default (docs)
    assert connection.use_duplicate_detection


def test_each_option_lands_in_the_model() -> None:
    (static, dynamic) = compile_({
        "group": "g1", "uri": uri("g2"), "networkTTL": 3, "consumerTTL": 2, "conduitSubscriptions": False,
        "decreaseNetworkConsumerPriority": True, "dynamicOnly": True, "prefetchSize": 7,
        "initialReconnectDelay": 100, "maxReconnectDelay": 250, "useExponentialBackOff": False,
        "replayWhenNoConsumers": False, "excludedDestinations": ["queue://audit.>", "/topic/secret"],
        "dynamicallyIncludedDestinations": ["queue://orders.>", "topic://prices.*"],
        "staticallyIncludedDestinations": ["queue://jobs"], "suppressDuplicateQueueSubscriptions": True,
        "userName": "net", "password": "pw",
    })
    for connection in (static, dynamic):
        assert (connection.max_hops, connection.advert_hops) == (3, 2)
        assert not connection.conduit_subscriptions and connection.prefer_local and connection.dynamic_only
        assert connection.confirmation_window == 7
        assert [connection.retry.delay_ms(i) for i in range(3)] == [100, 100, 100]
        assert (connection.cluster_user, connection.cluster_password) == ("net", "pw")
    assert static.static and static.redistribution_delay_ms == -1 and dynamic.redistribution_delay_ms == -1
    assert static.address.covers("/queue/jobs") and not static.address.covers("/topic/jobs")
    assert dynamic.address.covers("/queue/orders.eu") and dynamic.address.covers("/topic/prices.fx")
    assert not dynamic.address.covers("/topic/orders.eu") and not dynamic.address.covers("/queue/other")
    audit = compile_({"group": "g1", "uri": uri("g2"), "excludedDestinations": ["queue://audit.>"]})[0]
    assert not audit.address.covers("/queue/audit.x") and audit.address.covers("/topic/audit.x")


def test_a_failover_list_of_one_groups_members_is_one_link_and_several_groups_several() -> None:
    failover = "static:(failover:(" + ",".join(f"tcp://{a}" for a in MEMBERS["g2"]) + "))"
    (connection,) = compile_({"group": "g1", "uri": failover})
    assert connection.forwards == (("g1", "g2"),)
    (hub,) = compile_({"group": "g1", "uri": uri("g2", "g3")})
    assert hub.forwards == (("g1", "g2"), ("g1", "g3"))


def test_connectors_with_equal_options_share_one_connection() -> None:
    connections = compile_({"group": "g1", "uri": uri("g2")}, {"group": "g2", "uri": uri("g3")},
                           {"group": "g3", "uri": uri("g1"), "name": "back"})
    assert len(connections) == 1 and connections[0].forwards == (("g1", "g2"), ("g2", "g3"), ("g3", "g1"))


@pytest.mark.parametrize(("entry", "message"), [
    ({"group": "g1", "uri": uri("g2"), "networkTtl": 2},
     "network_connector[0].networkTtl is not a network_connector option"),
    ({"uri": uri("g2")}, "network_connector[0].group is required"),
    ({"group": "g9", "uri": uri("g2")}, "network_connector[0].group names 'g9', which is no group"),
    ({"group": "g1"}, "network_connector[0].uri is required"),
    ({"group": "g1", "uri": "multicast://default"}, "network_connector[0].uri must be a static: list"),
    ({"group": "g1", "uri": "static:(stomp://127.0.0.1:9)"}, "has 127.0.0.1:9, which is no member's STOMP address"),
    ({"group": "g1", "uri": "static:(ws://127.0.0.1:1021)"}, "has 'ws://127.0.0.1:1021', not a broker address"),
    ({"group": "g1", "uri": uri("g1")}, "names a member of 'g1' itself"),
    ({"group": "g1", "uri": uri("g2"), "duplex": "yes"}, "network_connector[0].duplex must be true or false"),
    ({"group": "g1", "uri": uri("g2"), "networkTTL": 0}, "network_connector[0].networkTTL must be at least 1"),
    ({"group": "g1", "uri": uri("g2"), "excludedDestinations": ["audit"]}, 'name the kind, "queue://audit"'),
    ({"group": "g1", "uri": uri("g2"), "excludedDestinations": ["queue://a.>.b"]}, "'>' must be the last element"),
    ({"group": "g1", "uri": uri("g2"), "maxReconnectDelay": 10},
     "maxReconnectDelay must be at least initialReconnectDelay"),
    ({"group": "g1", "uri": uri("g2"), "password": "pw"}, "userName is required with a password"),
])
def test_a_bad_connector_is_refused_naming_the_file_and_key(entry: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as error:
        compile_(entry)
    assert str(error.value).startswith(f"{PATH}: ") and message in str(error.value)


def test_two_connectors_with_different_options_for_every_destination_of_a_group_are_refused() -> None:
    with pytest.raises(ConfigError, match="both link 'g2' for every destination with different options"):
        compile_({"group": "g1", "uri": uri("g2")}, {"group": "g2", "uri": uri("g3"), "networkTTL": 2})
    split = compile_({"group": "g1", "uri": uri("g2"), "dynamicallyIncludedDestinations": ["queue://a.>"]},
                     {"group": "g2", "uri": uri("g3"), "networkTTL": 2})
    assert len(split) == 2


def test_a_connector_name_must_be_unique() -> None:
    with pytest.raises(ConfigError, match="'main' is used twice"):
        parse_network_connectors(PATH, [{"group": "g1", "uri": uri("g2"), "name": "main"}], MEMBERS, ("main",))
