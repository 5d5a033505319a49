"""The broker core's records: sessions, subscriptions and in-flight deliveries; the message
stores of queues and topic subscriptions; topics. Plain mutable records with the small rules
that belong to them; the rules that change them together live in `raftmq.core.broker` and
`raftmq.core.dispatch`.

A `Store` holds the ready (not in flight) messages of one queue, or of one topic subscription
(every topic subscription owns a private store). Ready messages sit in ten priority lanes, each
a deque of entry tokens in arrival order, plus a dict token → Message. Taking a message from
the middle of a lane (selectors, message groups, expiry sweeps) only deletes it from the dict:
its token stays in the deque as a tombstone, skipped when met and dropped by `compact` once
tombstones outnumber live messages. A message that returns to a store gets a fresh token, so
a stale tombstone can never be mistaken for it.
"""

from __future__ import annotations

from collections import deque
from enum import Enum
from typing import TYPE_CHECKING, Any, Final

from raftmq.core.commands import ACK_AUTO, ACK_CLIENT
from raftmq.core.message import Message
from raftmq.protocol.header_block import header_dict

if TYPE_CHECKING:
    from raftmq.core.paging import Tail
    from raftmq.core.selector import Selector

# A transaction's buffered work, applied in order at COMMIT:
#   ("send", destination, headers, body, now) | ("ack", ack_id) | ("nack", ack_id)
TransactionOp = tuple[Any, ...]


class Delivery:
    """One message handed to a subscription that expects an ACK (ack mode client / client-individual)."""

    __slots__ = ("ack_id", "message", "seq", "sub")

    def __init__(self, seq: int, ack_id: str, sub: Subscription, message: Message) -> None:
        self.seq = seq
        self.ack_id = ack_id
        self.sub = sub
        self.message = message


class Subscription:
    """A consumer of one store: a queue (shared with competing consumers) or its own topic store.

    `session` is None while a durable topic subscription is inactive (it keeps collecting).
    `in_flight` is in delivery order, which the cumulative ACK of ack mode client relies on.
    """

    __slots__ = (
        "ack",
        "auto",
        "children",
        "cumulative",
        "destination",
        "durable_name",
        "exclusive",
        "groups",
        "in_flight",
        "last_activity",
        "parent",
        "prefetch",
        "selector",
        "session",
        "store",
        "sub_id",
    )

    def __init__(
        self,
        session: Session | None,
        sub_id: str,
        destination: str,
        ack: str,
        prefetch: int,
        selector: Selector | None,
        exclusive: bool,
        durable_name: str | None,
        store: Store,
    ) -> None:
        self.session = session
        self.sub_id = sub_id
        self.destination = destination
        self.store = store
        self.selector = selector
        self.exclusive = exclusive
        self.durable_name = durable_name
        self.in_flight: dict[str, Delivery] = {}
        self.groups: dict[str, None] = {}  # message groups of a queue this consumer owns
        # `now` of its last delivery or acknowledgement (0: none since this member loaded it);
        # for the admin API only, so not in snapshots.
        self.last_activity = 0
        # A wildcard queue subscription (`/queue/orders.>`) is a parent that consumes nothing
        # itself: one child per matching queue, each a consumer of that queue, sharing the
        # parent's prefetch. `children` by queue (parents only), `parent` (children only).
        self.children: dict[str, Subscription] | None = None
        self.parent: Subscription | None = None
        self.set_mode(ack, prefetch)

    def set_mode(self, ack: str, prefetch: int) -> None:
        self.ack = ack
        self.auto = ack == ACK_AUTO
        self.cumulative = ack == ACK_CLIENT
        self.prefetch = prefetch

    @property
    def has_room(self) -> bool:
        """May take another message now: auto-ack, or fewer unacknowledged than its prefetch
        (a wildcard queue subscription's children count together)."""
        if self.auto:
            return True
        parent = self.parent
        if parent is None:
            return len(self.in_flight) < self.prefetch
        assert parent.children is not None  # a wildcard queue subscription's child
        return sum(len(child.in_flight) for child in parent.children.values()) < self.prefetch

    def consumers(self) -> list[Subscription]:
        """What consumes for this subscription: itself, or a wildcard one's children."""
        return [self] if self.children is None else list(self.children.values())

    def acked_through(self, delivery: Delivery) -> list[Delivery]:
        """The deliveries one ACK/NACK of `delivery` settles, in delivery order."""
        if not self.cumulative:
            return [delivery]
        parent = self.parent
        if parent is not None and self.session is not None:  # cumulative over every child
            return [d for d in self.session.deliveries.values() if d.sub.parent is parent and d.seq <= delivery.seq]
        settled = []
        for earlier in self.in_flight.values():
            settled.append(earlier)
            if earlier is delivery:
                break
        return settled


