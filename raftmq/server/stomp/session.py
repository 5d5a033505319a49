"""The STOMP session, sans-I/O: bytes and events in, decisions out.

`StompSession` holds a client connection's protocol state (`SessionState`), parses its bytes,
negotiates CONNECT (version, heart-beats, login), authorizes and translates frames into core
commands. It never touches a socket, a timer or a clock: the shell (raftmq.server.stomp.connection)
passes the time in and executes what comes out (the values: raftmq.server.stomp.decisions):

- `Propose(commands)`: hand them to the commit log, in order;
- `Refuse(frame, ...)`: write this ERROR (after what was proposed before it committed) and close;
- `CheckLogin(login, passcode)`: check the passcode off the event loop, then call `login_checked`;
- `RelayToLeader(prefix)`: a follower's client: pipe the connection (and these bytes) to the leader;
- `Adopt(ticket, session_id, offset, notice)`: a member hands this session over, or it is resumed
  here (no ticket; raftmq.server.stomp.adoption): claim it once this node may, then call
  `adopted`; with a `notice`, a relay says the session's client ended or the relay goes;
- `Note(event, fields)`: log it.

Life of a session: AWAIT_CONNECT → (CONNECT proposed) CONNECTING → (Connect committed, CONNECTED
written) OPEN → DISCONNECTING (DISCONNECT proposed, or the client half-closed) or FAILED (ERROR
pending) → CLOSED. On a follower, AWAIT_CONNECT → RELAYED. Handed over: OPEN → RELAYED on the
old leader (`ticket`, `handed_over`), AWAIT_CONNECT → OPEN on its successor (`Adopt`, `adopted`).

Security (raftmq.security): CONNECT's login is checked before anything is proposed; frames
pipelined behind CONNECT wait for the answer. With an ACL, every SEND / SUBSCRIBE is authorized
as it is translated (raftmq.server.stomp.authorization); a refusal is `access denied` like any
other bad frame: nothing from it on reaches the log. Every frame of one `receive` becomes one
proposal, so a session's commands reach the core in the order they arrived.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import TYPE_CHECKING

from raftmq import __version__
from raftmq.core.commands import Command, Connect, Disconnect
from raftmq.errors import ProtocolError
from raftmq.protocol.codec import FrameParser
from raftmq.protocol.frame import RELAYED_HEADER, RESUME_HEADER, Frame
from raftmq.protocol.negotiation import HeartBeat, agree_heartbeats, negotiate_version, parse_heart_beat
from raftmq.replication.command_codec import decode_batch, encode_batch
from raftmq.routing.forward_batch import (
    BATCH_DESTINATION,
    BATCH_INDEX_HEADER,
    BatchError,
    decode,
    inner_receipt,
    message,
    parse_inner,
)
from raftmq.routing.route import BRIDGE_CONNECT_HEADER, sf_queue
from raftmq.security import Principal
from raftmq.server.stomp.adoption import ADOPT_HEADER, ADOPT_PREFIX, REFUSED, Ticket, read_adoption
from raftmq.server.stomp.authorization import SessionAuthorization
from raftmq.server.stomp.decisions import (
    PREFIX_MAX_BYTES,
    REDIRECT,
    Adopt,
    CheckLogin,
    Decision,
    Note,
    Propose,
    Refuse,
    RelayToLeader,
    redirect_wanted,
)
from raftmq.server.stomp.frames import connected_frame, error_frame
from raftmq.server.stomp.translate import FrameTranslator

if TYPE_CHECKING:  # the session's host, as a type: the session itself does no I/O
    from raftmq.server.seams.host import SessionHost

SERVER_HEADER = f"raftmq/{__version__}"
ACCESS_REFUSED = "access refused"  # CONNECT: bad or missing credentials (never says which)


class SessionState(IntEnum):
    """Where a session is; a session only ever moves down this list. What the shell and the
    session ask of a state is named by the two predicates below, not by its place in the list."""

    AWAIT_CONNECT = 0
    CONNECTING = 1
    OPEN = 2
    DISCONNECTING = 3
    FAILED = 4
    RELAYED = 5
    CLOSED = 6

    @property
    def reading(self) -> bool:
        """Frames from the client are still read: not disconnecting (a DISCONNECT or a
        half-close), failed, relayed or closed."""
        return self < SessionState.DISCONNECTING

    @property
    def ended(self) -> bool:
        """The session gave its last answer: failed (its ERROR is on its way), relayed to another
        node, or closed. Nothing more of its own goes out."""
        return self >= SessionState.FAILED


@dataclass(slots=True)
class _PendingConnect:
    frame: Frame
    version: str
    client_send: int
    client_receive: int


class StompSession:
    def __init__(self, host: SessionHost, session_id: str) -> None:
        self.host = host
        self.session_id = session_id
        self.state = SessionState.AWAIT_CONNECT
        # Until CONNECT is accepted, ERROR frames go out unescaped (as in 1.0): the client has
        # not been told a version yet, and every version reads an unescaped colon in a value.
        self.version = "1.0"
        self.cluster_connection = False  # CONNECT said it is a bridge (raftmq.routing.route.BRIDGE_CONNECT_HEADER)
        self.via_relay = False  # a follower relays it: the client's socket is that member's (RELAYED_HEADER)
        config = host.config
        # CONNECT, STOMP and CONNECTED are never escaped, so any version parses CONNECT.
        self._parser = FrameParser(config.limits, "1.2")
        self._translator: FrameTranslator | None = None
        self.send_interval_ms = self.receive_interval_ms = 0  # agreed heart-beats we send, expect (0: none)
        self.connect_proposed = self.disconnect_proposed = False
        self._connected_sent = False
        self.authenticating = False  # a passcode check is under way: hold what the client sends
        self._pending_connect: _PendingConnect | None = None
        self._held: list[Frame] = []
        self._held_error: ProtocolError | None = None
        self._principal: Principal | None = None  # who CONNECT authenticated
        self._authorizing = host.security.authorizing
        self._authorization = SessionAuthorization(host)  # the ACL's checks (raftmq.server.stomp.authorization)
        self._buffered = 0  # this session's share of the node's unfinished-frame budget
        # What the client sent before its CONNECT was handled, for a follower to replay to
        # the leader (None: not kept: redirect mode, or more than PREFIX_MAX_BYTES).
        self._before_connect: list[bytes] | None = [] if config.follower_clients != REDIRECT else None
        self._before_connect_bytes = 0
        self._adoption, self._received_any = False, False  # the first bytes were an adoption's (ADOPT_PREFIX)

    # ---- events in -------------------------------------------------------------------------

    def receive(self, data: bytes, now_ms: int) -> list[Decision]:
        """Bytes from the client. Raises only on a bug (the shell closes the connection)."""
        if not self.state.reading:
            return []  # after an ERROR or DISCONNECT nothing more is read
        if self.state == SessionState.AWAIT_CONNECT:
            if not self._received_any:
                self._received_any, self._adoption = True, data.startswith(ADOPT_PREFIX)
            if self._before_connect is not None:
                self._keep_for_relay(data)
        error: ProtocolError | None = None
        try:
            frames = self._parser.feed(data)
        except ProtocolError as exc:
            # Frames completed before the malformed one in this chunk are still processed.
            frames = self._parser.frames_before_error
            error = exc
        if error is None and not self._account_buffered(self._parser.buffered):
            note = Note("client.refused", {"reason": "unfinished-frame budget", "buffered": self._parser.buffered})
            return [note, *self.fail("server busy", "too much unfinished input buffered on this node; try again later")]
        if error is None and not frames and self.state == SessionState.AWAIT_CONNECT:
            limit = self.host.config.max_connect_frame_bytes
            if self._parser.buffered > limit and not self._adoption:
                return self.fail("frame too large", f"a CONNECT frame is at most {limit} bytes")
        decisions: list[Decision] = []
        if frames and self.state == SessionState.AWAIT_CONNECT and not self.authenticating:
            # The parser reads frames pipelined behind CONNECT under the version it negotiates.
            decisions += self._connect(frames[0], now_ms)
            frames = frames[1:]
        if self.authenticating:
            self._held.extend(frames)
            self._held_error = self._held_error or error
            return decisions
        self._frames(frames, error, now_ms, decisions)
        return decisions

    def login_checked(self, principal: Principal | None, now_ms: int) -> list[Decision]:
        """The answer to `CheckLogin`; then the frames held meanwhile are handled."""
        self.authenticating = False
        held, error = self._held, self._held_error
        self._held, self._held_error = [], None
        pending, self._pending_connect = self._pending_connect, None
        if self.state != SessionState.AWAIT_CONNECT or pending is None:
            return []  # the client went away (or half-closed) meanwhile
        decisions = self._accept(pending, principal, now_ms)
        if self.state.reading:
            self._frames(held, error, now_ms, decisions)
        return decisions

    def connect_committed(self, term: int = 0) -> tuple[bytes | None, bool]:
        """Our Connect was applied: the CONNECTED frame to write (None: already written, or
        closed), and whether the session just opened (heart-beat timers start). Also when a
        frame pipelined behind CONNECT already failed or disconnected, so the client learns
        the session it had."""
        if self.state == SessionState.CLOSED or self._connected_sent:
            return None, False
        self._connected_sent = True
        config = self.host.config
        offer = (config.heartbeat_send_ms, config.heartbeat_receive_ms)
        view = config.core.cluster  # in a cluster of groups, the group's name too (GROUP_HEADER)
        frame = connected_frame(self.version, offer, self.session_id, SERVER_HEADER, term,
                                view.group if view is not None else None)
        if self.state != SessionState.CONNECTING:
            return frame, False
        self.state = SessionState.OPEN
        return frame, True

    def half_closed(self) -> None:
        """The client closed its sending side: nothing more comes; what it sent still commits."""
        if self.state.reading:
            self.state = SessionState.DISCONNECTING

    def refused_before_stomp(self) -> None:
        """The shell answered the connection itself, in HTTP, before any STOMP was read (a
        plain client on a WebSocket-only port, one handshake too many): the session ends there."""
        if not self.state.ended:
            self.state = SessionState.FAILED

    def closed(self, now_ms: int) -> list[Decision]:
        """The connection is gone. An abnormal end proposes the Disconnect, so open
        transactions abort and unacked deliveries go back to their queues."""
        self.state = SessionState.CLOSED
        self._account_buffered(0)
        if self.connect_proposed and not self.disconnect_proposed:
            self.disconnect_proposed = True
            return [Propose([Disconnect(self.session_id, now_ms)])]
        return []

    def fail(self, message: str, detail: str = "", receipt_id: str | None = None,
             extra: dict[str, str] | None = None) -> list[Decision]:
        """Enter FAILED and hand out the ERROR frame (nothing, if already failed). A message of a
        forwarded batch is refused as its batch, with the message's index."""
        if self.state.ended:
            return []
        self.state = SessionState.FAILED
        inner = None if receipt_id is None else parse_inner(receipt_id)
        if inner is not None:
            receipt_id = inner[0]
            extra = {**(extra or {}), BATCH_INDEX_HEADER: str(inner[1])}
        return [Refuse(error_frame(message, detail, self.version, receipt_id, extra), message, detail)]

    def receipt_for(self, receipt_id: str) -> str | None:
        """The receipt id a committed command's RECEIPT names (None: write none). A forwarded
        batch (raftmq.routing.forward_batch) gets one RECEIPT, for its last message, and none
        once the session failed: a message before it was refused and the ERROR says which."""
        inner = parse_inner(receipt_id)
        if inner is None:
            return receipt_id
        receipt, index, count = inner
        return receipt if index == count - 1 and not self.state.ended else None

    def adopted(self, ticket: Ticket | None, refusal: str, now_ms: int) -> list[Decision]:
        """The answer to `Adopt`: this node now serves `ticket`'s session (its core holds its
        subscriptions, deliveries and transactions), or refuses it (`refusal`). The session
        takes the ticket's state and id; the commands the old leader could not propose are
        proposed first, then the frames that followed the ticket."""
        self.authenticating = False
        held, error = self._held, self._held_error
        self._held, self._held_error = [], None
        if self.state != SessionState.AWAIT_CONNECT:
            return []  # the old leader went away meanwhile
        if ticket is None:
            return self.fail(REFUSED, refusal)
        self.session_id = ticket.session_id
        self.version = ticket.version
        self._parser.version = ticket.version
        self.send_interval_ms, self.receive_interval_ms = ticket.send_interval_ms, ticket.receive_interval_ms
        self.cluster_connection = ticket.cluster_connection
        self._principal = Principal(ticket.principal, frozenset(ticket.groups))
        translator = self._new_translator(ticket.version, ticket.client_id)
        translator.transactions = set(ticket.transactions)
        translator.subscriptions = set(ticket.subscriptions)
        translator.browsers = set(ticket.browsers)
        self._translator = translator
        self.state = SessionState.OPEN
        self.connect_proposed = self._connected_sent = True
        decisions: list[Decision] = []
        commands = decode_batch(ticket.commands) if ticket.commands else []
        if commands:
            decisions.append(Propose(commands))
        self._frames(held, error, now_ms, decisions)
        return decisions

    def ticket(self, commands: list[Command], peer: str, now_ms: int, hops: int) -> Ticket | None:
        """This session's state for its successor, with `commands` (read, not proposed); None
        when it cannot be handed over (not open, or a passcode check under way)."""
        translator, principal = self._translator, self._principal
        if self.state != SessionState.OPEN or self.authenticating or translator is None or principal is None:
            return None
        return Ticket(
            self.session_id, self.version, self.send_interval_ms, self.receive_interval_ms, self.cluster_connection,
            principal.name, tuple(sorted(principal.groups)), translator.client_id,
            tuple(sorted(translator.transactions)), tuple(sorted(translator.subscriptions)),
            tuple(sorted(translator.browsers)), peer,
            encode_batch(commands) if commands else b"", now_ms, hops,
        )

    def unfinished(self) -> bytes:  # the bytes of a frame the client began and has not finished
        return self._parser.unfinished()

    def handed_over(self, local_id: str) -> None:
        """Another node serves this session now (or parked it): this connection, `local_id`, proposes nothing."""
        self.session_id = local_id
        self.disconnect_proposed = True
        self.relayed()

    def relayed(self) -> None:
        self.state = SessionState.RELAYED
        self._account_buffered(0)  # what the parser held is replayed, not buffered here

    # ---- CONNECT -----------------------------------------------------------------------------

    def _connect(self, frame: Frame, now_ms: int) -> list[Decision]:
        if frame.command not in ("CONNECT", "STOMP"):
            return self.fail("expected CONNECT", f"the first frame must be CONNECT or STOMP, got {frame.command}")
        if frame.get(ADOPT_HEADER) is not None or frame.get(RESUME_HEADER) is not None:
            return self._adopt(frame, now_ms)
        self.via_relay = frame.get(RELAYED_HEADER) is not None
        try:
            version = negotiate_version(frame.get("accept-version"))
            client_heart_beat = parse_heart_beat(frame.get("heart-beat"))
        except ProtocolError as exc:
            return self.fail(exc.message, exc.detail or exc.message, extra={"version": "1.0,1.1,1.2"})
        pending = _PendingConnect(frame, version, client_heart_beat.send_ms, client_heart_beat.receive_ms)
        login, passcode = frame.get("login"), frame.get("passcode")
        decided = self.host.security.quick_login(login, passcode)
        if decided is True:
            self.authenticating = True
            self._pending_connect = pending
            return [CheckLogin(login, passcode)]
        return self._accept(pending, None if decided is False else decided, now_ms)

    def _adopt(self, frame: Frame, now_ms: int) -> list[Decision]:
        """Another member hands a session over, or resumes one parked here: check it, then hold
        what follows until the shell has claimed the session (`adopted`)."""
        try:
            request = read_adoption(frame, self.host.hand_over_secret, now_ms)
        except ProtocolError as exc:
            return [Note("client.adoption_refused", {"reason": exc.detail}), *self.fail(exc.message, exc.detail)]
        if not self.host.is_leader:
            hint = self.host.leader_hint
            return self.fail(REFUSED, f"this node does not lead its group; leader: {hint or 'unknown'}")
        self._before_connect = None
        self.authenticating = True  # what follows the ticket waits, as behind a passcode check
        return [Adopt(request.ticket, request.session_id, request.offset, request.notice)]

    def _new_translator(self, version: str, client_id: str | None) -> FrameTranslator:
        view = self.host.config.core.cluster
        if view is None:
            return FrameTranslator(self.session_id, version, client_id, frozenset(), None, self.cluster_connection)
        pullable = frozenset(sf_queue(n) for n in view.neighbours if view.pulled_by(n))
        return FrameTranslator(self.session_id, version, client_id, pullable, view.group, self.cluster_connection,
                               view.accepts_edges)

    def _accept(self, pending: _PendingConnect, principal: Principal | None, now_ms: int) -> list[Decision]:
        frame = pending.frame
        if principal is None:
            note = Note("client.login_refused", {"login": frame.get("login")})
            return [note, *self.fail(ACCESS_REFUSED, "invalid login or passcode")]
        self._principal = principal
        host = self.host
        before_connect, self._before_connect = self._before_connect, None
        if not host.is_leader:
            if before_connect is not None and not redirect_wanted(host.config.follower_clients, frame):
                self.relayed()
                return [RelayToLeader(b"".join(before_connect))]
            hint = host.leader_hint
            detail = f"this node does not serve clients now; leader: {hint or 'unknown'}"
            return self.fail("not the leader", detail, extra={"leader": hint} if hint else None)
        self.cluster_connection = frame.get(BRIDGE_CONNECT_HEADER) is not None
        if host.draining is not None and not self.cluster_connection:
            detail = f"this group is being drained (scale-down); connect to another: {host.draining}"
            return self.fail("group draining", detail)
        version = pending.version
        self.version = version
        self._parser.version = version
        config = host.config
        ours = HeartBeat(config.heartbeat_send_ms, config.heartbeat_receive_ms)
        agreed = agree_heartbeats(ours, HeartBeat(pending.client_send, pending.client_receive))
        self.send_interval_ms, self.receive_interval_ms = agreed.send_ms, agreed.receive_ms
        client_id = frame.get("client-id")
        self._translator = self._new_translator(version, client_id)
        self.state = SessionState.CONNECTING
        self.connect_proposed = True
        login = principal.name if host.security.authenticating else frame.get("login")
        return [
            Propose([Connect(self.session_id, now_ms, login, client_id)]),
            Note("client.connecting", {"version": version, "client_id": client_id}),
        ]

    def _keep_for_relay(self, data: bytes) -> None:
        assert self._before_connect is not None
        self._before_connect_bytes += len(data)
        if self._before_connect_bytes > PREFIX_MAX_BYTES:
            self._before_connect = None  # too much to replay: a follower redirects this one
        else:
            self._before_connect.append(data)

    def _account_buffered(self, buffered: int) -> bool:
        """Move this session's share of the node's unfinished-frame budget to `buffered` bytes;
        False (share unchanged) when growing it would pass the budget."""
        if not self.host.reserve_unfinished(buffered - self._buffered):
            return False
        self._buffered = buffered
        return True

    # ---- frames after CONNECT ------------------------------------------------------------------

    def _frames(self, frames: list[Frame], error: ProtocolError | None, now_ms: int, decisions: list[Decision]) -> None:
        """Append to `decisions` what these frames (and the parser's `error`) call for."""
        receipt_id: str | None = None  # of the offending frame, when the frame itself was readable
        if frames and self.state in (SessionState.CONNECTING, SessionState.OPEN):
            commands, refused = self._translate(frames, now_ms, decisions)
            if commands:
                decisions.append(Propose(commands))
            if refused is not None:
                error, receipt_id = refused
        if error is not None and self.state.reading:
            decisions += self.fail(error.message, error.detail, receipt_id or error.receipt)

    def _translate(
        self, frames: list[Frame], now_ms: int, notes: list[Decision]
    ) -> tuple[list[Command], tuple[ProtocolError, str | None] | None]:
        """Translate until the first bad frame; return the commands and that frame's error."""
        translator = self._translator
        assert translator is not None
        commands: list[Command] = []
        authorizing = self._authorizing
        for frame in frames:
            try:
                bridge_send = frame.command == "SEND" and self.cluster_connection
                if bridge_send and frame.get("destination") == BATCH_DESTINATION:
                    self._batch(frame, now_ms, commands, notes)
                    continue
                command = translator.translate(frame, now_ms)
                if authorizing:
                    self._authorization.check(self._principal, command, notes)
            except BatchError as exc:
                return commands, (exc, exc.receipt if exc.index is not None else frame.get("receipt"))
            except ProtocolError as exc:
                return commands, (exc, frame.get("receipt"))
            commands.append(command)
            if type(command) is Disconnect:
                self.state = SessionState.DISCONNECTING
                self.disconnect_proposed = True
                break
        return commands, None

    def _batch(self, frame: Frame, now_ms: int, commands: list[Command], notes: list[Decision]) -> None:
        """A bridge's batch of forwarded messages: each translated and authorized as a SEND of
        its own, with an inner receipt (raftmq.routing.forward_batch); appended to `commands`
        up to the first refused one, which raises `BatchError` naming it."""
        if frame.get("transaction") is not None:
            raise BatchError("invalid batch", "a forwarded batch cannot be part of a transaction", None)
        receipt = frame.get("receipt")
        items = decode(frame.body)
        limits = self.host.config.limits
        translator = self._translator
        assert translator is not None
        count = len(items)
        for index, item in enumerate(items):
            inner = inner_receipt(receipt, index, count) if receipt is not None else None
            try:
                destination, headers, body = message(item, index, limits)
                wire = [("destination", destination), *headers]
                if inner is not None:
                    wire.insert(1, ("receipt", inner))
                command = translator.translate(Frame("SEND", wire, body), now_ms)
                if self._authorizing:
                    self._authorization.check(self._principal, command, notes)
            except ProtocolError as exc:
                refused = BatchError(exc.message, f"message {index} of the batch: {exc.detail}", index)
                refused.receipt = inner
                raise refused from None
            commands.append(command)
