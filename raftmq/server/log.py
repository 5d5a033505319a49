"""The commit-log seam between sessions and the broker core.

Sessions append batches of commands; the log calls `on_commit` with every committed command,
in commit order, on the event loop; then the future returned by `append` completes. The node
applies each committed command to the core and executes the effects. `InMemoryLog` commits at
once (single node, no replication); `RaftLog` (raftmq.replication.raft_log) replicates.

While `on_commit` runs, `position` names the batch it was given (Raft index and term), which is
what the same batch is called on every replica (the body journal's records carry it). A log
whose leadership can change reports each change to the listener set with
`set_role_listener`, on the event loop, before it fails the appends in flight, and answers
`holds_lease()` with whether its leadership is certainly current at this instant.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import NamedTuple

from raftmq.core.commands import Command

OnCommit = Callable[[Sequence[Command]], None]
RoleListener = Callable[[bool], None]  # called with True on becoming leader, False on losing it


class LogPosition(NamedTuple):
    index: int  # of the committed batch (Raft index; InMemoryLog counts batches)
    term: int  # Raft term of that batch (0 without Raft)


class CommitLog(ABC):
    @abstractmethod
    async def start(self, on_commit: OnCommit) -> None:
        """Begin committing; `on_commit` runs on the event loop for each committed batch."""

    @abstractmethod
    def append(self, commands: Sequence[Command]) -> asyncio.Future[None]:
        """Submit commands (kept in order). The future completes after `on_commit` has run for
        them, or fails with `NotLeader` / `CommitFailed` when their outcome is unknown."""

    @abstractmethod
    async def stop(self) -> None:
        """Stop committing; pending appends fail with `CommitFailed`."""

    @property
    def is_leader(self) -> bool:
        return True

    @property
    def leader_hint(self) -> str | None:
        """The leader's client address when this node is not the leader, if known."""
        return None

    @property
    def position(self) -> LogPosition:
        """The batch `on_commit` is handling now (or handled last)."""
        return LogPosition(0, 0)

    def set_role_listener(self, listener: RoleListener | None) -> None:
        """Be told of leadership changes (a log that is always leader never calls it)."""

    @property
    def snapshot_floor(self) -> int:
        """An index at or below that of the last durable snapshot (0: none): entries up to it
        may exist nowhere but in that snapshot."""
        return 0

    async def transfer_leadership(self, timeout: float = 1.0) -> bool:
        """Hand leadership to another member before a graceful stop; True once done."""
        return False

    def holds_lease(self) -> bool:
        """May this node write deliveries and receipts to clients at this moment? A replicated
        log says yes only while its leader lease holds (raftmq.replication.leadership); asked
        at the moment of writing, since a pause can end a leadership between two lines."""
        return True


class InMemoryLog(CommitLog):
    """Commits whatever was appended during one event-loop turn as one batch.

    Coalescing per loop turn is the same group commit the Raft log does per replication
    round: the cost of a commit is paid once for every command that arrived meanwhile.
    """

    def __init__(self) -> None:
        self._on_commit: OnCommit | None = None
        self._pending: list[Command] = []
        self._waiters: list[asyncio.Future[None]] = []
        self._scheduled = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopped = False
        self._batches = 0

    @property
    def position(self) -> LogPosition:
        return LogPosition(self._batches, 0)

    async def start(self, on_commit: OnCommit) -> None:
        self._on_commit = on_commit
        self._loop = asyncio.get_running_loop()

    def append(self, commands: Sequence[Command]) -> asyncio.Future[None]:
        from raftmq.errors import CommitFailed

        assert self._loop is not None, "append before start"
        future: asyncio.Future[None] = self._loop.create_future()
        if self._stopped:
            future.set_exception(CommitFailed("log stopped"))
            return future
        self._pending.extend(commands)
        self._waiters.append(future)
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self._flush)
        return future

    def _flush(self) -> None:
        self._scheduled = False
        pending, waiters = self._pending, self._waiters
        self._pending, self._waiters = [], []
        if self._stopped or not pending and not waiters:
            return
        assert self._on_commit is not None
        self._batches += 1
        self._on_commit(pending)
        for future in waiters:
            if not future.done():
                future.set_result(None)

    async def stop(self) -> None:
        from raftmq.errors import CommitFailed

        self._stopped = True
        for future in self._waiters:
            if not future.done():
                future.set_exception(CommitFailed("log stopped"))
        self._pending, self._waiters = [], []