class Session:
    """A connected client.

    `deliveries` (by ack id, in delivery order) answers STOMP 1.2 ACKs. STOMP 1.0/1.1 clients ACK
    by message id: `by_message` maps each message id to its earliest delivery in flight in this
    session. It is built on the first such ACK (1.2 clients never pay for it). The same message
    id can be in flight twice in one session only through topic copies or dead-lettered copies;
    `shadowed` counts those later deliveries, so the rare fallback scan runs only when one exists.
    """

    __slots__ = ("by_message", "client_id", "deliveries", "login", "session_id", "shadowed", "subs", "temps",
                 "transactions")

    def __init__(self, session_id: str, login: str | None, client_id: str | None) -> None:
        self.session_id = session_id
        self.login = login
        self.client_id = client_id
        self.subs: dict[str, Subscription] = {}
        self.transactions: dict[str, list[TransactionOp]] = {}
        self.deliveries: dict[str, Delivery] = {}
        self.by_message: dict[str, Delivery] | None = None
        self.shadowed = 0
        self.temps: dict[str, None] = {}  # its temporary destinations (raftmq.core.temp_owners)

    def add_delivery(self, delivery: Delivery) -> None:
        self.deliveries[delivery.ack_id] = delivery
        index = self.by_message
        if index is not None:
            message_id = delivery.message.message_id
            if message_id in index:
                self.shadowed += 1
            else:
                index[message_id] = delivery

    def remove_delivery(self, delivery: Delivery) -> None:
        del self.deliveries[delivery.ack_id]
        index = self.by_message
        if index is None:
            return
        message_id = delivery.message.message_id
        if index.get(message_id) is not delivery:
            self.shadowed -= 1
            return
        del index[message_id]
        if self.shadowed:
            for later in self.deliveries.values():
                if later.message.message_id == message_id:
                    index[message_id] = later
                    self.shadowed -= 1
                    break

    def find_by_message(self, message_id: str, sub_id: str | None) -> Delivery | None:
        index = self.by_message
        if index is None:
            index = self.by_message = {}
            for delivery in self.deliveries.values():
                if delivery.message.message_id in index:
                    self.shadowed += 1
                else:
                    index[delivery.message.message_id] = delivery
        found = index.get(message_id)
        if found is None or sub_id is None or found.sub.sub_id == sub_id:
            return found
        if self.shadowed:
            for delivery in self.deliveries.values():
                if delivery.message.message_id == message_id and delivery.sub.sub_id == sub_id:
                    return delivery
        return None


PRIORITY_LEVELS = 10

class NoRoom(Enum):
    """`Store.pick`'s answer when no consumer has room at all: the dispatch pass can stop.
    (A one-member enum rather than a bare object, so that `is NO_ROOM` narrows the type.)"""

    NO_ROOM = "no room"


NO_ROOM: Final = NoRoom.NO_ROOM

# Tombstones tolerated beyond the live message count before a store rebuilds its lanes.
TOMBSTONE_SLACK = 64


def selector_headers(message: Message) -> dict[str, str]:
    """The header mapping a selector sees: user headers (first occurrence wins) plus the
    values the core decided (normalized priority, message id, timestamp)."""
    headers = header_dict(message.headers)
    headers["priority"] = str(message.priority)
    headers["message-id"] = message.message_id
    headers.setdefault("timestamp", str(message.timestamp))
    return headers


