"""MQTT 3.1.1 and 5.0 packets to bytes and back (raftmq.protocol.mqtt.codec): every packet a
version can carry reads back as it was written, in any chunking; any bytes are packets or an
`MqttError` with a reason code, never another exception; and each rule of the specification the
codec enforces is shown here with the bytes that break it. paho-mqtt as an oracle:
tests/protocol/test_mqtt_paho.py."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raftmq.errors import MqttError
from raftmq.protocol.mqtt import packets as p
from raftmq.protocol.mqtt import reasons
from raftmq.protocol.mqtt.codec import MqttParser, encode
from raftmq.protocol.mqtt.packets import MQTT_5, MQTT_311
from raftmq.protocol.mqtt.properties import TABLE, WILL

PROPERTY = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

text = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"), max_size=12)
topic = text.filter(lambda t: t and "+" not in t and "#" not in t)
data = st.binary(max_size=40)
packet_id = st.integers(1, 0xFFFF)
u16, u32 = st.integers(0, 0xFFFF), st.integers(0, 0xFFFFFFFF)
VALUES = {"byte": st.integers(0, 1), "u16": st.integers(1, 0xFFFF), "u32": st.integers(1, 0xFFFFFFFF),
          "varint": st.integers(1, 268_435_455), "string": text, "binary": data, "pair": st.tuples(text, text)}


def properties_for(packet_type: int) -> st.SearchStrategy[dict[str, object]]:
    allowed = {name: kind for name, kind, where in TABLE.values() if packet_type in where}
    fields = {}
    for name, kind in allowed.items():
        value = VALUES[kind]
        fields[name] = st.lists(value, min_size=1, max_size=3) if name in ("user_property", "subscription_identifier") \
            else value
    return st.fixed_dictionaries({}, optional=fields)  # type: ignore[arg-type]


def props(version: int, packet_type: int) -> st.SearchStrategy[dict[str, object]]:
    return properties_for(packet_type) if version == MQTT_5 else st.just({})


def reason(version: int) -> st.SearchStrategy[int]:
    return st.integers(0, 255) if version == MQTT_5 else st.just(0)


def packets(version: int) -> st.SearchStrategy[p.Packet]:
    will = st.builds(p.Will, topic, data, st.integers(0, 2), st.booleans(), props(version, WILL))
    username = st.none() | text
    connect = st.builds(p.Connect, text, st.just(version), st.booleans(), u16, username, st.none() | data,
                        st.none() | will, props(version, p.CONNECT))
    if version == MQTT_311:  # 3.1.1: no password without a user name
        connect = connect.filter(lambda c: c.password is None or c.username is not None)

    def publish(qos: int, dup: bool) -> st.SearchStrategy[p.Publish]:
        return st.builds(p.Publish, topic, data, st.just(qos), st.booleans(), st.just(dup),
                         packet_id if qos else st.none(), props(version, p.PUBLISH))

    publishes = st.one_of(publish(0, False), *(publish(q, d) for q in (1, 2) for d in (False, True)))
    acks = st.one_of(*(st.builds(cls, packet_id, reason(version), props(version, kind))
                       for kind, cls in p.ACKS.items()))
    subscription = st.builds(p.Subscription, text.filter(bool), st.integers(0, 2),
                             *((st.booleans(), st.booleans(), st.integers(0, 2)) if version == MQTT_5
                               else (st.just(False), st.just(False), st.just(0))))
    codes = st.lists(st.integers(0, 255), min_size=1, max_size=4)
    return st.one_of(
        connect, publishes, acks,
        st.builds(p.Connack, st.integers(0, 255), st.booleans(), props(version, p.CONNACK)),
        st.builds(p.Subscribe, packet_id, st.lists(subscription, min_size=1, max_size=3), props(version, p.SUBSCRIBE)),
        st.builds(p.SubAck, packet_id, codes, props(version, p.SUBACK)),
        st.builds(p.Unsubscribe, packet_id, st.lists(text, min_size=1, max_size=3), props(version, p.UNSUBSCRIBE)),
        st.builds(p.UnsubAck, packet_id, codes if version == MQTT_5 else st.just([]), props(version, p.UNSUBACK)),
        st.builds(p.PingReq), st.builds(p.PingResp),
        st.builds(p.Disconnect, reason(version), props(version, p.DISCONNECT)),
        *((st.builds(p.Auth, st.integers(0, 255), props(version, p.AUTH)),) if version == MQTT_5 else ()),
    )


@PROPERTY
@given(st.sampled_from([MQTT_311, MQTT_5]).flatmap(lambda v: st.tuples(st.just(v), st.lists(packets(v), max_size=4))),
       st.lists(st.integers(1, 64), max_size=8))
def test_every_packet_reads_back_as_written_in_any_chunking(versioned: tuple[int, list[p.Packet]],
                                                           cuts: list[int]) -> None:
    version, written = versioned
    wire = b"".join(encode(packet, version) for packet in written)
    parser = MqttParser(version)
    read: list[p.Packet] = []
    position = 0
    for cut in [*cuts, len(wire)]:
        read += parser.feed(wire[position:position + cut])
        position += cut
    read += parser.feed(wire[position:])
    assert read == written
    assert parser.buffered == 0


@PROPERTY
@given(st.binary(max_size=80), st.sampled_from([None, MQTT_311, MQTT_5]))
def test_any_bytes_are_packets_or_an_mqtt_error(wire: bytes, version: int | None) -> None:
    try:
        MqttParser(version).feed(wire)
    except MqttError as error:
        assert error.reason_code in reasons.NAMES and error.reason_code >= 0x80
        assert error.message and error.detail


@PROPERTY
@given(st.sampled_from([MQTT_311, MQTT_5]).flatmap(lambda v: st.tuples(st.just(v), packets(v))),
       st.integers(0, 200), st.integers(0, 255))
def test_a_packet_with_one_byte_changed_is_a_packet_or_an_mqtt_error(versioned: tuple[int, p.Packet],
                                                                    where: int, value: int) -> None:
    version, packet = versioned
    wire = bytearray(encode(packet, version))
    wire[where % len(wire)] = value
    try:
        MqttParser(version).feed(bytes(wire))
    except MqttError as error:
        assert error.reason_code >= 0x80


def test_a_broker_learns_the_version_from_the_connect_and_the_packets_before_a_bad_one_are_kept() -> None:
    parser = MqttParser()
    good = encode(p.Connect("c", MQTT_5, keep_alive=10, properties={"receive_maximum": 5}))
    good += encode(p.Publish("a/b", b"x", 1, packet_id=7, properties={"content_type": "text/plain"}), MQTT_5)
    with pytest.raises(MqttError) as bad:
        parser.feed(good + b"\x30\x02\x00\x05")  # a PUBLISH whose topic runs past its end
    assert bad.value.reason_code == reasons.MALFORMED_PACKET
    assert [type(packet) for packet in bad.value.packets] == [p.Connect, p.Publish]
    assert parser.version == MQTT_5


def mqtt_error(wire: bytes, version: int | None = MQTT_5, max_packet_size: int | None = None) -> MqttError:
    parser = MqttParser(version) if max_packet_size is None else MqttParser(version, max_packet_size)
    with pytest.raises(MqttError) as refused:
        parser.feed(wire)
    return refused.value


def connect_bytes(level: int = 4, flags: int = 0x02, name: bytes = b"MQTT", rest: bytes = b"\x00\x01c") -> bytes:
    body = len(name).to_bytes(2, "big") + name + bytes((level, flags)) + b"\x00\x3c" + rest
    return bytes((0x10, len(body))) + body


CASES = [
    # (why, bytes, the parser's version, the reason code)
    ("the first packet is not CONNECT", b"\xc0\x00", None, reasons.PROTOCOL_ERROR),
    ("a stranger's first bytes, before the packet is complete", b"GET / HTTP/1.1\r\n", None, reasons.PROTOCOL_ERROR),
    ("a CONNECT larger than a CONNECT can need", b"\x10\x81\x80\x04", None, reasons.PACKET_TOO_LARGE),
    ("MQTT 3.1 (MQIsdp, level 3)", connect_bytes(3, name=b"MQIsdp"), None, reasons.UNSUPPORTED_PROTOCOL_VERSION),
    ("protocol level 6", connect_bytes(6), None, reasons.UNSUPPORTED_PROTOCOL_VERSION),
    ("CONNECT's reserved flag", connect_bytes(flags=0x03), None, reasons.MALFORMED_PACKET),
    ("will QoS 3", connect_bytes(flags=0x1E), None, reasons.MALFORMED_PACKET),
    ("will retain without a will", connect_bytes(flags=0x22), None, reasons.MALFORMED_PACKET),
    ("3.1.1: a password without a user name", connect_bytes(flags=0x42, rest=b"\x00\x01c\x00\x01p"), None,
     reasons.MALFORMED_PACKET),
    ("bytes after CONNECT's payload", connect_bytes(rest=b"\x00\x01cZ"), None, reasons.MALFORMED_PACKET),
    ("a client id that is not UTF-8", connect_bytes(rest=b"\x00\x01\xff"), None, reasons.MALFORMED_PACKET),
    ("a client id holding U+0000", connect_bytes(rest=b"\x00\x01\x00"), None, reasons.MALFORMED_PACKET),
    ("a remaining length of five bytes", b"\x30\xff\xff\xff\xff\x01", MQTT_5, reasons.MALFORMED_PACKET),
    ("PUBLISH with QoS 3", b"\x36\x05\x00\x01a\x00\x01", MQTT_311, reasons.MALFORMED_PACKET),
    ("PUBLISH of QoS 0 with DUP", b"\x38\x03\x00\x01a", MQTT_311, reasons.MALFORMED_PACKET),
    ("PUBLISH with packet id 0", b"\x32\x05\x00\x01a\x00\x00", MQTT_311, reasons.MALFORMED_PACKET),
    ("a wildcard in a topic name", b"\x30\x03\x00\x01#", MQTT_311, reasons.TOPIC_NAME_INVALID),
    ("an empty topic name without an alias", b"\x30\x03\x00\x00\x00", MQTT_5, reasons.TOPIC_NAME_INVALID),
    ("PUBREL without its flags", b"\x60\x02\x00\x01", MQTT_311, reasons.MALFORMED_PACKET),
    ("PUBACK with bytes after it (3.1.1)", b"\x40\x03\x00\x01\x00", MQTT_311, reasons.MALFORMED_PACKET),
    ("SUBSCRIBE without a filter", b"\x82\x02\x00\x01", MQTT_311, reasons.PROTOCOL_ERROR),
    ("3.1.1 SUBSCRIBE options beyond QoS", b"\x82\x06\x00\x01\x00\x01a\x04", MQTT_311, reasons.MALFORMED_PACKET),
    ("SUBSCRIBE with QoS 3", b"\x82\x07\x00\x01\x00\x00\x01a\x03", MQTT_5, reasons.MALFORMED_PACKET),
    ("retain handling 3", b"\x82\x07\x00\x01\x00\x00\x01a\x30", MQTT_5, reasons.PROTOCOL_ERROR),
    ("UNSUBSCRIBE without a filter", b"\xa2\x03\x00\x01\x00", MQTT_5, reasons.PROTOCOL_ERROR),
    ("PINGREQ with a body", b"\xc0\x01\x00", MQTT_5, reasons.MALFORMED_PACKET),
    ("packet type 0", b"\x00\x00", MQTT_5, reasons.MALFORMED_PACKET),
    ("AUTH in MQTT 3.1.1", b"\xf0\x00", MQTT_311, reasons.MALFORMED_PACKET),
    ("an unknown property", b"\xe0\x03\x00\x01\x05", MQTT_5, reasons.MALFORMED_PACKET),
    ("a property the packet may not carry (topic alias on DISCONNECT)", b"\xe0\x05\x00\x03\x23\x00\x01", MQTT_5,
     reasons.PROTOCOL_ERROR),
    ("a property given twice", b"\xe0\x0c\x00\x0a\x11\x00\x00\x00\x01\x11\x00\x00\x00\x02", MQTT_5,
     reasons.PROTOCOL_ERROR),
    ("receive maximum 0", b"\xe0\x05\x00\x03\x21\x00\x00", MQTT_5, reasons.PROTOCOL_ERROR),
    ("properties longer than the packet", b"\xe0\x03\x00\x09\x11", MQTT_5, reasons.MALFORMED_PACKET),
]


@pytest.mark.parametrize(("why", "wire", "version", "code"), CASES, ids=[c[0] for c in CASES])
def test_each_rule_the_codec_enforces(why: str, wire: bytes, version: int | None, code: int) -> None:
    error = mqtt_error(wire, version)
    assert error.reason_code == code, (why, error.detail)


def test_a_packet_over_the_limit_is_refused_from_its_fixed_header_before_its_body_arrives() -> None:
    header = b"\x30\x80\x80\x04"  # PUBLISH, remaining length 65,536: the body has not come
    error = mqtt_error(header, MQTT_311, max_packet_size=1024)
    assert error.reason_code == reasons.PACKET_TOO_LARGE and "65540 bytes (limit 1024)" in error.detail


def test_an_empty_topic_with_an_alias_and_several_subscription_ids_read_back() -> None:
    publish = p.Publish("", b"v", properties={"topic_alias": 3, "subscription_identifier": [1, 7],
                                              "user_property": [("k", "1"), ("k", "2")]})
    assert MqttParser(MQTT_5).feed(encode(publish, MQTT_5)) == [publish]


def test_under_3_1_1_the_reason_codes_and_properties_of_mqtt_5_are_not_written() -> None:
    assert encode(p.PubAck(5, 0x10, {"reason_string": "x"}), MQTT_311) == b"\x40\x02\x00\x05"
    assert encode(p.Disconnect(0x04), MQTT_311) == b"\xe0\x00"
    assert encode(p.UnsubAck(9, [0x11]), MQTT_311) == b"\xb0\x02\x00\x09"
    assert encode(p.Connack(reasons.NOT_AUTHORIZED_311, False), MQTT_311) == b"\x20\x02\x00\x05"


def test_the_smallest_forms_of_mqtt_5_acks_and_disconnect_read_as_success() -> None:
    parser = MqttParser(MQTT_5)
    assert parser.feed(b"\x40\x02\x00\x05\xe0\x00") == [p.PubAck(5), p.Disconnect()]
    assert encode(p.PubAck(5), MQTT_5) == b"\x40\x02\x00\x05"


def test_3_1_1_connack_return_codes_for_mqtt_5_reasons() -> None:
    assert reasons.connack_code_311(reasons.SUCCESS) == 0
    assert reasons.connack_code_311(reasons.UNSUPPORTED_PROTOCOL_VERSION) == 1
    assert reasons.connack_code_311(reasons.CLIENT_IDENTIFIER_NOT_VALID) == 2
    assert reasons.connack_code_311(reasons.SERVER_BUSY) == 3
    assert reasons.connack_code_311(reasons.BAD_USER_NAME_OR_PASSWORD) == 4
    assert reasons.connack_code_311(reasons.NOT_AUTHORIZED) == 5
    assert reasons.name(reasons.PACKET_TOO_LARGE) == "packet too large"
