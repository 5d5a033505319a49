"""Group files: one TOML file describes every member of a Raft group (`[group]`, `[raft]`,
`[journal]`, `[server]`, `[limits]`, `[core]`, one `[[node]]` per member, and the security
tables every member shares), and the members file that takes the place of its `[[node]]`
tables once membership changes (`<data_dir>/members.toml`).

`load_config` tells a group file from a single node's file (raftmq.config). Every error is a
`ConfigError` naming the file and the dotted key.
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from raftmq.config import (
    NodeConfig,
    RaftTimings,
    build_dataclass,
    check_addresses,
    check_follower_clients,
    load_core,
    load_node_config,
    read_toml,
    split_address,
)
from raftmq.core.config import CoreConfig
from raftmq.errors import ConfigError
from raftmq.protocol.limits import Limits
from raftmq.security_config import SECURITY_TABLES, load_security

DEFAULT_BROKER_NAME = CoreConfig().broker_name  # "raftmq": replaced by the group's name
NODE_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")  # also a directory name


@dataclass(frozen=True, slots=True)
class GroupMember:
    """One `[[node]]` of a group file. Addresses are "host:port"."""

    id: str
    client: str  # STOMP listener
    raft: str  # Raft port (pysyncobj); bound exactly there
    admin: str | None = None  # admin HTTP (/status, body fetch between members); None: none
    mqtt: str | None = None  # MQTT listener (raftmq.server.mqtt); None: none


@dataclass(frozen=True, slots=True)
class JournalSettings:
    """The `[journal]` table: the members' segments of message bodies."""

    segment_bytes: int = 64 * 2**20
    cache_bytes: int = 32 * 2**20  # decoded batches kept by the journal
    body_cache_bytes: int = 16 * 2**20  # bodies kept by the node for deliveries (LRU)


@dataclass(frozen=True, slots=True)
class GroupConfig:
    name: str
    data_dir: str  # each member keeps its files in <data_dir>/<member id>/
    members: tuple[GroupMember, ...]
    # Raft port and body fetch; required off loopback. Never in a repr (nor so in a log line).
    password: str | None = field(default=None, repr=False)
    raft: RaftTimings = field(default_factory=RaftTimings)
    journal: JournalSettings = field(default_factory=JournalSettings)
    # Settings every member's STOMP server shares; host, port and name come from its [[node]].
    server: NodeConfig = field(default_factory=NodeConfig)
    # "$VAR (FILE)" when [group] password_env names a variable that was not set as the file was
    # read without needing the password (a neighbour's group in a topology): see `require_password`.
    password_unset: str | None = None

    def require_password(self) -> None:
        """Raise ConfigError when the group's password_env was not set: its members need it."""
        if self.password_unset is not None:
            raise ConfigError(f"{self.password_unset}: group.password_env names a variable that is not set or empty")

    def member(self, node_id: str) -> GroupMember:
        for member in self.members:
            if member.id == node_id:
                return member
        known = ", ".join(m.id for m in self.members)
        raise ConfigError(f"group {self.name}: no member {node_id!r} (members: {known})")

    def node_config(self, node_id: str) -> NodeConfig:
        member = self.member(node_id)
        host, port = split_address(member.client)
        core = self.server.core
        if core.broker_name == DEFAULT_BROKER_NAME:
            # Message ids are "<broker_name>-<n>": unique per group only if the name is, which
            # matters as soon as groups exchange messages (cluster connections, dedup ids).
            core = dataclasses.replace(core, broker_name=self.name)
        return dataclasses.replace(self.server, host=host, port=port, name=member.id, core=core, mqtt=member.mqtt)

    def admin_endpoint(self, member: GroupMember) -> str | None:
        """Where tools ask `member`'s admin port: "host:port", or "https://host:port" when the
        group has [tls] (its admin ports speak HTTPS only); None: it has none."""
        if member.admin is None:
            return None
        return f"https://{member.admin}" if self.server.security.tls is not None else member.admin

    def member_dir(self, node_id: str) -> Path:
        return Path(self.data_dir) / self.member(node_id).id


_GROUP_SECTIONS = ("group", "raft", "journal", "server", "limits", "core", "node", *SECURITY_TABLES)
_GROUP_KEYS = ("name", "data_dir", "password", "password_env")
_MEMBER_SERVER_KEYS = ("host", "port", "name", "admin", "mqtt")  # set per member, not in [server]
_SINGLE_NODE_KEYS = ("data_dir", "in_memory")  # a group has [group] data_dir and is never in memory


