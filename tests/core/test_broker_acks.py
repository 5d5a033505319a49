"""ACK / NACK in every mode, redelivery, the dead-letter queue, returns on disconnect."""

from __future__ import annotations

from raftmq.core.effects import Deliver
from raftmq.protocol.header_block import header_dict
from tests.helpers.broker_harness import Harness, bodies, delivers, errors, receipts


def consumer(ack: str, prefetch: int = 100, **overrides: object) -> Harness:
    h = Harness(**overrides)
    h.connect("p")
    h.connect("c")
    h.subscribe("c", "1", "/queue/a", ack=ack, prefetch=prefetch)
    return h


def send_all(h: Harness, count: int, destination: str = "/queue/a") -> list[Deliver]:
    return [d for i in range(count) for d in delivers(h.send("p", destination, i))]


def test_client_ack_is_cumulative() -> None:
    h = consumer("client")
    got = send_all(h, 4)
    assert receipts(h.ack("c", got[2].ack_id, receipt="r")) == ["r"]
    stats = h.stats("/queue/a")
    assert stats["in_flight"] == 1 and stats["dequeued"] == 3
    assert h.ack("c", got[3].ack_id) == []
    # The earlier ones are gone: acking them again is an error.
    assert errors(h.ack("c", got[0].ack_id))


def test_client_individual_ack_acks_only_that_delivery() -> None:
    h = consumer("client-individual")
    got = send_all(h, 3)
    h.ack("c", got[1].ack_id)
    stats = h.stats("/queue/a")
    assert stats["in_flight"] == 2 and stats["dequeued"] == 1
    assert h.ack("c", got[0].ack_id) == []
    assert h.ack("c", got[2].ack_id) == []
    assert h.stats("/queue/a")["in_flight"] == 0


def test_ack_twice_is_an_unknown_ack_id() -> None:
    h = consumer("client-individual")
    (d,) = send_all(h, 1)
    h.ack("c", d.ack_id)
    (error,) = errors(h.ack("c", d.ack_id, receipt="r"))
    assert error.receipt_id == "r" and error.session == "c"


def test_ack_ids_are_per_session() -> None:
    h = consumer("client")
    (d,) = send_all(h, 1)
    assert errors(h.ack("p", d.ack_id))
    assert h.ack("c", d.ack_id) == []


def test_auto_deliveries_cannot_be_acked() -> None:
    h = consumer("auto")
    (d,) = send_all(h, 1)
    assert d.ack_id is None
    assert errors(h.ack("c", message_id=d.message.message_id))


def test_ack_by_message_id_for_stomp_10_and_11_clients() -> None:
    h = consumer("client-individual")
    got = send_all(h, 3)
    assert h.ack("c", message_id=got[1].message.message_id) == []
    assert h.ack("c", message_id=got[0].message.message_id, subscription="1") == []
    assert h.stats("/queue/a")["in_flight"] == 1
    # Both indexes stay right after the message-id index was built.
    more = send_all(h, 1)
    assert h.ack("c", more[0].ack_id) == []
    assert h.ack("c", message_id=got[2].message.message_id) == []
    assert h.stats("/queue/a")["in_flight"] == 0


def test_ack_by_message_id_picks_the_right_topic_copy() -> None:
    h = Harness()
    h.connect("p")
    h.connect("c")
    h.subscribe("c", "x", "/topic/t", ack="client-individual")
    h.subscribe("c", "y", "/topic/t", ack="client-individual")
    first, second = delivers(h.send("p", "/topic/t", b"m"))
    assert first.message.message_id == second.message.message_id
    assert (first.sub_id, second.sub_id) == ("x", "y")
    # By subscription: exactly that copy.
    assert h.ack("c", message_id=first.message.message_id, subscription="y") == []
    assert h.stats("/topic/t")["in_flight"] == 1
    # Without one: the earliest delivery still in flight (x's copy).
    assert h.ack("c", message_id=first.message.message_id) == []
    assert h.stats("/topic/t")["in_flight"] == 0
    assert errors(h.ack("c", message_id=first.message.message_id))


