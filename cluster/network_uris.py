"""An embedded broker's place in a network, from ActiveMQ's network-connector URIs
(`EmbeddedBroker(name=..., network=[...])`, raftmq.embedded).

    multicast://239.255.2.3:6155?group=shop     # peer-to-peer: every broker announcing on that
                                                # multicast address and port under that group
                                                # name is a neighbour of every other (a mesh)
    static:(stomp://hub1:61613,stomp://hub2:61613)?duplex=true&excludedDestinations=queue://audit.>
                                                # an edge: one link to the group those members
                                                # make (a hub), opened by this broker only

A `multicast://` URI becomes a cluster connection with discovery, named after its `group`
(default "default", as Classic's `multicast://default`), and the broadcast group this broker
announces itself on (raftmq.routing.discovery): the same machinery as a topology file's
`[[broadcast_group]]`, `[[discovery_group]]` and `[[cluster_connection]] discovery_group`
(docs/cluster.md, "Discovery"). Options, in ms: `broadcastPeriod` (default 500: found within about
a second), `refreshTimeout` (default 5000: a broker not heard of for that long is shown down and
what is routed to it waits for it); `interface`: the local address to send and listen on. A cluster
password signs the announcements and refuses unsigned ones (a stranger's are ignored).

A `static:(...)` URI lists one group's members (a hub: a group of a topology whose
`[[cluster_connection]]` says `accept_edges`, docs/topologies.md); it becomes a connection with a
`Hub` (raftmq.routing.cluster_connection): this broker opens the link's only connection, learns the
hub's name there, sends its messages to the hub's consumers and, with `duplex=true`, takes the
hub's messages for its own consumers. The options are those of a `[[network_connector]]`
(cluster.network, docs/cluster.md), in the query: `duplex`, `networkTTL`, `messageTTL`,
`consumerTTL`, `conduitSubscriptions`, `dynamicOnly`, `decreaseNetworkConsumerPriority`,
`excludedDestinations`, `dynamicallyIncludedDestinations`, `staticallyIncludedDestinations`
(comma-separated lists), `prefetchSize`, `initialReconnectDelay`, `maxReconnectDelay`,
`useExponentialBackOff`, `backOffMultiplier`, `replayWhenNoConsumers`, `replayDelay`, `userName`
and `password_env`; the password is the broker's `cluster_password`, never in the URI. With
`stomp+ssl://` addresses the link speaks TLS, the hub's certificates checked against `caFile`
(and their names against the addresses).
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import parse_qsl, urlsplit

from cluster.network import ADDRESS, CONNECTOR_KEYS, compile_connector, connector_options
from cluster.table import Table
from raftmq.errors import ConfigError
from raftmq.routing.cluster_connection import ON_DEMAND, ClusterConnection, Hub
from raftmq.routing.discovery import BroadcastGroup, DiscoveryGroup
from raftmq.security_config import reading_names_only

DEFAULT_BROADCAST_PERIOD_MS = 500
DEFAULT_REFRESH_TIMEOUT_MS = 5000
_MULTICAST_OPTIONS = ("group", "broadcastPeriod", "refreshTimeout", "interface")


@dataclass(frozen=True, slots=True)
class EmbeddedNetwork:
    """What the URIs make: the group's cluster connections and where it announces itself."""

    connections: tuple[ClusterConnection, ...] = ()
    broadcast: tuple[BroadcastGroup, ...] = ()


def parse_network(uris: Sequence[str], password: str | None = None, group: str = "embedded") -> EmbeddedNetwork:
    """The network `uris` of the broker whose group is `group` describe; `ConfigError` naming
    the URI and what is wrong with it."""
    if isinstance(uris, str):
        raise ConfigError(f"network: a list of URIs, not one string: [{uris!r}]")
    connections: list[ClusterConnection] = []
    broadcast: list[BroadcastGroup] = []
    for uri in uris:
        scheme = uri.partition(":")[0].lower()
        if scheme == "multicast":
            connection, announced = _multicast(uri, password)
            if any(c.name == connection.name for c in connections):
                raise ConfigError(f"network: two multicast URIs with group {connection.name!r}")
            connections.append(connection)
            broadcast.append(announced)
        elif scheme == "static":
            connections.extend(_static(uri, password, group, f"{group}-network-{len(connections)}"))
        else:
            raise ConfigError(f"network: {uri!r}: expected multicast://ADDRESS:PORT (peer-to-peer discovery) or "
                              "static:(stomp://HOST:PORT,...) (a hub's members)")
    return EmbeddedNetwork(tuple(connections), tuple(broadcast))


