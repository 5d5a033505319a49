"""ActiveMQ Classic's networks of brokers: the `[[network_connector]]` tables of a topology
file, compiled onto the same model as cluster connections (raftmq.routing.cluster_connection).

A Classic broker declares `<networkConnector uri="static:(tcp://b:61616)" .../>` in its own
activemq.xml; here the table names the group that declares it, and the option names are
Classic's, unchanged::

    [[network_connector]]
    group = "g1"                      # the broker (group) whose configuration declares it
    name = "g1-to-hub"
    uri = "static:(stomp://127.0.0.1:61623,stomp://127.0.0.1:61633)"   # a group's members: failover
    networkTTL = 2
    conduitSubscriptions = false
    excludedDestinations = ["queue://audit.>"]

A connector from g1 to g2 lets g1's messages go to g2's consumers (g2 tells g1 about them);
with `duplex = true` g2's go to g1's as well. Every address in `uri` must be a member's STOMP
address in the topology: the addresses of one group's members make one link (failover among
them), addresses of several groups one link each. docs/cluster.md has the table mapping each
option to the model and what raftmq does differently on purpose.

Connectors with the same options are merged into one `ClusterConnection` (their links
together); one with `staticallyIncludedDestinations` becomes two, the static one first, since
the first connection covering a destination governs it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cluster.table import Table, tables
from raftmq.errors import ConfigError
from raftmq.routing.addresses import AddressFilter
from raftmq.routing.cluster_connection import ON_DEMAND, ClusterConnection, RetryPolicy

CONNECTOR_KEYS = (
    "group", "name", "uri", "networkTTL", "messageTTL", "consumerTTL", "conduitSubscriptions", "duplex", "dynamicOnly",
    "decreaseNetworkConsumerPriority", "suppressDuplicateQueueSubscriptions", "excludedDestinations",
    "dynamicallyIncludedDestinations", "staticallyIncludedDestinations", "prefetchSize", "initialReconnectDelay",
    "maxReconnectDelay", "useExponentialBackOff", "backOffMultiplier", "replayWhenNoConsumers", "replayDelay",
    "userName", "password", "password_env",
)
_SCHEMES = ("stomp", "stomp+nio", "stomp+ssl", "tcp", "nio")
ADDRESS = re.compile(r"^(?:(?P<scheme>[a-z+]+)://)?(?P<host>[^:/?]+):(?P<port>\d+)/?$")
# Classic replays messages back to a broker whose consumers left only when told to, and its
# users find messages stuck; raftmq does by default, after the cluster connections' delay.
DEFAULT_REPLAY_DELAY_MS = 500


@dataclass(frozen=True, slots=True)
class _Options:
    """Everything of a connector but who declares it and where it goes: connectors with
    equal options share one model connection."""

    message_ttl: int
    consumer_ttl: int
    conduit: bool
    dynamic_only: bool
    prefer_local: bool
    excluded: tuple[str, ...]
    dynamic: tuple[str, ...]
    static: tuple[str, ...]
    prefetch: int
    retry: RetryPolicy
    replay_delay_ms: int
    user: str | None
    password: str | None


def parse_network_connectors(path: Path, entries: Any, members: dict[str, tuple[str, ...]],
                             taken: tuple[str, ...] = ()) -> tuple[ClusterConnection, ...]:
    """The connections `[[network_connector]]` tables compile to. `members`: each group's
    members' STOMP addresses ("host:port"); `taken`: names the cluster connections use."""
    owner = {address: group for group, addresses in members.items() for address in addresses}
    merged: dict[_Options, tuple[str, set[tuple[str, str]], set[tuple[str, str]]]] = {}
    names: set[str] = set(taken)
    for index, entry in enumerate(tables(path, "network_connector", entries)):
        table = Table(path, f"network_connector[{index}]", entry, CONNECTOR_KEYS, "network_connector option")
        group = table.text("group", None)
        if group is None:
            table.fail("group", "is required: the group whose broker declares the connector")
        if group not in members:
            table.fail("group", f"names {group!r}, which is no group of this topology (groups: {', '.join(members)})")
        name = table.text("name", f"{group}-network-{index}")
        assert name is not None
        if name in names:
            table.fail("name", f"{name!r} is used twice among the connectors and cluster connections")
        names.add(name)
        targets = _targets(table, owner)
        if group in targets:
            table.fail("uri", f"names a member of {group!r} itself")
        options = connector_options(table)
        edges = {(group, target) for target in targets}
        if table.flag("duplex", False):
            edges |= {(target, group) for target in targets}
        openers = {(group, target) for target in targets}  # Classic: the declaring broker connects
        known = merged.get(options)
        if known is None:
            merged[options] = (name, edges, openers)
        else:
            merged[options] = (known[0], known[1] | edges, known[2] | openers)
    connections: list[ClusterConnection] = []
    for options, (name, edges, openers) in merged.items():
        connections.extend(compile_connector(name, options, edges, openers))
    _check_shadowing(path, connections)
    return tuple(connections)


