"""One MQTT client's session, sans-I/O: bytes and committed effects in, decisions out
(`raftmq.server.mqtt.connection` is its shell). MQTT 3.1.1 and 5.0 over the same core commands a
STOMP session proposes, so both protocols share one address space (raftmq.protocol.mqtt.topics)
and every promise: a PUBACK, like a RECEIPT, is written once a majority has the message on disk.

What it serves now: clean sessions; QoS 0 and 1 both ways (a subscription asking for QoS 2 is
granted 1, and an MQTT 5 CONNACK says `maximum_qos` 1); topic filters with MQTT's whole syntax;
MQTT 5's properties carried as headers (`HEADERS`); logins and the ACL as for STOMP. A clean
session's messages end with it, so its subscriptions take them from the core at once (ack mode
auto: no acknowledgement goes through the log); the session itself keeps QoS 1 to the client's
window (`SEND_WINDOW`, or its receive maximum) and holds the rest, up to `MAX_WAITING_BYTES`. Refused with
MQTT's reasons, until they are built: persistent sessions (3.1.1 clean session 0; an MQTT 5
session expiry is answered with 0), QoS 2 publications, retained messages, wills and shared
subscriptions.
"""

from __future__ import annotations

import itertools
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from raftmq.core.commands import ACK_AUTO, Command, Connect, Disconnect, Noop, Send, Subscribe, Unsubscribe
from raftmq.core.effects import Deliver
from raftmq.errors import MqttError, ProtocolError
from raftmq.protocol.header_block import block_of, pairs_of
from raftmq.protocol.mqtt import packets as p
from raftmq.protocol.mqtt import reasons as r
from raftmq.protocol.mqtt.codec import MqttParser, encode
from raftmq.protocol.mqtt.packets import MQTT_5, MQTT_311
from raftmq.protocol.mqtt.topics import destination_of, destinations_of, dollar_excluded, shared, topic_of
from raftmq.security import Principal

QOS_HEADER = "mqtt-qos"  # the QoS an MQTT message was published with
# MQTT 5 properties and the STOMP headers that carry them (docs/mqtt.md); user properties are
# headers of their own names.
HEADERS = {"content_type": "content-type", "response_topic": "reply-to", "correlation_data": "correlation-id"}
PROPERTIES = {header: name for name, header in HEADERS.items()}  # the other way, for deliveries
# QoS 1 deliveries a client may have unacknowledged (less where an MQTT 5 client's receive maximum
# says so), and what may wait for room before the session ends as a slow consumer.
SEND_WINDOW = 1_000
MAX_WAITING_BYTES = 64 * 2**20
MAX_QOS = 1


@dataclass(slots=True)
class Propose:
    commands: list[Command]


@dataclass(slots=True)
class Write:
    data: bytes


@dataclass(slots=True)
class CheckLogin:
    username: str | None
    password: str | None


@dataclass(slots=True)
class Close:
    """Close the connection (after writing what was decided before, a DISCONNECT or CONNACK among it)."""

    reason: str
    detail: str = ""


Decision = Propose | Write | CheckLogin | Close


@dataclass(slots=True)
class _Subscription:
    topic_filter: str
    qos: int
    sub_ids: list[str] = field(default_factory=list)


