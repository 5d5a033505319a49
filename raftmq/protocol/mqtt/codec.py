"""MQTT 3.1.1 and 5.0 packets from bytes and to bytes, sans-I/O.

`MqttParser.feed(data)` returns the packets `data` completes; the parser learns the version from
the CONNECT it reads (a broker's) or is told it (a client's, which reads a CONNACK first).
`encode(packet, version)` is the other way. Either direction may be read or written: a broker
reads what clients write, and the tests and raftmq's own tools write it.

Anything that is not a packet of that version raises `MqttError` with MQTT 5's reason code
(0x81 malformed packet, 0x82 protocol error, 0x84 unsupported protocol version, 0x95 packet too
large); the packets complete before the bad one ride on it as `error.packets`, in order. What only
the session can judge (a second CONNECT, a topic filter a SUBACK refuses, a topic alias it never
set up) is left to it.
"""

from __future__ import annotations

from raftmq.errors import MqttError
from raftmq.protocol.mqtt import packets as p
from raftmq.protocol.mqtt.packets import MQTT_5, MQTT_311
from raftmq.protocol.mqtt.primitives import (
    MAX_VARINT,
    Reader,
    malformed,
    read_varint,
    write_binary,
    write_string,
    write_u16,
    write_varint,
)
from raftmq.protocol.mqtt.properties import WILL, read_properties, write_properties
from raftmq.protocol.mqtt.reasons import (
    PACKET_TOO_LARGE,
    PROTOCOL_ERROR,
    TOPIC_NAME_INVALID,
    UNSUPPORTED_PROTOCOL_VERSION,
)

MAX_PACKET = 1 + 4 + MAX_VARINT  # the largest packet MQTT can express
# Before a CONNECT has been read (a broker's parser) a packet may be at most this large: a CONNECT
# is a client id, a will and credentials, and a stranger must not make the node hold more.
CONNECT_MAX = 65_536
_FLAGS_TWO = {p.PUBREL, p.SUBSCRIBE, p.UNSUBSCRIBE}  # their fixed header's flags are 0b0010


def protocol_error(detail: str) -> MqttError:
    return MqttError(PROTOCOL_ERROR, "protocol error", detail)


class MqttParser:
    """Bytes in, packets out, for one connection."""

    __slots__ = ("_buffer", "max_packet_size", "version")

    def __init__(self, version: int | None = None, max_packet_size: int = MAX_PACKET) -> None:
        self._buffer = bytearray()
        self.version = version  # None until a CONNECT says it
        self.max_packet_size = max_packet_size  # the whole packet, fixed header included

    @property
    def buffered(self) -> int:
        return len(self._buffer)

    def feed(self, data: bytes) -> list[p.Packet]:
        buffer = self._buffer
        buffer += data
        packets: list[p.Packet] = []
        offset = 0
        try:
            while len(buffer) - offset >= 2:
                if self.version is None and buffer[offset] != p.CONNECT << 4:  # known from its first byte
                    raise protocol_error("the first packet of a connection must be CONNECT")
                got = read_varint(buffer, offset + 1)
                if got is None:
                    break
                length, used = got
                total = 1 + used + length
                limit = self.max_packet_size if self.version is not None else min(self.max_packet_size, CONNECT_MAX)
                if total > limit:
                    raise MqttError(PACKET_TOO_LARGE, "packet too large", f"a packet of {total} bytes (limit {limit})")
                if len(buffer) - offset < total:
                    break
                first = buffer[offset]
                body = bytes(buffer[offset + 1 + used:offset + total])
                offset += total
                packet = decode(first, body, self.version)
                if type(packet) is p.Connect:
                    self.version = packet.version
                packets.append(packet)
        except MqttError as error:
            error.packets = packets
            buffer.clear()
            raise
        del buffer[:offset]
        return packets


