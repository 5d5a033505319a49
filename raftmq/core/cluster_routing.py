"""The broker core's part in a cluster of groups: routing SENDs to other groups, learning
their bindings, redistributing waiting messages. Pure, like the rest of the core.

Everything it decides from is committed state: the neighbours' latest adverts
(cluster.bindings), a round-robin turn per queue, and when each queue was first seen idle
with consumers elsewhere. So every replica decides alike and a new leader routes as the old
one did.

A message for another group is not sent anywhere from here: it is stored in the
store-and-forward queue of the next hop (cluster.route.sf_queue), an ordinary queue whose
consumer is the leader's bridge to that neighbour (raftmq.server.links.bridge). The bridge removes
it (an ACK) only once the neighbour has committed it, so a message is owned by exactly one
group at any moment, and a copy sent twice is stored once (its duplicate-detection id).

Routing (docs/cluster.md has the reasoning):
- a queue message from a client goes where `cluster.balance.choose` says; a message with a
  JMSXGroupID stays in the group that received it (its order is kept by one group's queue);
- a message that arrived from another group for this one is stored here; one passing through
  goes on to the next hop towards its target, never to a group already on its route, never
  past the connection's max_hops (it stays here instead: redistribution may move it later);
- a topic message from a client reaches local subscribers and, one copy each, every other
  group with a matching subscription within max_hops, which fans it out there;
- redistribution (on Tick, raftmq.core.redistribution): a queue with waiting messages, no
  local consumer, and a consumer elsewhere, idle for the connection's redistribution_delay_ms,
  moves its ready messages there (best priority first; messages of one JMSXGroupID all to the
  same group). Under LOCAL_FIRST also a backlog behind local consumers that are all full, for
  that long: it moves to the groups whose adverts say they have room, which get an equal share
  each, the local group keeping its own share.
"""

from __future__ import annotations

import zlib
from dataclasses import replace

from raftmq.core.cluster_state import ClusterState
from raftmq.core.dispatch import Dispatcher
from raftmq.core.message import Message
from raftmq.core.message_headers import read_headers
from raftmq.core.model import Delivery, Store, Subscription, selector_headers
from raftmq.core.queue_patterns import matches as matches_queue
from raftmq.core.redistribution import Redistribution
from raftmq.core.scale_down import ScaleDown
from raftmq.core.selector import Selector, compile_selector
from raftmq.core.state import BrokerState
from raftmq.core.validation import QUEUE_PREFIX, TOPIC_PREFIX, destination_name, is_wildcard
from raftmq.errors import SelectorError
from raftmq.patterns import pattern_matches
from raftmq.protocol.header_block import block_of, first, has, pairs_of
from raftmq.routing.balance import Candidate, choose
from raftmq.routing.bindings import Advert, Consumers, Route, advert_for, decode_advert, routes, summarise
from raftmq.routing.cluster_connection import ON_DEMAND, STRICT, ClusterConnection, ClusterView
from raftmq.routing.route import (
    ADVERT_HEADER,
    DELIVERED_HEADER,
    DESTINATION_HEADER,
    DRAIN_HEADER,
    DUPLICATE_ID_HEADER,
    DURABLE_HEADER,
    FORWARD_ID_HEADER,
    HEADER_PREFIX,
    RESENT_HEADER,
    ROUTE_HEADER,
    SF_PREFIX,
    SUBSCRIPTION_ONLY_HEADER,
    TO_HEADER,
    is_internal,
    parse_route,
    producer_forward_id,
    sf_queue,
)


