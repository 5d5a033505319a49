"""The `[[broadcast_group]]` and `[[discovery_group]]` tables of a topology file (what they
mean, and the pure parts of discovery: raftmq.routing.discovery)."""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any

from cluster.table import Table, tables
from raftmq.routing.discovery import BroadcastGroup, DiscoveryGroup

_BROADCAST_KEYS = ("name", "group_address", "group_port", "broadcast_period_ms", "local_bind_address")
_DISCOVERY_KEYS = ("name", "group_address", "group_port", "refresh_timeout_ms", "file", "local_bind_address")


def parse_broadcast_groups(path: Path, entries: Any) -> tuple[BroadcastGroup, ...]:
    groups = []
    for index, entry in enumerate(tables(path, "broadcast_group", entries)):
        table = Table(path, f"broadcast_group[{index}]", entry, _BROADCAST_KEYS, "broadcast_group")
        groups.append(BroadcastGroup(
            table.text("name", required=True) or "", _multicast(table), table.port("group_port"),
            table.integer("broadcast_period_ms", 2000, 10), table.text("local_bind_address"),
        ))
    return tuple(groups)


def parse_discovery_groups(path: Path, entries: Any) -> tuple[DiscoveryGroup, ...]:
    groups = []
    for index, entry in enumerate(tables(path, "discovery_group", entries)):
        table = Table(path, f"discovery_group[{index}]", entry, _DISCOVERY_KEYS, "discovery_group")
        name = table.text("name", required=True) or ""
        file = table.text("file")
        refresh = table.integer("refresh_timeout_ms", 10_000, 100)
        if file is not None:
            if "group_address" in entry or "group_port" in entry:
                table.fail("file", "and group_address/group_port are both set: a discovery group uses one")
            groups.append(DiscoveryGroup(name, refresh_timeout_ms=refresh, file=(path.parent / file).resolve()))
        else:
            groups.append(DiscoveryGroup(name, _multicast(table), table.port("group_port"), refresh,
                                         local_bind_address=table.text("local_bind_address")))
    return tuple(groups)


def _multicast(table: Table) -> str:
    text = table.text("group_address", required=True) or ""
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        table.fail("group_address", f"must be an IP address, got {text!r}")
    if not address.is_multicast:
        table.fail("group_address", f"must be a multicast address (224.0.0.0/4 or ff00::/8), got {text}")
    return text
