"""Message expiry: never delivered once expired, moved to the expiry queue by dispatch or Tick."""

from __future__ import annotations

import pytest

from raftmq.protocol.header_block import header_dict
from tests.helpers import source_lines
from tests.helpers.broker_harness import Harness, bodies, delivers

EXPIRY = "/queue/ExpiryQueue"


def make(**overrides: object) -> Harness:
    h = Harness(**overrides)
    h.connect("p")
    h.connect("c")
    return h


def test_dispatch_moves_expired_messages_to_the_expiry_queue() -> None:
    h = make()
    h.send("p", "/queue/a", 1, {"expires": "1500", "color": "red"})
    h.send("p", "/queue/a", 2, {"expires": "3000"})
    h.send("p", "/queue/a", 3)
    h.now = 2_000
    assert bodies(h.subscribe("c", "1", "/queue/a")) == [2, 3]
    stats = h.stats("/queue/a")
    assert stats["expired"] == 1 and stats["dequeued"] == 2 and stats["depth"] == 0
    (moved,) = delivers(h.subscribe("c", "x", EXPIRY))
    message = moved.message
    assert message.body == 1 and message.destination == EXPIRY and message.expires == 0
    assert header_dict(message.headers) == {
        "color": "red", "original-destination": "/queue/a", "dead_letter_reason": "expired",
        "dead_letter_deliveries": "0",
        "dead_letter_cause": "its expires time (1500, ms since the epoch) passed after 0 deliveries"}
    assert moved.delivery_count == 1 and not moved.redelivered


def test_expires_at_exactly_now_is_expired_and_zero_never_expires() -> None:
    h = make()
    h.send("p", "/queue/a", 1, {"expires": "1000"})
    h.send("p", "/queue/a", 2, {"expires": "0"})
    h.send("p", "/queue/a", 3, {"expires": "junk"})
    h.tick(10**12)
    assert bodies(h.subscribe("c", "1", "/queue/a")) == [2, 3]
    assert h.stats("/queue/a")["expired"] == 1


def test_tick_sweeps_queues_without_consumers() -> None:
    h = make()
    for i in range(5):
        h.send("p", "/queue/a", i, {"expires": str(1_100 + 100 * i)})
    assert h.tick(1_250) == []
    assert h.stats("/queue/a")["depth"] == 3 and h.stats(EXPIRY)["depth"] == 2
    h.tick(5_000)
    assert h.stats("/queue/a")["depth"] == 0 and h.stats("/queue/a")["expired"] == 5
    assert bodies(h.subscribe("c", "x", EXPIRY)) == [0, 1, 2, 3, 4]


def test_tick_delivers_to_an_expiry_queue_consumer() -> None:
    h = make()
    h.subscribe("c", "x", EXPIRY)
    h.send("p", "/queue/a", 1, {"expires": "1500"})
    effects = h.tick(1_600)
    assert [(d.destination, d.message.body) for d in delivers(effects)] == [(EXPIRY, 1)]


def test_in_flight_messages_expire_only_after_they_come_back() -> None:
    h = make()
    h.subscribe("c", "1", "/queue/a", ack="client-individual")
    (d,) = delivers(h.send("p", "/queue/a", 1, {"expires": "1500"}))
    h.tick(2_000)
    assert h.stats("/queue/a")["in_flight"] == 1 and h.stats("/queue/a")["expired"] == 0
    assert h.nack("c", d.ack_id) == []  # back in the queue, expired: not redelivered
    assert h.stats("/queue/a")["expired"] == 1
    assert h.stats(EXPIRY)["depth"] == 1


def test_an_acked_message_does_not_expire_later() -> None:
    h = make()
    h.subscribe("c", "1", "/queue/a", ack="client-individual")
    (d,) = delivers(h.send("p", "/queue/a", 1, {"expires": "1500"}))
    h.ack("c", d.ack_id)
    h.tick(2_000)
    assert h.stats("/queue/a")["expired"] == 0
    assert EXPIRY not in h.broker.stats()["destinations"]


def test_durable_topic_copies_expire_too() -> None:
    h = make()
    h.subscribe("c", "s", "/topic/t", durable_name="dur")
    h.disconnect("c")
    h.send("p", "/topic/t", 1, {"expires": "1500"})
    h.send("p", "/topic/t", 2)
    h.tick(2_000)
    stats = h.stats("/topic/t")
    assert stats["expired"] == 1 and stats["depth"] == 1
    h.connect("c")
    assert bodies(h.subscribe("c", "s", "/topic/t", durable_name="dur")) == [2]
    (moved,) = delivers(h.subscribe("c", "x", EXPIRY))
    assert header_dict(moved.message.headers)["original-destination"] == "/topic/t"


def test_messages_sent_to_the_expiry_and_dead_letter_queues_never_expire() -> None:
    h = make()
    h.send("p", EXPIRY, 1, {"expires": "1100"})
    h.send("p", "/queue/DLQ", 2, {"expires": "1100"})
    h.tick(10**9)
    assert h.stats(EXPIRY)["depth"] == 1 and h.stats(EXPIRY)["expired"] == 0
    assert h.stats("/queue/DLQ")["depth"] == 1


def test_expired_message_behind_a_waiting_one_is_met_by_dispatch() -> None:
    h = make(selector_scan_limit=100)
    h.subscribe("c", "1", "/queue/a", selector="color = 'green'")
    h.send("p", "/queue/a", 1, {"color": "blue"})
    h.send("p", "/queue/a", 2, {"color": "red", "expires": "1500"})
    h.now = 2_000
    # A new subscription triggers a full pass: it looks past the blue one and meets the expired red one.
    h.connect("c2")
    h.subscribe("c2", "1", "/queue/a", ack="client", prefetch=1, selector="color = 'green'")
    assert h.stats("/queue/a")["expired"] == 1 and h.stats("/queue/a")["depth"] == 1


def lines_a_tick_runs(stored: int) -> int:
    """The broker's source lines that 50 Ticks run with `stored` unexpired messages ready."""
    h = make()
    for i in range(stored):
        h.send("p", "/queue/a", i, {"expires": str(10**12)})
    count = source_lines.lines_run(lambda: [h.tick(2_000 + step) for step in range(50)])
    assert h.stats("/queue/a")["depth"] == stored
    return count


@pytest.mark.integration  # the compiled build counts in a process running the source
def test_tick_costs_nothing_per_unexpired_message() -> None:
    counts = source_lines.counts("tests.core.test_broker_expiry:lines_a_tick_runs", [20, 2_000, 10_000, 30_000])
    # In memory (up to 2 × page_size ready) and paged (8 or 28 sealed pages and an open one): a
    # pass over the stored messages, or over the pages, would run more lines the more are stored.
    few, in_memory, paged, more_paged = counts
    assert few > 0 and in_memory == few and more_paged == paged, counts


def test_expiry_index_stays_bounded_when_messages_are_consumed_before_expiring() -> None:
    h = make()
    h.subscribe("c", "1", "/queue/a", ack="client-individual", prefetch=1)
    for i in range(20_000):
        (d,) = delivers(h.send("p", "/queue/a", i, {"expires": str(10**12)}))
        h.ack("c", d.ack_id)
    # Each message was indexed once and delivered at once: the stale entries were pruned.
    assert len(h.broker.state.expiry_heap) < 5_000
