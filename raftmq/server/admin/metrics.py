"""Prometheus exposition of a node's status, and the health verdict of `/health`.

`StatusCollector` turns one `Node.status()` (read at scrape time, on the event loop that
serves the request) into metric families. Each admin server has its own
`CollectorRegistry`: several nodes run in one process in tests, and the global registry
would mix them up. Every sample carries `group` and `node` labels, so the scrapes of all
members can be stored side by side.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector, CollectorRegistry

HEALTH_OK = "ok"
HEALTH_UNAVAILABLE = "unavailable"  # up, but cannot serve clients now (no leader known)
HEALTH_FAILED = "failed"  # must stop (journal unwritable, unreadable snapshot)


def health(status: dict[str, Any]) -> tuple[str, str | None]:
    """(verdict, reason): ok when the node serves its role: it leads, or it follows a
    leader it knows (clients it refuses are told where to go). An ok node of a group that
    `raftmq group drain` empties has a reason: it turns every client away (the verdict, and so
    /health's and /ready's answers, stay those of a node serving its role)."""
    if status.get("failure"):
        return HEALTH_FAILED, str(status["failure"])
    if status.get("role") == "leader" or status.get("leader"):
        return HEALTH_OK, draining_reason(status)
    return HEALTH_UNAVAILABLE, "no leader known (no quorum, or an election is under way)"


def draining_reason(status: dict[str, Any]) -> str | None:
    """What a draining group's member says in /status's `health_reason` (None when it does
    not drain): it turns every client away and moves what it holds to other groups."""
    cluster = status.get("cluster")
    if not isinstance(cluster, dict) or cluster.get("draining") is None:
        return None
    to = ", ".join(str(group) for group in cluster["draining"]) or "every group it reaches"
    return (f"draining (raftmq group drain): the group turns every client away and moves what it holds to {to}; "
            f"{cluster.get('drained') or 0} moved so far")


# A member this many entries behind the commit index it knows is still catching up.
READY_MAX_LAG = 100


def readiness(status: dict[str, Any]) -> tuple[bool, str | None]:
    """(ready, reason): healthy, a member of its group's configuration, caught up, and not
    waiting for message bodies after a snapshot (what an orchestrator waits for before it
    counts the node in, or takes the next one down)."""
    verdict, reason = health(status)
    if verdict != HEALTH_OK:
        return False, reason
    raft = status.get("raft")
    if not isinstance(raft, dict):
        return True, None  # a node without a Raft group (in memory)
    members = raft.get("members") or ()
    if members and raft.get("node") not in members:
        return False, f"not a member of the group's configuration ({', '.join(sorted(members))})"
    applied, committed = int(status.get("applied_index") or 0), int(status.get("commit_index") or 0)
    if committed - applied > READY_MAX_LAG:
        return False, f"catching up: applied {applied} of {committed}"
    missing = (status.get("bodies") or {}).get("missing_indexes", 0)
    if missing:
        return False, f"fetching {missing} message bodies from the other members"
    return True, None


# (metric suffix, status key, help) of the node's own counters.
_NODE_COUNTERS = (
    ("apply_failures", "apply_failures", "Committed commands the broker core raised on (a bug: the node then stops)."),
    ("leader_changes", "leader_changes", "Times this node gained or lost leadership."),
    ("internal_errors", "internal_errors", "Client connections closed because handling their input raised."),
    ("body_failures", "body_failures", "Deliveries refused because the message body was missing or corrupt."),
    ("sessions_swept", "sessions_swept", "Sessions of earlier leaders disconnected by this node as the new leader."),
    ("sessions_handed_over", "sessions_handed_over",
     "Client sessions this node handed to its successor at a leadership transfer."),
    ("sessions_adopted", "sessions_adopted",
     "Client sessions this node adopted from its predecessor at a leadership transfer."),
    ("relays_moved", "relays_moved",
     "Relayed client connections this node moved to a new leader, the session resumed there."),
    ("sessions_resumed", "sessions_resumed",
     "Client sessions parked here and resumed by a relay that moved closer to its client, or by the client itself."),
    ("relayed_sessions", "relayed_total", "Client sessions this node relayed to its group's leader (as a follower)."),
)
# (metric suffix, counter key in a destination's stats, help).
_DESTINATION_GAUGES = (
    ("depth", "depth", "Messages ready (stored, not in flight)."),
    ("consumers", "consumers", "Active consumers (subscriptions)."),
    ("in_flight", "in_flight", "Messages delivered and not yet acknowledged."),
    ("enqueue_rate", "enqueue_rate", "Messages stored per second over the last seconds (see /status rates)."),
    ("dequeue_rate", "dequeue_rate", "Messages consumed per second over the last seconds."),
)
_DESTINATION_COUNTERS = (
    ("enqueued", "enqueued", "Messages stored (a topic: published)."),
    ("dequeued", "dequeued", "Messages consumed for good (acknowledged, or sent to an auto-ack consumer)."),
    ("dead_lettered", "dead_lettered", "Messages moved to the dead-letter queue."),
    ("expired", "expired", "Messages moved to the expiry queue."),
)


class StatusCollector(Collector):
    def __init__(self, status: Callable[[], dict[str, Any]]) -> None:
        self._status = status  # AdminServer.status: Node.status() plus group and health

    def collect(self) -> Iterator[Metric]:
        status = self._status()
        labels = {"group": str(status.get("group") or ""), "node": str(status.get("node") or "")}
        names, values = list(labels), list(labels.values())

        def single(kind: type[GaugeMetricFamily | CounterMetricFamily], name: str, documentation: str,
                   value: Any) -> Metric | None:
            if not _number(value):
                return None
            family = kind(f"raftmq_{name}", documentation, labels=names)
            family.add_metric(values, value)
            return family

        def gauge(name: str, documentation: str, value: Any) -> Metric | None:
            return single(GaugeMetricFamily, name, documentation, value)

        def counter(name: str, documentation: str, value: Any) -> Metric | None:
            return single(CounterMetricFamily, name, documentation, value)

        verdict = status.get("health") or health(status)[0]  # AdminServer.status has judged it
        applied, commit = status.get("applied_index"), status.get("commit_index")
        raft = status.get("raft") or {}
        bodies = status.get("bodies") or {}
        broker = status.get("broker") or {}
        mqtt = broker.get("mqtt") or {}
        families = [
            gauge("up", "1 when the node serves its role (see /health).", 1 if verdict == HEALTH_OK else 0),
            gauge("failed", "1 when the node has failed and is stopping.", 1 if status.get("failure") else 0),
            gauge("raft_leader", "1 on the group's leader (master), 0 on followers (slaves).",
                  1 if status.get("role") == "leader" else 0),
            gauge("raft_term", "Current Raft term.", status.get("term")),
            gauge("raft_commit_index", "Highest Raft index known committed.", commit),
            gauge("raft_applied_index", "Highest Raft index applied to this node's broker state.", applied),
            gauge("raft_replication_lag", "Committed entries this node has not applied yet (commit - applied).",
                  max(0, commit - applied) if isinstance(commit, int) and isinstance(applied, int) else None),
            gauge("raft_journal_bytes", "Bytes in the Raft journal (entries since the last snapshot).",
                  raft.get("journal_bytes")),
            gauge("raft_journal_entries", "Entries in the Raft journal.", raft.get("journal_entries")),
            counter("raft_apply_errors", "Raft entries that failed to apply.", raft.get("apply_errors")),
            gauge("body_journal_bytes", "Bytes in the message body journal's segments.", bodies.get("bytes")),
            gauge("connections", "Client connections open on this node.", status.get("sessions")),
            gauge("relayed_connections", "Client connections this follower relays to the leader now.",
                  status.get("relayed_sessions")),
            gauge("sessions", "Client sessions the group's broker state knows (on every member alike).",
                  broker.get("sessions")),
            gauge("mqtt_connections", "MQTT client connections open on this node (among `connections`).",
                  status.get("mqtt_connections")),
            gauge("mqtt_retained_messages", "Retained MQTT messages the group keeps (one per topic at most).",
                  mqtt.get("retained")),
            gauge("mqtt_kept_sessions", "MQTT sessions the group keeps for their clients (clean session 0).",
                  mqtt.get("kept_sessions")),
            gauge("mqtt_wills", "Will messages of MQTT sessions, published if a session ends without DISCONNECT.",
                  mqtt.get("wills")),
            gauge("dead_letter_depth", "Messages waiting in the dead-letter queue.",
                  (broker.get("dead_letter") or {}).get("depth")),
            gauge("expiry_depth", "Messages waiting in the expiry queue.", (broker.get("expiry") or {}).get("depth")),
        ]
        cluster = status.get("cluster")
        if isinstance(cluster, dict):  # a group in a cluster of groups
            families += [
                gauge("cluster_draining", "1 while the group drains (raftmq group drain): it turns every client away.",
                      0 if cluster.get("draining") is None else 1),
                counter("cluster_drained", "Messages the group moved to other groups while draining.",
                        cluster.get("drained")),
            ]
        families += [counter(name, documentation, status.get(key)) for name, key, documentation in _NODE_COUNTERS]
        yield from (family for family in families if family is not None)
        rates = (status.get("rates") or {}).get("destinations") or {}
        yield from self._destinations(broker.get("destinations") or {}, rates, names, values)
        yield from _links((status.get("cluster") or {}).get("links") or [], names, values)

    def _destinations(
        self, destinations: dict[str, dict[str, Any]], rates: dict[str, dict[str, Any]],
        names: list[str], values: list[str],
    ) -> Iterator[Metric]:
        label_names = ["destination", "type", *names]
        rows = [
            ([destination, "topic" if destination.startswith("/topic/") else "queue", *values],
             {**counters, **rates.get(destination, {})})
            for destination, counters in sorted(destinations.items())
        ]
        yield from _labelled(GaugeMetricFamily, "raftmq_destination_", _DESTINATION_GAUGES, label_names, rows)
        yield from _labelled(CounterMetricFamily, "raftmq_destination_", _DESTINATION_COUNTERS, label_names, rows)


# (metric suffix, key in a link's status, help) of the cluster bridges (on the group's leader).
_LINK_COUNTERS = (
    ("forwarded", "forwarded", "Messages the neighbouring group confirmed (committed there, removed here)."),
    ("batches", "batches",
     "Batch frames the neighbouring group confirmed (forwarded divided by this: messages per batch)."),
    ("refused", "refused",
     "Messages the neighbouring group refused (NACKed here; dead-lettered after max deliveries)."),
    ("adverts_sent", "adverts_sent", "Binding adverts the neighbouring group confirmed."),
    ("forwarded_first", "forwarded_first",
     "SENDs sent to the neighbouring group before being stored here, confirmed there."),
    ("fell_back", "fell_back", "SENDs that set out first, were not confirmed, and took the store path here."),
)
_LINK_GAUGES = (
    ("waiting", "waiting", "Messages in the store-and-forward queue towards the neighbouring group."),
    ("in_flight", "in_flight", "Messages sent to the neighbouring group and not yet confirmed."),
)


def _links(links: list[dict[str, Any]], names: list[str], values: list[str]) -> Iterator[Metric]:
    """Per-link families, labelled with the link's `from` and `to` groups."""
    label_names = ["from_group", "to_group", *names]
    rows = [([str(link.get("from")), str(link.get("to")), *values], link) for link in links]
    connected = GaugeMetricFamily("raftmq_link_connected", "1 while the bridge to the neighbouring group is connected.",
                                  labels=label_names)
    for label_values, link in rows:
        connected.add_metric(label_values, 1 if link.get("state") == "connected" else 0)
    yield connected
    yield from _labelled(GaugeMetricFamily, "raftmq_link_", _LINK_GAUGES, label_names, rows)
    yield from _labelled(CounterMetricFamily, "raftmq_link_", _LINK_COUNTERS, label_names, rows)


def _labelled(kind: type[GaugeMetricFamily | CounterMetricFamily], prefix: str, specs: tuple[tuple[str, str, str], ...],
              label_names: list[str], rows: list[tuple[list[str], dict[str, Any]]]) -> Iterator[Metric]:
    """One family per (suffix, key, help) of `specs`, a sample per row that has a number at `key`."""
    for suffix, key, documentation in specs:
        family = kind(f"{prefix}{suffix}", documentation, labels=label_names)
        for label_values, values in rows:
            if _number(values.get(key)):
                family.add_metric(label_values, values[key])
        yield family


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def metrics_registry(status: Callable[[], dict[str, Any]]) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StatusCollector(status))
    return registry


def exposition(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)
