"""The proposals a leader's `RaftLog` has not submitted yet (loop thread only).

`ProposalQueue` keeps them in order with their encoded rows, and knows how many of them a client
waits on: the others are ACKs and NACKs that asked for no receipt (`raftmq.core.commands.unawaited`),
which may wait for company instead of costing an entry of their own (`RaftTimings.settle_wait_ms`).
`take` cuts the next entry's worth off the front.
"""

from __future__ import annotations

import collections
from collections.abc import Iterator, Sequence

from raftmq.core.commands import Command
from raftmq.replication.in_flight import PendingEntry, Waiter


class ProposalQueue:
    def __init__(self) -> None:
        self._items: collections.deque[tuple[bytes, Sequence[Command], Waiter, bool]] = collections.deque()
        self.awaited = 0  # queued proposals a client waits on
        # Loop time until which unawaited proposals wait for a producer's next SEND: set when an
        # entry a client waited on settles (its producer is answered and is likely to send again).
        self.company_until = 0.0

    def __len__(self) -> int:
        return len(self._items)

    def __bool__(self) -> bool:
        return bool(self._items)

    def append(self, rows: bytes, commands: Sequence[Command], waiter: Waiter, awaited: bool) -> None:
        self._items.append((rows, commands, waiter, awaited))
        self.awaited += awaited

    def waits_for_company(self, now: float) -> bool:
        """Nothing queued but unawaited settlements, and a producer was answered just now."""
        return not self.awaited and now < self.company_until

    def take(self, max_bytes: int) -> PendingEntry | None:
        """The next entry: proposals from the front, up to `max_bytes` of rows (one at least);
        a proposal whose future its caller cancelled is dropped, never submitted. None if
        nothing is left."""
        rows: list[bytes] = []
        commands: list[Command] = []
        waiters: list[Waiter] = []
        size = 0
        entry_awaited = False
        items = self._items
        while items and (not rows or size + len(items[0][0]) <= max_bytes):
            proposal, proposal_commands, waiter, awaited = items.popleft()
            self.awaited -= awaited
            if not isinstance(waiter, tuple) and waiter.done():
                continue
            rows.append(proposal)
            commands.extend(proposal_commands)
            waiters.append(waiter)
            size += len(proposal)
            entry_awaited = entry_awaited or awaited
        return PendingEntry(rows, commands, waiters, entry_awaited) if rows else None

    def clear(self) -> Iterator[Waiter]:
        """Empty the queue: the waiters of what it held, in order."""
        items, self._items = self._items, collections.deque()
        self.awaited = 0
        return (waiter for _rows, _commands, waiter, _awaited in items)
