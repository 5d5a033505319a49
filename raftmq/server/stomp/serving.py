"""Session mobility at the node serving the session, sans-I/O: one machine per connection.

The relay's end is raftmq.server.stomp.mobility; this is the other end, the connection the
session is served on (raftmq.server.stomp.connection is its shell). What moves a served session:
- the leadership goes (`LeadershipGone`): the session is handed to the successor
  (raftmq.server.stomp.hand_over), unless it cannot be (not open, no group secret, too many hops):
  then the caller ends it with ERROR `not the leader`;
- the connection is half-closed (`HalfClosed`): by the client (its input ended: the connection
  closes once what it sent has its outcome), or by a relay that moves. A relay of a session adopted
  here half-closes to move closer: the session is parked for it. A follower's relay half-closes to
  move to a new leader this node may not know of yet, and looks just like a client's own half-close:
  the connection waits `MOVE_NOTICE_SECONDS` for the leadership to go (then the session is handed
  over, and the relay resumes it at the successor) before it takes the half-close as the client's.
  The relay holding the client's own socket of a session adopted here tells this node first when
  the half-close is its client's (a release, `client_gone`): the session then ends, not parked.
  A follower's relay that goes (its node stops) tells this node first too (`relay_goes`): the
  session is parked at once, and its client resumes it here on a socket of its own.

`SERVING_TRANSITIONS` is every move, as `mobility.TRANSITIONS` is for the relay.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from raftmq.errors import RaftmqError
from raftmq.server.stomp.adoption import MAX_HOPS
from raftmq.server.stomp.mobility import draw

# How long a half-close from a relay waits for this node to learn it lost its leadership.
MOVE_NOTICE_SECONDS = 0.2


class ServingError(RaftmqError):
    """A serving machine was driven outside its table."""


class Serving(Enum):
    SERVING = "serving"
    AWAITING_MOVE = "awaiting-move"  # a relay half-closed while this node leads: is the leadership going?
    HANDING_OVER = "handing-over"
    PARKING = "parking"
    HANDED_OVER = "handed-over"  # piped to the successor, which serves the session
    ENDING = "ending"  # the input ended, or the session failed: the connection closes


# -- events --------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class HalfClosed:
    movable: bool  # the session is open and the group has a hand-over secret
    via_relay: bool  # a follower's relay carries the connection
    hops: int  # relays between the client and this node (an adopted session's)
    transferring: bool  # this node is handing its leadership over right now
    client_gone: bool = False  # the relay holding the client's socket said its client ended (a release)
    relay_goes: bool = False  # the follower relaying it said it goes (it stops): park the session


@dataclass(frozen=True, slots=True)
class LeadershipGone:
    leader: str  # the successor's client address
    movable: bool  # open, not closed, and the group has a hand-over secret
    hops: int


@dataclass(frozen=True, slots=True)
class NoticeOver:
    open: bool  # the session is still open
    hops: int
    client_gone: bool = False


@dataclass(frozen=True, slots=True)
class HandedOver:
    """Relayed to the successor. (A hand-over refused ends the session: it stays HANDING_OVER
    until it closes, so a second request is not refused twice.)"""


@dataclass(frozen=True, slots=True)
class ParkDone:
    pass


ServingEvent = HalfClosed | LeadershipGone | NoticeOver | HandedOver | ParkDone


# -- decisions -----------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Hold:
    """The leadership went: read nothing more from the client, and write nothing more of this
    term's (what the successor's entries make is the successor's to write)."""


@dataclass(frozen=True, slots=True)
class AwaitNotice:
    seconds: float  # then `NoticeOver`


@dataclass(frozen=True, slots=True)
class HandOver:
    leader: str


@dataclass(frozen=True, slots=True)
class Park:
    pass


@dataclass(frozen=True, slots=True)
class EndInput:
    """The client's side is closed: close ours once what is pending is out."""


@dataclass(frozen=True, slots=True)
class CannotHandOver:
    """The caller ends the session with ERROR `not the leader`."""


ServingDecision = Hold | AwaitNotice | HandOver | Park | EndInput | CannotHandOver

_S, _W, _H, _P, _D, _E = (Serving.SERVING, Serving.AWAITING_MOVE, Serving.HANDING_OVER, Serving.PARKING,
                          Serving.HANDED_OVER, Serving.ENDING)

