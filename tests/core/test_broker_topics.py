"""Topics: multicast copies, durable subscriptions, selectors at copy time."""

from __future__ import annotations

from tests.helpers.broker_harness import Harness, bodies, delivers, errors, receipts


def make() -> Harness:
    h = Harness()
    h.connect("p")
    return h


def test_every_subscription_gets_its_own_copy() -> None:
    h = make()
    h.connect("c1")
    h.connect("c2")
    h.subscribe("c1", "s", "/topic/t", ack="client-individual")
    h.subscribe("c2", "s", "/topic/t", ack="auto")
    h.subscribe("c2", "s2", "/topic/t", ack="client")
    got = delivers(h.send("p", "/topic/t", b"m"))
    assert [(d.session, d.sub_id, d.destination) for d in got] == [
        ("c1", "s", "/topic/t"),
        ("c2", "s", "/topic/t"),
        ("c2", "s2", "/topic/t"),
    ]
    assert len({d.message.message_id for d in got}) == 1
    # The copies are separate values: redelivering one does not touch the others.
    (again,) = delivers(h.nack("c1", got[0].ack_id))
    assert again.delivery_count == 2 and got[2].message.delivery_count == 1
    stats = h.stats("/topic/t")
    assert stats["enqueued"] == 1 and stats["consumers"] == 3 and stats["subscriptions"] == 3
    assert stats["in_flight"] == 2 and stats["dequeued"] == 1


def test_topic_without_subscriptions_drops_the_message() -> None:
    h = make()
    assert receipts(h.send("p", "/topic/t", b"lost", receipt="r")) == ["r"]
    h.connect("c")
    assert h.subscribe("c", "s", "/topic/t") == []
    assert bodies(h.send("p", "/topic/t", b"kept")) == [b"kept"]
    assert h.stats("/topic/t")["enqueued"] == 2


def test_topic_subscription_is_bounded_by_its_prefetch() -> None:
    h = make()
    h.connect("c")
    h.subscribe("c", "s", "/topic/t", ack="client-individual", prefetch=1)
    first = delivers(h.send("p", "/topic/t", 1))
    assert delivers(h.send("p", "/topic/t", 2)) == []
    assert h.stats("/topic/t")["depth"] == 1
    assert bodies(h.ack("c", first[0].ack_id)) == [2]


def test_non_durable_subscription_ends_with_its_messages() -> None:
    h = make()
    h.connect("c")
    h.subscribe("c", "s", "/topic/t", ack="client-individual", prefetch=1)
    h.send("p", "/topic/t", 1)
    h.send("p", "/topic/t", 2)
    h.unsubscribe("c", "s")
    stats = h.stats("/topic/t")
    assert stats["subscriptions"] == 0 and stats["depth"] == 0 and stats["in_flight"] == 0
    assert stats["discarded"] == 2
    h.subscribe("c", "s", "/topic/t")
    assert h.stats("/topic/t")["depth"] == 0


def test_durable_subscription_collects_while_inactive_and_resumes_from_another_session() -> None:
    h = make()
    h.connect("c1")
    h.subscribe("c1", "s", "/topic/t", ack="client-individual", durable_name="dur")
    (first,) = delivers(h.send("p", "/topic/t", 1))
    h.disconnect("c1")  # 1 was not acked: it goes back to the subscription
    h.send("p", "/topic/t", 2)
    h.send("p", "/topic/t", 3)
    stats = h.stats("/topic/t")
    assert stats["consumers"] == 0 and stats["subscriptions"] == 1 and stats["durable"] == 1 and stats["depth"] == 3
    h.connect("c2")
    got = delivers(h.subscribe("c2", "other-id", "/topic/t", ack="client-individual", durable_name="dur"))
    assert [(d.session, d.sub_id, d.message.body, d.redelivered) for d in got] == [
        ("c2", "other-id", 1, True),
        ("c2", "other-id", 2, False),
        ("c2", "other-id", 3, False),
    ]
    assert got[0].message.message_id == first.message.message_id