def compile_connector(name: str, options: _Options, edges: set[tuple[str, str]],
             openers: set[tuple[str, str]]) -> list[ClusterConnection]:
    links = tuple(sorted({(min(a, b), max(a, b)) for a, b in edges}))
    common: dict[str, Any] = dict(
        links=links, forwards=tuple(sorted(edges)), openers=tuple(sorted(openers)), max_hops=options.message_ttl,
        consumer_ttl=options.consumer_ttl,
        conduit_subscriptions=options.conduit, prefer_local=options.prefer_local, dynamic_only=options.dynamic_only,
        use_duplicate_detection=True, retry=options.retry, confirmation_window=options.prefetch,
        cluster_user=options.user, cluster_password=options.password,
    )
    excluded = [f"!{item}" for item in options.excluded]
    compiled = []
    if options.static:
        address = AddressFilter.parse(", ".join([*options.static, *excluded]))
        compiled.append(ClusterConnection(name=f"{name}.static", address=address, message_load_balancing=ON_DEMAND,
                                          static=True, redistribution_delay_ms=-1, **common))
    address = AddressFilter.parse(", ".join([*options.dynamic, *excluded]))
    compiled.append(ClusterConnection(name=name, address=address, message_load_balancing=ON_DEMAND,
                                      redistribution_delay_ms=options.replay_delay_ms, **common))
    return compiled


def _check_shadowing(path: Path, connections: list[ClusterConnection]) -> None:
    """Connectors with different options both covering every destination of a group: the
    first would govern them all and the other's options would silently not apply."""
    for i, first in enumerate(connections):
        for second in connections[i + 1:]:
            shared = set(first.groups) & set(second.groups)
            if shared and not first.address.include and not second.address.include and not first.static:
                raise ConfigError(
                    f"{path}: network connectors {first.name!r} and {second.name!r} both link {sorted(shared)[0]!r} "
                    "for every destination with different options; raftmq applies one set of options per "
                    "destination: give them the same options, or split the destinations between them "
                    "(dynamicallyIncludedDestinations / excludedDestinations)")


def _targets(table: Table, owner: dict[str, str]) -> set[str]:
    uri = table.text("uri", None)
    if uri is None:
        table.fail("uri", 'is required, e.g. "static:(stomp://127.0.0.1:61613)"')
    assert uri is not None
    if not uri.startswith("static:"):
        table.fail("uri", f"must be a static: list (discovery is configured apart), got {uri!r}")
    body = uri[len("static:"):].strip()
    if body.startswith("(") and body.endswith(")"):
        body = body[1:-1]
    items = []
    for raw in body.split(","):
        item = raw.strip()
        if item.startswith("failover:"):  # a failover list of one group's members, as Classic writes it
            item = item[len("failover:"):].lstrip("(")
        items.append(item.rstrip(")"))
    groups: set[str] = set()
    for item in items:
        match = ADDRESS.match(item)
        if match is None or (match["scheme"] is not None and match["scheme"] not in _SCHEMES):
            table.fail("uri", f"has {item!r}, not a broker address (stomp://HOST:PORT; schemes: {', '.join(_SCHEMES)})")
        address = f"{match['host']}:{match['port']}"
        group = owner.get(address)
        if group is None:
            table.fail("uri", f"has {address}, which is no member's STOMP address in this topology")
        groups.add(group)
    if not groups:
        table.fail("uri", "names no broker")
    return groups


def connector_options(table: Table) -> _Options:
    ttl = table.integer("networkTTL", 1, 1)
    initial = table.integer("initialReconnectDelay", 1000, 1)
    maximum = table.integer("maxReconnectDelay", 30_000, 1)
    if maximum < initial:
        table.fail("maxReconnectDelay", f"must be at least initialReconnectDelay ({initial})")
    multiplier = table.number("backOffMultiplier", 2.0, 1.0)
    exponential = table.flag("useExponentialBackOff", True)
    retry = RetryPolicy(initial, multiplier if exponential else 1.0, maximum, -1)
    replay = table.flag("replayWhenNoConsumers", True)
    delay = table.integer("replayDelay", DEFAULT_REPLAY_DELAY_MS, 0)
    table.flag("suppressDuplicateQueueSubscriptions", False)  # always so here: one route per group (docs)
    user, password = table.credentials("userName", "password", "password_env")
    return _Options(
        message_ttl=table.integer("messageTTL", ttl, 1),
        consumer_ttl=table.integer("consumerTTL", ttl, 1),
        conduit=table.flag("conduitSubscriptions", True),
        dynamic_only=table.flag("dynamicOnly", False),
        prefer_local=table.flag("decreaseNetworkConsumerPriority", False),
        excluded=_destinations(table, "excludedDestinations"),
        dynamic=_destinations(table, "dynamicallyIncludedDestinations"),
        static=_destinations(table, "staticallyIncludedDestinations"),
        prefetch=table.integer("prefetchSize", 1000, 1),
        retry=retry,
        replay_delay_ms=delay if replay else -1,
        user=user,
        password=password,
    )


def _destinations(table: Table, key: str) -> tuple[str, ...]:
    """Classic's destination lists: "queue://NAME" or "topic://NAME" (or "/queue/NAME",
    "/topic/NAME"), NAME a pattern; as address-filter items of that kind."""
    value = table.raw.get(key, [])
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        table.fail(key, f'must be a list of destinations like "queue://orders.>", got {value!r}')
    items = []
    for item in value:
        for prefix, kind in (("queue://", "/queue/"), ("topic://", "/topic/"), ("/queue/", "/queue/"),
                             ("/topic/", "/topic/")):
            if item.startswith(prefix):
                normalised = kind + item[len(prefix):]
                break
        else:
            table.fail(key, f'has {item!r}: name the kind, "queue://{item}" or "topic://{item}"')
        try:
            AddressFilter.parse(normalised)
        except ValueError as exc:
            table.fail(key, f"has {item!r}: {exc}")
        items.append(normalised)
    return tuple(items)
