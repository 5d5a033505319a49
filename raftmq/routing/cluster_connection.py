"""Cluster connections as the broker core and the bridges use them: the settings of one
`[[cluster_connection]]` (`ClusterConnection`), one group's part of the cluster (`ClusterView`)
and the groups a node's bridges reach (`PeerGroup`). cluster.connection_tables parses them from a
topology file (docs/cluster.md has every key).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from raftmq.routing.addresses import AddressFilter
from raftmq.routing.discovery import DiscoveryGroup

OFF = "OFF"
STRICT = "STRICT"
ON_DEMAND = "ON_DEMAND"
OFF_WITH_REDISTRIBUTION = "OFF_WITH_REDISTRIBUTION"
LOCAL_FIRST = "LOCAL_FIRST"  # raftmq's own: a message stays where it arrived while a consumer there has room
LOAD_BALANCING = (OFF, STRICT, ON_DEMAND, OFF_WITH_REDISTRIBUTION, LOCAL_FIRST)
# Artemis leaves redistribution off (-1) and its users find messages stranded on a group whose
# consumer moved; raftmq moves them after this short delay unless told otherwise.
DEFAULT_REDISTRIBUTION_DELAY_MS = 500



@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How a bridge reconnects to a group it lost (Artemis's retry names)."""

    retry_interval_ms: int = 500
    retry_interval_multiplier: float = 2.0
    max_retry_interval_ms: int = 10_000
    reconnect_attempts: int = -1  # -1: forever

    def delay_ms(self, attempt: int) -> int:
        """The wait before reconnect attempt `attempt` (0 = the first after a loss)."""
        delay = self.retry_interval_ms * self.retry_interval_multiplier**attempt
        return int(min(delay, self.max_retry_interval_ms))


@dataclass(frozen=True, slots=True)
class Hub:
    """An edge's link to a hub (an embedded broker's `static:(...)` network connector,
    cluster.network_uris): the edge group opens one connection to the group at `addresses`,
    learns its name on connecting (raftmq.server.links.hub_links), pushes its messages there and
    pulls the hub's traffic back on that connection; with `duplex` the hub's messages may come
    to the edge's consumers (the edge advertises them), else none do."""

    edge: str  # the group that opens the link (the embedded broker's)
    addresses: tuple[str, ...]  # "host:port" of the hub's members' STOMP listeners
    duplex: bool = False


@dataclass(frozen=True, slots=True)
class ClusterConnection:
    name: str
    links: tuple[tuple[str, str], ...]  # undirected, each pair in name order, sorted
    address: AddressFilter = field(default_factory=AddressFilter)
    message_load_balancing: str = ON_DEMAND
    max_hops: int = 1
    redistribution_delay_ms: int = DEFAULT_REDISTRIBUTION_DELAY_MS
    use_duplicate_detection: bool = True
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    confirmation_window: int = 1000
    cluster_user: str | None = None
    cluster_password: str | None = field(default=None, repr=False)
    # Bridges connect to the neighbours' client ports over TLS, their certificates checked
    # against these CAs (and their host names against the addresses); None: plain TCP.
    tls_ca_file: str | None = None
    # What ActiveMQ Classic's network connectors add (cluster.network compiles them; a
    # cluster_connection keeps the defaults, which are Artemis's behaviour).
    forwards: tuple[tuple[str, str], ...] | None = None  # (from, to) directions; None: every link both ways
    # (opener, other): who opens a link's connection; None: both ends open their own. A link
    # opened by one end only carries both ends' traffic on that one connection.
    openers: tuple[tuple[str, str], ...] | None = None
    # Artemis's discovery: the groups are found at run time (raftmq.server.links.discovery), every one
    # a neighbour of every other (a mesh); `links` stays empty.
    discovery: DiscoveryGroup | None = None
    consumer_ttl: int | None = None  # how far bindings are advertised; None: max_hops
    conduit_subscriptions: bool = True  # ON_DEMAND turns per group; False: per consumer
    prefer_local: bool = False  # ON_DEMAND: the nearest groups with a consumer only
    dynamic_only: bool = False  # inactive durable subscriptions are not advertised
    static: bool = False  # queues: downstream neighbours take messages without a consumer
    # Edges and hubs, groups that find each other at run time like discovered ones: on an
    # edge, its link to a hub (`links` empty); on a hub, `edge_hubs`: the groups of this topology
    # that accept edges, groups it lists nowhere that open a link to them (embedded brokers).
    hub: Hub | None = None
    edge_hubs: tuple[str, ...] = ()

    @property
    def groups(self) -> tuple[str, ...]:
        return tuple(sorted({group for link in self.links for group in link}))

    def neighbours(self, group: str) -> tuple[str, ...]:
        """The groups `group` links to directly, in name order (found ones not included)."""
        return tuple(sorted({b if a == group else a for a, b in self.links if group in (a, b)}))

    def forwards_to(self, source: str, target: str) -> bool:
        """Whether messages of `source` may go to its neighbour `target` (and so `target`
        advertises its bindings to `source`)."""
        if self.hub is not None:
            return source != target and (source == self.hub.edge or (self.hub.duplex and target == self.hub.edge))
        if self.edge_hubs:
            return source != target and (source in self.edge_hubs or target in self.edge_hubs)
        if self.discovery is not None:
            return source != target
        if self.forwards is None:
            return (min(source, target), max(source, target)) in self.links
        return (source, target) in self.forwards

    def opens(self, group: str, neighbour: str) -> bool:
        """Whether `group` opens a connection to its neighbour `neighbour`."""
        if self.hub is not None:
            return group == self.hub.edge and neighbour != group
        if self.edge_hubs:
            return neighbour in self.edge_hubs and group not in self.edge_hubs
        if self.discovery is not None:
            return group != neighbour
        if self.openers is None:
            return (min(group, neighbour), max(group, neighbour)) in self.links
        return (group, neighbour) in self.openers

    @property
    def found_at_run_time(self) -> bool:
        """Its groups are not listed: discovered, an edge's hub, or a hub's edges."""
        return self.discovery is not None or self.hub is not None or bool(self.edge_hubs)

    @property
    def advert_hops(self) -> int:
        return self.max_hops if self.consumer_ttl is None else self.consumer_ttl

    @property
    def redistributes(self) -> bool:
        return self.redistribution_delay_ms >= 0 and self.message_load_balancing in (
            ON_DEMAND, OFF_WITH_REDISTRIBUTION, LOCAL_FIRST)


