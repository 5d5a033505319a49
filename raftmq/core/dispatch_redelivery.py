"""The dispatcher's side of NACK redelivery back-off (`[core] redelivery_delay_ms`,
`redelivery_multiplier`, `max_redelivery_delay_ms`): a NACKed message waits in its store, held
back (replicated, in snapshots), and returns to the front of its queue when its delay ends; the
dead-letter limit applies first. A part of `Dispatcher`, kept in its own module: the first of
the chain `Redelivery` <- `Paging` <- `Dispatcher` (one line of bases, so that the compiled
build makes the dispatcher a native class: mypyc compiles no class with two bases). It uses
only the dispatcher's attributes and methods declared below."""

from __future__ import annotations

from heapq import heappop, heappush

from raftmq.core.config import CoreConfig
from raftmq.core.message import Message
from raftmq.core.model import Store
from raftmq.core.state import BrokerState


class Redelivery:
    # The dispatcher's attributes (set by `Dispatcher.__init__`) and methods (`Dispatcher`'s
    # own replace these), declared here for the type checker and the compiled build.
    state: BrokerState
    config: CoreConfig
    now: int

    def dead_letter(self, store: Store, message: Message, returned: bool = False) -> None:
        raise NotImplementedError  # Dispatcher.dead_letter

    def requeue(self, store: Store, messages: list[Message], may_dead_letter: bool = True,
                returned: bool = False) -> None:
        raise NotImplementedError  # Dispatcher.requeue

    def redelivery_delay(self, delivery_count: int) -> int:
        """How long a message NACKed after its `delivery_count`-th delivery waits (ms)."""
        config = self.config
        delay = config.redelivery_delay_ms * config.redelivery_multiplier ** max(0, delivery_count - 1)
        return int(min(delay, config.max_redelivery_delay_ms))

    def redeliver_later(self, store: Store, messages: list[Message]) -> None:
        """NACKed `messages`: dead-lettered at the limit, else held back for their redelivery
        delay (`release_due` returns them to the front of `store`)."""
        limit = self.config.max_delivery_count
        heap = self.state.redelivery_heap
        for message in messages:
            if message.delivery_count >= limit:
                self.dead_letter(store, message)
                continue
            due = self.now + self.redelivery_delay(message.delivery_count)
            self.state.entry_seq = token = self.state.entry_seq + 1
            store.delayed[token] = (due, message)
            heappush(heap, (due, token, store))

    def next_redelivery(self) -> int | None:
        """When the first held-back message is due again (ms), or None."""
        heap = self.state.redelivery_heap
        while heap and heap[0][1] not in heap[0][2].delayed:
            heappop(heap)  # its store went away
        return heap[0][0] if heap else None

    def release_due(self, now: int) -> None:
        """Return every held-back message whose delay is over to the front of its store."""
        heap = self.state.redelivery_heap
        back: dict[Store, list[Message]] = {}
        while heap and heap[0][0] <= now:
            _, token, store = heappop(heap)
            held = store.delayed.pop(token, None)
            if held is not None:
                back.setdefault(store, []).append(held[1])
        for store, messages in back.items():
            self.requeue(store, messages, may_dead_letter=False)
