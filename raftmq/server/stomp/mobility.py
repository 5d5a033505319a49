"""Session mobility at the relay's end, sans-I/O: one machine per relayed connection.

A relay pipes a client's connection to the node that serves its session (raftmq.server.stomp.relay
is its asyncio shell). It is one of three kinds (`Kind`): a follower's relay to its group's leader,
a deposed leader's relay of a session it handed over to its successor (the ticket goes first), or
a relay that moved and resumes the session parked at the new leader (the resume request goes first).
Whatever the kind, it is in one of the `State`s, and `TRANSITIONS` is every move between them: the
events (`Connected`, `ClientData`, `LeaderSeen`, ...) come in through `RelayMachine.handle`, and the
decisions (`ToUpstream`, `Connect`, `ResumeHere`, ...) come out for the shell to carry out.
docs/mobility.md draws the table (`diagram()`), and a test keeps the drawing equal to the table.

The story the table tells:
- CONNECTING: the shell looks for the node to pipe to and opens a connection; what the client
  sends meanwhile waits (the client is not read from). Unreachable for too long: the client gets
  `ERROR not the leader` (a follower's), or the hand-over's refusal.
- ANSWERING: a ticket or a resume request went first; the successor's answer is read here
  (raftmq.server.stomp.adoption): taken, the client is piped there (RELAYING); a session parked on
  arrival sends its client off with where to resume it (its node goes); refused, the client gets
  the refusal.
- RELAYING: bytes go both ways, unread. The node's view of the leader comes in as `LeaderSeen`:
  a relay to a deposed leader that holds the client's own socket moves (MOVING); one that cannot
  move is closed once the deposed leader has been silent for `DEPOSED_GRACE_SECONDS`.
- MOVING: half-closed towards the deposed leader, which parks the session once it has read all the
  client sent and closes once all for the client is out; then the relay resumes the session at the
  new leader (CONNECTING again, as a resume), or serves it here if this node leads now.
- FAREWELL: this node goes; the relay half-closed towards the successor, which parks the session;
  when it closes, the client gets the ERROR naming the leader, with where to resume its session.
- CLOSING: the client was told to close; ENDED once its side is gone, and the upstream with it.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from raftmq.errors import ProtocolError, RaftmqError
from raftmq.protocol.codec import first_frame
from raftmq.server.stomp.adoption import NotTaken, farewell_frame, read_answer, resume_frame
from raftmq.server.stomp.frames import error_frame
from raftmq.server.stomp.relay_events import (
    ClientData,
    ClientEof,
    ClientLost,
    ClientReading,
    CloseClient,
    CloseUpstream,
    Connect,
    Connected,
    Count,
    Decision,
    Ended,
    Event,
    Farewell,
    HalfCloseUpstream,
    LeaderSeen,
    Log,
    Release,
    ResumeHere,
    SendOff,
    ToClient,
    ToUpstream,
    Unreachable,
    UpstreamData,
    UpstreamLost,
)

# How long a follower looks for a reachable leader for a new client: past a leader election
# (300-600 ms timeouts by default, a split vote adds a round) with room to spare.
LEADER_WAIT_SECONDS = 2.0
# A deposed leader tries this long to reach its successor with a session's ticket (and a relay
# that moved, to reach the new leader with its resume request).
ADOPT_CONNECT_SECONDS = 1.0
# How long a relay to a deposed leader that does not move stays open after the change was seen
# (counted from the deposed leader's last bytes); so does a move the deposed leader does not answer.
DEPOSED_GRACE_SECONDS = 0.5
# How long a relay that moved waits for the new leader to answer its resume request (counted from
# the change seen, or the new leader's last bytes): the new leader may hold the session's claim
# for up to a second (raftmq.server.stomp.takeover, CLAIM_WAIT_SECONDS) before it answers.
RESUME_ANSWER_SECONDS = 2.0
# A leader's CONNECTED is a few hundred bytes: past this without one, none is coming.
ANSWER_MAX_BYTES = 4096


class MobilityError(RaftmqError):
    """A relay machine was driven outside its table (a bug in the shell or the machine)."""


class Kind(Enum):
    FOLLOWER = "follower"  # a follower relays its client to the group's leader
    HAND_OVER = "hand-over"  # a deposed leader relays a session it handed to its successor
    RESUME = "resume"  # a relay that moved resumes the session parked at the new leader


class State(Enum):
    CONNECTING = "connecting"
    ANSWERING = "answering"
    RELAYING = "relaying"
    MOVING = "moving"
    FAREWELL = "farewell"
    CLOSING = "closing"
    ENDED = "ended"


_C, _A, _R, _M, _F, _X, _E = (State.CONNECTING, State.ANSWERING, State.RELAYING, State.MOVING, State.FAREWELL,
                              State.CLOSING, State.ENDED)

# (state, event) -> the states it may lead to. An event not listed for a state is refused
# (`MobilityError`); one that changes nothing lists the state itself.
TRANSITIONS: dict[tuple[State, type], frozenset[State]] = {
    (_C, Connected): frozenset({_A, _R}),
    (_C, Unreachable): frozenset({_X}),
    (_C, ClientData): frozenset({_C}),
    (_C, ClientEof): frozenset({_C}),
    (_C, ClientLost): frozenset({_E}),
    (_C, LeaderSeen): frozenset({_C, _X}),
    (_C, Farewell): frozenset({_C, _X}),
    (_A, ClientData): frozenset({_A}),
    (_A, ClientEof): frozenset({_A}),
    (_A, ClientLost): frozenset({_E}),
    (_A, UpstreamData): frozenset({_A, _R, _X}),
    (_A, UpstreamLost): frozenset({_X}),
    (_A, LeaderSeen): frozenset({_A, _X}),
    (_A, Farewell): frozenset({_A, _X}),
    (_R, ClientData): frozenset({_R}),
    (_R, ClientEof): frozenset({_R}),
    (_R, ClientLost): frozenset({_E}),
    (_R, UpstreamData): frozenset({_R}),
    (_R, UpstreamLost): frozenset({_X}),
    (_R, LeaderSeen): frozenset({_R, _M, _X}),
    (_R, Farewell): frozenset({_R, _F}),
    (_M, ClientData): frozenset({_M}),
    (_M, ClientEof): frozenset({_M}),
    (_M, ClientLost): frozenset({_E}),
    (_M, UpstreamData): frozenset({_M}),
    (_M, UpstreamLost): frozenset({_C, _E}),
    (_M, LeaderSeen): frozenset({_M, _X}),
    (_M, Farewell): frozenset({_M}),
    (_F, ClientData): frozenset({_F}),
    (_F, ClientEof): frozenset({_F}),
    (_F, ClientLost): frozenset({_E}),
    (_F, UpstreamData): frozenset({_F}),
    (_F, UpstreamLost): frozenset({_X}),
    (_F, LeaderSeen): frozenset({_F}),
    (_F, Farewell): frozenset({_F}),
    **{(_X, event): frozenset({_X}) for event in (Connected, Unreachable, ClientData, ClientEof, UpstreamData,
                                                      UpstreamLost, LeaderSeen, Farewell)},
    (_X, ClientLost): frozenset({_E}),
    **{(_E, event): frozenset({_E}) for event in (Connected, ClientData, ClientEof, ClientLost, UpstreamData,
                                                      UpstreamLost, LeaderSeen, Farewell)},
}


def named_session(head: bytes) -> str | None:
    """The session id the leader's first bytes, its CONNECTED, name ("": none, not a CONNECTED);
    None while they may yet."""
    try:
        first = first_frame(head)
    except ProtocolError:
        return ""
    if first is None:
        return None if len(head) < ANSWER_MAX_BYTES else ""
    frame, _end = first
    return (frame.get("session") or "") if frame.command == "CONNECTED" else ""


class RelayMachine:
    """One relayed connection's mobility. `kind` FOLLOWER: `prefix` is the client's first bytes
    (its CONNECT); HAND_OVER: `prefix` is the ticket, `target` the successor, `refusal` the ERROR
    the client gets if it is not taken, `outermost` this node holds the client's own socket, and
    `parked_at` (its node goes) the successor parks the session on arrival and the client resumes
    it from that offset; `own_socket`: the client's own socket, not another member's relay (whose
    half-close may be its move). `secret`: the group's hand-over secret (None: sessions never move);
    `own_address`: this node's client address."""

    def __init__(self, kind: Kind, prefix: bytes, *, version: str, secret: str | None, own_address: str | None,
                 stream_bytes: int = 0, client_eof: bool = False, target: str | None = None,
                 session_id: str | None = None, refusal: bytes = b"", outermost: bool = True,
                 parked_at: int | None = None, own_socket: bool = True) -> None:
        self.kind = kind
        self.state = State.CONNECTING
        self.version = version
        self.secret = secret
        self.own_address = own_address
        self.stream_bytes = stream_bytes  # bytes of the client's stream read (raftmq.server.stomp.adoption)
        self.client_eof = client_eof  # the client stopped sending (a follower's relay moving, before this node knew)
        self.target = target  # the node to connect to (None: the group's leader)
        self.leader: str | None = None  # the node piped to, once connected
        self.session_id = session_id  # learned from the leader's CONNECTED for a follower's ("": unknown)
        self.refusal = refusal
        self.outermost = outermost
        self.own_socket = own_socket  # the client's own socket (not another member's relay of it)
        self.parked_at = parked_at
        self.prefix = prefix  # what goes upstream first, then what the client sent until connected
        self.held = b""  # what the client sent while its session moves (after the resume's answer)
        self.half_close = False
        self.parks = False  # a farewell half-closed: the successor parks the session
        self._head = b""  # the start of the leader's CONNECTED, until it names the session
        self._answer = b""  # the successor's bytes until its answer is complete
        self._deposed_at: float | None = None
        self._upstream_heard = 0.0  # loop time of the upstream's last bytes
        self._upstream_open = False  # connected, and not lost since (the shell holds a transport)

    def start(self) -> list[Decision]:
        seconds = LEADER_WAIT_SECONDS if self.kind is Kind.FOLLOWER else ADOPT_CONNECT_SECONDS
        return [ClientReading(False), Connect(self.target, seconds)]

    @property
    def moving(self) -> bool:
        """Half-closed towards a deposed leader, or resuming at the new one (not yet answered)."""
        resuming = self.kind is Kind.RESUME and self.state in (State.CONNECTING, State.ANSWERING)
        return self.state is State.MOVING or resuming

    @property
    def recheck_at(self) -> float | None:
        """When (loop time) a relay that saw its leader deposed wants `LeaderSeen` again, for its
        grace; None when it waits for nothing."""
        if self._deposed_at is None or self.state in (State.CLOSING, State.ENDED):
            return None
        if not self.moving and self.kind is not Kind.FOLLOWER:
            return None  # a hand-over's relay is the deposed leader's own: no grace
        return max(self._deposed_at, self._upstream_heard) + self._grace()

    def _grace(self) -> float:
        resuming = self.kind is Kind.RESUME and self.state in (State.CONNECTING, State.ANSWERING)
        return RESUME_ANSWER_SECONDS if resuming else DEPOSED_GRACE_SECONDS

    @property
    def carries_hand_over(self) -> bool:
        """Relays a session this node handed to a successor (not moved since)."""
        return self.kind is Kind.HAND_OVER and self.state is not State.ENDED

    def handle(self, event: Event) -> list[Decision]:
        before = self.state
        allowed = TRANSITIONS.get((before, type(event)))
        if allowed is None:
            raise MobilityError(f"a relay in state {before.value} got {type(event).__name__}")
        decisions = _HANDLERS[type(event)](self, event) if before not in (State.CLOSING, State.ENDED) else \
            self._after_end(event)
        if self.state not in allowed:
            raise MobilityError(
                f"a relay in state {before.value} moved to {self.state.value} on {type(event).__name__}")
        return decisions

    # -- the handlers, one per event -----------------------------------------------------------

    def _connected(self, event: Connected) -> list[Decision]:
        self.leader, self.half_close, self._upstream_open = event.leader, event.half_close, True
        prefix, self.prefix = self.prefix, b""
        reading = {Kind.FOLLOWER: True, Kind.HAND_OVER: self.parked_at is None, Kind.RESUME: False}[self.kind]
        self.state = State.RELAYING if self.kind is Kind.FOLLOWER else State.ANSWERING
        decisions: list[Decision] = [ClientReading(reading), ToUpstream(prefix)]
        if self.client_eof and self.kind is not Kind.RESUME:  # (a resume's goes after what it held: `_moved`)
            decisions.append(self._forward_eof())
        decisions += [Count("relayed"), Log("client.relayed", {"leader": event.leader})]
        return decisions

    def _unreachable(self, event: Unreachable) -> list[Decision]:
        if self.kind is not Kind.FOLLOWER:
            return self._refuse_adoption(f"cannot reach the successor: {event.failure}")
        if event.leader is None:
            detail = f"no leader known after {LEADER_WAIT_SECONDS:g} s (an election, or no quorum)"
        else:
            detail = f"cannot relay to the leader {event.leader}: {event.failure}"
        self.state = State.CLOSING
        named = {"leader": event.leader} if event.leader else None
        frame = error_frame("not the leader", detail, self.version, None, named)
        return [Log("client.relay_failed", {"leader": event.leader, "detail": detail}), ToClient(frame), CloseClient()]

    def _refuse_adoption(self, why: str) -> list[Decision]:
        connected = self.state is not State.CONNECTING
        self.state = State.CLOSING
        decisions: list[Decision] = [
            Log("client.hand_over_failed", {"session": self.session_id, "leader": self.target, "detail": why}),
            ToClient(self.refusal), CloseClient(),
        ]
        if connected:
            self._upstream_open = False
            decisions.append(CloseUpstream())
        return decisions

    def _client_data(self, event: ClientData) -> list[Decision]:
        data = event.data
        self.stream_bytes += len(data)
        state = self.state
        if state is State.RELAYING or (state is State.ANSWERING and self.kind is Kind.HAND_OVER):
            return [ToUpstream(data)]  # (a hand-over's frames follow its ticket at once)
        if state is State.CONNECTING and self.kind is not Kind.RESUME:
            self.prefix += data
        else:  # moving, resuming, farewell: the client's reading is paused, a read under way lands here
            self.held += data
        return []

    def _client_eof(self, event: ClientEof) -> list[Decision]:
        self.client_eof = True
        if self.state is State.RELAYING or (self.state is State.ANSWERING and self.kind is Kind.HAND_OVER):
            return [self._forward_eof()]
        return []  # forwarded once connected (a move forwards it to the new leader after what it held)

    def _forward_eof(self) -> Decision:
        # The client stopped sending but still reads (its receipts): half-close towards the leader
        # too when the connection can (TLS cannot), else close it after the flush.
        return self._released(HalfCloseUpstream() if self.half_close else CloseUpstream())

    def _released(self, then: HalfCloseUpstream | CloseUpstream) -> Decision:
        """`then`, after the serving node heard that the client's side ended, where it would take
        the half-close for a move and park the session (one adopted there: a relay that moved, or
        a deposed leader's of its own client): its unacknowledged messages then go back at once."""
        adopted = self.kind is Kind.RESUME or (self.kind is Kind.HAND_OVER and self.parked_at is None)
        if (adopted and self.own_socket and self.outermost and self.state is State.RELAYING and self.half_close
                and self.leader and self.session_id and self.secret is not None):
            return Release(self.leader, self.session_id, then)
        return then

    def _client_lost(self, event: ClientLost) -> list[Decision]:
        connected = self.state is not State.CONNECTING  # (a resume connects anew: the old upstream is gone)
        # what the client sent still reaches it (after the notice of its end, unless it half-closed first)
        upstream = [CloseUpstream() if self.client_eof else self._released(CloseUpstream())] if connected else []
        self.state = State.ENDED
        return [*upstream, Ended(session_lost=True)]

    def _upstream_data(self, event: UpstreamData) -> list[Decision]:
        self._upstream_heard = event.now
        data = event.data
        if self.session_id is None:
            head = self._head + data
            self.session_id = named_session(head)
            self._head = head if self.session_id is None else b""
        decisions: list[Decision] = []
        if self.state is State.ANSWERING:
            self._answer += data
            answer = read_answer(self._answer, self.session_id or "")
            if answer is None:
                return []
            if isinstance(answer, NotTaken):
                return self._refuse_adoption(answer.why)
            data, self._answer = self._answer[answer.start:], b""
            self.state = State.RELAYING
            if self.kind is Kind.RESUME:
                decisions += self._moved()
            else:
                decisions.append(Log("client.handed_over", {"session": self.session_id, "leader": self.target,
                                                            "parked": self.parked_at is not None}))
                if self.parked_at is not None:
                    return decisions + self._send_off(self.parked_at, event.now_ms)
        if data:
            decisions.append(ToClient(data))
        return decisions

    def _moved(self) -> list[Decision]:
        held, self.held, self._deposed_at = self.held, b"", None
        decisions: list[Decision] = [Count("moved"),
                                     Log("client.relay_moved", {"session": self.session_id, "leader": self.leader})]
        if held:
            decisions.append(ToUpstream(held))
        decisions.append(ClientReading(True))
        if self.client_eof:  # the client's half-close landed while it moved: after what it sent
            decisions.append(self._forward_eof())
        return decisions

    def _upstream_lost(self, event: UpstreamLost) -> list[Decision]:
        state, self._upstream_open = self.state, False
        if state is State.MOVING:
            return self._resume(event.now_ms)  # everything for the client is out: resume it
        if state is State.ANSWERING:
            return self._refuse_adoption("the successor closed the connection before it answered")
        if state is State.FAREWELL:
            return self._send_off(self._resume_offset(), event.now_ms)
        self.state = State.CLOSING
        return [CloseClient()]

    def _resume(self, now_ms: int) -> list[Decision]:
        leader, session_id, secret = self.target, self.session_id, self.secret
        assert leader is not None and session_id and secret is not None  # as `_may_move` required
        if leader == self.own_address:  # this node leads now: it serves the session itself
            held, self.held = self.held, b""
            self.state = State.ENDED
            return [Count("moved"), Log("client.relay_moved", {"session": session_id, "leader": leader}),
                    Ended(session_lost=False),
                    ResumeHere(session_id, held, self.stream_bytes - len(held), self.client_eof)]
        self.kind, self.state, self._deposed_at = Kind.RESUME, State.CONNECTING, None  # its own wait starts
        self.refusal = error_frame("not the leader", f"the session could not be moved to the leader {leader}",
                                   self.version, None, {"leader": leader})
        self.prefix, self.parked_at, self.outermost = resume_frame(session_id, secret, now_ms), None, True
        return [Connect(leader, ADOPT_CONNECT_SECONDS)]

    def _leader_seen(self, event: LeaderSeen) -> list[Decision]:
        leader, moving = event.leader, self.moving
        if not moving and (self.leader is None or leader is None or leader == self.leader):
            self._deposed_at = None
            return []
        if self._deposed_at is None:
            self._deposed_at = event.now
        if not moving and leader is not None and self._may_move():
            self.state, self.target = State.MOVING, leader
            moving_to = {"session": self.session_id, "leader": self.leader, "new_leader": leader}
            return [Log("client.relay_moving", moving_to), ClientReading(False), HalfCloseUpstream()]
        if not moving and self.kind is not Kind.FOLLOWER:
            return []  # a hand-over's relay is the deposed leader's own: it keeps talking
        if event.now - max(self._deposed_at, self._upstream_heard) < self._grace():
            return []
        if self.kind is Kind.RESUME and self.state is not State.MOVING:
            return self._refuse_adoption("the new leader did not answer the resume request")
        self.state = State.CLOSING
        return [Log("client.relay_closed", {"session": self.session_id, "leader": self.leader, "new_leader": leader}),
                CloseClient()]

    def _may_move(self) -> bool:
        return (self.state is State.RELAYING and self.half_close and not self.client_eof and bool(self.session_id)
                and self.secret is not None and self.outermost)

    def _farewell(self, event: Farewell) -> list[Decision]:
        if self.kind is Kind.FOLLOWER:
            return self._follower_farewell()
        if self.state is State.MOVING or self.state is State.FAREWELL:
            return []  # a move goes on
        if self.state is not State.RELAYING:
            self.state = State.CLOSING
            return [CloseClient()]
        self.state = State.FAREWELL
        if self.half_close:
            self.parks = True
            return [ClientReading(False), HalfCloseUpstream()]
        return [ClientReading(False), CloseUpstream()]

    def _follower_farewell(self) -> list[Decision]:
        """A follower's relay whose node goes: the leader hears so first (a notice), parks the
        session at the half-close, and the client resumes it there (`_send_off` once the leader
        closes). One that cannot (not relaying yet, no half-close over TLS, the client's own
        half-close, no secret) closes with the node's other connections."""
        if not (self.state is State.RELAYING and self.half_close and not self.client_eof and self.leader
                and self.session_id and self.secret is not None):
            return []
        self.state, self.parks = State.FAREWELL, True
        return [ClientReading(False), Release(self.leader, self.session_id, HalfCloseUpstream(), parks=True)]

    def _send_off(self, offset: int | None, now_ms: int) -> list[Decision]:
        """This node goes: the client hears where the leader is and, with `offset`, where its session
        waits for it to resume (parked as the relay's side closed, or as it arrived)."""
        self.state = State.CLOSING
        leader, session_id = self.target or self.leader or "", self.session_id or ""
        frame = self.refusal if offset is None else farewell_frame(session_id, leader, offset, self.version,
                                                                   self.secret or "", now_ms)
        return [Log("client.error", {"session": session_id, "message": "not the leader",
                                     "detail": "the node goes (stopped, or removed from its group)", "leader": leader,
                                     "resume_offset": offset}), SendOff(frame)]

    def _resume_offset(self) -> int | None:
        """How much of the client's stream the session read, when the client may resume it (its own socket)."""
        if not (self.outermost and self.parks) or self.secret is None:
            return None
        return self.stream_bytes - len(self.held)

    def _after_end(self, event: Event) -> list[Decision]:
        """CLOSING: only the client's loss counts (ENDED: the upstream is closed too, where one is
        open: a relay closed for its silent deposed leader, or a farewell before the answer);
        what else comes is dropped."""
        if self.state is State.CLOSING and isinstance(event, ClientLost):
            self.state = State.ENDED
            upstream: list[Decision] = [CloseUpstream()] if self._upstream_open else []
            return [*upstream, Ended(session_lost=True)]
        if isinstance(event, UpstreamLost):
            self._upstream_open = False
        elif isinstance(event, Connected):
            return [CloseUpstream()]  # the client left while the shell connected
        return []


