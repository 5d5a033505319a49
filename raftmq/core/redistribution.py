"""Redistribution in the broker core (on Tick, docs/cluster.md): a queue with waiting messages,
no local consumer and a consumer elsewhere, idle for its connection's redistribution_delay_ms,
moves its ready messages there (best priority first; the messages of one JMSXGroupID all to one
group). Under LOCAL_FIRST also a backlog behind local consumers that are all full: it moves to
the groups whose adverts say they have room, an equal share each, the local group keeping its
own. The moves go through the store-and-forward queues of raftmq.core.cluster_routing (which
owns this). Pure, like the rest of the core.
"""

from __future__ import annotations

import zlib
from typing import Protocol

from raftmq.core.model import PRIORITY_LEVELS, Store, selector_headers
from raftmq.core.routing_view import MessageMover
from raftmq.routing.bindings import Route
from raftmq.routing.cluster_connection import LOCAL_FIRST, ClusterConnection

# A redistribution moves at most this many messages of one queue per Tick (a Tick's apply
# stays short; the rest follow at the next Tick).
REDISTRIBUTION_BATCH = 10_000


class ClusterRouting(MessageMover, Protocol):
    """What redistribution uses of raftmq.core.cluster_routing.ClusterRouting (which owns it)."""

    def governing(self, destination: str) -> ClusterConnection | None: ...

    def queue_routes(self, destination: str) -> dict[str, Route]: ...


class Redistribution:
    def __init__(self, routing: ClusterRouting) -> None:
        self.routing = routing

    def tick(self, now: int) -> None:
        """On a Tick: move the ready messages of queues idle here with consumers elsewhere."""
        routing = self.routing
        idle = routing.cluster_state.idle_since
        # A copy: a move may create the store-and-forward queue it goes to.
        for destination, store in list(routing.state.queues.items()):
            connection = routing.governing(destination)
            if connection is None or not connection.redistributes:
                continue
            limit, share = REDISTRIBUTION_BATCH, False
            if not store.depth:
                demand = []
            elif not store.consumers:
                demand = self._demand(connection, destination)
            elif connection.message_load_balancing == LOCAL_FIRST and not any(sub.has_room for sub in store.consumers):
                # A backlog behind full local consumers: an equal share for each group with room.
                demand = [route for route in self._demand(connection, destination) if route.room]
                limit, share = min(limit, store.depth * len(demand) // (len(demand) + 1)), True
            else:
                demand = []
            if not demand or limit <= 0:
                idle.pop(destination, None)
                continue
            since = idle.setdefault(destination, now)
            if now - since >= connection.redistribution_delay_ms:
                self._move(destination, store, demand, limit, keep_groups=share)
                if share:  # the groups that took a share advertise whether they still have room first
                    idle.pop(destination, None)
        for destination in [d for d in idle if d not in routing.state.queues]:
            del idle[destination]

    def _demand(self, connection: ClusterConnection, destination: str) -> list[Route]:
        return [
            route for _, route in sorted(self.routing.queue_routes(destination).items())
            if route.hops <= connection.max_hops and route.consumer_count > 0
        ]

    def _move(self, destination: str, store: Store, demand: list[Route], limit: int = REDISTRIBUTION_BATCH, *,
              keep_groups: bool = False) -> None:
        """Move up to `limit` ready messages to the groups of `demand`; `keep_groups`: leave the
        messages of a JMSXGroupID where they are (their group is served by a local consumer)."""
        routing = self.routing
        moved = 0
        turn = routing.cluster_state.turns.get(destination, 0)
        for priority in range(PRIORITY_LEVELS - 1, -1, -1):
            for token in list(store.lanes[priority]):
                message = store.ready.get(token)
                if message is None or keep_groups and message.group is not None:
                    continue
                matching = selector_headers(message)
                targets = [route for route in demand if routing.takers(route.consumers, matching)]
                if not targets:
                    continue
                if message.group is not None:  # one JMSXGroupID, one group: its order holds
                    route = targets[zlib.crc32(message.group.encode()) % len(targets)]
                else:
                    route = targets[turn % len(targets)]
                    turn += 1
                routing.dispatch.take_ready(store, token)
                routing.forward(route.via, destination, message.headers, message.body, message.timestamp,
                                route.group, (routing.own,), message)
                moved += 1
                if moved >= limit:
                    break
            if moved >= limit:
                break
        store.maybe_compact()
        if moved:
            routing.cluster_state.turns[destination] = turn
            routing.cluster_state.redistributed += moved
