"""Shared subscriptions in the core (raftmq.core.shares): competing consumers of one copy of what a
topic gets, a member's unacknowledged messages going to the others, holders that keep a share
alive while their client is away, the share gone with its last holder, snapshots."""

from __future__ import annotations

from collections import Counter
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from raftmq.core.broker import Broker
from raftmq.core.commands import ACK_CLIENT_INDIVIDUAL, Ack, Connect, Disconnect, Send, Share, Subscribe, Unsubscribe
from raftmq.core.config import CoreConfig
from raftmq.core.effects import Deliver, Receipt, Reject
from raftmq.core.snapshot import body_refs
from raftmq.core.state import BrokerState


def checked(broker: Broker, command: object) -> list[object]:
    effects = broker.apply(command)  # type: ignore[arg-type]
    broker.state.check_invariants()
    return effects


def delivered(effects: list[object]) -> list[tuple[str, str, bytes]]:
    """(session, topic, body) of each delivery."""
    return [(e.session, e.message.destination, bytes(e.message.body)) for e in effects if isinstance(e, Deliver)]


def publish(broker: Broker, topic: str, body: bytes, now: int = 1) -> list[object]:
    return checked(broker, Send("pub", topic, "", body, now))


def sharing(*sessions: str, ack: str = "auto", holder: dict[str, str] | None = None) -> Broker:
    broker = Broker()
    for session in ("pub", *sessions):
        checked(broker, Connect(session, 0))
    for session in sessions:
        checked(broker, Share(session, "s", "workers", "/topic/jobs.*", 0, ack, 10,
                              (holder or {}).get(session), receipt="r"))
    return broker


def test_the_members_of_a_share_compete_for_one_copy_of_each_message() -> None:
    broker = sharing("a", "b")
    checked(broker, Connect("plain", 0))
    checked(broker, Subscribe("plain", "p", "/topic/jobs.>", 0))
    got: list[tuple[str, str, bytes]] = []
    for n in range(6):
        got += delivered(publish(broker, f"/topic/jobs.{n % 2}", f"m{n}".encode()))
    shared = [g for g in got if g[0] != "plain"]
    assert sorted(body for _s, _t, body in shared) == [f"m{n}".encode() for n in range(6)], "each once to the share"
    assert Counter(session for session, _t, _b in shared) == {"a": 3, "b": 3}, "round robin between the members"
    assert {(t, b) for s, t, b in got if s == "plain"} == {(t, b) for _s, t, b in shared}, "the topic's own copy too"
    assert all(topic.startswith("/topic/jobs.") for _s, topic, _b in shared), "a delivery names its topic"
    assert len(broker.state.shares) == 1


def test_a_share_is_joined_with_its_receipt_and_a_bad_one_is_refused() -> None:
    broker = sharing()
    checked(broker, Connect("a", 0))
    assert [type(e) for e in checked(broker, Share("a", "s", "g", "/topic/x", 0, receipt="r"))] == [Receipt]
    refused = checked(broker, Share("a", "t", "g", "/queue/x", 0, receipt="r2"))
    assert [type(e) for e in refused] == [Reject] and "a share is of a topic" in refused[0].detail  # type: ignore[attr-defined]


def test_what_a_member_held_unacknowledged_goes_to_another_when_it_leaves() -> None:
    broker = sharing("a", "b", ack=ACK_CLIENT_INDIVIDUAL)
    got = delivered(publish(broker, "/topic/jobs.x", b"one")) + delivered(publish(broker, "/topic/jobs.x", b"two"))
    held_by_a = [body for session, _t, body in got if session == "a"]
    assert held_by_a
    again = delivered(checked(broker, Disconnect("a", 5)))
    assert [(s, b) for s, _t, b in again] == [("b", body) for body in held_by_a]


def test_an_acknowledged_message_is_not_delivered_again() -> None:
    broker = sharing("a", ack=ACK_CLIENT_INDIVIDUAL)
    effects = publish(broker, "/topic/jobs.x", b"one")
    deliver = next(e for e in effects if isinstance(e, Deliver))
    checked(broker, Ack("a", 2, ack_id=deliver.ack_id))
    checked(broker, Connect("b", 3))
    checked(broker, Share("b", "s", "workers", "/topic/jobs.*", 3, ACK_CLIENT_INDIVIDUAL, 10))
    assert delivered(checked(broker, Disconnect("a", 4))) == []


def test_the_share_goes_with_its_last_live_member_and_what_it_held_with_it() -> None:
    broker = sharing("a", "b")
    checked(broker, Disconnect("a", 2))
    assert len(broker.state.shares) == 1
    checked(broker, Unsubscribe("b", "s", 3))
    assert broker.state.shares == {} and not any("$.raftmq.share" in q for q in broker.state.queues)
    assert delivered(publish(broker, "/topic/jobs.x", b"after")) == []
    assert all(not sub.store.shared for topic in broker.state.topics.values() for sub in topic.subs)


def test_a_kept_holder_keeps_the_share_collecting_until_it_lets_go() -> None:
    broker = sharing("a", ack=ACK_CLIENT_INDIVIDUAL, holder={"a": "kept-a"})
    checked(broker, Disconnect("a", 2))  # the client is away: its session is kept
    publish(broker, "/topic/jobs.x", b"while away", 3)
    checked(broker, Connect("a2", 4))
    back = checked(broker, Share("a2", "s", "workers", "/topic/jobs.*", 4, ACK_CLIENT_INDIVIDUAL, 10, "kept-a"))
    assert delivered(back) == [("a2", "/topic/jobs.x", b"while away")]
    checked(broker, Unsubscribe("a2", "s", 5, drop_durable=True))  # the client's UNSUBSCRIBE or clean start
    assert broker.state.shares == {}


