"""The dispatcher's side of paging (raftmq.core.paging): when a message goes to a store's tail,
when pages come back into its head, and how paged messages expire. A part of `Dispatcher`,
kept in its own module (the chain of bases: raftmq.core.dispatch_redelivery); it uses only the
dispatcher's attributes and methods declared below and in `Redelivery`.

Rules: a store pages an arrival once its head holds `2 × page_size` ready messages, or while
older messages are paged (arrival order holds). After every dispatch pass of a store with a
tail, pages come back while the head holds fewer than `page_size`, or while the pass ran out
of messages with a consumer still having room (selectors, message groups: what it wants may be
paged) and the head holds fewer than `selector_scan_limit`.
"""

from __future__ import annotations

from raftmq.core.dispatch_redelivery import Redelivery
from raftmq.core.message import Message, body_size
from raftmq.core.model import Store, Subscription
from raftmq.core.paging import Tail


class Paging(Redelivery):
    # The dispatcher's attribute (set by `Dispatcher.__init__`) and methods (`Dispatcher`'s own
    # replace these), declared here for the type checker and the compiled build.
    _scan_limit: int

    def mark(self, store: Store) -> None:
        raise NotImplementedError  # Dispatcher.mark

    def _dispatch(self, store: Store, candidates: list[Subscription] | None) -> bool:
        raise NotImplementedError  # Dispatcher._dispatch

    def _index_expiry(self, expires: int, token: int, store: Store) -> None:
        raise NotImplementedError  # Dispatcher._index_expiry

    def _expire(self, store: Store, message: Message, indexed: bool = True) -> None:
        raise NotImplementedError  # Dispatcher._expire

    def _page_out(self, store: Store, message: Message, page_size: int) -> None:
        """Keep `message` in `store`'s tail: the head is full, or older messages are paged."""
        tail = store.tail
        if tail is None:
            tail = store.tail = Tail(self.state.pages)
        tail.append(message, page_size)
        store.enqueued += 1
        store.bytes += body_size(message.body)
        if store.stable and not store.pending and len(store.ready) < self._scan_limit and self._may_take(store):
            # A consumer with room that the head cannot serve (selectors, groups): page in for it.
            self.mark(store)

    @staticmethod
    def _may_take(store: Store) -> bool:
        return any(sub.has_room for sub in store.consumers)

    def _page_in(self, store: Store) -> None:
        """Move the oldest paged messages to the back of the head (they are newer than every
        message there), for a full pass to offer."""
        tail = store.tail
        assert tail is not None
        state = self.state
        for message in tail.take():
            state.entry_seq = token = state.entry_seq + 1
            store.lanes[message.priority].append(token)
            store.ready[token] = message
            if message.expires:
                self._index_expiry(message.expires, token, store)
        if not tail.count:
            store.tail = None
        store.stable = False

    def _refill(self, store: Store, starved: bool) -> None:
        """After a pass: page in while the head runs low or starved consumers may find more."""
        page_size, scan_limit = self.config.page_size, self._scan_limit
        while store.tail is not None and (len(store.ready) < page_size or starved and len(store.ready) < scan_limit):
            self._page_in(store)
            starved = self._dispatch(store, None)

    def _expire_paged(self, now: int) -> None:
        """Expire the paged messages due at `now` (only pages holding one are rewritten)."""
        for store in self.state.stores():
            tail = store.tail
            if tail is None:
                continue
            due = tail.min_expires()
            if not due or due > now:
                continue
            for message in tail.expire(now):
                self._expire(store, message, indexed=False)
            if not tail.count:
                store.tail = None
