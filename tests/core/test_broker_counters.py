"""The monitoring counters of the core: enqueued / dequeued / dead-lettered per destination,
connected sessions, the dead-letter and expiry queues' summaries, and their survival across
a snapshot (followers and restarted members must report the same numbers)."""

from __future__ import annotations

import msgpack

from raftmq.core.broker import Broker
from tests.helpers.broker_harness import Harness, delivers


def test_queue_counts_stored_then_settled_messages() -> None:
    h = Harness(max_delivery_count=2)
    h.connect("p")
    h.connect("c")
    for body in range(4):
        h.send("p", "/queue/a", body)
    assert h.stats("/queue/a") == {
        "depth": 4, "in_flight": 0, "consumers": 0, "enqueued": 4, "dequeued": 0, "expired": 0, "dead_lettered": 0,
        "delayed": 0, "scheduled": 0, "dropped": 0,
    }
    got = delivers(h.subscribe("c", "s", "/queue/a", ack="client-individual", prefetch=4))
    assert h.stats("/queue/a")["in_flight"] == 4 and h.stats("/queue/a")["dequeued"] == 0  # delivered is not dequeued
    h.ack("c", got[0].ack_id)
    h.ack("c", got[1].ack_id)
    assert h.stats("/queue/a")["dequeued"] == 2
    # A NACK returns the message: neither dequeued nor enqueued again.
    (again,) = delivers(h.nack("c", got[2].ack_id))
    stats = h.stats("/queue/a")
    assert stats["enqueued"] == 4 and stats["dequeued"] == 2 and stats["in_flight"] == 2
    # Its second NACK reaches max_delivery_count: to the DLQ.
    h.nack("c", again.ack_id)
    stats = h.stats("/queue/a")
    assert stats["dead_lettered"] == 1 and stats["in_flight"] == 1 and stats["dequeued"] == 2
    assert h.stats("/queue/DLQ")["enqueued"] == 1 and h.stats("/queue/DLQ")["depth"] == 1
    summary = h.broker.stats()
    assert summary["dead_letter"] == {"destination": "/queue/DLQ", "depth": 1, "dead_lettered": 1}
    assert summary["sessions"] == 2


def test_auto_ack_consumption_counts_as_dequeued_at_delivery() -> None:
    h = Harness()
    h.connect("c")
    h.subscribe("c", "s", "/queue/a")
    h.send("c", "/queue/a", b"x")
    h.send("c", "/queue/a", b"y")
    stats = h.stats("/queue/a")
    assert stats["enqueued"] == 2 and stats["dequeued"] == 2 and stats["in_flight"] == 0 and stats["depth"] == 0


def test_topic_counts_publishes_and_every_subscriptions_consumption() -> None:
    h = Harness()
    h.connect("c")
    h.subscribe("c", "s1", "/topic/t")
    h.subscribe("c", "s2", "/topic/t", ack="client-individual")
    effects = h.send("c", "/topic/t", b"x")
    assert h.stats("/topic/t")["enqueued"] == 1 and h.stats("/topic/t")["dequeued"] == 1  # s1 (auto)
    pending = [d for d in delivers(effects) if d.ack_id is not None]
    h.ack("c", pending[0].ack_id)
    assert h.stats("/topic/t")["dequeued"] == 2
    h.unsubscribe("c", "s2")  # a gone subscription's counts stay with the topic
    assert h.stats("/topic/t")["dequeued"] == 2


def test_expired_messages_are_counted_and_land_in_the_expiry_queue() -> None:
    h = Harness()
    h.connect("p")
    h.send("p", "/queue/a", b"x", {"expires": "1500"})
    h.send("p", "/queue/a", b"y")
    h.tick(2_000)
    summary = h.broker.stats()
    assert summary["destinations"]["/queue/a"]["expired"] == 1
    assert summary["expiry"] == {"destination": "/queue/ExpiryQueue", "depth": 1, "expired": 1}
    assert summary["dead_letter"] == {"destination": "/queue/DLQ", "depth": 0, "dead_lettered": 0}


def test_sessions_count_connections_and_disconnects() -> None:
    h = Harness()
    for name in ("a", "b", "c"):
        h.connect(name)
    h.connect("a")  # a retried Connect is not a second connection
    assert h.broker.stats()["sessions"] == 3
    h.disconnect("b")
    assert h.broker.stats()["sessions"] == 2


def test_counters_survive_snapshot_and_restore() -> None:
    h = Harness(max_delivery_count=1)
    h.connect("c")
    got = delivers(h.subscribe("c", "s", "/queue/a", ack="client-individual"))
    for body in range(3):
        got += delivers(h.send("c", "/queue/a", body))
    h.ack("c", got[0].ack_id)
    h.nack("c", got[1].ack_id)  # dead-lettered at once (max_delivery_count 1)
    data = msgpack.unpackb(msgpack.packb(h.broker.snapshot(), use_bin_type=True), raw=False)
    restored = Broker.restore(data, h.config)
    assert restored.stats() == h.broker.stats()
    stats = restored.stats()["destinations"]["/queue/a"]
    assert (stats["enqueued"], stats["dequeued"], stats["dead_lettered"]) == (3, 1, 1)
