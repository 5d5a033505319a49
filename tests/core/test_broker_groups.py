"""Message groups (JMSXGroupID) and exclusive consumers."""

from __future__ import annotations

import pytest

from tests.helpers import source_lines
from tests.helpers.broker_harness import Harness, delivers


def consumers(*names: str, **subscribe: object) -> Harness:
    h = Harness()
    h.connect("p")
    for name in names:
        h.connect(name)
        h.subscribe(name, "s", "/queue/a", **subscribe)  # type: ignore[arg-type]
    return h


def who(h: Harness, body: object, group: str | None = None) -> list[str]:
    headers = {"JMSXGroupID": group} if group else {}
    return [d.session for d in delivers(h.send("p", "/queue/a", body, headers))]


def test_a_group_sticks_to_one_consumer() -> None:
    h = consumers("c1", "c2", "c3")
    first = {group: who(h, 0, group)[0] for group in ("g1", "g2", "g3")}
    assert sorted(first.values()) == ["c1", "c2", "c3"]
    for i in range(6):
        for group, owner in first.items():
            assert who(h, i, group) == [owner]
    # Ungrouped messages keep going round robin.
    assert who(h, "x") + who(h, "y") + who(h, "z") in (["c1", "c2", "c3"], ["c2", "c3", "c1"], ["c3", "c1", "c2"])


def test_group_moves_when_its_consumer_leaves() -> None:
    h = consumers("c1", "c2", ack="client-individual")
    owner = who(h, 1, "g")[0]
    assert who(h, 2, "g") == [owner]
    other = "c2" if owner == "c1" else "c1"
    returned = delivers(h.disconnect(owner))
    # Its unacked group messages move, in order, to the other consumer, and the group with them.
    assert [(d.session, d.message.body, d.redelivered) for d in returned] == [(other, 1, True), (other, 2, True)]
    assert who(h, 3, "g") == [other]


def test_group_messages_wait_for_their_busy_owner_while_others_flow() -> None:
    h = consumers("c1", "c2", ack="client-individual", prefetch=1)
    (first,) = delivers(h.send("p", "/queue/a", 1, {"JMSXGroupID": "g"}))
    assert first.session == "c1"
    assert who(h, 2, "g") == []  # c1 is full; c2 must not take it
    assert who(h, 3) == ["c2"]  # ungrouped messages pass the waiting one
    assert [(d.session, d.message.body) for d in delivers(h.ack("c1", first.ack_id))] == [("c1", 2)]


def test_unsubscribe_releases_groups() -> None:
    h = consumers("c1", "c2")
    owner = who(h, 1, "g")[0]
    h.unsubscribe(owner, "s")
    other = "c2" if owner == "c1" else "c1"
    assert who(h, 2, "g") == [other]
    h.subscribe(owner, "s", "/queue/a")
    assert who(h, 3, "g") == [other]


def test_only_the_first_exclusive_consumer_receives() -> None:
    h = consumers("c1")
    for name in ("x1", "x2"):
        h.connect(name)
        h.subscribe(name, "s", "/queue/a", exclusive=True)
    h.connect("c2")
    h.subscribe("c2", "s", "/queue/a")
    assert [who(h, i)[0] for i in range(4)] == ["x1"] * 4
    h.disconnect("x1")
    assert [who(h, i)[0] for i in range(2)] == ["x2"] * 2
    h.unsubscribe("x2", "s")
    assert sorted(who(h, 0) + who(h, 1)) == ["c1", "c2"]


def test_backlog_waits_for_a_full_exclusive_consumer() -> None:
    h = consumers("c1")
    h.connect("x")
    h.subscribe("x", "s", "/queue/a", exclusive=True, ack="client", prefetch=2)
    assert [who(h, i) for i in range(4)] == [["x"], ["x"], [], []]
    assert h.stats("/queue/a")["depth"] == 2
    # When the exclusive consumer goes, the backups take everything, redelivered first.
    returned = delivers(h.disconnect("x"))
    assert [(d.session, d.message.body, d.redelivered) for d in returned] == [
        ("c1", 0, True),
        ("c1", 1, True),
        ("c1", 2, False),
        ("c1", 3, False),
    ]


