"""The broker core's state as one record, and the invariants it must keep.

`Broker` (the commands) and `Dispatcher` (stores and dispatch) both work on one `BrokerState`;
`raftmq.core.snapshot` dumps and loads it. `check_invariants` raises `InvariantViolated` naming
the first broken rule: the stateful model tests and the simulator call it after every command,
so a bug stops loudly at the command that caused it.

The rules, between two commands:
- every record is filed under its own name, and each link has its way back: a session's
  subscriptions and deliveries are its own, a subscription is a consumer of its store exactly
  while its session lives, a durable is in its topic and in `durables`;
- a delivery in flight is known to its session and its subscription (in ack-id order, never
  to an auto-ack one, at most `prefetch` of them), and its message is not also ready;
- every store accounts for its messages (enqueued = dequeued + expired + dead-lettered +
  ready + in flight), counts its tombstones and in-flight deliveries exactly, keeps each ready
  message once in the lane of its priority, and no counter is negative;
- no dispatch pass is left pending, and a store marked `stable` holds no ready message that a
  consumer with room may take;
- group owners, the exclusive consumer and the round-robin position point at live consumers;
- the expiry heap indexes every expiring ready message once, at its expiry, and `expiring`
  counts them; the dedup cache stays within its capacity.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from heapq import heapify
from typing import Any

from raftmq.core.cluster_state import ClusterState
from raftmq.core.commands import Will
from raftmq.core.dedup import DedupCache
from raftmq.core.message import Message, body_size
from raftmq.core.model import Delivery, Lifetime, Session, Share, Store, Subscription, Topic, selector_headers
from raftmq.core.paging import MemoryPages, PageStore, decode_page, earliest_expiry
from raftmq.core.schedule import Job
from raftmq.errors import InvariantViolated


@dataclass(eq=False)
class BrokerState:
    """Everything a broker holds. Snapshots carry all of it but what a load derives again:
    the expiry index and `expiring`, the sessions' ack indexes, the stores' in-flight counts."""

    dedup: DedupCache
    message_seq: int = 0  # message ids
    delivery_seq: int = 0  # ack ids
    entry_seq: int = 0  # store entry tokens (one per arrival in a store)
    sessions: dict[str, Session] = field(default_factory=dict)
    queues: dict[str, Store] = field(default_factory=dict)
    topics: dict[str, Topic] = field(default_factory=dict)
    durables: dict[str, Subscription] = field(default_factory=dict)
    # (expires, token, store) of ready messages that expire; stale entries are skipped.
    expiry_heap: list[tuple[int, int, Store]] = field(default_factory=list)
    expiring: int = 0  # ready messages with an expiry: the live entries of the heap
    cluster: ClusterState = field(default_factory=ClusterState)  # a cluster's state (raftmq.core.cluster_routing)
    jobs: dict[int, Job] = field(default_factory=dict)  # scheduled messages by number (raftmq.core.schedule)
    job_seq: int = 0
    temp_owners: dict[str, str] = field(default_factory=dict)  # token -> session (raftmq.core.temp_owners)
    # (due, token, store) of NACKed messages waiting out their redelivery delay; stale entries skipped.
    redelivery_heap: list[tuple[int, int, Store]] = field(default_factory=list)
    dropped: dict[str, int] = field(default_factory=dict)  # SENDs dropped by address_full_policy DROP
    retained: dict[str, Message] = field(default_factory=dict)  # by topic, bodies as bytes (raftmq.core.retained)
    wills: dict[str, Will] = field(default_factory=dict)  # by session, bodies as bytes (raftmq.core.wills)
    once: dict[str, None] = field(default_factory=dict)  # QoS 2 publications' keys (raftmq.core.exactly_once)
    shares: dict[str, Share] = field(default_factory=dict)  # by queue (raftmq.core.shares)
    share_seq: int = 0  # names the shares' queues
    # MQTT clients' kept state and delayed wills by client key (raftmq.core.lifetimes).
    lifetimes: dict[str, Lifetime] = field(default_factory=dict)
    delayed_wills: dict[str, tuple[int, Will]] = field(default_factory=dict)  # key -> (due, will)
    lifetime_of: dict[str, str] = field(default_factory=dict)  # session -> key (derived)
    # Where paged messages live (raftmq.core.paging): the member's business, not in snapshots.
    pages: PageStore = field(default_factory=MemoryPages)

    def stores(self) -> list[Store]:
        """Every store: the queues' (shares' among them), then each topic subscription's own."""
        return list(self.queues.values()) + [sub.store for topic in self.topics.values() for sub in topic.subs
                                             if not sub.store.shared]

    def subscriptions(self) -> list[Subscription]:
        """Every subscription that consumes: active ones (by session; a wildcard queue
        subscription's children in its place), then inactive durable ones."""
        subs = [consumer for session in self.sessions.values() for sub in session.subs.values()
                for consumer in sub.consumers()]
        seen = {id(sub) for sub in subs}
        subs += [sub for topic in self.topics.values() for sub in topic.subs if id(sub) not in seen]
        return subs

    def body_refs(self) -> Iterator[Any]:
        """Every message body the state holds, as stored (bytes, or in a group the body
        journal's reference), in the order `raftmq.core.snapshot.body_refs` finds them in a
        snapshot of this state: ready messages of the queues; each subscription's in-flight
        then ready messages; sends inside open transactions; scheduled messages; retained ones;
        wills."""
        for store in self.queues.values():
            yield from _ready_bodies(store)
        for sub in self.subscriptions():
            for delivery in sub.in_flight.values():
                yield delivery.message.body
            if not sub.store.shared:
                yield from _ready_bodies(sub.store)
        for session in self.sessions.values():
            for ops in session.transactions.values():
                for op in ops:
                    if op[0] == "send":
                        yield op[3]
        for job in self.jobs.values():
            yield job.body
        for message in self.retained.values():
            yield message.body
        for will in self.wills.values():
            yield will.body
        for _due, will in self.delayed_wills.values():
            yield will.body

    def rebuild_expiry_index(self) -> None:
        """The expiry heap from the ready messages (after a load, or to drop stale entries)."""
        heap = [(m.expires, token, store) for store in self.stores() for token, m in store.ready.items() if m.expires]
        heapify(heap)
        self.expiry_heap = heap
        self.expiring = len(heap)

    def check_invariants(self) -> None:
        """Raise `InvariantViolated` unless the state is consistent. O(state): for tests and
        the simulator, not the hot path. Between two commands, that is: a command's dispatch
        passes have all run."""
        _require(min(self.message_seq, self.delivery_seq, self.entry_seq) >= 0, "a negative id counter")
        _require(len(self.dedup) <= max(self.dedup.capacity, 0),
                 f"{len(self.dedup)} duplicate-detection ids remembered, capacity {self.dedup.capacity}")
        _check_sessions(self)
        _check_subscriptions(self)
        _check_stores(self)
        _check_topics(self)
        _check_shares(self)
        _require(self.lifetime_of == {life.session: key for key, life in self.lifetimes.items()
                                      if life.due < 0 and life.session in self.sessions},
                 "the sessions' lifetimes index is not what the lifetimes say")
        _check_expiry(self)
        _check_waiting(self)


