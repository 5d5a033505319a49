"""A session that carries on over a new socket when the node holding its socket goes, sans-I/O:
what the client keeps of its stream, and the request.

A raftmq node that stops (or is removed from its group) first hands its leadership and its
sessions to a successor. The sessions of clients connected to it directly are parked there
(raftmq.server.takeover), and the node ends each connection with `ERROR not the leader` carrying
a resume request signed by the group (`raftmq.resume`, `raftmq.resume-at`, `raftmq.resume-mac`)
and `raftmq.resume-offset`: how many bytes of the client's stream the session read
(raftmq.server.stomp.adoption). Within the park time (about a second) the client connects to the
`leader` the ERROR names, sends the request with the offset (`resume_connect`) and, once the
answer came (CONNECTED with `raftmq.adopted`), its bytes from that offset: the same session goes
on, its subscriptions, unacknowledged messages, open transactions and pending receipts included.
Nothing is redelivered, nothing is sent twice, and the application sees no error
(raftmq.client.stomp_client runs it).

What the client keeps (`ReplayBuffer`): every byte it wrote, less what a RECEIPT proved read (a
node handles a connection's frames in order, so a RECEIPT means everything up to its frame was
read), and at most `REPLAY_MAX_BYTES`: older bytes are dropped. An offset before what is kept
cannot be resumed from, and then the connection ends as any broken one does (a failover client
reconnects and subscribes again).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from raftmq.protocol.codec import encode_frame
from raftmq.protocol.frame import RESUME_HEADER, RESUME_MAC_HEADER, RESUME_OFFSET_HEADER, RESUMED_AT_HEADER, Frame

REPLAY_MAX_BYTES = 4 * 1024 * 1024
# How long the client tries to resume: the leader keeps a parked session one second
# (raftmq.server.takeover.PARK_SECONDS) from the ERROR on.
RESUME_SECONDS = 1.0


class ReplayBuffer:
    """The tail of what a client wrote on its session, by offset in its stream of bytes."""

    def __init__(self, limit: int = REPLAY_MAX_BYTES) -> None:
        self._chunks: deque[bytes] = deque()
        self._limit = limit
        self.start = 0  # the offset of the first byte kept
        self.end = 0  # the offset after the last byte written

    def __len__(self) -> int:
        return self.end - self.start

    def record(self, data: bytes) -> None:
        self._chunks.append(data)
        self.end += len(data)
        while self.end - self.start > self._limit:
            self.start += len(self._chunks.popleft())

    def confirm(self, offset: int) -> None:
        """The broker read everything before `offset`: forget what lies wholly before it."""
        chunks = self._chunks
        while chunks and self.start + len(chunks[0]) <= offset:
            self.start += len(chunks.popleft())

    def since(self, offset: int) -> bytes | None:
        """What was written from `offset` on; None when it is no longer (or never was) kept."""
        if not self.start <= offset <= self.end:
            return None
        return b"".join(self._chunks)[offset - self.start:]


@dataclass(frozen=True, slots=True)
class ResumePlan:
    """Where and how to resume, from the ERROR that ended the connection."""

    leader: str  # the leader's client address, HOST:PORT
    offset: int
    request: tuple[tuple[str, str], ...]  # the signed request's headers, as the node wrote them


def resume_plan(error: Frame) -> ResumePlan | None:
    """The resume request an ERROR carries, or None (any other ERROR, or a malformed one)."""
    leader, offset = error.get("leader"), error.get(RESUME_OFFSET_HEADER) or ""
    request = tuple((name, error.get(name) or "") for name in (RESUME_HEADER, RESUMED_AT_HEADER, RESUME_MAC_HEADER))
    if not leader or not offset.isdigit() or not all(value for _, value in request):
        return None
    return ResumePlan(leader, int(offset), request)


def resume_connect(plan: ResumePlan) -> bytes:
    return encode_frame(Frame("CONNECT", [*plan.request, (RESUME_OFFSET_HEADER, str(plan.offset))]), "1.2")