def test_exclusive_consumer_with_a_selector_leaves_others_waiting() -> None:
    h = consumers("c1")
    h.connect("x")
    h.subscribe("x", "s", "/queue/a", exclusive=True, selector="color = 'red'")
    assert who(h, 1) == []
    assert [d.session for d in delivers(h.send("p", "/queue/a", 2, {"color": "red"}))] == ["x"]
    assert h.stats("/queue/a")["depth"] == 1


def lines_per_200_owner_acks(backlog: int) -> int:
    """The broker's source lines 200 ACKs of a group's owner run with `backlog` messages of its
    group waiting and an idle consumer that may take none of them."""
    h = consumers("owner", ack="client-individual", prefetch=1)
    (delivery,) = delivers(h.send("p", "/queue/a", 0, {"JMSXGroupID": "g"}))
    for i in range(1, backlog):
        h.send("p", "/queue/a", i, {"JMSXGroupID": "g"})
    h.connect("idle")
    h.subscribe("idle", "s", "/queue/a")  # always has room, may take none of them
    received = [delivery.message.body]
    last = [delivery]

    def work() -> None:
        for _ in range(200):
            (last[0],) = delivers(h.ack("owner", last[0].ack_id))
            received.append(last[0].message.body)

    count = source_lines.lines_run(work)
    assert received == list(range(201))
    return count


@pytest.mark.integration  # the compiled build counts in a process running the source
def test_acks_of_a_busy_group_owner_do_not_rescan_the_backlog() -> None:
    # Each ACK wakes only the owner, whose pass stops once it is full again. A pass that looked
    # past the whole waiting group on every ACK would run lines per waiting message.
    counts = source_lines.counts("tests.core.test_broker_groups:lines_per_200_owner_acks", [400, 1_900])
    assert counts[0] > 0 and counts[1] == counts[0], counts


def test_leaving_group_owner_without_deliveries_frees_its_waiting_group() -> None:
    h = Harness()
    h.connect("p")
    h.connect("red")
    h.subscribe("red", "s", "/queue/a", selector="color = 'red'")
    h.connect("other")
    h.subscribe("other", "s", "/queue/a", ack="client-individual", prefetch=1)
    h.send("p", "/queue/a", "busy")  # round robin: "red" cannot take it, "other" does and is full
    assert [d.session for d in delivers(h.send("p", "/queue/a", 1, {"JMSXGroupID": "g", "color": "red"}))] == ["red"]
    h.send("p", "/queue/a", 2, {"JMSXGroupID": "g", "color": "blue"})  # owner "red" can never take it
    (late,) = delivers(h.send("p", "/queue/a", "x", {"color": "red"}))
    assert late.session == "red"
    h.disconnect("other")  # "busy" comes back; nobody but "red" is left
    h.connect("other")
    h.subscribe("other", "s", "/queue/a", ack="client-individual", prefetch=5)
    # "red" still owns g: the blue group message waits, "busy" flows.
    assert h.stats("/queue/a")["depth"] == 1
    # "red" leaves with nothing in flight: the group is free, and the blue message goes.
    assert [(d.session, d.message.body) for d in delivers(h.unsubscribe("red", "s"))] == [("other", 2)]


def test_leaving_exclusive_consumer_without_deliveries_lets_the_others_in() -> None:
    h = Harness()
    h.connect("p")
    h.connect("c")
    h.subscribe("c", "s", "/queue/a")
    h.connect("x")
    h.subscribe("x", "s", "/queue/a", exclusive=True, selector="color = 'red'")
    assert delivers(h.send("p", "/queue/a", 1, {"color": "blue"})) == []
    assert [(d.session, d.message.body) for d in delivers(h.unsubscribe("x", "s"))] == [("c", 1)]
