"""The mqtt checker: a pure function of an `mqtt` workload's history (chaos.mqtt). No I/O, no
clock.

What MQTT promises, and what raftmq adds (docs/mqtt.md), and so what is judged:
- a PUBACK (QoS 1) or PUBCOMP (QoS 2) means the message is stored: a subscriber whose session
  the broker keeps (3.1.1 clean session 0, MQTT 5 a session expiry) and whose subscription was
  granted (SUBACK) before the PUBLISH was sent is owed it, across its own crashes and the
  group's fail-overs. **lost**: owed to a kept-session subscriber and never received by it
  (placed in its publisher's sequence relative to what that subscriber received). A shared
  subscription (`$share/G/filter`) is owed each value once, by its members as a whole (competing
  consumers): lost when no member received it.
- this workload's subscriptions are QoS 1, so deliveries are at least once, and raftmq flags
  a delivery made again (a session resumed with it unacknowledged, on this leader or the next) DUP. A QoS 2
  publication is stored exactly once (its key kept in the core from the PUBLISH to the PUBREL,
  through fail-overs), so a completed one reaches a subscriber as new (without DUP) at most
  once. **stored duplicates**: a completed QoS 2 value a subscriber received again without DUP.
  A QoS 1 PUBLISH may be stored twice where its publisher sends it again; this workload's QoS 1
  publishers never do, but MQTT promises nothing there, so such repeats, and those of QoS 2
  publications that never completed, are counted (`repeats_not_judged`), not judged.
- **unexpected**: a value received that no publisher sent, or whose PUBLISH certainly failed
  (a PUBACK or PUBREC with an error reason code).
- **sessions lost**: a kept session's subscriber (or QoS 2 publisher) reconnected after its
  session was made and was told "session not present".

A value's QoS is its publisher's (the publisher's `open` op, `{"qos": 2, ...}`; without one,
its name: `q2p1-17` is publisher q2p1's, QoS 2). Subscribers' ops: `subscribe` invoke / ok at
the SUBACK granting it (`{"kept": true, "protocol": "5", "share": null, "qos": 1}`) / fail when
refused / info when the connection broke first; `connect` ok `{"present": bool}` at each
reconnection; `detach` ok when a connection ended; `receive` ok with `redelivered` = DUP.

Valid exactly when lost, unexpected, stored duplicates and sessions lost are all zero.
"""

from __future__ import annotations

import re
from collections import defaultdict
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
)
from chaos.history import FAIL, OK, Op

_PUBLISHER = re.compile(r"^q(\d)p")


@dataclass
class MqttResult(QueueResult):
    subscribers: int = 0  # kept-session subscribers (not shared) whose subscription was granted
    shared_subscribers: int = 0  # members of shared subscriptions that were granted
    shared_refused: int = 0  # shared subscribers whose SUBSCRIBE was refused (not served by the broker)
    owed: int = 0  # (subscriber or shared group, value) pairs
    qos2_acknowledged: int = 0  # completed QoS 2 publications (PUBCOMP)
    repeats_not_judged: int = 0  # unflagged repeats of QoS 1 values and of QoS 2 ones never completed
    resumed: int = 0  # reconnections of kept sessions that found the session present
    sessions_lost: int = 0  # ... that were told "session not present"
    protocols: dict[str, int] = field(default_factory=dict)  # acknowledged publications per MQTT version

    @property
    def valid(self) -> bool:
        return super().valid and self.sessions_lost == 0


@dataclass
class _Subscriber:
    share: str | None = None
    first_ok: float | None = None
    refused: bool = False
    made: bool = False  # a SUBACK granted it: its session holds a subscription from then on
    got: set[Any] = field(default_factory=set)


def qos_of(value: Any, publishers: dict[str, dict[str, Any]]) -> int:
    producer = value.rpartition("-")[0] if isinstance(value, str) else ""
    about = publishers.get(producer)
    if about is not None and isinstance(about.get("qos"), int):
        return int(about["qos"])
    match = _PUBLISHER.match(producer)
    return int(match.group(1)) if match else 1


