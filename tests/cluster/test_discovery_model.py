"""The pure parts of discovery (cluster.discovery_tables): the announcement's wire form and its
signature, the table of groups heard of, the discovery file, and the topology tables' errors."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from cluster.connection_tables import parse_cluster_connections
from cluster.discovery_tables import parse_broadcast_groups, parse_discovery_groups
from raftmq.errors import ConfigError
from raftmq.routing.discovery import (
    Announcement,
    DiscoveryTable,
    Freshness,
    decode_announcement,
    encode_announcement,
    parse_members,
)

PATH = Path("/etc/raftmq/topology.toml")


def test_an_announcement_round_trips_and_a_forged_one_is_dropped() -> None:
    heard = Announcement("main", "g2", ("10.0.0.2:61613", "10.0.0.3:61613"), 1_700_000_000_000, "a1b2", 7)
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
    for garbage in (b"", b"{}", b"[1]", b"x" * 9000, json.dumps({"body": "{}", "tag": ""}).encode(),
                    json.dumps({"body": "[]", "tag": ""}).encode(),
                    encode_announcement(Announcement("main", "g2", ("h:1",), 5, "s" * 65, 1), None)):
        with pytest.raises(ValueError):
            decode_announcement(garbage, None)
    # Time and sequence are signed: a replay cannot be freshened.
    fresher = json.loads(signed)
    fresher["body"] = fresher["body"].replace("1700000000000", "1800000000000")
    with pytest.raises(ValueError, match="not signed"):
        decode_announcement(json.dumps(fresher).encode(), "secret")


def test_an_older_raftmqs_announcement_is_taken_unsigned_only() -> None:
    older = json.dumps({"body": json.dumps({"cluster": "main", "group": "g2", "clients": ["h:1"]}), "tag": ""}).encode()
    assert decode_announcement(older, None) == Announcement("main", "g2", ("h:1",))
    assert Freshness(1000).refusal(decode_announcement(older, None), 10**13) is None
    unstamped = encode_announcement(Announcement("main", "g2", ("h:1",)), "secret")
    with pytest.raises(ValueError, match="without a time and sequence"):
        decode_announcement(unstamped, "secret")


def test_an_announcement_is_taken_once_in_order_and_while_fresh() -> None:
    fresh = Freshness(max_age_ms=10_000)
    first = Announcement("main", "g2", ("h:1",), 100_000, "s1", 1)
    assert fresh.refusal(first, 100_050) is None
    assert "replayed" in str(fresh.refusal(first, 100_060))  # the same again
    assert fresh.refusal(replace(first, seq=3, sent_ms=102_000), 102_010) is None
    assert "replayed" in str(fresh.refusal(replace(first, seq=2, sent_ms=101_000), 102_020))  # an older one, late
    assert "stale" in str(fresh.refusal(replace(first, seq=9, sent_ms=100_000), 110_001))  # past the window
    assert "ahead" in str(fresh.refusal(replace(first, seq=9, sent_ms=120_002), 110_001))  # a clock far ahead
    # a new leader's announcer
    assert fresh.refusal(replace(first, sender="s2", seq=1, sent_ms=110_000), 110_001) is None
    assert fresh.refusal(replace(first, sender="s3", seq=1, sent_ms=115_000), 115_000) is None
    assert set(fresh.last) == {"s2", "s3"}  # s1 is forgotten: nothing of it passes the window any more


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
    ({"broadcast_group": [{"name": "bg", "group_address": "231.7.7.7", "group_port": 0}]},
     "group_port must be a port number"),
    ({"broadcast_group": [{"name": "bg", "group_address": "231.7.7.7", "group_port": 9876, "period": 1}]},
     "broadcast_group[0].period is not a broadcast_group key"),
    ({"discovery_group": [{"name": "dg", "file": "m.json", "group_address": "231.7.7.7"}]},
     "a discovery group uses one"),
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
