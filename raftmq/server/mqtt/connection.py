"""An MQTT client's connection: the asyncio shell around `MqttSession` (raftmq.server.mqtt.session).

It reads bytes into the session and carries out what it decides (proposals to the commit log, a
login check off the loop, writes, a close), and it is the node's `ClientConnection` for the
session: the replica hands it the committed effects (CONNACK on the Connect, PUBACK / SUBACK /
UNSUBACK on receipts, PUBLISH per delivery). Output is queued and handed to the socket once per
loop turn while the leader lease holds, as a STOMP connection's is (raftmq.server.stomp.output).
A follower relays a client's connection to the leader (raftmq.server.mqtt.relay), or refuses its
CONNECT ("server unavailable") where it cannot.

A second connection with a client id takes the session over: the first is ended (MQTT 5:
DISCONNECT "session taken over") and its end proposed before the second's Connect, so a
persistent session's subscriptions are free to resume once that Connect commits; what the core
keeps of the session is read then (`MqttEdge.kept`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Protocol, cast

import structlog

from raftmq.core.commands import Command
from raftmq.core.effects import Deliver
from raftmq.errors import MqttError
from raftmq.protocol.mqtt import packets as p
from raftmq.protocol.mqtt import reasons as r
from raftmq.protocol.mqtt.codec import MqttParser, encode
from raftmq.protocol.mqtt.packets import MQTT_5
from raftmq.security import Principal
from raftmq.server.mqtt.decisions import CheckLogin, Close, Decision, Propose, Write
from raftmq.server.mqtt.kept import Kept
from raftmq.server.mqtt.relay import MqttRelay
from raftmq.server.mqtt.session import MqttSession
from raftmq.server.seams.host import ConnectionHost
from raftmq.server.stomp.authorization import SessionAuthorization

log = structlog.get_logger("raftmq.server.mqtt")

RECHECK_SECONDS = 0.002  # queued output waits this long for the lease, then looks again
KEEP_ALIVE_GRACE = 1.5  # MQTT: a client silent for one and a half keep-alives is gone


class Edge(Protocol):
    """What a connection asks of the node's MQTT side (raftmq.server.mqtt.edge.MqttEdge)."""

    def kept(self, client_id: str) -> list[Kept]: ...
    def holds_keys(self, client_id: str) -> bool: ...
    def releasing(self, client_id: str) -> list[int]: ...
    def claim(self, client_id: str, connection: MqttConnection) -> MqttConnection | None: ...
    def release(self, client_id: str, connection: MqttConnection) -> None: ...
    def relay(self, client: asyncio.Transport, first: bytes, refuse: Callable[[bytes], None]) -> MqttRelay | None: ...


