"""MQTT 5 properties: the table of them (identifier, name, type, the packets that may carry
them), and their encoding.

A packet's properties are a dict by name. `user_property` is a list of (name, value) pairs and
`subscription_identifier` a list of ints (a PUBLISH may carry several, one per matching
subscription); every other property appears at most once, and a second one is a protocol error.
"""

from __future__ import annotations

from typing import Any

from raftmq.errors import MqttError
from raftmq.protocol.mqtt import packets as p
from raftmq.protocol.mqtt.primitives import Reader, write_binary, write_string, write_u16, write_u32, write_varint
from raftmq.protocol.mqtt.reasons import MALFORMED_PACKET, PROTOCOL_ERROR

BYTE, U16, U32, VARINT, STRING, BINARY, PAIR = "byte", "u16", "u32", "varint", "string", "binary", "pair"
WILL = 0  # the will's properties, in CONNECT's payload (no packet type is 0)

_PUB = {p.PUBLISH, WILL}
_ACKS = {p.PUBACK, p.PUBREC, p.PUBREL, p.PUBCOMP}
_EVERY = {p.CONNECT, p.CONNACK, p.PUBLISH, WILL, *_ACKS, p.SUBSCRIBE, p.SUBACK, p.UNSUBSCRIBE, p.UNSUBACK,
          p.DISCONNECT, p.AUTH}

# identifier: (name, type, the packets that may carry it)
TABLE: dict[int, tuple[str, str, set[int]]] = {
    0x01: ("payload_format_indicator", BYTE, _PUB),
    0x02: ("message_expiry_interval", U32, _PUB),
    0x03: ("content_type", STRING, _PUB),
    0x08: ("response_topic", STRING, _PUB),
    0x09: ("correlation_data", BINARY, _PUB),
    0x0B: ("subscription_identifier", VARINT, {p.PUBLISH, p.SUBSCRIBE}),
    0x11: ("session_expiry_interval", U32, {p.CONNECT, p.CONNACK, p.DISCONNECT}),
    0x12: ("assigned_client_identifier", STRING, {p.CONNACK}),
    0x13: ("server_keep_alive", U16, {p.CONNACK}),
    0x15: ("authentication_method", STRING, {p.CONNECT, p.CONNACK, p.AUTH}),
    0x16: ("authentication_data", BINARY, {p.CONNECT, p.CONNACK, p.AUTH}),
    0x17: ("request_problem_information", BYTE, {p.CONNECT}),
    0x18: ("will_delay_interval", U32, {WILL}),
    0x19: ("request_response_information", BYTE, {p.CONNECT}),
    0x1A: ("response_information", STRING, {p.CONNACK}),
    0x1C: ("server_reference", STRING, {p.CONNACK, p.DISCONNECT}),
    0x1F: ("reason_string", STRING, {p.CONNACK, *_ACKS, p.SUBACK, p.UNSUBACK, p.DISCONNECT, p.AUTH}),
    0x21: ("receive_maximum", U16, {p.CONNECT, p.CONNACK}),
    0x22: ("topic_alias_maximum", U16, {p.CONNECT, p.CONNACK}),
    0x23: ("topic_alias", U16, {p.PUBLISH}),
    0x24: ("maximum_qos", BYTE, {p.CONNACK}),
    0x25: ("retain_available", BYTE, {p.CONNACK}),
    0x26: ("user_property", PAIR, _EVERY),
    0x27: ("maximum_packet_size", U32, {p.CONNECT, p.CONNACK}),
    0x28: ("wildcard_subscription_available", BYTE, {p.CONNACK}),
    0x29: ("subscription_identifier_available", BYTE, {p.CONNACK}),
    0x2A: ("shared_subscription_available", BYTE, {p.CONNACK}),
}
IDS = {name: (identifier, kind) for identifier, (name, kind, _) in TABLE.items()}
REPEATABLE = {"user_property", "subscription_identifier"}
# Properties whose value may only be 0 or 1, and those that may not be 0 (a protocol error).
BOOLEANS = {"payload_format_indicator", "request_problem_information", "request_response_information",
            "maximum_qos", "retain_available", "wildcard_subscription_available",
            "subscription_identifier_available", "shared_subscription_available"}
NOT_ZERO = {"receive_maximum", "maximum_packet_size", "topic_alias", "subscription_identifier"}


def read_properties(reader: Reader, packet_type: int) -> p.Properties:
    """The properties at the reader's position: their length, then each; checked against the table."""
    length = reader.varint()
    end = reader.position + length
    if end > reader.end:
        raise MqttError(MALFORMED_PACKET, "malformed packet", "properties longer than the packet")
    found: p.Properties = {}
    while reader.position < end:
        identifier = reader.varint()
        entry = TABLE.get(identifier)
        if entry is None:
            raise MqttError(MALFORMED_PACKET, "malformed packet", f"unknown property 0x{identifier:02x}")
        name, kind, allowed = entry
        if packet_type not in allowed:
            raise MqttError(PROTOCOL_ERROR, "protocol error", f"property {name} is not allowed in this packet")
        value = _read_value(reader, kind)
        _check_value(name, value)
        if name in REPEATABLE:
            found.setdefault(name, []).append(value)
        elif name in found:
            raise MqttError(PROTOCOL_ERROR, "protocol error", f"property {name} given twice")
        else:
            found[name] = value
    if reader.position != end:
        raise MqttError(MALFORMED_PACKET, "malformed packet", "a property ran past the properties' length")
    return found


def _read_value(reader: Reader, kind: str) -> Any:
    if kind == BYTE:
        return reader.u8()
    if kind == U16:
        return reader.u16()
    if kind == U32:
        return reader.u32()
    if kind == VARINT:
        return reader.varint()
    if kind == STRING:
        return reader.string()
    if kind == BINARY:
        return reader.binary()
    return (reader.string(), reader.string())


def _check_value(name: str, value: Any) -> None:
    if name in BOOLEANS and value not in (0, 1):
        raise MqttError(PROTOCOL_ERROR, "protocol error", f"property {name} must be 0 or 1, not {value}")
    if name in NOT_ZERO and value == 0:
        raise MqttError(PROTOCOL_ERROR, "protocol error", f"property {name} may not be 0")


def write_properties(out: bytearray, properties: p.Properties) -> None:
    """Append `properties`' length and each of them (in the table's order, repeated ones in theirs)."""
    body = bytearray()
    for name, value in properties.items():
        identifier, kind = IDS[name]  # a KeyError here is a bug of the caller: no such property
        for one in value if name in REPEATABLE else (value,):
            write_varint(body, identifier)
            _write_value(body, kind, one)
    write_varint(out, len(body))
    out += body


def _write_value(out: bytearray, kind: str, value: Any) -> None:
    if kind == BYTE:
        out.append(value)
    elif kind == U16:
        write_u16(out, value)
    elif kind == U32:
        write_u32(out, value)
    elif kind == VARINT:
        write_varint(out, value)
    elif kind == STRING:
        write_string(out, value)
    elif kind == BINARY:
        write_binary(out, value)
    else:
        write_string(out, value[0])
        write_string(out, value[1])
