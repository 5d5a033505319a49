"""One MQTT client's session, sans-I/O: bytes and committed effects in, decisions out
(`raftmq.server.mqtt.connection` is its shell). MQTT 3.1.1 and 5.0 over the same core commands a
STOMP session proposes, so both protocols share one address space (raftmq.protocol.mqtt.topics)
and every promise: a PUBACK, like a RECEIPT, is written once a majority has the message on disk.

What it serves, and where each part lives, is docs/mqtt.md's: clean and kept sessions (kept in the
core as durable subscriptions: raftmq.server.mqtt.kept), a second connection taking a client id's
session over, QoS 0, 1 and 2 both ways (QoS 2 publications by a key the core keeps from PUBLISH
to PUBREL: raftmq.core.exactly_once; deliveries: raftmq.server.mqtt.outbound), retained messages
(raftmq.core.retained), wills (raftmq.core.wills), shared subscriptions (raftmq.core.shares),
MQTT 5's properties and subscription options, logins and the ACL as for STOMP.
"""

from __future__ import annotations

from typing import Any

from raftmq.core.commands import (
    Command,
    Connect,
    Disconnect,
    Expiry,
    Hold,
    Release,
    Send,
    Share,
    Subscribe,
    Unsubscribe,
    Will,
)
from raftmq.core.effects import Deliver
from raftmq.core.exactly_once import HELD_SESSION, ONCE
from raftmq.errors import MqttError, ProtocolError
from raftmq.protocol.limits import Limits
from raftmq.protocol.mqtt import packets as p
from raftmq.protocol.mqtt import reasons as r
from raftmq.protocol.mqtt.codec import MqttParser, encode
from raftmq.protocol.mqtt.packets import MQTT_5, MQTT_311
from raftmq.protocol.mqtt.topics import destination_of
from raftmq.security import Principal
from raftmq.server.mqtt.aliases import TOPIC_ALIAS_MAXIMUM, TopicAliases
from raftmq.server.mqtt.decisions import CheckLogin, Close, Decision, Propose, Write
from raftmq.server.mqtt.headers import ORIGIN, block_of_publish, origin_of
from raftmq.server.mqtt.kept import Kept, prefix_of
from raftmq.server.mqtt.outbound import SEND_WINDOW, Outbound
from raftmq.server.mqtt.subscriptions import MAX_QOS, Subscriptions

MAX_PACKET_BYTES = Limits().max_frame_bytes  # as large as a STOMP frame may be, unless [limits] says otherwise
NEVER = 0xFFFFFFFF  # MQTT 5's session expiry interval that means "kept until the client ends it"
MAX_KEEP_ALIVE = 600  # s: an MQTT 5 client asking for none, or for more, is told this (server keep-alive)




