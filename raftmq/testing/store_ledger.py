"""A ledger of what the core says enters and leaves its stores (raftmq.core.store_observer),
checked against what the stores hold: a way into or out of a store that does not tell the
observer (and so would escape the audit's replay) shows up as a store holding another number
of messages than its ledger says.

    ledger = StoreLedger.watching(broker)
    broker.apply(...)
    ledger.check(broker)  # AssertionError naming the stores that differ
"""

from __future__ import annotations

from collections import Counter

from raftmq.core.broker import Broker
from raftmq.core.message import Message
from raftmq.core.model import Store


class StoreLedger:
    """Per store: the messages the observer heard enter, less those it heard leave; and by
    origin and outcome, how often each was reported (which ways a run went through)."""

    def __init__(self) -> None:
        self.counts: dict[int, int] = {}
        self.stores: dict[int, Store] = {}  # keeps each store counted alive, so its id stays its own
        self.seen: Counter[str] = Counter()

    @classmethod
    def watching(cls, broker: Broker) -> StoreLedger:
        """A ledger that starts from what `broker` holds now, and is told from now on."""
        ledger = cls()
        for store, held in _holdings(broker).items():
            ledger.stores[id(store)] = store
            ledger.counts[id(store)] = held
        broker.dispatch.observer = ledger
        return ledger

    def entered(self, store: Store, message: Message, origin: str) -> None:
        self.stores[id(store)] = store
        self.counts[id(store)] = self.counts.get(id(store), 0) + 1
        self.seen[origin] += 1

    def left(self, store: Store, message: Message, outcome: str, session: str | None) -> None:
        self.stores[id(store)] = store
        self.counts[id(store)] = self.counts.get(id(store), 0) - 1
        self.seen[outcome] += 1

    def check(self, broker: Broker) -> None:
        holdings = _holdings(broker)
        differ = []
        for key in sorted(set(self.counts) | {id(store) for store in holdings}):
            store = self.stores.get(key) or next(s for s in holdings if id(s) == key)
            held = holdings.get(store, 0)
            if self.counts.get(key, 0) != held:
                differ.append(f"{store.destination}: {self.counts.get(key, 0)} by the observer, {held} held")
        if differ:
            raise AssertionError("stores hold other messages than their observer was told: " + "; ".join(differ))


def _holdings(broker: Broker) -> dict[Store, int]:
    """How many messages each store holds: ready (paged too), waiting out a redelivery delay,
    and in flight with its subscriptions (a store gone from the state may still have some)."""
    state = broker.state
    holdings = {store: store.depth + len(store.delayed) for store in state.stores()}
    for sub in state.subscriptions():
        if sub.in_flight:
            holdings[sub.store] = holdings.get(sub.store, 0) + len(sub.in_flight)
    return holdings
