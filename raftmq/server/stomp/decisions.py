"""What a STOMP session decides (raftmq.server.stomp.session): the values `StompSession` hands
its shell, which carries them out."""

from __future__ import annotations

from dataclasses import field
from typing import Any, ClassVar, Final

from raftmq.core.commands import Command
from raftmq.hot_values import HotValue
from raftmq.protocol.frame import REDIRECT_HEADER, Frame
from raftmq.server.stomp.adoption import Ticket
from raftmq.values import value

# `follower_clients`: a follower relays a client's session to the leader, or answers its CONNECT
# with a redirect (raftmq.server.stomp.relay carries out either).
RELAY: Final = "relay"
REDIRECT: Final = "redirect"
# Bytes a session keeps from before its CONNECT is handled, to replay to the leader. A CONNECT
# is a few hundred bytes; the read that completes it may carry frames pipelined behind it. A
# connection that sends more than this before CONNECT is handled gets the redirect instead.
PREFIX_MAX_BYTES = 256 * 1024


def redirect_wanted(mode: str, connect: Frame) -> bool:
    """Whether a follower answers this CONNECT with the redirect rather than relaying it."""
    return mode == REDIRECT or (connect.get(REDIRECT_HEADER) or "").lower() == "true"


class Propose(HotValue):
    """Hand these commands to the commit log, in order. One per `receive` that made commands:
    written out as a native class (compiled), where a `@value`'s generated `__init__` runs as
    Python (raftmq.core.commands says more)."""

    __match_args__: ClassVar[tuple[str, ...]] = ("commands",)
    __slots__ = __match_args__

    def __init__(self, commands: list[Command]) -> None:
        self.commands: Final = commands


@value
class Refuse:
    frame: bytes  # the ERROR frame, in the session's version
    message: str
    detail: str


@value
class CheckLogin:
    login: str | None
    passcode: str | None


@value
class RelayToLeader:
    prefix: bytes  # everything the client sent so far, to replay to the leader


@value
class Adopt:
    ticket: Ticket | None  # checked: signed by this group, in date (None: resume the session parked here)
    session_id: str
    offset: int | None = None  # a client resumes it on its own socket: where its stream goes on
    notice: str = ""  # instead a relay's notice, "release" or "park" (raftmq.server.stomp.adoption)


@value
class Note:
    event: str
    fields: dict[str, Any] = field(default_factory=dict)


Decision = Propose | Refuse | CheckLogin | RelayToLeader | Adopt | Note
