"""An MQTT client's session, sans-I/O (raftmq.server.mqtt.session): packets in, core commands and
packets out, read with the codec (raftmq.protocol.mqtt.codec)."""

from __future__ import annotations

from raftmq.core.commands import ACK_AUTO, Connect, Disconnect, Noop, Send, Subscribe
from raftmq.core.effects import Deliver
from raftmq.core.message import Message
from raftmq.errors import MqttError
from raftmq.protocol.header_block import pairs_of
from raftmq.protocol.mqtt import packets as p
from raftmq.protocol.mqtt import reasons
from raftmq.protocol.mqtt.codec import MqttParser, encode
from raftmq.security import Principal
from raftmq.server.mqtt.session import CheckLogin, Close, MqttSession, Propose, Write

NOW = 1_000
ANYONE = Principal("anyone", frozenset())


def written(decisions: list[object], version: int = 5) -> list[p.Packet]:
    parser = MqttParser(version)
    return [packet for d in decisions if isinstance(d, Write) for packet in parser.feed(d.data)]


def proposed(decisions: list[object]) -> list[object]:
    return [command for d in decisions if isinstance(d, Propose) for command in d.commands]


def connected(version: int = 5, **connect: object) -> MqttSession:
    session = MqttSession("s1")
    [check] = session.receive(encode(p.Connect("dev", version, **connect)), NOW)  # type: ignore[arg-type]
    assert isinstance(check, CheckLogin)
    assert proposed(session.login_checked(ANYONE, NOW)) == [Connect("s1", NOW, None, "dev")]
    [connack] = written(session.connect_committed(NOW), version)
    assert isinstance(connack, p.Connack) and connack.reason_code == 0
    return session


def test_the_connack_tells_an_mqtt_5_client_what_is_not_served_yet() -> None:
    session = MqttSession("s1")
    session.receive(encode(p.Connect("", 5, properties={"session_expiry_interval": 600})), NOW)
    session.login_checked(ANYONE, NOW)
    [connack] = written(session.connect_committed(NOW))
    assert isinstance(connack, p.Connack)
    assert connack.properties == {"maximum_qos": 1, "retain_available": 0, "shared_subscription_available": 0,
                                  "assigned_client_identifier": "raftmq-s1", "session_expiry_interval": 0}


def test_what_comes_behind_the_connect_waits_for_its_commit_and_an_error_there_follows_the_connack() -> None:
    session = MqttSession("s1")
    wire = encode(p.Connect("dev", 5)) + encode(p.Publish("a/b", b"x", 1, packet_id=3), 5) + b"\x30\x02\x00\x05"
    assert [type(d) for d in session.receive(wire, NOW)] == [CheckLogin]
    session.login_checked(ANYONE, NOW)
    decisions = session.connect_committed(NOW)
    packets = written(decisions)
    assert [type(x) for x in packets] == [p.Connack, p.Disconnect]
    assert packets[1].reason_code == reasons.MALFORMED_PACKET  # type: ignore[union-attr]
    sends = [c for c in proposed(decisions) if isinstance(c, Send)]
    assert [(s.destination, s.receipt) for s in sends] == [("/topic/a.b", "p3")]  # the good one before it
    assert isinstance(proposed(decisions)[-1], Disconnect) and isinstance(decisions[-1], Close)


def test_a_qos_1_publish_is_a_receipted_send_whose_receipt_is_the_puback() -> None:
    session = connected()
    publish = p.Publish("sensors/t", b"21", 1, packet_id=7,
                        properties={"user_property": [("unit", "C")], "content_type": "text/plain",
                                    "response_topic": "replies/dev", "message_expiry_interval": 60})
    [send] = proposed(session.receive(encode(publish, 5), 1_700_000_000_000))  # the wall clock, in ms
    assert isinstance(send, Send) and send.destination == "/topic/sensors.t" and send.receipt == "p7"
    assert dict(pairs_of(send.headers)) == {"mqtt-qos": "1", "persistent": "true", "content-type": "text/plain",
                                            "reply-to": "/topic/replies.dev", "expires": "1700000060000",
                                            "unit": "C"}
    assert MqttParser(5).feed(session.receipt("p7") or b"") == [p.PubAck(7)]
    [send0] = proposed(session.receive(encode(p.Publish("a", b"0"), 5), NOW))
    assert isinstance(send0, Send) and send0.receipt is None


def test_subscriptions_their_suback_and_a_refused_filter() -> None:
    for version, refused in ((5, reasons.TOPIC_FILTER_INVALID), (4, reasons.SUBACK_FAILURE_311)):
        session = connected(version)
        subscribe = p.Subscribe(4, [p.Subscription("a/#", 2), p.Subscription("a/#/b", 1), p.Subscription("c", 0)])
        commands = proposed(session.receive(encode(subscribe, version), NOW))
        assert [(c.destination, c.ack, c.receipt) for c in commands if isinstance(c, Subscribe)] == [
            ("/topic/a", ACK_AUTO, None), ("/topic/a.>", ACK_AUTO, None), ("/topic/c", ACK_AUTO, "s4")]
        assert MqttParser(version).feed(session.receipt("s4") or b"") == [p.SubAck(4, [1, refused, 0])]