def _ready_bodies(store: Store) -> Iterator[Any]:
    """The ready messages' bodies, then those waiting out a redelivery delay."""
    ready = store.ready
    for lane in store.lanes:
        for token in lane:
            message = ready.get(token)
            if message is not None:
                yield message.body
    for _due, message in store.delayed.values():
        yield message.body
    if store.tail is not None:
        for message in store.tail.messages():
            yield message.body


def _require(condition: bool, broken: str) -> None:
    if not condition:
        raise InvariantViolated(broken)


def _check_sessions(state: BrokerState) -> None:
    for session_id, session in state.sessions.items():
        _require(session.session_id == session_id, f"session {session.session_id} filed as {session_id}")
        for sub_id, sub in session.subs.items():
            _require(sub.sub_id == sub_id and sub.session is session,
                     f"subscription {sub_id} of {session_id} is not its own")
        last = 0
        for ack_id, delivery in session.deliveries.items():
            sub = delivery.sub
            _require(delivery.ack_id == ack_id == str(delivery.seq), f"delivery {delivery.ack_id} filed as {ack_id}")
            _require(delivery.seq > last, f"{session_id}: delivery {ack_id} out of delivery order")
            last = delivery.seq
            _require(sub.session is session and session.subs.get(sub.sub_id) is (sub.parent or sub),
                     f"delivery {ack_id} of {session_id} belongs to a subscription the session does not have")
            _require(sub.in_flight.get(ack_id) is delivery, f"delivery {ack_id} missing from its subscription")
            _require(delivery.seq <= state.delivery_seq, f"ack id {ack_id} past the last one issued")
            _require(delivery.message.delivery_count >= 1, f"delivery {ack_id} of a message never delivered")
        _check_message_index(session)


