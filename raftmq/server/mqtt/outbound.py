"""What an MQTT session sends its client, sans-I/O: the core's deliveries as PUBLISH packets,
QoS 1 and 2 within the client's window (`SEND_WINDOW`, or its MQTT 5 receive maximum), what waits
for room (up to `MAX_WAITING_BYTES`), and what a persistent session's subscriptions owe the core
(raftmq.server.mqtt.session owns one `Outbound` and proposes what `take_acks` gives).

A clean session's subscriptions take their messages from the core at once (ack mode auto): its
window lives here only. A persistent session's QoS 1 and 2 subscriptions leave each message in
the core until the client has it (ack mode client-individual): QoS 1's PUBACK becomes the core's
Ack, so a message the client never acknowledged is delivered again (DUP) when the session
resumes, on this leader or the next.

QoS 2 to a persistent session, exactly once across reconnections and fail-overs: a message goes
out with a packet id derived from its message id (`packet_id_of`), so a PUBLISH sent again after
a reconnection carries the id the client knows it by (both paho and MQTT.js hand a QoS 2 message
to the application at the PUBREL, once per packet id). The client's PUBREC becomes the core's Ack
together with a key the core keeps (raftmq.core.exactly_once, `<client prefix>rel:<packet id>`),
and the PUBREL goes out once both are on a majority's disk; the PUBCOMP releases the key. A
session resumed while the core keeps such keys sends their PUBRELs again (`releasing`), never
the PUBLISH.
"""

from __future__ import annotations

import itertools
import zlib
from collections import deque
from dataclasses import dataclass, field

from raftmq.core.commands import Ack, Command, Hold, Release
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
    qos: int
    message_id: str


@dataclass(slots=True)
class _Flight:
    """A delivery the client has not finished: QoS 1 until its PUBACK, QoS 2 until its PUBREC
    (`released` False) and then until its PUBCOMP."""

    ack_id: str | None  # the core's, while it waits (a persistent session's)
    qos: int
    released: bool = False


def packet_id_of(message_id: str) -> int:
    """The packet id of a QoS 2 delivery to a persistent session: the same for the message
    whichever connection (and leader) sends it."""
    return zlib.crc32(message_id.encode()) % 0xFFFF + 1


