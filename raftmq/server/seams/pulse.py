"""`Pulse`: a count that moves whenever something worth a look happened, and tasks that sleep
until it moves. The node beats its pulse after every applied batch and on a role change, so the
tasks that watch replicated state (the ticker, the links' adverts, the cluster event log) sleep
while nothing changes instead of looking again every few milliseconds."""

from __future__ import annotations

import asyncio


class Pulse:
    def __init__(self) -> None:
        self.count = 0
        self._waiters: list[asyncio.Future[None]] = []

    def beat(self) -> None:
        self.count += 1
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def wait(self, seen: int, timeout: float | None = None) -> int:
        """The count, once it is no longer `seen` or after `timeout` seconds (None: no limit).
        Pass what the last call returned; -1 returns at once. Each waiter awaits a future of its
        own, with a timer of its own: a task cancelled while it waits is cancelled, whatever
        beats meanwhile (asyncio.wait_for in Python 3.11 may return instead, when what it
        waits for completes in the same loop turn as the cancel)."""
        if self.count != seen:
            return self.count
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        self._waiters.append(waiter)
        timer = None if timeout is None else loop.call_later(timeout, _time_up, waiter)
        try:
            await waiter
        finally:
            if timer is not None:
                timer.cancel()
            if waiter in self._waiters:
                self._waiters.remove(waiter)
        return self.count


def _time_up(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
