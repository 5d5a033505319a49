"""Temporary destinations in the core: private to the session whose token names them, gone
with it, a late reply dropped, RabbitMQ's reply-to subscription, no wildcard reads, and the
owners found again after a snapshot."""

from __future__ import annotations

from raftmq.core.broker import Broker
from raftmq.core.effects import Reject
from raftmq.core.temporary import alias_of, home_group, owner_token, private_name, token_of
from raftmq.protocol.header_block import header_dict
from tests.helpers.broker_harness import Harness, bodies, delivers, errors


def make() -> Harness:
    h = Harness()
    for session in ("req", "resp", "other"):
        h.connect(session)
    return h


def test_names_round_trip() -> None:
    name = private_name("/temp-queue/answers.1", "node:ab12:7")
    assert name == f"/queue/$temp.{token_of('node:ab12:7')}.answers.1"
    assert owner_token(name) == token_of("node:ab12:7") and owner_token("/queue/plain") is None
    assert alias_of(name) == "/temp-queue/answers.1"
    assert owner_token("/queue/$temp.short.x") == ""  # malformed: nobody's
    in_cluster = private_name("/temp-topic/a.b", "s1", "g-2.east")
    assert home_group(in_cluster) == "g-2.east" and owner_token(in_cluster) == token_of("s1")
    assert alias_of(in_cluster) == "/temp-topic/a.b" and home_group(name) is None


def test_request_reply_through_a_temporary_queue() -> None:
    h = make()
    reply_to = private_name("/temp-queue/r", "req")
    h.subscribe("req", "answers", reply_to)
    h.subscribe("resp", "work", "/queue/requests")
    [request] = delivers(h.send("req", "/queue/requests", b"2+2", {"reply-to": reply_to}))
    assert header_dict(request.message.headers)["reply-to"] == reply_to
    assert bodies(h.send("resp", reply_to, b"4")) == [b"4"]


def test_only_the_owner_consumes_and_never_durably() -> None:
    h = make()
    name = private_name("/temp-topic/t", "req")
    [refused] = errors(h.subscribe("other", "s", name))
    assert refused.message == "temporary destination" and "another connection" in refused.detail
    h.connect("req2")
    assert errors(h.subscribe("req", "d", name, durable_name="keep"))[0].message == "temporary destination"


def test_a_temporary_queue_goes_with_its_session_and_a_late_reply_is_dropped() -> None:
    h = make()
    name = private_name("/temp-queue/r", "req")
    h.subscribe("req", "answers", name, ack="client-individual")
    h.send("resp", name, b"in flight")
    h.send("resp", name, b"waiting")
    h.disconnect("req")
    h.broker.check_invariants()
    assert not h.broker.has_destination(name)
    h.send("resp", name, b"late")
    assert not h.broker.has_destination(name) and h.broker.state.temp_owners == {}


def test_a_reply_to_of_ones_own_temporary_queue_subscribes_the_session_rabbitmq_style() -> None:
    h = make()
    name = private_name("/temp-queue/r", "req")
    h.subscribe("resp", "work", "/queue/requests")
    h.send("req", "/queue/requests", b"q", {"reply-to": name})
    assert "/temp-queue/r" in h.broker.state.sessions["req"].subs
    [answer] = delivers(h.send("resp", name, b"a"))
    assert (answer.session, answer.sub_id) == ("req", "/temp-queue/r")
    # Once subscribed, another SEND naming it adds nothing.
    h.send("req", "/queue/requests", b"q2", {"reply-to": name})
    assert len(h.broker.state.sessions["req"].subs) == 1


def test_a_wildcard_subscription_does_not_read_temporary_topics() -> None:
    h = make()
    name = private_name("/temp-topic/t", "req")
    h.subscribe("req", "own", name)
    h.subscribe("other", "all", "/topic/>")
    got = delivers(h.send("resp", name, b"private"))
    assert [(d.session, d.sub_id) for d in got] == [("req", "own")]


def test_owners_are_found_again_after_a_snapshot() -> None:
    h = make()
    name = private_name("/temp-queue/r", "req")
    h.subscribe("req", "answers", name, ack="client-individual")
    h.broker = Broker.restore(h.broker.snapshot(), h.config)
    assert h.broker.state.temp_owners == {token_of("req"): "req"}
    assert bodies(h.send("resp", name, b"after")) == [b"after"]
    h.disconnect("req")
    assert not h.broker.has_destination(name)
    assert not any(isinstance(e, Reject) for e in h.send("resp", name, b"dropped"))
