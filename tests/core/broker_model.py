"""The reference model the hypothesis machine of test_broker_stateful.py checks the broker
core against.

It does not re-implement dispatch (who gets which message when); it keeps the facts every
dispatch must respect, and `Model.on_deliver` checks each Deliver effect against them: which
copies are ready in which store, in flight with which subscription, or gone (acked, discarded
with a subscription, moved to the DLQ or the expiry queue), each exactly once; a delivery
takes a ready, unexpired copy, with a redelivered flag and count that match its history,
within the prefetch, respecting exclusive consumers, message groups and selectors; first
deliveries from one store come in send order.

A ready copy past its expiry is "in limbo" (in its store or already in the expiry queue) until
the next Tick settles it; a topic subscription dropped with limbo copies leaves them
"ambiguous" (moved or discarded).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from raftmq.core.config import CoreConfig
from raftmq.core.effects import Deliver

CONFIG = CoreConfig(broker_name="m", max_delivery_count=3, dedup_cache_size=4, default_prefetch=3)
QUEUES = ("/queue/q1", "/queue/q2")
TOPIC = "/topic/t"
DLQ = CONFIG.dead_letter_queue
EXPIRY = CONFIG.expiry_queue
SESSIONS = ("a", "b", "c")
TRANSACTIONS = ("t1", "t2")
RED = "color = 'red'"  # the one selector the machine uses


@dataclass(eq=False)
class Copy:
    """One stored copy of a message (a topic send makes one per subscription)."""

    message_id: str
    seq: int
    priority: int
    expires: int
    group: str | None
    red: bool  # header color:red (else blue); the only selector here is RED
    count: int = 0  # deliveries so far

    def moved(self) -> Copy:
        """The copy the DLQ or the expiry queue gets."""
        return Copy(self.message_id, self.seq, self.priority, 0, self.group, self.red)


@dataclass(eq=False)
class Pool:
    """The model of one store: a queue or a topic subscription's private store."""

    destination: str
    fifo: bool  # first deliveries must come in send order (not for DLQ / expiry copies)
    shared: bool = True  # a queue (False: a topic subscription's own store)
    ready: list[Copy] = field(default_factory=list)
    consumers: list[MSub] = field(default_factory=list)
    groups: dict[str, MSub] = field(default_factory=dict)  # message group -> owning consumer
    # (priority, group, color) -> seq of the last first delivery
    last_first: dict[tuple, int] = field(default_factory=dict)

    def eligible(self, copy: Copy) -> list[MSub]:
        """The consumers that may take `copy` (room aside)."""
        if not self.shared:
            return self.consumers
        exclusives = [s for s in self.consumers if s.exclusive]
        owner = self.groups.get(copy.group) if copy.group is not None else None
        if exclusives:
            candidates = exclusives[:1]
        elif owner is not None:
            candidates = [owner]
        else:
            candidates = self.consumers
        return [s for s in candidates if not s.selector or copy.red]

    def remove_consumer(self, sub: MSub) -> None:
        self.consumers.remove(sub)
        self.groups = {group: owner for group, owner in self.groups.items() if owner is not sub}


@dataclass(eq=False)
class MSub:
    session: str | None
    sub_id: str
    destination: str
    ack: str
    prefetch: int
    exclusive: bool
    durable: str | None
    pool: Pool
    selector: bool = False  # RED
    in_flight: dict[str, Copy] = field(default_factory=dict)  # ack id -> copy, in delivery order

    def has_room(self) -> bool:
        return self.ack == "auto" or len(self.in_flight) < self.prefetch


@dataclass
class MSession:
    subs: dict[str, MSub] = field(default_factory=dict)
    transactions: dict[str, list[tuple]] = field(default_factory=dict)


