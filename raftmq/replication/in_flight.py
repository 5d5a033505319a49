"""The entries a leader's `RaftLog` submitted and has not settled yet (loop thread only).

Each `PendingEntry` holds who waits for its proposals (`Waiter`s) and the commands the entry was
built from.
`InFlightEntries` finds one by the token its commit callback carries (to settle it) and by its
bytes (so the leader applies the commands it already has instead of decoding its own entry:
equal bytes decode to equal commands, so a shared key is harmless and FIFO keeps the pairing).
An entry stays findable by its token until it is settled, failed or expired, and by its bytes
until it is applied or leaves the table. Its bytes are looked up by their length, then compared:
what pysyncobj applies is a copy of what was submitted, and hashing that copy (tens of KiB under
load) cost more than comparing it with the one or two entries in flight.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence

from raftmq.core.commands import Command
from raftmq.replication.commit_log import Proposer, tell

# pysyncobj's FAIL_REASON codes, as the CommitFailed message words them.
FAIL_REASONS = {1: "queue full", 2: "no leader", 3: "discarded by a new leader", 4: "not leader", 5: "leader changed",
                6: "request denied", 7: "outcome unknown"}


# Who waits for a proposal: its future (`CommitLog.propose`), or its proposer with the number
# and the commands it gave (`propose_for`: one tuple, where a future costs a future, its callback,
# a context and a handle).
Waiter = asyncio.Future[None] | tuple[Proposer, int, Sequence[Command]]


def settle_waiters(waiters: Iterable[Waiter]) -> None:
    """Success for each: its future's result, or its proposer told, now."""
    for waiter in waiters:
        if isinstance(waiter, tuple):
            tell(waiter, None)
        elif not waiter.done():
            waiter.set_result(None)


def fail_waiters(waiters: Iterable[Waiter], error: Callable[[], Exception]) -> None:
    # Each gets its own exception: one instance raised in many tasks piles up tracebacks.
    for waiter in waiters:
        if isinstance(waiter, tuple):
            tell(waiter, error())
        elif not waiter.done():
            waiter.set_exception(error())


class PendingEntry:
    __slots__ = ("rows", "commands", "waiters", "timer", "entry", "size", "awaited")

    def __init__(self, rows: list[bytes], commands: list[Command], waiters: list[Waiter], awaited: bool = True) -> None:
        self.rows = rows  # each proposal's encoded rows (command_codec.encode_rows), in order
        self.commands = commands  # what the entry decodes to: the leader applies these as they are
        self.waiters = waiters
        self.awaited = awaited  # a client waits on one of its proposals (not only ACKs without receipts)
        self.timer: asyncio.TimerHandle | None = None
        self.entry = b""
        self.size = sum(len(proposal) for proposal in rows)


class InFlightEntries:
    def __init__(self) -> None:
        self._by_token: dict[int, PendingEntry] = {}
        self._by_length: dict[int, list[PendingEntry]] = {}  # by len(entry), oldest first
        self.bytes = 0  # encoded commands in the entries held
        self._drained: list[asyncio.Future[None]] = []  # `drained()` futures, done when none is held

    def __len__(self) -> int:
        return len(self._by_token)

    def __bool__(self) -> bool:
        return bool(self._by_token)

    def drained(self, loop: asyncio.AbstractEventLoop) -> asyncio.Future[None]:
        """Done once no entry is held (at once if none is now)."""
        future: asyncio.Future[None] = loop.create_future()
        if self._by_token:
            self._drained.append(future)
        else:
            future.set_result(None)
        return future

    def _maybe_drained(self) -> None:
        if not self._by_token and self._drained:
            waiting, self._drained = self._drained, []
            for future in waiting:
                if not future.done():
                    future.set_result(None)

    def add(self, token: int, pending: PendingEntry) -> None:
        """`pending` was submitted as `pending.entry` with commit callback token `token`."""
        self._by_token[token] = pending
        self.bytes += pending.size
        self._by_length.setdefault(len(pending.entry), []).append(pending)

    def pop(self, token: int) -> PendingEntry | None:
        """The entry of `token`, out of the table; None if it already left (failed, expired)."""
        pending = self._by_token.pop(token, None)
        if pending is None:
            return None
        self.bytes -= pending.size
        self._unlist(pending)
        self._maybe_drained()
        return pending

    def take_applied(self, entry: bytes) -> PendingEntry | None:
        """The oldest entry this leader submitted as `entry`, now being applied; None if `entry`
        is not ours. It stays in the table by its token until its commit callback settles it."""
        for pending in self._by_length.get(len(entry), ()):
            if pending.entry == entry:
                self._unlist(pending)
                return pending
        return None

    def _unlist(self, pending: PendingEntry) -> None:
        """`pending` out of the by-length lists (if still there: not applied yet)."""
        size = len(pending.entry)
        same = self._by_length.get(size)
        if same is None:
            return
        for i, held in enumerate(same):
            if held is pending:
                del same[i]
                break
        if not same:
            del self._by_length[size]

    def clear(self) -> list[PendingEntry]:
        """Every entry held, the table emptied."""
        held = list(self._by_token.values())
        self._by_token.clear()
        self._by_length.clear()
        self.bytes = 0
        self._maybe_drained()
        return held
