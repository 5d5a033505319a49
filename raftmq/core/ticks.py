"""When the core needs time: what the leader's ticker (raftmq.server.ticker) asks before it
proposes a Tick. Read-only over the state (a heap's stale top may be dropped, as the Tick that
would meet it drops it: replicas never compare the heaps). Pure, like the rest of the core."""

from __future__ import annotations

from raftmq.core import lifetimes
from raftmq.core.cluster_routing import ClusterRouting
from raftmq.core.dispatch import Dispatcher
from raftmq.core.schedule import Scheduler
from raftmq.core.state import BrokerState


def next_due(state: BrokerState, scheduler: Scheduler, dispatch: Dispatcher) -> int | None:
    """The earliest time (ms) a Tick has work to do for: a scheduled message, a NACKed one whose
    redelivery delay ends, a ready message whose expiry comes (a paged one: `wants_ticks`), an
    MQTT will whose delay ends or an MQTT client's state whose time is up (raftmq.core.lifetimes)."""
    heap = state.expiry_heap
    expiry: int | None = heap[0][0] if heap else None
    times = [t for t in (scheduler.next_due(), dispatch.next_redelivery(), expiry, lifetimes.next_due(state))
             if t is not None]
    return min(times) if times else None


def wants_ticks(state: BrokerState, routing: ClusterRouting | None) -> bool:
    """Whether a Tick every interval has work besides `next_due`'s: a queue redistribution
    watches (it holds messages and its cluster connection redistributes), a drain, or a paged
    message with an expiry. Without any of these and nothing due, a leader proposes no Tick: an
    idle group commits nothing."""
    if routing is not None:
        if routing.cluster_state.draining is not None or routing.cluster_state.idle_since:
            return True
        for destination, store in state.queues.items():
            if store.depth:
                connection = routing.governing(destination)
                if connection is not None and connection.redistributes:
                    return True
    return any(store.tail is not None and store.tail.min_expires() for store in state.stores())
