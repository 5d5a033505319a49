"""Wildcard topic subscriptions, ActiveMQ's syntax (`.` separates, `*` one element, `>` the
rest): what they receive, with selectors and durably, across a snapshot; and the names that
are refused with an error instead of a subscription that receives nothing."""

from __future__ import annotations

from raftmq.core.broker import Broker
from raftmq.core.commands import Browse
from tests.helpers.broker_harness import Harness, bodies, delivers, errors


def make() -> Harness:
    h = Harness()
    h.connect("p")
    h.connect("c")
    return h


def test_a_final_gt_matches_one_or_more_elements_and_a_star_exactly_one() -> None:
    h = make()
    h.subscribe("c", "rest", "/topic/prices.>")
    h.subscribe("c", "one", "/topic/prices.*")
    h.subscribe("c", "mid", "/topic/prices.*.spot")
    got = {name: [(d.sub_id, d.destination) for d in delivers(h.send("p", f"/topic/{name}", name.encode()))]
           for name in ("prices", "prices.eur", "prices.eur.spot", "prices.eur.fwd", "pricesx.eur")}
    assert got == {
        "prices": [],
        "prices.eur": [("rest", "/topic/prices.eur"), ("one", "/topic/prices.eur")],
        "prices.eur.spot": [("rest", "/topic/prices.eur.spot"), ("mid", "/topic/prices.eur.spot")],
        "prices.eur.fwd": [("rest", "/topic/prices.eur.fwd")],
        "pricesx.eur": [],
    }


def test_an_exact_and_a_wildcard_subscription_each_get_a_copy_and_selectors_still_apply() -> None:
    h = make()
    h.subscribe("c", "exact", "/topic/a.b", ack="client-individual")
    h.subscribe("c", "wild", "/topic/a.*", ack="client-individual", selector="n > 1")
    assert [d.sub_id for d in delivers(h.send("p", "/topic/a.b", b"1", {"n": "1"}))] == ["exact"]
    assert [d.sub_id for d in delivers(h.send("p", "/topic/a.b", b"2", {"n": "2"}))] == ["exact", "wild"]
    assert h.stats("/topic/a.b")["enqueued"] == 2


def test_a_durable_wildcard_subscription_collects_while_away_and_survives_a_snapshot() -> None:
    h = make()
    h.subscribe("c", "d", "/topic/orders.>", ack="client-individual", durable_name="all-orders")
    h.disconnect("c")
    h.send("p", "/topic/orders.eu", b"eu")
    h.send("p", "/topic/orders.us.east", b"us")
    h.send("p", "/topic/other", b"no")
    restored = Broker.restore(h.broker.snapshot(), h.config)
    h.broker = restored
    h.connect("c")
    assert bodies(h.subscribe("c", "d", "/topic/orders.>", ack="client-individual",
                              durable_name="all-orders")) == [b"eu", b"us"]
    # The restored broker still matches new messages against the pattern.
    assert bodies(h.send("p", "/topic/orders.asia", b"asia")) == [b"asia"]


def test_misplaced_wildcards_and_wildcard_sends_are_refused_by_name() -> None:
    h = make()  # a refusal ends the session (STOMP: an ERROR closes the connection): connect again each time
    for destination in ("/topic/a.>.b", "/topic/a*", "/topic/a..b.>", "/topic/>x"):
        h.connect("c")
        (error,) = errors(h.subscribe("c", "s", destination, receipt="r"))
        assert error.message == "invalid destination" and destination in error.detail
    (error,) = errors(h.send("p", "/topic/prices.>", b"x", receipt="r"))
    assert error.message == "wildcards are for subscriptions"
    h.connect("p")
    (error,) = errors(h.send("p", "/queue/orders.*", b"x", receipt="r"))
    assert error.message == "wildcards are for subscriptions"
    h.connect("c")
    (error,) = errors(h.apply(Browse("c", "b", "/queue/orders.>", h.now, receipt="r")))
    assert error.message == "a browser reads one queue"
    assert h.broker.stats()["destinations"].get("/queue/orders.*") is None  # nothing was created


# -- wildcard queue subscriptions -----------------------------------------------------------------


def test_a_wildcard_queue_consumer_takes_from_every_matching_queue_now_and_later() -> None:
    h = make()
    h.send("p", "/queue/orders.eu", b"eu-1")
    h.send("p", "/queue/other", b"no")
    got = delivers(h.subscribe("c", "w", "/queue/orders.>", ack="client-individual"))
    assert [(d.sub_id, d.destination, d.message.body) for d in got] == [("w", "/queue/orders.eu", b"eu-1")]
    # A queue created later is consumed too; each MESSAGE names its queue.
    got = delivers(h.send("p", "/queue/orders.us.east", b"us-1"))
    assert [(d.destination, d.message.body) for d in got] == [("/queue/orders.us.east", b"us-1")]
    assert h.stats("/queue/other")["depth"] == 1 and h.stats("/queue/orders.eu")["consumers"] == 1
    h.broker.check_invariants()


def test_children_share_one_prefetch_and_a_nack_returns_to_the_right_queue() -> None:
    h = make()
    for name in ("a.1", "a.2", "a.3"):
        h.send("p", f"/queue/{name}", name.encode())
    got = delivers(h.subscribe("c", "w", "/queue/a.*", ack="client-individual", prefetch=2))
    assert len(got) == 2
    h.nack("c", got[0].ack_id)
    h.broker.check_invariants()
    assert sum(h.stats(f"/queue/a.{i}")["in_flight"] for i in (1, 2, 3)) == 2
    first = got[0].destination
    h.unsubscribe("c", "w")
    h.broker.check_invariants()
    assert [h.stats(f"/queue/a.{i}")["depth"] for i in (1, 2, 3)] == [1, 1, 1]
    assert h.stats(first)["consumers"] == 0


def test_a_cumulative_ack_settles_deliveries_from_every_queue() -> None:
    h = make()
    h.send("p", "/queue/b.x", b"x")
    h.send("p", "/queue/b.y", b"y")
    got = delivers(h.subscribe("c", "w", "/queue/b.>", ack="client"))
    assert len(got) == 2
    h.ack("c", got[-1].ack_id)
    assert h.stats("/queue/b.x")["dequeued"] == 1 and h.stats("/queue/b.y")["dequeued"] == 1
    h.broker.check_invariants()


def test_a_wildcard_queue_consumer_competes_with_exact_ones_with_selectors_and_survives_a_snapshot() -> None:
    h = make()
    h.connect("d")
    h.subscribe("c", "w", "/queue/jobs.>", ack="client-individual", selector="n > 1")
    h.subscribe("d", "exact", "/queue/jobs.a", ack="client-individual")
    got = [d.sub_id for n in range(4) for d in delivers(h.send("p", "/queue/jobs.a", b"j", {"n": str(n)}))]
    assert got.count("w") >= 1 and set(got) <= {"w", "exact"}
    h.broker = Broker.restore(h.broker.snapshot(), h.config)
    h.broker.check_invariants()
    assert [d.sub_id for d in delivers(h.send("p", "/queue/jobs.new", b"j", {"n": "5"}))] == ["w"]
    h.disconnect("c")
    h.broker.check_invariants()
    assert h.stats("/queue/jobs.new")["consumers"] == 0