def delivery(sub_id: str, destination: str, headers: str = "mqtt-qos:1\n", body: bytes = b"body") -> Deliver:
    return Deliver("s1", sub_id, destination, Message("m-1", destination, headers, body, persistent=True), None,
                   False, 1)


def test_a_clean_sessions_qos_1_deliveries_leave_the_core_at_once_and_the_session_keeps_the_window() -> None:
    session = connected(5, properties={"receive_maximum": 2})
    [subscribe] = proposed(session.receive(encode(p.Subscribe(1, [p.Subscription("a/+", 1)]), 5), NOW))
    assert isinstance(subscribe, Subscribe) and subscribe.ack == ACK_AUTO  # no ack goes through the log
    sent = [session.deliver(delivery(subscribe.sub_id, "/topic/a.b", f"mqtt-qos:1\nk:{i}\n"), b"%d" % i)
            for i in range(3)]
    assert sent[2] is None  # the client's receive maximum is 2: the third waits
    first, second = (MqttParser(5).feed(packet or b"")[0] for packet in sent[:2])
    assert isinstance(first, p.Publish) and isinstance(second, p.Publish)
    assert (first.topic, first.payload, first.qos) == ("a/b", b"0", 1)
    assert first.properties == {"user_property": [("k", "0")]}
    decisions = session.receive(encode(p.PubAck(first.packet_id or 0), 5), NOW)
    assert proposed(decisions) == []
    [third] = written(decisions)
    assert isinstance(third, p.Publish) and third.payload == b"2" and third.packet_id not in (second.packet_id, None)
    assert written(session.receive(encode(p.PubAck(first.packet_id or 0), 5), NOW)) == []  # twice: nothing more


def test_a_subscriber_that_never_acknowledges_ends_as_a_slow_consumer() -> None:
    session = connected(5, properties={"receive_maximum": 1})
    [subscribe] = proposed(session.receive(encode(p.Subscribe(1, [p.Subscription("a", 1)]), 5), NOW))
    assert isinstance(subscribe, Subscribe)
    big = b"x" * (8 * 2**20)
    try:
        for _ in range(20):
            session.deliver(delivery(subscribe.sub_id, "/topic/a"), big)
    except MqttError as slow:
        assert slow.reason_code == reasons.QUOTA_EXCEEDED
    else:
        raise AssertionError("160 MiB waited for a client that acknowledges nothing")


def test_a_filter_starting_with_a_wildcard_never_gets_a_dollar_topic() -> None:
    session = connected()
    [subscribe] = proposed(session.receive(encode(p.Subscribe(1, [p.Subscription("#", 1)]), 5), NOW))
    assert isinstance(subscribe, Subscribe) and subscribe.destination == "/topic/>"
    assert session.deliver(delivery(subscribe.sub_id, "/topic/$SYS.uptime"), b"1") is None
    assert session.deliver(delivery(subscribe.sub_id, "/topic/SYS.uptime"), b"1") is not None


def test_unsubscribe_answers_once_what_came_before_committed() -> None:
    session = connected()
    session.receive(encode(p.Subscribe(1, [p.Subscription("a", 0)]), 5), NOW)
    commands = proposed(session.receive(encode(p.Unsubscribe(2, ["a", "zzz"]), 5), NOW))
    assert [type(c).__name__ for c in commands] == ["Unsubscribe", "Noop"]
    assert isinstance(commands[-1], Noop) and commands[-1].receipt == "u2"
    assert MqttParser(5).feed(session.receipt("u2") or b"") == [
        p.UnsubAck(2, [reasons.SUCCESS, reasons.NO_SUBSCRIPTION_EXISTED])]


def test_refused_connects() -> None:
    persistent = MqttSession("s1")
    decisions = persistent.receive(encode(p.Connect("dev", 4, clean_start=False)), NOW)
    assert written(decisions, 4) == [p.Connack(reasons.SERVER_UNAVAILABLE_311)] and isinstance(decisions[-1], Close)
    for version, code in ((5, reasons.BAD_USER_NAME_OR_PASSWORD), (4, reasons.BAD_USER_NAME_OR_PASSWORD_311)):
        session = MqttSession("s1")
        session.receive(encode(p.Connect("dev", version, username="u", password=b"wrong")), NOW)
        decisions = session.login_checked(None, NOW)
        [connack] = written(decisions, version)
        assert isinstance(connack, p.Connack) and connack.reason_code == code and proposed(decisions) == []


def test_a_client_that_disconnects_ends_its_session() -> None:
    session = connected(4)
    decisions = session.receive(encode(p.PingReq()) + encode(p.Disconnect()), NOW)
    assert written(decisions, 4) == [p.PingResp()]
    assert proposed(decisions) == [Disconnect("s1", NOW)] and session.disconnect_proposed
