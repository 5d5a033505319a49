"""An embedded broker's place in a network, from ActiveMQ's network-connector URIs
(`EmbeddedBroker(name=..., network=[...])`, raftmq.embedded).

    multicast://239.255.2.3:6155?group=shop     # peer-to-peer: every broker announcing on that
                                                # multicast address and port under that group
                                                # name is a neighbour of every other (a mesh)

A `multicast://` URI becomes a cluster connection with discovery, named after its `group`
(default "default", as Classic's `multicast://default`), and the broadcast group this broker
announces itself on (raftmq.routing.discovery): the same machinery as a topology file's
`[[broadcast_group]]`, `[[discovery_group]]` and `[[cluster_connection]] discovery_group`
(docs/cluster.md, "Discovery"). Options, in ms: `broadcastPeriod` (default 500: found within about
a second), `refreshTimeout` (default 5000: a broker not heard of for that long is shown down and
what is routed to it waits for it); `interface`: the local address to send and listen on. A cluster
password signs the announcements and refuses unsigned ones (a stranger's are ignored).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlsplit

from raftmq.errors import ConfigError
from raftmq.routing.cluster_connection import ON_DEMAND, ClusterConnection
from raftmq.routing.discovery import BroadcastGroup, DiscoveryGroup

DEFAULT_BROADCAST_PERIOD_MS = 500
DEFAULT_REFRESH_TIMEOUT_MS = 5000
_MULTICAST_OPTIONS = ("group", "broadcastPeriod", "refreshTimeout", "interface")


@dataclass(frozen=True, slots=True)
class EmbeddedNetwork:
    """What the URIs make: the group's cluster connections and where it announces itself."""

    connections: tuple[ClusterConnection, ...] = ()
    broadcast: tuple[BroadcastGroup, ...] = ()


def parse_network(uris: Sequence[str], password: str | None = None) -> EmbeddedNetwork:
    """The network `uris` describe; `ConfigError` naming the URI and what is wrong with it."""
    if isinstance(uris, str):
        raise ConfigError(f"network: a list of URIs, not one string: [{uris!r}]")
    connections: list[ClusterConnection] = []
    broadcast: list[BroadcastGroup] = []
    for uri in uris:
        scheme = uri.partition(":")[0].lower()
        if scheme == "multicast":
            connection, group = _multicast(uri, password)
            if any(c.name == connection.name for c in connections):
                raise ConfigError(f"network: two multicast URIs with group {connection.name!r}")
            connections.append(connection)
            broadcast.append(group)
        else:
            raise ConfigError(f"network: {uri!r}: expected multicast://ADDRESS:PORT (peer-to-peer discovery)")
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
