"""Transactions: buffered SEND / ACK / NACK, COMMIT, ABORT, and their errors."""

from __future__ import annotations

from raftmq.core.effects import Receipt
from tests.helpers.broker_harness import Harness, bodies, delivers, errors, receipts


def make(**overrides: object) -> Harness:
    h = Harness(**overrides)
    h.connect("p")
    h.connect("c")
    return h


def test_sends_are_buffered_until_commit_and_applied_in_order() -> None:
    h = make()
    h.subscribe("c", "1", "/queue/a")
    assert receipts(h.begin("p", "tx", receipt="b")) == ["b"]
    assert h.send("p", "/queue/a", 1, transaction="tx", receipt="r1") == [Receipt("p", "r1")]
    assert h.send("p", "/topic/t", 2, transaction="tx") == []
    assert h.send("p", "/queue/a", 3, transaction="tx") == []
    assert h.stats("/queue/a")["enqueued"] == 0
    effects = h.commit("p", "tx", receipt="c")
    assert bodies(effects) == [1, 3]
    assert receipts(effects) == ["c"] and type(effects[-1]).__name__ == "Receipt"


def test_abort_discards_buffered_sends() -> None:
    h = make()
    h.begin("p", "tx")
    h.send("p", "/queue/a", 1, transaction="tx")
    assert receipts(h.abort("p", "tx", receipt="a")) == ["a"]
    assert errors(h.commit("p", "tx"))
    h.subscribe("c", "1", "/queue/a")
    assert h.stats("/queue/a")["enqueued"] == 0


def test_transacted_ack_applies_at_commit() -> None:
    h = make()
    h.subscribe("c", "1", "/queue/a", ack="client-individual", prefetch=1)
    (d,) = delivers(h.send("p", "/queue/a", 1))
    h.send("p", "/queue/a", 2)
    h.begin("c", "tx")
    assert h.ack("c", d.ack_id, transaction="tx") == []
    assert h.stats("/queue/a")["in_flight"] == 1
    assert bodies(h.commit("c", "tx")) == [2]
    assert h.stats("/queue/a")["dequeued"] == 1


def test_aborted_ack_leaves_the_message_in_flight() -> None:
    h = make()
    h.subscribe("c", "1", "/queue/a", ack="client-individual", prefetch=1)
    (d,) = delivers(h.send("p", "/queue/a", 1))
    h.send("p", "/queue/a", 2)
    h.begin("c", "tx")
    h.ack("c", d.ack_id, transaction="tx")
    assert h.abort("c", "tx") == []
    assert h.stats("/queue/a")["in_flight"] == 1
    assert bodies(h.ack("c", d.ack_id)) == [2]


def test_transacted_nack_redelivers_at_commit() -> None:
    h = make()
    h.subscribe("c", "1", "/queue/a", ack="client-individual")
    (d,) = delivers(h.send("p", "/queue/a", 1))
    h.begin("c", "tx")
    assert h.nack("c", d.ack_id, transaction="tx") == []
    (again,) = delivers(h.commit("c", "tx"))
    assert again.redelivered and again.message.body == 1


def test_commit_skips_acks_settled_meanwhile() -> None:
    h = make()
    h.subscribe("c", "1", "/queue/a", ack="client")
    got = [d for i in range(3) for d in delivers(h.send("p", "/queue/a", i))]
    h.begin("c", "tx")
    h.ack("c", got[0].ack_id, transaction="tx")
    h.ack("c", got[2].ack_id)  # cumulative, outside the transaction: all three
    assert receipts(h.commit("c", "tx", receipt="r")) == ["r"]
    assert h.stats("/queue/a")["dequeued"] == 3


def test_transaction_errors() -> None:
    h = make()
    h.subscribe("c", "1", "/queue/a", ack="client")
    (d,) = delivers(h.send("p", "/queue/a", 1))
    assert errors(h.send("p", "/queue/a", 1, transaction="nope", receipt="r"))[0].receipt_id == "r"
    assert errors(h.ack("c", d.ack_id, transaction="nope"))
    assert errors(h.nack("c", d.ack_id, transaction="nope"))
    assert errors(h.commit("p", "nope"))
    assert errors(h.abort("p", "nope"))
    h.begin("p", "tx")
    assert errors(h.begin("p", "tx", receipt="again"))[0].receipt_id == "again"
    # Transactions are per session.
    assert errors(h.send("c", "/queue/a", 1, transaction="tx"))
    # A transacted send to a bad destination fails at once, not at commit.
    assert errors(h.send("p", "/bad/a", 1, transaction="tx"))


def test_disconnect_aborts_open_transactions() -> None:
    h = make()
    h.subscribe("c", "1", "/queue/a")
    h.connect("p2")
    h.begin("p2", "tx")
    h.send("p2", "/queue/a", 1, transaction="tx")
    h.disconnect("p2")
    h.connect("p2")
    assert errors(h.commit("p2", "tx"))
    assert h.stats("/queue/a")["enqueued"] == 0


def test_commit_ends_the_transaction_and_names_can_be_reused() -> None:
    h = make()
    h.subscribe("c", "1", "/queue/a")
    for round_ in range(3):
        h.begin("p", "tx")
        h.send("p", "/queue/a", round_, transaction="tx")
        assert bodies(h.commit("p", "tx")) == [round_]


def test_duplicate_ids_in_a_transaction_are_checked_at_commit() -> None:
    h = make()
    h.subscribe("c", "1", "/queue/a")
    h.begin("p", "tx")
    h.send("p", "/queue/a", 1, {"_AMQ_DUPL_ID": "x"}, transaction="tx")
    h.send("p", "/queue/a", 2, {"_AMQ_DUPL_ID": "x"}, transaction="tx")
    # The cache learns the id only at commit: an outside send with it still goes through.
    assert bodies(h.send("p", "/queue/a", 0, {"_AMQ_DUPL_ID": "y"})) == [0]
    assert bodies(h.commit("p", "tx")) == [1]
    h.begin("p", "tx2")
    h.send("p", "/queue/a", 3, {"_AMQ_DUPL_ID": "y"}, transaction="tx2")
    assert bodies(h.commit("p", "tx2")) == []


def test_two_transactions_in_one_session_are_independent() -> None:
    h = make()
    h.subscribe("c", "1", "/queue/a")
    h.begin("p", "t1")
    h.begin("p", "t2")
    h.send("p", "/queue/a", 1, transaction="t1")
    h.send("p", "/queue/a", 2, transaction="t2")
    assert bodies(h.commit("p", "t2")) == [2]
    h.abort("p", "t1")
    assert h.stats("/queue/a")["enqueued"] == 1


def test_commit_of_ack_and_send_keeps_queue_order() -> None:
    h = make()
    h.subscribe("c", "1", "/queue/a", ack="client-individual", prefetch=1)
    (first,) = delivers(h.send("p", "/queue/a", 1))
    h.send("p", "/queue/a", 2)  # waits: the consumer is full
    h.begin("c", "tx")
    h.ack("c", first.ack_id, transaction="tx")
    h.send("c", "/queue/a", 3, transaction="tx")
    # The freed room goes to the older message, not to the one the commit adds.
    assert bodies(h.commit("c", "tx")) == [2]