def check_mqtt(history: Iterable[Op], gap_s: float = 0.5) -> MqttResult:
    """The verdict on an mqtt workload's history (see the module docstring)."""
    ops = list(history)
    result = MqttResult()
    invoked, outcome = send_outcomes(ops)
    count_sends(result, outcome)
    acknowledged, failed, indeterminate = split_outcomes(outcome)
    publishers = {op.process: op.value for op in ops if op.f == "open" and op.type == OK and isinstance(op.value, dict)}
    for value in acknowledged:
        about = publishers.get(value.rpartition("-")[0] if isinstance(value, str) else "", {})
        version = str(about.get("protocol", "?"))
        result.protocols[version] = result.protocols.get(version, 0) + 1
    qos2 = {v for v in acknowledged if qos_of(v, publishers) == 2}
    result.qos2_acknowledged = len(qos2)

    subscribers = _subscribers(ops, result)
    receives = [op for op in ops if op.f == "receive" and op.type == OK]
    received = count_deliveries(result, receives, per_process=True)
    result.received = len(received)
    result.recovered = len(received & indeterminate)
    result.stored_duplicates, result.duplicated_values = 0, []
    unflagged: dict[tuple[str, Any], int] = defaultdict(int)
    for op in receives:
        if not op.redelivered:
            unflagged[(op.process, op.value)] += 1
    for (process, value), copies in sorted(unflagged.items(), key=str):
        if copies < 2:
            continue
        if value in qos2:
            result.stored_duplicates += copies - 1
            if len(result.duplicated_values) < SAMPLE:
                result.duplicated_values.append(f"{process}:{value}")
        else:
            result.repeats_not_judged += copies - 1

    unexpected = sorted({(op.process, op.value) for op in receives if op.value not in invoked or op.value in failed},
                        key=str)
    result.unexpected = len(unexpected)
    result.unexpected_values = [f"{p}:{v}" for p, v in unexpected[:SAMPLE]]

    # The owed: each kept subscriber by itself, each shared group as a whole.
    judged: dict[str, tuple[float, set[Any]]] = {}
    for name, subscriber in sorted(subscribers.items()):
        if subscriber.first_ok is None:
            continue
        key = name if subscriber.share is None else f"$share/{subscriber.share}"
        start, got = judged.get(key, (subscriber.first_ok, set()))
        judged[key] = (min(start, subscriber.first_ok), got | subscriber.got)
    for key, (start, got) in sorted(judged.items()):
        owed = {v for v in acknowledged if invoked[v].mono > start}
        result.owed += len(owed)
        lost = owed - got
        result.lost_values += [f"{key}:{v}" for v in sorted(lost, key=str)][:SAMPLE - len(result.lost_values)]
        place_losses(result, lost, got, [v for v in invoked if invoked[v].mono > start])
    liveness(result, ops, gap_s)
    return result


def _subscribers(ops: list[Op], result: MqttResult) -> dict[str, _Subscriber]:
    subscribers: dict[str, _Subscriber] = {}
    for op in ops:
        if op.f == "subscribe":
            about = op.value if isinstance(op.value, dict) else {}
            subscriber = subscribers.setdefault(op.process, _Subscriber(about.get("share")))
            if op.type == OK:
                subscriber.made = True
                if subscriber.first_ok is None:
                    subscriber.first_ok = op.mono
            elif op.type == FAIL and subscriber.share is not None and subscriber.first_ok is None:
                subscriber.refused = True
        elif op.f == "connect" and op.type == OK and isinstance(op.value, dict) and op.process in subscribers:
            subscriber = subscribers[op.process]
            if op.value.get("present"):
                result.resumed += 1
            elif subscriber.made:
                result.sessions_lost += 1
                subscriber.made = False
        elif op.f == "connect" and op.type == OK and isinstance(op.value, dict):  # a QoS 2 publisher's kept session
            if op.value.get("present"):
                result.resumed += 1
            else:
                result.sessions_lost += 1
        elif op.f == "receive" and op.type == OK:
            subscribers.setdefault(op.process, _Subscriber()).got.add(op.value)
    granted = [s for s in subscribers.values() if s.first_ok is not None]
    result.subscribers = sum(1 for s in granted if s.share is None)
    result.shared_subscribers = sum(1 for s in granted if s.share is not None)
    result.shared_refused = sum(1 for s in subscribers.values() if s.refused)
    return subscribers

