"""What goes into a relay's machine and what comes out (raftmq.server.stomp.mobility): the events
its shell saw, and the decisions the shell carries out. Values only."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# -- events: what the shell saw ----------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Connected:
    leader: str  # the client address the upstream connection was opened to
    half_close: bool  # that connection can half-close (TLS cannot)


@dataclass(frozen=True, slots=True)
class Unreachable:
    leader: str | None  # the last one tried (None: no leader known)
    failure: str


@dataclass(frozen=True, slots=True)
class ClientData:
    data: bytes


@dataclass(frozen=True, slots=True)
class ClientEof:
    pass


@dataclass(frozen=True, slots=True)
class ClientLost:
    pass


@dataclass(frozen=True, slots=True)
class UpstreamData:
    data: bytes
    now: float  # loop time
    now_ms: int  # wall clock, for a farewell's signature


@dataclass(frozen=True, slots=True)
class UpstreamLost:
    now_ms: int


@dataclass(frozen=True, slots=True)
class LeaderSeen:
    leader: str | None  # the client address of the group's leader as this node knows it now
    now: float


@dataclass(frozen=True, slots=True)
class Farewell:
    now_ms: int


Event = (Connected | Unreachable | ClientData | ClientEof | ClientLost | UpstreamData | UpstreamLost | LeaderSeen
         | Farewell)


# -- decisions: what the shell does --------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Connect:
    leader: str | None  # None: the group's leader, as this node learns it
    seconds: float  # give up (`Unreachable`) after this long


@dataclass(frozen=True, slots=True)
class ToUpstream:
    data: bytes


@dataclass(frozen=True, slots=True)
class ToClient:
    data: bytes


@dataclass(frozen=True, slots=True)
class ClientReading:
    on: bool


@dataclass(frozen=True, slots=True)
class HalfCloseUpstream:
    pass


@dataclass(frozen=True, slots=True)
class CloseUpstream:
    pass


@dataclass(frozen=True, slots=True)
class CloseClient:
    pass


@dataclass(frozen=True, slots=True)
class SendOff:
    """Write `frame` (an ERROR) to the client, end its connection without losing it (linger), and
    close the upstream."""

    frame: bytes


@dataclass(frozen=True, slots=True)
class Ended:
    """The relay is over: forget it; `session_lost`: the client's connection is gone too."""

    session_lost: bool


@dataclass(frozen=True, slots=True)
class ResumeHere:
    """This node leads now: serve the session on the client's socket, then `held`; the client's
    stream goes on from `offset`; `eof`: the client's half-close came after `held`."""

    session_id: str
    held: bytes
    offset: int
    eof: bool = False


@dataclass(frozen=True, slots=True)
class Release:
    """The client of a session adopted at `leader` (this relay holds the client's own socket) ended
    its side: tell that node so (a signed notice on a connection of its own, answered), then carry
    out `then`, the half-close or close that follows. Its session then ends there at once, as an
    ordinary session does, instead of being parked for a move that will not come. `parks`: the
    other way round, a follower's relay that goes (its node stops): the leader parks the session
    at the half-close, for the client to resume it there itself."""

    leader: str
    session_id: str
    then: HalfCloseUpstream | CloseUpstream
    parks: bool = False


@dataclass(frozen=True, slots=True)
class Count:
    """One more for the node's figures: `relayed` (a connection opened upstream) or `moved`."""

    what: str


@dataclass(frozen=True, slots=True)
class Log:
    event: str
    fields: dict[str, Any]


Decision = (Connect | ToUpstream | ToClient | ClientReading | HalfCloseUpstream | CloseUpstream | CloseClient | SendOff
            | Ended | ResumeHere | Release | Count | Log)