class MqttSession:
    """One connection's MQTT state: version, client id, subscriptions, deliveries in flight."""

    def __init__(self, session_id: str, authorize: Any = None) -> None:
        self.session_id = session_id
        self.parser = MqttParser()
        self.version: int | None = None
        self.client_id: str | None = None
        self.keep_alive = 0
        self.connected = False  # the core committed the Connect
        self.closed = False
        self.connect_proposed = False  # its Connect went to the core (it may not have committed yet)
        self.disconnect_proposed = False  # the session's end is on its way to the core
        self.principal: Principal | None = None
        self._authorize = authorize  # (principal, command) -> None, or raises ProtocolError (the ACL)
        self._connect: p.Connect | None = None
        self._connack_properties: p.Properties = {}
        self._subscriptions: dict[str, _Subscription] = {}  # by topic filter
        self._filters: dict[str, _Subscription] = {}  # by core sub id
        self._subacks: dict[str, p.SubAck] = {}  # by receipt: answered once the Subscribes commit
        self._unsubacks: dict[str, p.UnsubAck] = {}
        # QoS 1 deliveries: the packet ids the client has not acknowledged, and what waits for room.
        self._in_flight: set[int] = set()
        self._waiting: deque[tuple[str, bytes, tuple[tuple[str, str], ...], bool]] = deque()
        self._waiting_bytes = 0
        self._packet_ids = itertools.cycle(range(1, 0x10000))
        self._sub_numbers = itertools.count(1)
        self._send_window = SEND_WINDOW
        self._held: list[p.Packet] = []  # packets behind the CONNECT, until it commits
        self._held_error: MqttError | None = None

    # -- bytes in ------------------------------------------------------------------------------

    def receive(self, data: bytes, now_ms: int) -> list[Decision]:
        if self.closed:
            return []
        error: MqttError | None = None
        try:
            packets = self.parser.feed(data)
        except MqttError as bad:
            packets, error = list(bad.packets), bad  # type: ignore[arg-type]
        return self._handle(packets, error, now_ms)

    def _handle(self, packets: list[p.Packet], error: MqttError | None, now_ms: int) -> list[Decision]:
        """Each packet, then the parser's error; what comes behind a CONNECT waits for its commit."""
        decisions: list[Decision] = []
        commands: list[Command] = []
        for index, packet in enumerate(packets):
            if self._connect is not None and not self.connected:
                self._held += packets[index:]
                break
            try:
                self._packet(packet, now_ms, decisions, commands)
            except MqttError as refused:
                error = refused
                break
            if self.closed:
                return decisions + ([Propose(commands)] if commands else [])
        if error is not None and self._connect is not None and not self.connected and not self.closed:
            self._held_error = self._held_error or error  # said after the CONNACK
            error = None
        if commands:
            decisions.append(Propose(commands))
        if error is not None and not self.closed:
            decisions += self._refuse(error, now_ms)
        return decisions

    def _packet(self, packet: p.Packet, now: int, decisions: list[Decision], commands: list[Command]) -> None:
        kind = type(packet)
        if self._connect is None:
            if kind is not p.Connect:
                raise MqttError(r.PROTOCOL_ERROR, "protocol error", "the first packet must be CONNECT")
            assert isinstance(packet, p.Connect)
            decisions.extend(self._on_connect(packet))
            return
        if kind is p.Publish:
            assert isinstance(packet, p.Publish)
            self._publish(packet, now, decisions, commands)
        elif kind is p.PubAck:
            assert isinstance(packet, p.PubAck)
            self._acknowledged(packet.packet_id, decisions)  # an unknown id is ignored (a PUBACK sent twice)
        elif kind is p.Subscribe:
            assert isinstance(packet, p.Subscribe)
            self._subscribe(packet, now, decisions, commands)
        elif kind is p.Unsubscribe:
            assert isinstance(packet, p.Unsubscribe)
            self._unsubscribe(packet, now, decisions, commands)
        elif kind is p.PingReq:
            decisions.append(Write(encode(p.PingResp(), self._version)))
        elif kind is p.Disconnect:
            commands.append(Disconnect(self.session_id, now))
            self.disconnect_proposed = True
            self.closed = True
            decisions.append(Close("client disconnected"))
        elif kind is p.Connect:
            raise MqttError(r.PROTOCOL_ERROR, "protocol error", "a second CONNECT")
        else:
            raise MqttError(r.PROTOCOL_ERROR, "protocol error", f"{kind.__name__} is not supported yet")

    @property
    def _version(self) -> int:
        return self.version or MQTT_311

    # -- CONNECT -------------------------------------------------------------------------------

    def _on_connect(self, connect: p.Connect) -> list[Decision]:
        self._connect = connect
        self.version = connect.version
        self.keep_alive = connect.keep_alive
        five = connect.version == MQTT_5
        properties: p.Properties = {"maximum_qos": MAX_QOS, "retain_available": 0,
                                    "shared_subscription_available": 0} if five else {}
        if not connect.clean_start and not five:
            return self._connack_refused(r.SERVER_UNAVAILABLE,
                                         "persistent sessions (clean session 0) are not served yet")
        if connect.will is not None:
            return self._connack_refused(r.IMPLEMENTATION_SPECIFIC_ERROR if five else r.SERVER_UNAVAILABLE,
                                         "will messages are not served yet")
        client_id = connect.client_id
        if not client_id:
            client_id = f"raftmq-{self.session_id}"
            if five:
                properties["assigned_client_identifier"] = client_id
        if five:
            if connect.properties.get("session_expiry_interval"):
                properties["session_expiry_interval"] = 0  # the session ends with the connection
            self._send_window = min(SEND_WINDOW, connect.properties.get("receive_maximum", SEND_WINDOW))
        self.client_id = client_id
        self._connack_properties = properties
        password = None if connect.password is None else connect.password.decode("utf-8", "replace")
        return [CheckLogin(connect.username, password)]

    def login_checked(self, principal: Principal | None, now_ms: int) -> list[Decision]:
        """The shell's answer to CheckLogin: propose the session's Connect, or refuse it."""
        if self.closed:
            return []
        if principal is None:
            return self._connack_refused(r.BAD_USER_NAME_OR_PASSWORD, "bad user name or password")
        self.principal = principal
        self.connect_proposed = True
        assert self._connect is not None
        return [Propose([Connect(self.session_id, now_ms, self._connect.username, self.client_id)])]

    def connect_committed(self, now_ms: int) -> list[Decision]:
        """The CONNACK, once the core has the session; then what came behind the CONNECT."""
        self.connected = True
        connack = Write(encode(p.Connack(r.SUCCESS, False, self._connack_properties), self._version))
        held, self._held = self._held, []
        error, self._held_error = self._held_error, None
        return [connack, *self._handle(held, error, now_ms)]

    def _connack_refused(self, reason: int, detail: str) -> list[Decision]:
        self.closed = True
        code = reason if self.version == MQTT_5 else r.connack_code_311(reason)
        properties = {"reason_string": detail} if self.version == MQTT_5 else {}
        return [Write(encode(p.Connack(code, False, properties), self._version)), Close(r.name(reason), detail)]

    # -- PUBLISH in ----------------------------------------------------------------------------

    def _publish(self, packet: p.Publish, now: int, decisions: list[Decision], commands: list[Command]) -> None:
        if packet.qos > MAX_QOS:
            raise MqttError(r.QOS_NOT_SUPPORTED, "QoS not supported", "QoS 2 publications are not served yet")
        if packet.retain and self.version == MQTT_5:
            raise MqttError(r.RETAIN_NOT_SUPPORTED, "retain not supported", "retained messages are not served yet")
        if "topic_alias" in packet.properties:
            raise MqttError(r.TOPIC_ALIAS_INVALID, "topic alias invalid", "this server allows no topic alias")
        send = Send(self.session_id, destination_of(packet.topic), self._headers(packet, now), packet.payload, now,
                    None, f"p{packet.packet_id}" if packet.qos else None)
        if not self._allowed(send, packet, decisions):
            return
        commands.append(send)

    def _headers(self, packet: p.Publish, now: int) -> str:
        pairs = [(QOS_HEADER, str(packet.qos)), ("persistent", "true" if packet.qos else "false")]
        properties = packet.properties
        if properties:
            for name, header in HEADERS.items():
                if name in properties:
                    value = properties[name]
                    if name == "response_topic":
                        value = destination_of(value)
                    elif name == "correlation_data":
                        value = value.decode("utf-8", "replace")
                    pairs.append((header, value))
            if "message_expiry_interval" in properties:
                pairs.append(("expires", str(now + 1000 * properties["message_expiry_interval"])))
            pairs.extend(properties.get("user_property", ()))
        return block_of(pairs)

    def _allowed(self, command: Send | Subscribe, packet: p.Publish | None, decisions: list[Decision]) -> bool:
        if self._authorize is None:
            return True
        try:
            self._authorize(self.principal, command)
        except ProtocolError as refused:
            if packet is None:
                return False
            if self.version == MQTT_5 and packet.qos == 1:
                assert packet.packet_id is not None
                decisions.append(Write(encode(p.PubAck(packet.packet_id, r.NOT_AUTHORIZED,
                                                       {"reason_string": refused.detail}), MQTT_5)))
                return False
            if packet.qos == 0:
                return False  # at most once: nothing to tell
            raise MqttError(r.NOT_AUTHORIZED, "not authorized", refused.detail) from None
        return True

    # -- SUBSCRIBE, UNSUBSCRIBE ----------------------------------------------------------------

    def _subscribe(self, packet: p.Subscribe, now: int, decisions: list[Decision], commands: list[Command]) -> None:
        five = self.version == MQTT_5
        codes: list[int] = []
        subscribes: list[Subscribe] = []
        for wanted in packet.subscriptions:
            try:
                share, topic_filter = shared(wanted.topic_filter)
                if share is not None:
                    raise MqttError(r.SHARED_SUBSCRIPTIONS_NOT_SUPPORTED, "shared subscriptions not supported")
                destinations = destinations_of(topic_filter)
            except MqttError as refused:
                codes.append(refused.reason_code if five else r.SUBACK_FAILURE_311)
                continue
            qos = min(wanted.qos, MAX_QOS)
            old = self._subscriptions.pop(topic_filter, None)  # the same filter again replaces it
            if old is not None:
                commands.extend(self._unsubscribe_commands(old, now))
            subscription = _Subscription(topic_filter, qos)
            made = []
            for destination in destinations:
                sub_id = f"m{next(self._sub_numbers)}"
                made.append(Subscribe(self.session_id, sub_id, destination, now, ACK_AUTO))
                subscription.sub_ids.append(sub_id)
            if not all(self._allowed(subscribe, None, decisions) for subscribe in made):
                codes.append(r.NOT_AUTHORIZED if five else r.SUBACK_FAILURE_311)
                continue
            self._subscriptions[topic_filter] = subscription
            for sub_id in subscription.sub_ids:
                self._filters[sub_id] = subscription
            subscribes += made
            codes.append(qos)
        suback = p.SubAck(packet.packet_id, codes)
        if not subscribes:
            decisions.append(Write(encode(suback, self._version)))
            return
        receipt = f"s{packet.packet_id}"
        last = subscribes[-1]
        subscribes[-1] = Subscribe(last.session, last.sub_id, last.destination, now, last.ack, None, last.prefetch,
                                   receipt=receipt)
        self._subacks[receipt] = suback
        commands.extend(subscribes)

    def _unsubscribe_commands(self, subscription: _Subscription, now: int) -> list[Command]:
        for sub_id in subscription.sub_ids:
            self._filters.pop(sub_id, None)
        return [Unsubscribe(self.session_id, sub_id, now) for sub_id in subscription.sub_ids]

    def _unsubscribe(self, packet: p.Unsubscribe, now: int, decisions: list[Decision], commands: list[Command]) -> None:
        codes = []
        for topic_filter in packet.topic_filters:
            subscription = self._subscriptions.pop(topic_filter, None)
            codes.append(r.SUCCESS if subscription is not None else r.NO_SUBSCRIPTION_EXISTED)
            if subscription is not None:
                commands.extend(self._unsubscribe_commands(subscription, now))
        receipt = f"u{packet.packet_id}"
        self._unsubacks[receipt] = p.UnsubAck(packet.packet_id, codes)
        commands.append(Noop(self.session_id, now, receipt))  # answered once what came before committed

    # -- effects out ---------------------------------------------------------------------------

    def receipt(self, receipt_id: str) -> bytes | None:
        """The packet a committed receipt answers: PUBACK, SUBACK or UNSUBACK."""
        kind, number = receipt_id[:1], receipt_id[1:]
        if kind == "p":
            return encode(p.PubAck(int(number)), self._version)
        if kind == "s" and (suback := self._subacks.pop(receipt_id, None)) is not None:
            return encode(suback, self._version)
        if kind == "u" and (unsuback := self._unsubacks.pop(receipt_id, None)) is not None:
            return encode(unsuback, self._version)
        return None

    def deliver(self, effect: Deliver, body: bytes) -> bytes | None:
        """The PUBLISH of a delivery: None where the subscription is gone, MQTT's `$` rule keeps
        the message from it, or the client's window is full (the message waits here). Raises
        `MqttError` (quota exceeded) when more than `MAX_WAITING_BYTES` wait."""
        subscription = self._filters.get(effect.sub_id)
        topic = topic_of(effect.destination)
        hidden = topic is not None and topic.startswith("$") and subscription is not None \
            and dollar_excluded(subscription.topic_filter)
        if subscription is None or topic is None or hidden:
            return None
        pairs = pairs_of(effect.message.headers)
        published = next((int(v) for n, v in pairs if n == QOS_HEADER and v in ("0", "1", "2")), None)
        if published is None:  # a STOMP message: at least once where it was sent persistent
            published = 1 if effect.message.persistent else 0
        qos = min(subscription.qos, published)
        if qos == 0:
            return self._publish_packet(topic, body, 0, None, pairs, effect.redelivered)
        if len(self._in_flight) >= self._send_window or self._waiting:
            self._waiting.append((topic, body, pairs, effect.redelivered))
            self._waiting_bytes += len(body)
            if self._waiting_bytes > MAX_WAITING_BYTES:
                raise MqttError(r.QUOTA_EXCEEDED, "quota exceeded",
                                f"{self._waiting_bytes} bytes wait for a client that does not acknowledge them")
            return None
        return self._send_qos_1(topic, body, pairs, effect.redelivered)

    def _send_qos_1(self, topic: str, body: bytes, pairs: tuple[tuple[str, str], ...], redelivered: bool) -> bytes:
        packet_id = self._next_packet_id()
        self._in_flight.add(packet_id)
        return self._publish_packet(topic, body, 1, packet_id, pairs, redelivered)

    def _acknowledged(self, packet_id: int, decisions: list[Decision]) -> None:
        """The client's PUBACK: its window has room for what waits."""
        self._in_flight.discard(packet_id)
        while self._waiting and len(self._in_flight) < self._send_window:
            topic, body, pairs, redelivered = self._waiting.popleft()
            self._waiting_bytes -= len(body)
            decisions.append(Write(self._send_qos_1(topic, body, pairs, redelivered)))

    def _publish_packet(self, topic: str, body: bytes, qos: int, packet_id: int | None,
                        pairs: tuple[tuple[str, str], ...], redelivered: bool) -> bytes:
        properties: p.Properties = {}
        if self.version == MQTT_5:
            users = []
            for name, value in pairs:
                if name in PROPERTIES:
                    prop = PROPERTIES[name]
                    if prop == "response_topic":
                        value = topic_of(value) or value
                    properties[prop] = value.encode() if prop == "correlation_data" else value
                elif name not in (QOS_HEADER, "persistent", "expires", "priority"):
                    users.append((name, value))
            if users:
                properties["user_property"] = users
        return encode(p.Publish(topic, body, qos, False, redelivered and qos > 0, packet_id, properties),
                      self._version)

    def _next_packet_id(self) -> int:
        for _ in range(0x10000):
            candidate = next(self._packet_ids)
            if candidate not in self._in_flight:
                return candidate
        raise MqttError(r.RECEIVE_MAXIMUM_EXCEEDED, "receive maximum exceeded", "65,535 deliveries in flight")

    # -- ending --------------------------------------------------------------------------------

    def _refuse(self, error: MqttError, now_ms: int) -> list[Decision]:
        """A packet broke the protocol: MQTT 5 says why in a DISCONNECT (or a CONNACK, before
        the session began); 3.1.1 closes the connection."""
        self.closed = True
        if not self.connected and self._connect is None:  # the CONNECT itself
            if error.reason_code == r.UNSUPPORTED_PROTOCOL_VERSION:
                connack = encode(p.Connack(r.UNACCEPTABLE_PROTOCOL_VERSION_311), MQTT_311)
                return [Write(connack), Close(error.message, error.detail)]
            return [Close(error.message, error.detail)]
        decisions: list[Decision] = []
        if self.version == MQTT_5:
            reason_string = {"reason_string": error.detail[:200]} if error.detail else {}
            decisions.append(Write(encode(p.Disconnect(error.reason_code, reason_string), MQTT_5)))
        if self.connect_proposed:
            self.disconnect_proposed = True
            decisions.append(Propose([Disconnect(self.session_id, now_ms)]))
        return [*decisions, Close(error.message, error.detail)]

    def failed(self, reason_code: int, detail: str) -> bytes | None:
        """The server ends the session (the core refused a command, the node stops): MQTT 5's
        DISCONNECT to write first, if any."""
        self.closed = True
        if self.version != MQTT_5 or not self.connected:
            return None
        return encode(p.Disconnect(reason_code, {"reason_string": detail[:200]} if detail else {}), MQTT_5)
