"""[[cluster_connection]] tables: every key, every error naming the file and the key, and a
node's view of the cluster from a topology (cluster.node_settings)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cluster.connection_tables import parse_cluster_connections
from cluster.group_file import load_group_config
from cluster.node_settings import node_cluster_settings, with_cluster
from cluster.topology import failover_urls, preset_path, preset_topology
from raftmq.errors import ConfigError
from raftmq.routing.cluster_connection import ON_DEMAND, STRICT, ClusterConnection, cluster_view

PATH = Path("cluster.toml")
GROUPS = ("g1", "g2", "g3")


def parse(**entry: Any) -> ClusterConnection:
    (connection,) = parse_cluster_connections(PATH, [{"name": "c", "groups": list(GROUPS), **entry}], GROUPS)
    return connection


def test_defaults() -> None:
    connection = parse()
    assert connection.links == (("g1", "g2"), ("g1", "g3"), ("g2", "g3"))
    assert connection.message_load_balancing == ON_DEMAND and connection.max_hops == 1
    assert connection.redistribution_delay_ms == 500 and connection.redistributes
    assert connection.use_duplicate_detection and connection.confirmation_window == 1000
    assert connection.retry.reconnect_attempts == -1 and connection.cluster_user is None


def test_every_key() -> None:
    connection = parse(address="orders.>", links="chain", message_load_balancing="STRICT", max_hops=2,
                       redistribution_delay_ms=-1, use_duplicate_detection=False, retry_interval_ms=100,
                       retry_interval_multiplier=1.5, max_retry_interval_ms=900, reconnect_attempts=3,
                       confirmation_window=7, cluster_user="cluster", cluster_password="secret")
    assert connection.links == (("g1", "g2"), ("g2", "g3"))
    assert connection.address.covers("/queue/orders.eu") and not connection.address.covers("/queue/x")
    assert (connection.message_load_balancing, connection.max_hops) == (STRICT, 2)
    assert not connection.redistributes and not connection.use_duplicate_detection
    assert connection.retry.delay_ms(10) == 900 and connection.retry.reconnect_attempts == 3
    assert connection.confirmation_window == 7 and connection.cluster_password == "secret"
    assert "secret" not in repr(connection)


def test_a_tls_ca_file_is_found_beside_the_topology_file(tmp_path: Path) -> None:
    (tmp_path / "ca.pem").write_text("a CA")
    (connection,) = parse_cluster_connections(tmp_path / "cluster.toml", [{"name": "c", "groups": list(GROUPS),
                                                                          "tls_ca_file": "ca.pem"}], GROUPS)
    assert connection.tls_ca_file == str((tmp_path / "ca.pem").resolve())
    assert parse().tls_ca_file is None


def test_explicit_links_and_neighbours() -> None:
    connection = parse(links=[["g3", "g1"], ["g1", "g2"]])
    assert connection.links == (("g1", "g2"), ("g1", "g3"))
    assert connection.neighbours("g1") == ("g2", "g3") and connection.neighbours("g2") == ("g1",)


def test_a_password_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLUSTER_SECRET", "s3")
    assert parse(cluster_user="u", cluster_password_env="CLUSTER_SECRET").cluster_password == "s3"


@pytest.mark.parametrize(("entry", "key"), [
    ({"colour": "red"}, "colour"),
    ({"message_load_balancing": "SOMETIMES"}, "message_load_balancing"),
    ({"links": "ring"}, "links"),
    ({"links": [["g1", "g1"]]}, "links"),
    ({"links": [["g1", "g9"]], "groups": None}, "links"),
    ({"groups": ["g1", "g9"]}, "groups"),
    ({"groups": ["g1"]}, "groups"),
    ({"max_hops": -1}, "max_hops"),
    ({"redistribution_delay_ms": -2}, "redistribution_delay_ms"),
    ({"reconnect_attempts": -5}, "reconnect_attempts"),
    ({"confirmation_window": 0}, "confirmation_window"),
    ({"retry_interval_multiplier": 0.5}, "retry_interval_multiplier"),
    ({"max_retry_interval_ms": 10, "retry_interval_ms": 100}, "max_retry_interval_ms"),
    ({"use_duplicate_detection": "yes"}, "use_duplicate_detection"),
    ({"address": "a..b"}, "address"),
    ({"cluster_password": "p"}, "cluster_user"),
    ({"cluster_user": "u", "cluster_password_env": "RAFTMQ_NOT_SET_ANYWHERE"}, "cluster_password_env"),
    ({"cluster_user": "u", "cluster_password": "p", "cluster_password_env": "X"}, "cluster_password_env"),
    ({"tls_ca_file": "no-such-ca.pem"}, "tls_ca_file"),
])
def test_errors_name_the_file_and_the_key(entry: dict[str, Any], key: str) -> None:
    table = {"name": "c", "groups": list(GROUPS), **entry}
    if table.get("groups") is None:
        del table["groups"]
    with pytest.raises(ConfigError) as error:
        parse_cluster_connections(PATH, [table], GROUPS)
    assert str(PATH) in str(error.value) and f"cluster_connection[0].{key}" in str(error.value)


def test_names_are_unique_and_required() -> None:
    with pytest.raises(ConfigError, match="named 'c'"):
        parse_cluster_connections(PATH, [{"name": "c", "groups": ["g1", "g2"]}] * 2, GROUPS)
    with pytest.raises(ConfigError, match=r"cluster_connection\[0\]\.name"):
        parse_cluster_connections(PATH, [{"groups": ["g1", "g2"]}], GROUPS)


def test_a_view_holds_only_the_connections_that_link_the_group() -> None:
    pair = parse(groups=["g1", "g2"])
    assert cluster_view("g3", (pair,)) is None
    view = cluster_view("g1", (pair,))
    assert view is not None and view.neighbours == ("g2",) and view.governing("/queue/a") is pair


# -- topologies and presets -----------------------------------------------------------------


def test_the_presets_describe_their_clusters() -> None:
    chain = preset_topology("chain")
    view, peers = node_cluster_settings(chain, "g2")
    assert view is not None and view.neighbours == ("g1", "g3") and view.connections[0].max_hops == 2
    assert [p.name for p in peers] == ["g1", "g3"] and all(len(p.clients) == 3 for p in peers)
    view, _ = node_cluster_settings(chain, "g1")
    assert view is not None and view.neighbours == ("g2",)
    for name, size in (("symmetric", 3), ("symmetric-lite", 1)):
        topology = preset_topology(name)
        assert [len(spec.config.members) for spec in topology.groups] == [size] * 3
        view, peers = node_cluster_settings(topology, "g3")
        assert view is not None and view.neighbours == ("g1", "g2")
        per_group, whole = failover_urls(topology)
        assert set(per_group) == set(GROUPS) and whole.count("(") == 4


def test_a_node_started_with_a_topology_joins_its_cluster() -> None:
    topology_path = preset_path("symmetric")
    group_path = topology_path.parent / "symmetric-g2.toml"
    config = with_cluster(load_group_config(group_path), group_path, topology_path)
    node = config.node_config("n1")
    assert node.core.cluster is not None and node.core.cluster.group == "g2"
    assert [peer.name for peer in node.cluster_peers] == ["g1", "g3"]
    assert node.core.broker_name == "g2"  # message ids unique across the cluster
    other = topology_path.parent / "chain-g2.toml"
    with pytest.raises(ConfigError, match="not"):
        with_cluster(load_group_config(other), other, topology_path)


def test_a_connection_accepting_edges() -> None:
    def edges(**entry: Any) -> ClusterConnection:
        (connection,) = parse_cluster_connections(PATH, [{"name": "edges", **entry}], GROUPS)
        return connection

    connection = edges(accept_edges=["g1"])
    assert connection.edge_hubs == ("g1",) and connection.links == ()
    view = cluster_view("g1", (connection,))
    assert view is not None and view.accepts_edges and view.accepts("svc")
    assert cluster_view("g2", (connection,)) is None
    for entry, problem in (({"accept_edges": ["g9"]}, "names 'g9', which is no group"),
                           ({"accept_edges": "g1"}, "must be a list of group names"),
                           ({"accept_edges": ["g1"], "groups": ["g1", "g2"]}, "groups/links/discovery_group")):
        with pytest.raises(ConfigError, match=problem):
            edges(**entry)