_HANDLERS: dict[type, Any] = {
    Connected: RelayMachine._connected,
    Unreachable: RelayMachine._unreachable,
    ClientData: RelayMachine._client_data,
    ClientEof: RelayMachine._client_eof,
    ClientLost: RelayMachine._client_lost,
    UpstreamData: RelayMachine._upstream_data,
    UpstreamLost: RelayMachine._upstream_lost,
    LeaderSeen: RelayMachine._leader_seen,
    Farewell: RelayMachine._farewell,
}


def diagram() -> str:
    """The table as a Mermaid state diagram (docs/mobility.md shows it)."""
    return draw(TRANSITIONS, list(State), State.CONNECTING, State.ENDED)


def draw(table: dict[tuple[Any, type], frozenset[Any]], states: list[Any], start: Any, end: Any) -> str:
    """A transition table as a Mermaid state diagram: an edge per (state, next state), labelled
    with the events that take it."""
    lines = ["stateDiagram-v2", f"    [*] --> {start.name}"]
    edges: dict[tuple[Any, Any], list[str]] = {}
    for (state, event), targets in table.items():
        for target in sorted(targets, key=states.index):
            if target is not state:
                edges.setdefault((state, target), []).append(event.__name__)
    for (state, target), events in edges.items():
        lines.append(f"    {state.name} --> {target.name}: {', '.join(events)}")
    lines.append(f"    {end.name} --> [*]")
    return "\n".join(lines) + "\n"
