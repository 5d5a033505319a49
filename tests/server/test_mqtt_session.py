"""An MQTT client's session, sans-I/O (raftmq.server.mqtt.session): packets in, core commands and
packets out, read with the codec (raftmq.protocol.mqtt.codec)."""

from __future__ import annotations

from types import SimpleNamespace

from raftmq.core.commands import (
    ACK_AUTO,
    ACK_CLIENT_INDIVIDUAL,
    Ack,
    Connect,
    Disconnect,
    Expiry,
    Hold,
    Noop,
    Release,
    Send,
    Subscribe,
    Unsubscribe,
    Will,
)
from raftmq.core.effects import Deliver
from raftmq.core.message import Message
from raftmq.errors import MqttError
from raftmq.protocol.header_block import pairs_of
from raftmq.protocol.mqtt import packets as p
from raftmq.protocol.mqtt import reasons
from raftmq.protocol.mqtt.codec import MqttParser, encode
from raftmq.security import Principal
from raftmq.server.mqtt.decisions import CheckLogin, Close, Propose, Write
from raftmq.server.mqtt.kept import Kept, Options, durable_name, kept
from raftmq.server.mqtt.outbound import SEND_WINDOW, packet_id_of
from raftmq.server.mqtt.session import MqttSession

NOW = 1_000
ANYONE = Principal("anyone", frozenset())


def written(decisions: list[object], version: int = 5) -> list[p.Packet]:
    parser = MqttParser(version)
    return [packet for d in decisions if isinstance(d, Write) for packet in parser.feed(d.data)]


def proposed(decisions: list[object]) -> list[object]:
    return [command for d in decisions if isinstance(d, Propose) for command in d.commands]


def lifetime(after_ms: int, session: str = "s1", client_id: str = "dev") -> Expiry:
    """How long the client's kept state outlives the session (raftmq.core.lifetimes), proposed with its Connect."""
    return Expiry(session, f"mqtt:{len(client_id)}:{client_id}:", NOW, after_ms)


def released(session: str = "s1", client_id: str = "dev") -> Release:
    """What a session the client does not keep ends with: its QoS 2 keys go (raftmq.core.exactly_once)."""
    return Release(session, f"mqtt:{len(client_id)}:{client_id}:", NOW, every=True)


def subscribes(decisions: list[object]) -> list[Subscribe]:
    return [command for command in proposed(decisions) if isinstance(command, Subscribe)]


def connected(version: int = 5, **connect: object) -> MqttSession:
    session = MqttSession("s1")
    [check] = session.receive(encode(p.Connect("dev", version, **connect)), NOW)  # type: ignore[arg-type]
    assert isinstance(check, CheckLogin)
    expiry = connect.get("properties", {}).get("session_expiry_interval", 0)  # type: ignore[attr-defined]
    if version == 4:
        expiry = 0 if connect.get("clean_start", True) else 0xFFFFFFFF
    after = -1 if expiry == 0xFFFFFFFF else 1000 * expiry
    assert proposed(session.login_checked(ANYONE, NOW)) == [Connect("s1", NOW, None, "dev"), lifetime(after)]
    [connack] = written(session.connect_committed(NOW), version)
    assert isinstance(connack, p.Connack) and connack.reason_code == 0
    return session


def test_the_connack_tells_an_mqtt_5_client_its_limits_and_its_session() -> None:
    session = MqttSession("s1")
    session.receive(encode(p.Connect("", 5, properties={"session_expiry_interval": 600})), NOW)
    session.login_checked(ANYONE, NOW)
    [connack] = written(session.connect_committed(NOW))
    assert isinstance(connack, p.Connack) and not connack.session_present
    assert connack.properties == {"maximum_packet_size": 17 * 2**20, "topic_alias_maximum": 64,
                                  "assigned_client_identifier": "raftmq-s1"}


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
        assert MqttParser(version).feed(session.receipt("s4") or b"") == [p.SubAck(4, [2, refused, 0])]


def delivery(sub_id: str, destination: str, headers: str = "mqtt-qos:1\n", body: bytes = b"body") -> Deliver:
    return Deliver("s1", sub_id, destination, Message("m-1", destination, headers, body, persistent=True), None,
                   False, 1)