@dataclass(frozen=True, slots=True)
class ClusterView:
    """One group's part of the cluster: its name and the connections it is in (config order,
    the first whose `address` covers a destination governs it)."""

    group: str
    connections: tuple[ClusterConnection, ...]

    def governing(self, destination: str) -> ClusterConnection | None:
        for connection in self.connections:
            if connection.address.covers(destination):
                return connection
        return None

    @property
    def neighbours(self) -> tuple[str, ...]:
        return tuple(sorted({n for c in self.connections for n in c.neighbours(self.group)}))

    @property
    def downstream(self) -> tuple[str, ...]:
        """The neighbours this group forwards to, and hears bindings from."""
        return tuple(n for n in self.neighbours if any(c.forwards_to(self.group, n) for c in self.connections))

    @property
    def upstream(self) -> tuple[str, ...]:
        """The neighbours that forward to this group, and hear its bindings."""
        return tuple(n for n in self.neighbours if any(c.forwards_to(n, self.group) for c in self.connections))

    @property
    def discovery(self) -> tuple[ClusterConnection, ...]:
        """The connections whose groups are found by discovery."""
        return tuple(c for c in self.connections if c.discovery is not None)

    @property
    def dynamic(self) -> bool:
        """Whether some of its neighbours are found at run time (discovered, a hub, edges)."""
        return any(c.found_at_run_time for c in self.connections)

    @property
    def hubs(self) -> tuple[ClusterConnection, ...]:
        """This edge's links to hubs."""
        return tuple(c for c in self.connections if c.hub is not None and c.hub.edge == self.group)

    @property
    def accepts_edges(self) -> bool:
        return any(self.group in c.edge_hubs for c in self.connections)

    def accepts(self, sender: str) -> bool:
        """Whether an advert from group `sender` is taken: one this group forwards to, or any
        other group under a connection whose groups are found at run time."""
        return sender in self.downstream or (sender != self.group and self.dynamic)

    def opens(self, neighbour: str) -> bool:
        """Whether this group opens a connection to `neighbour` (its bridge pushes)."""
        return any(c.opens(self.group, neighbour) for c in self.connections)

    def pulls_from(self, neighbour: str) -> bool:
        """Whether this group's connection to `neighbour` is the link's only one: then it also
        carries the neighbour's traffic back, which this group's bridge pulls (a SUBSCRIBE to
        the neighbour's store-and-forward queue for this group)."""
        return self.opens(neighbour) and not any(c.opens(neighbour, self.group) for c in self.connections)

    def pulled_by(self, neighbour: str) -> bool:
        """Whether `neighbour` pulls this group's traffic for it (this group opens nothing to it)."""
        return not self.opens(neighbour) and any(c.opens(neighbour, self.group) for c in self.connections)

    def link_settings(self, neighbour: str) -> ClusterConnection:
        """The connection whose settings (retry, window, user) the bridge to `neighbour` uses:
        the first that links the two."""
        for connection in self.connections:
            if neighbour in connection.neighbours(self.group):
                return connection
        raise KeyError(neighbour)


@dataclass(frozen=True, slots=True)
class PeerGroup:
    """A group a node's bridges connect to: its name and its members' client addresses."""

    name: str
    clients: tuple[str, ...]  # "host:port" of each member's STOMP listener
    # The group's members file (cluster.group_file.MEMBERS_FILE), if its members may change while we
    # run (`raftmq group add-node`): a bridge reads the members there each time it connects.
    members_file: str | None = None
    admins: tuple[str, ...] = ()  # its members' admin ports, for the web console's cluster overview


def cluster_view(group: str, connections: tuple[ClusterConnection, ...]) -> ClusterView | None:
    """`group`'s view, or None when no connection links it to another group (one with
    discovery, an edge's hub or a hub's edges count: it may find some)."""
    mine = tuple(c for c in connections if c.neighbours(group) or c.discovery is not None
                 or (c.hub is not None and c.hub.edge == group) or group in c.edge_hubs)
    return ClusterView(group, mine) if mine else None
