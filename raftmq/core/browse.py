"""Queue browsing: what a queue holds, read without touching it.

A browse walks a store's ready messages the way a dispatch pass offers them (best priority
first, then arrival order within a priority) and only reads: tombstones, expired messages
(the next Tick moves them) and selector misses are skipped in place, nothing is delivered,
compacted or re-indexed. In-flight messages are not in the store, so a browse does not see
them, as in ActiveMQ. Paged messages come after the head's (raftmq.core.paging).
"""

from __future__ import annotations

from collections.abc import Iterator

from raftmq.core.message import Message
from raftmq.core.model import PRIORITY_LEVELS, Store, selector_headers
from raftmq.core.selector import Selector


def browse_store(store: Store | None, limit: int, selector: Selector | None, now: int) -> tuple[list[Message], bool]:
    """Up to `limit` ready messages of `store` in queue order, and whether more matched.

    Bounded work: it stops at the first match past `limit`; a selector that matches little can
    make it read every ready message once (as a consumer's first dispatch pass would)."""
    found: list[Message] = []
    if store is None:
        return found, False
    for message in _queue_order(store):
        if message.expires and message.expires <= now:
            continue
        if selector is not None and not selector.matches(selector_headers(message)):
            continue
        if len(found) == limit:
            return found, True
        found.append(message)
    return found, False


def _queue_order(store: Store) -> Iterator[Message]:
    """The head's messages by priority, then the paged ones in arrival order (pages are
    decoded one at a time, as the walk reaches them)."""
    ready = store.ready
    for priority in range(PRIORITY_LEVELS - 1, -1, -1):
        for token in store.lanes[priority]:
            message = ready.get(token)
            if message is not None:
                yield message
    if store.tail is not None:
        yield from store.tail.messages()
