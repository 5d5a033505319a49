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

`parse_cluster_connections` checks every key and names the file and key in its `ConfigError`.
`ClusterView` is what one group's broker core is configured with: its own name and the
connections it is part of.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cluster.addresses import AddressFilter
from cluster.discovery import DiscoveryGroup
from cluster.table import Table, tables
from raftmq.errors import ConfigError

OFF = "OFF"
STRICT = "STRICT"
ON_DEMAND = "ON_DEMAND"
OFF_WITH_REDISTRIBUTION = "OFF_WITH_REDISTRIBUTION"
LOAD_BALANCING = (OFF, STRICT, ON_DEMAND, OFF_WITH_REDISTRIBUTION)
# Artemis leaves redistribution off (-1) and its users find messages stranded on a group whose
# consumer moved; raftmq moves them after this short delay unless told otherwise.
DEFAULT_REDISTRIBUTION_DELAY_MS = 500
MESH = "mesh"
CHAIN = "chain"

_KEYS = (
    "name", "address", "groups", "links", "message_load_balancing", "max_hops", "redistribution_delay_ms",
    "use_duplicate_detection", "retry_interval_ms", "retry_interval_multiplier", "max_retry_interval_ms",
    "reconnect_attempts", "confirmation_window", "cluster_user", "cluster_password", "cluster_password_env",
    "discovery_group",
)


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
    # What ActiveMQ Classic's network connectors add (cluster.network compiles them; a
    # cluster_connection keeps the defaults, which are Artemis's behaviour).
    forwards: tuple[tuple[str, str], ...] | None = None  # (from, to) directions; None: every link both ways
    # (opener, other): who opens a link's connection; None: both ends open their own. A link
    # opened by one end only carries both ends' traffic on that one connection.
    openers: tuple[tuple[str, str], ...] | None = None
    # Artemis's discovery: the groups are found at run time (raftmq.server.discovery), every one
    # a neighbour of every other (a mesh); `links` stays empty.
    discovery: DiscoveryGroup | None = None
    consumer_ttl: int | None = None  # how far bindings are advertised; None: max_hops
    conduit_subscriptions: bool = True  # ON_DEMAND turns per group; False: per consumer
    prefer_local: bool = False  # ON_DEMAND: the nearest groups with a consumer only
    dynamic_only: bool = False  # inactive durable subscriptions are not advertised
    static: bool = False  # queues: downstream neighbours take messages without a consumer

    @property
    def groups(self) -> tuple[str, ...]:
        return tuple(sorted({group for link in self.links for group in link}))

    def neighbours(self, group: str) -> tuple[str, ...]:
        """The groups `group` links to directly, in name order (found ones not included)."""
        return tuple(sorted({b if a == group else a for a, b in self.links if group in (a, b)}))

    def forwards_to(self, source: str, target: str) -> bool:
        """Whether messages of `source` may go to its neighbour `target` (and so `target`
        advertises its bindings to `source`)."""
        if self.discovery is not None:
            return source != target
        if self.forwards is None:
            return (min(source, target), max(source, target)) in self.links
        return (source, target) in self.forwards

    def opens(self, group: str, neighbour: str) -> bool:
        """Whether `group` opens a connection to its neighbour `neighbour`."""
        if self.discovery is not None:
            return group != neighbour
        if self.openers is None:
            return (min(group, neighbour), max(group, neighbour)) in self.links
        return (group, neighbour) in self.openers

    @property
    def advert_hops(self) -> int:
        return self.max_hops if self.consumer_ttl is None else self.consumer_ttl

    @property
    def redistributes(self) -> bool:
        return self.redistribution_delay_ms >= 0 and self.message_load_balancing in (ON_DEMAND, OFF_WITH_REDISTRIBUTION)


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
        """The connections whose groups are found at run time."""
        return tuple(c for c in self.connections if c.discovery is not None)

    def accepts(self, sender: str) -> bool:
        """Whether an advert from group `sender` is taken: one this group forwards to, or any
        other group under a connection with discovery."""
        return sender in self.downstream or (sender != self.group and bool(self.discovery))

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
    # The group's members file (raftmq.config.MEMBERS_FILE), if its members may change while we
    # run (`raftmq group add-node`): a bridge reads the members there each time it connects.
    members_file: str | None = None
    admins: tuple[str, ...] = ()  # its members' admin ports, for the web console's cluster overview


def cluster_view(group: str, connections: tuple[ClusterConnection, ...]) -> ClusterView | None:
    """`group`'s view, or None when no connection links it to another group (one with
    discovery counts: it may find some)."""
    mine = tuple(c for c in connections if c.neighbours(group) or c.discovery is not None)
    return ClusterView(group, mine) if mine else None


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
    if "discovery_group" in raw:
        wanted = table.text("discovery_group", None)
        if wanted not in discovery:
            table.fail("discovery_group", f"names {wanted!r}, which is no [[discovery_group]] of this topology "
                       f"(known: {', '.join(discovery) or 'none'})")
        if members is not None or "links" in raw:
            table.fail("discovery_group", "and groups/links are both set: the groups are either listed or discovered")
        found = discovery[wanted or ""]
        links: tuple[tuple[str, str], ...] = ()
    else:
        links = _links(table, members, raw.get("links", MESH))
    for a, b in links:
        for group in (a, b):
            if group not in known_groups:
                table.fail("links" if members is None else "groups", f"names {group!r}, which is no group of this topology "
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
    return ClusterConnection(
        name=name,
        links=links,
        address=address,
        message_load_balancing=str(policy),
        max_hops=table.integer("max_hops", 1, 0),
        redistribution_delay_ms=table.integer("redistribution_delay_ms", DEFAULT_REDISTRIBUTION_DELAY_MS, 0, minus_one=True),
        use_duplicate_detection=duplicate_detection,
        retry=retry,
        confirmation_window=table.integer("confirmation_window", 1000, 1),
        cluster_user=user,
        cluster_password=password,
        discovery=found,
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
            if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(g, str) for g in pair)) or pair[0] == pair[1]:
                table.fail("links", f"must hold [group, group] pairs of two different groups, got {pair!r}")
            if members is not None and not set(pair) <= set(members):
                table.fail("links", f"links {pair!r}, not among groups {members!r}")
            pairs.add((pair[0], pair[1]))
        if not pairs:
            table.fail("links", "is empty")
    else:
        table.fail("links", f"must be \"mesh\", \"chain\" or a list of [group, group] pairs, got {links!r}")
    return tuple(sorted({(a, b) if a < b else (b, a) for a, b in pairs}))
