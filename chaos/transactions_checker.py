"""The transactions checker: a pure function of a `transactions` workload's history
(chaos.transactions). No I/O, no clock.

Each producer transaction (`txn`) carries its values. Its values count as sends of the queue
checker with the transaction's outcome: acknowledged (`ok`: committed), failed (`fail`:
aborted or rolled back) or indeterminate (`info`). On top of lost, unexpected (which counts a
value of a failed transaction that was received) and stored duplicates:
- **partial**: a transaction some but not all of whose values were received: half applied.
  Committed or indeterminate alike (an indeterminate one is all or nothing, never part).
- **aborted visible**: a failed (aborted or rolled back) transaction any of whose values was
  received.
- **acked redelivered**: a value delivered again after an `ack-txn` that acknowledged it
  committed (its RECEIPT came): consumed, yet it came back.
- committed / aborted / rolled back / indeterminate transactions, and the same for the
  consumers' acknowledgement transactions (reported).

Valid exactly when lost, unexpected, stored duplicates, partial, aborted visible and acked
redelivered are all zero.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from chaos.checker import SAMPLE, QueueResult, count_deliveries, liveness, place_losses
from chaos.history import FAIL, INFO, INVOKE, NEMESIS, OK, Op


@dataclass
class TransactionsResult(QueueResult):
    transactions: int = 0
    committed: int = 0
    aborted: int = 0  # by the client's ABORT
    rolled_back: int = 0  # its connection broke before the COMMIT was written
    indeterminate_transactions: int = 0
    partial: int = 0
    aborted_visible: int = 0
    ack_transactions_committed: int = 0
    ack_transactions_failed: int = 0
    acked_redelivered: int = 0
    partial_transactions: list[str] = field(default_factory=list)  # a sample of ids

    @property
    def valid(self) -> bool:
        return super().valid and self.partial == 0 and self.aborted_visible == 0 and self.acked_redelivered == 0


def check_transactions(history: Iterable[Op], gap_s: float = 0.5) -> TransactionsResult:
    """The verdict on a transactions workload's history (see the module docstring)."""
    ops = list(history)
    result = TransactionsResult()
    txns: dict[str, tuple[list[Any], str, str | None]] = {}  # id -> (values, outcome, error)
    for op in ops:
        if op.f == "txn" and op.process != NEMESIS and isinstance(op.value, dict):
            txid, values = str(op.value["id"]), list(op.value["values"])
            if op.type == INVOKE:
                txns[txid] = (values, INFO, None)  # until it completes: the run may end first
            elif txid in txns:
                txns[txid] = (values, op.type, op.error)
    outcome = {v: kind for values, kind, _ in txns.values() for v in values}
    result.transactions = len(txns)
    result.attempted = len(outcome)
    acknowledged = {v for v, kind in outcome.items() if kind == OK}
    failed = {v for v, kind in outcome.items() if kind == FAIL}
    indeterminate = {v for v, kind in outcome.items() if kind == INFO}
    result.acknowledged, result.failed, result.indeterminate = len(acknowledged), len(failed), len(indeterminate)

    receives = [op for op in ops if op.f == "receive" and op.type == OK]
    received = count_deliveries(result, receives)
    result.received = len(received)
    unexpected = sorted((received - set(outcome)) | (received & failed), key=str)
    result.unexpected, result.unexpected_values = len(unexpected), unexpected[:SAMPLE]
    result.recovered = len(received & indeterminate)
    lost = acknowledged - received
    result.lost_values = sorted(lost, key=str)[:SAMPLE]
    place_losses(result, lost, received, outcome)

    for txid, (values, kind, error) in txns.items():
        got = sum(1 for v in values if v in received)
        if kind == OK:
            result.committed += 1
        elif kind == INFO:
            result.indeterminate_transactions += 1
        elif error == "aborted":
            result.aborted += 1
        else:
            result.rolled_back += 1
        if kind in (OK, INFO) and 0 < got < len(values):
            result.partial += 1
            if len(result.partial_transactions) < SAMPLE:
                result.partial_transactions.append(txid)
        elif kind == FAIL and got:
            result.aborted_visible += 1
    _acknowledgements(result, ops, receives)
    liveness(result, ops, gap_s, f="txn")
    return result


def _acknowledgements(result: TransactionsResult, ops: list[Op], receives: list[Op]) -> None:
    consumed: dict[Any, float] = {}  # value -> when an ACK transaction acknowledging it committed
    for op in ops:
        if op.f != "ack-txn" or not isinstance(op.value, dict):
            continue
        if op.type == OK:
            result.ack_transactions_committed += 1
            for value in op.value["values"]:
                consumed.setdefault(value, op.mono)
        elif op.type == FAIL:
            result.ack_transactions_failed += 1
    result.acked_redelivered = sum(1 for op in receives if op.value in consumed and op.mono > consumed[op.value])