def test_message_id_index_falls_back_to_a_later_copy() -> None:
    h = Harness()
    h.connect("p")
    h.connect("c")
    h.subscribe("c", "x", "/topic/t", ack="client-individual")
    h.subscribe("c", "y", "/topic/t", ack="client-individual")
    first, second = delivers(h.send("p", "/topic/t", b"m"))
    assert h.ack("c", message_id=first.message.message_id) == []  # builds the index, acks x's copy
    assert h.ack("c", message_id=first.message.message_id) == []  # y's copy took its place
    assert h.stats("/topic/t")["dequeued"] == 2
    # An error ends the session, so each refusal gets a fresh consumer.
    h = consumer("client-individual")
    (d,) = send_all(h, 1)
    assert errors(h.ack("c", message_id=d.message.message_id, subscription="other"))
    assert errors(consumer("client-individual").ack("c", message_id="nope"))


def test_nack_redelivers_with_the_flag_and_count() -> None:
    h = consumer("client-individual")
    (d,) = send_all(h, 1)
    (again,) = delivers(h.nack("c", d.ack_id))
    assert again.message.message_id == d.message.message_id
    assert again.redelivered and again.delivery_count == 2 and again.ack_id != d.ack_id
    assert h.ack("c", again.ack_id) == []
    assert errors(h.ack("c", d.ack_id))


def test_nack_returns_the_message_ahead_of_waiting_ones() -> None:
    h = consumer("client-individual", prefetch=1)
    (d,) = send_all(h, 3)
    assert d.message.body == 0
    (again,) = delivers(h.nack("c", d.ack_id))
    assert again.message.body == 0 and again.redelivered


def test_nack_goes_to_another_consumer_round_robin() -> None:
    h = consumer("client-individual")
    h.connect("c2")
    h.subscribe("c2", "1", "/queue/a", ack="client-individual")
    (d,) = send_all(h, 1)
    assert d.session == "c"
    (again,) = delivers(h.nack("c", d.ack_id))
    assert again.session == "c2" and again.redelivered


def test_client_mode_nack_is_cumulative_and_keeps_order() -> None:
    h = consumer("client", prefetch=3)
    got = send_all(h, 5)
    assert [d.message.body for d in got] == [0, 1, 2]
    again = delivers(h.nack("c", got[1].ack_id))
    # 0 and 1 come back first, in their order; then 3 (room for three).
    assert [(d.message.body, d.redelivered) for d in again] == [(0, True), (1, True)]
    assert h.stats("/queue/a")["in_flight"] == 3


def test_dead_letter_after_max_deliveries() -> None:
    h = consumer("client-individual", max_delivery_count=3)
    (d,) = send_all(h, 1)
    counts = [d.delivery_count]
    for _ in range(2):
        (d,) = delivers(h.nack("c", d.ack_id))
        counts.append(d.delivery_count)
    assert counts == [1, 2, 3]
    assert h.nack("c", d.ack_id) == []  # third NACK: to the DLQ
    stats = h.stats("/queue/a")
    assert stats["dead_lettered"] == 1 and stats["depth"] == 0 and stats["in_flight"] == 0
    assert h.stats("/queue/DLQ")["depth"] == 1
    (dead,) = delivers(h.subscribe("c", "dlq", "/queue/DLQ", ack="client-individual"))
    assert dead.message.message_id == d.message.message_id
    assert not dead.redelivered and dead.delivery_count == 1


def test_dead_letter_message_values() -> None:
    h = consumer("client-individual", max_delivery_count=1, dead_letter_queue="/queue/dead")
    (d,) = delivers(h.send("p", "/queue/a", b"x", {"expires": "999999999", "color": "red"}))
    assert h.nack("c", d.ack_id) == []
    h.connect("d")
    (dead,) = delivers(h.subscribe("d", "1", "/queue/dead"))
    assert dead.destination == "/queue/dead" and not dead.redelivered and dead.delivery_count == 1
    message = dead.message
    assert message.message_id == d.message.message_id and message.body == b"x"
    assert message.expires == 0 and message.destination == "/queue/dead"
    assert header_dict(message.headers) == {"color": "red", "original-destination": "/queue/a",
                                            "dead_letter_reason": "max-deliveries", "dead_letter_deliveries": "1",
                                            "dead_letter_cause": "NACKed at delivery 1 (max_delivery_count 1)"}


