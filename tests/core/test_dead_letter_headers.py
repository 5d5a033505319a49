"""What a dead letter says of its death (raftmq.core.dead_letter): how often it was delivered
before it died and why (too many NACKs, a consumer that left, a neighbouring group's refusals,
its expiry), as headers on the copy the dead-letter or expiry queue gets."""

from __future__ import annotations

from raftmq.core.commands import ACK_CLIENT_INDIVIDUAL, Connect, Manage, Nack, Send, Subscribe
from raftmq.core.dead_letter import CAUSE, DELIVERIES, ORIGINAL_DESTINATION, REASON
from raftmq.core.effects import Deliver, Managed
from raftmq.protocol.header_block import header_dict, pairs_of
from raftmq.routing.route import sf_queue
from tests.core.test_cluster_routing import core, depth, learn
from tests.helpers.broker_harness import Harness, delivers

DLQ = "/queue/DLQ"


def nacked_to_death(h: Harness, destination: str = "/queue/a", headers: dict[str, str] | None = None) -> None:
    """Send a message to `destination` and NACK it until it dies."""
    h.send("p", destination, b"poison", headers or {})
    (got,) = delivers(h.subscribe("c", "s", destination, ack="client-individual"))
    while True:
        again = delivers(h.nack("c", got.ack_id))
        if not again:
            break
        (got,) = again
    h.unsubscribe("c", "s")


def dead(h: Harness, queue: str = DLQ) -> dict[str, str]:
    """The headers of the one message waiting in `queue`."""
    (message,) = h.broker.state.queues[queue].ready.values()
    return header_dict(message.headers)


def harness(**overrides: object) -> Harness:
    h = Harness(**overrides)
    h.connect("p")
    h.connect("c")
    return h


def test_a_message_nacked_too_often_keeps_its_delivery_count_and_the_reason() -> None:
    h = harness(max_delivery_count=3)
    nacked_to_death(h)
    headers = dead(h)
    assert headers[ORIGINAL_DESTINATION] == "/queue/a"
    assert headers[REASON] == "max-deliveries" and headers[DELIVERIES] == "3"
    assert headers[CAUSE] == "NACKed at delivery 3 (max_delivery_count 3)"
    # In the dead-letter queue it starts afresh: its first delivery there is not a redelivery.
    (first,) = delivers(h.subscribe("c", "d", DLQ, ack="client-individual"))
    assert first.delivery_count == 1 and not first.redelivered


def test_with_a_redelivery_delay_too() -> None:
    h = harness(max_delivery_count=2, redelivery_delay_ms=100)
    h.send("p", "/queue/a", b"x")
    (got,) = delivers(h.subscribe("c", "s", "/queue/a", ack="client-individual"))
    h.nack("c", got.ack_id)
    (got,) = delivers(h.tick(h.now + 100))
    assert h.nack("c", got.ack_id) == []
    assert (dead(h)[REASON], dead(h)[DELIVERIES]) == ("max-deliveries", "2")


def test_a_message_whose_consumer_left_without_an_ack_says_so() -> None:
    h = harness(max_delivery_count=2)
    h.send("p", "/queue/a", b"x")
    (got,) = delivers(h.subscribe("c", "s", "/queue/a", ack="client-individual"))
    h.nack("c", got.ack_id)  # delivered again: its second and last delivery
    h.disconnect("c")
    headers = dead(h)
    assert headers[REASON] == "max-deliveries" and headers[DELIVERIES] == "2"
    assert "left without an ACK" in headers[CAUSE]


def test_an_expired_message_says_it_expired_and_how_often_it_was_delivered() -> None:
    h = harness()
    h.send("p", "/queue/a", b"x", {"expires": "5000"})
    (got,) = delivers(h.subscribe("c", "s", "/queue/a", ack="client-individual"))
    h.nack("c", got.ack_id)
    h.unsubscribe("c", "s")
    h.tick(5000)
    headers = dead(h, "/queue/ExpiryQueue")
    assert headers[REASON] == "expired" and headers[DELIVERIES] == "2" and "expires" not in headers
    assert "5000" in headers[CAUSE]


def test_a_forward_the_neighbour_refused_says_it_was_refused_and_by_whom() -> None:
    g1, g2 = core("g1", ["g2"]), core("g2", ["g1"])
    g2.apply(Connect("c", 1))
    g2.apply(Subscribe("c", "s", "/queue/q", 1))
    learn(g1, g2, "g2", "g1", 1)
    g1.apply(Send("p", "/queue/q", "", b"x", 3))
    g1.apply(Connect("bridge", 4))
    effects = g1.apply(Subscribe("bridge", "sf", sf_queue("g2"), 4, ACK_CLIENT_INDIVIDUAL))
    for _ in range(g1.config.max_delivery_count):  # the bridge NACKs what the neighbour refused
        (delivery,) = [e for e in effects if isinstance(e, Deliver)]
        effects = g1.apply(Nack("bridge", 5, ack_id=delivery.ack_id))
    assert depth(g1, sf_queue("g2")) == 0
    (message,) = g1.state.queues[g1.config.dead_letter_queue].ready.values()
    headers = header_dict(message.headers)
    assert headers[REASON] == "refused" and headers[DELIVERIES] == str(g1.config.max_delivery_count)
    assert headers[CAUSE] == f"refused {g1.config.max_delivery_count} times by group g2 (max_delivery_count 10)"


def test_dying_again_in_the_dead_letter_queue_tells_the_last_death_once_and_the_first_home() -> None:
    h = harness(max_delivery_count=2)
    nacked_to_death(h, "/queue/a", {REASON: "made up by the producer", "k": "v"})
    (got,) = delivers(h.subscribe("c", "d", DLQ, ack="client-individual"))
    (got,) = delivers(h.nack("c", got.ack_id))
    (got,) = delivers(h.nack("c", got.ack_id))  # dead again: its new copy comes straight back
    assert h.stats(DLQ)["dead_lettered"] == 1 and got.delivery_count == 1
    names = [name for name, _value in pairs_of(got.message.headers)]
    assert len(names) == len(set(names))
    assert header_dict(got.message.headers) == {"k": "v", ORIGINAL_DESTINATION: "/queue/a", REASON: "max-deliveries",
                                                DELIVERIES: "2",
                                                CAUSE: "NACKed at delivery 2 (max_delivery_count 2)"}


def test_a_retried_message_goes_home_without_the_headers_of_its_death() -> None:
    h = harness(max_delivery_count=1)
    nacked_to_death(h, "/queue/a", {"k": "v"})
    h.apply(Manage("req", "retry", h.now, DLQ, every=True))
    (again,) = delivers(h.subscribe("c", "s", "/queue/a"))
    assert header_dict(again.message.headers) == {"k": "v"}


def test_a_selector_names_the_headers() -> None:
    h = harness(max_delivery_count=1)
    nacked_to_death(h, "/queue/a")
    h.send("p", DLQ, b"sent here by hand")
    effects = h.apply(Manage("req", "retry", h.now, DLQ,
                             selector="dead_letter_reason = 'max-deliveries' AND dead_letter_deliveries = 1"))
    (answer,) = [e for e in effects if isinstance(e, Managed)]
    assert dict(answer.counts)["moved"] == 1
    assert h.stats(DLQ)["depth"] == 1
