"""A client's session handed from a deposed leader to its successor, sans-I/O: the ticket and
the answer, as bytes.

At a leadership transfer the old leader (it stays up) does not end its clients' sessions. For
each one it opens a connection to the successor's client port and writes `ticket_frame`: a
CONNECT whose `raftmq.adopt` header names the session and whose body carries what the
successor's core does not hold: the STOMP state the session negotiated (version, agreed
heart-beats, the principal CONNECT authenticated, client id, open transaction and
subscription ids) and the commands the session had read but could not propose before the
leadership moved. Subscriptions, unacknowledged deliveries and transactions themselves are in
the replicated core already.

The body is signed with the group's secret (HMAC-SHA256, `raftmq.adopt-mac`) and stamped with
the time: only a member of the group can hand a session over, and a ticket is good for
`TICKET_MAX_AGE_MS`. A session handed over again is relayed again (through the node that holds
the client's socket, then the one it was handed to) until that node's relay moves (below): up to
`MAX_HOPS` relays. The successor answers `adopted_frame` (a CONNECTED the old leader reads
and does not pass on) or an ERROR; from then on the old leader copies bytes both ways, like a
follower's relay (raftmq.server.stomp.relay), and the client sees nothing of it.

A relay can also shorten the path: the node that holds the client's socket (a follower, or a
deposed leader) half-closes its connection towards a leader that is no longer the group's; the
node serving the session reads that end, parks the session (it keeps its ticket and what its
entries do for it: raftmq.server.takeover) and closes; the relay then writes `resume_frame` to
the leader: a CONNECT whose `raftmq.resume` header names the session, signed and stamped like a
ticket, and the session carries on there, one relay from its client.

A node that goes (stopped, or removed from its group) has the sessions whose client holds a
socket to it parked at the successor (their tickets, with no hops, are parked as they arrive;
one relayed from an earlier hand-over is parked by a half-close, as above), and tells the
client: the ERROR `not the leader` it ends the connection with carries the resume request's
headers (`resume_headers`) and `raftmq.resume-offset`, how many bytes of the client's stream the
session read. A client that kept what it sent (raftmq's own: raftmq.client.resume) sends that
CONNECT to the leader with the offset, and its bytes from that offset once the answer came: the
session carries on, on the client's own socket.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from typing import Any

import msgpack

from raftmq.errors import ProtocolError
from raftmq.protocol.codec import encode_frame, first_frame
from raftmq.protocol.frame import (
    ADOPTED_HEADER,
    RESUME_HEADER,
    RESUME_MAC_HEADER,
    RESUME_OFFSET_HEADER,
    RESUMED_AT_HEADER,
    Frame,
)
from raftmq.server.stomp.frames import error_frame

ADOPT_HEADER = "raftmq.adopt"
MAC_HEADER = "raftmq.adopt-mac"
# What an adoption's first bytes are (the header comes first): the successor lifts the CONNECT
# size limit for it, since its body may carry the commands of a busy producer.
ADOPT_PREFIX = f"CONNECT\n{ADOPT_HEADER}:".encode()
TICKET_MAX_AGE_MS = 10_000
# Each hand-over of a session that was handed over before adds a relay to its path, until the
# relay holding the client's socket moves to the new leader (over TLS it cannot): past this many,
# the session is closed with ERROR `not the leader` instead, and its client reconnects.
MAX_HOPS = 3
TICKET_FORMAT = 1
# A ticket on the wire: [TICKET_FORMAT, then these fields' values in this order]. Pinned here, not
# read from `Ticket`'s field order: reordering the class must not swap two fields on the wire, and
# a field added there is a new format (members of two versions then refuse each other's tickets by
# name rather than misread them).
TICKET_FIELDS: tuple[str, ...] = (
    "session_id", "version", "send_interval_ms", "receive_interval_ms", "cluster_connection", "principal", "groups",
    "client_id", "transactions", "subscriptions", "browsers", "peer", "commands", "issued_ms", "hops",
)
REFUSED = "adoption refused"


@dataclass(frozen=True, slots=True)
class Ticket:
    session_id: str
    version: str
    send_interval_ms: int
    receive_interval_ms: int
    cluster_connection: bool
    principal: str | None  # the name CONNECT authenticated (None: anonymous)
    groups: tuple[str, ...]  # the principal's groups (the ACL)
    client_id: str | None
    transactions: tuple[str, ...]
    subscriptions: tuple[str, ...]
    browsers: tuple[str, ...]
    peer: str  # the client's address, as the old leader saw it (logs, the connection list)
    commands: bytes  # raftmq.replication.command_codec batch of what was read, not proposed (b"": none)
    issued_ms: int
    # Relays between the client and the successor: 1 for a client of the old leader's own; 0 when
    # the old leader goes: the successor parks the session as it arrives, the client resumes it.
    hops: int


def sign(secret: str, body: bytes) -> str:
    return hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def ticket_frame(ticket: Ticket, secret: str) -> bytes:
    body = bytes(msgpack.packb([TICKET_FORMAT, *(getattr(ticket, name) for name in TICKET_FIELDS)]))
    # The adopt header first: ADOPT_PREFIX. The body has a content-length (it is binary).
    headers = [(ADOPT_HEADER, ticket.session_id), (MAC_HEADER, sign(secret, body)), ("accept-version", ticket.version)]
    return encode_frame(Frame("CONNECT", headers, body), "1.2")


def read_ticket(frame: Frame, secret: str | None, now_ms: int) -> Ticket:
    """The ticket in an adoption CONNECT; raises ProtocolError(`adoption refused`) for one this
    group did not sign, one out of date, or one that does not parse."""
    if secret is None:
        raise ProtocolError(REFUSED, "this node takes no sessions over (no group secret)")
    mac = frame.get(MAC_HEADER) or ""
    if not hmac.compare_digest(mac, sign(secret, bytes(frame.body))):
        raise ProtocolError(REFUSED, "the ticket is not signed with this group's secret")
    try:
        fields: list[Any] = msgpack.unpackb(frame.body)
        if fields[0] != TICKET_FORMAT:
            raise ValueError(f"ticket format {fields[0]}")
        values = dict(zip(TICKET_FIELDS, fields[1:], strict=True))
        for name in ("groups", "transactions", "subscriptions", "browsers"):
            values[name] = tuple(values[name])
        ticket = Ticket(**values)
    except (ValueError, TypeError, IndexError, msgpack.UnpackException) as exc:
        raise ProtocolError(REFUSED, f"unreadable ticket: {exc}") from None
    if ticket.session_id != frame.get(ADOPT_HEADER):
        raise ProtocolError(REFUSED, "the ticket names another session")
    if abs(now_ms - ticket.issued_ms) > TICKET_MAX_AGE_MS:
        raise ProtocolError(REFUSED, f"the ticket is out of date (issued {now_ms - ticket.issued_ms} ms ago)")
    return ticket


def resume_headers(session_id: str, secret: str, now_ms: int) -> list[tuple[str, str]]:
    """A resume request for the session parked at the leader, signed by a member of the group."""
    stamp = f"{session_id}\n{now_ms}".encode()
    return [(RESUME_HEADER, session_id), (RESUMED_AT_HEADER, str(now_ms)), (RESUME_MAC_HEADER, sign(secret, stamp))]


def farewell_frame(session_id: str, leader: str, offset: int, version: str, secret: str, now_ms: int) -> bytes:
    """A going node's ERROR `not the leader` to the client of a session parked at `leader`,
    with what the client needs to resume it: the request, and how much of its stream was read."""
    extra = {"leader": leader, RESUME_OFFSET_HEADER: str(offset), **dict(resume_headers(session_id, secret, now_ms))}
    detail = (f"this node goes (stopped, or removed from its group); leader: {leader}, "
              "where the session waits to be resumed")
    return error_frame("not the leader", detail, version, None, extra)


# A relay's notices (`release_frame`) reach the shell as a resume request with one of these as
# its `notice`: RELEASE, the client ended its side; PARK, the follower relaying the session goes
# (it stops), so the leader parks the session at the half-close that follows, for the client to
# resume there itself.
RELEASE = "release"
RELEASE_HEADER = "raftmq.release"
PARK = "park"
PARK_HEADER = "raftmq.park"


def release_frame(session_id: str, secret: str, now_ms: int, parks: bool = False) -> bytes:
    """Tell the leader that the client of `session_id`, adopted there, ended its side: the relay
    holding the client's socket half-closes or closes next, and that is the client's own end, not
    a move (the session ends at once instead of waiting parked). Signed as a resume request.
    `parks`: instead, the follower relaying the session goes; its half-close asks for a park."""
    notice = (PARK_HEADER if parks else RELEASE_HEADER, "true")
    return encode_frame(Frame("CONNECT", [*resume_headers(session_id, secret, now_ms), notice]), "1.2")


def resume_frame(session_id: str, secret: str, now_ms: int) -> bytes:
    """Ask the leader for a session parked there, as a member of the group."""
    return encode_frame(Frame("CONNECT", resume_headers(session_id, secret, now_ms)), "1.2")


def read_resume(frame: Frame, secret: str | None, now_ms: int) -> str:
    """The session a resume CONNECT asks for; raises ProtocolError(`adoption refused`) for one
    this group did not sign or one out of date."""
    if secret is None:
        raise ProtocolError(REFUSED, "this node takes no sessions over (no group secret)")
    session_id, at = frame.get(RESUME_HEADER) or "", frame.get(RESUMED_AT_HEADER) or ""
    mac = frame.get(RESUME_MAC_HEADER) or ""
    if not hmac.compare_digest(mac, sign(secret, f"{session_id}\n{at}".encode())):
        raise ProtocolError(REFUSED, "the resume request is not signed with this group's secret")
    if not at.isdigit() or abs(now_ms - int(at)) > TICKET_MAX_AGE_MS:
        raise ProtocolError(REFUSED, "the resume request is out of date")
    return session_id


@dataclass(frozen=True, slots=True)
class Request:
    """What an adoption CONNECT asks of the leader: to take a session handed over (its `ticket`),
    or to resume one parked here, for a relay (no `offset`) or for the client itself (`offset`:
    how much of its stream was read, where it goes on); a `notice` instead (RELEASE: the client of
    a session served here ended its side, `release_frame`; PARK: the follower relaying it goes)."""

    session_id: str
    ticket: Ticket | None = None
    offset: int | None = None
    notice: str = ""


def read_adoption(frame: Frame, secret: str | None, now_ms: int) -> Request:
    """What an adoption or resume CONNECT asks; raises ProtocolError(`adoption refused`) for one
    this group did not sign, one out of date, or one that does not parse."""
    if frame.get(RESUME_HEADER) is not None:
        session_id = read_resume(frame, secret, now_ms)
        if frame.get(RELEASE_HEADER) is not None:
            return Request(session_id, notice=RELEASE)
        if frame.get(PARK_HEADER) is not None:
            return Request(session_id, notice=PARK)
        offset = frame.get(RESUME_OFFSET_HEADER)
        if offset is not None and not offset.isdigit():
            raise ProtocolError(REFUSED, f"{RESUME_OFFSET_HEADER} must be a count of bytes, got {offset!r}")
        return Request(session_id, None, None if offset is None else int(offset))
    ticket = read_ticket(frame, secret, now_ms)
    return Request(ticket.session_id, ticket)


def adopted_frame(session_id: str) -> bytes:
    return encode_frame(Frame("CONNECTED", [(ADOPTED_HEADER, session_id), ("version", "1.2")]), "1.2")


@dataclass(frozen=True, slots=True)
class Taken:
    """The successor took the session: the client's bytes start at `start` of what it sent."""

    start: int


@dataclass(frozen=True, slots=True)
class NotTaken:
    """The successor refused the session, saying `why`."""

    why: str


def read_answer(data: bytes, session_id: str) -> Taken | NotTaken | None:
    """The successor's answer at the start of `data` (None while it is incomplete)."""
    try:
        first = first_frame(data)
    except ProtocolError as exc:
        return NotTaken(f"an unreadable answer: {exc.message}")
    if first is None:
        return None
    frame, end = first
    if frame.command == "CONNECTED" and frame.get(ADOPTED_HEADER) == session_id:
        return Taken(end)
    message = frame.get("message") or ""
    body = frame.body.decode("utf-8", "replace").strip()
    return NotTaken(f"{message}: {body}" if body else (message or frame.command))