# A single node's Raft port: nobody ever connects to a group of one, so any free port on
# loopback does (the OS picks it; the member's id stays the same string across restarts).
SOLO_RAFT_ADDRESS = "127.0.0.1:0"


def single_node_group(config: NodeConfig, data_dir: str | None = None) -> GroupConfig:
    """The one-member group a durable single node runs as: its files in <data_dir>/<name>/."""
    if not NODE_ID_PATTERN.match(config.name):
        raise ConfigError(f"node.name {config.name!r}: use letters, digits, '_', '.', '-' (it names a directory)")
    member = GroupMember(id=config.name, client=f"{config.host}:{config.port}", raft=SOLO_RAFT_ADDRESS,
                         admin=config.admin, mqtt=config.mqtt)
    return GroupConfig(name=config.name, data_dir=data_dir or config.data_dir, members=(member,), server=config)


def is_group_file(path: str | Path) -> bool:
    """True when the file holds `[[node]]` tables (a group); False for a single-node file."""
    return isinstance(read_toml(Path(path)).get("node"), list)


def load_config(path: str | Path) -> NodeConfig | GroupConfig:
    """A group file (with `[[node]]` tables) or a single-node file (`[node]` table)."""
    return load_group_config(path) if is_group_file(path) else load_node_config(path)


def load_group_config(path: str | Path, *, require_password: bool = True) -> GroupConfig:
    """Read a group file. Tables: [group] (required: name, data_dir), [raft], [journal],
    [server], [limits], [core], one [[node]] per member (id, client, raft, admin, mqtt), and the
    security ones every member shares ([security], [[user]], [[acl]], [tls]).
    `require_password=False`: a password_env that is not set is no error (what a member of
    another group reads of this one: its addresses), `GroupConfig.require_password` raises later."""
    path = Path(path)
    raw = read_toml(path)
    unknown = sorted(set(raw) - set(_GROUP_SECTIONS))
    if unknown:
        raise ConfigError(f"{path}: unknown table or key {unknown[0]!r} "
                          f"(expected one of: {', '.join(_GROUP_SECTIONS)})")
    for name, value in raw.items():
        if name not in ("node", *SECURITY_TABLES) and not isinstance(value, dict):
            raise ConfigError(f"{path}: {name!r} must be a table ([{name}])")
    nodes = raw.get("node")
    if not isinstance(nodes, list) or not nodes or not all(isinstance(n, dict) for n in nodes):
        raise ConfigError(f"{path}: a group needs at least one [[node]] table")
    group = raw.get("group")
    if group is None:
        raise ConfigError(f"{path}: missing [group] table (name, data_dir)")
    for key in group:
        if key not in _GROUP_KEYS:
            raise ConfigError(f"{path}: unknown key group.{key} (known: {', '.join(_GROUP_KEYS)})")
    name = _required_str(group, "name", path, "group")
    data_dir = _required_str(group, "data_dir", path, "group")
    password, unset = _password(group, path)
    if unset is not None and require_password:
        raise ConfigError(f"{path}: group.password_env names ${unset}, which is not set or empty")
    members = tuple(_member(table, path, f"node[{i}]") for i, table in enumerate(nodes))
    _check_members(members, path)
    roster = Path(data_dir) / MEMBERS_FILE
    if roster.exists():
        members = load_members(roster)  # membership changed since the group file was written
    raft = build_dataclass(RaftTimings, raw.get("raft", {}), path, "raft")
    _check_timings(raft, path)
    journal = build_dataclass(JournalSettings, raw.get("journal", {}), path, "journal")
    if journal.segment_bytes == 0:
        raise ConfigError(f"{path}: journal.segment_bytes must be positive")
    server_table = raw.get("server", {})
    for key in (*_MEMBER_SERVER_KEYS, *_SINGLE_NODE_KEYS, "limits", "core", "security"):
        if key in server_table:
            where = ("each [[node]] (id, client, admin, mqtt)" if key in _MEMBER_SERVER_KEYS
                     else "[group] data_dir (a group is always durable)" if key in _SINGLE_NODE_KEYS
                     else f"a [{key}] table")
            raise ConfigError(f"{path}: server.{key}: set by {where}, not in [server]")
    limits = build_dataclass(Limits, raw.get("limits", {}), path, "limits")
    core = load_core(raw.get("core", {}), path)
    security = load_security(raw, path)
    server = build_dataclass(NodeConfig, server_table, path, "server", limits=limits, core=core, security=security)
    check_follower_clients(server, path, "server")
    return GroupConfig(name, data_dir, members, password, raft, journal, server,
                       password_unset=None if unset is None else f"{path}: ${unset}")