def test_unsubscribe_keeps_a_durable_subscription_unless_dropped() -> None:
    h = make()
    h.connect("c")
    h.subscribe("c", "s", "/topic/t", durable_name="dur")
    h.unsubscribe("c", "s")
    h.send("p", "/topic/t", 1)
    assert bodies(h.subscribe("c", "s", "/topic/t", durable_name="dur")) == [1]
    h.unsubscribe("c", "s", drop_durable=True)
    h.send("p", "/topic/t", 2)
    assert h.stats("/topic/t")["subscriptions"] == 0
    assert bodies(h.subscribe("c", "s", "/topic/t", durable_name="dur")) == []


def test_durable_name_in_use_is_rejected() -> None:
    h = make()
    h.connect("c1")
    h.connect("c2")
    h.subscribe("c1", "s", "/topic/t", durable_name="dur")
    assert errors(h.subscribe("c2", "s", "/topic/t", durable_name="dur", receipt="r"))[0].receipt_id == "r"
    assert errors(h.subscribe("c1", "s2", "/topic/t", durable_name="dur"))


def test_durable_resubscribed_with_another_selector_or_topic_starts_afresh() -> None:
    h = make()
    h.connect("c")
    h.subscribe("c", "s", "/topic/t", durable_name="dur")
    h.unsubscribe("c", "s")
    h.send("p", "/topic/t", 1)
    h.subscribe("c", "s", "/topic/t", durable_name="dur", selector="color = 'red'")
    assert h.stats("/topic/t")["depth"] == 0
    h.unsubscribe("c", "s")
    h.send("p", "/topic/t", 2, {"color": "red"})
    h.send("p", "/topic/t", 3, {"color": "blue"})
    assert bodies(h.subscribe("c", "s", "/topic/u", durable_name="dur")) == []
    assert h.stats("/topic/t")["subscriptions"] == 0


def test_durable_resume_with_another_ack_mode() -> None:
    h = make()
    h.connect("c")
    h.subscribe("c", "s", "/topic/t", ack="auto", durable_name="dur")
    h.unsubscribe("c", "s")
    h.send("p", "/topic/t", 1)
    (d,) = delivers(h.subscribe("c", "s", "/topic/t", ack="client", durable_name="dur"))
    assert d.ack_id is not None
    assert h.ack("c", d.ack_id) == []


def test_selector_is_evaluated_when_the_message_is_copied() -> None:
    h = make()
    h.connect("c")
    h.subscribe("c", "red", "/topic/t", selector="color = 'red'")
    h.subscribe("c", "all", "/topic/t")
    got = delivers(h.send("p", "/topic/t", 1, {"color": "red"}) + h.send("p", "/topic/t", 2, {"color": "blue"}))
    assert [(d.sub_id, d.message.body) for d in got] == [("red", 1), ("all", 1), ("all", 2)]


def test_inactive_durable_with_selector_only_collects_matches() -> None:
    h = make()
    h.connect("c")
    h.subscribe("c", "s", "/topic/t", durable_name="dur", selector="n > 1")
    h.disconnect("c")
    for n in range(4):
        h.send("p", "/topic/t", n, {"n": str(n)})
    h.connect("c")
    assert bodies(h.subscribe("c", "s", "/topic/t", durable_name="dur", selector="n > 1")) == [2, 3]


def test_durable_name_on_a_queue_is_ignored() -> None:
    h = make()
    h.connect("c")
    h.subscribe("c", "s", "/queue/q", durable_name="dur")
    h.connect("c2")
    assert h.subscribe("c2", "s", "/queue/q", durable_name="dur") == []
    assert h.stats("/queue/q")["consumers"] == 2


def test_topic_message_priorities_are_kept_per_subscription() -> None:
    h = make()
    h.connect("c")
    h.subscribe("c", "s", "/topic/t", ack="client", prefetch=1)
    first = delivers(h.send("p", "/topic/t", "low-1", {"priority": "1"}))
    h.send("p", "/topic/t", "low-2", {"priority": "1"})
    h.send("p", "/topic/t", "high", {"priority": "8"})
    assert bodies(h.ack("c", first[0].ack_id)) == ["high"]
