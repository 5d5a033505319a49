"""`Pulse`: a count that moves whenever something worth a look happened, and tasks that sleep
until it moves. The node beats its pulse after every applied batch and on a role change, so the
tasks that watch replicated state (the ticker, the links' adverts, the cluster event log) sleep
while nothing changes instead of looking again every few milliseconds."""

from __future__ import annotations

import asyncio
import contextlib


class Pulse:
    def __init__(self) -> None:
        self.count = 0
        self._moved: asyncio.Future[None] | None = None  # shared by every task waiting now

    def beat(self) -> None:
        self.count += 1
        moved, self._moved = self._moved, None
        if moved is not None and not moved.done():
            moved.set_result(None)

    async def wait(self, seen: int, timeout: float | None = None) -> int:
        """The count, once it is no longer `seen` or after `timeout` seconds (None: no limit).
        Pass what the last call returned; -1 returns at once."""
        if self.count != seen:
            return self.count
        if self._moved is None:
            self._moved = asyncio.get_running_loop().create_future()
        moved = asyncio.shield(self._moved)  # a waiter cancelled leaves the others waiting
        if timeout is None:
            await moved
        else:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(moved, timeout)
        return self.count