def _multicast(uri: str, password: str | None) -> tuple[ClusterConnection, BroadcastGroup]:
    parts = urlsplit(uri)
    try:
        address, port = parts.hostname, parts.port
    except ValueError as exc:
        raise ConfigError(f"network: {uri!r}: {exc}") from None
    if address is None or port is None:
        raise ConfigError(f"network: {uri!r}: name the multicast address and port, e.g. multicast://239.255.2.3:6155")
    try:
        multicast = ipaddress.ip_address(address).is_multicast
    except ValueError:
        multicast = False
    if not multicast:
        raise ConfigError(f"network: {uri!r}: {address} is not a multicast address (224.0.0.0/4)")
    options = dict(parse_qsl(parts.query, keep_blank_values=True))
    unknown = sorted(set(options) - set(_MULTICAST_OPTIONS))
    if unknown:
        raise ConfigError(f"network: {uri!r}: unknown option {unknown[0]!r} (options: {', '.join(_MULTICAST_OPTIONS)})")
    name = options.get("group", "default")
    if not name or not all(c.isalnum() or c in "._-" for c in name):
        raise ConfigError(f"network: {uri!r}: group must be letters, digits, '.', '-' or '_'")
    period = _ms(uri, options, "broadcastPeriod", DEFAULT_BROADCAST_PERIOD_MS)
    refresh = _ms(uri, options, "refreshTimeout", DEFAULT_REFRESH_TIMEOUT_MS)
    if refresh <= period:
        raise ConfigError(f"network: {uri!r}: refreshTimeout must be longer than broadcastPeriod")
    interface = options.get("interface") or None
    discovery = DiscoveryGroup(name, address, port, refresh, local_bind_address=interface)
    connection = ClusterConnection(name=name, links=(), message_load_balancing=ON_DEMAND, discovery=discovery,
                                   cluster_password=password)
    return connection, BroadcastGroup(name, address, port, period, interface)


def _ms(uri: str, options: dict[str, str], key: str, default: int) -> int:
    text = options.get(key)
    if text is None:
        return default
    if not text.isdigit() or int(text) < 10:
        raise ConfigError(f"network: {uri!r}: {key} must be a whole number of ms, at least 10, got {text!r}")
    return int(text)


_LISTS = ("excludedDestinations", "dynamicallyIncludedDestinations", "staticallyIncludedDestinations")
_PLAIN, _TLS = ("stomp", "tcp", "nio"), ("stomp+ssl", "ssl")
_STATIC = re.compile(r"^static:\((?P<addresses>[^()]*)\)(?:\?(?P<query>.*))?$", re.IGNORECASE)


class _UriTable(Table):
    """A URI's query read as a `[[network_connector]]` table: errors name the URI."""

    def __init__(self, uri: str, raw: dict[str, Any]) -> None:
        self.uri = uri
        keys = tuple(k for k in CONNECTOR_KEYS if k not in ("group", "name", "uri"))
        super().__init__(Path("network"), uri, raw, keys, "static: URI option")

    def fail(self, key: str, problem: str) -> NoReturn:
        raise ConfigError(f"network: {self.uri!r}: {key} {problem}")


def _static(uri: str, password: str | None, group: str, name: str) -> list[ClusterConnection]:
    match = _STATIC.match(uri.strip())
    if match is None:
        raise ConfigError(f"network: {uri!r}: expected static:(stomp://HOST:PORT,...) with options after a '?'")
    addresses, tls = [], set()
    for item in match["addresses"].split(","):
        found = ADDRESS.match(item.strip())
        if found is None or (found["scheme"] is not None and found["scheme"] not in (*_PLAIN, *_TLS)):
            raise ConfigError(f"network: {uri!r}: {item.strip()!r} is not a hub member's address "
                              "(stomp://HOST:PORT, or stomp+ssl://HOST:PORT for TLS; tcp://, nio://, ssl:// too)")
        tls.add(found["scheme"] in _TLS)
        addresses.append(f"{found['host']}:{found['port']}")
    if len(tls) > 1:
        raise ConfigError(f"network: {uri!r}: mixes TLS (stomp+ssl://) and plain (stomp://) addresses")
    raw: dict[str, Any] = {}
    ca_file: str | None = None
    for key, value in parse_qsl(match["query"] or "", keep_blank_values=True):
        if key == "password":
            raise ConfigError(f"network: {uri!r}: password: pass it as the broker's cluster_password, "
                              "never in a URI (or password_env)")
        if key == "caFile":
            ca_file = value
            continue
        raw[key] = _typed(key, value)
    if tls == {True} and ca_file is None:
        raise ConfigError(f"network: {uri!r}: a stomp+ssl:// hub needs caFile=PATH (the CA that signed its "
                          "members' certificates)")
    if ca_file is not None and tls != {True}:
        raise ConfigError(f"network: {uri!r}: caFile is for stomp+ssl:// addresses")
    if ca_file is not None and not Path(ca_file).is_file() and not reading_names_only():
        raise ConfigError(f"network: {uri!r}: caFile {ca_file!r} is not a file")
    if password is not None and "userName" in raw and "password_env" not in raw:
        raw["password"] = password
    table = _UriTable(uri, raw)
    options = connector_options(table)
    duplex = table.flag("duplex", False)
    compiled = compile_connector(name, options, set(), set())
    hub = Hub(group, tuple(addresses), duplex)
    ca = str(Path(ca_file).resolve()) if ca_file is not None else None
    return [dataclasses.replace(connection, links=(), forwards=None, openers=None, hub=hub, tls_ca_file=ca)
            for connection in compiled]


def _typed(key: str, value: str) -> Any:
    """A query value as the TOML table would hold it."""
    if key in _LISTS:
        return [item.strip() for item in value.split(",") if item.strip()]
    if value in ("true", "false"):
        return value == "true"
    if value.lstrip("-").isdigit():
        return int(value)
    try:
        return float(value)
    except ValueError:
        return value
