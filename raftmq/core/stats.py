"""The counters a broker reports (`Broker.stats`): read-only, part of the replicated state, so
every member that applied the same commands reports the same values."""

from __future__ import annotations

from typing import Any

from raftmq.core.config import CoreConfig
from raftmq.core.exactly_once import HELD_SESSION
from raftmq.core.state import BrokerState


def broker_stats(state: BrokerState, config: CoreConfig) -> dict[str, Any]:
    """Counters per destination, the session count (connections the group serves), and
    the dead-letter and expiry queues' depth with the totals sent there, and what is kept for
    MQTT clients (`mqtt_stats`). Read-only.

    The counters are part of the replicated state (and of snapshots), so every member
    reports the same values once it has applied the same commands: `enqueued` counts
    messages stored (a topic: published), `dequeued` messages consumed for good (acked,
    or handed to an auto-ack consumer), `dead_lettered` / `expired` messages moved out; in a
    cluster of groups, `forwarded` messages sent on towards other groups (not stored here) and
    `arrived` messages stored here that came from another group (counted in `enqueued`)."""
    destinations: dict[str, dict[str, int]] = {}
    for destination, store in state.queues.items():
        destinations[destination] = {
            "depth": store.depth,
            "in_flight": store.in_flight,
            "consumers": len(store.consumers),
            "enqueued": store.enqueued,
            "dequeued": store.dequeued,
            "expired": store.expired,
            "dead_lettered": store.dead_lettered,
            "delayed": len(store.delayed),
        }
    for destination, topic in state.topics.items():
        totals = {"depth": 0, "in_flight": 0, "consumers": 0, "enqueued": topic.published, **topic.retired,
                  "delayed": 0}
        for sub in topic.subs:
            store = sub.store
            totals["depth"] += store.depth
            totals["delayed"] += len(store.delayed)
            totals["in_flight"] += store.in_flight
            totals["consumers"] += len(store.consumers)
            totals["dequeued"] += store.dequeued
            totals["expired"] += store.expired
            totals["dead_lettered"] += store.dead_lettered
        totals["subscriptions"] = len(topic.subs)
        totals["durable"] = sum(1 for sub in topic.subs if sub.durable_name is not None)
        destinations[destination] = totals
    scheduled: dict[str, int] = {}
    for job in state.jobs.values():
        scheduled[job.destination] = scheduled.get(job.destination, 0) + 1
    clustered = config.cluster is not None
    for destination, counters in destinations.items():
        counters["scheduled"] = scheduled.get(destination, 0)
        counters["dropped"] = state.dropped.get(destination, 0)
        if clustered:  # sent on towards other groups; stored here from other groups
            counters["forwarded"] = state.cluster.sent_on.get(destination, 0)
            counters["arrived"] = state.cluster.arrived.get(destination, 0)
    return {
        "sessions": len(state.sessions),
        # Scheduled messages not yet published, by destination (one may not exist yet).
        "scheduled": scheduled,
        "destinations": destinations,
        # Where dead messages pile up and how many died, without knowing the queue's name.
        "dead_letter": _side_queue(config.dead_letter_queue, "dead_lettered", destinations),
        "expiry": _side_queue(config.expiry_queue, "expired", destinations),
        "mqtt": mqtt_stats(state),
    }


def mqtt_stats(state: BrokerState) -> dict[str, int]:
    """What the group keeps for MQTT clients: retained messages, wills of open sessions, sessions
    clients keep (each holds a key of its own) and QoS 2 publications not yet released
    (raftmq.core.retained, raftmq.core.wills, raftmq.core.exactly_once)."""
    kept = sum(1 for key in state.once if key.endswith(f":{HELD_SESSION}"))
    return {"retained": len(state.retained), "wills": len(state.wills), "kept_sessions": kept,
            "qos2_unreleased": len(state.once) - kept}

def _side_queue(name: str, counter: str, destinations: dict[str, dict[str, int]]) -> dict[str, Any]:
    queue = destinations.get(name)
    return {
        "destination": name,
        "depth": queue["depth"] if queue is not None else 0,
        counter: sum(counters.get(counter, 0) for counters in destinations.values()),
    }