class Store:
    """Ready messages and the consumers competing for them.

    `shared` stores are queues: several consumers, round-robin, selectors checked at dispatch,
    message groups, exclusive consumers. A topic subscription's private store has at most one
    consumer (its subscription, while active) and its messages were filtered when copied in.

    `stable` is true when the last dispatch pass proved that no ready message can go to any
    consumer. A new message on a stable store then needs a look at that message alone, and a
    consumer that gains room (or arrives) is `woken`: the next pass offers the ready messages to
    the woken consumers only, since nothing changed for the others. Returned messages, and a
    consumer leaving (its message groups, its exclusivity), clear the flag: a full pass follows.
    """

    __slots__ = (
        "bytes",
        "consumers",
        "dead_lettered",
        "delayed",
        "dequeued",
        "destination",
        "enqueued",
        "exclusive",
        "expired",
        "groups",
        "in_flight",
        "lanes",
        "pending",
        "ready",
        "rr",
        "shared",
        "stable",
        "tail",
        "tombstones",
        "woken",
    )

    def __init__(self, destination: str, shared: bool) -> None:
        self.destination = destination
        self.shared = shared
        self.lanes: list[deque[int]] = [deque() for _ in range(PRIORITY_LEVELS)]
        self.ready: dict[int, Message] = {}
        # NACKed messages waiting out their redelivery delay: token -> (due, message).
        self.delayed: dict[int, tuple[int, Message]] = {}
        self.tombstones = 0
        # Ready messages paged out behind the head, in arrival order (raftmq.core.paging).
        self.tail: Tail | None = None
        self.consumers: list[Subscription] = []
        self.rr = 0  # index in `consumers` of the next one to try
        self.exclusive: Subscription | None = None
        self.groups: dict[str, Subscription] = {}
        self.stable = True
        self.woken: list[Subscription] = []
        self.pending = False  # queued for a dispatch pass in the current apply
        self.in_flight = 0
        self.enqueued = 0
        self.dequeued = 0
        self.expired = 0
        self.dead_lettered = 0
        self.bytes = 0  # body bytes of the messages it holds (ready, paged, in flight, held back)

    # -- messages --------------------------------------------------------------------------

    @property
    def depth(self) -> int:
        """Ready messages: in the head and paged."""
        tail = self.tail
        return len(self.ready) if tail is None else len(self.ready) + tail.count

    def push_back(self, token: int, message: Message) -> None:
        self.lanes[message.priority].append(token)
        self.ready[token] = message

    def push_front(self, token: int, message: Message) -> None:
        self.lanes[message.priority].appendleft(token)
        self.ready[token] = message

    def maybe_compact(self) -> None:
        if self.tombstones > len(self.ready) + TOMBSTONE_SLACK:
            ready = self.ready
            self.lanes = [deque(token for token in lane if token in ready) for lane in self.lanes]
            self.tombstones = 0

    # -- consumers -------------------------------------------------------------------------

    def add_consumer(self, sub: Subscription) -> None:
        self.consumers.append(sub)
        if self.shared and sub.exclusive and self.exclusive is None:
            self.exclusive = sub

    def remove_consumer(self, sub: Subscription) -> None:
        """Forget `sub`; clears `stable` when that frees messages for the others (its groups,
        its exclusivity)."""
        if sub in self.woken:
            self.woken.remove(sub)
        index = self.consumers.index(sub)
        del self.consumers[index]
        if index < self.rr:
            self.rr -= 1
        if self.rr >= len(self.consumers):
            self.rr = 0
        if self.exclusive is sub:
            self.exclusive = next((other for other in self.consumers if other.exclusive), None)
            self.stable = False
        if sub.groups:
            for group in sub.groups:
                del self.groups[group]
            sub.groups.clear()
            self.stable = False

    def pick(self, message: Message) -> Subscription | NoRoom | None:
        """The consumer that gets `message` now; None when it has to wait; NO_ROOM when no
        consumer has room for anything."""
        if not self.shared:
            sub = self.consumers[0]
            return sub if sub.has_room else NO_ROOM
        exclusive = self.exclusive
        if exclusive is not None:
            if not exclusive.has_room:
                return NO_ROOM
            if exclusive.selector is not None and not exclusive.selector.matches(selector_headers(message)):
                return None
            return exclusive
        group = message.group
        if group is not None:
            owner = self.groups.get(group)
            if owner is not None:
                if owner.has_room and (
                    owner.selector is None or owner.selector.matches(selector_headers(message))
                ):
                    return owner
                return None
        return self._first_taker(message, self.consumers, self.rr, True)

    def pick_among(self, message: Message, candidates: list[Subscription]) -> Subscription | NoRoom | None:
        """Like `pick`, when only `candidates` may have become able to take a ready message."""
        if not self.shared:
            return self.pick(message)
        for sub in candidates:
            if sub.has_room:
                break
        else:
            return NO_ROOM  # the others could take nothing before, and still cannot
        exclusive = self.exclusive
        if exclusive is not None:
            return self.pick(message) if exclusive in candidates else NO_ROOM
        group = message.group
        if group is not None:
            owner = self.groups.get(group)
            if owner is not None:
                return self.pick(message) if owner in candidates else None
        return self._first_taker(message, candidates, 0, False)

    def _first_taker(self, message: Message, subs: list[Subscription], start: int,
                     rotate: bool) -> Subscription | NoRoom | None:
        """The first of `subs` from `start` on (round the end) with room whose selector takes
        `message`, its group sticking to it; None when some had room but none took it, NO_ROOM
        when none had room. `rotate`: the round robin goes on after it (`rr`)."""
        count = len(subs)
        index = start
        headers = None
        any_room = False
        for _ in range(count):
            sub = subs[index]
            index += 1
            if index == count:
                index = 0
            if sub.has_room:
                any_room = True
                if sub.selector is not None:
                    if headers is None:
                        headers = selector_headers(message)
                    if not sub.selector.matches(headers):
                        continue
                if rotate:
                    self.rr = index
                group = message.group
                if group is not None:
                    self.groups[group] = sub
                    sub.groups[group] = None
                return sub
        return None if any_room else NO_ROOM


