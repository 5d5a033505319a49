"""A single node's configuration file (`[node]`, `[limits]`, `[core]` and the security tables),
and what every configuration file of the deployment is read with: `read_toml`, `build_dataclass`
(frozen dataclasses, unknown keys rejected), `split_address`, `load_core`, and `RaftTimings`
(the `[raft]` table, which the replication layer takes as it is).

Group files and topology files are read in cluster.group_file and cluster.topology with these.
Every error names the file, the dotted key and what was expected, so an operator can fix a
config without reading our code.
"""

from __future__ import annotations

import dataclasses
import re
import tomllib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from raftmq.core.address_settings import AddressSettings
from raftmq.core.config import CoreConfig
from raftmq.errors import ConfigError
from raftmq.protocol.limits import Limits
from raftmq.routing.cluster_connection import PeerGroup
from raftmq.routing.discovery import BroadcastGroup
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
    # Fairness (raftmq.server.seams.flow): while a queue's consumers keep taking messages, its
    # producers wait once it holds this many messages (ready or in flight), so consumers are served before new
    # SENDs are accepted and no standing queue forms. 0: off (producers only wait for BLOCK).
    fair_queue_depth: int = 0
    tick_interval_ms: int = 1_000  # time into the core while it has periodic work (raftmq.server.ticker)
    # STOMP over WebSocket (raftmq.server.websocket): the client port also answers an HTTP
    # upgrade. Browser pages may connect from these origins: exact ones ("https://app.example"),
    # "loopback" (pages served from this machine) or "*"; a client sending no Origin (not a
    # browser) always may.
    websocket_origins: tuple[str, ...] = ("loopback",)
    # The admin port (raftmq.web_guard): pages of these origins besides the console's own may
    # send it changes and read its answers (CORS), in websocket_origins' forms; a reverse
    # proxy's origin ("https://admin.example") goes here. Empty: the console's own origin only.
    admin_origins: tuple[str, ...] = ()
    # Names the admin port and the WebSocket handshake answer to besides this node's configured
    # hosts, loopback names and the address a request came in on ("broker.example", a reverse
    # proxy's Host): a request for any other name is refused (DNS rebinding).
    host_names: tuple[str, ...] = ()
    # WebSocket upgrades being read at once on this node; one more is answered 503.
    websocket_max_handshakes: int = 100
    # "host:port" of a listener for WebSocket clients only, besides the client port; None: none.
    websocket: str | None = None
    # "host:port" of a listener for MQTT 3.1.1 and 5.0 clients (raftmq.server.mqtt); None: none.
    mqtt: str | None = None
    # What a group's follower does with a client: "relay" its session to the leader (any
    # node serves any client), or "redirect" it (ERROR not the leader + a `leader` header).
    follower_clients: str = "relay"
    # Where the listeners (client, WebSocket-only excepted, Raft and admin of a group member)
    # bind instead of their configured host, e.g. "0.0.0.0" in a container whose configured
    # names (what peers and clients use) resolve elsewhere than its own interfaces. None: the host.
    bind_host: str | None = None
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
    # Where the leader announces its group (cluster.discovery_tables).
    cluster_broadcast: tuple[BroadcastGroup, ...] = ()
    cluster_group_clients: tuple[str, ...] = ()  # this group's members' STOMP addresses, as announced
    # An edge's (raftmq.embedded): where it keeps the names of the hubs it learned. Not a TOML key.
    cluster_hubs_file: str | None = None
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
        raise ConfigError(f"{path}: [[node]] tables describe a group; "
                          "load it with load_group_config (raftmq node --node ID)")
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
    config: NodeConfig = build_dataclass(NodeConfig, node_table, path, "node", limits=limits, core=core,
                                         security=security)
    if config.admin is not None:
        try:
            split_address(config.admin)
        except ValueError as exc:
            raise ConfigError(f"{path}: node.admin: {exc}") from None
    check_follower_clients(config, path, "node")
    return config


FOLLOWER_CLIENT_MODES = ("relay", "redirect")  # raftmq.server.stomp.decisions: RELAY, REDIRECT


def check_follower_clients(config: NodeConfig, path: Path, prefix: str) -> None:
    """`prefix`.follower_clients is one of FOLLOWER_CLIENT_MODES ([node] or a group's [server]),
    and the WebSocket and web-guard keys (origins, host names) hold what they can use."""
    if config.follower_clients not in FOLLOWER_CLIENT_MODES:
        raise ConfigError(
            f"{path}: {prefix}.follower_clients must be one of {', '.join(map(repr, FOLLOWER_CLIENT_MODES))}, "
            f"got {config.follower_clients!r}"
        )
    for key in ("websocket_origins", "admin_origins"):
        for origin in getattr(config, key):
            if origin not in ("*", "loopback") and not re.fullmatch(r"[a-z][a-z0-9+.-]*://[^/\s]+", origin):
                raise ConfigError(f"{path}: {prefix}.{key}: {origin!r} is not an origin: write "
                                  "'scheme://host[:port]' (as a browser sends it, no path), 'loopback' or '*'")
    for name in config.host_names:
        if not re.fullmatch(r"[A-Za-z0-9_.-]+|\[?[0-9A-Fa-f:.]+\]?", name):
            raise ConfigError(f"{path}: {prefix}.host_names: {name!r} is not a host name: write a name or an "
                              "address as a browser's Host header carries it, without scheme or port "
                              "('broker.example')")
    check_addresses(config, ("websocket", "mqtt"), path, prefix)