def decode(first: int, body: bytes, version: int | None) -> p.Packet:
    """The packet whose first byte is `first` and whose variable header and payload are `body`."""
    kind, flags = first >> 4, first & 0x0F
    if kind == p.PUBLISH:
        return _publish(flags, body, _known(version))
    if flags != (2 if kind in _FLAGS_TWO else 0):
        raise malformed(f"packet type {kind} with flags {flags:#06b}")
    if kind == p.CONNECT:
        return _connect(Reader(body))
    reader = Reader(body)
    version = _known(version)
    five = version == MQTT_5
    if kind in p.ACKS:
        packet_id = _packet_id(reader)
        reason, properties = _reason_and_properties(reader, kind, five)
        return p.ACKS[kind](packet_id, reason, properties)
    if kind == p.SUBSCRIBE:
        return _subscribe(reader, five)
    if kind == p.UNSUBSCRIBE:
        packet_id = _packet_id(reader)
        properties = read_properties(reader, kind) if five else {}
        filters = []
        while reader.left:
            filters.append(reader.string())
        if not filters:
            raise protocol_error("UNSUBSCRIBE without a topic filter")
        return p.Unsubscribe(packet_id, filters, properties)
    if kind in (p.PINGREQ, p.PINGRESP):
        if body:
            raise malformed("a PINGREQ or PINGRESP with a body")
        return p.PingReq() if kind == p.PINGREQ else p.PingResp()
    if kind == p.DISCONNECT or (kind == p.AUTH and five):
        reason, properties = _reason_and_properties(reader, kind, five)
        return p.Disconnect(reason, properties) if kind == p.DISCONNECT else p.Auth(reason, properties)
    if kind == p.CONNACK:
        acknowledge = reader.u8()
        if acknowledge & 0xFE:
            raise malformed("CONNACK's reserved flags set")
        reason = reader.u8()
        properties = read_properties(reader, kind) if five else {}
        _end(reader, "CONNACK")
        return p.Connack(reason, bool(acknowledge & 1), properties)
    if kind == p.SUBACK:
        packet_id = _packet_id(reader)
        properties = read_properties(reader, kind) if five else {}
        codes = list(reader.take(reader.left))
        if not codes:
            raise protocol_error("SUBACK without a reason code")
        return p.SubAck(packet_id, codes, properties)
    if kind == p.UNSUBACK:
        packet_id = _packet_id(reader)
        properties = read_properties(reader, kind) if five else {}
        return p.UnsubAck(packet_id, list(reader.take(reader.left)) if five else [], properties)
    raise malformed(f"packet type {kind} is reserved" if kind in (0, p.AUTH) else f"packet type {kind}")


def _known(version: int | None) -> int:
    if version is None:
        raise protocol_error("the first packet of a connection must be CONNECT")
    return version


def _packet_id(reader: Reader) -> int:
    packet_id = reader.u16()
    if packet_id == 0:
        raise malformed("packet identifier 0")
    return packet_id


def _end(reader: Reader, what: str) -> None:
    if reader.left:
        raise malformed(f"{reader.left} bytes after the end of {what}")


def _reason_and_properties(reader: Reader, kind: int, five: bool) -> tuple[int, p.Properties]:
    """MQTT 5's optional reason code and properties at the end of an ack, DISCONNECT or AUTH."""
    if not five:
        _end(reader, "the packet")
        return 0, {}
    reason = reader.u8() if reader.left else 0
    properties = read_properties(reader, kind) if reader.left else {}
    _end(reader, "the packet")
    return reason, properties