class Model:
    def __init__(self) -> None:
        self.now = 1_000
        self.seq = 0
        self.dedup: deque[tuple[str, str]] = deque()
        self.sessions: dict[str, MSession] = {}
        self.pools = {name: Pool(name, fifo=name in QUEUES) for name in (*QUEUES, DLQ, EXPIRY)}
        self.topic_subs: list[MSub] = []
        self.durables: dict[str, MSub] = {}
        # Counters per destination, as the broker's stats name them.
        self.enqueued: dict[str, int] = {}  # expiry queue: left to the broker (limbo)
        self.dequeued: dict[str, int] = {}
        self.expired: dict[str, int] = {}
        self.dead: dict[str, int] = {}
        self.discarded = 0
        # Expired copies of a topic subscription that was dropped before a Tick: the broker
        # may have moved them to the expiry queue already, or discarded them with the rest.
        self.ambiguous: list[Copy] = []

    # -- helpers -------------------------------------------------------------------------

    def bump(self, counter: dict[str, int], destination: str, by: int = 1) -> None:
        counter[destination] = counter.get(destination, 0) + by

    def limbo(self, copy: Copy) -> bool:
        return 0 < copy.expires <= self.now

    def all_pools(self) -> list[Pool]:
        return list(self.pools.values()) + [sub.pool for sub in self.topic_subs]

    def deliveries(self, session: MSession) -> list[tuple[str, MSub, Copy]]:
        found = [(ack_id, sub, copy) for sub in session.subs.values() for ack_id, copy in sub.in_flight.items()]
        return sorted(found, key=lambda entry: int(entry[0]))

    def find(self, session: MSession, ack_id: str | None, message_id: str | None, sub_id: str | None):
        for entry in self.deliveries(session):
            if ack_id is not None:
                if entry[0] == ack_id:
                    return entry
            elif (message_id is not None and entry[2].message_id == message_id
                  and (sub_id is None or entry[1].sub_id == sub_id)):
                return entry
        return None

    # -- semantics ---------------------------------------------------------------------

    def publish(self, destination: str, priority: int, expires: int, dupl_id: str | None, group: str | None,
                red: bool) -> None:
        if dupl_id is not None:
            key = (destination, dupl_id)
            if key in self.dedup:
                return
            self.dedup.append(key)
            if len(self.dedup) > CONFIG.dedup_cache_size:
                self.dedup.popleft()
        self.seq += 1
        message_id = f"{CONFIG.broker_name}-{self.seq}"
        self.bump(self.enqueued, destination)  # a topic counts what was published to it
        if destination == TOPIC:
            for sub in self.topic_subs:
                if red or not sub.selector:
                    sub.pool.ready.append(Copy(message_id, self.seq, priority, expires, group, red))
        else:
            if destination in (DLQ, EXPIRY):
                expires = 0
            self.pools[destination].ready.append(Copy(message_id, self.seq, priority, expires, group, red))

    def move(self, copy: Copy, source: Pool, target: str) -> None:
        self.bump(self.dead if target == DLQ else self.expired, source.destination)
        self.bump(self.enqueued, target)
        self.pools[target].ready.append(copy.moved())

    def give_back(self, pool: Pool, copies: list[Copy]) -> None:
        for copy in copies:
            if copy.count >= CONFIG.max_delivery_count:
                self.move(copy, pool, DLQ)
            else:
                pool.ready.append(copy)

    def subscribe(
        self, session: str, sub_id: str, destination: str, ack: str, prefetch: int, exclusive: bool,
        durable: str | None, selector: bool,
    ) -> None:  # fmt: skip
        """An accepted SUBSCRIBE (a durable one resumes its subscription, or starts afresh)."""
        state = self.sessions[session]
        window = prefetch or CONFIG.default_prefetch
        resumed = self.durables.get(durable) if durable else None
        if resumed is not None and resumed.selector != selector:
            self.drop_topic_subscription(resumed)  # JMS: another selector starts afresh
            resumed = None
        if destination != TOPIC:
            pool = self.pools[destination]
            sub = MSub(session, sub_id, destination, ack, window, exclusive, None, pool, selector)
            pool.consumers.append(sub)
        elif resumed is not None:
            sub = resumed
            sub.session, sub.sub_id, sub.ack, sub.prefetch = session, sub_id, ack, window
            sub.pool.consumers.append(sub)
        else:
            pool = Pool(TOPIC, fifo=True, shared=False)
            sub = MSub(session, sub_id, TOPIC, ack, window, False, durable, pool, selector)
            pool.consumers.append(sub)
            self.topic_subs.append(sub)
            if durable is not None:
                self.durables[durable] = sub
        state.subs[sub_id] = sub

    def settle(self, sub: MSub, ack_id: str, acked: bool) -> None:
        if sub.ack == "client":
            ids = []
            for earlier in sub.in_flight:
                ids.append(earlier)
                if earlier == ack_id:
                    break
        else:
            ids = [ack_id]
        copies = [sub.in_flight.pop(i) for i in ids]
        if acked:
            self.bump(self.dequeued, sub.destination, len(copies))
        else:
            self.give_back(sub.pool, copies)

    def end_subscription(self, session: MSession, sub: MSub, drop_durable: bool) -> None:
        del session.subs[sub.sub_id]
        copies = list(sub.in_flight.values())
        sub.in_flight.clear()
        if sub.destination != TOPIC:
            sub.pool.remove_consumer(sub)
            self.give_back(sub.pool, copies)
        elif sub.durable is not None and not drop_durable:
            sub.session = None
            sub.pool.consumers.clear()
            self.give_back(sub.pool, copies)
        else:
            self.drop_topic_subscription(sub)
            self.discarded += len(copies)

    def drop_topic_subscription(self, sub: MSub) -> None:
        self.topic_subs.remove(sub)
        if sub.durable is not None:
            del self.durables[sub.durable]
        for copy in sub.pool.ready:
            if self.limbo(copy):
                self.ambiguous.append(copy)
            else:
                self.discarded += 1

    def tick(self) -> None:
        for pool in self.all_pools():
            if pool.destination == EXPIRY:
                continue
            for copy in [c for c in pool.ready if self.limbo(c)]:
                pool.ready.remove(copy)
                self.move(copy, pool, EXPIRY)

    def on_deliver(self, effect: Deliver) -> None:
        session = self.sessions.get(effect.session)
        assert session is not None, f"delivery to a closed session: {effect}"
        sub = session.subs.get(effect.sub_id)
        assert sub is not None, f"delivery to an unknown subscription: {effect}"
        assert effect.destination == sub.destination
        pool = sub.pool
        candidates = [
            c for c in pool.ready if c.message_id == effect.message.message_id and c.count == effect.delivery_count - 1
        ]
        if not candidates and pool.destination == EXPIRY:
            # One the broker expired rather than discarded: now we know.
            for copy in self.ambiguous:
                if copy.message_id == effect.message.message_id and effect.delivery_count == 1:
                    self.ambiguous.remove(copy)
                    candidates = [copy.moved()]
                    pool.ready.append(candidates[0])
                    break
        assert candidates, f"delivered a copy that is not ready in its store: {effect}"
        copy = candidates[0]
        assert not self.limbo(copy), f"delivered an expired message: {effect}"
        assert effect.redelivered == (copy.count > 0)
        assert effect.message.delivery_count == effect.delivery_count
        assert effect.message.priority == copy.priority
        assert effect.message.group == copy.group
        assert sub in pool.eligible(copy), f"{effect} broke an exclusive consumer, a group or a selector"
        if pool.shared and copy.group is not None and not any(s.exclusive for s in pool.consumers):
            pool.groups.setdefault(copy.group, sub)
        pool.ready.remove(copy)
        copy.count += 1
        if copy.count == 1 and pool.fifo:
            key = (copy.priority, copy.group, copy.red)
            last = pool.last_first.get(key, 0)
            assert copy.seq > last, f"first deliveries out of send order in {pool.destination}"
            pool.last_first[key] = copy.seq
        if sub.ack == "auto":
            assert effect.ack_id is None
            self.bump(self.dequeued, sub.destination)
        else:
            assert effect.ack_id is not None and len(sub.in_flight) < sub.prefetch, "prefetch exceeded"
            sub.in_flight[effect.ack_id] = copy

    # -- checks --------------------------------------------------------------------------

    def check_stats(self, stats: dict[str, Any]) -> None:
        """The broker's `stats()` agree with the model (limbo and ambiguous copies counted once,
        wherever the broker has them), and nothing deliverable waits while a consumer has room."""
        destinations = stats["destinations"]
        assert stats["sessions"] == len(self.sessions)

        def stat(destination: str, name: str) -> int:
            return destinations.get(destination, {}).get(name, 0)

        limbo_total = 0
        settled_total = 0
        for destination in (*QUEUES, DLQ, EXPIRY, TOPIC):
            pools = [self.pools[destination]] if destination != TOPIC else [s.pool for s in self.topic_subs]
            settled = sum(1 for p in pools for c in p.ready if not self.limbo(c))
            limbo = sum(1 for p in pools for c in p.ready if self.limbo(c))
            limbo_total += limbo
            if destination != EXPIRY:
                settled_total += settled
            in_flight = sum(len(s.in_flight) for p in pools for s in p.consumers)
            assert stat(destination, "in_flight") == in_flight, destination
            assert stat(destination, "dequeued") == self.dequeued.get(destination, 0), destination
            assert stat(destination, "dead_lettered") == self.dead.get(destination, 0), destination
            if destination != EXPIRY:
                assert stat(destination, "enqueued") == self.enqueued.get(destination, 0), destination
            if destination != EXPIRY:
                assert settled <= stat(destination, "depth") <= settled + limbo, destination
        # Limbo copies are in their store or in the expiry queue; ambiguous ones are in the
        # expiry queue or discarded. Either way each is counted exactly once.
        moved_unknown = stat(EXPIRY, "depth") - len(self.pools[EXPIRY].ready)
        discarded_unknown = stat(TOPIC, "discarded") - self.discarded
        assert 0 <= moved_unknown and 0 <= discarded_unknown <= len(self.ambiguous)
        assert sum(stat(d, "expired") for d in destinations) - sum(self.expired.values()) == moved_unknown
        # Nobody sends to the expiry queue here: it stores exactly what expired.
        assert stat(EXPIRY, "enqueued") == sum(stat(d, "expired") for d in destinations) == stats["expiry"]["expired"]
        assert stats["dead_letter"] == {
            "destination": DLQ, "depth": stat(DLQ, "depth"), "dead_lettered": sum(self.dead.values()),
        }
        depth_elsewhere = sum(stat(d, "depth") for d in destinations if d != EXPIRY)
        assert depth_elsewhere + moved_unknown + discarded_unknown == settled_total + limbo_total + len(self.ambiguous)
        # Nothing that could be delivered is left waiting for a consumer with room.
        for pool in self.all_pools():
            for copy in pool.ready:
                if not self.limbo(copy):
                    idle = [s.sub_id for s in pool.eligible(copy) if s.has_room()]
                    assert not idle, f"{pool.destination}: {copy.message_id} waits while {idle} have room"
