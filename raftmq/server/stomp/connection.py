"""One client connection: the asyncio shell around a `StompSession` (raftmq.server.stomp.session).

It feeds the session the bytes it reads and the time, executes the session's decisions
(propose, write an ERROR, check a passcode in a worker thread, relay to the leader, adopt a
session handed over), and writes what the node hands it when commands commit. Output is queued,
then handed to the socket under the leader lease (raftmq.server.stomp.output). When the leadership moves,
the session moves with it (`hand_over`; raftmq.server.stomp.hand_over).

Flow control:
- reading pauses while more than `max_pending_commands` of this session's commands are
  proposed but not committed (a producer waits for the log rather than growing our memory);
- reading also pauses while the transport's write buffer is above its high-water mark;
- deliveries are bounded by the core's prefetch (unacknowledged deliveries per subscription);
  for ack mode auto, which the core does not hold back, a connection whose queued output passes
  `SLOW_CONSUMER_BYTES` is dropped (logged as `slow consumer`; it would never read an ERROR).
  No write ever blocks the loop, so a stuck consumer only fills its own buffer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import cast

import structlog

from raftmq.core.commands import Command
from raftmq.core.effects import Deliver
from raftmq.replication.commit_log import ignore_outcome
from raftmq.security import Principal
from raftmq.server.seams.host import ConnectionHost
from raftmq.server.stomp import hand_over as handing
from raftmq.server.stomp.adoption import PARK
from raftmq.server.stomp.decisions import Adopt, CheckLogin, Decision, Note, Propose, Refuse, RelayToLeader
from raftmq.server.stomp.frames import message_frame, receipt_frame
from raftmq.server.stomp.heartbeat import HeartBeats
from raftmq.server.stomp.output import Output
from raftmq.server.stomp.proposing import Proposals
from raftmq.server.stomp.serving import (
    AwaitNotice,
    EndInput,
    HalfClosed,
    HandedOver,
    HandOver,
    Hold,
    LeadershipGone,
    NoticeOver,
    Park,
    ParkDone,
    Serving,
    ServingEvent,
    ServingMachine,
)
from raftmq.server.stomp.session import SessionState, StompSession
from raftmq.server.websocket.session import MQTT_SUBPROTOCOL, Opened, http_error
from raftmq.server.websocket.transport import WebSocketTransport, upgrade

log = structlog.get_logger("raftmq.server.connection")


class Connection(asyncio.Protocol):
    def __init__(self, host: ConnectionHost, session_id: str, websocket_only: bool = False) -> None:
        self.host = host
        self.session_id = session_id
        self.transport_kind = "tcp"  # "tls", "ws", "wss" or "vm" (the management API lists it)
        self._websocket_only = websocket_only  # the dedicated WebSocket listener's: no plain STOMP
        self._sniffed = False  # the first bytes said STOMP or WebSocket
        self._websocket: WebSocketTransport | None = None
        self.stomp = StompSession(host, session_id)
        self.peer = "?"
        self._loop = host.loop
        self._clock = host.clock  # the `now` of the commands this connection makes
        self.connected_at = self._clock.now_ms()  # for the admin API's connection list
        self._transport: asyncio.Transport | None = None
        self._heads: dict[str, tuple[str, bytes]] = {}  # MESSAGE heads by subscription id (frames.message_head)
        self.proposals = Proposals(self, host.config.max_pending_commands)  # and their outcomes
        self.hops = 0  # relays between the client and this node (a session adopted: its ticket's)
        self.client_gone = False  # the relay holding its client's socket said the client ended (a release)
        self.relay_goes = False  # the follower relaying it goes: its half-close parks the session
        self.parting = False  # (a follower's) its relay parks the session as this node stops: the socket is the relay's
        # Bytes of the client's stream read on its socket, here or by its relay (a resumed
        # session's count goes on from the offset it resumed at): what a resuming client replays from.
        self.stream_bytes = 0
        self._read_paused_for_writes = self._held_for_redirect = False
        self.serving = ServingMachine()  # its mobility: hand-over, park, a relay's half-close (stomp.serving)
        self._beats = HeartBeats(self, self._loop)
        self.output = Output(self, self._loop, self._beats)  # what this connection writes, flushed per turn
        self._connect_timer: asyncio.TimerHandle | None = None

    @property
    def state(self) -> SessionState:
        return self.stomp.state

    @property
    def reading(self) -> bool:
        return self.stomp.state.reading

    @property
    def cluster_connection(self) -> bool:
        """A bridge of another group (or the cluster's own tool), by its CONNECT."""
        return self.stomp.cluster_connection

    @property
    def version(self) -> str:
        return self.stomp.version

    @property
    def open_for_output(self) -> bool:
        """Deliveries and browse ends still go out (no ERROR is pending)."""
        return not self.stomp.state.ended

    @property
    def transport(self) -> asyncio.Transport | None:
        return self._transport

    @property
    def websocket(self) -> WebSocketTransport | None:
        return self._websocket

    @property
    def closed_for_good(self) -> bool:
        return self.stomp.state == SessionState.CLOSED

    # What the node, the hand-over and the heart-beats ask of the output.
    def write(self, data: bytes) -> None:
        self.output.write(data)

    def abort(self) -> None:
        self.output.abort()

    def beat(self) -> bool:
        return self.output.beat()

    @property
    def unsent(self) -> bool:
        return self.output.unsent

    def when_flushed(self, then: Callable[[], None]) -> None:
        self.output.when_flushed(then)

    # What the hand-over asks of the proposals.
    def when_settled(self, then: Callable[[], None]) -> None:
        self.proposals.when_settled(then)

    @property
    def settling(self) -> bool:
        return self.proposals.settling

    @property
    def outcome_unknown(self) -> bool:
        return self.proposals.outcome_unknown

    @property
    def unproposed(self) -> list[Command]:
        return self.proposals.unproposed

    @property
    def flow_held(self) -> list[Command]:
        return self.proposals.flow_held

    def forget_flow_held(self) -> None:
        self.proposals.forget_flow_held()

    # ---- asyncio.Protocol ------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self._transport = cast(asyncio.Transport, transport)
        peer = transport.get_extra_info("peername")
        if peer:
            self.peer = f"{peer[0]}:{peer[1]}"
            if peer[0] == "vm":  # a client in this process (raftmq.vm)
                self.transport_kind = "vm"
        if transport.get_extra_info("ssl_object") is not None:
            self.transport_kind = "tls"
        self._beats.last_received = self._beats.last_written = self._loop.time()
        log.debug("client.accepted", session=self.session_id, peer=self.peer)
        config = self.host.config
        if self.host.connection_count > config.max_connections:
            log.warning("client.refused", session=self.session_id, peer=self.peer, reason="too many connections",
                        max_connections=config.max_connections)
            self.fail("too many connections", f"this node serves at most {config.max_connections} connections")
            return
        if config.connect_timeout_ms:
            self._connect_timer = self._loop.call_later(config.connect_timeout_ms / 1000, self._connect_deadline)

    def _connect_deadline(self) -> None:
        if self.stomp.state == SessionState.AWAIT_CONNECT and not self.stomp.authenticating:
            log.info("client.connect_timeout", session=self.session_id, peer=self.peer)
            self.fail("connect timeout", f"no CONNECT within {self.host.config.connect_timeout_ms} ms")

    def data_received(self, data: bytes) -> None:
        if not self.stomp.state.reading:
            return  # after an ERROR or DISCONNECT nothing more is read
        if not self._sniffed and data:
            self._sniffed = True
            if data[:1] == b"G" and self.stomp.state == SessionState.AWAIT_CONNECT:
                return self._upgrade(data)  # `GET`: no STOMP frame starts so
            if self._websocket_only and self._transport is not None:
                self.stomp.refused_before_stomp()
                self._transport.write(http_error(400, "this port serves STOMP over WebSocket only"))
                return self._transport.close()
        self._beats.last_received = self._loop.time()
        self.stream_bytes += len(data)
        try:
            self._execute(self.stomp.receive(data, self._clock.now_ms()))
        except Exception as exc:  # a bug must cost one connection, never the node
            self._internal_error(exc, "a frame")

    # ---- STOMP over WebSocket (raftmq.server.websocket) ---------------------------------------

    def _upgrade(self, data: bytes) -> None:
        """Carry on over a WebSocket: the handshake, then STOMP inside its messages."""
        assert self._transport is not None

        def opened(handshake: Opened) -> None:
            log.info("client.websocket", session=self.session_id, peer=self.peer, path=handshake.path,
                     subprotocol=handshake.subprotocol, origin=handshake.origin)
            if handshake.subprotocol == MQTT_SUBPROTOCOL and self._websocket is not None:
                self.stomp.refused_before_stomp()  # this session never begins: MQTT's does
                if self._connect_timer is not None:
                    self._connect_timer.cancel()
                host.serve_mqtt(self._websocket, self)

        host = self.host
        self._websocket = upgrade(self._transport, host.config.websocket_origins, host.websocket_handshakes, self,
                                  opened, host.known_names)
        if self._websocket is None:  # too many handshakes: 503 written (and logged), closing
            self.stomp.refused_before_stomp()
            return
        self.transport_kind = "wss" if self.transport_kind == "tls" else "ws"
        self._transport = self._websocket
        try:
            self._websocket.feed(data)
        except Exception as exc:  # a bug must cost one connection, never the node
            self._internal_error(exc, "a WebSocket handshake")

    def _internal_error(self, exc: Exception, what: str) -> None:
        self.host.internal_error()
        log.exception("client.internal_error", session=self.session_id, peer=self.peer)
        if not self.stomp.state.ended:
            self.fail("internal error", f"{type(exc).__name__} while handling {what}")
        else:
            self.output.close_after_flush()

    def connection_lost(self, exc: Exception | None) -> None:
        self._beats.stop()
        if self._connect_timer is not None:
            self._connect_timer.cancel()
        self.output.drop()
        self.proposals.forget_flow_held()  # never proposed, never receipted: not the broker's
        decisions = self.stomp.closed(self._clock.now_ms())
        self.host.connection_closed(self)
        # A SEND forwarded first that falls back is proposed for this session: it ends after.
        self.proposals.when_forwarded(lambda: self._propose_closing(decisions))

    def _propose_closing(self, decisions: list[Decision]) -> None:
        for decision in decisions:
            if isinstance(decision, Propose):
                self.host.propose(decision.commands).add_done_callback(ignore_outcome)

    def eof_received(self) -> bool | None:
        """The client closed its sending side (`input_ended`). The relay of a session adopted here half-closes
        to move closer to the client: the session is parked for it to resume (raftmq.server.stomp.hand_over)."""
        if self.stomp.state.ended:
            return True  # the pending ERROR closes the connection
        movable = self.stomp.state == SessionState.OPEN and self.host.hand_over_secret is not None
        self._moves(HalfClosed(movable, self.stomp.via_relay, self.hops, self.host.commit_log.handing_over,
                               self.client_gone, self.relay_goes))
        return True

    def _notice_over(self) -> None:
        self._moves(NoticeOver(self.stomp.state == SessionState.OPEN, self.hops, self.client_gone))

    def _moves(self, event: ServingEvent) -> bool:
        """Hand `event` to the session's mobility and carry out what it decides; False when it
        cannot be handed over (the caller ends it)."""
        for decision in self.serving.handle(event):
            if isinstance(decision, Hold):
                self.hold_for_redirect()
            elif isinstance(decision, AwaitNotice):
                self._loop.call_later(decision.seconds, self._notice_over)
            elif isinstance(decision, Park):
                self.host.mobility.spawn(handing.park(self))
            elif isinstance(decision, HandOver):
                self.host.mobility.spawn(handing.hand_over(self, decision.leader))
            elif isinstance(decision, EndInput):
                self.input_ended()
            else:  # CannotHandOver
                return False
        return True

    @property
    def eof_pending(self) -> bool:
        """A relay half-closed this connection (its move, or its client's half-close)."""
        return self.serving.eof_pending

    @property
    def via_relay(self) -> bool:
        return self.stomp.via_relay

    def input_ended(self) -> None:
        """Keep our side open until what the client sent has committed (its receipts still go
        out), then close."""
        if self.serving.state is Serving.PARKING:
            self.serving.handle(ParkDone())  # a park ends the input, parked or not
        self.stomp.half_closed()
        self.proposals.when_settled(self.output.close_after_flush)  # output may still be queued for this loop turn

    def pause_writing(self) -> None:
        self._read_paused_for_writes = True
        self.update_reading()

    def resume_writing(self) -> None:
        self._read_paused_for_writes = False
        self.update_reading()

    # ---- executing the session's decisions -----------------------------------------------------

    def _execute(self, decisions: list[Decision]) -> None:
        for decision in decisions:
            if isinstance(decision, Propose):
                self.proposals.propose(decision)
            elif isinstance(decision, Refuse):
                self._refuse(decision)
            elif isinstance(decision, Note):
                log.info(decision.event, session=self.session_id, peer=self.peer, **decision.fields)
            elif isinstance(decision, CheckLogin):
                self.update_reading()
                security = self.host.security
                checked = self._loop.run_in_executor(None, security.login, decision.login, decision.passcode)
                checked.add_done_callback(self._login_checked)
            elif isinstance(decision, RelayToLeader):
                self._relay(decision.prefix)
            elif isinstance(decision, Adopt) and decision.notice:
                handing.released(self, decision.session_id, parks=decision.notice == PARK)
            elif isinstance(decision, Adopt):
                self.update_reading()  # what follows the ticket waits for the claim
                adopting = handing.adopt(self, decision.ticket, decision.session_id, offset=decision.offset)
                self.host.mobility.spawn(adopting)

    def run(self, decisions: list[Decision]) -> None:  # made outside data_received (raftmq.server.stomp.hand_over)
        self._execute(decisions)
        self.update_reading()

    def _login_checked(self, checked: asyncio.Future[Principal | None]) -> None:
        try:
            self._execute(self.stomp.login_checked(checked.result(), self._clock.now_ms()))
        except Exception as exc:  # like data_received: a bug costs this connection only
            self.stomp.authenticating = False
            self._internal_error(exc, "CONNECT")
        self.update_reading()

    def _relay(self, prefix: bytes) -> None:
        """A follower's client: hand the connection to a relay to the leader. The connection
        stays in the node's connections until it closes."""
        transport = self._transport
        assert transport is not None
        if self._connect_timer is not None:
            self._connect_timer.cancel()  # CONNECT was read; the leader applies its own limits
        self.host.relays.start(self, transport, prefix)

    def update_reading(self) -> None:
        transport = self._transport
        state = self.stomp.state
        if transport is None or transport.is_closing() or state == SessionState.RELAYED:
            return  # a relayed connection's reading is the relay's
        if self.reading_paused or self._held_for_redirect or self.stomp.authenticating or state.ended:
            if transport.is_reading():
                transport.pause_reading()
        elif not transport.is_reading():
            transport.resume_reading()

    @property
    def reading_paused(self) -> bool:
        """By this node: the log, the socket or BLOCK holds it back (its silence is ours)."""
        return self.proposals.paused or self._read_paused_for_writes

    @property
    def held_for_redirect(self) -> bool:
        return self._held_for_redirect

    # ---- a leadership transfer: the session moves with it (raftmq.server.stomp.hand_over) ---------

    @property
    def closed(self) -> bool:
        return self.stomp.state == SessionState.CLOSED or self._transport is None or self._transport.is_closing()

    def hand_over(self, leader: str) -> bool:
        """Hand this session to the new leader at `leader`; False when it cannot be (the caller closes it)."""
        movable = self.stomp.state == SessionState.OPEN and self.host.hand_over_secret is not None and not self.closed
        return self._moves(LeadershipGone(leader, movable, self.hops))

    def relay_to_successor(self, leader: str, session_id: str, prefix: bytes, refusal: bytes,
                           parked_at: int | None = None) -> None:
        """Pipe this connection to the successor after `prefix` (the ticket): the successor serves
        the session now; `parked_at`: it parks it, and the client resumes it from that offset."""
        self._beats.stop()
        self._moves(HandedOver())
        assert self._transport is not None and not self.output.unsent
        self.host.relays.to_successor(self, self._transport, prefix, leader, session_id, refusal, self.hops, parked_at)

    def resume_here(self, session_id: str, held: bytes, eof: bool = False) -> None:
        """Serve the session parked here for a relay of this node, then what its client sent meanwhile
        (`eof`: and then it half-closed; the socket will not say so again)."""
        self.stomp.authenticating = True  # what the client sends waits for the claim
        self.update_reading()

        async def resume() -> None:
            await handing.adopt(self, None, session_id, then=held)
            if eof and not self.closed:
                self.eof_received()

        self.host.mobility.spawn(resume())

    def hold_for_redirect(self) -> None:
        """This node lost leadership and does not know the new leader yet: read nothing more
        and let commands that fail meanwhile not answer; the node calls `fail` with the
        leader's address once it knows it (or gives up waiting)."""
        self._held_for_redirect = True
        self.update_reading()

    # ---- called by the node when commands of this session commit ----------------------------

    def connect_committed(self) -> None:
        """Our Connect was applied: answer CONNECTED and start heart-beating."""
        frame, opened = self.stomp.connect_committed(self.host.commit_log.leader_term)
        if frame is not None:
            self.output.write(frame)
        if opened:
            self.opened()

    def opened(self) -> None:
        """The session is open (CONNECTED, or adopted): heart-beats start."""
        self._beats.start()

    def disconnect_committed(self) -> None:
        """Our Disconnect was applied (and its RECEIPT, if any, queued): flush and close."""
        if self.stomp.state == SessionState.CLOSED:
            return
        self.stomp.half_closed()
        self.output.close_after_flush()

    def deliver(self, effect: Deliver, body: bytes | None = None) -> None:
        """`body`: the message's bytes when the effect holds a body reference (a group)."""
        if not self.stomp.state.ended:
            term = self.host.commit_log.leader_term
            self.output.write(message_frame(effect, self.stomp.version, body, term, self._heads))

    def receipt(self, receipt_id: str) -> None:
        if self.stomp.state != SessionState.CLOSED:
            named = self.stomp.receipt_for(receipt_id)
            if named is not None:
                self.output.write(receipt_frame(named, self.stomp.version))

    def fail(
        self,
        message: str,
        detail: str = "",
        receipt_id: str | None = None,
        *,
        wait_for_log: bool = True,
        abort: bool = False,
        extra: dict[str, str] | None = None,
    ) -> None:
        """Answer with ERROR and close. Nothing the client sends from now on is processed.

        With `wait_for_log`, commands proposed before the error commit first and their receipts
        go out before the ERROR; the node passes False for an error the core found, which is
        reported at once. `abort` drops the connection without waiting for the client to read."""
        for decision in self.stomp.fail(message, detail, receipt_id, extra):
            assert isinstance(decision, Refuse)
            self._refuse(decision, wait_for_log=wait_for_log, abort=abort)

    def _refuse(self, refuse: Refuse, *, wait_for_log: bool = True, abort: bool = False) -> None:
        self.update_reading()
        log.info("client.error", session=self.session_id, peer=self.peer, message=refuse.message, detail=refuse.detail)
        if abort:
            self.output.abort()
        elif wait_for_log:
            self.proposals.when_settled(lambda: self._send_error(refuse.frame))
        else:
            self._send_error(refuse.frame)

    def _send_error(self, frame: bytes) -> None:
        if self.stomp.state == SessionState.CLOSED:
            return
        self.output.close_after_flush(frame)

    def shutdown(self) -> None:  # the node is stopping: tell the client and close
        if self.stomp.state.ended:
            if not (self.serving.handed_over or self.parting):  # else its relay says goodbye (Relays.farewell)
                self.output.close_after_flush()
            return
        for refusal in self.stomp.fail("broker shutting down", "the node is stopping"):
            assert isinstance(refusal, Refuse)
            self._send_error(refusal.frame)