def _connect(reader: Reader) -> p.Connect:
    name = reader.string()
    level = reader.u8()
    if name != "MQTT" or level not in (MQTT_311, MQTT_5):
        raise MqttError(UNSUPPORTED_PROTOCOL_VERSION, "unsupported protocol version",
                        f"protocol {name!r} level {level}: raftmq speaks MQTT 3.1.1 (4) and 5.0 (5)")
    flags = reader.u8()
    if flags & 0x01:
        raise malformed("CONNECT's reserved flag set")
    will_flag, will_qos, will_retain = bool(flags & 0x04), (flags >> 3) & 3, bool(flags & 0x20)
    if will_qos == 3:
        raise malformed("will QoS 3")
    if not will_flag and (will_qos or will_retain):
        raise malformed("will QoS or will retain without a will")
    if level == MQTT_311 and flags & 0x40 and not flags & 0x80:
        raise malformed("a password without a user name (MQTT 3.1.1)")
    keep_alive = reader.u16()
    five = level == MQTT_5
    properties = read_properties(reader, p.CONNECT) if five else {}
    client_id = reader.string()
    will = None
    if will_flag:
        will_properties = read_properties(reader, WILL) if five else {}
        topic = reader.string()
        check_topic_name(topic)
        will = p.Will(topic, reader.binary(), will_qos, will_retain, will_properties)
    username = reader.string() if flags & 0x80 else None
    password = reader.binary() if flags & 0x40 else None
    _end(reader, "CONNECT")
    return p.Connect(client_id, level, bool(flags & 0x02), keep_alive, username, password, will, properties)


def check_topic_name(topic: str, alias: bool = False) -> None:
    """A PUBLISH's (or a will's) topic: no wildcard; empty only with a topic alias (MQTT 5)."""
    if "+" in topic or "#" in topic:
        raise MqttError(TOPIC_NAME_INVALID, "topic name invalid", f"{topic!r}: a topic name holds no wildcard")
    if not topic and not alias:
        raise MqttError(TOPIC_NAME_INVALID, "topic name invalid", "an empty topic name")


def _publish(flags: int, body: bytes, version: int) -> p.Publish:
    qos = (flags >> 1) & 3
    if qos == 3:
        raise malformed("PUBLISH with QoS 3")
    dup = bool(flags & 0x08)
    if dup and not qos:
        raise malformed("PUBLISH with QoS 0 and DUP set")
    reader = Reader(body)
    topic = reader.string()
    packet_id = _packet_id(reader) if qos else None
    properties = read_properties(reader, p.PUBLISH) if version == MQTT_5 else {}
    check_topic_name(topic, "topic_alias" in properties)
    return p.Publish(topic, body[reader.position:], qos, bool(flags & 0x01), dup, packet_id, properties)


def _subscribe(reader: Reader, five: bool) -> p.Subscribe:
    packet_id = _packet_id(reader)
    properties = read_properties(reader, p.SUBSCRIBE) if five else {}
    subscriptions = []
    while reader.left:
        topic_filter = reader.string()
        options = reader.u8()
        if options & (0xC0 if five else 0xFC):
            raise malformed(f"subscription options {options:#010b}: reserved bits set")
        qos, retain_handling = options & 3, (options >> 4) & 3
        if qos == 3:
            raise malformed("a subscription with QoS 3")
        if retain_handling == 3:
            raise protocol_error("retain handling 3")
        subscriptions.append(p.Subscription(topic_filter, qos, bool(options & 0x04), bool(options & 0x08),
                                            retain_handling))
    if not subscriptions:
        raise protocol_error("SUBSCRIBE without a topic filter")
    return p.Subscribe(packet_id, subscriptions, properties)


# -- encoding ------------------------------------------------------------------------------------


