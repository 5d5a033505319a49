"""The ordered hand-off from pysyncobj's tick thread to the event loop.

Committed entries, snapshot requests, restores and settlements must reach the loop in the
order the tick thread produced them. `OrderedHandoff.send` queues a call from any thread;
`hold_until(future)`, called on the loop while handling one of them, makes every later call
wait until `future` is done (a restore that fetches bodies off the loop), then run in order.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable
from typing import Any

Call = tuple[Callable[..., None], tuple[Any, ...]]


class OrderedHandoff:
    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._held: collections.deque[Call] | None = None

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def send(self, fn: Callable[..., None], *args: Any) -> None:
        """From any thread: run `fn(*args)` on the loop, after everything sent before it."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._run, fn, args)

    def hold_until(self, future: asyncio.Future[Any], first: Call | None = None) -> None:
        """On the loop: run nothing sent from now on until `future` is done; then `first`, then
        the rest in order."""
        self._held = collections.deque([first] if first is not None else [])
        future.add_done_callback(self._release)

    def _run(self, fn: Callable[..., None], args: tuple[Any, ...]) -> None:
        if self._held is not None:
            self._held.append((fn, args))
        else:
            fn(*args)

    def _release(self, _done: object) -> None:
        held = self._take_held()
        while held:
            fn, args = held.popleft()
            fn(*args)
            if self._held is not None:  # one of them holds again
                self._held.extend(held)
                return

    def _take_held(self) -> collections.deque[Call]:
        held, self._held = self._held, None
        return held if held is not None else collections.deque()