# `raftmq group add-node / remove-node / replace-node` keep the group's members here, in its
# data directory, once they change: it takes the place of the group file's [[node]] tables.
MEMBERS_FILE = "members.toml"


def load_members(path: Path) -> tuple[GroupMember, ...]:
    """The [[node]] tables of a members file (raftmq.ops.member_changes writes it)."""
    raw = read_toml(path)
    nodes = raw.get("node")
    if set(raw) - {"node"} or not isinstance(nodes, list) or not nodes or not all(isinstance(n, dict) for n in nodes):
        raise ConfigError(f"{path}: a members file holds [[node]] tables only, at least one")
    members = tuple(_member(table, path, f"node[{i}]") for i, table in enumerate(nodes))
    _check_members(members, path)
    return members


def _required_str(table: dict[str, Any], key: str, path: Path, prefix: str) -> str:
    value = table.get(key)
    if value is None:
        raise ConfigError(f"{path}: {prefix}.{key} is required")
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{path}: {prefix}.{key} must be a non-empty string, got {value!r}")
    return value


def _password(group: dict[str, Any], path: Path) -> tuple[str | None, str | None]:
    """(the password, or None; the variable password_env names when it is not set)."""
    if "password" in group and "password_env" in group:
        raise ConfigError(f"{path}: group.password and group.password_env: set one, not both")
    if "password" in group:
        return _required_str(group, "password", path, "group"), None
    if "password_env" in group:
        variable = _required_str(group, "password_env", path, "group")
        value = os.environ.get(variable)
        return (value, None) if value else (None, variable)
    return None, None


def _member(table: dict[str, Any], path: Path, prefix: str) -> GroupMember:
    for key in ("id", "client", "raft"):
        if key not in table:
            raise ConfigError(f"{path}: {prefix}.{key} is required")
    member: GroupMember = build_dataclass(GroupMember, table, path, prefix)
    if not NODE_ID_PATTERN.match(member.id):
        raise ConfigError(f"{path}: {prefix}.id {member.id!r}: use letters, digits, '_', '.', '-' "
                          "(it names a directory)")
    check_addresses(member, ("client", "raft", "admin", "mqtt"), path, prefix)
    return member


def _check_members(members: tuple[GroupMember, ...], path: Path) -> None:
    ids: set[str] = set()
    addresses: dict[str, str] = {}
    for i, member in enumerate(members):
        if member.id in ids:
            raise ConfigError(f"{path}: node[{i}].id {member.id!r} is used by another [[node]]")
        ids.add(member.id)
        for key in ("client", "raft", "admin", "mqtt"):
            value = getattr(member, key)
            if value is None:
                continue
            if value in addresses:
                raise ConfigError(f"{path}: node[{i}].{key} {value} is also {addresses[value]}")
            addresses[value] = f"node[{i}].{key}"


def _check_timings(raft: RaftTimings, path: Path) -> None:
    rules = [
        (raft.tick_period_ms > 0, "raft.tick_period_ms must be positive"),
        (raft.heartbeat_ms >= raft.tick_period_ms,
         "raft.append_entries_period_ms must be at least raft.tick_period_ms"),
        (raft.election_timeout_min_ms > 3 * raft.heartbeat_ms,
         "raft.election_timeout_min_ms must exceed three times raft.append_entries_period_ms "
         "(heart-beats keep followers from electing)"),
        (raft.election_timeout_max_ms > raft.election_timeout_min_ms,
         "raft.election_timeout_max_ms must exceed raft.election_timeout_min_ms"),
        (raft.max_entry_bytes > 0, "raft.max_entry_bytes must be positive"),
        (raft.max_entry_bytes < raft.append_entries_batch_bytes,
         "raft.max_entry_bytes must be below raft.append_entries_batch_bytes"),
        (raft.max_in_flight_entries > 0, "raft.max_in_flight_entries must be positive"),
        (0 <= raft.settle_wait_ms <= raft.tick_period_ms,
         "raft.settle_wait_ms must be between 0 and raft.tick_period_ms"),
        (raft.entry_format in (1, 2, 3), f"raft.entry_format must be 1, 2 or 3, got {raft.entry_format!r}"),
        (raft.commit_timeout_ms > 0 and raft.snapshot_timeout_ms > 0,
         "raft.commit_timeout_ms and raft.snapshot_timeout_ms must be positive"),
    ]
    for ok, message in rules:
        if not ok:
            raise ConfigError(f"{path}: {message}")