class Outbound:
    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.version = p.MQTT_311
        self.window = SEND_WINDOW
        self.filters: dict[str, Subscription] = {}  # by core sub id
        self._in_flight: dict[int, _Flight] = {}  # by packet id
        self._waiting: deque[_Waiting] = deque()
        self._waiting_bytes = 0
        self._packet_ids = itertools.cycle(range(1, 0x10000))
        self.acks: list[Command] = []  # owed to the core: the shell proposes them (`take_acks`)
        self.origin: str | None = None  # what marks the client's own publications (`ORIGIN`), if any
        self.keys = ""  # the client's prefix of the core's keys (raftmq.server.mqtt.kept.prefix_of)

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
        pairs, published = _read(effect.message.headers)
        if subscription.no_local and self.origin is not None and (ORIGIN, self.origin) in pairs:
            self._settle_now(effect.ack_id, now)  # MQTT 5's no-local: the client's own
            return None
        if published < 0:  # a STOMP message: at least once where it was sent persistent
            published = 1 if effect.message.persistent else 0
        qos = min(subscription.qos, published)
        retain = _retain_flag(pairs, subscription.retain_as_published)
        if qos == 0:
            self._settle_now(effect.ack_id, now)  # at most once: nothing waits for the client's word
            return self._publish_packet(topic, body, 0, None, pairs, effect.redelivered, retain,
                                        subscription.identifier, now)
        waiting = _Waiting(topic, body, pairs, effect.redelivered, effect.ack_id, retain, subscription.identifier,
                           qos, effect.message.message_id)
        if len(self._in_flight) >= self.window or self._waiting or not self._fits(waiting):
            self._waiting.append(waiting)
            self._waiting_bytes += len(body)
            if self._waiting_bytes > MAX_WAITING_BYTES:
                raise MqttError(r.QUOTA_EXCEEDED, "quota exceeded",
                                f"{self._waiting_bytes} bytes wait for a client that does not acknowledge them")
            return None
        return self._send(waiting, now)

    def _settle_now(self, ack_id: str | None, now: int) -> None:
        if ack_id is not None:  # a persistent session's QoS 1 subscription: the core waits for it
            self.acks.append(Ack(self.session_id, now, ack_id=ack_id))

    def _fits(self, waiting: _Waiting) -> bool:
        """A QoS 2 delivery to a persistent session waits while its packet id is taken."""
        return not (waiting.qos == 2 and waiting.ack_id is not None
                    and packet_id_of(waiting.message_id) in self._in_flight)

    def _send(self, waiting: _Waiting, now: int) -> bytes:
        if waiting.qos == 2 and waiting.ack_id is not None:
            packet_id = packet_id_of(waiting.message_id)
        else:
            packet_id = self._next_packet_id()
        self._in_flight[packet_id] = _Flight(waiting.ack_id, waiting.qos)
        return self._publish_packet(waiting.topic, waiting.body, waiting.qos, packet_id, waiting.pairs,
                                    waiting.redelivered, waiting.retain, waiting.identifier, now)

    def acknowledged(self, packet_id: int, now: int) -> list[bytes]:
        """The client's PUBACK (an unknown id is ignored: a PUBACK sent twice): the core's Ack
        where it waits for one, and what now fits in the window."""
        flight = self._in_flight.get(packet_id)
        if flight is None or flight.qos != 1:
            return []
        del self._in_flight[packet_id]
        self._settle_now(flight.ack_id, now)
        return self._more(now)

    def received(self, packet_id: int, now: int) -> bytes | None:
        """The client's PUBREC of a QoS 2 delivery: its PUBREL now (a clean session's), or once
        the core has the Ack and the key (None: the shell answers the receipt `r<packet id>`
        with `release_packet`). One for an id not in flight is answered PUBREL at once, as MQTT
        asks (its PUBCOMP then finds nothing)."""
        flight = self._in_flight.get(packet_id)
        if flight is None or flight.qos != 2 or flight.released or flight.ack_id is None:
            if flight is not None and flight.qos == 2:
                flight.released = True
            return self.release_packet(packet_id)
        flight.released = True
        key = f"{self.keys}rel:{packet_id}"
        self.acks += [Hold(self.session_id, key, now),  # the receipt, behind both in one entry
                      Ack(self.session_id, now, ack_id=flight.ack_id, receipt=f"r{packet_id}")]
        flight.ack_id = key  # what the PUBCOMP releases
        return None

    def release_packet(self, packet_id: int) -> bytes:
        return encode(p.PubRel(packet_id), self.version)

    def completed(self, packet_id: int, now: int) -> list[bytes]:
        """The client's PUBCOMP: the QoS 2 delivery is done (its key released), and what now fits."""
        flight = self._in_flight.get(packet_id)
        if flight is None or flight.qos != 2 or not flight.released:
            return []
        del self._in_flight[packet_id]
        if flight.ack_id is not None:
            self.acks.append(Release(self.session_id, flight.ack_id, now))
        return self._more(now)

    def releasing(self, packet_ids: list[int]) -> list[bytes]:
        """A resumed session's QoS 2 deliveries the client had received (PUBREC) but not completed:
        their PUBRELs again."""
        for packet_id in packet_ids:
            self._in_flight[packet_id] = _Flight(f"{self.keys}rel:{packet_id}", 2, released=True)
        return [self.release_packet(packet_id) for packet_id in packet_ids]

    def _more(self, now: int) -> list[bytes]:
        out = []
        while self._waiting and len(self._in_flight) < self.window and self._fits(self._waiting[0]):
            waiting = self._waiting.popleft()
            self._waiting_bytes -= len(waiting.body)
            out.append(self._send(waiting, now))
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


_READ: dict[str, tuple[tuple[tuple[str, str], ...], int]] = {}  # a message's headers, read once


def _read(headers: str) -> tuple[tuple[tuple[str, str], ...], int]:
    """The header pairs of a delivery's message and the QoS it was published with (-1: not
    MQTT's). Most messages have the same few header blocks: each is read once (a thousand kept)."""
    read = _READ.get(headers)
    if read is None:
        pairs = pairs_of(headers)
        published = next((int(v) for n, v in pairs if n == QOS_HEADER and v in ("0", "1", "2")), -1)
        if len(_READ) >= 1000:
            _READ.clear()
        read = _READ[headers] = (pairs, published)
    return read


def _retain_flag(pairs: tuple[tuple[str, str], ...], as_published: bool) -> bool:
    """A PUBLISH's retain flag: set on a retained message sent because the subscription is new
    (the core's recovered copy), and on a live one only where the subscription keeps it (MQTT 5)."""
    for name, value in pairs:
        if name == RETAINED_MARK:
            return True
        if name == RETAIN and as_published:
            return value == "true"
    return False
