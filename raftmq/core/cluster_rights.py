"""Which sessions may act for the cluster's bridges: read-only checks the broker asks when a
session sends an advert or consumes a store-and-forward queue."""

from __future__ import annotations

from raftmq.core.cluster_routing import ClusterRouting
from raftmq.core.config import CoreConfig
from raftmq.core.model import Session
from raftmq.routing.route import SF_PREFIX


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
            or not (neighbour in view.neighbours or (view.discovery and neighbour != view.group))):
        return f"{destination!r}: $.raftmq. names belong to the cluster's bridges"
    if not cluster_login(config, session):
        return f"{destination!r} is pulled by the cluster user only"
    return None
