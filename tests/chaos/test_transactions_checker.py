"""The transactions checker on synthetic histories: atomicity (a half-applied transaction is
caught), aborted and rolled-back transactions, acknowledgements in transactions."""

from __future__ import annotations

from chaos.history import FAIL, INFO, INVOKE, OK
from chaos.transactions_checker import check_transactions
from tests.helpers.histories import Builder as HistoryBuilder


class Builder(HistoryBuilder):
    def __init__(self) -> None:
        super().__init__()
        self.txns = 0

    def txn(self, values: list[str], outcome: str = OK, error: str | None = None) -> str:
        txid = f"p1-t{self.txns}"
        self.txns += 1
        record = {"id": txid, "values": values, "abort": error == "aborted"}
        self.op("p1", INVOKE, "txn", record)
        self.op("p1", outcome, "txn", record, error=error)
        return txid

    def receive(self, value: str, consumer: str = "c1", redelivered: bool = False) -> None:
        self.op(consumer, OK, "receive", value, redelivered)

    def ack_txn(self, values: list[str], outcome: str = OK, consumer: str = "c1") -> None:
        self.op(consumer, INVOKE, "ack-txn", {"id": f"{consumer}-a", "values": []})
        self.op(consumer, outcome, "ack-txn", {"id": f"{consumer}-a", "values": values})


def test_committed_transactions_received_whole_are_valid() -> None:
    b = Builder()
    b.txn(["p1-0", "p1-1"])
    b.txn(["p1-2"], FAIL, "aborted")
    b.txn(["p1-3", "p1-4"], FAIL, "connection lost")
    b.txn(["p1-5", "p1-6"], INFO)  # none of it: allowed
    b.txn(["p1-7"], INFO)
    for value in ("p1-0", "p1-1", "p1-7"):
        b.receive(value)
    b.ack_txn(["p1-0", "p1-1", "p1-7"])
    result = check_transactions(b.history.ops)
    assert result.valid, result.to_dict()
    assert (result.transactions, result.committed, result.aborted, result.rolled_back) == (5, 1, 1, 1)
    assert (result.indeterminate_transactions, result.recovered, result.ack_transactions_committed) == (2, 1, 1)
    assert (result.attempted, result.acknowledged, result.failed, result.indeterminate) == (8, 2, 3, 3)


def test_a_half_applied_committed_transaction_is_caught() -> None:
    b = Builder()
    txid = b.txn(["p1-0", "p1-1", "p1-2"])
    b.receive("p1-0")
    b.receive("p1-2")
    result = check_transactions(b.history.ops)
    assert not result.valid and result.partial == 1 and result.partial_transactions == [txid]
    assert result.lost == 1 and result.lost_middle == 1


def test_an_indeterminate_transaction_is_all_or_nothing_never_part() -> None:
    b = Builder()
    b.txn(["p1-0", "p1-1"], INFO)
    b.receive("p1-1")
    result = check_transactions(b.history.ops)
    assert not result.valid and result.partial == 1 and result.lost == 0  # not lost: it was never acknowledged


def test_an_aborted_or_rolled_back_transaction_must_never_appear() -> None:
    b = Builder()
    b.txn(["p1-0", "p1-1"], FAIL, "aborted")
    b.txn(["p1-2"], FAIL, "transaction 'p1-t1' was rolled back")
    b.receive("p1-0")
    b.receive("p1-2")
    result = check_transactions(b.history.ops)
    assert not result.valid and result.aborted_visible == 2 and result.unexpected == 2


def test_a_lost_committed_transaction_and_an_unsent_value() -> None:
    b = Builder()
    b.txn(["p1-0", "p1-1"])
    b.receive("p9-0")
    result = check_transactions(b.history.ops)
    assert not result.valid and result.lost == 2 and result.partial == 0
    assert result.unexpected == 1 and result.unexpected_values == ["p9-0"]


def test_a_stored_duplicate_and_a_value_delivered_again_after_its_ack_committed() -> None:
    b = Builder()
    b.txn(["p1-0", "p1-1"])
    b.receive("p1-0")
    b.receive("p1-1")
    b.receive("p1-1", redelivered=True)  # before any ACK committed: a redelivery, allowed
    b.ack_txn(["p1-0"], FAIL)  # an aborted ACK transaction consumes nothing
    b.receive("p1-0", redelivered=True)
    assert check_transactions(b.history.ops).valid
    b.ack_txn(["p1-0", "p1-1"])
    b.receive("p1-0", consumer="c2", redelivered=True)  # consumed, yet back
    result = check_transactions(b.history.ops)
    assert not result.valid and result.acked_redelivered == 1 and result.stored_duplicates == 0
    b.receive("p1-1", consumer="c2")
    assert check_transactions(b.history.ops).stored_duplicates == 1
