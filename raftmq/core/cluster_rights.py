"""Which sessions may act for the cluster's bridges: read-only checks the broker asks when a
session sends an advert or consumes a store-and-forward queue."""

from __future__ import annotations

from typing import Protocol

from raftmq.core.cluster_routing import ClusterRouting
from raftmq.core.commands import Send
from raftmq.core.config import CoreConfig
from raftmq.core.model import Session
from raftmq.routing.route import SF_PREFIX


class Broker(Protocol):
    """What `learn` needs of `raftmq.core.broker.Broker` (which imports this module)."""

    config: CoreConfig
    routing: ClusterRouting | None

    def _reject(self, session_id: str, message: str, detail: str, receipt: str | None) -> None: ...

    def _done(self, session_id: str, receipt: str | None) -> None: ...


def cluster_login(config: CoreConfig, session: Session) -> bool:
    """Whether the session may act as another group's bridge: any session when no
    connection names a cluster user, else that user's."""
    cluster = config.cluster
    users = {c.cluster_user for c in cluster.connections if c.cluster_user is not None} if cluster else set()
    return not users or session.login in users


def may_pull(config: CoreConfig, routing: ClusterRouting | None, session: Session, destination: str) -> str | None:
    """Why the session may not consume `destination` ($.raftmq. names), or None: only a
    neighbour's store-and-forward queue, and only by the cluster user: this group's own
    bridge to it, or that neighbour's bridge pulling its traffic when its connection is
    the link's only one. (Which network sessions may ask at all is the STOMP layer's
    decision: raftmq.server.stomp.translate lets through only the queues a neighbour pulls.)"""
    neighbour = destination[len(SF_PREFIX):] if destination.startswith(SF_PREFIX) else None
    view = routing.view if routing is not None else None
    if (view is None or neighbour is None
            or not (neighbour in view.neighbours or (view.dynamic and neighbour != view.group))):
        return f"{destination!r}: $.raftmq. names belong to the cluster's bridges"
    if not cluster_login(config, session):
        return f"{destination!r} is pulled by the cluster user only"
    return None


def learn(broker: Broker, session: Session, command: Send) -> None:
    """A neighbouring group's advert of its bindings (cluster.bindings), sent to the control
    destination: taken from the cluster user only, outside a transaction."""
    routing = broker.routing
    if routing is None or broker.config.cluster is None or command.transaction is not None:
        return broker._reject(session.session_id, "reserved destination", command.destination, command.receipt)
    if not cluster_login(broker.config, session):
        return broker._reject(session.session_id, "reserved destination",
                              f"{command.destination} takes adverts from the cluster user only", command.receipt)
    problem = routing.control(command.headers)
    if problem is not None:
        return broker._reject(session.session_id, "invalid cluster command", problem, command.receipt)
    broker._done(session.session_id, command.receipt)
