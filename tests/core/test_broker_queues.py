"""Queues: storage, competing consumers, prefetch, priorities, message values."""

from __future__ import annotations

import pytest

from raftmq.core.message import Message
from raftmq.protocol.header_block import block_of
from tests.helpers import source_lines
from tests.helpers.broker_harness import Harness, bodies, delivers


def make(**overrides: object) -> Harness:
    h = Harness(**overrides)
    h.connect("p")
    return h


def test_messages_wait_for_a_consumer_and_arrive_in_order() -> None:
    h = make()
    for i in range(5):
        assert h.send("p", "/queue/a", i) == []
    assert h.stats("/queue/a")["depth"] == 5
    h.connect("c")
    assert bodies(h.subscribe("c", "1", "/queue/a")) == [0, 1, 2, 3, 4]
    assert h.stats("/queue/a")["depth"] == 0


def test_round_robin_across_consumers() -> None:
    h = make()
    for name in ("c1", "c2", "c3"):
        h.connect(name)
        h.subscribe(name, "s", "/queue/a")
    got = [d.session for i in range(7) for d in delivers(h.send("p", "/queue/a", i))]
    assert got == ["c1", "c2", "c3", "c1", "c2", "c3", "c1"]


def test_backlog_is_spread_round_robin_when_consumers_are_bounded() -> None:
    h = make()
    for i in range(6):
        h.send("p", "/queue/a", i)
    h.connect("c1")
    h.connect("c2")
    first = delivers(h.subscribe("c1", "s", "/queue/a", ack="client", prefetch=2))
    assert [d.message.body for d in first] == [0, 1]
    second = delivers(h.subscribe("c2", "s", "/queue/a", ack="client", prefetch=2))
    assert [d.message.body for d in second] == [2, 3]
    # c1 acks both: it gets the next two, c2 stays full.
    again = delivers(h.ack("c1", first[1].ack_id))
    assert [(d.session, d.message.body) for d in again] == [("c1", 4), ("c1", 5)]


def test_prefetch_bounds_unacked_deliveries() -> None:
    h = make()
    h.connect("c")
    h.subscribe("c", "1", "/queue/a", ack="client-individual", prefetch=2)
    got = [delivers(h.send("p", "/queue/a", i)) for i in range(4)]
    assert [len(g) for g in got] == [1, 1, 0, 0]
    assert h.stats("/queue/a") == {
        "depth": 2,
        "in_flight": 2,
        "consumers": 1,
        "enqueued": 4,
        "dequeued": 0,
        "expired": 0,
        "dead_lettered": 0,
        "delayed": 0,
        "scheduled": 0, "dropped": 0,
    }
    freed = delivers(h.ack("c", got[0][0].ack_id))
    assert [d.message.body for d in freed] == [2]
    assert h.stats("/queue/a")["dequeued"] == 1


def test_prefetch_zero_means_the_configured_default() -> None:
    h = make(default_prefetch=3)
    h.connect("c")
    h.subscribe("c", "1", "/queue/a", ack="client", prefetch=0)
    for i in range(5):
        h.send("p", "/queue/a", i)
    assert h.stats("/queue/a")["in_flight"] == 3


def test_auto_ack_is_never_blocked_by_prefetch() -> None:
    h = make()
    for i in range(5):
        h.send("p", "/queue/a", i)
    h.connect("c")
    got = delivers(h.subscribe("c", "1", "/queue/a", ack="auto", prefetch=1))
    assert [d.message.body for d in got] == [0, 1, 2, 3, 4]
    assert all(d.ack_id is None for d in got)
    stats = h.stats("/queue/a")
    assert stats["in_flight"] == 0 and stats["dequeued"] == 5


def test_round_robin_skips_a_full_consumer() -> None:
    h = make()
    h.connect("c1")
    h.connect("c2")
    h.subscribe("c1", "s", "/queue/a", ack="client", prefetch=1)
    h.subscribe("c2", "s", "/queue/a", ack="auto")
    got = [d.session for i in range(4) for d in delivers(h.send("p", "/queue/a", i))]
    assert got == ["c1", "c2", "c2", "c2"]


def test_higher_priority_first_and_fifo_within_a_priority() -> None:
    h = make()
    sent = [(0, "9"), (1, "1"), (2, "9"), (3, None), (4, "1"), (5, "5"), (6, None)]
    for body, priority in sent:
        h.send("p", "/queue/a", body, {"priority": priority} if priority else {})
    h.connect("c")
    assert bodies(h.subscribe("c", "1", "/queue/a")) == [0, 2, 5, 3, 6, 1, 4]


