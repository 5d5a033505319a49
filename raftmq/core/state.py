"""The broker core's state as one record, and the invariants it must keep.

`Broker` (the commands) and `Dispatcher` (stores and dispatch) both work on one `BrokerState`;
`raftmq.core.snapshot` dumps and loads it. `check_invariants` raises `InvariantViolated` naming
the first broken rule: the stateful model tests and the simulator call it after every command,
so a bug stops loudly at the command that caused it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from heapq import heapify

from raftmq.core.dedup import DedupCache
from raftmq.core.model import Session, Store, Subscription, Topic
from raftmq.errors import InvariantViolated


@dataclass(eq=False)
class BrokerState:
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

    def stores(self) -> list[Store]:
        """Every store: the queues', then each topic subscription's own."""
        return list(self.queues.values()) + [sub.store for topic in self.topics.values() for sub in topic.subs]

    def subscriptions(self) -> list[Subscription]:
        """Every subscription: active ones (by session), then inactive durable ones."""
        subs = [sub for session in self.sessions.values() for sub in session.subs.values()]
        seen = {id(sub) for sub in subs}
        subs += [sub for topic in self.topics.values() for sub in topic.subs if id(sub) not in seen]
        return subs

    def rebuild_expiry_index(self) -> None:
        """The expiry heap from the ready messages (after a load, or to drop stale entries)."""
        heap = [(m.expires, token, store) for store in self.stores() for token, m in store.ready.items() if m.expires]
        heapify(heap)
        self.expiry_heap = heap
        self.expiring = len(heap)

    def check_invariants(self) -> None:
        """Raise `InvariantViolated` unless the state is consistent. O(state): for tests and
        the simulator, not the hot path."""
        _check_sessions(self)
        _check_stores(self)
        _check_topics(self)
        expiring = sum(1 for store in self.stores() for m in store.ready.values() if m.expires)
        _require(self.expiring == expiring, f"{self.expiring} messages counted as expiring, {expiring} ready ones expire")
        for _expires, token, store in self.expiry_heap:
            _require(token <= self.entry_seq, f"expiry entry with token {token} past the last token {self.entry_seq}")
        _require(min(self.message_seq, self.delivery_seq, self.entry_seq) >= 0, "a negative id counter")


def _require(condition: bool, broken: str) -> None:
    if not condition:
        raise InvariantViolated(broken)


def _check_sessions(state: BrokerState) -> None:
    for session_id, session in state.sessions.items():
        _require(session.session_id == session_id, f"session {session.session_id} filed as {session_id}")
        for sub_id, sub in session.subs.items():
            _require(sub.sub_id == sub_id and sub.session is session, f"subscription {sub_id} of {session_id} is not its own")
        for ack_id, delivery in session.deliveries.items():
            sub = delivery.sub
            _require(delivery.ack_id == ack_id, f"delivery {delivery.ack_id} filed as {ack_id}")
            _require(sub.session is session and session.subs.get(sub.sub_id) is sub,
                     f"delivery {ack_id} of {session_id} belongs to a subscription the session does not have")
            _require(sub.in_flight.get(ack_id) is delivery, f"delivery {ack_id} missing from its subscription")
            _require(int(ack_id) <= state.delivery_seq, f"ack id {ack_id} past the last one issued")
    for sub in state.subscriptions():
        for ack_id, delivery in sub.in_flight.items():
            _require(not sub.auto, f"auto-ack subscription {sub.sub_id} holds a delivery")
            _require(delivery.sub is sub, f"delivery {ack_id} filed under another subscription")
            _require(sub.session is not None and sub.session.deliveries.get(ack_id) is delivery,
                     f"in-flight delivery {ack_id} of {sub.sub_id} unknown to any session")


def _check_stores(state: BrokerState) -> None:
    in_flight: dict[int, int] = {}
    held: dict[int, set[int]] = {}  # store -> ids of the messages in flight from it
    for sub in state.subscriptions():
        key = id(sub.store)
        in_flight[key] = in_flight.get(key, 0) + len(sub.in_flight)
        held.setdefault(key, set()).update(id(d.message) for d in sub.in_flight.values())
    for store in state.stores():
        name = store.destination
        counters = (store.in_flight, store.enqueued, store.dequeued, store.expired, store.dead_lettered, store.tombstones)
        _require(min(counters) >= 0, f"{name}: a negative counter {counters}")
        _require(store.in_flight == in_flight.get(id(store), 0),
                 f"{name}: {store.in_flight} counted in flight, {in_flight.get(id(store), 0)} held by subscriptions")
        ready = {id(m) for m in store.ready.values()}
        _require(len(ready) == len(store.ready), f"{name}: one message ready twice")
        _require(not ready & held.get(id(store), set()), f"{name}: a message both ready and in flight")
        tokens = [token for lane in store.lanes for token in lane]
        _require(set(store.ready) <= set(tokens), f"{name}: a ready message in no priority lane")
        for lane, priority in zip(store.lanes, range(len(store.lanes)), strict=True):
            for token in lane:
                message = store.ready.get(token)
                _require(message is None or message.priority == priority, f"{name}: message in the wrong lane")
        for sub in store.consumers:
            _require(sub.store is store, f"{name}: consumer {sub.sub_id} of another store")
            _require(sub.session is not None, f"{name}: consumer {sub.sub_id} without a session")


def _check_topics(state: BrokerState) -> None:
    for name, topic in state.topics.items():
        _require(topic.destination == name, f"topic {topic.destination} filed as {name}")
        for sub in topic.subs:
            _require(not sub.store.shared and sub.destination == name, f"{name}: subscription {sub.sub_id} misfiled")
            _require(len(sub.store.consumers) == (0 if sub.session is None else 1),
                     f"{name}: subscription {sub.sub_id} consumes {len(sub.store.consumers)} times")
    for durable, sub in state.durables.items():
        _require(sub.durable_name == durable, f"durable {durable} names itself {sub.durable_name}")
        owner = state.topics.get(sub.destination)
        _require(owner is not None and sub in owner.subs, f"durable {durable} belongs to no topic")
