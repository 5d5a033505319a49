"""The topic checker: a pure function of a `topic` workload's history (chaos.topic). No I/O,
no clock.

Every subscriber gets its own copy of each value, so the counts are per subscriber:
- windows: a subscriber's `subscribe` `invoke` opens one, its `ok` (the RECEIPT) makes it
  certain, a `detach` (or the history's end) closes it.
- owed (durable subscribers): every acknowledged value whose send was invoked after the
  RECEIPT of the subscriber's first SUBSCRIBE. The subscription lives on the broker across
  the subscriber's crashes and reconnects and the group's failovers, so it is owed all of
  them. **lost**: owed and never received by that subscriber (placed in its producer's
  sequence relative to what that subscriber received: prefix, middle, postfix).
- several groups (producers record theirs in an `open` op, subscribers in their `subscribe`
  ops): a value sent to another group than the subscriber's is copied to the subscriber's
  group only once that group's advert of the subscription arrived, later and unobservably. So
  across groups, a durable is owed a producer's acknowledged values from the first of that
  producer's values it received on (routing then knew the subscription, and a durable one stays
  advertised), and neither early deliveries nor gaps are judged.
- **unexpected**: a (subscriber, value) received that was never sent, whose send certainly
  failed, or that is **early**: its send was acknowledged before the SUBSCRIBE that opened the
  subscription it arrived on was even written (for a durable, the first one; for a
  non-durable, the window it arrived in), so no copy could have been made for it.
- **stored duplicates**: a subscriber receiving a value again without the `redelivered` flag.
- gaps (non-durable, reported, not a verdict): acknowledged values sent entirely within one of
  its certain windows (invoked after its RECEIPT, acknowledged before it closed) that it did
  not receive.

Valid exactly when lost, unexpected and stored duplicates are all zero (`QueueResult.valid`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from chaos.checker import (
    SAMPLE,
    QueueResult,
    count_deliveries,
    count_sends,
    liveness,
    place_losses,
    send_outcomes,
    split_outcomes,
    split_value,
)
from chaos.history import FAIL, INFO, INVOKE, OK, Op


@dataclass
class TopicResult(QueueResult):
    durable_subscribers: int = 0
    non_durable_subscribers: int = 0
    windows: int = 0  # certain subscription windows (a RECEIPT came)
    owed: int = 0  # (durable subscriber, value) pairs
    early: int = 0  # deliveries to a subscription made after the value was stored (in unexpected)
    gaps: int = 0  # non-durable: missed within a window (not a verdict)


@dataclass
class _Subscriber:
    durable: bool
    group: int | None = None
    first_invoke: float | None = None
    first_ok: float | None = None
    windows: list[list[float | None]] = field(default_factory=list)  # [invoke, ok or None, close or None]
    receives: list[Op] = field(default_factory=list)


def check_topic(history: Iterable[Op], gap_s: float = 0.5) -> TopicResult:
    """The verdict on a topic workload's history (see the module docstring)."""
    ops = list(history)
    result = TopicResult()
    invoked, outcome = send_outcomes(ops)
    count_sends(result, outcome)
    acknowledged, failed, indeterminate = split_outcomes(outcome)
    sent_ok = {op.value: op.mono for op in ops if op.f == "send" and op.type == OK}
    subscribers = _subscribers(ops)
    producer_group = {op.process: op.value.get("group") for op in ops if op.f == "open" and isinstance(op.value, dict)}

    def same_group(producer: str | None, subscriber: _Subscriber) -> bool:
        return producer_group.get(producer or "") == subscriber.group  # both unknown: one group

    result.durable_subscribers = sum(1 for s in subscribers.values() if s.durable)
    result.non_durable_subscribers = len(subscribers) - result.durable_subscribers
    result.windows = sum(1 for s in subscribers.values() for w in s.windows if w[1] is not None)
    receives = [op for op in ops if op.f == "receive" and op.type == OK]
    received = count_deliveries(result, receives, per_process=True)
    result.received = len(received)
    result.recovered = len(received & indeterminate)

    unexpected: set[tuple[str, Any]] = set()
    for op in receives:
        value = op.value
        if value not in invoked or value in failed:
            unexpected.add((op.process, value))
            continue
        subscriber = subscribers.get(op.process)
        opened = _opened(subscriber, op.mono) if subscriber is not None else None
        early = value in sent_ok and opened is not None and sent_ok[value] < opened
        early = early and subscriber is not None and same_group(split_value(value)[0], subscriber)
        if early and (op.process, value) not in unexpected:
            result.early += 1
            unexpected.add((op.process, value))
    result.unexpected = len(unexpected)
    result.unexpected_values = [f"{p}:{v}" for p, v in sorted(unexpected, key=str)[:SAMPLE]]

    for name, subscriber in sorted(subscribers.items()):
        got = {op.value for op in subscriber.receives}
        if subscriber.durable:
            if subscriber.first_ok is None:
                continue
            start = subscriber.first_ok
            first_got: dict[str | None, int] = {}  # per producer, the lowest sequence number it received
            for value in got:
                producer, seq = split_value(value)
                first_got[producer] = min(seq, first_got.get(producer, seq))

            def due(value: Any) -> bool:
                producer, seq = split_value(value)
                if same_group(producer, subscriber):
                    return invoked[value].mono > start
                return producer in first_got and seq > first_got[producer]

            owed = {v for v in acknowledged if due(v)}
            result.owed += len(owed)
            lost = owed - got
            result.lost_values += [f"{name}:{v}" for v in sorted(lost, key=str)][:SAMPLE - len(result.lost_values)]
            place_losses(result, lost, got, [v for v in invoked if due(v)])
        else:
            local = [v for v in acknowledged if same_group(split_value(v)[0], subscriber)]
            for _, ok_at, closed_at in subscriber.windows:
                if ok_at is None:
                    continue
                end = closed_at if closed_at is not None else float("inf")
                result.gaps += sum(1 for v in local if invoked[v].mono > ok_at and sent_ok[v] < end and v not in got)
    liveness(result, ops, gap_s)
    return result


def _subscribers(ops: list[Op]) -> dict[str, _Subscriber]:
    subscribers: dict[str, _Subscriber] = {}
    for op in ops:
        if op.f == "subscribe":
            about = op.value if isinstance(op.value, dict) else {}
            subscriber = subscribers.setdefault(op.process, _Subscriber(bool(about.get("durable")), about.get("group")))
            if op.type == INVOKE:
                subscriber.windows.append([op.mono, None, None])
                if subscriber.first_invoke is None:
                    subscriber.first_invoke = op.mono
            elif subscriber.windows and op.type == OK:
                subscriber.windows[-1][1] = op.mono
                if subscriber.first_ok is None:
                    subscriber.first_ok = op.mono
            elif subscriber.windows and op.type in (FAIL, INFO):
                subscriber.windows[-1][2] = op.mono
        elif op.f == "detach" and op.process in subscribers and subscribers[op.process].windows:
            subscribers[op.process].windows[-1][2] = op.mono
        elif op.f == "receive" and op.type == OK and op.process in subscribers:
            subscribers[op.process].receives.append(op)
    return subscribers


def _opened(subscriber: _Subscriber, at: float) -> float | None:
    """When the SUBSCRIBE that made the subscription a delivery at `at` came on was written:
    a durable's first; a non-durable's latest before `at`."""
    if subscriber.durable:
        return subscriber.first_invoke
    opened = [w[0] for w in subscriber.windows if w[0] is not None and w[0] <= at]
    return opened[-1] if opened else None
