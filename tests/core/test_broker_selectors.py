"""Selectors on queue subscriptions (the selector language itself is tested in test_selector.py)."""

from __future__ import annotations

from tests.helpers.broker_harness import Harness, bodies, delivers, errors


def make(**overrides: object) -> Harness:
    h = Harness(**overrides)
    h.connect("p")
    h.connect("c")
    return h


def test_queue_consumer_gets_only_matching_messages_and_the_rest_stay() -> None:
    h = make()
    h.subscribe("c", "red", "/queue/a", selector="color = 'red'")
    got = [bodies(h.send("p", "/queue/a", i, {"color": color})) for i, color in enumerate(["red", "blue", "red"])]
    assert got == [[0], [], [2]]
    assert h.stats("/queue/a")["depth"] == 1
    h.connect("c2")
    assert bodies(h.subscribe("c2", "any", "/queue/a")) == [1]


def test_non_matching_messages_go_to_other_consumers_round_robin() -> None:
    h = make()
    h.subscribe("c", "red", "/queue/a", selector="color = 'red'")
    h.connect("c2")
    h.subscribe("c2", "blue", "/queue/a", selector="color = 'blue'")
    h.connect("c3")
    h.subscribe("c3", "all", "/queue/a")
    colors = ["blue", "red", "blue", "green", "red"]
    got = [delivers(h.send("p", "/queue/a", i, {"color": c}))[0].session for i, c in enumerate(colors)]
    assert got == ["c2", "c3", "c2", "c3", "c"]


def test_backlog_past_non_matching_messages() -> None:
    h = make()
    for i in range(10):
        h.send("p", "/queue/a", i, {"n": str(i)})
    assert bodies(h.subscribe("c", "odd", "/queue/a", selector="n / 2 * 2 <> n")) == [1, 3, 5, 7, 9]
    h.connect("c2")
    assert bodies(h.subscribe("c2", "rest", "/queue/a")) == [0, 2, 4, 6, 8]


def test_selector_sees_priority_and_message_id() -> None:
    h = make()
    h.subscribe("c", "urgent", "/queue/a", selector="JMSPriority > 6")
    h.subscribe("c", "first", "/queue/b", selector="JMSMessageID = 'raftmq-2'")
    assert bodies(h.send("p", "/queue/a", 1, {"priority": "9"})) == [1]
    assert bodies(h.send("p", "/queue/b", 2)) == [2]
    assert bodies(h.send("p", "/queue/a", 3, {"priority": "junk"})) == []


def test_invalid_selector_is_rejected() -> None:
    h = make()
    (error,) = errors(h.subscribe("c", "1", "/queue/a", selector="color = ", receipt="r"))
    assert error.receipt_id == "r" and error.message == "invalid selector" and error.detail
    # Nothing was subscribed, and the error ended the session.
    assert h.broker.stats()["destinations"].get("/queue/a", {}).get("consumers", 0) == 0
    assert errors(h.subscribe("c", "1", "/queue/a"))[0].message == "not connected"


def test_blank_selector_matches_everything() -> None:
    h = make()
    h.subscribe("c", "1", "/queue/a", selector="  ")
    assert bodies(h.send("p", "/queue/a", 1)) == [1]


def test_scan_per_pass_is_bounded_by_the_scan_limit() -> None:
    for limit, expected in ((5, []), (20, ["match"])):
        h = make(selector_scan_limit=limit)
        h.connect("c2")
        h.subscribe("c2", "full", "/queue/a", ack="client", prefetch=1)
        h.send("p", "/queue/a", "first")  # c2 is now full
        for i in range(10):
            h.send("p", "/queue/a", i, {"kind": "other"})
        h.send("p", "/queue/a", "match", {"kind": "wanted"})
        assert bodies(h.subscribe("c", "picky", "/queue/a", selector="kind = 'wanted'")) == expected


def test_selective_consumer_on_a_stable_queue_still_gets_new_matches() -> None:
    h = make()
    h.subscribe("c", "red", "/queue/a", selector="color = 'red'", ack="client-individual", prefetch=1)
    for i in range(50):
        h.send("p", "/queue/a", i, {"color": "blue"})
    (d,) = delivers(h.send("p", "/queue/a", "r1", {"color": "red"}))
    assert delivers(h.send("p", "/queue/a", "r2", {"color": "red"})) == []
    # Room again: the pass finds r2 behind 50 blue ones.
    assert bodies(h.ack("c", d.ack_id)) == ["r2"]
    assert h.stats("/queue/a")["depth"] == 50


def test_messages_taken_from_the_middle_do_not_stay_in_the_lanes() -> None:
    h = make()
    for i in range(3_000):
        h.send("p", "/queue/a", i, {"color": "blue" if i % 10 == 0 else "red"})
    # The head is blue: every red one is taken from behind it.
    assert len(bodies(h.subscribe("c", "red", "/queue/a", selector="color = 'red'"))) == 2_700
    store = h.broker.state.queues["/queue/a"]
    assert len(store.ready) == 300
    assert sum(len(lane) for lane in store.lanes) < 300 + 100  # tombstones were compacted away
    h.connect("c2")
    assert bodies(h.subscribe("c2", "all", "/queue/a")) == list(range(0, 3_000, 10))
