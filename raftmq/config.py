"""Node and group configuration: frozen dataclasses loaded from TOML, unknown keys rejected.

Every error names the file, the dotted key and what was expected, so an operator can fix a
config without reading our code.
"""

from __future__ import annotations

import dataclasses
import os
import re
import tomllib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from raftmq.routing.connection import PeerGroup
from raftmq.routing.discovery import BroadcastGroup
from raftmq.core.address_settings import AddressSettings
from raftmq.core.config import CoreConfig

DEFAULT_BROKER_NAME = CoreConfig().broker_name  # "raftmq": replaced by the group's name
from raftmq.errors import ConfigError
from raftmq.protocol.limits import Limits
from raftmq.security import SecurityConfig
from raftmq.security_config import SECURITY_TABLES, load_security


@dataclass(frozen=True, slots=True)
class NodeConfig:
    host: str = "127.0.0.1"
    port: int = 61613
    name: str = "node1"  # names this node in logs and session ids
    # What the server offers in CONNECTED heart-beat: (can send every ms, wants to receive every ms).
    # Each direction then runs at the larger of this and what the client asked for, so these are
    # floors: a client asking for 1 s heart-beats gets them and a dead peer is noticed in ~2 s.
    heartbeat_send_ms: int = 1_000
    heartbeat_receive_ms: int = 1_000
    # A connection that has not sent a complete CONNECT this long after it opened gets an ERROR and
    # is closed, silent or trickling (RabbitMQ's handshake_timeout is 10 s). 0: no deadline.
    connect_timeout_ms: int = 10_000
    # Client connections one node holds at once (relayed ones included); one more gets an ERROR
    # `too many connections` and is closed. ActiveMQ's maximumConnections default.
    max_connections: int = 1_000
    # Before CONNECT has been read a connection may buffer at most this much of a frame: a CONNECT
    # is a few headers, and a stranger must not make the node hold a 16 MiB frame per socket.
    max_connect_frame_bytes: int = 65_536
    # Bytes of unfinished frames all connections of this node may buffer together; the connection
    # whose input would pass it gets an ERROR `server busy` and is closed (the others go on).
    max_unfinished_frame_bytes: int = 256 * 2**20
    # Commands a session may have appended but not yet committed before we stop reading its
    # socket: a fast producer waits for the log instead of growing our memory.
    max_pending_commands: int = 1_000
    # Fairness (raftmq.server.flow): while a queue's consumers keep taking messages, its
    # producers wait once it holds this many messages (ready or in flight), so consumers are served before new
    # SENDs are accepted and no standing queue forms. 0: off (producers only wait for BLOCK).
    fair_queue_depth: int = 0
    tick_interval_ms: int = 1_000  # how often time is fed to the core (message expiry)
    # What a group's follower does with a client: "relay" its session to the leader (any
    # node serves any client), or "redirect" it (ERROR not the leader + a `leader` header).
    follower_clients: str = "relay"
    # "host:port" of a single node's admin HTTP (/status, /metrics, /health); None: none.
    # A group's members set theirs in [[node]] (admin), not here.
    admin: str | None = None
    # A single node is a one-member Raft group keeping its journal in <data_dir>/<name>/
    # (relative to the working directory), so a receipt means "fsynced". in_memory = true keeps
    # everything in memory instead: nothing survives a restart. Not for group members ([group]).
    data_dir: str = ".raftmq"
    in_memory: bool = False
    limits: Limits = field(default_factory=Limits)
    # The neighbouring groups' members, for the leader's bridges (`raftmq node --topology`);
    # empty outside a cluster. Not a TOML key.
    cluster_peers: tuple[PeerGroup, ...] = ()
    cluster_broadcast: tuple[BroadcastGroup, ...] = ()  # where the leader announces its group (cluster.discovery)
    cluster_group_clients: tuple[str, ...] = ()  # this group's members' STOMP addresses, as announced
    core: CoreConfig = field(default_factory=CoreConfig)
    # Users, ACL and TLS: top-level [security], [[user]], [[acl]], [tls] tables (raftmq.security_config).
    security: SecurityConfig = field(default_factory=SecurityConfig)

    def with_address(self, host: str, port: int) -> NodeConfig:
        return dataclasses.replace(self, host=host, port=port)