def _check_message_index(session: Session) -> None:
    """The STOMP 1.0/1.1 index: each message id in flight maps to its earliest delivery, and
    `shadowed` counts the later ones."""
    index = session.by_message
    if index is None:
        return
    earliest: dict[str, Delivery] = {}
    for delivery in session.deliveries.values():
        earliest.setdefault(delivery.message.message_id, delivery)
    _require(index == earliest, f"{session.session_id}: the message-id index is not the earliest delivery of each id")
    _require(session.shadowed == len(session.deliveries) - len(index),
             f"{session.session_id}: {session.shadowed} deliveries counted as shadowed")


def _check_subscriptions(state: BrokerState) -> None:
    for sub in state.subscriptions():
        name = sub.sub_id
        session = sub.session
        if session is None:
            _require(is_anchor(state, sub) or (sub.durable_name is not None and not sub.store.shared),
                     f"inactive subscription {name} is no durable")
        else:
            _require(state.sessions.get(session.session_id) is session, f"subscription {name} of a session that ended")
            _require(sub.store.consumers.count(sub) == 1,
                     f"active subscription {name} is not one of its store's consumers")
        if sub.store.shared and not is_anchor(state, sub):
            _require(state.queues.get(sub.destination) is sub.store, f"subscription {name} consumes another queue")
        family = sub.parent.consumers() if sub.parent is not None else [sub]
        held = sum(len(member.in_flight) for member in family)
        _require(sub.auto or held <= sub.prefetch, f"{name}: {held} deliveries in flight, prefetch {sub.prefetch}")
        if sub.parent is not None:
            _require(sub.parent.children is not None and sub.parent.children.get(sub.destination) is sub
                     and sub.session is sub.parent.session, f"{name}: a wildcard subscription's child it does not know")
        last = 0
        for ack_id, delivery in sub.in_flight.items():
            _require(not sub.auto, f"auto-ack subscription {name} holds a delivery")
            _require(delivery.sub is sub, f"delivery {ack_id} filed under another subscription")
            _require(delivery.seq > last, f"{name}: delivery {ack_id} out of delivery order")
            last = delivery.seq
            _require(session is not None and session.deliveries.get(ack_id) is delivery,
                     f"in-flight delivery {ack_id} of {name} unknown to any session")
        for group in sub.groups:
            _require(sub.store.groups.get(group) is sub, f"{name} owns group {group} its queue gives another")


def _check_stores(state: BrokerState) -> None:
    in_flight: dict[int, int] = {}
    held: dict[int, set[int]] = {}  # store -> ids of the messages in flight from it
    flying_bytes: dict[int, int] = {}  # store -> body bytes in flight from it
    for sub in state.subscriptions():
        key = id(sub.store)
        in_flight[key] = in_flight.get(key, 0) + len(sub.in_flight)
        held.setdefault(key, set()).update(id(d.message) for d in sub.in_flight.values())
        flying_bytes[key] = flying_bytes.get(key, 0) + sum(body_size(d.message.body) for d in sub.in_flight.values())
    for store in state.stores():
        name = store.destination
        counters = (store.in_flight, store.enqueued, store.dequeued, store.expired, store.dead_lettered,
                    store.tombstones)
        _require(min(counters) >= 0, f"{name}: a negative counter {counters}")
        _require(store.in_flight == in_flight.get(id(store), 0),
                 f"{name}: {store.in_flight} counted in flight, {in_flight.get(id(store), 0)} held by subscriptions")
        ready = {id(m) for m in store.ready.values()}
        _require(len(ready) == len(store.ready), f"{name}: one message ready twice")
        _require(not ready & held.get(id(store), set()), f"{name}: a message both ready and in flight")
        tokens = [token for lane in store.lanes for token in lane]
        _require(len(set(tokens)) == len(tokens), f"{name}: a token in the priority lanes twice")
        _require(set(store.ready) <= set(tokens), f"{name}: a ready message in no priority lane")
        _require(store.tombstones == len(tokens) - len(store.ready),
                 f"{name}: {store.tombstones} tombstones counted, {len(tokens) - len(store.ready)} in the lanes")
        for lane, priority in zip(store.lanes, range(len(store.lanes)), strict=True):
            for token in lane:
                message = store.ready.get(token)
                _require(message is None or message.priority == priority, f"{name}: message in the wrong lane")
                _require(token <= state.entry_seq, f"{name}: token {token} past the last one issued")
        gone = store.dequeued + store.expired + store.dead_lettered
        paged = store.depth - len(store.ready)
        _require(store.enqueued == gone + len(store.ready) + paged + store.in_flight + len(store.delayed),
                 f"{name}: {store.enqueued} enqueued but {gone} gone, {len(store.ready)} ready, {paged} paged, "
                 f"{store.in_flight} in flight, {len(store.delayed)} delayed")
        _check_tail(store)
        holding = [*store.ready.values(), *(m for _, m in store.delayed.values())]
        size = sum(body_size(m.body) for m in holding) + flying_bytes.get(id(store), 0)
        size += store.tail.bytes if store.tail is not None else 0
        _require(store.bytes == size, f"{name}: {store.bytes} bytes counted, its messages hold {size}")
        _require(not set(store.delayed) & set(store.ready), f"{name}: a token both ready and delayed")
        _require(not store.pending and not store.woken, f"{name}: a dispatch pass left for after the command")
        _check_consumers(store)
        if store.stable:
            _check_nothing_left_behind(store)


