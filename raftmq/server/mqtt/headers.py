"""MQTT properties and STOMP headers, both ways (the table in docs/mqtt.md): what a PUBLISH (or a
will) becomes in a message's header block, and what a delivered message's headers give back as
a PUBLISH's properties."""

from __future__ import annotations

import hashlib

from raftmq.core.retained import RETAIN
from raftmq.protocol.header_block import block_of
from raftmq.protocol.mqtt import packets as p
from raftmq.protocol.mqtt.topics import destination_of, topic_of

QOS_HEADER = "mqtt-qos"  # the QoS an MQTT message was published with
# What marks the publications of a client that has a no-local subscription (a digest of its client
# id: raftmq.server.mqtt.outbound leaves them out of those subscriptions).
ORIGIN = "mqtt-origin"
# MQTT 5 properties and the STOMP headers that carry them; user properties are headers of their
# own names.
HEADERS = {"content_type": "content-type", "response_topic": "reply-to", "correlation_data": "correlation-id"}
PROPERTIES = {header: name for name, header in HEADERS.items()}  # the other way, for deliveries
# Headers that are no user property of a delivery: MQTT's own (`mqtt-...`: the QoS, retain marks,
# a QoS 2 key, the origin; no client may set one) and the core's.
NOT_PROPERTIES = frozenset({"persistent", "expires", "priority"})
MQTT_HEADERS = "mqtt-"


def origin_of(client_id: str) -> str:
    """The `ORIGIN` of a client's publications: a digest, so its client id is not told to others."""
    return hashlib.blake2b(client_id.encode(), digest_size=8).hexdigest()


_PLAIN = tuple(block_of(((QOS_HEADER, str(qos)), ("persistent", "true" if qos else "false"))) for qos in range(3))


def block_of_publish(qos: int, retain: bool, payload: bytes, properties: p.Properties, now: int | None) -> str:
    """A message's header block (`now` None: a will, whose expiry would count from its CONNECT)."""
    if not retain and not properties:
        return _PLAIN[qos]  # most: made once
    pairs = [(QOS_HEADER, str(qos)), ("persistent", "true" if qos else "false")]
    if retain:  # kept for the topic (raftmq.core.retained); an empty one forgets the topic's
        pairs.append((RETAIN, "true" if payload else "clear"))
    if properties:
        for name, header in HEADERS.items():
            if name in properties:
                value = properties[name]
                if name == "response_topic":
                    value = destination_of(value)
                elif name == "correlation_data":
                    value = value.decode("utf-8", "replace")
                pairs.append((header, value))
        if "message_expiry_interval" in properties and now is not None:
            pairs.append(("expires", str(now + 1000 * properties["message_expiry_interval"])))
        # A user property named like the headers MQTT itself sets (`mqtt-qos`, `mqtt-retain`,
        # `mqtt-once`, ...) would be read before them: not carried.
        pairs.extend((name, value) for name, value in properties.get("user_property", ())
                     if not name.startswith("mqtt-"))
    return block_of(pairs)


def properties_of(pairs: tuple[tuple[str, str], ...], now: int) -> p.Properties:
    """A delivery's MQTT 5 properties, from its message's headers; an expiring message's message
    expiry interval is what is left of it at `now` (MQTT: the time it waited is taken off)."""
    properties: p.Properties = {}
    users = []
    for name, value in pairs:
        if name == "expires" and value.isdigit() and int(value) > 0:
            properties["message_expiry_interval"] = max(1, -(-(int(value) - now) // 1000))
        elif name in PROPERTIES:
            prop = PROPERTIES[name]
            if prop == "response_topic":
                value = topic_of(value) or value
            properties[prop] = value.encode() if prop == "correlation_data" else value
        elif name not in NOT_PROPERTIES and not name.startswith(MQTT_HEADERS):
            users.append((name, value))
    if users:
        properties["user_property"] = users
    return properties
