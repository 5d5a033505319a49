"""A leader service that is one asyncio task (raftmq.server.succession starts a group's leader
services when this node leads and stops them when it no longer does)."""

from __future__ import annotations

import asyncio
import contextlib
from abc import ABC, abstractmethod


class LeaderTask(ABC):
    """`start` runs `run()` as a task; `stop` cancels it and waits for it to end."""

    _task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self.run())

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    @abstractmethod
    async def run(self) -> None:
        """The service's work, until cancelled."""
