"""One client connection: an `asyncio.Protocol` that parses frames, appends commands to the
commit log and writes what the node hands it.

Life of a session: AWAIT_CONNECT → (CONNECT appended) CONNECTING → (Connect committed, CONNECTED
written) OPEN → DISCONNECTING (DISCONNECT appended) or FAILED (ERROR pending) → CLOSED. On a
follower, AWAIT_CONNECT → RELAYED: the connection is piped to the leader (raftmq.server.relay).

Security (raftmq.security): CONNECT's login is checked before anything is appended; a passcode
that needs scrypt is checked in a worker thread while reading pauses (frames already read wait
for the answer). With an ACL, every SEND / SUBSCRIBE is authorized as it is translated; a
refusal is `access denied` like any other bad frame: nothing from it on reaches the log.

Ordering: every frame of one `data_received` becomes one `log.append` batch, so a session's
commands reach the core in the order they arrived. Output is queued and written once per
event-loop turn.

Flow control:
- reading pauses while more than `max_pending_commands` of this session's commands are
  appended but not committed (a producer waits for the log rather than growing our memory);
- reading also pauses while the transport's write buffer is above its high-water mark (a
  client that does not read its receipts stops being read);
- deliveries are bounded by the core's prefetch (unacknowledged deliveries per subscription);
  for ack mode auto, which the core does not hold back, a session whose write buffer passes
  `SLOW_CONSUMER_BYTES` is dropped (logged as `slow consumer`; it would never read an ERROR).
  No write ever blocks the loop, so a stuck consumer only fills its own buffer; other
  sessions go on.
"""

from __future__ import annotations

import asyncio
import time
from functools import partial
from typing import TYPE_CHECKING, cast

import structlog

from raftmq import __version__
from raftmq.core.commands import Command, Connect, Disconnect, Send, Subscribe
from raftmq.core.effects import Deliver
from raftmq.errors import NotLeader, ProtocolError
from raftmq.protocol.codec import HEARTBEAT, FrameParser, negotiate_version
from raftmq.protocol.frame import Frame
from raftmq.security import READ, WRITE, Principal
from raftmq.server.dispatcher import connected_frame, error_frame, message_frame, receipt_frame
from raftmq.server.relay import PREFIX_MAX_BYTES, REDIRECT, redirect_wanted
from raftmq.server.translate import FrameTranslator, parse_heart_beat

if TYPE_CHECKING:
    from raftmq.server.node import Node

log = structlog.get_logger("raftmq.server.session")

SERVER_HEADER = f"raftmq/{__version__}"
# A session whose transport buffers more than this is a consumer that does not keep up with
# auto-ack deliveries (acked deliveries are bounded by prefetch instead): it is closed.
SLOW_CONSUMER_BYTES = 64 * 1024 * 1024
# While the leader lease does not hold, queued output is looked at again this often (the lease
# is renewed by every heart-beat round, every 20 ms by default, or the node steps down).
LEASE_RECHECK_SECONDS = 0.005
# A closing connection whose client does not read what is left is dropped after this long.
CLOSE_GRACE_SECONDS = 5.0
# Heart-beats are a liveness hint; send one when the line has been quiet this share of the interval.
HEARTBEAT_SEND_SLACK = 0.9
# Close a client that promised heart-beats and sent nothing for this many agreed intervals.
HEARTBEAT_RECEIVE_GRACE = 2.0
# (operation, destination) pairs a session remembers as authorized before starting afresh.
ALLOWED_CACHE_SIZE = 1024
ACCESS_REFUSED = "access refused"  # CONNECT: bad or missing credentials (never says which)
ACCESS_DENIED = "access denied"  # a frame the ACL does not allow

AWAIT_CONNECT, CONNECTING, OPEN, DISCONNECTING, FAILED, RELAYED, CLOSED = range(7)


