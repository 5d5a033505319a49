"""Operators' changes as committed commands (raftmq.core.manage): create, purge, delete,
retry and move from the dead-letter queue, close a session; each answered by one Managed
effect, each leaving the invariants whole."""

from __future__ import annotations

from typing import Any

from raftmq.core.broker import Broker
from raftmq.core.commands import Manage
from raftmq.core.effects import Managed, Reject
from tests.helpers.broker_harness import Harness, bodies, delivers


def manage(h: Harness, op: str, destination: str = "", **kw: Any) -> tuple[Managed, list[Any]]:
    effects = h.apply(Manage("req", op, h.now, destination, **kw))
    answers = [e for e in effects if isinstance(e, Managed)]
    assert len(answers) == 1 and answers[0].session == "req"
    h.broker.check_invariants()
    return answers[0], effects


def counts(answer: Managed) -> dict[str, int]:
    assert answer.error is None, answer.error
    return dict(answer.counts)


def dead_letter(h: Harness, destination: str, body: bytes, headers: dict[str, str] | None = None) -> None:
    """Send `body` to `destination` and NACK it until it reaches the DLQ."""
    h.send("p", destination, body, headers or {})
    got = delivers(h.subscribe("c", "dl", destination, ack="client-individual"))
    for _ in range(h.config.max_delivery_count):
        got = delivers(h.nack("c", got[0].ack_id))
        if not got:
            break
    h.unsubscribe("c", "dl")
    assert h.stats(destination)["dead_lettered"] == 1


def make() -> Harness:
    h = Harness(max_delivery_count=2)
    h.connect("p")
    h.connect("c")
    return h


def test_create_makes_an_empty_queue_once() -> None:
    h = make()
    assert counts(manage(h, "create", "/queue/new")[0]) == {"created": 1}
    assert counts(manage(h, "create", "/queue/new")[0]) == {"created": 0}
    assert h.stats("/queue/new")["depth"] == 0 and h.broker.has_destination("/queue/new")
    assert manage(h, "create", "/queue/a.>")[0].error is not None


def test_purge_empties_a_queue_but_leaves_in_flight_messages_with_their_consumer() -> None:
    h = make()
    for i in range(5):
        h.send("p", "/queue/q", str(i).encode())
    [held] = delivers(h.subscribe("c", "s", "/queue/q", ack="client-individual", prefetch=1))
    assert counts(manage(h, "purge", "/queue/q")[0]) == {"purged": 4}
    stats = h.stats("/queue/q")
    assert stats["depth"] == 0 and stats["in_flight"] == 1 and stats["dequeued"] == 4
    h.ack("c", held.ack_id)
    assert manage(h, "purge", "/queue/none")[0].error == "no such destination: /queue/none"


def test_delete_ends_consumers_with_an_error_and_forgets_the_destination() -> None:
    h = make()
    h.send("p", "/queue/q", b"x")
    h.subscribe("c", "s", "/queue/q", ack="client-individual")
    answer, effects = manage(h, "delete", "/queue/q")
    assert counts(answer) == {"deleted": 1, "purged": 1}
    assert [(e.session, e.message) for e in effects if isinstance(e, Reject)] == [("c", "destination deleted")]
    assert not h.broker.has_destination("/queue/q") and "/queue/q" not in h.broker.stats()["destinations"]
    # Sending again creates it afresh.
    h.send("p", "/queue/q", b"y")
    assert h.stats("/queue/q")["enqueued"] == 1


def test_delete_of_a_topic_drops_its_durable_subscriptions() -> None:
    h = make()
    h.subscribe("c", "d", "/topic/t", durable_name="keep", ack="client-individual")
    h.disconnect("c")
    h.send("p", "/topic/t", b"collected")
    assert counts(manage(h, "delete", "/topic/t")[0]) == {"deleted": 1, "purged": 1}
    assert h.broker.state.durables == {}


def test_retry_returns_dead_letters_to_their_original_queue_by_id_selector_or_all() -> None:
    h = make()
    for i, colour in enumerate(("red", "blue", "red")):
        dead_letter(h, f"/queue/q{i}", f"m{i}".encode(), {"colour": colour})
    assert h.stats("/queue/DLQ")["depth"] == 3
    first = h.broker.state.queues["/queue/DLQ"].ready
    first_id = next(iter(first.values())).message_id
    assert counts(manage(h, "retry", "/queue/DLQ", ids=(first_id,))[0]) == {"moved": 1, "skipped": 0, "more": 0}
    assert counts(manage(h, "retry", "/queue/DLQ", selector="colour = 'blue'")[0])["moved"] == 1
    assert counts(manage(h, "retry", "/queue/DLQ", every=True)[0])["moved"] == 1
    assert h.stats("/queue/DLQ")["depth"] == 0
    assert [h.drain("c", f"/queue/q{i}") for i in range(3)] == [[b"m0"], [b"m1"], [b"m2"]]


def test_a_retried_message_keeps_its_duplicate_id_and_is_not_dropped_as_a_duplicate() -> None:
    h = make()
    dead_letter(h, "/queue/q", b"once", {"_AMQ_DUPL_ID": "d1"})
    assert counts(manage(h, "retry", "/queue/DLQ", every=True)[0])["moved"] == 1
    got = h.drain("c", "/queue/q")
    assert got == [b"once"]


def test_move_sends_chosen_messages_to_the_target_and_refuses_nonsense() -> None:
    h = make()
    dead_letter(h, "/queue/q", b"m")
    assert counts(manage(h, "move", "/queue/DLQ", target="/queue/parked", every=True)[0])["moved"] == 1
    assert h.drain("c", "/queue/parked") == [b"m"]
    assert (manage(h, "move", "/queue/parked", every=True)[0].error
            == "no target: a move names the destination to move to")
    assert "nothing chosen" in str(manage(h, "retry", "/queue/parked")[0].error)
    assert "invalid selector" in str(manage(h, "retry", "/queue/parked", selector="a ==")[0].error)


def test_retry_of_a_message_without_an_original_destination_leaves_it() -> None:
    h = make()
    h.send("p", "/queue/plain", b"m")
    assert counts(manage(h, "retry", "/queue/plain", every=True)[0]) == {"moved": 0, "skipped": 1, "more": 0}
    assert h.stats("/queue/plain")["depth"] == 1


def test_close_ends_a_session_with_an_error_and_returns_its_deliveries() -> None:
    h = make()
    h.send("p", "/queue/q", b"m")
    h.subscribe("c", "s", "/queue/q", ack="client-individual")
    answer, effects = manage(h, "close", closing="c")
    assert counts(answer) == {"closed": 1}
    assert [e.session for e in effects if isinstance(e, Reject)] == ["c"]
    assert h.stats("/queue/q")["depth"] == 1
    assert counts(manage(h, "close", closing="nobody")[0]) == {"closed": 0}


def test_changes_survive_a_snapshot() -> None:
    h = make()
    dead_letter(h, "/queue/q", b"m")
    manage(h, "create", "/queue/empty")
    h.broker = Broker.restore(h.broker.snapshot(), h.config)
    assert h.broker.has_destination("/queue/empty")
    assert counts(manage(h, "retry", "/queue/DLQ", every=True)[0])["moved"] == 1
    assert bodies(h.subscribe("c", "s", "/queue/q")) == [b"m"]
