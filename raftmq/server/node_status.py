"""What a node reports of itself: /status, and the cluster part of it (`raftmq status`)."""

from __future__ import annotations

import os
from typing import Any, Protocol

from raftmq import compiled
from raftmq.config import NodeConfig
from raftmq.core.broker import Broker
from raftmq.replication.commit_log import CommitLog
from raftmq.server.links.forward_first import ForwardFirst
from raftmq.server.replica.state_machine import Replica
from raftmq.server.seams.flow import FlowGate
from raftmq.server.seams.host import ClientConnection
from raftmq.server.stomp.relay import Relays
from raftmq.server.succession import Succession


class Reporting(Protocol):
    """What a node's status reads of it (raftmq.server.node.Node)."""

    name: str
    commit_log: CommitLog
    replica: Replica
    sessions: dict[str, ClientConnection]
    succession: Succession
    flow: FlowGate | None
    bridges: list[Any]
    forward_first: ForwardFirst | None
    failure: str | None
    internal_errors: int

    @property
    def broker(self) -> Broker: ...
    @property
    def config(self) -> NodeConfig: ...
    @property
    def relays(self) -> Relays: ...
    def rates_now(self, destinations: dict[str, Any]) -> dict[str, Any]: ...


def node_status(node: Reporting) -> dict[str, Any]:
    """Role, term, commit / applied index, counters and rates (JSON-able), for /status.

    `sessions` counts this node's client connections; `broker` is the replicated state's
    counters (the same on every member that applied as much), among them `broker.sessions`,
    the sessions the group knows. `rates` is this node's view of how fast they move:
    enqueue / dequeue msg/s in all and per destination (see `raftmq.server.rates`)."""
    commit_log = node.commit_log
    broker = node.broker.stats()
    if node.forward_first is not None and commit_log.is_leader:
        node.forward_first.count_in(broker["destinations"])
    replica = node.replica
    status: dict[str, Any] = {
        "node": node.name,
        "pid": os.getpid(),
        "hot_modules": compiled.mode(),  # "compiled" or "pure ..." (raftmq.compiled)
        "role": "leader" if commit_log.is_leader else "follower",
        "leader": None if commit_log.is_leader else commit_log.leader_hint,
        "applied_index": commit_log.position.index,
        "sessions": len(node.sessions),
        "mqtt_connections": sum(1 for session in node.sessions.values() if (session.version or "").startswith("mqtt")),
        "relayed_sessions": len(node.relays),
        "relayed_total": node.relays.total,
        "apply_failures": replica.apply_failures,
        "internal_errors": node.internal_errors,
        "body_failures": replica.body_failures,
        "sessions_swept": node.succession.sessions_swept,
        "sessions_handed_over": node.relays.handed_over,  # to a successor, at a leadership transfer
        "sessions_adopted": node.succession.takeover.adopted,  # from the previous leader
        "relays_moved": node.relays.moved,  # to a new leader, the session resumed there
        # parked here, resumed by a relay that moved or by its client
        "sessions_resumed": node.succession.takeover.resumed,
        "leader_changes": node.succession.leader_changes,
        "failure": node.failure,
        "broker": broker,
        "rates": node.rates_now(broker["destinations"]),
    }
    log_status = commit_log.status()
    if log_status.replicated:
        status["raft"] = log_status.details
        status["term"] = log_status.term
    # One node: whatever is proposed is committed and applied at once.
    status["commit_index"] = log_status.commit_index
    if replica.bodies is not None:
        status["bodies"] = replica.bodies.stats()
    if node.flow is not None:
        status["flow"] = {"blocked_connections": node.flow.waiting, "blocks": node.flow.blocks}
    if node.config.core.cluster is not None:
        status["cluster"] = cluster_status(node)
    return status


def cluster_status(node: Reporting) -> dict[str, Any]:
    """The group's name, its links (the bridges run on the leader only) and the groups
    it knows, for `raftmq status`."""
    routing = node.broker.routing
    cluster = node.config.core.cluster
    assert routing is not None and cluster is not None
    state = routing.cluster_state
    return {
        "group": cluster.group,
        "links": [bridge.status() for bridge in node.bridges] if node.commit_log.is_leader else [],
        "reachable": {group: {"hops": hops, "via": via} for group, (hops, via) in routing.reachable_groups().items()},
        "bindings": routing.remote_bindings(),
        "forwarded": dict(state.forwarded),
        # Since this node started (shown while it leads): SENDs sent to their target before
        # being stored here, and those that set out so and took the store path after all
        # (raftmq.server.links.forward_first).
        **(node.forward_first.status() if node.forward_first is not None and node.commit_log.is_leader
           else {"forwarded_first": 0, "fell_back": 0}),
        "redistributed": state.redistributed,
        "draining": None if state.draining is None else list(state.draining),
        "drained": state.drained,
        "unroutable": state.unroutable,
    }