def _check_tail(store: Store) -> None:
    """A tail is never empty (an empty one is None), counts its pages and open list, and each
    page knows its earliest expiry."""
    tail = store.tail
    if tail is None:
        return
    name = store.destination
    _require(tail.count > 0, f"{name}: an empty tail kept")
    _require(tail.count == sum(page.count for page in tail.pages) + len(tail.open),
             f"{name}: the tail miscounts its messages")
    for page in tail.pages:
        _require(page.count > 0, f"{name}: an empty page kept")
        messages = decode_page(tail.store.get(page.handle))
        _require(len(messages) == page.count, f"{name}: a page of {len(messages)} messages counted as {page.count}")
        _require(page.min_expires == earliest_expiry(messages), f"{name}: a page with the wrong earliest expiry")
        _require(page.bytes == sum(body_size(m.body) for m in messages), f"{name}: a page miscounts its bytes")
    size = sum(page.bytes for page in tail.pages) + sum(body_size(m.body) for m in tail.open)
    _require(tail.bytes == size, f"{name}: the tail counts {tail.bytes} bytes, its pages and open list hold {size}")


def _check_consumers(store: Store) -> None:
    name = store.destination
    _require(len(set(map(id, store.consumers))) == len(store.consumers), f"{name}: a consumer listed twice")
    _require(0 <= store.rr < max(1, len(store.consumers)), f"{name}: round-robin position {store.rr} out of range")
    for sub in store.consumers:
        _require(sub.store is store, f"{name}: consumer {sub.sub_id} of another store")
        _require(sub.session is not None and sub.session.subs.get(sub.sub_id) is (sub.parent or sub),
                 f"{name}: consumer {sub.sub_id} without a session")
    exclusive = next((sub for sub in store.consumers if sub.exclusive), None) if store.shared else None
    _require(store.exclusive is exclusive, f"{name}: the exclusive consumer is not the first exclusive one")
    for group, owner in store.groups.items():
        _require(owner in store.consumers and group in owner.groups, f"{name}: group {group} owned by no consumer")


def _check_nothing_left_behind(store: Store) -> None:
    """A `stable` store holds no ready message that a consumer with room may take: the pass
    that made it stable would have delivered it (or expired it, had its time come). The rules
    are `Store.pick`'s, without its side effects (round-robin position, group ownership)."""
    takers = [sub for sub in store.consumers if sub.has_room]
    if store.exclusive is not None:
        takers = [store.exclusive] if store.exclusive.has_room else []
    if not takers:
        return
    for message in store.ready.values():
        candidates = takers
        owner = store.groups.get(message.group) if message.group is not None else None
        if owner is not None:
            candidates = [owner] if owner in takers else []
        headers = selector_headers(message)
        for sub in candidates:
            # A topic subscription's copies passed its selector on the way in.
            if not store.shared or sub.selector is None or sub.selector.matches(headers):
                raise InvariantViolated(
                    f"{store.destination}: stable, yet {sub.sub_id} has room for ready message {message.message_id}"
                )


