"""The queue checker: a pure function of a history (Jepsen's `total-queue`, with the words of
its NATS and Redpanda analyses). No I/O, no clock. Its parts (outcomes of sends, deliveries,
losses, liveness) are shared by the other workloads' checkers (`chaos.topic_checker`,
`chaos.transactions_checker`), whose results extend `QueueResult`.

- attempted: values a producer invoked a send of; acknowledged: those whose send is `ok`;
  failed: `fail` (certainly not stored); indeterminate: `info` (may or may not be stored).
- lost: acknowledged and never received. Each is placed in its producer's sequence relative
  to the values of that producer that were received: before the first (prefix), after the
  last (postfix), or between (middle). Middle losses are the worst kind: later writes survived.
- unexpected: received but never attempted, or whose send certainly failed.
- recovered: indeterminate, and received after all.
- duplicated: received more than once. A repeat the broker flagged `redelivered` is a
  redelivery (at-least-once delivery, allowed); a value received twice without the flag is a
  stored duplicate, in whatever order the history holds its receptions: the history orders
  receptions as the clients' process saw them, so a consumer closing (a migration) may record
  the MESSAGE it got just before its DISCONNECT after another consumer recorded the
  redelivery that the DISCONNECT caused.
- reordered: per consumer and producer, first deliveries that arrived after a later value of
  the same producer (reported, not a verdict: several consumers and redeliveries reorder).
- unavailability: the longest stretch without an `ok` send while sends were being attempted;
  recovery: from each `heal` to the next `ok` send.

Valid exactly when lost, unexpected and stored duplicates are all zero.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from chaos.history import FAIL, INFO, INVOKE, NEMESIS, OK, Op


@dataclass
class QueueResult:
    """The common result shape: every workload's result extends it (the matrix reads these)."""

    attempted: int = 0
    acknowledged: int = 0
    failed: int = 0
    indeterminate: int = 0
    received: int = 0  # distinct values
    deliveries: int = 0
    lost: int = 0
    lost_prefix: int = 0
    lost_middle: int = 0
    lost_postfix: int = 0
    unexpected: int = 0
    recovered: int = 0
    redelivered: int = 0
    stored_duplicates: int = 0
    reordered: int = 0
    unavailable_max_s: float = 0.0
    recovery_s: list[float] = field(default_factory=list)
    lost_values: list[Any] = field(default_factory=list)  # at most a sample
    unexpected_values: list[Any] = field(default_factory=list)
    duplicated_values: list[Any] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return self.lost == 0 and self.unexpected == 0 and self.stored_duplicates == 0

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "valid": self.valid}


SAMPLE = 20


def check_queue(history: Iterable[Op], gap_s: float = 0.5) -> QueueResult:
    """The verdict on a queue workload's history (see the module docstring). Values are
    `"<producer>-<seq>"` strings, so each names its producer and its place in its sequence."""
    ops = list(history)
    result = QueueResult()
    invoked, outcome = send_outcomes(ops)
    count_sends(result, outcome)
    acknowledged, failed, indeterminate = split_outcomes(outcome)
    received = count_deliveries(result, [op for op in ops if op.f == "receive" and op.type == OK])
    result.received = len(received)
    unexpected = sorted((received - set(invoked)) | (received & failed), key=str)
    result.unexpected = len(unexpected)
    result.unexpected_values = unexpected[:SAMPLE]
    result.recovered = len(received & indeterminate)
    lost = acknowledged - received
    result.lost_values = sorted(lost, key=str)[:SAMPLE]
    place_losses(result, lost, received, invoked)
    liveness(result, ops, gap_s)
    return result


def send_outcomes(ops: list[Op], f: str = "send") -> tuple[dict[Any, Op], dict[Any, str]]:
    """Each value a client invoked an `f` of (its invoke op), and its outcome: ok, fail, or
    info (also when the run ended before it completed)."""
    invoked: dict[Any, Op] = {}
    outcome: dict[Any, str] = {}
    for op in ops:
        if op.f != f or op.process == NEMESIS:
            continue
        if op.type == INVOKE:
            invoked[op.value] = op
        elif op.type in (OK, FAIL, INFO):
            outcome[op.value] = op.type
    for value in invoked:
        outcome.setdefault(value, INFO)  # invoked, never completed: the run ended first
    return invoked, outcome


