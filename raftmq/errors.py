"""The one error hierarchy of raftmq.

Every error raftmq raises on purpose derives from `RaftmqError`, so callers can tell our
failures from bugs.
"""

from __future__ import annotations


class RaftmqError(Exception):
    """Base of every error raftmq raises on purpose."""


class ProtocolError(RaftmqError):
    """A peer sent bytes that are not valid STOMP (or break a configured limit).

    The server answers with an ERROR frame carrying `message` and closes the connection.
    """

    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail
        # The offending frame's `receipt` header when its headers could be read (a body over
        # the limit): the ERROR then names the frame, so a client fails that one operation.
        self.receipt: str | None = None


class FrameTooLarge(ProtocolError):
    """A frame, header line or header count broke a configured limit."""


class CommandCodecError(RaftmqError):
    """A replicated command could not be encoded or decoded (unknown version or type)."""


class ConfigError(RaftmqError):
    """A configuration file is invalid; the message names the file and the key."""


class ClientError(RaftmqError):
    """Raised by raftmq.client: the broker refused or the connection failed."""


class BrokerRefused(ClientError):
    """The broker answered with an ERROR frame."""

    def __init__(self, message: str, headers: dict[str, str] | None = None, body: bytes = b"") -> None:
        super().__init__(message)
        self.headers = headers or {}
        self.body = body


class NotLeader(RaftmqError):
    """This node is not the leader of its group; `leader` names the leader's client address if known."""

    def __init__(self, leader: str | None) -> None:
        super().__init__(f"not the leader (leader: {leader or 'unknown'})")
        self.leader = leader


class RelayRefused(RaftmqError):
    """A follower will not relay a client to the node at the leader's address (a TLS
    certificate that is not the group's)."""


class CommitFailed(RaftmqError):
    """A command's outcome is unknown or it was not committed (leader change, timeout)."""


class SelectorError(RaftmqError):
    """A JMS selector on SUBSCRIBE could not be parsed."""


class JournalCorrupt(RaftmqError):
    """A journal segment failed verification where a torn write cannot explain it.

    Bad CRC, bad magic, an unsupported format or inconsistent batch contents. `path` and
    `offset` name the segment file and the byte offset of the batch. Corrupt bytes are never
    served: the node refuses to start or repairs the segment from a peer.
    """

    def __init__(self, reason: str, path: str | None = None, offset: int | None = None) -> None:
        where = path or "<buffer>"
        if offset is not None:
            where = f"{where} at offset {offset}"
        super().__init__(f"journal corrupt: {where}: {reason}")
        self.reason = reason
        self.path = path
        self.offset = offset