# TOML tables and the dataclass each one fills; top-level keys of [node] go to NodeConfig.
_SECTIONS: dict[str, type] = {"node": NodeConfig, "limits": Limits, "core": CoreConfig}


def load_node_config(path: str | Path) -> NodeConfig:
    """Read a node config file. Tables: [node], [limits], [core], and the security ones
    ([security], [[user]], [[acl]], [tls]); all keys optional."""
    path = Path(path)
    raw = read_toml(path)
    if isinstance(raw.get("node"), list):
        raise ConfigError(f"{path}: [[node]] tables describe a group; load it with load_group_config (raftmq node --node ID)")
    known = (*_SECTIONS, *SECURITY_TABLES)
    unknown = sorted(set(raw) - set(known))
    if unknown:
        raise ConfigError(f"{path}: unknown table or key {unknown[0]!r} (expected one of: {', '.join(known)})")
    security = load_security(raw, path)
    for name, value in raw.items():
        if name not in SECURITY_TABLES and not isinstance(value, dict):
            raise ConfigError(f"{path}: {name!r} must be a table ([{name}])")
    limits = build_dataclass(Limits, raw.get("limits", {}), path, "limits")
    core = load_core(raw.get("core", {}), path)
    node_table = raw.get("node", {})
    for nested in ("limits", "core", "security"):
        if nested in node_table:
            raise ConfigError(f"{path}: node.{nested}: use a [{nested}] table instead")
    config: NodeConfig = build_dataclass(NodeConfig, node_table, path, "node", limits=limits, core=core, security=security)
    if config.admin is not None:
        try:
            split_address(config.admin)
        except ValueError as exc:
            raise ConfigError(f"{path}: node.admin: {exc}") from None
    _check_follower_clients(config, path, "node")
    return config


FOLLOWER_CLIENT_MODES = ("relay", "redirect")  # raftmq.server.relay: RELAY, REDIRECT


def _check_follower_clients(config: NodeConfig, path: Path, prefix: str) -> None:
    if config.follower_clients not in FOLLOWER_CLIENT_MODES:
        raise ConfigError(
            f"{path}: {prefix}.follower_clients must be one of {', '.join(map(repr, FOLLOWER_CLIENT_MODES))}, "
            f"got {config.follower_clients!r}"
        )


def build_dataclass(cls: type, table: dict[str, Any], path: Path, prefix: str, **extra: Any) -> Any:
    """Fill frozen dataclass `cls` from a TOML table, checking every key and type."""
    fields = {f.name: f for f in dataclasses.fields(cls) if f.name not in extra}
    hints = typing.get_type_hints(cls)
    kwargs: dict[str, Any] = dict(extra)
    for key, value in table.items():
        if key not in fields:
            raise ConfigError(f"{path}: unknown key {prefix}.{key} (known: {', '.join(sorted(fields))})")
        kwargs[key] = _check_type(value, hints[key], path, f"{prefix}.{key}")
    return cls(**kwargs)


def _check_type(value: Any, expected: Any, path: Path, key: str) -> Any:
    allowed = typing.get_args(expected) if isinstance(expected, types.UnionType) else (expected,)
    for kind in allowed:
        if kind is type(None) and value is None:
            return value
        if kind is bool and isinstance(value, bool):
            return value
        if kind is int and isinstance(value, int) and not isinstance(value, bool):
            if value < 0:
                raise ConfigError(f"{path}: {key} must not be negative, got {value}")
            return value
        if kind is float and isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if kind is str and isinstance(value, str):
            return value
    names = " or ".join(getattr(k, "__name__", str(k)) for k in allowed)
    raise ConfigError(f"{path}: {key} must be {names}, got {type(value).__name__} {value!r}")


