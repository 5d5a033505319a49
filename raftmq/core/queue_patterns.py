"""Wildcard queue subscriptions (`/queue/orders.>`): one consumer of every queue its pattern
matches, ActiveMQ's way.

The subscription the session holds is a parent that consumes nothing itself; each matching
queue — there now, or created later — gets a child: an ordinary consumer of that queue, with
the parent's id, ack mode, selector and session. The children share the parent's prefetch
(`Subscription.has_room`) and, in ack mode `client`, a cumulative ACK settles what came
before it from any of them. A delivery belongs to its child, so a returned message goes back
to the queue it came from. Internal ($.raftmq.) and temporary queues never match.

The index of patterns is derived (`rebuild` after a snapshot load), never stored; a
snapshot records the parent and its children (raftmq.core.snapshot).
"""

from __future__ import annotations

from raftmq.core.model import Session, Store, Subscription
from raftmq.core.selector import Selector
from raftmq.core.state import BrokerState
from raftmq.core.temporary import MARK
from raftmq.core.validation import QUEUE_PREFIX, destination_name, is_wildcard
from raftmq.patterns import pattern_matches
from raftmq.routing.route import is_internal


def matches(pattern: str | None, destination: str) -> bool:
    """Whether queue pattern `pattern` takes from `destination` (without a pattern: whether
    any could: internal and temporary queues never match)."""
    if not destination.startswith(QUEUE_PREFIX) or is_internal(destination) or MARK in destination:
        return False
    return pattern is None or pattern_matches(destination_name(pattern), destination_name(destination))


def is_queue_pattern(destination: str) -> bool:
    return destination.startswith(QUEUE_PREFIX) and is_wildcard(destination)


def adopt(parent: Subscription, store: Store) -> Subscription:
    """A child of `parent` consuming `store` (not yet among the store's consumers)."""
    assert parent.children is not None
    child = Subscription(parent.session, parent.sub_id, store.destination, parent.ack, parent.prefetch,
                         parent.selector, False, None, store)
    child.parent = parent
    parent.children[store.destination] = child
    return child


class QueuePatterns:
    """The live wildcard queue subscriptions by pattern. `wake` is the dispatcher's: a new
    child may take what its queue holds."""

    def __init__(self, state: BrokerState) -> None:
        self.state = state
        self.parents: dict[str, list[Subscription]] = {}

    def subscribe(self, session: Session, sub_id: str, pattern: str, ack: str, prefetch: int,
                  selector: Selector | None) -> tuple[Subscription, list[Subscription]]:
        """A new parent (the session holds it under `sub_id`) and its children, one per
        matching queue, to be added as consumers and woken."""
        parent = Subscription(session, sub_id, pattern, ack, prefetch, selector, False, None,
                              Store(pattern, shared=True))
        parent.children = {}
        self.parents.setdefault(pattern, []).append(parent)
        children = [adopt(parent, store) for name, store in self.state.queues.items() if matches(pattern, name)]
        return parent, children

    def new_queue(self, store: Store) -> list[Subscription]:
        """Children for a queue just created, of every parent whose pattern matches it."""
        return [adopt(parent, store) for pattern, parents in self.parents.items() if matches(pattern, store.destination)
                for parent in parents]

    def end(self, parent: Subscription) -> None:
        """`parent` stops: unindexed; its children are the caller's to remove from their queues."""
        parents = self.parents.get(parent.destination, [])
        if parent in parents:
            parents.remove(parent)
            if not parents:
                del self.parents[parent.destination]

    def rebuild(self) -> None:
        self.parents = {}
        for session in self.state.sessions.values():
            for sub in session.subs.values():
                if sub.children is not None:
                    self.parents.setdefault(sub.destination, []).append(sub)
