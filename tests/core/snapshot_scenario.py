"""A busy broker pinned as a snapshot file, so that the snapshot format stays readable.

Replicas restore from snapshots that older code wrote, so every snapshot of format 1 ever
written must restore to the same state with the same future. `SCENARIO` builds a state that
uses every part of the format (sessions, queue and topic subscriptions, an inactive durable,
in-flight deliveries, priorities, expiries, groups, an exclusive consumer, selectors, open
transactions, the dedup cache, dead-letter and expiry queues, retired topic counters, a body
reference as a group stores it); `FUTURE` then exercises what the state decides.

`python tests/core/snapshot_scenario.py OUT` writes, with whatever `raftmq` it imports, a
msgpack file of that snapshot and of the effects of `FUTURE` applied to its restore.
tests/core/data/snapshot_format1.msgpack was written so by the broker core as it stood
before the state became one record (commit 75d22d6); test_broker_snapshot.py reads it.
Only the public API is used here, so the script runs against old and new cores alike.
"""

from __future__ import annotations

import sys
from typing import Any

import msgpack

from raftmq.core.broker import Broker
from raftmq.core.commands import (
    Abort,
    Ack,
    Begin,
    Browse,
    Command,
    Commit,
    Connect,
    Disconnect,
    Nack,
    Send,
    Subscribe,
    Tick,
    Unsubscribe,
)
from raftmq.core.config import CoreConfig
from raftmq.protocol.header_block import block_of

CONFIG = CoreConfig(broker_name="pinned", max_delivery_count=2, dedup_cache_size=3, default_prefetch=2)

T = 1_000  # the scenario's clock (ms)
SOON = T + 50  # an expiry the first Tick of FUTURE passes
LATER = 10**12  # an expiry nothing passes


def _send(destination: str, body: object, *headers: tuple[str, str], tx: str | None = None) -> Send:
    return Send("p", destination, block_of(tuple(headers)), body, T, transaction=tx)


SCENARIO: list[Command] = [
    Connect("p", T, "producer", None),
    Connect("c", T, None, "client-c"),
    Connect("x", T),
    Connect("d", T),
    Connect("e", T),
    # Queue consumers: a selector, both client ack modes, small prefetches.
    Subscribe("c", "s1", "/queue/work", T, ack="client-individual", selector="color = 'red'", prefetch=2),
    Subscribe("c", "s2", "/queue/work", T, ack="client", prefetch=3),
    Subscribe("x", "e1", "/queue/excl", T, ack="client", exclusive=True),
    Subscribe("e", "e2", "/queue/excl", T, ack="client"),
    Subscribe("c", "g1", "/queue/groups", T, ack="client-individual", prefetch=5),
    Subscribe("x", "g2", "/queue/groups", T, ack="client-individual", prefetch=5),
    # Topic subscriptions: a durable that goes inactive, one that is dropped, a live one.
    Subscribe("d", "t1", "/topic/news", T, ack="client", prefetch=1, durable_name="dn"),
    Subscribe("d", "t2", "/topic/news", T, ack="client", durable_name="gone"),
    Subscribe("c", "t3", "/topic/news", T, selector="urgent = 'yes'"),
    _send("/queue/work", b"w-red", ("color", "red")),
    _send("/queue/work", b"w-blue", ("color", "blue"), ("priority", "9")),
    _send("/queue/work", b"w-plain"),
    _send("/queue/work", b"w-low", ("priority", "0"), ("expires", str(LATER))),
    _send("/queue/work", b"w-soon", ("expires", str(SOON))),
    _send("/queue/work", b"w-more", ("color", "red")),
    _send("/queue/work", b"w-last", ("color", "green")),
    _send("/queue/excl", b"x1"),
    _send("/queue/excl", b"x2"),
    _send("/queue/groups", b"ga1", ("JMSXGroupID", "A")),
    _send("/queue/groups", b"gb1", ("JMSXGroupID", "B")),
    _send("/queue/groups", b"ga2", ("JMSXGroupID", "A")),
    _send("/topic/news", b"n1"),
    _send("/topic/news", b"n2", ("urgent", "yes")),
    _send("/topic/news", b"n3", ("expires", str(LATER))),
    _send("/queue/idle", b"i1", ("_AMQ_DUPL_ID", "one")),
    _send("/queue/idle", b"i1-again", ("_AMQ_DUPL_ID", "one")),
    _send("/queue/idle", b"i2", ("_AMQ_DUPL_ID", "two"), ("persistent", "true")),
    _send("/queue/idle", [7, 0], ("_AMQ_DUPL_ID", "three")),  # a body as a group stores it
    _send("/queue/idle", b"i4", ("_AMQ_DUPL_ID", "four"), ("priority", "6")),
    # Settle some: a cumulative ACK, an individual one, a NACK that redelivers.
    Ack("c", T, ack_id="2"),
    Nack("x", T, ack_id="6"),
    Ack("d", T, ack_id="12"),
    Unsubscribe("d", "t2", T, drop_durable=True),
    Disconnect("d", T),  # "dn" goes inactive with its messages
    # Open transactions that the snapshot has to carry.
    Begin("p", "tx-p", T),
    _send("/queue/idle", b"in-tx", ("color", "red"), tx="tx-p"),
    _send("/topic/news", [9, 1], tx="tx-p"),
    Begin("c", "tx-c", T),
    Ack("c", T, ack_id="1", transaction="tx-c"),
    Begin("c", "tx-dead", T),
    Abort("c", "tx-dead", T),
]

