"""What an MQTT session sends its client, sans-I/O: the core's deliveries as PUBLISH packets,
QoS 1 within the client's window (`SEND_WINDOW`, or its MQTT 5 receive maximum), what waits for
room (up to `MAX_WAITING_BYTES`), and the acknowledgements a persistent session's subscriptions
owe the core (raftmq.server.mqtt.session owns one `Outbound`).

A clean session's subscriptions take their messages from the core at once (ack mode auto): its
QoS 1 window lives here only. A persistent session's QoS 1 subscriptions leave each message in
the core until the client's PUBACK (ack mode client-individual): the PUBACK becomes the core's Ack,
so a message the client never acknowledged is delivered again (DUP) when the session resumes,
on this leader or the next.
"""

from __future__ import annotations

import itertools
from collections import deque
from dataclasses import dataclass, field

from raftmq.core.commands import Ack, Command
from raftmq.core.effects import Deliver
from raftmq.core.retained import RETAIN, RETAINED_MARK
from raftmq.errors import MqttError
from raftmq.protocol.header_block import pairs_of
from raftmq.protocol.mqtt import packets as p
from raftmq.protocol.mqtt import reasons as r
from raftmq.protocol.mqtt.codec import encode
from raftmq.protocol.mqtt.packets import MQTT_5
from raftmq.protocol.mqtt.topics import TOPIC_PREFIX, dollar_excluded, topic_of
from raftmq.server.mqtt.headers import ORIGIN, QOS_HEADER, properties_of

# QoS 1 deliveries a client may have unacknowledged (less where an MQTT 5 client's receive maximum
# says so), and what may wait for room before the session ends as a slow consumer.
SEND_WINDOW = 1_000
MAX_WAITING_BYTES = 64 * 2**20


@dataclass(slots=True)
class Subscription:
    """One topic filter of the session: the core subscriptions it is made of (two for `a/#`)."""

    topic_filter: str
    qos: int
    retain_as_published: bool = False  # MQTT 5: a live message keeps its retain flag
    sub_ids: list[str] = field(default_factory=list)
    identifier: int | None = None  # MQTT 5: its subscription identifier, sent with each delivery
    no_local: bool = False  # MQTT 5: the client's own publications (`ORIGIN` its own) are not delivered


@dataclass(slots=True)
class _Waiting:
    topic: str
    body: bytes
    pairs: tuple[tuple[str, str], ...]
    redelivered: bool
    ack_id: str | None
    retain: bool
    identifier: int | None