class MqttSession:
    """One connection's MQTT state: version, client id, subscriptions, deliveries in flight."""

    def __init__(self, session_id: str, authorize: Any = None, max_packet_bytes: int = MAX_PACKET_BYTES) -> None:
        self.session_id = session_id
        self.parser = MqttParser(max_packet_size=max_packet_bytes)  # ([limits] max_frame_bytes)
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
        self.clean_start = True
        self.persistent = False  # its subscriptions outlive the connection (durable in the core)
        self.expiry = 0  # s its state outlives the connection (MQTT 5's session expiry; NEVER: until it ends it)
        self.out = Outbound(session_id)  # deliveries: PUBLISH packets, the window
        self.subs = Subscriptions(self, self.out)  # the topic filters and their core subscriptions
        self._held: list[p.Packet] = []  # packets behind the CONNECT, until it commits
        self._held_error: MqttError | None = None
        self._will: Will | None = None  # the CONNECT's, proposed with the Connect (raftmq.core.wills)
        self._aliases = TopicAliases()  # MQTT 5: the client's topic aliases

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
            decisions.extend(Write(data) for data in self.out.acknowledged(packet.packet_id, now))
            commands.extend(self.out.take_acks())
        elif kind is p.PubRec:  # QoS 2 deliveries (raftmq.server.mqtt.outbound)
            assert isinstance(packet, p.PubRec)
            release = self.out.received(packet.packet_id, now)  # None: once the core has it
            if release is not None:
                decisions.append(Write(release))
            commands.extend(self.out.take_acks())
        elif kind is p.PubComp:
            assert isinstance(packet, p.PubComp)
            decisions.extend(Write(data) for data in self.out.completed(packet.packet_id, now))
            commands.extend(self.out.take_acks())
        elif kind is p.PubRel:
            assert isinstance(packet, p.PubRel)
            self._released(packet, now, commands)
        elif kind is p.Subscribe:
            assert isinstance(packet, p.Subscribe)
            self.subs.subscribe(packet, now, decisions, commands)
        elif kind is p.Unsubscribe:
            assert isinstance(packet, p.Unsubscribe)
            self.subs.unsubscribe(packet, now, decisions, commands)
        elif kind is p.PingReq:
            decisions.append(Write(encode(p.PingResp(), self._version)))
        elif kind is p.Disconnect:
            assert isinstance(packet, p.Disconnect)
            expiry = packet.properties.get("session_expiry_interval")
            if expiry is not None and expiry != self.expiry:  # MQTT 5: how long it lives, said again
                if not self.expiry:
                    raise MqttError(r.PROTOCOL_ERROR, "protocol error", "a session expiry on a session not kept")
                self.expiry, self.persistent = expiry, expiry > 0
                commands.append(self._lifetime(now))
            if self._will is not None and packet.reason_code != r.DISCONNECT_WITH_WILL:
                commands.append(Will(self.session_id, "", "", b"", now))  # a goodbye: the will is not published
            commands.extend(self.ending(now))
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
        self.version = self.out.version = connect.version
        self.keep_alive = connect.keep_alive
        five = connect.version == MQTT_5
        properties: p.Properties = {"maximum_packet_size": self.parser.max_packet_size} if five else {}
        if connect.will is not None:
            refused = self._take_will(connect.will, five)
            if refused:
                return refused
        self.clean_start = connect.clean_start
        client_id = connect.client_id
        if not client_id:
            if not five and not connect.clean_start:  # 3.1.1: a session to keep needs a name
                return self._connack_refused(r.CLIENT_IDENTIFIER_NOT_VALID,
                                             "a persistent session (clean session 0) needs a client id")
            client_id = f"raftmq-{self.session_id}"
            if five:
                properties["assigned_client_identifier"] = client_id
        if five:
            self.expiry = connect.properties.get("session_expiry_interval", 0)
            self.persistent = self.expiry > 0
            self.out.window = min(SEND_WINDOW, connect.properties.get("receive_maximum", SEND_WINDOW))
            properties["topic_alias_maximum"] = TOPIC_ALIAS_MAXIMUM
            if not 0 < self.keep_alive <= MAX_KEEP_ALIVE:  # none, or longer than a dead peer may linger
                self.keep_alive = properties["server_keep_alive"] = MAX_KEEP_ALIVE
        else:
            self.persistent = not connect.clean_start
            self.expiry = NEVER if self.persistent else 0
        self.client_id = client_id
        self.out.origin, self.out.keys = origin_of(client_id), prefix_of(client_id)
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
        assert self._connect is not None
        commands: list[Command] = [Connect(self.session_id, now_ms, self._connect.username, self.client_id)]
        will = self._will
        if will is not None:
            send = Send(self.session_id, will.destination, will.headers, will.body, now_ms)
            if not self.allowed(send, None, []):
                return self._connack_refused(r.NOT_AUTHORIZED, f"may not publish the will to {will.destination}")
            commands.append(Will(self.session_id, will.destination, will.headers, will.body, now_ms, will.delay_ms))
        commands.append(self._lifetime(now_ms))  # (it also stops an earlier session's state expiring)
        self.connect_proposed = True
        return [Propose(commands)]

    def _lifetime(self, now: int) -> Expiry:
        """How long the client's kept state lives once this session ends (raftmq.core.lifetimes)."""
        after = -1 if self.expiry == NEVER else 1000 * self.expiry
        return Expiry(self.session_id, prefix_of(self.client_id or ""), now, after)

    def _take_will(self, will: p.Will, five: bool) -> list[Decision]:
        """The CONNECT's will, kept to propose with the Connect; a refusal if it cannot be."""
        try:
            destination = destination_of(will.topic)
        except MqttError as bad:
            return self._connack_refused(bad.reason_code, bad.detail or bad.message)
        qos = min(will.qos, MAX_QOS)
        headers = block_of_publish(qos, will.retain, will.payload, will.properties, None)
        delay_ms = 1000 * will.properties.get("will_delay_interval", 0)
        self._will = Will(self.session_id, destination, headers, will.payload, 0, delay_ms)
        return []

    def connect_committed(self, now_ms: int, kept: list[Kept] | None = None, keys: bool = False,
                          releasing: list[int] | None = None) -> list[Decision]:
        """The CONNACK, once the core has the session; then what came behind the CONNECT.
        `kept`: what the core keeps of the client id's session (raftmq.server.mqtt.kept), read
        once the Connect applied, and `keys`: whether it keeps QoS 2 keys of the client's. A
        clean start drops them, else the session resumes (MQTT's "session present": a client
        told otherwise must discard its session state, its QoS 2 flows under way with it). A
        connection that still holds the subscriptions elsewhere (an earlier leader's, not yet
        swept) is ended first."""
        self.connected = True
        kept = kept or []
        commands: list[Command] = [Disconnect(holder, now_ms) for holder in
                                   sorted({k.holder for k in kept if k.holder and k.holder != self.session_id})]
        if self.clean_start and self.client_id is not None:  # QoS 2 keys an earlier kept session left
            commands.append(Release(self.session_id, prefix_of(self.client_id), now_ms, every=True))
        if self.persistent and self.client_id is not None:  # a later connection finds the session there
            commands.append(Hold(self.session_id, f"{prefix_of(self.client_id)}{HELD_SESSION}", now_ms))
        commands += self.subs.resume(kept, self.clean_start, now_ms)
        present = (bool(kept) or keys) and not self.clean_start
        connack = Write(encode(p.Connack(r.SUCCESS, present, self._connack_properties), self._version))
        held, self._held = self._held, []
        error, self._held_error = self._held_error, None
        pubrels = [] if self.clean_start else [Write(data) for data in self.out.releasing(releasing or [])]
        return [connack, *pubrels, *([Propose(commands)] if commands else []), *self._handle(held, error, now_ms)]

    def _connack_refused(self, reason: int, detail: str) -> list[Decision]:
        self.closed = True
        code = reason if self.version == MQTT_5 else r.connack_code_311(reason)
        properties = {"reason_string": detail} if self.version == MQTT_5 else {}
        return [Write(encode(p.Connack(code, False, properties), self._version)), Close(r.name(reason), detail)]

    # -- PUBLISH in ----------------------------------------------------------------------------

    def _publish(self, packet: p.Publish, now: int, decisions: list[Decision], commands: list[Command]) -> None:
        if "topic_alias" in packet.properties:  # MQTT 5: a number standing for the topic from now on
            packet.topic = self._aliases.topic(packet.properties["topic_alias"], packet.topic)
        headers = self._headers(packet, now)
        receipt = None
        if packet.qos == 2:  # exactly once: stored once while its key is kept (raftmq.core.exactly_once)
            headers += f"{ONCE}:{self._once_key(packet.packet_id or 0)}\n"
            receipt = f"q{packet.packet_id}"  # answered with PUBREC
        elif packet.qos == 1:
            receipt = f"p{packet.packet_id}"  # answered with PUBACK
        send = Send(self.session_id, destination_of(packet.topic), headers, packet.payload, now, None, receipt)
        if not self.allowed(send, packet, decisions):
            return
        commands.append(send)

    def _once_key(self, packet_id: int) -> str:
        return f"{prefix_of(self.client_id or '')}{packet_id}"

    def _released(self, packet: p.PubRel, now: int, commands: list[Command]) -> None:
        """QoS 2's PUBREL: the key may go; PUBCOMP once that commits."""
        commands.append(Release(self.session_id, self._once_key(packet.packet_id), now, receipt=f"c{packet.packet_id}"))

    def _headers(self, packet: p.Publish, now: int) -> str:
        headers = block_of_publish(packet.qos, packet.retain, packet.payload, packet.properties, now)
        if self.subs.no_local():
            return f"{headers}{ORIGIN}:{self.out.origin}\n"  # marked while it has a no-local subscription
        return headers

    def allowed(self, command: Send | Subscribe | Share, packet: p.Publish | None, decisions: list[Decision]) -> bool:
        if self._authorize is None:
            return True
        try:
            self._authorize(self.principal, command)
        except ProtocolError as refused:
            if packet is None:
                return False
            if self.version == MQTT_5 and packet.qos:
                assert packet.packet_id is not None
                answer = p.PubAck if packet.qos == 1 else p.PubRec
                decisions.append(Write(encode(answer(packet.packet_id, r.NOT_AUTHORIZED,
                                                     {"reason_string": refused.detail}), MQTT_5)))
                return False
            if packet.qos == 0:
                return False  # at most once: nothing to tell
            raise MqttError(r.NOT_AUTHORIZED, "not authorized", refused.detail) from None
        return True

    # -- effects out ---------------------------------------------------------------------------

    def receipt(self, receipt_id: str) -> bytes | None:
        """The packet a committed receipt answers: PUBACK, PUBREC, PUBCOMP, SUBACK or UNSUBACK."""
        kind, number = receipt_id[:1], receipt_id[1:]
        if kind == "p":  # PUBACK, success: the same four bytes in 3.1.1 and 5
            packet_id = int(number)
            return bytes((0x40, 2, packet_id >> 8, packet_id & 0xFF))
        if kind == "q":
            return encode(p.PubRec(int(number)), self._version)
        if kind == "r":  # a QoS 2 delivery's PUBREC and its key are on a majority's disk
            return self.out.release_packet(int(number))
        if kind == "c":
            return encode(p.PubComp(int(number)), self._version)
        if kind == "s" and (suback := self.subs.subacks.pop(receipt_id, None)) is not None:
            return encode(suback, self._version)
        if kind == "u" and (unsuback := self.subs.unsubacks.pop(receipt_id, None)) is not None:
            return encode(unsuback, self._version)
        return None

    def deliver(self, effect: Deliver, body: bytes, now_ms: int) -> bytes | None:
        """A delivery's PUBLISH (raftmq.server.mqtt.outbound): None where none goes out now.
        What the core is owed for it (a QoS 0 copy of a QoS 1 subscription's message) waits in
        `out.take_acks()`."""
        return self.out.deliver(effect, body, now_ms)

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
            decisions.append(Propose(self.ending(now_ms)))
        return [*decisions, Close(error.message, error.detail)]

    def ending(self, now_ms: int) -> list[Command]:
        """The session's end in the core: a persistent session's subscriptions go inactive and
        keep collecting; any other's end (durable ones it resumed are dropped with it)."""
        self.disconnect_proposed = True
        commands: list[Command] = []
        if not self.persistent:
            commands += [Unsubscribe(self.session_id, sub_id, now_ms, drop_durable=True)
                         for sub_id in sorted(self.subs.durable)]
            self.subs.durable.clear()
            if self.client_id is not None:  # its QoS 2 publications not released: forgotten with it
                commands.append(Release(self.session_id, prefix_of(self.client_id), now_ms, every=True))
        return [*commands, Disconnect(self.session_id, now_ms)]

    def failed(self, reason_code: int, detail: str) -> bytes | None:
        """The server ends the session (the core refused a command, the node stops): MQTT 5's
        DISCONNECT to write first, if any."""
        self.closed = True
        if self.version != MQTT_5 or not self.connected:
            return None
        return encode(p.Disconnect(reason_code, {"reason_string": detail[:200]} if detail else {}), MQTT_5)