@pytest.mark.parametrize(
    ("header", "priority"),
    [("0", 0), ("9", 9), ("15", 9), ("-3", 0), ("abc", 4), ("", 4), ("4.5", 4), (None, 4)],
)
def test_priority_is_parsed_clamped_and_defaulted(header: str | None, priority: int) -> None:
    h = make()
    h.connect("c")
    h.subscribe("c", "1", "/queue/a")
    (d,) = delivers(h.send("p", "/queue/a", b"x", {"priority": header} if header is not None else {}))
    assert d.message.priority == priority


def test_first_priority_header_wins() -> None:
    h = make()
    h.connect("c")
    h.subscribe("c", "1", "/queue/a")
    (d,) = delivers(h.send("p", "/queue/a", b"x", (("priority", "8"), ("priority", "1"))))
    assert d.message.priority == 8


def test_message_values() -> None:
    h = make(broker_name="b7")
    h.connect("c")
    h.subscribe("c", "sub-9", "/queue/a", ack="client")
    headers = (("persistent", "true"), ("JMSXGroupID", "g"), ("color", "red"))
    h.now = 5_000
    (d,) = delivers(h.send("p", "/queue/a", b"body", headers))
    assert d.session == "c" and d.sub_id == "sub-9" and d.destination == "/queue/a"
    assert d.ack_id == "1" and not d.redelivered and d.delivery_count == 1
    assert d.message == Message(
        message_id="b7-1",
        destination="/queue/a",
        headers=block_of(headers),
        body=b"body",
        priority=4,
        expires=0,
        timestamp=5_000,
        group="g",
        persistent=True,
        delivery_count=1,
    )
    (d2,) = delivers(h.send("p", "/queue/a", b"2", {"persistent": "false"}))
    assert d2.message.message_id == "b7-2" and not d2.message.persistent and d2.ack_id == "2"


def test_queues_are_independent() -> None:
    h = make()
    h.connect("c")
    h.subscribe("c", "1", "/queue/a")
    assert h.send("p", "/queue/b", b"x") == []
    assert bodies(h.send("p", "/queue/a", b"y")) == [b"y"]
    assert h.stats("/queue/b")["depth"] == 1


def test_unsubscribed_consumer_gets_nothing_more() -> None:
    h = make()
    h.connect("c1")
    h.connect("c2")
    h.subscribe("c1", "s", "/queue/a")
    h.subscribe("c2", "s", "/queue/a")
    h.unsubscribe("c1", "s")
    got = [d.session for i in range(3) for d in delivers(h.send("p", "/queue/a", i))]
    assert got == ["c2", "c2", "c2"]
    assert h.stats("/queue/a")["consumers"] == 1


def test_many_messages_through_one_queue_keep_order_and_counts() -> None:
    h = make()
    h.connect("c")
    h.subscribe("c", "1", "/queue/a", ack="client", prefetch=10)
    received: list[int] = []
    last_ack = None
    for i in range(500):
        got = delivers(h.send("p", "/queue/a", i, {"priority": str(i % 3)}))
        received += [d.message.body for d in got]
        last_ack = got[-1].ack_id if got else last_ack
        if i % 7 == 0 and last_ack is not None:
            h.ack("c", last_ack)  # cumulative: everything delivered before it too
            last_ack = None
    for _ in range(500):
        if h.stats("/queue/a")["in_flight"] == 0:
            break
        assert last_ack is not None
        got = delivers(h.ack("c", last_ack))
        received += [d.message.body for d in got]
        last_ack = got[-1].ack_id if got else None
    assert sorted(received) == list(range(500))
    stats = h.stats("/queue/a")
    assert stats["dequeued"] == 500 and stats["depth"] == 0 and stats["in_flight"] == 0


def lines_per_200_commands(backlog: int) -> int:
    """The broker's source lines 200 SENDs and 200 ACKs run with `backlog` messages waiting."""
    h = make()
    h.connect("c")
    (delivery,) = delivers(h.subscribe("c", "1", "/queue/a", ack="client-individual", prefetch=1)
                           + h.send("p", "/queue/a", 0))
    for i in range(1, backlog):
        h.send("p", "/queue/a", i, {"priority": str(i % 10)})
    last = [delivery]

    def work() -> None:
        for i in range(200):
            h.send("p", "/queue/a", i)
            (last[0],) = delivers(h.ack("c", last[0].ack_id))

    count = source_lines.lines_run(work)
    assert h.stats("/queue/a")["depth"] == backlog - 1
    return count


@pytest.mark.integration  # the compiled build counts in a process running the source
def test_work_per_command_does_not_grow_with_the_backlog() -> None:
    counts = source_lines.counts("tests.core.test_broker_queues:lines_per_200_commands",
                                 [1_000, 1_900, 10_000, 30_000])
    # In memory the priority levels' fill moves the count by a percent or so; paged, it is the
    # same. Anything that walked the waiting messages per command would add 200 × the backlog.
    small, in_memory, paged, more_paged = counts
    assert abs(in_memory - small) <= small // 20 and more_paged == paged <= small * 3 // 2, counts