def test_a_share_and_its_messages_survive_a_snapshot() -> None:
    broker = sharing("a", ack=ACK_CLIENT_INDIVIDUAL, holder={"a": "kept-a"})
    checked(broker, Connect("b", 0))
    checked(broker, Share("b", "s", "workers", "/topic/jobs.*", 0, ACK_CLIENT_INDIVIDUAL, 1))
    publish(broker, "/topic/jobs.x", b"one")
    publish(broker, "/topic/jobs.x", b"two")
    publish(broker, "/topic/jobs.x", b"three")  # b's prefetch is 1: a holds one and three, b two
    dump = broker.snapshot()
    assert sorted(bytes(ref) for ref in body_refs(dump)) == [b"one", b"three", b"two"]
    restored = Broker.restore(dump, CoreConfig())
    restored.state.check_invariants()
    assert restored.snapshot() == dump
    again = delivered(checked(restored, Disconnect("b", 5)))
    assert again == [("a", "/topic/jobs.x", b"two")]
    checked(restored, Disconnect("a", 6))
    share = next(iter(restored.state.shares.values()))
    assert list(share.holders) == ["kept-a"] and share.members == {}
    assert delivered(publish(restored, "/topic/jobs.y", b"four", 7)) == []
    assert restored.state.queues[share.queue].depth == 4


def test_a_share_is_no_subscription_a_stomp_client_can_name() -> None:
    broker = sharing("a")
    queue = next(iter(broker.state.shares))
    checked(broker, Connect("stomp", 0))
    refused = checked(broker, Subscribe("stomp", "x", queue, 0, receipt="r"))
    assert [type(e) for e in refused] == [Reject]


def test_invariants_catch_a_share_whose_member_was_lost() -> None:
    broker = sharing("a", "b")
    share = next(iter(broker.state.shares.values()))
    share.members.pop(next(iter(share.members)))
    try:
        BrokerState.check_invariants(broker.state)
    except Exception as broken:  # noqa: BLE001 - the point: it is caught
        assert "its consumers are not its members" in str(broken)
    else:
        raise AssertionError("a share's lost member went unnoticed")


SESSIONS = ("a", "b", "c")
step = st.one_of(
    st.tuples(st.just("share"), st.sampled_from(SESSIONS), st.sampled_from(("auto", ACK_CLIENT_INDIVIDUAL)),
              st.sampled_from((None, "kept-a", "kept-b")), st.sampled_from(("/topic/jobs.*", "/topic/jobs.x"))),
    st.tuples(st.just("send"), st.sampled_from(("/topic/jobs.x", "/topic/jobs.y"))),
    st.tuples(st.just("ack"), st.sampled_from(SESSIONS)),
    st.tuples(st.just("leave"), st.sampled_from(SESSIONS), st.booleans()),
    st.tuples(st.just("end"), st.sampled_from(SESSIONS)),
    st.tuples(st.just("snapshot")),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(step, max_size=40))
def test_any_history_of_shares_keeps_the_invariants_and_survives_snapshots(steps: list[tuple[Any, ...]]) -> None:
    """Joins (live or kept), sends, acks, leaves (dropping the kept place or not), sessions ending
    and snapshots in any order: the core's invariants hold after each step, a snapshot restores
    to the same state, and no message is ever delivered to two members while neither let it go."""
    broker = Broker()
    checked(broker, Connect("pub", 0))
    numbers = iter(range(1, 10_000))
    held: dict[str, list[str]] = {}  # session -> ack ids it holds (client-individual)
    for now, action in enumerate(steps, start=1):
        kind = action[0]
        if kind == "share":
            _, session, ack, holder, destination = action
            if session not in broker.state.sessions:
                checked(broker, Connect(session, now))
            effects = checked(broker, Share(session, f"s{next(numbers)}", "g", destination, now, ack, 2, holder))
        elif kind == "send":
            effects = checked(broker, Send("pub", action[1], "", f"m{next(numbers)}".encode(), now))
        elif kind == "ack" and held.get(action[1]):
            effects = checked(broker, Ack(action[1], now, ack_id=held[action[1]].pop(0)))
        elif kind == "leave" and action[1] in broker.state.sessions and broker.state.sessions[action[1]].subs:
            session = broker.state.sessions[action[1]]
            sub_id = next(iter(session.subs))
            effects = checked(broker, Unsubscribe(action[1], sub_id, now, drop_durable=action[2]))
        elif kind == "end" and action[1] in broker.state.sessions:
            effects = checked(broker, Disconnect(action[1], now))
            held.pop(action[1], None)
        elif kind == "snapshot":
            dump = broker.snapshot()
            broker = Broker.restore(dump, CoreConfig())
            broker.state.check_invariants()
            assert broker.snapshot() == dump
            continue
        else:
            continue
        for effect in effects:
            if isinstance(effect, Deliver) and effect.ack_id is not None:
                held.setdefault(effect.session, []).append(effect.ack_id)
        for session_id, ack_ids in held.items():  # what a session lost by leaving is no longer its
            session = broker.state.sessions.get(session_id)
            held[session_id] = [a for a in ack_ids if session is not None and a in session.deliveries]
        in_flight = [(d.sub.store.destination, d.message.message_id)
                     for s in broker.state.sessions.values() for d in s.deliveries.values()]
        assert len(in_flight) == len(set(in_flight)), "one message of a share held by two members at once"