class MqttConnection(asyncio.Protocol):
    def __init__(self, host: ConnectionHost, session_id: str, edge: Edge) -> None:
        self.host = host
        self._session_id = session_id
        self._edge = edge
        authorization = SessionAuthorization(host)
        authorize = None
        if host.security.authorizing:
            def authorize(principal: Principal | None, command: Any) -> None:
                authorization.check(principal, command, [])
        self.mqtt = MqttSession(session_id, authorize, host.config.limits.max_frame_bytes)
        self._transport: asyncio.Transport | None = None
        self._peer = "?"
        self._out: list[bytes] = []
        self._flush_scheduled = False
        self._closing = False  # close once what is queued is written
        self._closed = False
        self._last_read = 0.0
        self._keep_alive: asyncio.TimerHandle | None = None
        self._pending = 0  # proposals not yet settled: reading pauses past max_pending_commands
        self._paused = False
        self._acks_scheduled = False  # a persistent session's acknowledgements, proposed once per loop turn
        self._refusal: str | None = None  # why its CONNECT is refused before it is read (too many connections)
        self._relay: MqttRelay | None = None  # a follower's: the connection piped to the leader
        self.transport_kind = "tcp"  # "tls", "ws" or "wss" (the management API lists it)

    # -- ClientConnection ----------------------------------------------------------------------

    @property
    def session_id(self) -> str:
        return self._session_id

    @property
    def peer(self) -> str:
        return self._peer

    @property
    def version(self) -> str:
        return f"mqtt-{p.VERSIONS.get(self.mqtt.version or 0, '?')}"

    @property
    def reading(self) -> bool:
        return not self.mqtt.closed and not self._closed

    @property
    def open_for_output(self) -> bool:
        return not self._closed

    @property
    def held_for_redirect(self) -> bool:
        return False

    def connect_committed(self) -> None:
        if self._keep_alive is not None:
            self._keep_alive.cancel()  # the CONNECT's deadline
        client_id = self.mqtt.client_id or ""
        self._execute(self.mqtt.connect_committed(self.host.clock.now_ms(), self._edge.kept(client_id),
                                                  self._edge.holds_keys(client_id), self._edge.releasing(client_id)))
        if self.mqtt.keep_alive:
            self._watch_keep_alive()

    def disconnect_committed(self) -> None:
        self._close_after_flush()

    def deliver(self, effect: Deliver, body: bytes | None = None) -> None:
        if self._closed:
            return
        payload = body if body is not None else bytes(effect.message.body)
        try:
            packet = self.mqtt.deliver(effect, payload, self.host.clock.now_ms())
        except MqttError as slow:  # a subscriber that does not acknowledge what it is sent
            log.warning("mqtt.slow_consumer", session=self._session_id, peer=self._peer, detail=slow.detail)
            self.fail(slow.message, slow.detail, reason=slow.reason_code)
            return
        if packet is not None:
            self.write(packet)
        if self.mqtt.out.acks and not self._acks_scheduled:
            self._acks_scheduled = True
            self.host.loop.call_soon(self._propose_acks)

    def _propose_acks(self) -> None:
        self._acks_scheduled = False
        acks = self.mqtt.out.take_acks()
        if acks and not self.mqtt.disconnect_proposed:
            self._propose(acks)

    def receipt(self, receipt_id: str) -> None:
        packet = self.mqtt.receipt(receipt_id)
        if packet is not None:
            self.write(packet)

    def write(self, data: bytes) -> None:
        if self._closed:
            return
        self._out.append(data)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self.host.loop.call_soon(self._flush)

    def fail(self, message: str, detail: str = "", receipt_id: str | None = None, *, wait_for_log: bool = True,
             abort: bool = False, extra: dict[str, str] | None = None, reason: int | None = None) -> None:
        """The core refused a command, or the node ends the session: MQTT 5 says why, then close."""
        leader = (extra or {}).get("leader")
        if reason is None:
            reason = r.USE_ANOTHER_SERVER if leader else r.IMPLEMENTATION_SPECIFIC_ERROR
        disconnect = self.mqtt.failed(reason, f"{message}: {detail}" if detail else message)
        log.info("mqtt.failed", session=self._session_id, peer=self._peer, message=message, detail=detail)
        if disconnect is not None:
            self.write(disconnect)
        if abort:
            self.abort()
        else:
            self._close_after_flush()

    def hold_for_redirect(self) -> None:
        pass  # nothing to hold: the session ends when the node fails it with the leader's address

    def hand_over(self, leader: str) -> bool:
        return False  # an MQTT session does not move yet: it is closed and the client reconnects

    def shutdown(self) -> None:
        self.fail("server shutting down")

    def abort(self) -> None:
        self._closed = True
        if self._transport is not None:
            self._transport.abort()

    # -- asyncio.Protocol ----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's does not subclass asyncio's
        if self.transport_kind == "tcp" and transport.get_extra_info("ssl_object") is not None:
            self.transport_kind = "tls"
        peer = transport.get_extra_info("peername")
        self._peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self._last_read = self.host.loop.time()
        config = self.host.config
        if self.host.connection_count > config.max_connections:
            log.warning("client.refused", session=self._session_id, peer=self._peer, reason="too many connections",
                        max_connections=config.max_connections)
            self._refusal = f"this node serves at most {config.max_connections} connections"
        timeout = config.connect_timeout_ms
        if timeout:  # a silent or trickling stranger does not hold a connection for ever
            self._keep_alive = self.host.loop.call_later(timeout / 1000, self._connect_deadline)

    def _connect_deadline(self) -> None:
        if not self.mqtt.connected and not self._closed:
            log.info("mqtt.connect_timeout", peer=self._peer)
            self.mqtt.closed = True
            self._close_after_flush()

    def data_received(self, data: bytes) -> None:
        if self._relay is not None:
            self._relay.forward(data)
            return
        self._last_read = self.host.loop.time()
        if self.mqtt.version is None and self._refusal is not None:
            self._refuse_connect(data, r.SERVER_BUSY, self._refusal)
            return
        if self.mqtt.version is None and not self.host.is_leader:  # the leader serves it, through a relay
            assert self._transport is not None
            self._relay = self._edge.relay(self._transport, data, self._refuse_relayed)
            if self._relay is None:
                self._refuse_not_leader(data)
            elif self._keep_alive is not None:
                self._keep_alive.cancel()  # the CONNECT's deadline is the leader's now
            return
        self._execute(self.mqtt.receive(data, self.host.clock.now_ms()))

    def eof_received(self) -> bool | None:
        return False

    def pause_writing(self) -> None:
        if self._relay is not None:
            self._relay.client_writable(False)

    def resume_writing(self) -> None:
        if self._relay is not None:
            self._relay.client_writable(True)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._relay is not None:
            self._relay.close()
        self._closed = True
        if self._keep_alive is not None:
            self._keep_alive.cancel()
        self._out.clear()
        self.host.connection_closed(self)
        if self.mqtt.client_id is not None:
            self._edge.release(self.mqtt.client_id, self)
        self.mqtt.closed = True
        self._end_in_core()

    def _end_in_core(self) -> None:
        if self.mqtt.connect_proposed and not self.mqtt.disconnect_proposed:  # the session ends in the core too
            self.host.propose(self.mqtt.ending(self.host.clock.now_ms())).add_done_callback(_ignore)

    def take_over(self) -> None:
        """Another connection with this client id: this one ends, its session's end proposed now
        (before the other's Connect)."""
        disconnect = self.mqtt.failed(r.SESSION_TAKEN_OVER, "another connection with this client id")
        log.info("mqtt.taken_over", session=self._session_id, peer=self._peer, client_id=self.mqtt.client_id)
        if disconnect is not None:
            self.write(disconnect)
        self._end_in_core()
        self._close_after_flush()

    # -- carrying out decisions ----------------------------------------------------------------

    def _execute(self, decisions: list[Decision]) -> None:
        for decision in decisions:
            if isinstance(decision, Write):
                self.write(decision.data)
            elif isinstance(decision, Propose):
                self._propose(decision.commands)
            elif isinstance(decision, CheckLogin):
                checked = self.host.loop.run_in_executor(None, self.host.security.login, decision.username,
                                                         decision.password)
                checked.add_done_callback(self._login_checked)
            elif isinstance(decision, Close):
                log.info("mqtt.closed", session=self._session_id, peer=self._peer, reason=decision.reason,
                         detail=decision.detail)
                self._close_after_flush()

    def _login_checked(self, checked: asyncio.Future[Principal | None]) -> None:
        if self._closed:
            return
        principal = None if checked.cancelled() or checked.exception() else checked.result()
        if principal is not None and self.mqtt.client_id is not None:
            previous = self._edge.claim(self.mqtt.client_id, self)
            if previous is not None:
                previous.take_over()
        self._execute(self.mqtt.login_checked(principal, self.host.clock.now_ms()))

    def _propose(self, commands: list[Command]) -> None:
        self._pending += len(commands)
        if self._pending > self.host.config.max_pending_commands and not self._paused and self._transport:
            self._paused = True
            self._transport.pause_reading()
        count = len(commands)

        def settled(done: asyncio.Future[None]) -> None:
            self._settled(done, count)

        self.host.propose(commands).add_done_callback(settled)

    def _settled(self, done: asyncio.Future[None], count: int) -> None:
        self._pending -= count
        if self._paused and self._pending <= self.host.config.max_pending_commands // 2 and self._transport:
            self._paused = False
            if not self._closed:
                self._transport.resume_reading()
        if done.cancelled() or done.exception() is not None:
            error = "cancelled" if done.cancelled() else f"{type(done.exception()).__name__}"
            self.fail("not committed", f"the group did not commit ({error}); reconnect",
                      extra={"leader": self.host.leader_hint or ""} if not self.host.is_leader else None)

    def _refuse_relayed(self, data: bytes) -> None:
        """The leader could not be reached: the CONNECT is refused here after all."""
        self._relay = None
        if not self._closed:
            self._refuse_not_leader(data)

    def _refuse_not_leader(self, data: bytes) -> None:
        """Answer the CONNECT of a client that reached a follower: "server unavailable" (MQTT 5
        says which node leads, in words: its MQTT address is not known here)."""
        hint = self.host.leader_hint
        log.info("mqtt.not_leader", peer=self._peer, leader=hint)
        detail = f"this node does not serve MQTT clients now; the group's leader: {hint or 'unknown'}"
        self._refuse_connect(data, r.SERVER_UNAVAILABLE, detail)

    def _refuse_connect(self, data: bytes, reason: int, detail: str) -> None:
        """A CONNECT this node does not serve: CONNACK with `reason` (3.1.1: "server unavailable"), closed."""
        try:
            connects = MqttParser().feed(data)
        except MqttError:
            connects = []
        if connects and isinstance(connects[0], p.Connect) and connects[0].version == MQTT_5:
            self.write(encode(p.Connack(reason, False, {"reason_string": detail}), MQTT_5))
        elif connects:
            self.write(encode(p.Connack(r.SERVER_UNAVAILABLE_311), p.MQTT_311))
        self.mqtt.closed = True
        self._close_after_flush()

    # -- output --------------------------------------------------------------------------------

    def _flush(self) -> None:
        self._flush_scheduled = False
        transport = self._transport
        if transport is None or self._closed or transport.is_closing():
            return
        if self._out and self.host.is_leader and not self.host.holds_lease():
            self._flush_scheduled = True  # a deposed leader writes nothing it committed
            self.host.loop.call_later(RECHECK_SECONDS, self._flush)
            return
        if self._out:
            transport.writelines(self._out)
            self._out = []
        if self._closing:
            self._closed = True
            transport.close()

    def _close_after_flush(self) -> None:
        self._closing = True
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self.host.loop.call_soon(self._flush)

    def _watch_keep_alive(self) -> None:
        limit = self.mqtt.keep_alive * KEEP_ALIVE_GRACE
        quiet = self.host.loop.time() - self._last_read
        if self._closed:
            return
        if quiet >= limit:
            disconnect = self.mqtt.failed(r.KEEP_ALIVE_TIMEOUT, f"nothing received for {quiet:.1f} s")
            if disconnect is not None:
                self.write(disconnect)
            log.info("mqtt.keep_alive_timeout", session=self._session_id, peer=self._peer)
            self._close_after_flush()
            return
        self._keep_alive = self.host.loop.call_later(limit - quiet, self._watch_keep_alive)


def _ignore(future: asyncio.Future[None]) -> None:
    if not future.cancelled():
        future.exception()