# ---------------------------------------------------------------------------------------------
# Groups: one TOML file describes every member of a Raft group.

NODE_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")  # also a directory name


@dataclass(frozen=True, slots=True)
class GroupMember:
    """One `[[node]]` of a group file. Addresses are "host:port"."""

    id: str
    client: str  # STOMP listener
    raft: str  # Raft port (pysyncobj); bound exactly there
    admin: str | None = None  # admin HTTP (/status, body fetch between members); None: none


@dataclass(frozen=True, slots=True)
class RaftTimings:
    """The `[raft]` table, in ms: the one place Raft's tuning and its defaults are written.
    Defaults are the tuned values of docs/replication.md (stock pysyncobj: 50 ms ticks, 100 ms
    heartbeats, 0.4-1.4 s elections, 30 s fallback); pysyncobj's seconds are made from these
    where its config is built (raftmq.replication.pysyncobj.syncobj)."""

    # 5 ms ticks / 20 ms heartbeats: commit latency ~1-3 ms idle; costs some idle CPU.
    tick_period_ms: int = 5
    append_entries_period_ms: int = 20
    # Failover within ~0.5 s; a member stalled longer than 0.3 s (GC, swap) triggers an election.
    election_timeout_min_ms: int = 300
    election_timeout_max_ms: int = 600
    leader_fallback_timeout_ms: int | None = None  # None: election_timeout_min_ms
    connection_timeout_ms: int = 1500
    connection_retry_ms: int = 250
    commit_timeout_ms: int = 5000  # an append not committed by then fails (outcome unknown)
    snapshot_timeout_ms: int = 5000
    # Group commit: entries of at most this many encoded bytes (a single larger append goes alone).
    max_entry_bytes: int = 256 * 1024
    # Entries in flight at once: 1 = send at once when idle, coalesce everything else meanwhile.
    max_in_flight_entries: int = 2
    append_entries_batch_bytes: int = 24 * 2**20  # also the hard limit of one entry (a 16 MiB body fits)
    compact_after_bytes: int = 64 * 2**20  # snapshot + trim the journal past this size


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
        return dataclasses.replace(self.server, host=host, port=port, name=member.id, core=core)

    def member_dir(self, node_id: str) -> Path:
        return Path(self.data_dir) / self.member(node_id).id


_GROUP_SECTIONS = ("group", "raft", "journal", "server", "limits", "core", "node", *SECURITY_TABLES)
_GROUP_KEYS = ("name", "data_dir", "password", "password_env")
_MEMBER_SERVER_KEYS = ("host", "port", "name", "admin")  # set per member, not in [server]
_SINGLE_NODE_KEYS = ("data_dir", "in_memory")  # a group has [group] data_dir and is never in memory


# A single node's Raft port: nobody ever connects to a group of one, so any free port on
# loopback does (the OS picks it; the member's id stays the same string across restarts).
SOLO_RAFT_ADDRESS = "127.0.0.1:0"


def single_node_group(config: NodeConfig, data_dir: str | None = None) -> GroupConfig:
    """The one-member group a durable single node runs as: its files in <data_dir>/<name>/."""
    if not NODE_ID_PATTERN.match(config.name):
        raise ConfigError(f"node.name {config.name!r}: use letters, digits, '_', '.', '-' (it names a directory)")
    member = GroupMember(id=config.name, client=f"{config.host}:{config.port}", raft=SOLO_RAFT_ADDRESS, admin=config.admin)
    return GroupConfig(name=config.name, data_dir=data_dir or config.data_dir, members=(member,), server=config)


