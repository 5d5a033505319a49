"""The pure parts of discovery (cluster.discovery_tables): the announcement's wire form and its
signature, the table of groups heard of, the discovery file, and the topology tables' errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cluster.connection_tables import parse_cluster_connections
from cluster.discovery_tables import parse_broadcast_groups, parse_discovery_groups
from raftmq.errors import ConfigError
from raftmq.routing.discovery import Announcement, DiscoveryTable, decode_announcement, encode_announcement, parse_members

PATH = Path("/etc/raftmq/topology.toml")


def test_an_announcement_round_trips_and_a_forged_one_is_dropped() -> None:
    heard = Announcement("main", "g2", ("10.0.0.2:61613", "10.0.0.3:61613"))
    assert decode_announcement(encode_announcement(heard, None), None) == heard
    signed = encode_announcement(heard, "secret")
    assert decode_announcement(signed, "secret") == heard
    with pytest.raises(ValueError, match="not signed"):
        decode_announcement(signed, "other")
    with pytest.raises(ValueError, match="not signed"):
        decode_announcement(encode_announcement(heard, None), "secret")  # unsigned, where one is needed
    forged = json.loads(signed)
    forged["body"] = forged["body"].replace("10.0.0.2", "6.6.6.6")
    with pytest.raises(ValueError, match="not signed"):
        decode_announcement(json.dumps(forged).encode(), "secret")
    for garbage in (b"", b"{}", b"[1]", b"x" * 9000, json.dumps({"body": "{}", "tag": ""}).encode()):
        with pytest.raises(ValueError):
            decode_announcement(garbage, None)


def test_the_table_knows_what_is_new_moved_up_and_down() -> None:
    table = DiscoveryTable("g1", refresh_timeout_ms=1000)
    assert not table.hear("g1", ("a:1",), 0.0)  # itself
    assert table.hear("g2", ("a:2",), 0.0) and not table.hear("g2", ("a:2",), 0.5)
    assert table.hear("g2", ("b:2",), 0.6)  # moved
    assert table.up("g2", 1.5) and not table.up("g2", 1.7) and not table.up("g3", 0.0)
    assert table.groups() == {"g2": ("b:2",)}


def test_the_members_file() -> None:
    assert parse_members(json.dumps({"groups": {"g2": ["h:1", "h:2"]}}), "m.json") == {"g2": ("h:1", "h:2")}
    for text in ("", "{}", json.dumps({"groups": {"g2": []}}), json.dumps({"groups": {"g2": ["nocolon"]}})):
        with pytest.raises(ValueError, match="m.json"):
            parse_members(text, "m.json")


@pytest.mark.parametrize(("tables", "message"), [
    ({"broadcast_group": [{"name": "bg", "group_address": "10.0.0.1", "group_port": 9876}]},
     "broadcast_group[0].group_address must be a multicast address"),
    ({"broadcast_group": [{"name": "bg", "group_address": "231.7.7.7", "group_port": 0}]}, "group_port must be a port number"),
    ({"broadcast_group": [{"name": "bg", "group_address": "231.7.7.7", "group_port": 9876, "period": 1}]},
     "broadcast_group[0].period is not a broadcast_group key"),
    ({"discovery_group": [{"name": "dg", "file": "m.json", "group_address": "231.7.7.7"}]}, "a discovery group uses one"),
    ({"discovery_group": [{"group_address": "231.7.7.7", "group_port": 9876}]}, "discovery_group[0].name is required"),
])
def test_bad_discovery_tables_name_the_file_and_key(tables: dict[str, list[dict[str, object]]], message: str) -> None:
    with pytest.raises(ConfigError) as error:
        parse_broadcast_groups(PATH, tables.get("broadcast_group", []))
        parse_discovery_groups(PATH, tables.get("discovery_group", []))
    assert str(error.value).startswith(f"{PATH}: ") and message in str(error.value)


def test_a_cluster_connection_names_a_known_discovery_group_and_no_groups() -> None:
    (dg,) = parse_discovery_groups(PATH, [{"name": "dg", "file": "m.json"}])
    (connection,) = parse_cluster_connections(PATH, [{"name": "c", "discovery_group": "dg"}], ("g1",), {"dg": dg})
    assert connection.discovery == dg and connection.links == () and connection.forwards_to("g1", "g9")
    assert dg.file == Path("/etc/raftmq/m.json")  # relative to the topology file
    with pytest.raises(ConfigError, match="discovery_group names 'nope', which is no"):
        parse_cluster_connections(PATH, [{"name": "c", "discovery_group": "nope"}], ("g1",), {"dg": dg})
    with pytest.raises(ConfigError, match="groups are either listed or discovered"):
        parse_cluster_connections(PATH, [{"name": "c", "discovery_group": "dg", "groups": ["g1"]}], ("g1",), {"dg": dg})
