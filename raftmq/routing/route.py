"""The headers a message carries between groups, and the names raftmq keeps for the cluster.

A message on its way to another group waits in the source group's store-and-forward queue for
the next hop (`sf_queue`), with three headers the bridge reads: the destination it was sent to
(`DESTINATION_HEADER`), the group it is for (`TO_HEADER`) and the groups it went through
(`ROUTE_HEADER`, comma separated, the source first). Its duplicate-detection id on the wire is
`dedup_id(message id, target)` in `FORWARD_ID_HEADER`: message ids are unique within their
group, so it never repeats, and a copy sent again (a bridge reconnect, a new leader) is stored
once. A client's SEND routed to another group keeps one forward id whichever way it goes, first
or through this queue (`producer_forward_id` of its `_AMQ_DUPL_ID`, or the id its forward first
chose), so the target stores it once either way. The producer's own `_AMQ_DUPL_ID` travels
unchanged (it was checked where the message was first stored); a message without one carries
the forward id there too, so the bridge's client does not invent one, and the core drops that
copy again.

The core removes these headers before it stores a message for its own consumers, so clients
never see them.
"""

from __future__ import annotations

HEADER_PREFIX = "_raftmq_"
ROUTE_HEADER = "_raftmq_route"
TO_HEADER = "_raftmq_to"
DESTINATION_HEADER = "_raftmq_dest"
ADVERT_HEADER = "_raftmq_advert"
FORWARD_ID_HEADER = "_raftmq_id"  # the forward's duplicate-detection id (dedup_id)
# On a SEND that raftmq's failover client writes again (its first outcome unknown): the core
# routes it where a forward first of it went, never by room (raftmq.core.cluster_routing).
RESENT_HEADER = "_raftmq_resent"
FALLBACK_HEADER = "_raftmq_fallback"  # on a forward first that fell back: a client's SEND stored here (the audit)
FIRST_HEADER = "_raftmq_first"  # on a SEND forwarded first: it was stored nowhere before (the audit reads it)
# How often a redistributed message had been delivered to consumers where it was: its next
# delivery, in another group, must still say `redelivered` (at-least-once, flagged).
DELIVERED_HEADER = "_raftmq_delivered"
DUPLICATE_ID_HEADER = "_AMQ_DUPL_ID"  # the producer's own, kept as it was
# Scale-down: on the control destination, the groups to drain to (comma list; "" any group it
# reaches; "-" stops draining); on a moved message, the durable subscription it belongs to.
DRAIN_HEADER = "_raftmq_drain"
DURABLE_HEADER = "_raftmq_durable"
SUBSCRIPTION_ONLY_HEADER = "_raftmq_subscription_only"  # a moved durable subscription with no message
# On CONNECT: the cluster's own connections (bridges, `raftmq group drain`), which a draining
# group still takes while it turns clients away. Not a credential: a client that sends it is
# served, and what it sends is moved on like anything else a drained group holds.
BRIDGE_CONNECT_HEADER = "raftmq-bridge"

# The destination a bridge sends its group's adverts to: the core reads it, stores nothing.
CONTROL_DESTINATION = "/queue/$.raftmq.cluster"
SF_PREFIX = "/queue/$.raftmq.sf."
INTERNAL_PREFIXES = ("/queue/$.raftmq.", "/topic/$.raftmq.")


def sf_queue(neighbour: str) -> str:
    return SF_PREFIX + neighbour


def is_internal(destination: str) -> bool:
    # One prefix at a time: compiled, `startswith` of a tuple builds an argument tuple per call.
    return destination.startswith(INTERNAL_PREFIXES[0]) or destination.startswith(INTERNAL_PREFIXES[1])


def dedup_id(message_id: str, target: str) -> str:
    return f"raftmq:{message_id}>{target}"


def producer_forward_id(producer_id: str) -> str:
    """The forward id of a client's SEND that carries its own `_AMQ_DUPL_ID`, whichever way it
    leaves the group that received it: the same when the producer sends it again (after a
    resume, or to a new leader), so the target stores it once."""
    return f"raftmq:p:{producer_id}"


def first_headers(headers: tuple[tuple[str, str], ...], own: str, target: str,
                  forward_id: str) -> list[tuple[str, str]]:
    """What a SEND forwarded first (raftmq.server.links.forward_first) carries to its target: the
    client's headers, the target, the route (this group) and the forward id (also as the
    producer's when it had none, so the bridge's client invents none)."""
    sent = [*headers, (TO_HEADER, target), (ROUTE_HEADER, own), (FORWARD_ID_HEADER, forward_id), (FIRST_HEADER, "1")]
    if not any(name == DUPLICATE_ID_HEADER for name, _ in headers):
        sent.append((DUPLICATE_ID_HEADER, forward_id))
    return sent


def parse_route(text: str | None) -> tuple[str, ...]:
    if not text:
        return ()
    return tuple(part for part in text.split(",") if part)


def outgoing(headers: tuple[tuple[str, str], ...], message_id: str, neighbour: str,
             duplicate_detection: bool = True) -> tuple[str, list[tuple[str, str]]]:
    """What a bridge sends for a store-and-forward message (its headers, its id in the source
    group, the neighbour it goes to): the destination it was sent to, and its headers without
    `DESTINATION_HEADER`, with the forward's duplicate-detection id (and that id as the
    producer's when it had none, so the bridge's client invents none)."""
    destination = ""
    to = neighbour
    producer_id = False
    carried: str | None = None  # a forward id chosen before it was stored (a forward first that fell back)
    sent: list[tuple[str, str]] = []
    for name, value in headers:
        if name == DESTINATION_HEADER:
            destination = value
            continue
        if name == FORWARD_ID_HEADER:
            carried = value
            continue
        if name == TO_HEADER:
            to = value
        elif name == DUPLICATE_ID_HEADER:
            producer_id = True
        sent.append((name, value))
    if duplicate_detection:
        forward_id = carried if carried is not None else dedup_id(message_id, to)
        sent.append((FORWARD_ID_HEADER, forward_id))
        if not producer_id:
            sent.append((DUPLICATE_ID_HEADER, forward_id))
    return destination, sent