def split_outcomes(outcome: dict[Any, str]) -> tuple[set[Any], set[Any], set[Any]]:
    """(acknowledged, failed, indeterminate) values."""
    return ({v for v, t in outcome.items() if t == OK}, {v for v, t in outcome.items() if t == FAIL},
            {v for v, t in outcome.items() if t == INFO})


def count_sends(result: QueueResult, outcome: dict[Any, str]) -> None:
    acknowledged, failed, indeterminate = split_outcomes(outcome)
    result.attempted = len(outcome)
    result.acknowledged, result.failed, result.indeterminate = len(acknowledged), len(failed), len(indeterminate)


def count_deliveries(result: QueueResult, receives: list[Op], per_process: bool = False) -> set[Any]:
    """Deliveries, redeliveries, stored duplicates and reordering of `receives` (`receive` `ok`
    ops, in history order); returns the distinct values received. With `per_process` a value
    is a duplicate only when the same process received it again (a topic: each subscriber
    gets its own copy)."""
    seen: dict[Any, int] = defaultdict(int)
    unflagged: dict[Any, int] = defaultdict(int)  # receptions without the redelivered flag
    last_seq: dict[tuple[str, str], int] = {}
    for op in receives:
        result.deliveries += 1
        value = op.value
        key: Any = (op.process, value) if per_process else value
        if not op.redelivered:
            if unflagged[key]:  # a second first delivery: two copies were stored
                result.stored_duplicates += 1
                if len(result.duplicated_values) < SAMPLE:
                    result.duplicated_values.append(value)
            elif seen[key]:  # the first delivery, recorded after a redelivery it caused
                result.redelivered += 1
            unflagged[key] += 1
        elif seen[key]:
            result.redelivered += 1
        if not seen[key]:
            producer, seq = split_value(value)
            if producer is not None:
                order = (op.process, producer)
                if order in last_seq and seq < last_seq[order]:
                    result.reordered += 1
                last_seq[order] = max(seq, last_seq.get(order, seq))
        seen[key] += 1
    return {op.value for op in receives}


def split_value(value: Any) -> tuple[str | None, int]:
    """`"p3-17"` -> ("p3", 17); (None, 0) for anything else."""
    if isinstance(value, str) and "-" in value:
        producer, _, seq = value.rpartition("-")
        if seq.isdigit():
            return producer, int(seq)
    return None, 0


def place_losses(result: QueueResult, lost: set[Any], received: set[Any], sent: Iterable[Any]) -> None:
    """Add `lost` to the result, each placed in its producer's sequence of `sent` values
    relative to those in `received` (prefix, middle, postfix)."""
    result.lost += len(lost)
    by_producer: dict[str | None, list[tuple[int, Any]]] = defaultdict(list)
    for value in sent:
        producer, seq = split_value(value)
        by_producer[producer].append((seq, value))
    for values in by_producer.values():
        values.sort(key=lambda item: item[0])
        got = [i for i, (_, v) in enumerate(values) if v in received]
        first, last = (got[0], got[-1]) if got else (len(values), -1)
        for i, (_, value) in enumerate(values):
            if value not in lost:
                continue
            if i < first:
                result.lost_prefix += 1
            elif i > last:
                result.lost_postfix += 1
            else:
                result.lost_middle += 1


def liveness(result: QueueResult, ops: list[Op], gap_s: float, f: str = "send") -> None:
    """The longest stretch without an `ok` `f` while they were attempted, and each heal's
    recovery time."""
    sends = [op for op in ops if op.f == f and op.process != NEMESIS]
    if not sends:
        return
    oks = sorted(op.mono for op in sends if op.type == OK)
    attempts = sorted(op.mono for op in sends if op.type == INVOKE)
    if not attempts:
        return
    start, end = attempts[0], max(op.mono for op in sends)
    marks = [start, *oks, end]
    longest = max((b - a for a, b in zip(marks, marks[1:], strict=False)), default=0.0)
    result.unavailable_max_s = round(longest if longest > gap_s else 0.0, 3)
    heals = [op.mono for op in ops if op.process == NEMESIS and op.f == "heal" and op.type == OK]
    for heal in heals:
        after = next((t for t in oks if t >= heal), None)
        if after is not None:
            result.recovery_s.append(round(after - heal, 3))
