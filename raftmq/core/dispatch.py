"""Stores and dispatch: how messages are published into stores, leave them for consumers,
are settled or come back, expire or die. `Broker` composes one, and adds sessions,
subscriptions and the commands. The stores' counters (enqueued, in flight, dequeued, expired,
dead-lettered) and the expiring count change here only.

A dispatch pass runs only on the stores a command touched (`mark` / `wake` queue them; the
passes run before the command's receipt). Expiry is indexed by a heap of (expires, token,
store) for the ready messages that expire, so a Tick costs O(expired · log n), not O(stored).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from heapq import heapify, heappop, heappush
from typing import Any

from raftmq.core import dead_letter as letters
from raftmq.core.config import CoreConfig
from raftmq.core.dead_letter import ORIGINAL_DESTINATION as ORIGINAL_DESTINATION  # read here by spark_audit.replay
from raftmq.core.dispatch_paging import Paging
from raftmq.core.effects import Deliver, Effect
from raftmq.core.message import Message, body_size
from raftmq.core.message_headers import read_headers
from raftmq.core.model import NO_ROOM, PRIORITY_LEVELS, Delivery, Session, Store, Subscription, Topic, selector_headers
from raftmq.core.queue_patterns import QueuePatterns
from raftmq.core.state import BrokerState
from raftmq.core.store_observer import (
    ACKED,
    AUTO_ACKED,
    DEAD_LETTER,
    DEAD_LETTERED,
    DISCARDED,
    EXPIRED,
    EXPIRY,
    PUBLISHED,
    TAKEN,
    StoreObserver,
)
from raftmq.core.temporary import MARK
from raftmq.core.validation import QUEUE_PREFIX, destination_name, is_wildcard
from raftmq.patterns import pattern_matches

# Stale expiry-index entries tolerated (beyond twice the live ones) before the index is rebuilt.
EXPIRY_HEAP_SLACK = 1024


class Dispatcher(Paging):
    """Queue stores, the expiry index, and the dispatch passes, on a `BrokerState`. Pure like
    the rest of the core. `now` and `effects` belong to the command being applied."""

    def __init__(self, state: BrokerState, config: CoreConfig) -> None:
        self.state = state
        self.config = config
        self._scan_limit = max(1, config.selector_scan_limit)
        self.id_prefix = f"{config.broker_name}-"
        self.now = 0  # the current command's time
        self.dirty: list[Store] = []  # stores awaiting a dispatch pass in this apply
        self.effects: list[Effect] = []
        self.quiet = False  # no Deliver for a delivery (Broker.begin_entry); the state is the same
        # Topics whose names are patterns (`/topic/prices.>`): a message published to a topic
        # also goes to the subscriptions of every pattern its name matches. Derived from
        # `state.topics` (`index_patterns` after a restore), never stored.
        self.patterns: dict[str, Topic] = {}
        self.index_patterns()
        self.queue_patterns = QueuePatterns(state)  # wildcard queue subscriptions (derived too)
        # Told of every message entering or leaving a store (raftmq.core.store_observer); None: no one.
        self.observer: StoreObserver | None = None
        # Told of each store's ACKed deliveries (raftmq.core.cluster_routing counts a link's); None: no one.
        self.on_acked: Callable[[Store, list[Delivery]], None] | None = None

    def queue(self, destination: str) -> Store:
        store = self.state.queues.get(destination)
        if store is None:
            store = self.state.queues[destination] = Store(destination, shared=True)
            if self.queue_patterns.parents:
                for child in self.queue_patterns.new_queue(store):
                    store.add_consumer(child)
        return store

    def mint_id(self) -> str:
        """A new message's id: this group's prefix and the next number (the one place ids are made)."""
        state = self.state
        state.message_seq += 1
        return f"{self.id_prefix}{state.message_seq}"

    def topic(self, destination: str) -> Topic:
        topic = self.state.topics.get(destination)
        if topic is None:
            topic = self.state.topics[destination] = Topic(destination)
            if is_wildcard(destination):
                self.patterns[destination] = topic
        return topic

    def _shown(self, sub: Subscription, message: Message) -> str:
        """The destination a MESSAGE names: a pattern subscription's copy names the topic it
        was published to (as ActiveMQ does), any other the subscription's destination."""
        return message.destination if sub.destination in self.patterns else sub.destination

    def index_patterns(self) -> None:
        self.patterns = {name: topic for name, topic in self.state.topics.items() if is_wildcard(name)}

    def subscriptions(self, topic: Topic) -> list[Subscription]:
        """The subscriptions a message published to `topic` goes to: its own, then those of
        every pattern its name matches (in the order the patterns were first subscribed to)."""
        subs = list(topic.subs)
        if self.patterns and MARK not in topic.destination:  # a temporary topic is its owner's alone
            name = destination_name(topic.destination)
            for pattern, wildcard in self.patterns.items():
                if wildcard.subs and pattern_matches(destination_name(pattern), name):
                    subs.extend(wildcard.subs)
        return subs

    def publish(self, destination: str, headers: str, body: object, now: int, *, deduplicated: bool = False,
                delivered: int = 0) -> None:
        """Store a sent message in its queue, or a copy in each matching subscription of its topic
        (none when no one subscribes: topics do not store); a known duplicate is dropped
        (`deduplicated`: the caller checked its `_AMQ_DUPL_ID` already). `delivered`: how often
        a queue message redistributed from another group was delivered there."""
        priority, expires, persistent, group, dupl_id = read_headers(headers)
        if dupl_id is not None and not deduplicated and not self.state.dedup.remember(destination, dupl_id):
            return
        message_id = self.mint_id()
        if destination.startswith(QUEUE_PREFIX):
            if destination == self.config.dead_letter_queue or destination == self.config.expiry_queue:
                expires = 0
            message = Message(message_id, destination, headers, body, priority, expires, now, group, persistent)
            message.delivery_count = delivered
            self.enqueue(self.queue(destination), message)
            return
        topic = self.topic(destination)
        topic.published += 1
        subs = self.subscriptions(topic)
        if not subs:
            return  # topics do not store
        message = Message(message_id, destination, headers, body, priority, expires, now, group, persistent)
        matching_headers = None
        first = True
        for sub in subs:
            if sub.selector is not None:
                if matching_headers is None:
                    matching_headers = selector_headers(message)
                if not sub.selector.matches(matching_headers):
                    continue
            # Each subscription's copy counts its own deliveries.
            copy = message if first else Message(
                message_id, destination, headers, body, priority, expires, now, group, persistent
            )
            first = False
            self.enqueue(sub.store, copy)

    def mark(self, store: Store) -> None:
        """Queue a full dispatch pass of `store` before this command's receipt."""
        store.stable = False
        if not store.pending:
            store.pending = True
            self.dirty.append(store)

    def wake(self, store: Store, sub: Subscription) -> None:
        """`sub` may take messages it could not take before (it has room, or it is new)."""
        if not store.ready and store.tail is None:
            return  # nothing waits; the next message is offered to every consumer anyway
        if store.stable and sub not in store.woken:
            store.woken.append(sub)
        if not store.pending:
            store.pending = True
            self.dirty.append(store)

    def enqueue(self, store: Store, message: Message, origin: str = PUBLISHED) -> None:
        """The one way into a store."""
        if self.observer is not None:
            self.observer.entered(store, message, origin)
        page_size = self.config.page_size
        if page_size and (store.tail is not None or len(store.ready) >= 2 * page_size):
            self._page_out(store, message, page_size)
            return
        self.state.entry_seq = seq = self.state.entry_seq + 1
        token: Any = seq  # boxed once (compiled): the lane, the dict and the dispatch share it
        store.lanes[message.priority].append(token)
        store.ready[token] = message
        store.enqueued += 1
        store.bytes += body_size(message.body)
        if message.expires:
            self._index_expiry(message.expires, token, store)
        if store.stable and not store.pending:
            if store.consumers:
                self._dispatch_newest(store, token, message)
        else:
            # A pass is due anyway; it must see this message in its place among the others.
            self.mark(store)

    def _expire(self, store: Store, message: Message, indexed: bool = True) -> None:
        """`message` (just removed from `store`'s ready messages, or its tail: not `indexed`) has expired."""
        if indexed:
            self.state.expiring -= 1
        if self.observer is not None:
            self.observer.left(store, message, EXPIRED, None)
        store.expired += 1
        store.bytes -= body_size(message.body)
        self._move(message, self.config.expiry_queue, letters.EXPIRED, letters.expired_cause(message), EXPIRY)

    def dead_letter(self, store: Store, message: Message, returned: bool = False) -> None:
        """Move `message` (out of `store`) to the dead-letter queue: NACKed, or `returned`
        unacknowledged by a consumer that left, at its last allowed delivery."""
        if self.observer is not None:
            self.observer.left(store, message, DEAD_LETTERED, None)
        store.dead_lettered += 1
        store.bytes -= body_size(message.body)
        reason, cause = letters.why(store.destination, message, self.config.max_delivery_count, returned)
        self._move(message, self.config.dead_letter_queue, reason, cause, DEAD_LETTER)

    def _move(self, message: Message, target: str, reason: str, cause: str, origin: str) -> None:
        side_queues = (self.config.dead_letter_queue, self.config.expiry_queue)
        self.enqueue(self.queue(target), letters.moved(message, target, side_queues, reason, cause), origin)

    def requeue(self, store: Store, messages: list[Message], may_dead_letter: bool = True,
                returned: bool = False) -> None:
        """Return delivered messages (in delivery order) to the front of `store`, or dead-letter
        them (unless not `may_dead_letter`); `returned`: by a consumer that left (not a NACK)."""
        limit = self.config.max_delivery_count
        back = []
        for message in messages:
            if may_dead_letter and message.delivery_count >= limit:
                self.dead_letter(store, message, returned)
            else:
                back.append(message)
        for message in reversed(back):
            self.state.entry_seq = token = self.state.entry_seq + 1
            store.push_front(token, message)
            if message.expires:
                self._index_expiry(message.expires, token, store)
        self.mark(store)

    def settle(self, delivery: Delivery, acked: bool) -> None:
        """ACK (`acked`) or NACK `delivery` and, for a cumulative subscription, the ones before it."""
        sub = delivery.sub
        sub.last_activity = self.now
        settled = sub.acked_through(delivery)
        session = sub.session
        assert session is not None  # deliveries are found through their session
        parent = sub.parent
        if parent is None:  # the common case: one subscription's deliveries
            in_flight = sub.in_flight
            for done in settled:
                del in_flight[done.ack_id]
                session.remove_delivery(done)
            return self._settled(sub, settled, acked)
        for done in settled:
            del done.sub.in_flight[done.ack_id]
            session.remove_delivery(done)
        by_child: dict[Subscription, list[Delivery]] = {}
        for done in settled:  # a cumulative ACK of a wildcard subscription spans its queues
            by_child.setdefault(done.sub, []).append(done)
        for child, done_here in by_child.items():
            self._settled(child, done_here, acked)
        for child in parent.consumers():  # their shared prefetch has room again
            self.wake(child.store, child)

    def _settled(self, sub: Subscription, settled: list[Delivery], acked: bool) -> None:
        store = sub.store
        store.in_flight -= len(settled)
        if acked:
            if self.observer is not None:
                session = sub.session
                for done in settled:
                    self.observer.left(store, done.message, ACKED, session.session_id if session else None)
            store.dequeued += len(settled)
            if len(settled) == 1:  # the common case, without a generator
                store.bytes -= body_size(settled[0].message.body)
            else:
                store.bytes -= sum(body_size(done.message.body) for done in settled)
            if self.on_acked is not None:
                self.on_acked(store, settled)
            self.wake(store, sub)
        elif self.config.redelivery_delay_ms:
            self.redeliver_later(store, [done.message for done in settled])
            self.wake(store, sub)
        else:
            self.requeue(store, [done.message for done in settled])

    def take_back(self, session: Session, deliveries: list[Delivery]) -> dict[Store, list[Message]]:
        """Cancel `deliveries` (of `session`, in delivery order): their messages by store, in
        that order, for `requeue` (or to count as discarded when the store goes away)."""
        returning: dict[Store, list[Message]] = {}
        for delivery in deliveries:
            sub = delivery.sub
            del sub.in_flight[delivery.ack_id]
            session.remove_delivery(delivery)
            sub.store.in_flight -= 1
            returning.setdefault(sub.store, []).append(delivery.message)
        return returning

    def discard(self, store: Store, taken_back: list[Message] | None = None) -> int:
        """Drop the ready messages of a store that is going away (a topic subscription's), and
        `taken_back` (its deliveries `take_back` cancelled); returns how many there were."""
        discarded = store.depth + len(store.delayed) + (len(taken_back) if taken_back else 0)
        if self.observer is not None:
            paged = store.tail.messages() if store.tail is not None else ()
            held = [*(taken_back or ()), *store.ready.values(), *(m for _due, m in store.delayed.values()), *paged]
            for message in held:
                self.observer.left(store, message, DISCARDED, None)
        store.bytes -= (sum(body_size(m.body) for m in store.ready.values())
                        + sum(body_size(m.body) for _, m in store.delayed.values()))
        if store.tail is not None:
            store.bytes -= store.tail.bytes
            store.tail.drop()
            store.tail = None
        store.delayed = {}  # their redelivery index entries become stale
        self.state.expiring -= sum(1 for message in store.ready.values() if message.expires)
        # Entries of the expiry index that point here become stale: the tokens are gone.
        store.ready = {}
        store.lanes = [deque() for _ in range(PRIORITY_LEVELS)]
        store.tombstones = 0
        return discarded

    def take_ready(self, store: Store, token: int) -> Message:
        """Take ready message `token` out of `store` for good (it moves to another group):
        counted as dequeued here."""
        message = store.ready.pop(token)
        if self.observer is not None:
            self.observer.left(store, message, TAKEN, None)
        store.tombstones += 1
        store.dequeued += 1
        store.bytes -= body_size(message.body)
        if message.expires:
            self.state.expiring -= 1
        if store.tail is not None and len(store.ready) < self.config.page_size:
            self.mark(store)  # page in behind it
        return message

    def _index_expiry(self, expires: int, token: int, store: Store) -> None:
        heap = self.state.expiry_heap
        heappush(heap, (expires, token, store))
        self.state.expiring += 1
        if len(heap) > 2 * self.state.expiring + EXPIRY_HEAP_SLACK:
            # Entries of delivered messages pile up when messages are consumed long before
            # they would expire. Tokens are unique, so the pop order never depends on the layout.
            self.state.expiry_heap = [entry for entry in heap if entry[1] in entry[2].ready]
            heapify(self.state.expiry_heap)

    def run(self) -> None:
        dirty = self.dirty
        index = 0
        while index < len(dirty):  # a pass may queue more (the expiry queue)
            store = dirty[index]
            index += 1
            store.pending = False
            woken, store.woken = store.woken, []
            if store.tail is not None and len(store.ready) < self.config.page_size:
                self._page_in(store)
            starved = False
            if not store.stable:
                starved = self._dispatch(store, None)
            elif woken:
                starved = self._dispatch(store, woken)
            if store.tail is not None:
                self._refill(store, starved)
            store.maybe_compact()
        dirty.clear()

    def _deliver(self, store: Store, sub: Subscription, message: Message) -> None:
        """Hand `message` (just taken from `store`'s ready messages) to `sub`."""
        count = message.delivery_count = message.delivery_count + 1
        sub.last_activity = self.now
        if message.expires:
            self.state.expiring -= 1
        session = sub.session
        assert session is not None  # consumers are active subscriptions
        if sub.auto:
            if self.observer is not None:
                self.observer.left(store, message, AUTO_ACKED, session.session_id)
            store.dequeued += 1
            store.bytes -= body_size(message.body)
            if not self.quiet:
                self.effects.append(Deliver(session.session_id, sub.sub_id, self._shown(sub, message), message, None,
                                            count > 1, count))
            return
        self.state.delivery_seq = seq = self.state.delivery_seq + 1
        ack_id = str(seq)
        delivery = Delivery(seq, ack_id, sub, message)
        sub.in_flight[ack_id] = delivery
        session.add_delivery(delivery)
        store.in_flight += 1
        if not self.quiet:
            self.effects.append(Deliver(session.session_id, sub.sub_id, self._shown(sub, message), message, ack_id,
                                        count > 1, count))

    def _dispatch_newest(self, store: Store, token: Any, message: Message) -> None:
        """Dispatch on a stable store: only the message just appended (at its lane's tail) can move.
        `token`: its key in `store.ready`, as `enqueue` boxed it."""
        if message.expires and message.expires <= self.now:
            store.lanes[message.priority].pop()
            del store.ready[token]
            self._expire(store, message)
            return
        sub = store.pick(message)
        if sub is None or sub is NO_ROOM:
            return
        store.lanes[message.priority].pop()
        del store.ready[token]
        self._deliver(store, sub, message)

    def _dispatch(self, store: Store, candidates: list[Subscription] | None) -> bool:
        """One dispatch pass: hand ready messages, best priority first, to consumers with room
        (to `candidates` only, when the store was stable and only they changed).

        Messages no consumer may take now (selectors, a busy group owner) are passed over, at
        most `selector_scan_limit` of them per pass; when none is left that a consumer could
        take, the store is `stable`. Returns whether the pass ran out of messages while a
        consumer may still have had room (starved: a page in may serve it).
        """
        if not store.consumers or not store.ready:
            store.stable = True
            return bool(store.consumers)
        now = self.now
        ready = store.ready
        budget = self._scan_limit
        deliver = self._deliver
        pick = store.pick
        for priority in range(PRIORITY_LEVELS - 1, -1, -1):
            lane = store.lanes[priority]
            # The head of the lane: the common case, taken without tombstones.
            while lane:
                token = lane[0]
                message = ready.get(token)
                if message is None:
                    lane.popleft()
                    store.tombstones -= 1
                    continue
                if message.expires and message.expires <= now:
                    lane.popleft()
                    del ready[token]
                    self._expire(store, message)
                    continue
                sub = pick(message) if candidates is None else store.pick_among(message, candidates)
                if sub is None:
                    break
                if sub is NO_ROOM:
                    store.stable = True
                    return False
                lane.popleft()
                del ready[token]
                deliver(store, sub, message)
            else:
                continue
            # The head has to wait: look past it. The deque is not mutated during this loop;
            # taken messages become tombstones.
            budget -= 1
            if budget <= 0:
                store.stable = False
                return False
            entries = iter(lane)
            next(entries)
            for token in entries:
                message = ready.get(token)
                if message is None:
                    continue
                if message.expires and message.expires <= now:
                    del ready[token]
                    store.tombstones += 1
                    self._expire(store, message)
                    continue
                sub = pick(message) if candidates is None else store.pick_among(message, candidates)
                if sub is None:
                    budget -= 1
                    if budget <= 0:
                        store.stable = False
                        return False
                    continue
                if sub is NO_ROOM:
                    store.stable = True
                    return False
                del ready[token]
                store.tombstones += 1
                deliver(store, sub, message)
        store.stable = True
        return True  # every ready message looked at, and a consumer may still have room

    def expire_due(self, now: int) -> None:
        """Move every ready message whose expiry is at or before `now` to the expiry queue."""
        heap = self.state.expiry_heap
        while heap and heap[0][0] <= now:
            _, token, store = heappop(heap)
            message = store.ready.pop(token, None)
            if message is None:
                continue  # delivered (or gone) since it was indexed
            store.tombstones += 1
            store.maybe_compact()
            self._expire(store, message)
        self._expire_paged(now)