class Topic:
    """A topic's subscriptions (durable ones too, active or not) in subscription order, and
    counters that outlive the subscriptions that ended."""

    __slots__ = ("destination", "published", "retired", "subs")

    def __init__(self, destination: str) -> None:
        self.destination = destination
        self.subs: dict[Subscription, None] = {}
        self.published = 0
        # Counters of subscription stores that are gone, so the topic's totals never go back.
        self.retired = {"dequeued": 0, "expired": 0, "dead_lettered": 0, "discarded": 0}

    def retire(self, store: Store, discarded: int) -> None:
        retired = self.retired
        retired["dequeued"] += store.dequeued
        retired["expired"] += store.expired
        retired["dead_lettered"] += store.dead_lettered
        retired["discarded"] += discarded


class Share:
    """A shared subscription (raftmq.core.shares): `anchor`, an inactive subscription of the
    topic, copies what it gets into the share's queue, whose consumers are the sessions that
    share it. `holders`: who keeps the share, each with its ack mode (a live session's id, or
    the name of a session its client keeps); `members`: each consumer and the holder it stands for."""

    __slots__ = ("anchor", "destination", "group", "holders", "members", "queue")

    def __init__(self, group: str, destination: str, queue: str, anchor: Subscription) -> None:
        self.group = group
        self.destination = destination
        self.queue = queue
        self.anchor = anchor
        self.holders: dict[str, str] = {}
        self.members: dict[Subscription, str] = {}


class Lifetime:
    """How long what an MQTT client keeps lives once session `session` ends (raftmq.core.lifetimes):
    `after_ms` (-1: until the client ends it); `due` once it is counting (-1 before)."""

    __slots__ = ("after_ms", "due", "session")

    def __init__(self, session: str, after_ms: int, due: int = -1) -> None:
        self.session = session
        self.after_ms = after_ms
        self.due = due
