"""A leadership transfer (raftmq.replication.raft_log's `transfer_leadership`, the Raft
dissertation's 3.10), in rounds until a deadline. Each round holds new proposals back: the
entries in flight settle, then the follower whose log matches ours is told to stand at once
(pysyncobj's TimeoutNow), and the round waits for its win until `until`."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from raftmq.replication.in_flight import InFlightEntries
from raftmq.replication.pysyncobj.syncobj import SUCCESS, HardenedSyncObj

HAND_OVER_FLUSH_SECONDS = 0.003  # after the last entries settle, before TimeoutNow ends our lease
POLL_SECONDS = 0.002
HAND_OVER_PAUSE_SECONDS = 0.05  # between transfer rounds, for the proposals that waited


async def transfer(syncobj: HardenedSyncObj, loop: asyncio.AbstractEventLoop, timeout: float, round_seconds: float,
                   in_flight: InFlightEntries, hold: Callable[[bool], None]) -> bool:
    """Rounds of `round_seconds` until `timeout`, each with proposals held (`hold(True)`, then
    `hold(False)`). True once no longer leader; False for a group of one (nobody to hand to)."""
    if len(syncobj.members) == 1:
        return False
    deadline = time.monotonic() + timeout
    while syncobj.is_leader and time.monotonic() < deadline:
        hold(True)
        try:
            await transfer_round(syncobj, loop, min(deadline, time.monotonic() + round_seconds), in_flight)
        finally:
            hold(False)
        if syncobj.is_leader and time.monotonic() < deadline:
            await asyncio.sleep(HAND_OVER_PAUSE_SECONDS)  # let what waited go before another round
    return not syncobj.is_leader


async def transfer_round(syncobj: HardenedSyncObj, loop: asyncio.AbstractEventLoop, until: float,
                         in_flight: InFlightEntries) -> None:
    if in_flight:
        # Entries sent before the round settle first, their receipts and deliveries written
        # under our lease: a client's every command then has a known outcome when its
        # session is handed to the successor (raftmq.server.succession).
        await asyncio.wait([in_flight.drained(loop)], timeout=max(0.0, until - time.monotonic()))
        await asyncio.sleep(HAND_OVER_FLUSH_SECONDS)  # the connections' flushes, one loop turn later
    while syncobj.is_leader and time.monotonic() < until:
        answer: asyncio.Future[int] = loop.create_future()

        def reply(_result: Any, error: int) -> None:
            loop.call_soon_threadsafe(_set_once, answer, error)

        syncobj.run_in_tick_thread(lambda: syncobj.transfer_when_appended(reply))
        try:
            error = await asyncio.wait_for(answer, max(0.0, until - time.monotonic()))
        except TimeoutError:
            return
        if error != SUCCESS:  # no follower caught up yet: it will be after the next append-entries
            await asyncio.sleep(POLL_SECONDS)
            continue
        while syncobj.is_leader and time.monotonic() < until:  # told to stand: wait for its win
            await asyncio.sleep(POLL_SECONDS)
        return


def _set_once(future: asyncio.Future[int], value: int) -> None:
    if not future.done():
        future.set_result(value)