FUTURE: list[Command] = [
    Tick(SOON),
    Commit("p", "tx-p", SOON),
    Commit("c", "tx-c", SOON),
    Nack("x", SOON, ack_id="9"),
    Nack("c", SOON, ack_id="4"),
    Connect("d2", SOON),
    Subscribe("d2", "back", "/topic/news", SOON, ack="client", prefetch=1, durable_name="dn"),
    Browse("c", "b", "/queue/idle", SOON, limit=10),
    Subscribe("e", "idle", "/queue/idle", SOON, ack="client", selector="color IS NULL"),
    _send("/queue/groups", b"gb2", ("JMSXGroupID", "B")),
    _send("/queue/idle", b"i5", ("_AMQ_DUPL_ID", "two")),
    _send("/queue/idle", b"i6", ("_AMQ_DUPL_ID", "one")),
    Disconnect("x", SOON),
    Ack("c", SOON, message_id="pinned-10", subscription="g1"),  # the STOMP 1.0/1.1 way
    Ack("c", SOON, ack_id="999"),  # unknown: a Reject that ends session c
    Tick(LATER + 1),
    Disconnect("e", LATER + 1, receipt="bye"),
    Subscribe("p", "dlq", "/queue/DLQ", LATER + 1),
    Subscribe("p", "exp", "/queue/ExpiryQueue", LATER + 1),
]


def _pairs(headers: Any) -> list[list[str]]:
    """A message's headers as [name, value] lists: a block's (cores since header blocks) or the
    pairs an earlier core held."""
    if isinstance(headers, str):
        from raftmq.protocol.header_block import pairs_of  # noqa: PLC0415 (not in an earlier raftmq)
        return [list(pair) for pair in pairs_of(headers)]
    return [list(pair) for pair in headers]


def summary(effect: Any) -> list[Any]:
    """An effect as plain data, its message flattened (the names are the same in every core)."""
    kind = type(effect).__name__
    if kind == "Deliver":
        m = effect.message
        message = [m.message_id, m.destination, _pairs(m.headers), m.body, m.priority, m.expires,
                   m.timestamp, m.group, m.persistent]
        return [kind, effect.session, effect.sub_id, effect.destination, message, effect.ack_id,
                effect.redelivered, effect.delivery_count]
    if kind == "Receipt":
        return [kind, effect.session, effect.receipt_id]
    if kind in ("Reject", "SessionError"):  # the effect's name before the rename
        return ["Reject", effect.session, effect.message, effect.detail, effect.receipt_id]
    if kind == "BrowseEnd":
        return [kind, effect.session, effect.sub_id, effect.destination, effect.count, effect.truncated]
    raise TypeError(f"unknown effect {kind}")


def roundtrip(data: Any) -> Any:
    """`data` as a replica reads it back: through msgpack, as the server stores snapshots."""
    return msgpack.unpackb(msgpack.packb(data, use_bin_type=True), raw=False)


def future_of(snapshot: dict[str, Any]) -> list[list[Any]]:
    """The effects of `FUTURE` on the broker `snapshot` restores to."""
    broker = Broker.restore(snapshot, CONFIG)
    return [summary(effect) for command in FUTURE for effect in broker.apply(command)]


def build() -> dict[str, Any]:
    """The pinned record: the snapshot of `SCENARIO` and the future it decides."""
    broker = Broker(CONFIG)
    for command in SCENARIO:
        broker.apply(command)
    snapshot = roundtrip(broker.snapshot())
    return {"snapshot": snapshot, "future": roundtrip(future_of(snapshot))}


if __name__ == "__main__":
    with open(sys.argv[1], "wb") as out:
        out.write(msgpack.packb(build(), use_bin_type=True))