def test_a_clean_sessions_qos_1_deliveries_leave_the_core_at_once_and_the_session_keeps_the_window() -> None:
    session = connected(5, properties={"receive_maximum": 2})
    [subscribe] = subscribes(session.receive(encode(p.Subscribe(1, [p.Subscription("a/+", 1)]), 5), NOW))
    assert isinstance(subscribe, Subscribe) and subscribe.ack == ACK_AUTO  # no ack goes through the log
    sent = [session.deliver(delivery(subscribe.sub_id, "/topic/a.b", f"mqtt-qos:1\nk:{i}\n"), b"%d" % i, NOW)
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
    [subscribe] = subscribes(session.receive(encode(p.Subscribe(1, [p.Subscription("a", 1)]), 5), NOW))
    assert isinstance(subscribe, Subscribe)
    big = b"x" * (8 * 2**20)
    try:
        for _ in range(20):
            session.deliver(delivery(subscribe.sub_id, "/topic/a"), big, NOW)
    except MqttError as slow:
        assert slow.reason_code == reasons.QUOTA_EXCEEDED
    else:
        raise AssertionError("160 MiB waited for a client that acknowledges nothing")


def test_a_filter_starting_with_a_wildcard_never_gets_a_dollar_topic() -> None:
    session = connected()
    [subscribe] = subscribes(session.receive(encode(p.Subscribe(1, [p.Subscription("#", 1)]), 5), NOW))
    assert isinstance(subscribe, Subscribe) and subscribe.destination == "/topic/>"
    assert session.deliver(delivery(subscribe.sub_id, "/topic/$SYS.uptime"), b"1", NOW) is None
    assert session.deliver(delivery(subscribe.sub_id, "/topic/SYS.uptime"), b"1", NOW) is not None


def test_unsubscribe_answers_once_what_came_before_committed() -> None:
    session = connected()
    session.receive(encode(p.Subscribe(1, [p.Subscription("a", 0)]), 5), NOW)
    commands = proposed(session.receive(encode(p.Unsubscribe(2, ["a", "zzz"]), 5), NOW))
    assert [type(c).__name__ for c in commands] == ["Unsubscribe", "Noop"]
    assert isinstance(commands[-1], Noop) and commands[-1].receipt == "u2"
    assert MqttParser(5).feed(session.receipt("u2") or b"") == [
        p.UnsubAck(2, [reasons.SUCCESS, reasons.NO_SUBSCRIPTION_EXISTED])]


def test_refused_connects() -> None:
    nameless = MqttSession("s1")
    decisions = nameless.receive(encode(p.Connect("", 4, clean_start=False)), NOW)
    assert written(decisions, 4) == [p.Connack(reasons.IDENTIFIER_REJECTED_311)] and isinstance(decisions[-1], Close)
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
    assert proposed(decisions) == [released(), Disconnect("s1", NOW)] and session.disconnect_proposed


def persistent(version: int = 4, kept: list[Kept] | None = None, clean: bool = False,
               session_id: str = "s1", releasing: list[int] | None = None) -> tuple[MqttSession, list[object]]:
    """A session of client "dev" that keeps its state (3.1.1 clean session 0, MQTT 5 expiry)."""
    session = MqttSession(session_id)
    properties = {"session_expiry_interval": 0xFFFFFFFF} if version == 5 else {}
    session.receive(encode(p.Connect("dev", version, clean_start=clean, properties=properties)), NOW)
    session.login_checked(ANYONE, NOW)
    return session, session.connect_committed(NOW, kept, releasing=releasing)


def test_a_persistent_sessions_subscriptions_are_durable_and_its_qos_1_waits_for_the_puback() -> None:
    session, decisions = persistent()
    [connack] = written(decisions, 4)
    assert connack == p.Connack(0, False) and session.persistent
    subscribe = p.Subscribe(1, [p.Subscription("a/#", 1), p.Subscription("b", 0)])
    commands = [c for c in proposed(session.receive(encode(subscribe, 4), NOW)) if isinstance(c, Subscribe)]
    assert [(c.destination, c.ack, c.durable_name) for c in commands] == [
        ("/topic/a", ACK_CLIENT_INDIVIDUAL, durable_name("dev", 0, "a/#")),
        ("/topic/a.>", ACK_CLIENT_INDIVIDUAL, durable_name("dev", 1, "a/#")),
        ("/topic/b", ACK_AUTO, durable_name("dev", 0, "b"))]
    assert commands[0].prefetch == SEND_WINDOW
    effect = Deliver("s1", commands[1].sub_id, "/topic/a.x", Message("m-1", "/topic/a.x", "mqtt-qos:1\n", b"1",
                                                                     persistent=True), "ack-7", False, 1)
    [publish] = MqttParser(4).feed(session.deliver(effect, b"1", NOW) or b"")
    assert isinstance(publish, p.Publish) and publish.qos == 1 and session.out.take_acks() == []
    acked = proposed(session.receive(encode(p.PubAck(publish.packet_id or 0), 4), NOW))
    assert acked == [Ack("s1", NOW, ack_id="ack-7")]  # only now does the core let the message go
    # A QoS 0 copy of a message on a QoS 1 subscription: nothing waits for the client, the core is told at once.
    effect0 = Deliver("s1", commands[0].sub_id, "/topic/a", Message("m-2", "/topic/a", "mqtt-qos:0\n", b"0"),
                      "ack-8", False, 1)
    [publish0] = MqttParser(4).feed(session.deliver(effect0, b"0", NOW) or b"")
    assert isinstance(publish0, p.Publish) and publish0.qos == 0
    assert session.out.take_acks() == [Ack("s1", NOW, ack_id="ack-8")]
    # Its end leaves the durable subscriptions in the core, collecting.
    assert proposed(session.receive(encode(p.Disconnect()), NOW)) == [Disconnect("s1", NOW)]


def kept_of(*entries: tuple[str, int, str, int, str | None]) -> list[Kept]:
    return [Kept(durable_name("dev", index, topic_filter), topic_filter, destination, qos, holder)
            for topic_filter, index, destination, qos, holder in entries]


def test_a_persistent_session_resumes_what_the_core_kept_and_ends_an_earlier_holder_first() -> None:
    kept = kept_of(("a/#", 0, "/topic/a", 1, "old"), ("a/#", 1, "/topic/a.>", 1, "old"), ("b", 0, "/topic/b", 0, None))
    for version in (4, 5):
        session, decisions = persistent(version, kept)
        [connack] = written(decisions, version)
        assert isinstance(connack, p.Connack) and connack.session_present
        commands = proposed(decisions)
        assert commands[0] == Disconnect("old", NOW)  # an earlier leader's connection, not yet swept
        assert commands[1] == Hold("s1", "mqtt:3:dev:session", NOW)  # the session marks itself kept
        subscribes = [c for c in commands[2:] if isinstance(c, Subscribe)]
        assert [(c.destination, c.ack, c.durable_name) for c in subscribes] == [
            (k.destination, ACK_CLIENT_INDIVIDUAL if k.qos else ACK_AUTO, k.name) for k in kept]
        assert len(commands) == 5
        # The resumed filters are the session's: an UNSUBSCRIBE drops both core subscriptions of a/#.
        dropped = proposed(session.receive(encode(p.Unsubscribe(2, ["a/#"]), version), NOW))
        assert [(c.sub_id, c.drop_durable) for c in dropped if isinstance(c, Unsubscribe)] == [
            (subscribes[0].sub_id, True), (subscribes[1].sub_id, True)]


def test_a_clean_start_drops_what_the_core_kept() -> None:
    kept = kept_of(("b", 0, "/topic/b", 0, None))
    for version, clean_persistent in ((4, False), (5, True)):
        session = MqttSession("s1")
        properties = {"session_expiry_interval": 60} if clean_persistent else {}
        session.receive(encode(p.Connect("dev", version, clean_start=True, properties=properties)), NOW)
        session.login_checked(ANYONE, NOW)
        decisions = session.connect_committed(NOW, kept)
        [connack] = written(decisions, version)
        assert isinstance(connack, p.Connack) and not connack.session_present
        release, *hold, subscribe, unsubscribe = proposed(decisions)
        assert release == released()  # QoS 2 keys an earlier session left
        assert hold == ([Hold("s1", "mqtt:3:dev:session", NOW)] if clean_persistent else [])
        assert isinstance(subscribe, Subscribe) and subscribe.durable_name == kept[0].name
        assert unsubscribe == Unsubscribe("s1", subscribe.sub_id, NOW, drop_durable=True)
        assert session.persistent is clean_persistent


def test_an_mqtt_5_session_without_expiry_resumes_and_then_ends_with_its_connection() -> None:
    session = MqttSession("s1")
    session.receive(encode(p.Connect("dev", 5, clean_start=False)), NOW)
    session.login_checked(ANYONE, NOW)
    decisions = session.connect_committed(NOW, kept_of(("b", 0, "/topic/b", 1, None)))
    [resumed] = proposed(decisions)
    assert isinstance(resumed, Subscribe) and not session.persistent
    [connack] = written(decisions)
    assert isinstance(connack, p.Connack) and connack.session_present
    assert proposed(session.receive(encode(p.Disconnect(), 5), NOW)) == [
        Unsubscribe("s1", resumed.sub_id, NOW, drop_durable=True), released(), Disconnect("s1", NOW)]


def test_an_mqtt_5_disconnect_with_expiry_0_ends_a_persistent_session() -> None:
    session, _ = persistent(5)
    [subscribe] = subscribes(session.receive(encode(p.Subscribe(1, [p.Subscription("c", 1)]), 5), NOW))
    assert isinstance(subscribe, Subscribe) and subscribe.durable_name is not None
    ending = proposed(session.receive(encode(p.Disconnect(0, {"session_expiry_interval": 0}), 5), NOW))
    assert ending == [lifetime(0), Unsubscribe("s1", subscribe.sub_id, NOW, drop_durable=True), released(),
                      Disconnect("s1", NOW)]


def test_a_filter_subscribed_again_resumes_its_durable_subscription_with_the_new_qos() -> None:
    session, _ = persistent()
    [first] = subscribes(session.receive(encode(p.Subscribe(1, [p.Subscription("c", 0)]), 4), NOW))
    again = proposed(session.receive(encode(p.Subscribe(2, [p.Subscription("c", 1)]), 4), NOW))
    assert isinstance(first, Subscribe)
    assert again[0] == Unsubscribe("s1", first.sub_id, NOW, drop_durable=False)  # what it collected stays
    assert isinstance(again[1], Subscribe) and again[1].durable_name == first.durable_name
    assert again[1].ack == ACK_CLIENT_INDIVIDUAL and again[1].receipt == "s2"


def test_a_will_goes_to_the_core_with_the_connect_and_a_goodbye_clears_it() -> None:
    will = p.Will("status/dev", b"gone", 1, True, {"user_property": [("why", "lost")], "will_delay_interval": 5,
                                                   "message_expiry_interval": 60})
    session = MqttSession("s1")
    session.receive(encode(p.Connect("dev", 5, will=will)), NOW)
    connect, left, expiry = proposed(session.login_checked(ANYONE, NOW))
    assert (connect, expiry) == (Connect("s1", NOW, None, "dev"), lifetime(0))
    assert isinstance(left, Will)
    assert (left.destination, left.body, left.delay_ms) == ("/topic/status.dev", b"gone", 5000)
    # The will's expiry would count from its CONNECT: not kept (it is published much later).
    assert dict(pairs_of(left.headers)) == {"mqtt-qos": "1", "persistent": "true", "mqtt-retain": "true", "why": "lost"}
    session.connect_committed(NOW)
    assert proposed(session.receive(encode(p.Disconnect(), 5), NOW)) == [Will("s1", "", "", b"", NOW), released(),
                                                                         Disconnect("s1", NOW)]
    keeping = MqttSession("s2")
    keeping.receive(encode(p.Connect("dev2", 5, will=will)), NOW)
    keeping.login_checked(ANYONE, NOW)
    keeping.connect_committed(NOW)
    # MQTT 5's "disconnect with will message": the will is published.
    assert proposed(keeping.receive(encode(p.Disconnect(reasons.DISCONNECT_WITH_WILL), 5), NOW)) == [
        released("s2", "dev2"), Disconnect("s2", NOW)]


def test_a_will_that_cannot_be_served_is_refused_with_the_connect() -> None:
    for will, code in ((p.Will("a*b", b"x"), reasons.TOPIC_NAME_INVALID),):  # raftmq reads * as a wildcard
        session = MqttSession("s1")
        decisions = session.receive(encode(p.Connect("dev", 5, will=will)), NOW)
        [connack] = written(decisions)
        assert isinstance(connack, p.Connack) and connack.reason_code == code and isinstance(decisions[-1], Close)


def test_a_qos_2_publish_is_stored_once_by_a_key_the_core_keeps_until_the_pubrel() -> None:
    session = connected(5)
    publish = p.Publish("meter/kwh", b"42", 2, packet_id=9)
    [send] = proposed(session.receive(encode(publish, 5), NOW))
    assert isinstance(send, Send) and send.receipt == "q9"
    assert dict(pairs_of(send.headers))["mqtt-once"] == "mqtt:3:dev:9"
    assert MqttParser(5).feed(session.receipt("q9") or b"") == [p.PubRec(9)]
    [release] = proposed(session.receive(encode(p.PubRel(9), 5), NOW))
    assert release == Release("s1", "mqtt:3:dev:9", NOW, receipt="c9")
    assert MqttParser(5).feed(session.receipt("c9") or b"") == [p.PubComp(9)]


def test_a_kept_session_is_present_while_the_core_holds_its_keys_even_without_subscriptions() -> None:
    """A publisher's kept session has no subscription: the key it holds (and any QoS 2 key) tells
    the next connection the session is there ("session present"), so the client keeps its
    session state and finishes its QoS 2 flows (MQTT has a client told otherwise discard it)."""
    session = MqttSession("s1")
    session.receive(encode(p.Connect("dev", 4, clean_start=False)), NOW)
    session.login_checked(ANYONE, NOW)
    decisions = session.connect_committed(NOW, [], keys=True)
    [connack] = written(decisions, 4)
    assert connack == p.Connack(0, True)
    assert proposed(decisions) == [Hold("s1", "mqtt:3:dev:session", NOW)]


def test_a_user_property_named_like_mqtts_own_headers_is_not_carried() -> None:
    """It would be read before the header MQTT sets: a forged `mqtt-once` could name a key."""
    session = connected(5)
    publish = p.Publish("a", b"x", 2, packet_id=4,
                        properties={"user_property": [("mqtt-once", "mqtt:3:dev:9"), ("mqtt-qos", "0"), ("ok", "1")]})
    [send] = proposed(session.receive(encode(publish, 5), NOW))
    assert isinstance(send, Send)
    assert pairs_of(send.headers) == (("mqtt-qos", "2"), ("persistent", "true"), ("ok", "1"),
                                      ("mqtt-once", "mqtt:3:dev:4"))


def test_a_client_asking_for_no_keep_alive_or_a_longer_one_is_given_the_servers() -> None:
    for asked, given in ((0, 600), (3600, 600), (30, None)):
        session = MqttSession("s1")
        session.receive(encode(p.Connect("dev", 5, keep_alive=asked)), NOW)
        session.login_checked(ANYONE, NOW)
        [connack] = written(session.connect_committed(NOW))
        assert isinstance(connack, p.Connack) and connack.properties.get("server_keep_alive") == given
        assert session.keep_alive == (given or asked)  # what the shell watches
    assert connected(4, keep_alive=0).keep_alive == 0  # 3.1.1 has no way to say it


def test_topic_aliases_set_and_used_and_a_bad_one_ends_the_session() -> None:
    session = connected(5)
    [first] = proposed(session.receive(encode(p.Publish("a/b", b"1", 0, properties={"topic_alias": 3}), 5), NOW))
    [second] = proposed(session.receive(encode(p.Publish("", b"2", 0, properties={"topic_alias": 3}), 5), NOW))
    assert isinstance(first, Send) and isinstance(second, Send)
    assert (first.destination, second.destination) == ("/topic/a.b", "/topic/a.b")
    assert "topic_alias" not in str(second.headers)
    for alias, topic, reason in ((65, "x", reasons.TOPIC_ALIAS_INVALID), (9, "", reasons.PROTOCOL_ERROR)):
        session = connected(5)
        decisions = session.receive(encode(p.Publish(topic, b"x", 0, properties={"topic_alias": alias}), 5), NOW)
        [disconnect] = written(decisions)
        assert isinstance(disconnect, p.Disconnect) and disconnect.reason_code == reason
        assert isinstance(decisions[-1], Close)


def test_a_subscription_identifier_comes_with_each_delivery_and_is_kept_with_the_session() -> None:
    session = connected(5, clean_start=False, properties={"session_expiry_interval": 60})
    subscribe_packet = p.Subscribe(1, [p.Subscription("a/+", 1, no_local=True)], {"subscription_identifier": [7]})
    [subscribe] = subscribes(session.receive(encode(subscribe_packet, 5), NOW))
    assert subscribe.durable_name == "mqtt:3:dev:0i7n:a/+"  # the options after the index (kept.Options)
    [publish] = MqttParser(5).feed(session.deliver(delivery(subscribe.sub_id, "/topic/a.b"), b"x", NOW) or b"")
    assert isinstance(publish, p.Publish) and publish.properties["subscription_identifier"] == [7]
    resumed = MqttSession("s2")  # the client's next connection finds the subscription in the core
    resumed.receive(encode(p.Connect("dev", 5, clean_start=False, properties={"session_expiry_interval": 60})), NOW)
    resumed.login_checked(ANYONE, NOW)
    core = {subscribe.durable_name or "": SimpleNamespace(destination="/topic/a.*", ack=ACK_CLIENT_INDIVIDUAL,
                                                          session=None)}
    [again] = subscribes(resumed.connect_committed(NOW, kept(core, "dev")))
    assert again.durable_name == subscribe.durable_name
    [publish] = MqttParser(5).feed(resumed.deliver(delivery(again.sub_id, "/topic/a.b"), b"x", NOW) or b"")
    assert isinstance(publish, p.Publish) and publish.properties["subscription_identifier"] == [7]
    [send] = proposed(resumed.receive(encode(p.Publish("a/b", b"own", 1, packet_id=3), 5), NOW))
    assert isinstance(send, Send)  # no-local was kept too
    assert resumed.deliver(delivery(again.sub_id, "/topic/a.b", send.headers), b"own", NOW) is None


def connected_as(client_id: str) -> MqttSession:
    session = MqttSession(f"s-{client_id}")
    session.receive(encode(p.Connect(client_id, 5)), NOW)
    session.login_checked(ANYONE, NOW)
    session.connect_committed(NOW)
    return session


def test_no_local_leaves_out_the_clients_own_publications_only() -> None:
    sessions = {name: connected_as(name) for name in ("dev", "other", "plain")}
    subs = {}
    for name in ("dev", "other"):
        no_local = p.Subscribe(1, [p.Subscription("a", 1, no_local=True)])
        [subs[name]] = subscribes(sessions[name].receive(encode(no_local, 5), NOW))
    sent = {}
    for name, session in sessions.items():
        [sent[name]] = proposed(session.receive(encode(p.Publish("a", name.encode(), 1, packet_id=2), 5), NOW))
    assert all(isinstance(send, Send) for send in sent.values())
    got = {name: session.deliver(delivery(subs["dev"].sub_id, "/topic/a", sent[name].headers), b"x", NOW)
           for name, session in (("dev", sessions["dev"]), ("other", sessions["dev"]), ("plain", sessions["dev"]))}
    assert got["dev"] is None and got["other"] is not None and got["plain"] is not None
    assert "mqtt-origin" not in sent["plain"].headers  # without a no-local subscription nothing marks it
    [publish] = MqttParser(5).feed(got["other"] or b"")
    assert isinstance(publish, p.Publish) and "user_property" not in publish.properties  # the mark is not told


def test_a_delivery_carries_what_is_left_of_its_message_expiry() -> None:
    session = connected(5)
    [subscribe] = subscribes(session.receive(encode(p.Subscribe(1, [p.Subscription("a", 1)]), 5), NOW))
    expires = NOW + 10_500  # published with 12 s, waited 1.5 s: 10.5 s left, rounded up
    [publish] = MqttParser(5).feed(session.deliver(delivery(subscribe.sub_id, "/topic/a",
                                                            f"mqtt-qos:1\nexpires:{expires}\n"), b"x", NOW) or b"")
    assert isinstance(publish, p.Publish) and publish.properties == {"message_expiry_interval": 11}


def qos_2(message_id: str, sub_id: str, ack_id: str | None, redelivered: bool = False) -> Deliver:
    message = Message(message_id, "/topic/a", "mqtt-qos:2\n", b"x", persistent=True)
    return Deliver("s1", sub_id, "/topic/a", message, ack_id, redelivered, 1)


def test_a_clean_sessions_qos_2_delivery_goes_pubrec_pubrel_pubcomp_without_the_core() -> None:
    session = connected(5)
    [subscribe] = subscribes(session.receive(encode(p.Subscribe(1, [p.Subscription("a", 2)]), 5), NOW))
    assert subscribe.ack == ACK_AUTO
    [publish] = MqttParser(5).feed(session.deliver(qos_2("m-1", subscribe.sub_id, None), b"x", NOW) or b"")
    assert isinstance(publish, p.Publish) and publish.qos == 2 and publish.packet_id
    decisions = session.receive(encode(p.PubRec(publish.packet_id), 5), NOW)
    assert written(decisions) == [p.PubRel(publish.packet_id)] and proposed(decisions) == []
    assert written(session.receive(encode(p.PubComp(publish.packet_id), 5), NOW)) == []
    assert written(session.receive(encode(p.PubComp(publish.packet_id), 5), NOW)) == []  # twice: nothing


def test_a_kept_sessions_qos_2_delivery_is_exactly_once_across_connections() -> None:
    session, _ = persistent(5)
    [subscribe] = subscribes(session.receive(encode(p.Subscribe(1, [p.Subscription("a", 2)]), 5), NOW))
    assert subscribe.ack == ACK_CLIENT_INDIVIDUAL
    [publish] = MqttParser(5).feed(session.deliver(qos_2("g-7", subscribe.sub_id, "ack-1"), b"x", NOW) or b"")
    assert isinstance(publish, p.Publish) and publish.packet_id == packet_id_of("g-7")
    # The client's PUBREC: the core lets the message go and keeps a key; PUBREL once both commit.
    decisions = session.receive(encode(p.PubRec(publish.packet_id), 5), NOW)
    key = f"mqtt:3:dev:rel:{publish.packet_id}"
    assert written(decisions) == []
    assert proposed(decisions) == [Hold("s1", key, NOW),
                                   Ack("s1", NOW, ack_id="ack-1", receipt=f"r{publish.packet_id}")]
    assert MqttParser(5).feed(session.receipt(f"r{publish.packet_id}") or b"") == [p.PubRel(publish.packet_id)]
    assert proposed(session.receive(encode(p.PubComp(publish.packet_id), 5), NOW)) == [Release("s1", key, NOW)]
    # A message sent again on the next connection (no PUBREC came) carries the same packet id.
    name = durable_name("dev", 0, "a", Options(exactly_once=True))
    assert subscribe.durable_name == name  # granted QoS 2: the name says so, for the next connection
    core = {name: SimpleNamespace(destination="/topic/a", ack=ACK_CLIENT_INDIVIDUAL, session=None)}
    assert [k.qos for k in kept(core, "dev")] == [2]
    again, decisions = persistent(5, [Kept(name, "a", "/topic/a", 2, None)], session_id="s2")
    [sub] = [s.sub_id for s in subscribes(decisions)]  # the resumed subscription
    [resent] = MqttParser(5).feed(again.deliver(qos_2("g-9", sub, "ack-2", True), b"x", NOW) or b"")
    assert isinstance(resent, p.Publish) and resent.dup and resent.packet_id == packet_id_of("g-9")
    # One the client had received (PUBREC) but not completed: its PUBREL again, never the PUBLISH.
    _session, decisions = persistent(5, kept_of(("a", 0, "/topic/a", 1, None)), session_id="s3", releasing=[77])
    assert written(decisions)[1:] == [p.PubRel(77)]


def test_a_qos_2_delivery_whose_packet_id_is_taken_waits_for_it() -> None:
    session, _ = persistent(5)
    [subscribe] = subscribes(session.receive(encode(p.Subscribe(1, [p.Subscription("a", 2)]), 5), NOW))
    first = next(f"m-{n}" for n in range(1000))
    twin = next(f"m-{n}" for n in range(1, 10**6) if packet_id_of(f"m-{n}") == packet_id_of(first))
    assert session.deliver(qos_2(first, subscribe.sub_id, "ack-1"), b"x", NOW) is not None
    assert session.deliver(qos_2(twin, subscribe.sub_id, "ack-2"), b"x", NOW) is None  # its id is in flight
    session.receive(encode(p.PubRec(packet_id_of(first)), 5), NOW)
    [twin_publish] = written(session.receive(encode(p.PubComp(packet_id_of(first)), 5), NOW))
    assert isinstance(twin_publish, p.Publish) and twin_publish.packet_id == packet_id_of(first)
