"""Log what the cluster's committed state says changed: `cluster.binding_added` /
`cluster.binding_removed` (a destination of another group became reachable, or stopped being)
and `cluster.redistributed` (messages moved after their consumer left); `cluster.draining`,
`cluster.drained` and `cluster.drain_stopped` for a scale-down, during which it also ends every
client session (a drained group serves no one; their deliveries go back to be moved). The
core cannot log or close sessions, so the group's leader compares the state every half second
(a `LeaderService`)."""

from __future__ import annotations

import asyncio

import structlog

from raftmq.server.seams.host import ClusterEventsHost
from raftmq.server.seams.leader_task import LeaderTask

log = structlog.get_logger("raftmq.server.cluster")

WATCH_SECONDS = 0.5


class ClusterEvents(LeaderTask):
    name = "cluster events"

    def __init__(self, node: ClusterEventsHost) -> None:
        self._node = node
        self._bindings: dict[str, dict[str, dict[str, int]]] | None = None
        self._redistributed: int | None = None
        self._drained: int | None = None
        self._draining: tuple[str, ...] | None = None

    async def run(self) -> None:
        seen = -1
        while True:
            self.check()
            seen = await self._node.applied.wait(seen)  # nothing changes between applied batches
            await asyncio.sleep(WATCH_SECONDS)  # one look for a burst of them

    def check(self) -> None:
        routing = self._node.broker.routing
        if routing is None:
            return
        bindings = routing.remote_bindings()
        redistributed = routing.cluster_state.redistributed
        if self._bindings is not None:
            for destination, groups in bindings.items():
                for group, binding in groups.items():
                    if group not in self._bindings.get(destination, {}):
                        log.info("cluster.binding_added", node=self._node.name, destination=destination, group=group,
                                 hops=binding["hops"], consumers=binding["consumers"])
            for destination, groups in self._bindings.items():
                for group in groups:
                    if group not in bindings.get(destination, {}):
                        log.info("cluster.binding_removed", node=self._node.name, destination=destination, group=group)
        if self._redistributed is not None and redistributed > self._redistributed:
            log.info("cluster.redistributed", node=self._node.name, messages=redistributed - self._redistributed,
                     total=redistributed)
        self._bindings, self._redistributed = bindings, redistributed
        self._check_drain(routing.cluster_state.draining, routing.cluster_state.drained)

    def _check_drain(self, draining: tuple[str, ...] | None, drained: int) -> None:
        name = self._node.name
        if draining is not None:
            if self._draining is None:
                log.info("cluster.draining", node=name, to=list(draining) or "any group")
            closed = self._node.refuse_clients("group draining", "this group is being drained (scale-down)")
            if closed:
                log.info("cluster.drain_closed_sessions", node=name, sessions=closed)
            if self._drained is not None and drained > self._drained:
                log.info("cluster.drained", node=name, messages=drained - self._drained, total=drained)
        elif self._draining is not None:
            log.info("cluster.drain_stopped", node=name, total=drained)
        self._draining, self._drained = draining, drained
