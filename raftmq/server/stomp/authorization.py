"""A STOMP session's authorization, sans-I/O: may its principal do what a command does?

With an ACL (raftmq.security), `StompSession` asks `SessionAuthorization.check` about every
command it translates (each message of a forwarded batch too). A refusal raises `ProtocolError`
(access denied), which the session refuses like any other bad frame: nothing from it on reaches
the log. Sending to a destination that does not exist creates it, which also needs admin. An
allowed (operation, destination) on an existing destination is remembered, at most
ALLOWED_CACHE_SIZE of them, until an operator deletes the destination.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from raftmq.core.commands import Command, Send, Subscribe
from raftmq.core.temporary import owner_token
from raftmq.core.validation import is_wildcard
from raftmq.errors import ProtocolError
from raftmq.security import READ, WRITE, Principal
from raftmq.server.stomp.decisions import Decision, Note

if TYPE_CHECKING:  # the session's host, as a type: nothing here does I/O
    from raftmq.server.seams.host import SessionHost

# (operation, destination) pairs a session remembers as authorized before starting afresh.
ALLOWED_CACHE_SIZE = 1024
ACCESS_DENIED = "access denied"  # a frame the ACL does not allow


class SessionAuthorization:
    """One session's ACL checks, with the pairs already allowed."""

    def __init__(self, host: SessionHost) -> None:
        self.host = host
        self._allowed: set[tuple[str, str]] = set()  # (operation, destination) already checked

    def check(self, principal: Principal | None, command: Command, notes: list[Decision]) -> None:
        """Raise `ProtocolError` (access denied) unless the ACL lets `principal` (the one the
        session's CONNECT authenticated) do what `command` does; a refusal's note goes to `notes`."""
        kind = type(command)
        destination: str | None = getattr(command, "destination", None)
        if destination is None or owner_token(destination) is not None:
            return  # a temporary destination: anyone given its name may send, only its owner consume (the core)
        if kind is Send:
            operation, creates = WRITE, True
        elif kind is Subscribe:  # a wildcard queue subscription reads queues, it makes none
            operation, creates = READ, not (destination.startswith("/queue/") and is_wildcard(destination))
        else:
            operation, creates = READ, False  # e.g. a queue browser: reads, creates nothing
        key = (operation, destination)
        # An operator may delete a destination: using it again would create it (admin).
        if key in self._allowed and (not creates or self.host.has_destination(destination)):
            return
        assert principal is not None
        # The leader's core holds everything committed; a destination another session is
        # creating right now (proposed, not committed) still counts as new here.
        exists = self.host.has_destination(destination)
        refusal = self.host.security.refusal(principal, operation, destination, exists or not creates)
        if refusal is not None:
            fields = {"user": principal.name, "operation": operation, "destination": destination}
            notes.append(Note("client.access_denied", fields))
            raise ProtocolError(ACCESS_DENIED, refusal)
        if exists:  # right until the destination is deleted (checked above)
            if len(self._allowed) >= ALLOWED_CACHE_SIZE:
                self._allowed.clear()
            self._allowed.add(key)