class Outbound:
    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.version = p.MQTT_311
        self.window = SEND_WINDOW
        self.filters: dict[str, Subscription] = {}  # by core sub id
        self._in_flight: dict[int, str | None] = {}  # packet id -> the core's ack id (a persistent session's)
        self._waiting: deque[_Waiting] = deque()
        self._waiting_bytes = 0
        self._packet_ids = itertools.cycle(range(1, 0x10000))
        self.acks: list[Command] = []  # owed to the core: the shell proposes them (`take_acks`)
        self.origin: str | None = None  # what marks the client's own publications (`ORIGIN`), if any

    def take_acks(self) -> list[Command]:
        acks, self.acks = self.acks, []
        return acks

    def deliver(self, effect: Deliver, body: bytes, now: int) -> bytes | None:
        """The PUBLISH of a delivery: None where the subscription is gone, MQTT's `$` rule keeps
        the message from it, or the client's window is full (the message waits here). Raises
        `MqttError` (quota exceeded) when more than `MAX_WAITING_BYTES` wait."""
        subscription = self.filters.get(effect.sub_id)
        topic = topic_of(effect.destination) if effect.destination.startswith(TOPIC_PREFIX) \
            else topic_of(effect.message.destination)  # a shared subscription's: its queue's (raftmq.core.shares)
        hidden = topic is not None and topic.startswith("$") and subscription is not None \
            and dollar_excluded(subscription.topic_filter)
        if subscription is None or topic is None or hidden:
            self._settle_now(effect.ack_id, now)
            return None
        pairs = pairs_of(effect.message.headers)
        if subscription.no_local and self.origin is not None and (ORIGIN, self.origin) in pairs:
            self._settle_now(effect.ack_id, now)  # MQTT 5's no-local: the client's own
            return None
        published = next((int(v) for n, v in pairs if n == QOS_HEADER and v in ("0", "1", "2")), None)
        if published is None:  # a STOMP message: at least once where it was sent persistent
            published = 1 if effect.message.persistent else 0
        qos = min(subscription.qos, published)
        retain = _retain_flag(pairs, subscription.retain_as_published)
        if qos == 0:
            self._settle_now(effect.ack_id, now)  # at most once: nothing waits for the client's word
            return self._publish_packet(topic, body, 0, None, pairs, effect.redelivered, retain,
                                        subscription.identifier, now)
        if len(self._in_flight) >= self.window or self._waiting:
            self._waiting.append(_Waiting(topic, body, pairs, effect.redelivered, effect.ack_id, retain,
                                          subscription.identifier))
            self._waiting_bytes += len(body)
            if self._waiting_bytes > MAX_WAITING_BYTES:
                raise MqttError(r.QUOTA_EXCEEDED, "quota exceeded",
                                f"{self._waiting_bytes} bytes wait for a client that does not acknowledge them")
            return None
        return self._send_qos_1(topic, body, pairs, effect.redelivered, effect.ack_id, retain,
                                subscription.identifier, now)

    def _settle_now(self, ack_id: str | None, now: int) -> None:
        if ack_id is not None:  # a persistent session's QoS 1 subscription: the core waits for it
            self.acks.append(Ack(self.session_id, now, ack_id=ack_id))

    def _send_qos_1(self, topic: str, body: bytes, pairs: tuple[tuple[str, str], ...], redelivered: bool,
                    ack_id: str | None, retain: bool, identifier: int | None, now: int) -> bytes:
        packet_id = self._next_packet_id()
        self._in_flight[packet_id] = ack_id
        return self._publish_packet(topic, body, 1, packet_id, pairs, redelivered, retain, identifier, now)

    def acknowledged(self, packet_id: int, now: int) -> list[bytes]:
        """The client's PUBACK (an unknown id is ignored: a PUBACK sent twice): the core's Ack
        where it waits for one, and what now fits in the window."""
        if packet_id not in self._in_flight:
            return []
        self._settle_now(self._in_flight.pop(packet_id), now)
        out = []
        while self._waiting and len(self._in_flight) < self.window:
            waiting = self._waiting.popleft()
            self._waiting_bytes -= len(waiting.body)
            out.append(self._send_qos_1(waiting.topic, waiting.body, waiting.pairs, waiting.redelivered,
                                        waiting.ack_id, waiting.retain, waiting.identifier, now))
        return out

    def _publish_packet(self, topic: str, body: bytes, qos: int, packet_id: int | None,
                        pairs: tuple[tuple[str, str], ...], redelivered: bool, retain: bool,
                        identifier: int | None, now: int) -> bytes:
        properties = {}
        if self.version == MQTT_5:
            properties = properties_of(pairs, now)
            if identifier is not None:
                properties["subscription_identifier"] = [identifier]
        return encode(p.Publish(topic, body, qos, retain, redelivered and qos > 0, packet_id, properties),
                      self.version)

    def _next_packet_id(self) -> int:
        for _ in range(0x10000):
            candidate = next(self._packet_ids)
            if candidate not in self._in_flight:
                return candidate
        raise MqttError(r.RECEIVE_MAXIMUM_EXCEEDED, "receive maximum exceeded", "65,535 deliveries in flight")


def _retain_flag(pairs: tuple[tuple[str, str], ...], as_published: bool) -> bool:
    """A PUBLISH's retain flag: set on a retained message sent because the subscription is new
    (the core's recovered copy), and on a live one only where the subscription keeps it (MQTT 5)."""
    for name, value in pairs:
        if name == RETAINED_MARK:
            return True
        if name == RETAIN and as_published:
            return value == "true"
    return False
