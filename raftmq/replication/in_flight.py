"""The entries a leader's `RaftLog` submitted and has not settled yet (loop thread only).

Each `PendingEntry` holds the proposals' futures and the commands the entry was built from.
`InFlightEntries` finds one by the token its commit callback carries (to settle it) and by its
bytes (so the leader applies the commands it already has instead of decoding its own entry:
equal bytes decode to equal commands, so a shared key is harmless and FIFO keeps the pairing).
An entry stays findable by its token until it is settled, failed or expired, and by its bytes
until it is applied or leaves the table.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable, Iterable

from raftmq.core.commands import Command

# pysyncobj's FAIL_REASON codes, as the CommitFailed message words them.
FAIL_REASONS = {1: "queue full", 2: "no leader", 3: "discarded by a new leader", 4: "not leader", 5: "leader changed",
                6: "request denied", 7: "outcome unknown"}


def fail_futures(futures: Iterable[asyncio.Future[None]], error: Callable[[], Exception]) -> None:
    # Each future gets its own exception: one instance raised in many tasks piles up tracebacks.
    for future in futures:
        if not future.done():
            future.set_exception(error())


class PendingEntry:
    __slots__ = ("batches", "commands", "futures", "timer", "entry", "size")

    def __init__(self, batches: list[bytes], commands: list[Command], futures: list[asyncio.Future[None]]) -> None:
        self.batches = batches
        self.commands = commands  # what the entry decodes to: the leader applies these as they are
        self.futures = futures
        self.timer: asyncio.TimerHandle | None = None
        self.entry = b""
        self.size = sum(len(batch) for batch in batches)


class InFlightEntries:
    def __init__(self) -> None:
        self._by_token: dict[int, PendingEntry] = {}
        self._by_entry: dict[bytes, collections.deque[PendingEntry]] = {}
        self.bytes = 0  # encoded commands in the entries held

    def __len__(self) -> int:
        return len(self._by_token)

    def __bool__(self) -> bool:
        return bool(self._by_token)

    def futures(self) -> list[asyncio.Future[None]]:
        return [future for pending in self._by_token.values() for future in pending.futures]

    def add(self, token: int, pending: PendingEntry) -> None:
        """`pending` was submitted as `pending.entry` with commit callback token `token`."""
        self._by_token[token] = pending
        self.bytes += pending.size
        self._by_entry.setdefault(pending.entry, collections.deque()).append(pending)

    def pop(self, token: int) -> PendingEntry | None:
        """The entry of `token`, out of the table; None if it already left (failed, expired)."""
        pending = self._by_token.pop(token, None)
        if pending is None:
            return None
        self.bytes -= pending.size
        waiting = self._by_entry.get(pending.entry)
        if waiting is not None:
            try:
                waiting.remove(pending)
            except ValueError:  # already applied
                pass
            if not waiting:
                del self._by_entry[pending.entry]
        return pending

    def take_applied(self, entry: bytes) -> PendingEntry | None:
        """The oldest entry this leader submitted as `entry`, now being applied; None if `entry`
        is not ours. It stays in the table by its token until its commit callback settles it."""
        own = self._by_entry.get(entry)
        if own is None:
            return None
        pending = own.popleft()
        if not own:
            del self._by_entry[entry]
        return pending

    def clear(self) -> list[PendingEntry]:
        """Every entry held, the table emptied."""
        held = list(self._by_token.values())
        self._by_token.clear()
        self._by_entry.clear()
        self.bytes = 0
        return held