def test_disconnect_returns_unacked_deliveries_in_order_flagged_redelivered() -> None:
    h = consumer("client", prefetch=3)
    got = send_all(h, 5)
    assert [d.message.body for d in delivers(h.ack("c", got[0].ack_id))] == [3]  # 1, 2, 3 in flight
    h.connect("c2")
    assert bodies(h.subscribe("c2", "1", "/queue/a", ack="client-individual")) == [4]
    returned = delivers(h.disconnect("c"))
    assert [(d.session, d.message.body, d.redelivered, d.delivery_count) for d in returned] == [
        ("c2", 1, True, 2),
        ("c2", 2, True, 2),
        ("c2", 3, True, 2),
    ]
    stats = h.stats("/queue/a")
    assert stats["in_flight"] == 4 and stats["consumers"] == 1 and stats["dequeued"] == 1


def test_disconnect_keeps_order_across_two_subscriptions_of_one_queue() -> None:
    h = Harness()
    h.connect("p")
    h.connect("c")
    h.subscribe("c", "x", "/queue/a", ack="client-individual")
    h.subscribe("c", "y", "/queue/a", ack="client-individual")
    got = send_all(h, 4)
    assert [d.sub_id for d in got] == ["x", "y", "x", "y"]
    h.disconnect("c")
    h.connect("c2")
    again = delivers(h.subscribe("c2", "1", "/queue/a"))
    assert [d.message.body for d in again] == [0, 1, 2, 3]
    assert all(d.redelivered and d.delivery_count == 2 for d in again)


def test_disconnect_return_of_an_exhausted_message_dead_letters_it() -> None:
    h = consumer("client-individual", max_delivery_count=2)
    (d,) = send_all(h, 1)
    (d,) = delivers(h.nack("c", d.ack_id))
    assert d.delivery_count == 2
    assert h.disconnect("c") == []
    assert h.stats("/queue/a")["dead_lettered"] == 1
    assert h.stats("/queue/DLQ")["depth"] == 1


def test_unsubscribe_returns_in_flight_messages() -> None:
    h = consumer("client-individual")
    h.connect("c2")
    h.subscribe("c2", "1", "/queue/a", ack="client-individual", prefetch=1)
    got = send_all(h, 3)
    assert [d.session for d in got] == ["c", "c2", "c"]
    h.ack("c2", got[1].ack_id)
    again = delivers(h.unsubscribe("c", "1", receipt="r"))
    assert [(d.session, d.message.body, d.redelivered) for d in again] == [("c2", 0, True)]
    assert h.stats("/queue/a")["depth"] == 1
    assert errors(h.ack("c", got[0].ack_id))


def test_auto_deliveries_are_not_returned_on_disconnect() -> None:
    h = consumer("auto")
    send_all(h, 3)
    h.disconnect("c")
    assert h.stats("/queue/a") == {
        "depth": 0,
        "in_flight": 0,
        "consumers": 0,
        "enqueued": 3,
        "dequeued": 3,
        "expired": 0,
        "dead_lettered": 0,
        "delayed": 0,
        "scheduled": 0, "dropped": 0,
    }


def test_nack_of_unknown_delivery_is_rejected() -> None:
    h = consumer("client")
    assert errors(h.nack("c", "42", receipt="r"))[0].receipt_id == "r"
    assert errors(h.nack("c", message_id="nope"))


def test_ack_frees_room_for_waiting_messages_in_one_effect_list() -> None:
    h = consumer("client-individual", prefetch=1)
    (d,) = send_all(h, 3)
    effects = h.ack("c", d.ack_id, receipt="r")
    assert [type(e).__name__ for e in effects] == ["Deliver", "Receipt"]
    assert bodies(effects) == [1]
