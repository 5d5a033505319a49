"""Embedded brokers' data directories read as a run (docs/audit.md, "Embedded brokers").

A named `raftmq.embedded.EmbeddedBroker` with a `data_dir` D is a Raft group whose members'
files are at D/<member>/ (raft/, bodies/), and it leaves D/embedded.json: its group's name,
members, network URIs (cluster.network_uris) and `[core]` table. Brokers whose data
directories are RUN/data/<group>/ therefore lay out their files as a chaos run does, and
`raftmq audit RUN` reads them without a run.json: each group's core configuration comes from
its embedded.json instead of a topology file. Such a run has no client history, so the checks
that read one do not apply; the checks of stored files do. Small files only, on the driver and
in the data sources' partitions.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from raftmq.core.config import CoreConfig
from raftmq.errors import AuditError, ConfigError

EMBEDDED_FILE = "embedded.json"  # raftmq.embedded.EMBEDDED_FILE
EMBEDDED_FORMAT = 1
# The workload of a run of embedded brokers: nothing recorded what their clients sent and received.
EMBEDDED_WORKLOAD = "embedded"


def embedded_records(path: Path) -> list[Path]:
    """The embedded.json files of the brokers whose data directories are path/data/<group>/."""
    data = path / "data"
    return sorted(data.glob(f"*/{EMBEDDED_FILE}")) if data.is_dir() else []


def is_embedded_data_dir(path: Path) -> bool:
    """One embedded broker's own data directory (it holds embedded.json), not a run of them."""
    return (path / EMBEDDED_FILE).is_file()


def embedded_cores(path: Path, groups: Iterable[str]) -> dict[str, CoreConfig]:
    """The core configuration each of `groups` (directories under path/data/) ran with, from its
    embedded.json: its `[core]` table, the broker name a group member gets, and the group's view
    of the cluster its network URIs make. AuditError naming the file when one is missing, not an
    embedded broker's record, or names another group than its directory."""
    return {group: _core(path / "data" / group / EMBEDDED_FILE, group) for group in groups}


def max_hops(cores: dict[str, CoreConfig]) -> int:
    """The longest route the groups' cluster connections allow (0: no group is in a network)."""
    return max((connection.max_hops for core in cores.values() if core.cluster is not None
                for connection in core.cluster.connections), default=0)


def _core(file: Path, group: str) -> CoreConfig:
    from cluster.group_file import DEFAULT_BROKER_NAME
    from raftmq.config import load_core
    from raftmq.routing.cluster_connection import ClusterView

    record = _record(file, group)
    try:
        core = load_core(record["core"], file)
    except ConfigError as exc:
        raise AuditError(str(exc)) from None
    if core.broker_name == DEFAULT_BROKER_NAME:
        # As a group member's node configuration has it (cluster.group_file.GroupConfig.node_config):
        # message ids are "<broker name>-<n>", the group's name unless [core] names another.
        core = dataclasses.replace(core, broker_name=group)
    network = record["network"]
    if not network:
        return core
    from cluster.network_uris import parse_network

    try:
        connections = parse_network(network).connections  # the cluster password signs, it does not route
    except ConfigError as exc:
        raise AuditError(f"{file}: {exc}") from None
    return dataclasses.replace(core, cluster=ClusterView(group, connections))


def _record(file: Path, group: str) -> dict[str, Any]:
    try:
        record = json.loads(file.read_text())
    except FileNotFoundError:
        raise AuditError(f"{file.parent}: member data without {EMBEDDED_FILE} (in a run of embedded brokers, "
                         f"without run.json, each data/<group>/ is a named embedded broker's data_dir)") from None
    except (OSError, ValueError) as exc:
        raise AuditError(f"{file}: unreadable ({exc})") from None
    if not isinstance(record, dict) or record.get("format") != EMBEDDED_FORMAT:
        raise AuditError(f"{file}: not an embedded broker's record of format {EMBEDDED_FORMAT}")
    if record.get("group") != group:
        raise AuditError(f"{file}: the broker of group {record.get('group')!r} under data/{group}/; the audit names "
                         f"groups by their directories, so its data_dir must be data/{record.get('group')}/")
    if not isinstance(record.get("core"), dict) or not isinstance(record.get("network", []), list):
        raise AuditError(f"{file}: `core` must be a table and `network` a list of URIs")
    return {"core": record["core"], "network": [str(uri) for uri in record.get("network", [])]}