class ClusterRouting:
    def __init__(self, view: ClusterView, state: BrokerState, dispatch: Dispatcher) -> None:
        self.view = view
        self.own = view.group
        self.state = state
        self.dispatch = dispatch
        self._governing: dict[str, ClusterConnection | None] = {}
        self._selectors: dict[str, Selector | None] = {}
        self.scale_down = ScaleDown(self)
        self.redistribution = Redistribution(self)
        dispatch.on_acked = self.acked
        self.rebuild()

    @property
    def cluster_state(self) -> ClusterState:
        return self.state.cluster

    def acked(self, store: Store, settled: list[Delivery]) -> None:
        """ACKed deliveries: those of a store-and-forward queue are what its neighbour confirmed."""
        if not store.destination.startswith(SF_PREFIX):
            return
        neighbour = store.destination[len(SF_PREFIX):]
        adverts = sum(1 for done in settled if has(done.message.headers, ADVERT_HEADER))
        cluster = self.cluster_state
        if adverts:
            cluster.adverts_confirmed[neighbour] = cluster.adverts_confirmed.get(neighbour, 0) + adverts
        if len(settled) > adverts:
            cluster.confirmed[neighbour] = cluster.confirmed.get(neighbour, 0) + len(settled) - adverts

    def rebuild(self) -> None:
        """Derive the route index from the adverts (after a change, or a snapshot load)."""
        self._routes, self._next_hops = routes(self.cluster_state.adverts, self.own)
        self._route_patterns = [destination for destination in self._routes if is_wildcard(destination)]

    def governing(self, destination: str) -> ClusterConnection | None:
        """The connection whose settings route `destination`; None: it stays in this group
        (not covered, or the dead-letter / expiry queue, which each group keeps for itself)."""
        try:
            return self._governing[destination]
        except KeyError:
            config = self.dispatch.config
            own_queue = destination in (config.dead_letter_queue, config.expiry_queue)
            connection = self._governing[destination] = None if own_queue else self.view.governing(destination)
            return connection

    # -- what the leader's bridges read ------------------------------------------------------

    def local_bindings(self) -> dict[str, Consumers]:
        """This group's own destinations a neighbour may route to: every queue (with its
        consumers' selectors) and every topic with subscriptions, durable ones too (active
        ones only under a `dynamic_only` connection)."""
        config = self.dispatch.config
        local: dict[str, Consumers] = {}
        for destination, store in self.state.queues.items():
            if is_internal(destination) or destination in (config.dead_letter_queue, config.expiry_queue):
                continue
            local[destination] = summarise(_selector_text(sub.selector) for sub in store.consumers)
        for pattern, parents in self.dispatch.queue_patterns.parents.items():  # wildcard queue consumers
            local[pattern] = summarise(_selector_text(parent.selector) for parent in parents)
        for destination, topic in self.state.topics.items():
            if not topic.subs or is_internal(destination):
                continue
            connection = self.governing(destination)
            subs = list(topic.subs)
            if connection is not None and connection.dynamic_only:
                subs = [sub for sub in subs if sub.session is not None]
            if subs:
                local[destination] = summarise(_selector_text(sub.selector) for sub in subs)
        return local

    def advert_for(self, neighbour: str, position: int) -> Advert:
        """What this group tells `neighbour`: only one that forwards to it needs to know."""
        def max_hops(destination: str) -> int | None:
            connection = self.governing(destination)
            if connection is None or not connection.forwards_to(neighbour, self.own):
                return None
            return connection.advert_hops

        if self.cluster_state.draining is not None:  # a drained group offers nothing: nobody routes to it or through it
            return advert_for(self.own, neighbour, position, {}, {}, max_hops)
        return advert_for(self.own, neighbour, position, self.local_bindings(), self.cluster_state.adverts, max_hops,
                          self.busy_queues())

    def busy_queues(self) -> list[str]:
        """This group's queues without room: a message waits there, or no consumer could take
        another delivery now (none, or each at its prefetch)."""
        return [
            destination for destination, store in self.state.queues.items()
            if store.depth or not any(sub.has_room for sub in store.consumers)
        ]

    def routes_to(self, destination: str) -> dict[str, Route]:
        return self._routes.get(destination, {})

    def topic_routes(self, destination: str) -> list[tuple[str, Route]]:
        """Every group whose subscriptions want a message published to topic `destination`:
        its own subscriptions there, and those on any pattern the name matches (a group may
        appear once for each), by group."""
        found = list(self.routes_to(destination).items())
        if self._route_patterns and destination.startswith(TOPIC_PREFIX):
            name = destination_name(destination)
            for pattern in self._route_patterns:
                if pattern.startswith(TOPIC_PREFIX) and pattern_matches(destination_name(pattern), name):
                    found += self._routes[pattern].items()
        return sorted(found, key=lambda item: item[0])

    def queue_routes(self, destination: str) -> dict[str, Route]:
        """Every group with consumers for queue `destination`: of the queue itself, or of a
        wildcard queue subscription whose pattern matches it (a group's counted together)."""
        found = dict(self.routes_to(destination))
        if self._route_patterns and matches_queue(None, destination):
            for pattern in self._route_patterns:
                if pattern.startswith(QUEUE_PREFIX) and matches_queue(pattern, destination):
                    for group, route in self._routes[pattern].items():
                        known = found.get(group)
                        found[group] = route if known is None else replace(
                            known, consumers=(*known.consumers, *route.consumers))
        return found

    def remote_bindings(self) -> dict[str, dict[str, dict[str, int]]]:
        """Per destination, the other groups that have it: hops and consumers (JSON-able)."""
        return {
            destination: {group: {"hops": route.hops, "consumers": route.consumer_count}
                          for group, route in sorted(table.items())}
            for destination, table in sorted(self._routes.items())
        }

    def reachable_groups(self) -> dict[str, tuple[int, str]]:
        """Every group this one can reach: (hops, next hop)."""
        return dict(self._next_hops)

    # -- commands ---------------------------------------------------------------------------

    def control(self, headers: str) -> str | None:
        """A SEND to the control destination: a neighbour's advert, or the start (or end) of
        this group's drain; an error text if invalid."""
        drain = first(headers, DRAIN_HEADER)
        if drain is not None:
            return self.scale_down.start(drain)
        return self.learn(headers)

    def learn(self, headers: str) -> str | None:
        """A neighbour's advert (a SEND to the control destination); an error text if invalid."""
        text = first(headers, ADVERT_HEADER)
        if text is None:
            return f"no {ADVERT_HEADER} header"
        try:
            advert = decode_advert(text)
        except ValueError as exc:
            return str(exc)
        if not self.view.accepts(advert.sender):
            return f"{advert.sender!r} is not linked to group {self.own!r} (or {self.own!r} does not forward to it)"
        known = self.cluster_state.adverts.get(advert.sender)
        if known is None or advert.position > known.position:
            self.cluster_state.adverts[advert.sender] = advert
            self.rebuild()
        return None

    def publish(self, destination: str, headers: str, body: object, now: int, *, deduplicated: bool = False) -> None:
        """Route a committed SEND (or a transaction's) to this group's stores or onwards
        (`deduplicated`: its `_AMQ_DUPL_ID` was checked already, as a scheduled message's was)."""
        to: str | None = None
        route: tuple[str, ...] = ()
        forward_id: str | None = None
        durable: str | None = None
        subscription_only = False
        resent = False
        delivered = 0
        pairs = pairs_of(headers) if HEADER_PREFIX in headers else ()
        if any(name.startswith(HEADER_PREFIX) for name, _ in pairs):
            kept = []
            for name, value in pairs:
                if name == TO_HEADER:
                    to = value
                elif name == ROUTE_HEADER:
                    route = parse_route(value)
                elif name == FORWARD_ID_HEADER:
                    forward_id = value
                elif name == DELIVERED_HEADER:
                    delivered = int(value) if value.isdigit() else 0
                elif name == DURABLE_HEADER:
                    durable = value
                elif name == SUBSCRIPTION_ONLY_HEADER:
                    subscription_only = True
                elif name == RESENT_HEADER:
                    resent = True
                elif not name.startswith(HEADER_PREFIX):
                    kept.append((name, value))
            if forward_id is not None:  # the bridge's stand-in for a producer id there was none of
                kept = [(name, value) for name, value in kept if name != DUPLICATE_ID_HEADER or value != forward_id]
            headers = block_of(kept)
        priority, expires, persistent, group, dupl_id = read_headers(headers)
        # A forward is checked by its own id: the producer's was checked where it was first stored.
        check_id = forward_id if forward_id is not None else dupl_id
        if check_id is not None and not deduplicated and not self.state.dedup.remember(destination, check_id):
            return
        if forward_id is not None and not route and dupl_id is not None and not deduplicated \
                and not self.state.dedup.remember(destination, dupl_id):
            return  # a forward first that fell back, of a SEND its client wrote again meanwhile
        if durable is not None:
            if to is None or to == self.own:
                self.scale_down.store_durable(destination, headers, body, now, durable, delivered, subscription_only)
                return
            headers += block_of(((DURABLE_HEADER, durable),))  # passing through: it travels on
            if subscription_only:
                headers += block_of(((SUBSCRIPTION_ONLY_HEADER, "1"),))
        connection = self.governing(destination)
        if connection is None:
            self.dispatch.publish(destination, headers, body, now, deduplicated=True)
            return
        here = (*route, self.own) if (not route or route[-1] != self.own) else route
        passing = to is not None and to != self.own
        if route and not passing:  # from another group, for this one: stored here
            arrived = self.cluster_state.arrived
            arrived[destination] = arrived.get(destination, 0) + 1
        if destination.startswith(QUEUE_PREFIX):
            if passing:
                assert to is not None
                # A forward first that fell back keeps the id it was sent with: the target may have it.
                carried = forward_id if not route else None
                if not self._pass_on(connection, destination, headers, body, now, to, here, delivered, carried):
                    self.dispatch.publish(destination, headers, body, now, deduplicated=True, delivered=delivered)
                return
            if to is None and group is None:
                message = Message("", destination, headers, body, priority, expires, now, group, persistent)
                if resent and dupl_id is not None:  # where a forward first of it would have gone
                    target = self._stable(connection, destination, message, dupl_id) or self.own
                else:
                    target = self._balance(connection, destination, message)
                if target != self.own:
                    # A static target may not have advertised yet: it is a neighbour, reached directly.
                    via = self._next_hops.get(target, (1, target))[1]
                    self.forward(via, destination, headers, body, now, target, here,
                                 forward_id=None if dupl_id is None else producer_forward_id(dupl_id))
                    return
            self.dispatch.publish(destination, headers, body, now, deduplicated=True, delivered=delivered)
            return
        if passing:
            assert to is not None
            if not self._pass_on(connection, destination, headers, body, now, to, here):
                self.cluster_state.unroutable += 1
            return
        self.dispatch.publish(destination, headers, body, now, deduplicated=True)
        if to is None:
            message = Message("", destination, headers, body, priority, expires, now, group, persistent)
            matching = None
            sent = set()
            for target, remote in self.topic_routes(destination):
                if remote.hops > connection.max_hops or target in here or target in sent:
                    continue
                if matching is None:
                    matching = selector_headers(message)
                if self.takers(remote.consumers, matching):
                    self.forward(remote.via, destination, headers, body, now, target, here)
                    sent.add(target)
            if connection.static:  # every downstream neighbour takes a copy, subscribed or not
                for target in self._static_targets(connection):
                    if target not in sent and target not in here:
                        self.forward(target, destination, headers, body, now, target, here)

    @property
    def next_hops(self) -> dict[str, tuple[int, str]]:
        """Every group this one reaches: (hops, the neighbour its route starts with)."""
        return self._next_hops

    def drain(self) -> None:
        """On a Tick: a draining group's moves (raftmq.core.scale_down)."""
        self.scale_down.tick()

    def redistribute(self, now: int) -> None:
        """On a Tick: move the ready messages of queues idle here with consumers elsewhere
        (raftmq.core.redistribution)."""
        self.redistribution.tick(now)

    # -- helpers ----------------------------------------------------------------------------

    def first_target(self, destination: str, headers: str, turn: int) -> str | None:
        """The neighbour a client's SEND (outside a transaction, read by raftmq.server.links.forward_first)
        goes to if the leader forwards it before storing it: where the balancing sends it now,
        `turn` standing in for the committed round-robin turn. None: it is stored here first (it
        stays here, its target is more than one link away, it belongs to a JMSXGroupID, it
        carries routing headers, or the group drains)."""
        if not destination.startswith(QUEUE_PREFIX) or HEADER_PREFIX in headers \
                or self.cluster_state.draining is not None:
            return None
        connection = self.governing(destination)
        if connection is None or connection.message_load_balancing == STRICT:
            return None  # round robin with this group: the store path keeps the committed turn
        priority, expires, persistent, group, producer_id = read_headers(headers)
        if group is not None:
            return None
        message = Message("", destination, headers, b"", priority, expires, 0, group, persistent)
        policy = connection.message_load_balancing
        if policy == ON_DEMAND and self._local_takers(destination, selector_headers(message)):
            return None  # likewise
        target = self._balance(connection, destination, message, turn)
        if target != self.own and producer_id is not None:
            # Not by room, which changes: the same SEND written again goes there (`publish`).
            target = self._stable(connection, destination, message, producer_id) or self.own
        if target == self.own or self._next_hops.get(target, (1, target))[1] != target:
            return None
        return target

    def _local_takers(self, destination: str, matching: dict[str, str]) -> list[Subscription]:
        store = self.state.queues.get(destination)
        return [] if store is None else [
            sub for sub in store.consumers if sub.selector is None or sub.selector.matches(matching)]

    def _stable(self, connection: ClusterConnection, destination: str, message: Message,
                producer_id: str) -> str | None:
        """The group a client's SEND with `producer_id` goes to when it leaves this group first
        and when its client writes it again: among the nearest other groups with a consumer that
        would take it, the one a hash of the id names (None: there is none)."""
        matching = selector_headers(message)
        remote = [(route.hops, group) for group, route in self.queue_routes(destination).items()
                  if route.hops <= connection.max_hops and self.takers(route.consumers, matching)]
        if not remote:
            return None
        nearest = min(hops for hops, _ in remote)
        names = sorted(group for hops, group in remote if hops == nearest)
        return names[zlib.crc32(producer_id.encode()) % len(names)]

    def _balance(self, connection: ClusterConnection, destination: str, message: Message,
                 turn: int | None = None) -> str:
        """`turn`: use this one, leave the committed one alone (a forward first)."""
        routes = self.queue_routes(destination)
        if not routes and not connection.static:
            return self.own
        remote: dict[str, Candidate] = {}
        matching = selector_headers(message)
        for target, route in routes.items():
            if route.hops <= connection.max_hops:
                remote[target] = Candidate(target, self.takers(route.consumers, matching), route.hops, route.room)
        if connection.static:  # the neighbour's bridge is a consumer that is always there
            for target in self._static_targets(connection):
                known = remote.get(target)
                remote[target] = Candidate(target, max(1, known.takers if known else 0), 1)
        if not remote:
            return self.own
        takers = self._local_takers(destination, matching)
        own = Candidate(self.own, len(takers), 0, any(sub.has_room for sub in takers))
        committed, turn = (True, self.cluster_state.turns.get(destination, 0)) if turn is None else (False, turn)
        target, used = choose(connection.message_load_balancing, own, list(remote.values()), turn,
                              conduit=connection.conduit_subscriptions, prefer_local=connection.prefer_local)
        if used and committed:
            self.cluster_state.turns[destination] = turn + 1
        return target

    def send_to_group(self, destination: str, headers: str, body: object, now: int, to: str) -> bool:
        """Send a message straight to group `to` (a temporary destination's owner lives there);
        False, and it is dropped, when no cluster connection leads there."""
        connection = self.governing(destination)
        if connection is None or not self._pass_on(connection, destination, headers, body, now, to, (self.own,)):
            self.cluster_state.unroutable += 1
            return False
        return True

    def _pass_on(self, connection: ClusterConnection, destination: str, headers: str, body: object, now: int,
                 to: str, here: tuple[str, ...], delivered: int = 0, forward_id: str | None = None) -> bool:
        hop = self._next_hops.get(to)
        if hop is None or hop[1] in here or len(here) > connection.max_hops:
            return False
        self.forward(hop[1], destination, headers, body, now, to, here, delivered=delivered, forward_id=forward_id)
        return True

    def forward(self, via: str, destination: str, headers: str, body: object, now: int, to: str,
                 here: tuple[str, ...], original: Message | None = None, delivered: int = 0,
                 forward_id: str | None = None) -> None:
        """Store the message in `via`'s store-and-forward queue, for group `to`; a message moved
        by redistribution (`original`) carries how often it was delivered here; `forward_id`: the
        id it goes with (else the bridge makes one of its message id)."""
        dispatch = self.dispatch
        message_id = dispatch.mint_id()
        tags = [(DESTINATION_HEADER, destination), (TO_HEADER, to), (ROUTE_HEADER, ",".join(here))]
        delivered = original.delivery_count if original is not None else delivered
        if delivered:
            tags.append((DELIVERED_HEADER, str(delivered)))
        if forward_id is not None:
            tags.append((FORWARD_ID_HEADER, forward_id))
        tagged = headers + block_of(tags)
        if original is None:
            priority, expires, persistent, group, _ = read_headers(headers)
        else:
            priority, expires, persistent, group = (original.priority, original.expires, original.persistent,
                                                    original.group)
        queue = sf_queue(via)
        dispatch.enqueue(dispatch.queue(queue),
                         Message(message_id, queue, tagged, body, priority, expires, now, group, persistent))
        cluster = self.cluster_state
        cluster.forwarded[via] = cluster.forwarded.get(via, 0) + 1
        cluster.sent_on[destination] = cluster.sent_on.get(destination, 0) + 1

    def takers(self, consumers: Consumers, matching: dict[str, str]) -> int:
        """How many of a group's consumers would take a message with these headers."""
        takers = 0
        for text, count in consumers:
            if count <= 0:
                continue
            if text is None:
                takers += count
                continue
            selector = self.selector(text)
            if selector is not None and selector.matches(matching):
                takers += count
        return takers

    def _static_targets(self, connection: ClusterConnection) -> list[str]:
        """The neighbours a static connection forwards to whether or not they consume."""
        if connection.max_hops < 1:
            return []
        return [n for n in connection.neighbours(self.own) if connection.forwards_to(self.own, n)]

    def selector(self, text: str) -> Selector | None:
        try:
            return self._selectors[text]
        except KeyError:
            try:
                selector: Selector | None = compile_selector(text)
            except SelectorError:
                selector = None  # another group accepted it; this version cannot read it: never matches
            self._selectors[text] = selector
            return selector


def _selector_text(selector: Selector | None) -> str | None:
    return None if selector is None else selector.text