def check_addresses(table: Any, keys: tuple[str, ...], path: Path, prefix: str) -> None:
    """Each of `table`'s `keys` that is set is "host:port" (a ConfigError naming file and key)."""
    for key in keys:
        address = getattr(table, key)
        if address is not None:
            try:
                split_address(address)
            except ValueError as exc:
                raise ConfigError(f"{path}: {prefix}.{key}: {exc}") from None


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
        if typing.get_origin(kind) is tuple and isinstance(value, list) and all(isinstance(v, str) for v in value):
            return tuple(value)
    names = " or ".join("a list of strings" if typing.get_origin(k) is tuple else getattr(k, "__name__", str(k))
                        for k in allowed)
    raise ConfigError(f"{path}: {key} must be {names}, got {type(value).__name__} {value!r}")


# ---------------------------------------------------------------------------------------------
# The `[raft]` table of a group file (cluster.group_file), here because the replication layer
# takes it as it is; then the helpers every file of a deployment is read with.


@dataclass(frozen=True, slots=True)
class RaftTimings:
    """The `[raft]` table, in ms: the one place Raft's tuning and its defaults are written.
    Defaults are the tuned values of docs/replication.md (stock pysyncobj: 50 ms ticks, 100 ms
    heartbeats, 0.4-1.4 s elections, 30 s fallback); pysyncobj's seconds are made from these
    where its config is built (raftmq.replication.pysyncobj.syncobj)."""

    # The tick thread sleeps until something is due (raftmq.replication.pysyncobj.tick_wait); the
    # tick period is how soon a commit index reaches followers when nothing else carries it, and
    # the longest sleep while a deadline is overdue. Heart-beats: None, just under a third of the
    # minimum election timeout (`heartbeat_ms`; pysyncobj refuses a third or more).
    tick_period_ms: int = 5
    append_entries_period_ms: int | None = None
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
    # The Raft entry format written (raftmq.replication.entry_codec): 3 (headers as blocks), or 2
    # or 1 while members of a release that reads only those may still apply them (a rolling
    # upgrade from one). All are read.
    entry_format: int = 3
    # An ACK or NACK that asked for no receipt waits for company rather than costing an entry
    # alone: it never goes out as a further entry while another is in flight, and when the log
    # falls idle just after answering a producer, it waits up to this long for that producer's
    # next SEND. 0: settlements go out as any proposal.
    settle_wait_ms: float = 1.0

    @property
    def heartbeat_ms(self) -> int:
        """The append-entries period in force: as configured, or as rare as the election
        timeout allows (99 ms for the default 300 ms)."""
        if self.append_entries_period_ms is not None:
            return self.append_entries_period_ms
        return max(self.tick_period_ms, (self.election_timeout_min_ms - 1) // 3)


def console_url(admin: str | None) -> str | None:
    """The web console's address in a browser (`/` of the admin port) from an admin address as
    tools ask it ("host:port", or "https://host:port" with [tls]); None for none (None or "")."""
    if not admin:
        return None
    return f"{admin}/" if admin.startswith("https://") else f"http://{admin}/"


def split_address(address: str) -> tuple[str, int]:
    """"host:port" -> (host, port); raises ValueError with a readable message."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"expected host:port, got {address!r}")
    return host.strip("[]"), int(port)


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


def load_core(table: dict[str, Any], path: Path) -> CoreConfig:
    """[core], with its [[core.address]] tables (raftmq.core.address_settings)."""
    table = dict(table)
    addresses = table.pop("address", [])
    if not isinstance(addresses, list) or not all(isinstance(entry, dict) for entry in addresses):
        raise ConfigError(f"{path}: core.address must be [[core.address]] tables")
    settings = []
    for i, entry in enumerate(addresses):
        if "match" not in entry:
            raise ConfigError(f"{path}: core.address[{i}].match is missing "
                              "(a destination or pattern, like /queue/orders.>)")
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
        (core.max_redelivery_delay_ms >= core.redelivery_delay_ms,
         "core.max_redelivery_delay_ms must be at least core.redelivery_delay_ms"),
    ]
    for ok, message in rules:
        if not ok:
            raise ConfigError(f"{path}: {message}")
