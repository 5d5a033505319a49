"""Wildcard topic subscriptions, ActiveMQ's syntax (`.` separates, `*` one element, `>` the
rest): what they receive, with selectors and durably, across a snapshot; and the names that
are refused with an error instead of a subscription that receives nothing."""

from __future__ import annotations

from raftmq.core.broker import Broker
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
    assert bodies(h.subscribe("c", "d", "/topic/orders.>", ack="client-individual", durable_name="all-orders")) == [b"eu", b"us"]
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
    (error,) = errors(h.subscribe("c", "q", "/queue/orders.>", receipt="r"))
    assert error.message == "wildcard queue subscriptions are not supported"
    assert h.broker.stats()["destinations"].get("/queue/orders.*") is None  # nothing was created