SERVING_TRANSITIONS: dict[tuple[Serving, type], frozenset[Serving]] = {
    (_S, HalfClosed): frozenset({_W, _P, _E}),
    (_S, LeadershipGone): frozenset({_H, _E}),
    (_W, NoticeOver): frozenset({_P, _E}),
    (_W, LeadershipGone): frozenset({_H, _E}),
    (_W, HalfClosed): frozenset({_W}),
    (_H, HandedOver): frozenset({_D}),
    (_H, LeadershipGone): frozenset({_H}),  # asked again (the role change, then the stop): under way
    (_H, HalfClosed): frozenset({_H}),
    (_H, NoticeOver): frozenset({_H}),
    (_P, ParkDone): frozenset({_E}),
    (_P, LeadershipGone): frozenset({_P}),  # the park decides: a node that no longer leads does not park
    (_P, HalfClosed): frozenset({_P}),
    (_P, NoticeOver): frozenset({_P}),
    (_D, LeadershipGone): frozenset({_D}),
    (_D, NoticeOver): frozenset({_D}),
    (_E, HalfClosed): frozenset({_E}),
    (_E, LeadershipGone): frozenset({_E}),
    (_E, NoticeOver): frozenset({_E}),
}


class ServingMachine:
    def __init__(self) -> None:
        self.state = Serving.SERVING
        self.eof_pending = False  # a relay half-closed (its move, or its client's half-close): forwarded on

    @property
    def handed_over(self) -> bool:
        return self.state is Serving.HANDED_OVER

    def handle(self, event: ServingEvent) -> list[ServingDecision]:
        before = self.state
        allowed = SERVING_TRANSITIONS.get((before, type(event)))
        if allowed is None:
            raise ServingError(f"a served session in state {before.value} got {type(event).__name__}")
        decisions = self._decide(event)
        if self.state not in allowed:
            raise ServingError(f"a served session in state {before.value} moved to {self.state.value} on "
                               f"{type(event).__name__}")
        return decisions

    def _decide(self, event: ServingEvent) -> list[ServingDecision]:
        state = self.state
        if isinstance(event, LeadershipGone):
            if state in (Serving.HANDING_OVER, Serving.PARKING, Serving.HANDED_OVER):
                return []  # under way
            if state is Serving.ENDING or not event.movable or event.hops >= MAX_HOPS:
                self.state = Serving.ENDING
                return [CannotHandOver()]
            self.state = Serving.HANDING_OVER
            return [Hold(), HandOver(event.leader)]
        if isinstance(event, HalfClosed):
            if state is Serving.HANDING_OVER:
                self.eof_pending = True  # (a read under way as reading paused): the successor's relay passes it on
            if state is not Serving.SERVING:
                return []
            if event.client_gone:  # its relay said so first: the client's own, not a move
                self.state = Serving.ENDING
                return [EndInput()]
            if event.movable and (event.hops or event.relay_goes) and not event.transferring:
                self.state = Serving.PARKING
                return [Park()]
            if event.movable and (event.via_relay or event.hops):
                # (nothing is held meanwhile: the input ended, and what this term still commits is
                # this node's to answer, a receipt the client waits for included)
                self.state, self.eof_pending = Serving.AWAITING_MOVE, True
                return [AwaitNotice(MOVE_NOTICE_SECONDS)]
            self.state = Serving.ENDING
            return [EndInput()]
        if isinstance(event, NoticeOver):
            if state is not Serving.AWAITING_MOVE:
                return []
            parks = event.open and event.hops and not event.client_gone
            self.state = Serving.PARKING if parks else Serving.ENDING
            if not event.open:
                return []  # it failed meanwhile: its ERROR closes it
            # still leading: the client's own half-close, or its relay moving closer
            return [Park() if parks else EndInput()]
        if isinstance(event, HandedOver):
            self.state = Serving.HANDED_OVER
            return []
        self.state = Serving.ENDING  # ParkDone: parked (closing), or not (its input ends)
        return []


def diagram() -> str:
    """The table as a Mermaid state diagram (docs/mobility.md shows it)."""
    return draw(SERVING_TRANSITIONS, list(Serving), Serving.SERVING, Serving.ENDING)
