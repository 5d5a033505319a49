"""Snapshot and restore: plain data, and the same future after a restore."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgpack
import pytest

from raftmq.core import dead_letter
from raftmq.core.broker import Broker
from raftmq.core.commands import (
    Abort,
    Ack,
    Begin,
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
from raftmq.core.snapshot import SnapshotError, body_refs
from raftmq.protocol.header_block import block_of
from tests.core import snapshot_scenario
from tests.helpers.broker_harness import Harness, delivers

CONFIG = CoreConfig(broker_name="snap", max_delivery_count=2, dedup_cache_size=3, default_prefetch=2,
                    selector_scan_limit=4)


def busy_broker() -> tuple[Harness, list[str]]:
    """A broker with something of everything in its state; returns the harness and live ack ids."""
    h = Harness(CONFIG)
    for name in ("p", "c1", "c2", "c3"):
        h.connect(name, login=f"user-{name}", client_id=f"id-{name}")
    h.subscribe("c1", "q", "/queue/a", ack="client")
    h.subscribe("c1", "q2", "/queue/a", ack="client-individual")
    h.subscribe("c2", "q", "/queue/a", ack="client-individual", prefetch=1, selector="n > 2")
    h.subscribe("c3", "x", "/queue/a", ack="client-individual", exclusive=False)
    h.subscribe("c1", "t", "/topic/t", ack="client-individual", durable_name="d1")
    h.subscribe("c2", "t", "/topic/t", ack="auto")
    h.subscribe("c3", "t", "/topic/t", ack="client", durable_name="d2", selector="n < 5")
    h.subscribe("c3", "g", "/queue/g", ack="client-individual", prefetch=1)
    h.subscribe("c2", "g", "/queue/g", ack="client-individual", prefetch=1)
    ack_ids: list[str] = []
    for n in range(8):
        headers = {"n": str(n), "priority": str(n % 3 * 3), "color": "red" if n % 2 else "blue"}
        if n % 3 == 0:
            headers["expires"] = str(h.now + 500 * (n + 1))
        if n % 4 == 1:
            headers["_AMQ_DUPL_ID"] = f"dup-{n}"
        for destination in ("/queue/a", "/topic/t"):
            ack_ids += [d.ack_id for d in delivers(h.send("p", destination, f"{destination}-{n}".encode(), headers))
                        if d.ack_id]
        ack_ids += [d.ack_id for d in delivers(h.send("p", "/queue/g", n, {"JMSXGroupID": f"g{n % 2}"})) if d.ack_id]
    h.send("p", "/queue/other", b"waiting", {"persistent": "true"})
    # A non-durable topic subscription that ended (its counters live on in the topic).
    h.subscribe("c2", "gone", "/topic/t", ack="client-individual")
    h.send("p", "/topic/t", b"t-extra", {"n": "7"})
    h.unsubscribe("c2", "gone")
    # A store whose last pass was cut short by the scan limit, with an expiring message in it.
    for n in range(1, 8):
        h.send("p", "/queue/s", n, {"n": str(n), "expires": str(h.now + 2_000)} if n == 2 else {"n": str(n)})
    h.send("p", "/queue/s", 200, {"n": "200"})
    h.subscribe("c2", "picky", "/queue/s", selector="n > 100")
    # Redelivery, dead letters, the message-id index.
    first = ack_ids[0]
    again = [d.ack_id for d in delivers(h.nack("c1", first)) if d.ack_id]
    ack_ids += again
    on_x = [d.message.message_id for d in h.broker.state.sessions["c3"].deliveries.values() if d.sub.sub_id == "x"]
    assert on_x, "c3 should hold a delivery on x"
    h.apply(Ack("c3", h.now, message_id=on_x[0], subscription="x"))  # builds the message-id index
    # Durable d1 goes inactive with messages in flight; transactions stay open.
    h.unsubscribe("c1", "t")
    h.begin("p", "tx1")
    h.send("p", "/queue/a", b"in-tx", {"n": "9"}, transaction="tx1")
    h.begin("c3", "tx2")
    live = [ack for ack in ack_ids if ack in h.broker.state.sessions["c3"].deliveries]
    if live:
        h.ack("c3", live[0], transaction="tx2")
    h.tick(h.now + 1_200)
    return h, ack_ids


def continuation(now: int, ack_ids: list[str]) -> list[Command]:
    """Commands touching every part of the restored state (some of them invalid on purpose)."""
    commands: list[Command] = [
        Send("p", "/queue/s", block_of((("n", "3"),)), b"s-late", now + 5_000),
        Commit("p", "tx1", now, receipt="r-commit"),
    ]
    for ack_id in ack_ids[::3]:
        for session in ("c1", "c2", "c3"):
            commands.append(Ack(session, now, ack_id=ack_id))
    commands += [
        Nack("c3", now, message_id="snap-3"),
        Commit("c3", "tx2", now),
        Abort("c3", "nope", now, receipt="bad"),
        Send("p", "/queue/a", block_of((("n", "4"), ("_AMQ_DUPL_ID", "dup-5"))), b"dup", now, receipt="r-dup"),
        Send("p", "/queue/g", block_of((("JMSXGroupID", "g1"),)), b"g-late", now),
        Subscribe("c1", "t", "/topic/t", now, ack="client-individual", durable_name="d1"),
        Send("p", "/topic/t", block_of((("n", "1"),)), b"t-late", now),
        Disconnect("c2", now, receipt="r-bye"),
        Tick(now + 10_000),
        Subscribe("c1", "ex", "/queue/ExpiryQueue", now + 10_000),
        Subscribe("c1", "dl", "/queue/DLQ", now + 10_000),
        Unsubscribe("c3", "t", now + 10_000, drop_durable=True),
        Disconnect("c3", now + 10_000),
        Connect("c4", now + 10_000),
        Subscribe("c4", "all", "/queue/a", now + 10_000),
        Subscribe("c4", "other", "/queue/other", now + 10_000),
        Subscribe("c4", "g", "/queue/g", now + 10_000),
        Disconnect("c1", now + 10_000),
    ]
    return commands


def plain(value: Any) -> bool:
    if isinstance(value, dict):
        return all(isinstance(k, str) and plain(v) for k, v in value.items())
    if isinstance(value, list):
        return all(plain(v) for v in value)
    return value is None or isinstance(value, (str, int, bool, bytes))


def test_snapshot_is_plain_data_and_survives_msgpack() -> None:
    h, _ = busy_broker()
    snap = h.broker.snapshot()
    assert plain(snap)
    unpacked = msgpack.unpackb(msgpack.packb(snap, use_bin_type=True), raw=False)
    assert unpacked == snap
    assert Broker.restore(unpacked, CONFIG).snapshot() == snap


def test_restored_broker_has_the_same_future() -> None:
    h, ack_ids = busy_broker()
    snap = msgpack.unpackb(msgpack.packb(h.broker.snapshot(), use_bin_type=True), raw=False)
    restored = Broker.restore(snap, CONFIG)
    assert restored.stats() == h.broker.stats()
    effects_seen = 0
    for command in continuation(h.now, ack_ids):
        original_effects = h.broker.apply(command)
        assert restored.apply(command) == original_effects, command
        effects_seen += len(original_effects)
        assert restored.stats() == h.broker.stats()
    assert restored.snapshot() == h.broker.snapshot()
    assert effects_seen > 30  # the continuation really exercised the state


def test_a_restored_empty_broker_equals_a_new_one() -> None:
    assert Broker.restore(Broker(CONFIG).snapshot(), CONFIG).snapshot() == Broker(CONFIG).snapshot()


def test_restore_rejects_what_is_not_a_snapshot() -> None:
    with pytest.raises(SnapshotError):
        Broker.restore({"format": 99}, CONFIG)
    with pytest.raises(SnapshotError):
        Broker.restore([], CONFIG)  # type: ignore[arg-type]


def test_message_bodies_are_kept_as_they_are() -> None:
    h = Harness(CONFIG)
    h.connect("p")
    body = bytes(range(256)) * 4
    h.send("p", "/queue/a", body)
    restored = Broker.restore(h.broker.snapshot(), CONFIG)
    restored.apply(Connect("c", 0))
    (d,) = delivers(restored.apply(Subscribe("c", "1", "/queue/a", 0)))
    assert d.message.body == body


def test_restore_then_snapshot_keeps_open_transactions() -> None:
    h = Harness(CONFIG)
    h.connect("p")
    h.begin("p", "t")
    h.send("p", "/queue/a", b"x", {"k": "v"}, transaction="t")
    effects = Broker.restore(h.broker.snapshot(), CONFIG).apply(Begin("p", "t", 0))
    assert effects[0].message == "transaction already begun"  # type: ignore[union-attr]
    restored = Broker.restore(h.broker.snapshot(), CONFIG)
    restored.apply(Commit("p", "t", 0))
    assert restored.stats()["destinations"]["/queue/a"]["depth"] == 1


def test_restore_rejects_a_damaged_snapshot() -> None:
    h, _ = busy_broker()
    snap = h.broker.snapshot()
    del snap["subscriptions"][0]["ack"]
    with pytest.raises(SnapshotError):
        Broker.restore(snap, CONFIG)
    snap = h.broker.snapshot()
    snap["queues"][0]["lanes"] = snap["queues"][0]["lanes"][:3]
    with pytest.raises(SnapshotError):
        Broker.restore(snap, CONFIG)


def test_the_state_names_the_bodies_its_snapshot_holds() -> None:
    h, ack_ids = busy_broker()
    refs = list(h.broker.body_refs())
    assert refs == list(body_refs(h.broker.snapshot()))
    assert b"in-tx" in refs and b"waiting" in refs and 200 in refs  # a transaction, a queue, a pass cut short
    in_flight = [d.message.body for s in h.broker.state.sessions.values() for d in s.deliveries.values()]
    assert in_flight and all(body in refs for body in in_flight)
    for command in continuation(h.now, ack_ids):
        h.broker.apply(command)
        assert list(h.broker.body_refs()) == list(body_refs(h.broker.snapshot())), command


PINNED = Path(__file__).parent / "data" / "snapshot_format1.msgpack"
# The same scenario written by the core since header blocks (snapshot format 2).
PINNED_BLOCKS = Path(__file__).parent / "data" / "snapshot_format2.msgpack"


def pinned() -> dict[str, Any]:
    """The snapshot (and its future) that the core before the state record wrote for
    `snapshot_scenario.SCENARIO` (see tests/core/snapshot_scenario.py)."""
    record: dict[str, Any] = msgpack.unpackb(PINNED.read_bytes(), raw=False)
    return record


# Headers the dead-letter and expiry queues' copies carry since the pinned core
# (raftmq.core.dead_letter): the only difference the pinned future allows, and it must show them.
NEWER_HEADERS = {dead_letter.REASON, dead_letter.DELIVERIES, dead_letter.CAUSE}


def as_pinned(effects: list[Any]) -> list[Any]:
    """`effects` (summaries) without NEWER_HEADERS; each DLQ or expiry copy delivered must have had them."""
    copies = 0
    for effect in effects:
        if effect[0] == "Deliver":
            headers = effect[4][2]
            names = {name for name, _value in headers}
            if dead_letter.ORIGINAL_DESTINATION in names:
                assert NEWER_HEADERS <= names, effect
                copies += 1
            effect[4][2] = [header for header in headers if header[0] not in NEWER_HEADERS]
    assert copies, "the pinned future delivers dead-letter and expiry copies"
    return effects


def test_a_snapshot_an_older_core_wrote_restores_with_the_same_future() -> None:
    record = pinned()
    snapshot = record["snapshot"]
    broker = Broker.restore(snapshot, snapshot_scenario.CONFIG)
    broker.check_invariants()
    assert snapshot["format"] == 1
    # Written again in format 2, with what the core writes for the same commands today.
    blocks: dict[str, Any] = msgpack.unpackb(PINNED_BLOCKS.read_bytes(), raw=False)
    assert snapshot_scenario.roundtrip(broker.snapshot()) == blocks["snapshot"]
    effects = []
    for command in snapshot_scenario.FUTURE:
        effects += [snapshot_scenario.summary(effect) for effect in broker.apply(command)]
        broker.check_invariants()
    assert as_pinned(snapshot_scenario.roundtrip(effects)) == record["future"]


def test_the_core_still_writes_the_pinned_snapshot() -> None:
    """Same commands, same snapshot, to the byte: the format did not drift. The same future as
    the core of format 1 wrote, but for the headers dead letters carry now."""
    built = snapshot_scenario.build()
    assert msgpack.packb(built, use_bin_type=True) == PINNED_BLOCKS.read_bytes()
    assert as_pinned(built["future"]) == pinned()["future"]


def test_the_pinned_snapshot_names_its_bodies() -> None:
    snapshot = pinned()["snapshot"]
    refs = list(body_refs(snapshot))
    assert [7, 0] in refs and [9, 1] in refs and b"in-tx" in refs  # a queue's, a transaction's
    assert refs == list(Broker.restore(snapshot, snapshot_scenario.CONFIG).body_refs())