def encode(packet: p.Packet, version: int = MQTT_311) -> bytes:
    """The bytes of `packet` under `version` (a CONNECT names its own). MQTT 5's properties and
    reason codes are left out under 3.1.1, but for CONNACK's and SUBACK's return codes."""
    five = version == MQTT_5
    body = bytearray()
    kind = type(packet)
    flags = 0
    if kind is p.Publish:
        assert isinstance(packet, p.Publish)
        flags = (0x08 if packet.dup else 0) | packet.qos << 1 | (0x01 if packet.retain else 0)
        write_string(body, packet.topic)
        if packet.qos:
            assert packet.packet_id is not None, "a PUBLISH of QoS 1 or 2 needs a packet id"
            write_u16(body, packet.packet_id)
        if five:
            write_properties(body, packet.properties)
        return _packet(p.PUBLISH, flags, body + packet.payload if packet.payload else body)
    if kind is p.Connect:
        assert isinstance(packet, p.Connect)
        return _packet(p.CONNECT, 0, _connect_body(packet))
    if isinstance(packet, (p.PubAck, p.PubRec, p.PubRel, p.PubComp)):
        type_ = {p.PubAck: p.PUBACK, p.PubRec: p.PUBREC, p.PubRel: p.PUBREL, p.PubComp: p.PUBCOMP}[type(packet)]
        write_u16(body, packet.packet_id)
        if five and (packet.reason_code or packet.properties):
            body.append(packet.reason_code)
            if packet.properties:
                write_properties(body, packet.properties)
        return _packet(type_, 2 if type_ == p.PUBREL else 0, body)
    if isinstance(packet, p.Connack):
        body.append(1 if packet.session_present else 0)
        body.append(packet.reason_code)
        if five:
            write_properties(body, packet.properties)
        return _packet(p.CONNACK, 0, body)
    if isinstance(packet, (p.Subscribe, p.SubAck, p.Unsubscribe, p.UnsubAck)):
        write_u16(body, packet.packet_id)
        if five:
            write_properties(body, packet.properties)
        if isinstance(packet, p.Subscribe):
            for sub in packet.subscriptions:
                write_string(body, sub.topic_filter)
                options = sub.qos
                if five:
                    options |= (0x04 if sub.no_local else 0) | (0x08 if sub.retain_as_published else 0)
                    options |= sub.retain_handling << 4
                body.append(options)
            return _packet(p.SUBSCRIBE, 2, body)
        if isinstance(packet, p.Unsubscribe):
            for topic_filter in packet.topic_filters:
                write_string(body, topic_filter)
            return _packet(p.UNSUBSCRIBE, 2, body)
        if isinstance(packet, p.SubAck) or five:  # 3.1.1's UNSUBACK carries no reason codes
            body += bytes(packet.reason_codes)
        return _packet(p.SUBACK if isinstance(packet, p.SubAck) else p.UNSUBACK, 0, body)
    if isinstance(packet, p.PingReq):
        return b"\xc0\x00"
    if isinstance(packet, p.PingResp):
        return b"\xd0\x00"
    if isinstance(packet, (p.Disconnect, p.Auth)):
        type_ = p.DISCONNECT if isinstance(packet, p.Disconnect) else p.AUTH
        if five and (packet.reason_code or packet.properties or type_ == p.AUTH):
            body.append(packet.reason_code)
            if packet.properties:
                write_properties(body, packet.properties)
        return _packet(type_, 0, body)
    raise TypeError(f"not an MQTT packet: {packet!r}")


def _packet(kind: int, flags: int, body: bytearray) -> bytes:
    out = bytearray((kind << 4 | flags,))
    write_varint(out, len(body))
    out += body
    return bytes(out)


def _connect_body(packet: p.Connect) -> bytearray:
    body = bytearray()
    five = packet.version == MQTT_5
    write_string(body, "MQTT")
    body.append(packet.version)
    will = packet.will
    flags = (0x80 if packet.username is not None else 0) | (0x40 if packet.password is not None else 0)
    flags |= 0x02 if packet.clean_start else 0
    if will is not None:
        flags |= 0x04 | will.qos << 3 | (0x20 if will.retain else 0)
    body.append(flags)
    write_u16(body, packet.keep_alive)
    if five:
        write_properties(body, packet.properties)
    write_string(body, packet.client_id)
    if will is not None:
        if five:
            write_properties(body, will.properties)
        write_string(body, will.topic)
        write_binary(body, will.payload)
    if packet.username is not None:
        write_string(body, packet.username)
    if packet.password is not None:
        write_binary(body, packet.password)
    return body
