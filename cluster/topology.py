"""What `raftmq up` launches: a topology of Raft groups, each described by a group file.

A topology file::

    [topology]
    name = "local"            # optional
    data_dir = ".raftmq"      # where `up` keeps its state file; relative to the working directory
    restart = "on-failure"    # or "never" (the default): restart a node that exits with an error
    max_restarts = 5          # ... at most this many times per node within restart_window_s,
    restart_window_s = 60     # then leave it down (reported)
    restart_backoff_ms = 500  # wait before a restart; doubles with each restart in the window

    [[group]]
    file = "group.toml"       # a group file (cluster.group_file), relative to this file

    [[cluster_connection]]    # optional: groups that interconnect (cluster.connection_tables, docs/cluster.md)
    name = "main"
    groups = ["g1", "g2", "g3"]

    [[network_connector]]     # or in ActiveMQ Classic's words (cluster.network, docs/cluster.md)
    group = "g1"
    uri = "static:(stomp://127.0.0.1:61623)"

A group file (`[[node]]` tables, e.g. configs/group.toml) is also accepted: a topology of one
group whose state lives in the group's data directory. With no file at all, `default_topology`
is one group of three members on loopback under `./.raftmq/`. A preset (`preset_topology`)
is a group file shipped in raftmq.presets whose state lives in `./.raftmq/`, as the built-in
default's does, so `raftmq status` / `down` / `send` find it without options.

Restarts default to "never": a node that dies stays down and is reported (its exit status and
the last line of its log), since a restart would hide a crash a Raft majority rides out anyway,
and a node that fails on start (a corrupt journal, a port taken) would only crash again.

Every error is a `ConfigError` naming the file and what is wrong; `up` prints it as one line.
`failover_urls` is what `up` prints for clients; cluster.node_settings is what one node takes
from the file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

from cluster.connection_tables import parse_cluster_connections
from cluster.discovery_tables import parse_broadcast_groups, parse_discovery_groups
from cluster.group_file import GroupConfig, GroupMember, load_group_config
from cluster.network import parse_network_connectors
from raftmq.config import read_toml, split_address
from raftmq.errors import ConfigError
from raftmq.routing.cluster_connection import ClusterConnection
from raftmq.routing.discovery import BroadcastGroup

DEFAULT_DATA_DIR = ".raftmq"
DEFAULT_GROUP_NAME = "g1"
# The default group's ports are those of configs/group.toml, so its comments apply as they are.
DEFAULT_CLIENT_PORT = 61613
DEFAULT_RAFT_PORT = 62613
DEFAULT_ADMIN_PORT = 8161
DEFAULT_MQTT_PORT = 1883
DEFAULT_GROUP_SIZE = 3

_TOPOLOGY_KEYS = ("name", "data_dir", "restart", "max_restarts", "restart_window_s", "restart_backoff_ms")
_GROUP_ENTRY_KEYS = ("file",)

RESTART_NEVER = "never"
RESTART_ON_FAILURE = "on-failure"
RESTART_MODES = (RESTART_NEVER, RESTART_ON_FAILURE)
MAX_BACKOFF_SECONDS = 30.0

# `raftmq up --preset NAME`: group files in the raftmq.presets package (configs/ holds the same
# files, documented in place; tests/ops/test_ops_presets.py keeps them equal).
PRESETS = {
    "default": "default.toml", "five-node": "five-node.toml", "test": "test.toml",
    "symmetric": "symmetric.toml", "chain": "chain.toml", "symmetric-lite": "symmetric-lite.toml",
}
PRESET_SOURCES = {  # in configs/
    "default": "group.toml", "five-node": "group5.toml", "test": "test.toml",
    "symmetric": "symmetric.toml", "chain": "chain.toml", "symmetric-lite": "symmetric-lite.toml",
}


@dataclass(frozen=True, slots=True)
class RestartPolicy:
    """What the supervisor of `raftmq up` does when a node exits on its own."""

    mode: str = RESTART_NEVER
    max_restarts: int = 5  # per node within `window_s`; the next failure leaves it down
    window_s: float = 60.0
    backoff_ms: int = 500  # before the first restart in the window; doubles with each one

    def delay(self, recent_restarts: int) -> float:
        """Seconds to wait before a restart, given the restarts already in the window."""
        return float(min(self.backoff_ms / 1000 * 2**recent_restarts, MAX_BACKOFF_SECONDS))

    def to_json(self) -> dict[str, Any]:
        return {"mode": self.mode, "max_restarts": self.max_restarts, "window_s": self.window_s,
                "backoff_ms": self.backoff_ms}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RestartPolicy:
        return cls(str(data["mode"]), int(data["max_restarts"]), float(data["window_s"]), int(data["backoff_ms"]))


@dataclass(frozen=True, slots=True)
class GroupSpec:
    config: GroupConfig
    config_path: Path  # what each member is started with (`raftmq node --config`)
    generated_text: str | None = None  # written to config_path before launch (built-in default)

    @property
    def name(self) -> str:
        return self.config.name


@dataclass(frozen=True, slots=True)
class Topology:
    name: str
    state_dir: Path  # absolute; holds the state file of a running cluster
    groups: tuple[GroupSpec, ...]
    source: Path | None = None  # None: the built-in default
    restart: RestartPolicy = field(default_factory=RestartPolicy)
    cluster_connections: tuple[ClusterConnection, ...] = ()  # how the groups interconnect
    broadcast_groups: tuple[BroadcastGroup, ...] = ()  # where each group's leader announces it (discovery)

    def members(self) -> list[tuple[GroupSpec, GroupMember]]:
        return [(group, member) for group in self.groups for member in group.config.members]


def default_topology(root: str | Path = DEFAULT_DATA_DIR, size: int = DEFAULT_GROUP_SIZE) -> Topology:
    """One group of `size` members on 127.0.0.1, data under `root` (resolved now)."""
    state_dir = Path(root).resolve()
    members = tuple(
        GroupMember(
            id=f"n{i + 1}",
            client=f"127.0.0.1:{DEFAULT_CLIENT_PORT + i}",
            raft=f"127.0.0.1:{DEFAULT_RAFT_PORT + i}",
            admin=f"127.0.0.1:{DEFAULT_ADMIN_PORT + i}",
            mqtt=f"127.0.0.1:{DEFAULT_MQTT_PORT + i}",
        )
        for i in range(size)
    )
    config = GroupConfig(name=DEFAULT_GROUP_NAME, data_dir=str(state_dir / DEFAULT_GROUP_NAME), members=members)
    spec = GroupSpec(config, state_dir / f"{DEFAULT_GROUP_NAME}.toml", group_file_text(config))
    return Topology("default", state_dir, (spec,), None)


def group_file_text(config: GroupConfig) -> str:
    """A group file for `config`'s name, data directory and members (every other setting at
    its default: only built-in topologies are written this way)."""

    def value(text: str) -> str:
        return json.dumps(text)  # a JSON string is a valid TOML basic string

    lines = ["# Written by `raftmq up` for its built-in default topology.", "[group]",
             f"name = {value(config.name)}", f"data_dir = {value(config.data_dir)}"]
    for member in config.members:
        lines += ["", "[[node]]", f"id = {value(member.id)}", f"client = {value(member.client)}",
                  f"raft = {value(member.raft)}"]
        if member.admin is not None:
            lines.append(f"admin = {value(member.admin)}")
        if member.mqtt is not None:
            lines.append(f"mqtt = {value(member.mqtt)}")
    return "\n".join(lines) + "\n"


def preset_path(name: str) -> Path:
    """The group file of preset `name`, as a path the nodes can be started with."""
    if name not in PRESETS:
        raise ConfigError(f"unknown preset {name!r} (known: {', '.join(PRESETS)})")
    location = resources.files("raftmq.presets").joinpath(PRESETS[name])
    if not isinstance(location, Path) or not location.is_file():
        raise ConfigError(f"preset {name!r}: {location} is not a file on disk (raftmq installed as a zip?)")
    return location


def preset_topology(name: str, root: str | Path = DEFAULT_DATA_DIR) -> Topology:
    """Preset `name`: its group file, with the cluster state under `root` like the built-in
    default's (the group's own data_dir, relative to the working directory, is unchanged)."""
    topology = load_topology(preset_path(name))
    return replace(topology, name=name, state_dir=Path(root).resolve())


def load_topology(path: str | Path) -> Topology:
    """A topology file (`[topology]` / `[[group]]`) or a group file (`[[node]]`)."""
    path = Path(path)
    raw = read_toml(path)
    if isinstance(raw.get("node"), list):
        config = load_group_config(path, require_password=False)
        topology = Topology(config.name, Path(config.data_dir).resolve(), (GroupSpec(config, path.resolve()),), path)
    elif "topology" in raw or "group" in raw:
        topology = _load_topology_file(path, raw)
    else:
        raise ConfigError(f"{path}: neither a topology ([topology] and [[group]] tables) "
                          "nor a group file ([[node]] tables)")
    check_topology(topology)
    return topology


def _load_topology_file(path: Path, raw: dict[str, Any]) -> Topology:
    tables = ("topology", "group", "cluster_connection", "network_connector", "broadcast_group", "discovery_group")
    unknown = sorted(set(raw) - set(tables))
    if unknown:
        raise ConfigError(f"{path}: unknown table or key {unknown[0]!r} (expected: {', '.join(tables)})")
    table = raw.get("topology", {})
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: 'topology' must be a table ([topology])")
    for key, item in table.items():
        if key not in _TOPOLOGY_KEYS:
            raise ConfigError(f"{path}: unknown key topology.{key} (known: {', '.join(_TOPOLOGY_KEYS)})")
        if key in ("name", "data_dir") and (not isinstance(item, str) or not item):
            raise ConfigError(f"{path}: topology.{key} must be a non-empty string, got {item!r}")
    restart = _restart_policy(path, table)
    entries = raw.get("group")
    if not isinstance(entries, list) or not entries or not all(isinstance(e, dict) for e in entries):
        raise ConfigError(f"{path}: a topology needs at least one [[group]] table (file = \"GROUP.toml\")")
    groups = []
    for i, entry in enumerate(entries):
        for key in entry:
            if key not in _GROUP_ENTRY_KEYS:
                raise ConfigError(f"{path}: unknown key group[{i}].{key} (known: {', '.join(_GROUP_ENTRY_KEYS)})")
        file = entry.get("file")
        if not isinstance(file, str) or not file:
            raise ConfigError(f"{path}: group[{i}].file must name a group file, got {file!r}")
        group_path = (path.parent / file).resolve()
        try:
            # Each member reads its own group's password (raftmq node --config); here, another
            # group's may be unknown on this host (`GroupConfig.require_password` says so).
            groups.append(GroupSpec(load_group_config(group_path, require_password=False), group_path))
        except ConfigError as exc:
            raise ConfigError(f"{path}: group[{i}]: {exc}") from None
    name = table.get("name", path.stem)
    state_dir = Path(table.get("data_dir", DEFAULT_DATA_DIR)).resolve()
    connections: tuple[ClusterConnection, ...] = ()
    broadcast = parse_broadcast_groups(path, raw.get("broadcast_group", []))
    discovery = {group.name: group for group in parse_discovery_groups(path, raw.get("discovery_group", []))}
    if "cluster_connection" in raw:
        connections = parse_cluster_connections(path, raw["cluster_connection"], tuple(g.name for g in groups),
                                                discovery)
    if "network_connector" in raw:
        members = {g.name: tuple(member.client for member in g.config.members) for g in groups}
        connections += parse_network_connectors(path, raw["network_connector"], members,
                                                tuple(c.name for c in connections))
    return Topology(name, state_dir, tuple(groups), path, restart, connections, broadcast)


def _restart_policy(path: Path, table: dict[str, Any]) -> RestartPolicy:
    default = RestartPolicy()
    mode = table.get("restart", default.mode)
    if mode not in RESTART_MODES:
        raise ConfigError(f"{path}: topology.restart must be one of {', '.join(repr(m) for m in RESTART_MODES)}, "
                          f"got {mode!r}")

    def number(key: str, fallback: float, kind: type, minimum: float) -> Any:
        value = table.get(key, fallback)
        if (isinstance(value, bool) or not isinstance(value, (int, float))
                or (kind is int and not isinstance(value, int))):
            raise ConfigError(f"{path}: topology.{key} must be {'an integer' if kind is int else 'a number'}, "
                              f"got {value!r}")
        if value < minimum:
            raise ConfigError(f"{path}: topology.{key} must be at least {minimum:g}, got {value!r}")
        return kind(value)

    return RestartPolicy(
        mode,
        number("max_restarts", default.max_restarts, int, 0),
        number("restart_window_s", default.window_s, float, 1),
        number("restart_backoff_ms", default.backoff_ms, int, 0),
    )


def check_topology(topology: Topology) -> None:
    """What a single group file cannot check: distinct group names, data directories and
    addresses across groups; every member needs an admin address (`up` waits on /status)."""
    where = topology.source if topology.source is not None else "built-in topology"
    names: set[str] = set()
    data_dirs: dict[Path, str] = {}
    addresses: dict[tuple[str, int], str] = {}
    for group in topology.groups:
        if group.name in names:
            raise ConfigError(f"{where}: group name {group.name!r} is used twice")
        names.add(group.name)
        data_dir = Path(group.config.data_dir).resolve()
        if data_dir in data_dirs:
            raise ConfigError(f"{where}: groups {data_dirs[data_dir]} and {group.name} share data_dir {data_dir}")
        data_dirs[data_dir] = group.name
        for member in group.config.members:
            if member.admin is None:
                raise ConfigError(f"{group.config_path}: node {member.id} has no admin address "
                                  "(raftmq up reads each node's /status)")
            for kind in ("client", "raft", "admin"):
                address = split_address(getattr(member, kind))
                label = f"{group.name}/{member.id} {kind}"
                if address in addresses:
                    raise ConfigError(f"{where}: {label} {address[0]}:{address[1]} is also {addresses[address]}")
                addresses[address] = label


def failover_urls(topology: Topology) -> tuple[dict[str, str], str]:
    """A `failover:` URL per group, and one for the whole cluster (every group, in order: the
    client's connection load-balancing policy picks the group, see raftmq.client.policies)."""
    per_group = {
        spec.name: "failover:(" + ",".join(f"stomp://{m.client}" for m in spec.config.members) + ")"
        for spec in topology.groups
    }
    whole = "failover:(" + ",".join(
        "(" + ",".join(f"stomp://{m.client}" for m in spec.config.members) + ")" for spec in topology.groups
    ) + ")"
    return per_group, whole
