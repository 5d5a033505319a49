"""MQTT 3.1.1 and 5.0 control packets as values: what `raftmq.protocol.mqtt.codec` reads from bytes
and writes to them, in either direction (a broker reads what a client writes and the other way).

One class per packet type. MQTT 5's properties are a dict named by `raftmq.protocol.mqtt.properties`
(`{"message_expiry_interval": 60, "user_property": [("k", "v")]}`); under MQTT 3.1.1 they are
empty, and a reason code is what 3.1.1 calls a return code where it has one (CONNACK, SUBACK).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

MQTT_311 = 4  # the protocol level a CONNECT names
MQTT_5 = 5
VERSIONS = {MQTT_311: "3.1.1", MQTT_5: "5.0"}

Properties = dict[str, Any]

# Packet types, the high nibble of the first byte.
CONNECT, CONNACK, PUBLISH, PUBACK, PUBREC, PUBREL, PUBCOMP = 1, 2, 3, 4, 5, 6, 7
SUBSCRIBE, SUBACK, UNSUBSCRIBE, UNSUBACK, PINGREQ, PINGRESP, DISCONNECT, AUTH = 8, 9, 10, 11, 12, 13, 14, 15


@dataclass(slots=True)
class Will:
    """The message a CONNECT leaves behind, published if the connection ends without DISCONNECT."""

    topic: str
    payload: bytes
    qos: int = 0
    retain: bool = False
    properties: Properties = field(default_factory=dict)


@dataclass(slots=True)
class Connect:
    client_id: str
    version: int = MQTT_311
    clean_start: bool = True  # 3.1.1's "clean session"
    keep_alive: int = 60  # seconds; 0 = none
    username: str | None = None
    password: bytes | None = None
    will: Will | None = None
    properties: Properties = field(default_factory=dict)


@dataclass(slots=True)
class Connack:
    reason_code: int = 0
    session_present: bool = False
    properties: Properties = field(default_factory=dict)


@dataclass(slots=True)
class Publish:
    topic: str
    payload: bytes = b""
    qos: int = 0
    retain: bool = False
    dup: bool = False
    packet_id: int | None = None  # set exactly when qos > 0
    properties: Properties = field(default_factory=dict)


@dataclass(slots=True)
class _Acknowledgement:
    """PUBACK, PUBREC, PUBREL and PUBCOMP: one shape, four packet types (the classes below)."""

    packet_id: int
    reason_code: int = 0
    properties: Properties = field(default_factory=dict)


class PubAck(_Acknowledgement):
    __slots__ = ()


class PubRec(_Acknowledgement):
    __slots__ = ()


class PubRel(_Acknowledgement):
    __slots__ = ()


class PubComp(_Acknowledgement):
    __slots__ = ()


@dataclass(slots=True)
class Subscription:
    topic_filter: str
    qos: int = 0  # the maximum QoS the subscriber takes
    no_local: bool = False  # MQTT 5: not its own publications
    retain_as_published: bool = False  # MQTT 5
    retain_handling: int = 0  # MQTT 5: 0 send retained, 1 only on a new subscription, 2 never


@dataclass(slots=True)
class Subscribe:
    packet_id: int
    subscriptions: list[Subscription]
    properties: Properties = field(default_factory=dict)


@dataclass(slots=True)
class SubAck:
    packet_id: int
    reason_codes: list[int]  # per subscription: the granted QoS, or a failure (0x80 and up)
    properties: Properties = field(default_factory=dict)


@dataclass(slots=True)
class Unsubscribe:
    packet_id: int
    topic_filters: list[str]
    properties: Properties = field(default_factory=dict)


@dataclass(slots=True)
class UnsubAck:
    packet_id: int
    reason_codes: list[int] = field(default_factory=list)  # MQTT 5 only; 3.1.1's UNSUBACK has none
    properties: Properties = field(default_factory=dict)


@dataclass(slots=True)
class PingReq:
    pass


@dataclass(slots=True)
class PingResp:
    pass


@dataclass(slots=True)
class Disconnect:
    reason_code: int = 0
    properties: Properties = field(default_factory=dict)


@dataclass(slots=True)
class Auth:
    """MQTT 5 only: a step of an extended authentication exchange."""

    reason_code: int = 0
    properties: Properties = field(default_factory=dict)


Packet = (Connect | Connack | Publish | PubAck | PubRec | PubRel | PubComp | Subscribe | SubAck | Unsubscribe
          | UnsubAck | PingReq | PingResp | Disconnect | Auth)
ACKS: dict[int, type[PubAck | PubRec | PubRel | PubComp]] = {PUBACK: PubAck, PUBREC: PubRec, PUBREL: PubRel,
                                                             PUBCOMP: PubComp}
