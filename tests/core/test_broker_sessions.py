"""Sessions, receipts and the checks every command goes through."""

from __future__ import annotations

import pytest

from raftmq.core.commands import Abort, Ack, Begin, Commit, Nack, Send, Subscribe, Unsubscribe
from raftmq.core.effects import Deliver, Receipt, Reject
from tests.helpers.broker_harness import Harness, bodies, delivers, errors, receipts


def test_connected_session_sends_and_receives() -> None:
    h = Harness()
    assert h.connect("s1") == []
    assert h.subscribe("s1", "1", "/queue/a") == []
    effects = h.send("s1", "/queue/a", b"hello")
    assert bodies(effects) == [b"hello"]
    assert h.broker.stats()["sessions"] == 1


@pytest.mark.parametrize(
    "command",
    [
        Send("ghost", "/queue/a", "", b"x", 1, receipt="r"),
        Subscribe("ghost", "1", "/queue/a", 1, receipt="r"),
        Unsubscribe("ghost", "1", 1, receipt="r"),
        Ack("ghost", 1, ack_id="1", receipt="r"),
        Nack("ghost", 1, ack_id="1", receipt="r"),
        Begin("ghost", "t", 1, receipt="r"),
        Commit("ghost", "t", 1, receipt="r"),
        Abort("ghost", "t", 1, receipt="r"),
    ],
)
def test_command_from_unknown_session_is_a_session_error_with_its_receipt_id(command: object) -> None:
    h = Harness()
    effects = h.apply(command)  # type: ignore[arg-type]
    assert len(effects) == 1
    (error,) = effects
    assert isinstance(error, Reject)
    assert error.session == "ghost" and error.receipt_id == "r"


def test_commands_after_disconnect_are_rejected() -> None:
    h = Harness()
    h.connect("s1")
    h.disconnect("s1")
    assert errors(h.send("s1", "/queue/a", b"x"))
    assert h.broker.stats()["sessions"] == 0


def test_disconnect_of_unknown_session_is_a_noop_that_still_receipts() -> None:
    h = Harness()
    assert h.disconnect("ghost", receipt="bye") == [Receipt("ghost", "bye")]
    assert h.disconnect("ghost") == []


def test_connect_twice_keeps_the_session() -> None:
    h = Harness()
    h.connect("s1")
    h.subscribe("s1", "1", "/queue/a")
    h.connect("s1")
    assert bodies(h.send("s1", "/queue/a", b"x")) == [b"x"]


def test_receipt_comes_after_the_commands_effects() -> None:
    h = Harness()
    h.connect("c")
    h.connect("p")
    h.subscribe("c", "1", "/queue/a")
    effects = h.send("p", "/queue/a", b"x", receipt="r1")
    assert [type(e) for e in effects] == [Deliver, Receipt]
    assert effects[-1] == Receipt("p", "r1")


def test_rejected_command_emits_error_instead_of_receipt() -> None:
    h = Harness()
    h.connect("s1")
    effects = h.send("s1", "/nowhere/a", b"x", receipt="r1")
    assert receipts(effects) == []
    assert errors(effects)[0].receipt_id == "r1"


@pytest.mark.parametrize("destination", ["/foo/a", "/queue/", "/topic/", "queue/a", "", "/queueX/a", "/Queue/a"])
def test_invalid_destinations_are_rejected(destination: str) -> None:
    h = Harness()
    h.connect("s1")
    assert errors(h.send("s1", destination, b"x"))
    assert errors(h.subscribe("s1", "1", destination))
    assert destination not in h.broker.stats()["destinations"]


def test_duplicate_subscription_id_is_rejected() -> None:
    h = Harness()
    h.connect("s1")
    assert h.subscribe("s1", "1", "/queue/a") == []
    assert errors(h.subscribe("s1", "1", "/queue/b", receipt="r"))[0].receipt_id == "r"
    # The error ended the session (its client is closed): the first subscription went with it.
    h.connect("p")
    assert bodies(h.send("p", "/queue/a", b"x")) == []
    assert h.broker.stats()["destinations"]["/queue/a"]["consumers"] == 0


def test_same_subscription_id_in_two_sessions_is_fine() -> None:
    h = Harness()
    h.connect("s1")
    h.connect("s2")
    assert h.subscribe("s1", "1", "/queue/a") == []
    assert h.subscribe("s2", "1", "/queue/a") == []
    got = [(d.session, d.sub_id) for d in delivers(h.send("s1", "/queue/a", b"1") + h.send("s1", "/queue/a", b"2"))]
    assert got == [("s1", "1"), ("s2", "1")]


def test_unsubscribe_of_unknown_subscription_is_rejected() -> None:
    h = Harness()
    h.connect("s1")
    assert errors(h.unsubscribe("s1", "nope"))


def test_invalid_ack_mode_and_negative_prefetch_are_rejected() -> None:
    h = Harness()
    h.connect("s1")
    assert errors(h.subscribe("s1", "1", "/queue/a", ack="sometimes"))
    assert errors(h.subscribe("s1", "2", "/queue/a", prefetch=-1))


def test_ack_without_any_id_is_rejected() -> None:
    h = Harness()
    h.connect("s1")
    assert errors(h.ack("s1", receipt="r"))[0].receipt_id == "r"


def test_connect_has_no_effects_and_sessions_are_counted() -> None:
    h = Harness()
    for name in ("a", "b", "c"):
        assert h.connect(name) == []
    assert h.broker.stats()["sessions"] == 3
    h.disconnect("b")
    assert h.broker.stats()["sessions"] == 2
