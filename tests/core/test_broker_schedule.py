"""Scheduled delivery (ActiveMQ's AMQ_SCHEDULED_* headers, Artemis's _AMQ_SCHED_DELIVERY) and
the NACK redelivery delay with back-off: released by committed time only, once per
occurrence, through snapshots, deduplicated when scheduled."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from raftmq.core.broker import Broker
from raftmq.core.snapshot import body_refs
from tests.helpers.broker_harness import Harness, bodies, delivers, errors


def make(**overrides: object) -> Harness:
    h = Harness(**overrides)
    h.connect("p")
    h.connect("c")
    return h


def test_a_delayed_message_waits_for_committed_time_then_is_delivered_once() -> None:
    h = make()
    h.subscribe("c", "s", "/queue/q")
    assert delivers(h.send("p", "/queue/q", b"later", {"AMQ_SCHEDULED_DELAY": "5000"})) == []
    assert h.broker.next_due() == h.now + 5000
    assert h.stats("/queue/q")["depth"] == 0
    assert delivers(h.tick(h.now + 4999)) == []
    got = delivers(h.tick(h.now + 1))
    assert [d.message.body for d in got] == [b"later"]
    # The delivered message carries none of the schedule headers (a forward must not schedule again).
    assert not any(name.startswith("AMQ_SCHEDULED") for name, _ in got[0].message.headers)
    assert delivers(h.tick(h.now + 60_000)) == [] and h.broker.next_due() is None
    h.broker.check_invariants()


def test_period_and_repeat_deliver_repeat_plus_one_copies_period_apart() -> None:
    h = make()
    h.subscribe("c", "s", "/topic/t")
    start = h.now
    h.send("p", "/topic/t", b"x",
           {"AMQ_SCHEDULED_DELAY": "100", "AMQ_SCHEDULED_PERIOD": "1000", "AMQ_SCHEDULED_REPEAT": "2"})
    times = []
    for now in range(start, start + 5000, 50):
        if delivers(h.tick(now)):
            times.append(now - start)
    assert times == [100, 1100, 2100]


def test_an_absolute_delivery_time_and_a_late_tick_fire_once_each() -> None:
    h = make()
    h.subscribe("c", "s", "/queue/q")
    h.send("p", "/queue/q", b"at", {"_AMQ_SCHED_DELIVERY": str(h.now + 10_000)})
    # A Tick long after (the group was down): the occurrence fires once, late.
    assert bodies(h.tick(h.now + 3_600_000)) == [b"at"]
    assert bodies(h.tick(h.now + 1)) == []


def test_a_cron_job_fires_at_each_time_its_line_names_in_utc() -> None:
    h = make()
    h.now = int(datetime(2026, 1, 1, 12, 0, 30, tzinfo=UTC).timestamp() * 1000)
    h.connect("p")
    h.connect("c")
    h.subscribe("c", "s", "/queue/q")
    h.send("p", "/queue/q", b"tick", {"AMQ_SCHEDULED_CRON": "*/5 * * * *"})
    minute = 60_000
    start = int(datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC).timestamp() * 1000)
    fired = [m for m in range(1, 21) if bodies(h.tick(start + m * minute))]
    assert fired == [5, 10, 15, 20]


def test_a_resent_scheduled_send_with_a_duplicate_id_schedules_nothing_twice() -> None:
    h = make()
    h.subscribe("c", "s", "/queue/q")
    for _ in range(2):
        h.send("p", "/queue/q", b"once", {"AMQ_SCHEDULED_DELAY": "10", "_AMQ_DUPL_ID": "abc"})
    assert bodies(h.tick(h.now + 10)) == [b"once"]


def test_a_schedule_survives_a_snapshot_and_its_body_is_referenced() -> None:
    h = make()
    h.send("p", "/queue/q", b"kept",
           {"AMQ_SCHEDULED_DELAY": "100", "AMQ_SCHEDULED_PERIOD": "100", "AMQ_SCHEDULED_REPEAT": "1"})
    h.tick(h.now + 100)  # the first of two occurrences
    snapshot = h.broker.snapshot()
    assert list(body_refs(snapshot)) == list(h.broker.body_refs()) == [b"kept", b"kept"]
    h.broker = Broker.restore(snapshot, h.config)
    h.broker.check_invariants()
    h.tick(h.now + 100)
    assert h.drain("c", "/queue/q") == [b"kept", b"kept"]
    assert h.broker.next_due() is None


def test_a_scheduled_send_in_a_transaction_is_scheduled_at_commit() -> None:
    h = make()
    h.subscribe("c", "s", "/queue/q")
    h.begin("p", "t")
    h.send("p", "/queue/q", b"tx", {"AMQ_SCHEDULED_DELAY": "50"}, transaction="t")
    assert h.broker.next_due() is None
    h.now += 1000
    h.commit("p", "t")
    assert h.broker.next_due() == h.now + 50


@pytest.mark.parametrize("headers, detail", [
    ({"AMQ_SCHEDULED_DELAY": "soon"}, "not a whole number"),
    ({"AMQ_SCHEDULED_DELAY": "-5"}, "outside"),
    ({"AMQ_SCHEDULED_REPEAT": "3"}, "need an AMQ_SCHEDULED_PERIOD"),
    ({"AMQ_SCHEDULED_CRON": "every minute"}, "cron line"),
    ({"AMQ_SCHEDULED_CRON": "* * * * *", "_AMQ_SCHED_DELIVERY": "5"}, "both name"),
])
def test_a_schedule_that_makes_no_sense_is_refused_by_name(headers: dict[str, str], detail: str) -> None:
    h = make()
    refused = errors(h.send("p", "/queue/q", b"x", headers))
    assert len(refused) == 1 and refused[0].message == "invalid schedule" and detail in refused[0].detail
    assert h.broker.next_due() is None


def test_a_nack_waits_out_a_growing_redelivery_delay_capped() -> None:
    h = make(redelivery_delay_ms=100, redelivery_multiplier=2.0, max_redelivery_delay_ms=300, max_delivery_count=10)
    h.subscribe("c", "s", "/queue/q", ack="client-individual")
    [first] = delivers(h.send("p", "/queue/q", b"m"))
    waits = []
    delivery = first
    for _ in range(4):
        h.nack("c", delivery.ack_id)
        assert h.stats("/queue/q")["depth"] == 0  # held back, not ready
        h.broker.check_invariants()
        due = h.broker.next_due()
        assert due is not None
        waits.append(due - h.now)
        assert delivers(h.tick(due - 1)) == []
        [delivery] = delivers(h.tick(due))
        assert delivery.redelivered
    assert waits == [100, 200, 300, 300]


def test_a_held_back_message_survives_a_snapshot_and_dead_letters_at_the_limit() -> None:
    h = make(redelivery_delay_ms=1000, max_delivery_count=2)
    h.subscribe("c", "s", "/queue/q", ack="client-individual")
    [d] = delivers(h.send("p", "/queue/q", b"m"))
    h.nack("c", d.ack_id)
    h.broker = Broker.restore(h.broker.snapshot(), h.config)
    h.broker.check_invariants()
    [d] = delivers(h.tick(h.now + 1000))
    h.nack("c", d.ack_id)  # the second delivery: at the limit, no delay
    assert h.stats("/queue/DLQ")["depth"] == 1 and h.broker.next_due() is None
    h.broker.check_invariants()


def test_a_topic_subscription_dropped_while_a_message_is_held_back_discards_it() -> None:
    h = make(redelivery_delay_ms=1000)
    h.subscribe("c", "s", "/topic/t", ack="client-individual")
    [d] = delivers(h.send("p", "/topic/t", b"m"))
    h.nack("c", d.ack_id)
    h.unsubscribe("c", "s")
    h.broker.check_invariants()
    assert delivers(h.tick(h.now + 1000)) == [] and h.broker.next_due() is None
