"""How long an MQTT client's kept state outlives its session, and when its will goes
(raftmq.core.lifetimes): dropped when its time is up unless a session claimed it first, a delayed
will cancelled by a return in time and never later than the state, both in snapshots."""

from __future__ import annotations

from raftmq.core.broker import Broker
from raftmq.core.commands import (
    ACK_CLIENT_INDIVIDUAL,
    Connect,
    Disconnect,
    Expiry,
    Hold,
    Send,
    Share,
    Subscribe,
    Tick,
    Will,
)
from raftmq.core.config import CoreConfig
from raftmq.core.effects import Deliver

KEY = "mqtt:3:dev:"


def checked(broker: Broker, command: object) -> list[object]:
    effects = broker.apply(command)  # type: ignore[arg-type]
    broker.state.check_invariants()
    return effects


def delivered(effects: list[object]) -> list[bytes]:
    return [bytes(e.message.body) for e in effects if isinstance(e, Deliver)]


def kept_session(after_ms: int, session: str = "s1", now: int = 0) -> Broker:
    """Client "dev" with a kept subscription, a place in a share and a QoS 2 key, its state living
    `after_ms` after its session ends; a watcher on the will's topic."""
    broker = Broker()
    for name in (session, "watcher"):
        checked(broker, Connect(name, now))
    checked(broker, Expiry(session, KEY, now, after_ms))
    checked(broker, Subscribe(session, "a", "/topic/a", now, ACK_CLIENT_INDIVIDUAL, durable_name=f"{KEY}0:a"))
    checked(broker, Share(session, "b", "g", "/topic/b", now, ACK_CLIENT_INDIVIDUAL, 10, f"{KEY}0:$share/g/b"))
    checked(broker, Hold(session, f"{KEY}7", now))
    checked(broker, Subscribe("watcher", "w", "/topic/status", now))
    return broker


def held(broker: Broker) -> tuple[int, int, int]:
    """(kept subscriptions, shares, QoS 2 keys) of the client."""
    state = broker.state
    return (sum(name.startswith(KEY) for name in state.durables), len(state.shares),
            sum(key.startswith(KEY) for key in state.once))


def test_the_state_goes_when_its_time_is_up_and_not_before() -> None:
    broker = kept_session(60_000)
    checked(broker, Disconnect("s1", 1_000))
    checked(broker, Send("watcher", "/topic/a", "", b"collected", 2_000))
    assert broker.next_due() == 61_000
    checked(broker, Tick(60_999))
    assert held(broker) == (1, 1, 1)
    checked(broker, Tick(61_000))
    assert held(broker) == (0, 0, 0) and broker.state.lifetimes == {} and broker.next_due() is None


def test_a_session_that_claims_the_state_in_time_keeps_it() -> None:
    broker = kept_session(60_000)
    checked(broker, Disconnect("s1", 1_000))
    checked(broker, Connect("s2", 30_000))
    checked(broker, Expiry("s2", KEY, 30_000, 60_000))  # the client is back
    checked(broker, Tick(61_000))
    assert held(broker) == (1, 1, 1)
    checked(broker, Disconnect("s2", 70_000))  # and gone again: the time starts again
    checked(broker, Tick(129_999))
    assert held(broker) == (1, 1, 1)
    checked(broker, Tick(130_000))
    assert held(broker) == (0, 0, 0)


def test_a_state_kept_until_the_client_ends_it_never_expires_and_0_goes_at_the_end() -> None:
    forever = kept_session(-1)
    checked(forever, Disconnect("s1", 1_000))
    assert forever.next_due() is None
    checked(forever, Tick(10**12))
    assert held(forever) == (1, 1, 1)
    at_once = kept_session(0)  # a session not kept whose leader went before it could clean up
    checked(at_once, Disconnect("s1", 1_000))
    checked(at_once, Tick(1_000))
    assert held(at_once) == (0, 0, 0)


def test_a_delayed_will_waits_and_a_return_in_time_cancels_it() -> None:
    broker = kept_session(-1)
    checked(broker, Will("s1", "/topic/status", "", b"gone", 0, delay_ms=5_000))
    assert delivered(checked(broker, Disconnect("s1", 1_000))) == []
    checked(broker, Connect("s2", 3_000))
    checked(broker, Expiry("s2", KEY, 3_000, -1))
    assert delivered(checked(broker, Tick(6_000))) == []  # back in time: never published
    checked(broker, Will("s2", "/topic/status", "", b"gone again", 3_000, delay_ms=5_000))
    checked(broker, Disconnect("s2", 10_000))
    assert delivered(checked(broker, Tick(14_999))) == []
    assert delivered(checked(broker, Tick(15_000))) == [b"gone again"]


def test_a_will_goes_no_later_than_the_state_and_at_once_without_one() -> None:
    broker = kept_session(2_000)
    checked(broker, Will("s1", "/topic/status", "", b"gone", 0, delay_ms=60_000))
    checked(broker, Disconnect("s1", 1_000))
    assert delivered(checked(broker, Tick(3_000))) == [b"gone"]  # the session ended before the delay
    plain = kept_session(0)
    checked(plain, Will("s1", "/topic/status", "", b"bye", 0, delay_ms=60_000))
    assert delivered(checked(plain, Disconnect("s1", 1_000))) == [b"bye"]  # its state ends with it


def test_lifetimes_and_delayed_wills_survive_a_snapshot() -> None:
    broker = kept_session(60_000)
    checked(broker, Will("s1", "/topic/status", "", b"gone", 0, delay_ms=5_000))
    checked(broker, Connect("other", 0))
    checked(broker, Expiry("other", "mqtt:5:other:", 0, -1))  # a live session's claim
    checked(broker, Disconnect("s1", 1_000))
    dump = broker.snapshot()
    restored = Broker.restore(dump, CoreConfig())
    restored.state.check_invariants()
    assert restored.snapshot() == dump and restored.state.lifetime_of == {"other": "mqtt:5:other:"}
    assert delivered(checked(restored, Tick(6_000))) == [b"gone"]
    checked(restored, Tick(61_000))
    assert held(restored) == (0, 0, 0)