def split_address(address: str) -> tuple[str, int]:
    """"host:port" -> (host, port); raises ValueError with a readable message."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"expected host:port, got {address!r}")
    return host.strip("[]"), int(port)


def is_group_file(path: str | Path) -> bool:
    """True when the file holds `[[node]]` tables (a group); False for a single-node file."""
    return isinstance(read_toml(Path(path)).get("node"), list)


def load_config(path: str | Path) -> NodeConfig | GroupConfig:
    """A group file (with `[[node]]` tables) or a single-node file (`[node]` table)."""
    return load_group_config(path) if is_group_file(path) else load_node_config(path)


def load_group_config(path: str | Path) -> GroupConfig:
    """Read a group file. Tables: [group] (required: name, data_dir), [raft], [journal],
    [server], [limits], [core], one [[node]] per member (id, client, raft, admin), and the
    security ones every member shares ([security], [[user]], [[acl]], [tls])."""
    path = Path(path)
    raw = read_toml(path)
    unknown = sorted(set(raw) - set(_GROUP_SECTIONS))
    if unknown:
        raise ConfigError(f"{path}: unknown table or key {unknown[0]!r} (expected one of: {', '.join(_GROUP_SECTIONS)})")
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
    password = _password(group, path)
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
            where = ("each [[node]] (id, client, admin)" if key in _MEMBER_SERVER_KEYS
                     else "[group] data_dir (a group is always durable)" if key in _SINGLE_NODE_KEYS else f"a [{key}] table")
            raise ConfigError(f"{path}: server.{key}: set by {where}, not in [server]")
    limits = build_dataclass(Limits, raw.get("limits", {}), path, "limits")
    core = load_core(raw.get("core", {}), path)
    security = load_security(raw, path)
    server = build_dataclass(NodeConfig, server_table, path, "server", limits=limits, core=core, security=security)
    _check_follower_clients(server, path, "server")
    return GroupConfig(name, data_dir, members, password, raft, journal, server)


# `raftmq group add-node / remove-node / replace-node` keep the group's members here, in its
# data directory, once they change: it takes the place of the group file's [[node]] tables.
MEMBERS_FILE = "members.toml"


def load_members(path: Path) -> tuple[GroupMember, ...]:
    """The [[node]] tables of a members file (raftmq.ops.membership writes it)."""
    raw = read_toml(path)
    nodes = raw.get("node")
    if set(raw) - {"node"} or not isinstance(nodes, list) or not nodes or not all(isinstance(n, dict) for n in nodes):
        raise ConfigError(f"{path}: a members file holds [[node]] tables only, at least one")
    members = tuple(_member(table, path, f"node[{i}]") for i, table in enumerate(nodes))
    _check_members(members, path)
    return members


def read_toml(path: Path) -> dict[str, Any]:
    """A TOML file as a dict; every failure is a ConfigError naming the file."""
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None


def _required_str(table: dict[str, Any], key: str, path: Path, prefix: str) -> str:
    value = table.get(key)
    if value is None:
        raise ConfigError(f"{path}: {prefix}.{key} is required")
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{path}: {prefix}.{key} must be a non-empty string, got {value!r}")
    return value


def _password(group: dict[str, Any], path: Path) -> str | None:
    if "password" in group and "password_env" in group:
        raise ConfigError(f"{path}: group.password and group.password_env: set one, not both")
    if "password" in group:
        return _required_str(group, "password", path, "group")
    if "password_env" in group:
        variable = _required_str(group, "password_env", path, "group")
        value = os.environ.get(variable)
        if not value:
            raise ConfigError(f"{path}: group.password_env names ${variable}, which is not set or empty")
        return value
    return None


def _member(table: dict[str, Any], path: Path, prefix: str) -> GroupMember:
    for key in ("id", "client", "raft"):
        if key not in table:
            raise ConfigError(f"{path}: {prefix}.{key} is required")
    member: GroupMember = build_dataclass(GroupMember, table, path, prefix)
    if not NODE_ID_PATTERN.match(member.id):
        raise ConfigError(f"{path}: {prefix}.id {member.id!r}: use letters, digits, '_', '.', '-' (it names a directory)")
    for key in ("client", "raft", "admin"):
        value = getattr(member, key)
        if value is not None:
            try:
                split_address(value)
            except ValueError as exc:
                raise ConfigError(f"{path}: {prefix}.{key}: {exc}") from None
    return member


def _check_members(members: tuple[GroupMember, ...], path: Path) -> None:
    ids: set[str] = set()
    addresses: dict[str, str] = {}
    for i, member in enumerate(members):
        if member.id in ids:
            raise ConfigError(f"{path}: node[{i}].id {member.id!r} is used by another [[node]]")
        ids.add(member.id)
        for key in ("client", "raft", "admin"):
            value = getattr(member, key)
            if value is None:
                continue
            if value in addresses:
                raise ConfigError(f"{path}: node[{i}].{key} {value} is also {addresses[value]}")
            addresses[value] = f"node[{i}].{key}"


def load_core(table: dict[str, Any], path: Path) -> CoreConfig:
    """[core], with its [[core.address]] tables (raftmq.core.address_settings)."""
    table = dict(table)
    addresses = table.pop("address", [])
    if not isinstance(addresses, list) or not all(isinstance(entry, dict) for entry in addresses):
        raise ConfigError(f"{path}: core.address must be [[core.address]] tables")
    settings = []
    for i, entry in enumerate(addresses):
        if "match" not in entry:
            raise ConfigError(f"{path}: core.address[{i}].match is missing (a destination or pattern, like /queue/orders.>)")
        address: AddressSettings = build_dataclass(AddressSettings, entry, path, f"core.address[{i}]")
        try:
            address.check()
        except ValueError as exc:
            raise ConfigError(f"{path}: core.address[{i}]: {exc}") from None
        settings.append(address)
    core: CoreConfig = build_dataclass(CoreConfig, table, path, "core", addresses=tuple(settings))
    _check_core(core, path)
    return core


def _check_core(core: CoreConfig, path: Path) -> None:
    rules = [
        (core.redelivery_delay_ms >= 0, "core.redelivery_delay_ms must not be negative"),
        (core.redelivery_multiplier >= 1.0, "core.redelivery_multiplier must be at least 1.0"),
        (core.max_redelivery_delay_ms >= core.redelivery_delay_ms, "core.max_redelivery_delay_ms must be at least core.redelivery_delay_ms"),
    ]
    for ok, message in rules:
        if not ok:
            raise ConfigError(f"{path}: {message}")


def _check_timings(raft: RaftTimings, path: Path) -> None:
    rules = [
        (raft.tick_period_ms > 0, "raft.tick_period_ms must be positive"),
        (raft.append_entries_period_ms >= raft.tick_period_ms, "raft.append_entries_period_ms must be at least raft.tick_period_ms"),
        (raft.election_timeout_min_ms > raft.append_entries_period_ms,
         "raft.election_timeout_min_ms must exceed raft.append_entries_period_ms (heart-beats keep followers from electing)"),
        (raft.election_timeout_max_ms > raft.election_timeout_min_ms, "raft.election_timeout_max_ms must exceed raft.election_timeout_min_ms"),
        (raft.max_entry_bytes > 0, "raft.max_entry_bytes must be positive"),
        (raft.max_entry_bytes < raft.append_entries_batch_bytes, "raft.max_entry_bytes must be below raft.append_entries_batch_bytes"),
        (raft.max_in_flight_entries > 0, "raft.max_in_flight_entries must be positive"),
        (raft.commit_timeout_ms > 0 and raft.snapshot_timeout_ms > 0, "raft.commit_timeout_ms and raft.snapshot_timeout_ms must be positive"),
    ]
    for ok, message in rules:
        if not ok:
            raise ConfigError(f"{path}: {message}")