def is_anchor(state: BrokerState, sub: Subscription) -> bool:
    """Is `sub` a shared subscription's anchor (raftmq.core.shares), copying into its queue?"""
    share = state.shares.get(sub.store.destination) if sub.store.shared else None
    return share is not None and share.anchor is sub


def _check_shares(state: BrokerState) -> None:
    for queue, share in state.shares.items():
        store = state.queues.get(queue)
        _require(store is not None and share.queue == queue and share.anchor.store is store,
                 f"share {queue}: its anchor copies into another queue")
        topic = state.topics.get(share.destination)
        _require(topic is not None and share.anchor in topic.subs and share.anchor.session is None,
                 f"share {queue}: its anchor is not an inactive subscription of {share.destination}")
        _require(bool(share.holders), f"share {queue}: kept with no holder")
        assert store is not None
        _require(list(share.members) == [sub for sub in store.consumers if sub in share.members]
                 and len(share.members) == len(store.consumers),
                 f"share {queue}: its consumers are not its members")
        for member, holder in share.members.items():
            _require(holder in share.holders, f"share {queue}: {member.sub_id} stands for no holder")


def _check_topics(state: BrokerState) -> None:
    for name, topic in state.topics.items():
        _require(topic.destination == name, f"topic {topic.destination} filed as {name}")
        _require(min(topic.published, *topic.retired.values()) >= 0, f"{name}: a negative counter")
        for sub in topic.subs:
            _require((not sub.store.shared or is_anchor(state, sub)) and sub.destination == name,
                     f"{name}: subscription {sub.sub_id} misfiled")
            if sub.store.shared:
                continue
            _require(len(sub.store.consumers) == (0 if sub.session is None else 1),
                     f"{name}: subscription {sub.sub_id} consumes {len(sub.store.consumers)} times")
            _require(sub.durable_name is None or state.durables.get(sub.durable_name) is sub,
                     f"{name}: durable subscription {sub.durable_name} missing from the durables")
    for durable, sub in state.durables.items():
        _require(sub.durable_name == durable, f"durable {durable} names itself {sub.durable_name}")
        owner = state.topics.get(sub.destination)
        _require(owner is not None and sub in owner.subs, f"durable {durable} belongs to no topic")


def _check_expiry(state: BrokerState) -> None:
    """Each ready message that expires has one live entry in the heap, with its expiry; other
    entries are stale (their token left the store) and are skipped when popped."""
    live: dict[tuple[int, int], int] = {}
    for expires, token, store in state.expiry_heap:
        message = store.ready.get(token)
        if message is not None:
            _require((token, id(store)) not in live, f"{store.destination}: token {token} indexed twice")
            _require(message.expires == expires, f"{store.destination}: token {token} indexed at another expiry")
            live[(token, id(store))] = expires
    for store in state.stores():
        for token, message in store.ready.items():
            _require(not message.expires or (token, id(store)) in live,
                     f"{store.destination}: expiring message {message.message_id} missing from the expiry heap")
    _require(state.expiring == len(live),
             f"{state.expiring} messages counted as expiring, {len(live)} ready ones expire")


def _check_waiting(state: BrokerState) -> None:
    """Every message waiting out a redelivery delay is in the redelivery index at its due
    time; every scheduled job is numbered below the counter and filed under its number."""
    indexed = {(due, token, id(store)) for due, token, store in state.redelivery_heap}
    for store in state.stores():
        for token, (due, message) in store.delayed.items():
            _require((due, token, id(store)) in indexed,
                     f"{store.destination}: delayed message {message.message_id} not indexed")
            _require(token <= state.entry_seq, f"{store.destination}: delayed token {token} past the last one issued")
    for owner, session_id in state.temp_owners.items():
        session = state.sessions.get(session_id)
        _require(session is not None and bool(session.temps),
                 f"temporary destinations of {session_id}, a session that ended")
        _require(session is None or all(owner in name for name in session.temps),
                 f"{session_id} owns a temporary name of another token")
    for seq, job in state.jobs.items():
        _require(job.seq == seq and 0 < seq <= state.job_seq, f"scheduled job {job.seq} filed as {seq}")
