"""paho-mqtt (pinned) as an independent oracle of the MQTT codec (raftmq.protocol.mqtt.codec): a
real paho client, on a loopback socket, talks to a script that reads its packets with our parser
and answers with our encoder. What paho was asked to send must read back field by field, and what
we send must reach paho's callbacks as we meant it: CONNECT with a will and credentials, CONNACK,
SUBSCRIBE and SUBACK, PUBLISH of QoS 1 and 2 both ways with their acknowledgements, UNSUBSCRIBE
and UNSUBACK, DISCONNECT; MQTT 5's properties and reason codes on each."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest

paho = pytest.importorskip("paho.mqtt.client", reason="pip install -e '.[test]' (paho-mqtt)")
from paho.mqtt.packettypes import PacketTypes  # noqa: E402
from paho.mqtt.properties import Properties  # noqa: E402
from paho.mqtt.reasoncodes import ReasonCode  # noqa: E402
from paho.mqtt.subscribeoptions import SubscribeOptions  # noqa: E402

from raftmq.protocol.mqtt import packets as p  # noqa: E402
from raftmq.protocol.mqtt.codec import MqttParser, encode  # noqa: E402
from raftmq.protocol.mqtt.packets import MQTT_5, MQTT_311  # noqa: E402

pytestmark = pytest.mark.integration
DEADLINE_SECONDS = 5.0


class Script:
    """The broker's side: our parser and encoder on the accepted socket, paho's loop turned by hand."""

    def __init__(self, server: socket.socket, client: Any, version: int) -> None:
        self.client = client
        self.version = version
        self.parser = MqttParser()
        self.waiting: list[p.Packet] = []
        client.connect("127.0.0.1", server.getsockname()[1], keepalive=30, **self.connect_args())
        self.sock, _ = server.accept()
        self.sock.settimeout(0.01)

    def connect_args(self) -> dict[str, Any]:
        if self.version != MQTT_5:
            return {}
        properties = Properties(PacketTypes.CONNECT)
        properties.SessionExpiryInterval = 300
        properties.ReceiveMaximum = 10
        return {"properties": properties}

    def read(self) -> p.Packet:
        deadline = time.monotonic() + DEADLINE_SECONDS
        while not self.waiting:
            assert time.monotonic() < deadline, "paho sent nothing"
            self.client.loop(timeout=0.01)
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                continue
            assert data, "paho closed the connection"
            self.waiting += self.parser.feed(data)
        return self.waiting.pop(0)

    def send(self, packet: p.Packet) -> None:
        self.sock.sendall(encode(packet, self.version))

    def turn_until(self, done: Any) -> None:
        deadline = time.monotonic() + DEADLINE_SECONDS
        while not done():
            assert time.monotonic() < deadline, "paho's callback never came"
            self.client.loop(timeout=0.01)


@pytest.fixture
def server() -> Iterator[socket.socket]:
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(DEADLINE_SECONDS)
    yield listener
    listener.close()


def paho_client(version: int, seen: dict[str, list[Any]]) -> Any:
    client = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id="dev-1",
                         protocol=paho.MQTTv5 if version == MQTT_5 else paho.MQTTv311)
    client.username_pw_set("user", "pw")
    will_properties = None
    if version == MQTT_5:
        will_properties = Properties(PacketTypes.WILLMESSAGE)
        will_properties.WillDelayInterval = 5
    client.will_set("dev/1/status", b"gone", qos=1, retain=True, properties=will_properties)
    for name in ("connect", "subscribe", "publish", "message", "unsubscribe", "disconnect"):
        seen[name] = []
        setattr(client, f"on_{name}", lambda *args, _name=name: seen[_name].append(args))
    return client


@pytest.mark.parametrize("version", [MQTT_311, MQTT_5], ids=["3.1.1", "5.0"])
def test_a_paho_conversation_reads_and_answers_through_our_codec(server: socket.socket, version: int) -> None:
    five = version == MQTT_5
    seen: dict[str, list[Any]] = {}
    client = paho_client(version, seen)
    script = Script(server, client, version)
    try:
        connect = script.read()
        assert isinstance(connect, p.Connect)
        assert (connect.client_id, connect.version, connect.clean_start) == ("dev-1", version, True)
        assert connect.keep_alive == 30
        assert (connect.username, connect.password) == ("user", b"pw")
        assert connect.will == p.Will("dev/1/status", b"gone", 1, True, {"will_delay_interval": 5} if five else {})
        assert connect.properties == ({"session_expiry_interval": 300, "receive_maximum": 10} if five else {})

        script.send(p.Connack(0, False, {"topic_alias_maximum": 5, "server_keep_alive": 20} if five else {}))
        script.turn_until(lambda: seen["connect"])
        _, _, flags, reason, properties = seen["connect"][0]
        assert reason == 0 and not flags.session_present
        if five:
            assert (properties.TopicAliasMaximum, properties.ServerKeepAlive) == (5, 20)

        wanted = [("a/+/c", SubscribeOptions(qos=2, noLocal=True, retainHandling=1)), ("x/#", SubscribeOptions(qos=1))]
        _, mid = client.subscribe(wanted if five else [("a/+/c", 2), ("x/#", 1)])
        subscribe = script.read()
        assert isinstance(subscribe, p.Subscribe) and subscribe.packet_id == mid
        assert subscribe.subscriptions == [p.Subscription("a/+/c", 2, five, False, 1 if five else 0),
                                           p.Subscription("x/#", 1)]
        script.send(p.SubAck(mid, [2, 0x80]))
        script.turn_until(lambda: seen["subscribe"])
        assert [int(code.value) for code in seen["subscribe"][0][3]] == [2, 0x80]

        publish_properties = None
        if five:
            publish_properties = Properties(PacketTypes.PUBLISH)
            publish_properties.UserProperty = [("k", "v"), ("k", "w")]
            publish_properties.ContentType = "text/plain"
            publish_properties.ResponseTopic = "r/1"
            publish_properties.CorrelationData = b"id-1"
            publish_properties.MessageExpiryInterval = 60
            publish_properties.PayloadFormatIndicator = 1
        info = client.publish("t/1", b"hello", qos=1, retain=True, properties=publish_properties)
        publish = script.read()
        assert isinstance(publish, p.Publish)
        assert (publish.topic, publish.payload, publish.qos, publish.retain) == ("t/1", b"hello", 1, True)
        assert not publish.dup
        assert publish.packet_id == info.mid
        if five:
            assert publish.properties == {"user_property": [("k", "v"), ("k", "w")], "content_type": "text/plain",
                                          "response_topic": "r/1", "correlation_data": b"id-1",
                                          "message_expiry_interval": 60, "payload_format_indicator": 1}
        script.send(p.PubAck(info.mid))
        script.turn_until(lambda: seen["publish"])

        exactly_once = client.publish("t/2", b"twice?", qos=2)  # QoS 2: PUBREC, PUBREL, PUBCOMP
        publish = script.read()
        assert isinstance(publish, p.Publish) and publish.qos == 2 and publish.packet_id == exactly_once.mid
        script.send(p.PubRec(exactly_once.mid))
        assert script.read() == p.PubRel(exactly_once.mid)
        script.send(p.PubComp(exactly_once.mid))
        script.turn_until(lambda: len(seen["publish"]) == 2)

        sent = {"subscription_identifier": [7], "user_property": [("x", "y")], "content_type": "ct",
                "message_expiry_interval": 30, "correlation_data": b"c-9"} if five else {}
        script.send(p.Publish("a/b/c", b"m1", 1, packet_id=11, properties=sent))
        assert script.read() == p.PubAck(11)
        script.send(p.Publish("a/q/c", b"m2", 2, retain=True, packet_id=12))
        assert script.read() == p.PubRec(12)
        script.send(p.PubRel(12))
        assert script.read() == p.PubComp(12)
        script.turn_until(lambda: len(seen["message"]) == 2)
        first, second = (args[2] for args in seen["message"])
        assert (first.topic, first.payload, first.qos, first.retain) == ("a/b/c", b"m1", 1, False)
        assert (second.topic, second.payload, second.qos, second.retain) == ("a/q/c", b"m2", 2, True)
        if five:
            got = first.properties
            assert (got.SubscriptionIdentifier, got.UserProperty, got.ContentType) == ([7], [("x", "y")], "ct")
            assert (got.MessageExpiryInterval, got.CorrelationData) == (30, b"c-9")

        _, mid = client.unsubscribe(["x/#"])
        assert script.read() == p.Unsubscribe(mid, ["x/#"])
        script.send(p.UnsubAck(mid, [0x11] if five else []))
        script.turn_until(lambda: seen["unsubscribe"])
        if five:
            assert [int(code.value) for code in seen["unsubscribe"][0][3]] == [0x11]

        if five:
            client.disconnect(reasoncode=ReasonCode(PacketTypes.DISCONNECT, identifier=4))
            assert script.read() == p.Disconnect(4)
        else:
            client.disconnect()
            assert script.read() == p.Disconnect()
    finally:
        script.sock.close()
        client.socket() and client.socket().close()


def test_paho_reads_our_disconnect_with_its_reason_code(server: socket.socket) -> None:
    seen: dict[str, list[Any]] = {}
    client = paho_client(MQTT_5, seen)
    script = Script(server, client, MQTT_5)
    try:
        assert isinstance(script.read(), p.Connect)
        script.send(p.Connack(0, False, {"assigned_client_identifier": "given-1", "maximum_qos": 1}))
        script.turn_until(lambda: seen["connect"])
        assert seen["connect"][0][4].AssignedClientIdentifier == "given-1"
        script.send(p.Disconnect(0x8E, {"reason_string": "session taken over"}))
        script.turn_until(lambda: seen["disconnect"])
        assert int(seen["disconnect"][0][3].value) == 0x8E
    finally:
        script.sock.close()
        client.socket() and client.socket().close()