class Session(asyncio.Protocol):
    def __init__(self, node: Node, session_id: str) -> None:
        self.node = node
        self.session_id = session_id
        # Until CONNECT is accepted, ERROR frames go out unescaped (as in 1.0): the client has
        # not been told a version yet, and every version reads an unescaped colon in a value.
        self.version = "1.0"
        self.peer = "?"
        self.state = AWAIT_CONNECT
        config = node.config
        self._max_pending = max(1, config.max_pending_commands)
        # CONNECT, STOMP and CONNECTED are never escaped, so any version parses CONNECT.
        self._parser = FrameParser(config.limits, "1.2")
        self._translator: FrameTranslator | None = None
        self._loop = node.loop
        self._transport: asyncio.Transport | None = None
        self._out: list[bytes] = []
        self._flush_scheduled = False
        self._pending = 0  # commands appended, not yet committed
        self._last_append: asyncio.Future[None] | None = None
        self._read_paused_for_log = False
        self._read_paused_for_writes = False
        self._held_for_redirect = False
        self._connect_appended = False
        self._connected_sent = False
        self._disconnect_appended = False
        self._last_received = 0.0
        self._last_written = 0.0
        self._send_interval = 0.0  # seconds; 0 = we send no heart-beats
        self._receive_interval = 0.0  # seconds; 0 = we expect none
        self._send_timer: asyncio.TimerHandle | None = None
        self._check_timer: asyncio.TimerHandle | None = None
        self._principal: Principal | None = None  # who CONNECT authenticated
        self._authorizing = node.security.authorizing
        self._allowed: set[tuple[str, str]] = set()  # (operation, destination) already checked
        # While a worker thread checks CONNECT's passcode, reading pauses and frames already
        # read wait here, so nothing the client pipelined runs before it is let in.
        self._authenticating = False
        self._held: list[Frame] = []
        self._held_error: ProtocolError | None = None
        self._connect_timer: asyncio.TimerHandle | None = None
        self._buffered = 0  # this session's share of the node's unfinished-frame budget
        # What the client sent before its CONNECT was handled, for a follower to replay to
        # the leader (None: not kept: redirect mode, or more than relay.PREFIX_MAX_BYTES).
        self._before_connect: list[bytes] | None = [] if node.config.follower_clients != REDIRECT else None
        self._before_connect_bytes = 0

    # ---- asyncio.Protocol ------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self._transport = cast(asyncio.Transport, transport)
        peer = transport.get_extra_info("peername")
        if peer:
            self.peer = f"{peer[0]}:{peer[1]}"
        self._last_received = self._last_written = self._loop.time()
        log.debug("client.accepted", session=self.session_id, peer=self.peer)
        config = self.node.config
        if len(self.node.sessions) > config.max_connections:
            log.warning("client.refused", session=self.session_id, peer=self.peer, reason="too many connections",
                        max_connections=config.max_connections)
            self.fail("too many connections", f"this node serves at most {config.max_connections} connections")
            return
        if config.connect_timeout_ms:
            self._connect_timer = self._loop.call_later(config.connect_timeout_ms / 1000, self._connect_deadline)

    def _connect_deadline(self) -> None:
        if self.state == AWAIT_CONNECT and not self._authenticating:
            log.info("client.connect_timeout", session=self.session_id, peer=self.peer)
            self.fail("connect timeout", f"no CONNECT within {self.node.config.connect_timeout_ms} ms")

    def data_received(self, data: bytes) -> None:
        if self.state >= DISCONNECTING:
            return  # after an ERROR or DISCONNECT nothing more is read
        self._last_received = self._loop.time()
        if self.state == AWAIT_CONNECT and self._before_connect is not None:
            self._keep_for_relay(data)
        try:
            self._handle_bytes(data)
        except Exception as exc:  # a bug must cost one connection, never the node
            self.node.internal_errors += 1
            log.exception("client.internal_error", session=self.session_id, peer=self.peer)
            if self.state < FAILED:
                self.fail("internal error", f"{type(exc).__name__} while handling a frame")
            else:
                self._close_after_flush()

    def connection_lost(self, exc: Exception | None) -> None:
        self.state = CLOSED
        for timer in (self._send_timer, self._check_timer, self._connect_timer):
            if timer is not None:
                timer.cancel()
        self._account_buffered(0)
        self._out.clear()
        self.node.session_closed(self)
        if self._connect_appended and not self._disconnect_appended:
            # Abnormal end: open transactions abort and unacked deliveries go back to their queues.
            self._disconnect_appended = True
            future = self.node.commit_log.append([Disconnect(self.session_id, _now_ms())])
            future.add_done_callback(_ignore_outcome)

    def eof_received(self) -> bool | None:
        """The client closed its sending side. Keep ours open until what it sent has committed
        (so its receipts still go out), then close."""
        if self.state >= FAILED:
            return True  # the pending ERROR closes the connection
        self.state = max(self.state, DISCONNECTING)
        pending = self._last_append
        if pending is not None and not pending.done():
            pending.add_done_callback(lambda _: self._close_after_flush())
        else:
            self._close_after_flush()  # output may still be queued for this loop turn
        return True

    def pause_writing(self) -> None:
        self._read_paused_for_writes = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._read_paused_for_writes = False
        self._update_reading()

    # ---- input -----------------------------------------------------------------------------

    def _handle_bytes(self, data: bytes) -> None:
        error: ProtocolError | None = None
        try:
            frames = self._parser.feed(data)
        except ProtocolError as exc:
            # Frames completed before the malformed one in this chunk are still processed.
            frames = self._parser.frames_before_error
            error = exc
        if error is None and not self._account_buffered(self._parser.buffered):
            self.fail("server busy", "too much unfinished input buffered on this node; try again later")
            return
        if error is None and not frames and self.state == AWAIT_CONNECT:
            limit = self.node.config.max_connect_frame_bytes
            if self._parser.buffered > limit:
                self.fail("frame too large", f"a CONNECT frame is at most {limit} bytes")
                return
        if frames and self.state == AWAIT_CONNECT and not self._authenticating:
            # The parser reads frames pipelined behind CONNECT under the version it negotiates.
            self._handle_connect(frames[0])
            frames = frames[1:]
        if self._authenticating:
            self._held.extend(frames)
            self._held_error = self._held_error or error
            return
        self._handle_frames_and_error(frames, error)

    def _account_buffered(self, buffered: int) -> bool:
        """Move this session's share of the node's unfinished-frame budget to `buffered` bytes;
        False (share unchanged) when growing it would pass the budget."""
        node = self.node
        grow = buffered - self._buffered
        if grow > 0 and node.unfinished_frame_bytes + grow > node.config.max_unfinished_frame_bytes:
            log.warning("client.refused", session=self.session_id, peer=self.peer, reason="unfinished-frame budget",
                        buffered=buffered, node_buffered=node.unfinished_frame_bytes)
            return False
        node.unfinished_frame_bytes += grow
        self._buffered = buffered
        return True

    def _handle_frames_and_error(self, frames: list[Frame], error: ProtocolError | None) -> None:
        receipt_id: str | None = None  # of the offending frame, when the frame itself was readable
        if frames:
            if self.state in (CONNECTING, OPEN):
                refused = self._handle_frames(frames)
                if refused is not None:
                    error, receipt_id = refused
        if error is not None and self.state < DISCONNECTING:
            self.fail(error.message, error.detail, receipt_id or error.receipt)

    def _handle_connect(self, frame: Frame) -> None:
        if frame.command not in ("CONNECT", "STOMP"):
            self.fail("expected CONNECT", f"the first frame must be CONNECT or STOMP, got {frame.command}")
            return
        try:
            version = negotiate_version(frame.get("accept-version"))
            client_send, client_receive = parse_heart_beat(frame.get("heart-beat"))
        except ProtocolError as exc:
            self.fail(exc.message, exc.detail or exc.message, extra={"version": "1.0,1.1,1.2"})
            return
        security = self.node.security
        login, passcode = frame.get("login"), frame.get("passcode")
        decided = security.quick_login(login, passcode)
        if decided is True:
            self._authenticating = True
            self._update_reading()
            checked = self._loop.run_in_executor(None, security.login, login, passcode)
            checked.add_done_callback(partial(self._login_checked, frame, version, client_send, client_receive))
            return
        self._accept_connect(frame, decided, version, client_send, client_receive)  # type: ignore[arg-type]

    def _login_checked(
        self, frame: Frame, version: str, client_send: int, client_receive: int, checked: asyncio.Future[Principal | None]
    ) -> None:
        self._authenticating = False
        held, error = self._held, self._held_error
        self._held, self._held_error = [], None
        if self.state != AWAIT_CONNECT:
            return  # the client went away (or half-closed) meanwhile
        try:
            principal = checked.result()
            self._accept_connect(frame, principal, version, client_send, client_receive)
            if self.state < DISCONNECTING:
                self._handle_frames_and_error(held, error)
        except Exception as exc:  # like data_received: a bug costs this connection only
            self.node.internal_errors += 1
            log.exception("client.internal_error", session=self.session_id, peer=self.peer)
            self.fail("internal error", f"{type(exc).__name__} while handling CONNECT")
        self._update_reading()

    def _accept_connect(
        self, frame: Frame, principal: Principal | None, version: str, client_send: int, client_receive: int
    ) -> None:
        if principal is None:
            log.info("client.login_refused", session=self.session_id, peer=self.peer, login=frame.get("login"))
            self.fail(ACCESS_REFUSED, "invalid login or passcode")
            return
        self._principal = principal
        before_connect, self._before_connect = self._before_connect, None
        if not self.node.commit_log.is_leader:
            if before_connect is not None and not redirect_wanted(self.node.config.follower_clients, frame):
                self._relay(b"".join(before_connect))
                return
            hint = self.node.commit_log.leader_hint
            extra = {"leader": hint} if hint else None
            detail = f"this node does not serve clients now; leader: {hint or 'unknown'}"
            self.fail("not the leader", detail, extra=extra)
            return
        self.version = version
        self._parser.version = version
        config = self.node.config
        # STOMP heart-beating: each side uses the larger of what one can send and the other wants.
        if config.heartbeat_send_ms and client_receive:
            self._send_interval = max(config.heartbeat_send_ms, client_receive) / 1000
        if config.heartbeat_receive_ms and client_send:
            self._receive_interval = max(config.heartbeat_receive_ms, client_send) / 1000
        client_id = frame.get("client-id")
        self._translator = FrameTranslator(self.session_id, version, client_id)
        self.state = CONNECTING
        self._connect_appended = True
        login = principal.name if self.node.security.authenticating else frame.get("login")
        self._append([Connect(self.session_id, _now_ms(), login, client_id)])
        log.info("client.connecting", session=self.session_id, peer=self.peer, version=version, client_id=client_id)

    def _keep_for_relay(self, data: bytes) -> None:
        self._before_connect_bytes += len(data)
        if self._before_connect_bytes > PREFIX_MAX_BYTES:
            self._before_connect = None  # too much to replay: a follower redirects this one
        else:
            self._before_connect.append(data)  # type: ignore[union-attr]

    def _relay(self, prefix: bytes) -> None:
        """A follower's client: hand the connection to a relay to the leader. The session
        stays in the node's sessions (a client connection of this node) until it closes."""
        transport = self._transport
        assert transport is not None
        self.state = RELAYED
        if self._connect_timer is not None:
            self._connect_timer.cancel()  # CONNECT was read; the leader applies its own limits
        self._account_buffered(0)  # what the parser held is replayed, not buffered here
        self.node.relays.start(self, transport, prefix)

    def _handle_frames(self, frames: list[Frame]) -> tuple[ProtocolError, str | None] | None:
        """Translate and append; stop at the first bad frame and return its error and receipt."""
        translator = self._translator
        assert translator is not None
        now = _now_ms()
        commands: list[Command] = []
        refused: tuple[ProtocolError, str | None] | None = None
        authorizing = self._authorizing
        for frame in frames:
            try:
                command = translator.translate(frame, now)
                if authorizing:
                    self._authorize(command)
            except ProtocolError as exc:
                refused = (exc, frame.get("receipt"))
                break
            commands.append(command)
            if type(command) is Disconnect:
                self.state = DISCONNECTING
                self._disconnect_appended = True
                break
        if commands:
            self._append(commands)
        return refused

    def _authorize(self, command: Command) -> None:
        """Raise `ProtocolError` (access denied) unless the ACL lets this session's principal
        do what `command` does; creating a destination also needs admin."""
        kind = type(command)
        if kind is Send:
            operation, creates = WRITE, True
        elif kind is Subscribe:
            operation, creates = READ, True
        elif getattr(command, "destination", None) is not None:
            operation, creates = READ, False  # e.g. a queue browser: reads, creates nothing
        else:
            return
        destination: str = command.destination  # type: ignore[attr-defined]
        key = (operation, destination)
        if key in self._allowed:
            return
        principal = self._principal
        assert principal is not None
        # The leader's core holds everything committed; a destination another session is
        # creating right now (appended, not committed) still counts as new here.
        exists = self.node.broker.has_destination(destination)
        refusal = self.node.security.refusal(principal, operation, destination, exists or not creates)
        if refusal is not None:
            log.info("client.access_denied", session=self.session_id, peer=self.peer, user=principal.name,
                     operation=operation, destination=destination)
            raise ProtocolError(ACCESS_DENIED, refusal)
        if exists:  # destinations are never removed, so this answer stays right
            if len(self._allowed) >= ALLOWED_CACHE_SIZE:
                self._allowed.clear()
            self._allowed.add(key)

    def _append(self, commands: list[Command]) -> None:
        future = self.node.commit_log.append(commands)
        self._pending += len(commands)
        self._last_append = future
        future.add_done_callback(partial(self._appended, len(commands)))
        if self._pending > self._max_pending and not self._read_paused_for_log:
            self._read_paused_for_log = True
            self._update_reading()

    def _appended(self, count: int, future: asyncio.Future[None]) -> None:
        self._pending -= count
        if future.cancelled():
            exc: BaseException | None = None
        else:
            exc = future.exception()
        if exc is not None and self.state < FAILED and not self._held_for_redirect:
            if isinstance(exc, NotLeader):
                self.fail("not the leader", str(exc), extra={"leader": exc.leader} if exc.leader else None)
            else:
                self.fail("command not committed", f"{type(exc).__name__}: {exc}")
            return
        if self._read_paused_for_log and self._pending <= self._max_pending // 2:
            self._read_paused_for_log = False
            self._update_reading()

    def _update_reading(self) -> None:
        transport = self._transport
        if transport is None or transport.is_closing() or self.state == RELAYED:
            return  # a relayed connection's reading is the relay's
        paused = (
            self._read_paused_for_log or self._read_paused_for_writes or self._held_for_redirect
            or self._authenticating or self.state >= FAILED
        )
        if paused:
            if transport.is_reading():
                transport.pause_reading()
        elif not transport.is_reading():
            transport.resume_reading()

    @property
    def held_for_redirect(self) -> bool:
        return self._held_for_redirect

    def hold_for_redirect(self) -> None:
        """This node lost leadership and does not know the new leader yet: read nothing more
        and let commands that fail meanwhile not answer; the node calls `fail` with the
        leader's address once it knows it (or gives up waiting)."""
        self._held_for_redirect = True
        self._update_reading()

    # ---- called by the node when commands of this session commit ----------------------------

    def connect_committed(self) -> None:
        """Our Connect was applied: answer CONNECTED. Also when a frame pipelined behind
        CONNECT already failed or disconnected, so the client learns the session it had."""
        if self.state == CLOSED or self._connected_sent:
            return
        self._connected_sent = True
        config = self.node.config
        offer = (config.heartbeat_send_ms, config.heartbeat_receive_ms)
        self.write(connected_frame(self.version, offer, self.session_id, SERVER_HEADER))
        if self.state != CONNECTING:
            return
        self.state = OPEN
        if self._send_interval:
            self._send_timer = self._loop.call_later(self._send_interval, self._heartbeat_send)
        if self._receive_interval:
            self._check_timer = self._loop.call_later(self._receive_interval, self._heartbeat_check)

    def disconnect_committed(self) -> None:
        """Our Disconnect was applied (and its RECEIPT, if any, queued): flush and close."""
        if self.state == CLOSED:
            return
        self.state = max(self.state, DISCONNECTING)
        self._close_after_flush()

    def deliver(self, effect: Deliver, body: bytes | None = None) -> None:
        """`body`: the message's bytes when the effect holds a body reference (a group)."""
        if self.state < FAILED:
            self.write(message_frame(effect, self.version, body))

    def receipt(self, receipt_id: str) -> None:
        if self.state != CLOSED:
            self.write(receipt_frame(receipt_id, self.version))

    # ---- output ----------------------------------------------------------------------------

    def write(self, data: bytes) -> None:
        self._out.append(data)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        transport = self._transport
        if not self._out or transport is None or transport.is_closing():
            self._out.clear()
            return
        if not self.node.commit_log.holds_lease():
            # Our leadership may have ended unseen (this process was paused, or cut off): what is
            # queued waits for the lease to be renewed, or is dropped when the session fails
            # because the node stepped down (a new leader redelivers it, flagged).
            self._flush_scheduled = True
            self._loop.call_later(LEASE_RECHECK_SECONDS, self._flush)
            return
        out, self._out = self._out, []
        transport.writelines(out)  # one send per flush (recent uvloop writev()s the list)
        self._last_written = self._loop.time()
        if self._read_paused_for_writes and transport.get_write_buffer_size() > SLOW_CONSUMER_BYTES:
            # The client would never read an ERROR queued behind all that: drop the connection.
            self.fail("slow consumer", f"more than {SLOW_CONSUMER_BYTES} bytes waiting to be read", abort=True)

    def _close_after_flush(self, last: bytes | None = None) -> None:
        """Write what is queued (only under the lease), then `last` (an ERROR), and close."""
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        out, self._out = self._out, []
        if out and not self.node.commit_log.holds_lease():
            log.info("client.writes_dropped", session=self.session_id, peer=self.peer, frames=len(out),
                     reason="leader lease lapsed")
            out = []
        if last is not None:
            out.append(last)
        if out:
            transport.write(b"".join(out))
        transport.close()  # asyncio closes after the buffered data is written
        self._loop.call_later(CLOSE_GRACE_SECONDS, self.abort)

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

        With `wait_for_log`, commands appended before the error commit first and their receipts
        go out before the ERROR; the node passes False for an error the core found, which is
        reported at once. `abort` drops the connection without waiting for the client to read."""
        if self.state >= FAILED:
            return
        self.state = FAILED
        self._update_reading()
        log.info("client.error", session=self.session_id, peer=self.peer, message=message, detail=detail)
        frame = error_frame(message, detail, self.version, receipt_id, extra)
        pending = self._last_append
        if abort:
            self.abort()
        elif wait_for_log and pending is not None and not pending.done():
            pending.add_done_callback(lambda _: self._send_error(frame))
        else:
            self._send_error(frame)

    def _send_error(self, frame: bytes) -> None:
        if self.state == CLOSED:
            return
        self._close_after_flush(frame)

    def shutdown(self) -> None:
        """The node is stopping: tell the client and close."""
        if self.state >= FAILED:
            self._close_after_flush()
            return
        self.state = FAILED
        self._send_error(error_frame("broker shutting down", "the node is stopping", self.version))

    def abort(self) -> None:
        """Drop the connection without flushing (a client that stopped reading)."""
        if self._transport is not None and self.state != CLOSED:
            self._transport.abort()

    # ---- heart-beats -------------------------------------------------------------------------

    def _heartbeat_send(self) -> None:
        if self.state >= FAILED:
            return
        transport = self._transport
        now = self._loop.time()
        quiet = now - self._last_written
        if quiet >= self._send_interval * HEARTBEAT_SEND_SLACK and not self._out:
            if transport is not None and not transport.is_closing():
                transport.write(HEARTBEAT)
            self._last_written = now
            quiet = 0.0
        self._send_timer = self._loop.call_later(max(0.001, self._send_interval - quiet), self._heartbeat_send)

    def _heartbeat_check(self) -> None:
        if self.state >= FAILED:
            return
        now = self._loop.time()
        if self._read_paused_for_log or self._read_paused_for_writes:
            self._last_received = now  # we are the ones not reading: the silence is ours
        silent = now - self._last_received
        limit = self._receive_interval * HEARTBEAT_RECEIVE_GRACE
        if silent > limit:
            log.info("client.heartbeat_timeout", session=self.session_id, peer=self.peer, silent_s=round(silent, 3))
            detail = f"nothing received for {silent:.1f} s (agreed interval {self._receive_interval:.3f} s)"
            self.fail("heart-beat timeout", detail)
            return
        self._check_timer = self._loop.call_later(max(0.001, limit - silent), self._heartbeat_check)


def _now_ms() -> int:
    return int(time.time() * 1000)


def _ignore_outcome(future: asyncio.Future[None]) -> None:
    if not future.cancelled():
        future.exception()  # retrieved so asyncio does not warn about it
