"""Wills in the core (raftmq.core.wills): kept with a session, published when it ends unless
cleared first, delayed through the scheduler, retained when asked, in snapshots as bytes."""

from __future__ import annotations

from raftmq.core.broker import Broker
from raftmq.core.commands import Connect, Disconnect, Expiry, Recover, Subscribe, Tick, Will
from raftmq.core.config import CoreConfig
from raftmq.core.effects import Deliver
from raftmq.core.snapshot import body_refs, journal_indexes


def watching() -> Broker:
    broker = Broker()
    for session in ("dev", "watcher"):
        broker.apply(Connect(session, 0))
    broker.apply(Subscribe("watcher", "w", "/topic/status.>", 0))
    return broker


def delivered(effects: list[object]) -> list[tuple[str, bytes]]:
    return [(e.destination, bytes(e.message.body)) for e in effects if isinstance(e, Deliver)]


def test_a_session_that_ends_without_a_goodbye_publishes_its_will() -> None:
    broker = watching()
    broker.apply(Will("dev", "/topic/status.dev", "mqtt-qos:1\n", b"gone", 1))
    assert delivered(broker.apply(Disconnect("dev", 5))) == [("/topic/status.dev", b"gone")]
    assert broker.state.wills == {}


def test_a_cleared_will_is_never_published_and_a_will_needs_a_session() -> None:
    broker = watching()
    broker.apply(Will("dev", "/topic/status.dev", "", b"gone", 1))
    broker.apply(Will("dev", "", "", b"", 2))  # the client's goodbye
    assert delivered(broker.apply(Disconnect("dev", 5))) == []
    broker.apply(Will("nobody", "/topic/status.x", "", b"x", 6))
    assert broker.state.wills == {}


def test_a_delayed_will_is_published_later_and_a_retained_one_is_kept() -> None:
    broker = watching()
    broker.apply(Expiry("dev", "mqtt:3:dev:", 1, -1))  # its state is kept (raftmq.core.lifetimes)
    broker.apply(Will("dev", "/topic/status.dev", "mqtt-retain:true\n", b"offline", 1, delay_ms=2000))
    assert delivered(broker.apply(Disconnect("dev", 1000))) == []  # two seconds later
    assert delivered(broker.apply(Tick(2500))) == []
    assert delivered(broker.apply(Tick(3000))) == [("/topic/status.dev", b"offline")]
    broker.apply(Connect("late", 3100))
    broker.apply(Subscribe("late", "l", "/topic/status.*", 3100))
    assert delivered(broker.apply(Recover("late", "l", 3100))) == [("/topic/status.dev", b"offline")]


def test_wills_are_in_snapshots_as_bytes() -> None:
    broker = watching()
    broker.begin_entry(4)  # a group member: Send bodies become body-journal references, a will's does not
    broker.apply(Will("dev", "/topic/status.dev", "", b"gone", 1))
    dump = broker.snapshot()
    assert list(body_refs(dump)) == list(broker.body_refs()) == [b"gone"] and journal_indexes(dump) == set()
    again = Broker.restore(dump, CoreConfig())
    assert delivered(again.apply(Disconnect("dev", 5))) == [("/topic/status.dev", b"gone")]
