"""Browsing a queue (Browse): copies in queue order, then BrowseEnd, and no change of state."""

from __future__ import annotations

import msgpack

from raftmq.core.commands import MAX_BROWSE_LIMIT, Browse, Noop
from raftmq.core.effects import BrowseEnd, Deliver
from tests.helpers.broker_harness import Harness, bodies, delivers, errors, receipts


def browse(h: Harness, session: str, destination: str, **kw: object) -> list:
    return h.apply(Browse(session, kw.pop("sub_id", "b"), destination, h.now, **kw))  # type: ignore[arg-type]


def snapshot_bytes(h: Harness) -> bytes:
    return msgpack.packb(h.broker.snapshot(), use_bin_type=True)


def busy(h: Harness) -> None:
    """A queue with ready, in-flight and redelivered messages of several priorities."""
    h.connect("p")
    h.connect("c1")
    h.connect("c2")
    for i, priority in enumerate((4, 9, 4, 0, 9, 4)):
        h.send("p", "/queue/q", f"m{i}".encode(), {"priority": str(priority), "n": str(i)})
    # c1 takes the two of priority 9 and goes away: both return, redelivered; c2 takes m1 again.
    taken = delivers(h.subscribe("c1", "s", "/queue/q", ack="client-individual", prefetch=2))
    assert [d.message.body for d in taken] == [b"m1", b"m4"]
    h.disconnect("c1")
    (again,) = delivers(h.subscribe("c2", "s", "/queue/q", ack="client-individual", prefetch=1))
    assert again.message.body == b"m1" and again.delivery_count == 2


def test_browse_sees_ready_messages_in_queue_order_and_changes_nothing() -> None:
    h = Harness()
    busy(h)
    h.connect("viewer")
    before = snapshot_bytes(h)
    stats_before = h.broker.stats()
    effects = browse(h, "viewer", "/queue/q", receipt="r1")
    copies = delivers(effects)
    # Priority 9 first (m4, redelivered; m1 is in flight, so not there), then 4 in arrival
    # order, then 0.
    assert [d.message.body for d in copies] == [b"m4", b"m0", b"m2", b"m5", b"m3"]
    assert all(d.session == "viewer" and d.sub_id == "b" and d.ack_id is None for d in copies)
    assert [(d.redelivered, d.delivery_count) for d in copies] == [(True, 1)] + [(False, 0)] * 4
    assert isinstance(effects[-2], BrowseEnd) and effects[-2] == BrowseEnd("viewer", "b", "/queue/q", 5, False)
    assert receipts(effects) == ["r1"] and effects[-1].receipt_id == "r1"  # type: ignore[union-attr]
    assert snapshot_bytes(h) == before
    assert h.broker.stats() == stats_before
    # The queue behaves exactly as before: the consumer gets the same messages next.
    got = delivers(h.subscribe("viewer", "real", "/queue/q"))
    assert [d.message.body for d in got] == [b"m4", b"m0", b"m2", b"m5", b"m3"]
    assert got[0].delivery_count == 2 and got[1].delivery_count == 1  # browsing counted nothing


def test_limit_selector_and_truncation() -> None:
    h = Harness()
    h.connect("p")
    for i in range(10):
        h.send("p", "/queue/q", f"m{i}".encode(), {"n": str(i)})
    before = snapshot_bytes(h)
    limited = browse(h, "p", "/queue/q", limit=3)
    assert bodies(limited) == [b"m0", b"m1", b"m2"] and limited[-1] == BrowseEnd("p", "b", "/queue/q", 3, True)
    exact = browse(h, "p", "/queue/q", limit=10)
    assert len(delivers(exact)) == 10 and exact[-1] == BrowseEnd("p", "b", "/queue/q", 10, False)
    odd = browse(h, "p", "/queue/q", selector="n >= 5 AND n <> 7")
    assert bodies(odd) == [b"m5", b"m6", b"m8", b"m9"]
    assert snapshot_bytes(h) == before


def test_expired_messages_are_not_shown_and_not_moved() -> None:
    h = Harness()
    h.connect("p")
    h.send("p", "/queue/q", b"old", {"expires": str(h.now + 10)})
    h.send("p", "/queue/q", b"fresh")
    h.now += 50  # no Tick yet: "old" is due but still stored
    before = snapshot_bytes(h)
    assert bodies(browse(h, "p", "/queue/q")) == [b"fresh"]
    assert snapshot_bytes(h) == before
    h.tick()
    assert h.stats("/queue/q")["expired"] == 1


def test_an_unknown_queue_browses_empty_and_is_not_created() -> None:
    h = Harness()
    h.connect("v")
    effects = browse(h, "v", "/queue/nothing", receipt="r")
    assert effects == [BrowseEnd("v", "b", "/queue/nothing", 0, False), *effects[1:]]
    assert receipts(effects) == ["r"]
    assert "/queue/nothing" not in h.broker.stats()["destinations"]


def test_topics_bad_limits_selectors_and_ids_are_refused() -> None:
    h = Harness()
    h.connect("v")
    h.subscribe("v", "taken", "/queue/q")
    for command, message in [
        (Browse("v", "b", "/topic/t", h.now), "browsing works on queues"),
        (Browse("v", "b", "/queue/q", h.now, limit=0), "invalid browse limit"),
        (Browse("v", "b", "/queue/q", h.now, limit=MAX_BROWSE_LIMIT + 1), "invalid browse limit"),
        (Browse("v", "b", "/queue/q", h.now, selector="a ="), "invalid selector"),
        (Browse("v", "taken", "/queue/q", h.now), "duplicate subscription id"),
    ]:
        h.connect("v")
        if command.sub_id == "taken":
            h.subscribe("v", "taken", "/queue/q")
        effects = h.apply(command)
        assert [e.message for e in errors(effects)] == [message], command
        assert not any(isinstance(e, (Deliver, BrowseEnd)) for e in effects)
    stranger = h.apply(Browse("nobody", "b", "/queue/q", h.now))
    assert [e.message for e in errors(stranger)] == ["not connected"]


def test_noop_only_answers_its_receipt() -> None:
    h = Harness()
    h.connect("v")
    before = snapshot_bytes(h)
    assert receipts(h.apply(Noop("v", h.now, "r9"))) == ["r9"]
    assert h.apply(Noop("v", h.now)) == []
    assert snapshot_bytes(h) == before
    assert [e.message for e in errors(h.apply(Noop("gone", h.now, "r")))] == ["not connected"]
