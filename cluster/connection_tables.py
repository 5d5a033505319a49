"""A cluster connection: the `[[cluster_connection]]` table of a topology file.

Artemis's vocabulary in snake_case (docs/cluster.md has every key)::

    [[cluster_connection]]
    name = "main"
    address = "orders.>, !orders.local.>"    # default: everything
    groups = ["g1", "g2", "g3"]
    links = "mesh"                # or "chain" (in the order of `groups`) or [["g1", "g2"], ...]
    message_load_balancing = "ON_DEMAND"   # OFF | STRICT | ON_DEMAND | OFF_WITH_REDISTRIBUTION
    max_hops = 1
    redistribution_delay_ms = 500          # -1: off
    use_duplicate_detection = true
    retry_interval_ms = 500
    retry_interval_multiplier = 2.0
    max_retry_interval_ms = 10000
    reconnect_attempts = -1                # -1: forever
    confirmation_window = 1000             # forwards in flight per link
    cluster_user = "cluster"
    cluster_password_env = "RAFTMQ_CLUSTER_PASSWORD"   # or cluster_password = "..."
    tls_ca_file = "ca.pem"        # the groups' client ports use [tls]: bridges verify them with this CA

    [[cluster_connection]]        # instead of groups/links: edges (embedded brokers, raftmq.embedded)
    name = "edges"                # that no topology lists may open a link to these groups
    accept_edges = ["hub"]

`parse_cluster_connections` checks every key and names the file and key in its `ConfigError`;
what it builds (`ClusterConnection`) is in raftmq.routing.cluster_connection.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from cluster.table import Table, tables
from raftmq.errors import ConfigError
from raftmq.routing.addresses import AddressFilter
from raftmq.routing.cluster_connection import (
    DEFAULT_REDISTRIBUTION_DELAY_MS,
    LOAD_BALANCING,
    ON_DEMAND,
    ClusterConnection,
    RetryPolicy,
)
from raftmq.routing.discovery import DiscoveryGroup
from raftmq.security_config import reading_names_only

MESH = "mesh"
CHAIN = "chain"

_KEYS = (
    "name", "address", "groups", "links", "message_load_balancing", "max_hops", "redistribution_delay_ms",
    "use_duplicate_detection", "retry_interval_ms", "retry_interval_multiplier", "max_retry_interval_ms",
    "reconnect_attempts", "confirmation_window", "cluster_user", "cluster_password", "cluster_password_env",
    "discovery_group", "tls_ca_file", "accept_edges",
)


def parse_cluster_connections(path: Path, entries: Any, groups: tuple[str, ...],
                              discovery: dict[str, DiscoveryGroup] | None = None) -> tuple[ClusterConnection, ...]:
    """The `[[cluster_connection]]` tables of topology file `path`, whose groups are `groups`
    (`discovery`: its discovery groups by name)."""
    connections: list[ClusterConnection] = []
    for index, entry in enumerate(tables(path, "cluster_connection", entries)):
        table = Table(path, f"cluster_connection[{index}]", entry, _KEYS, "cluster_connection")
        connections.append(_parse_one(table, groups, discovery or {}))
    names = [c.name for c in connections]
    for name in names:
        if names.count(name) > 1:
            raise ConfigError(f"{path}: two cluster connections are named {name!r}")
    return tuple(connections)


def _parse_one(table: Table, known_groups: tuple[str, ...], discovery: dict[str, DiscoveryGroup]) -> ClusterConnection:
    raw = table.raw
    name = table.text("name", None)
    if name is None:
        table.fail("name", "is required")
    assert name is not None
    address_text = table.text("address", "", empty=True) or ""
    try:
        address = AddressFilter.parse(address_text)
    except ValueError as exc:
        table.fail("address", f"is invalid: {exc}")
    members = raw.get("groups")
    if members is not None and (not isinstance(members, list) or not all(isinstance(g, str) for g in members)):
        table.fail("groups", f"must be a list of group names, got {members!r}")
    found: DiscoveryGroup | None = None
    hubs: tuple[str, ...] = ()
    if "accept_edges" in raw:
        wanted_hubs = raw["accept_edges"]
        if not (isinstance(wanted_hubs, list) and wanted_hubs and all(isinstance(g, str) for g in wanted_hubs)):
            table.fail("accept_edges", f"must be a list of group names, got {wanted_hubs!r}")
        if members is not None or "links" in raw or "discovery_group" in raw:
            table.fail("accept_edges", "and groups/links/discovery_group are both set: a connection either lists "
                       "its groups, discovers them or accepts edges")
        for group in wanted_hubs:
            if group not in known_groups:
                table.fail("accept_edges", f"names {group!r}, which is no group of this topology "
                           f"(groups: {', '.join(known_groups)})")
        hubs = tuple(sorted(set(wanted_hubs)))
        links: tuple[tuple[str, str], ...] = ()
    elif "discovery_group" in raw:
        wanted = table.text("discovery_group", None)
        if wanted not in discovery:
            table.fail("discovery_group", f"names {wanted!r}, which is no [[discovery_group]] of this topology "
                       f"(known: {', '.join(discovery) or 'none'})")
        if members is not None or "links" in raw:
            table.fail("discovery_group", "and groups/links are both set: the groups are either listed or discovered")
        found = discovery[wanted or ""]
        links = ()
    else:
        links = _links(table, members, raw.get("links", MESH))
    for a, b in links:
        for group in (a, b):
            if group not in known_groups:
                table.fail("links" if members is None else "groups",
                           f"names {group!r}, which is no group of this topology "
                           f"(groups: {', '.join(known_groups)})")
    policy = raw.get("message_load_balancing", ON_DEMAND)
    if policy not in LOAD_BALANCING:
        table.fail("message_load_balancing", f"must be one of {', '.join(LOAD_BALANCING)}, got {policy!r}")
    duplicate_detection = table.flag("use_duplicate_detection", True)
    multiplier = table.number("retry_interval_multiplier", 2.0, 1)
    retry = RetryPolicy(
        table.integer("retry_interval_ms", 500, 1),
        float(multiplier),
        table.integer("max_retry_interval_ms", 10_000, 1),
        table.integer("reconnect_attempts", -1, 0, minus_one=True),
    )
    if retry.max_retry_interval_ms < retry.retry_interval_ms:
        table.fail("max_retry_interval_ms", f"must be at least retry_interval_ms ({retry.retry_interval_ms})")
    user, password = table.credentials("cluster_user", "cluster_password", "cluster_password_env")
    ca_file = table.text("tls_ca_file", None)
    if ca_file is not None:
        ca_path = table.path.parent / ca_file
        if not ca_path.is_file() and not reading_names_only():
            table.fail("tls_ca_file", f"names {ca_file!r}, which is not a file ({ca_path})")
        ca_file = str(ca_path.resolve())
    return ClusterConnection(
        name=name,
        links=links,
        address=address,
        message_load_balancing=str(policy),
        max_hops=table.integer("max_hops", 1, 0),
        redistribution_delay_ms=table.integer("redistribution_delay_ms", DEFAULT_REDISTRIBUTION_DELAY_MS, 0,
                                              minus_one=True),
        use_duplicate_detection=duplicate_detection,
        retry=retry,
        confirmation_window=table.integer("confirmation_window", 1000, 1),
        cluster_user=user,
        cluster_password=password,
        tls_ca_file=ca_file,
        discovery=found,
        edge_hubs=hubs,
    )


def _links(table: Table, members: list[str] | None, links: Any) -> tuple[tuple[str, str], ...]:
    pairs: set[tuple[str, str]] = set()
    if isinstance(links, str):
        if links not in (MESH, CHAIN):
            table.fail("links", f"must be \"mesh\", \"chain\" or a list of [group, group] pairs, got {links!r}")
        if not members or len(members) < 2:
            table.fail("groups", "must name at least two groups for a mesh or a chain")
        assert members is not None
        if len(set(members)) != len(members):
            table.fail("groups", f"names a group twice: {members!r}")
        if links == MESH:
            pairs = {(a, b) for i, a in enumerate(members) for b in members[i + 1 :]}
        else:
            pairs = set(itertools.pairwise(members))
    elif isinstance(links, list):
        for pair in links:
            if (not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(g, str) for g in pair))
                    or pair[0] == pair[1]):
                table.fail("links", f"must hold [group, group] pairs of two different groups, got {pair!r}")
            if members is not None and not set(pair) <= set(members):
                table.fail("links", f"links {pair!r}, not among groups {members!r}")
            pairs.add((pair[0], pair[1]))
        if not pairs:
            table.fail("links", "is empty")
    else:
        table.fail("links", f"must be \"mesh\", \"chain\" or a list of [group, group] pairs, got {links!r}")
    return tuple(sorted({(a, b) if a < b else (b, a) for a, b in pairs}))
