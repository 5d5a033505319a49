"""One round of a leadership transfer (raftmq.replication.raft_log's `transfer_leadership`,
the Raft dissertation's 3.10), while the log holds new proposals back: the entries in flight
settle, then the follower whose log matches ours is told to stand at once (pysyncobj's
TimeoutNow), and the round waits for its win until `until`."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from raftmq.replication.in_flight import InFlightEntries
from raftmq.replication.pysyncobj.syncobj import SUCCESS, HardenedSyncObj

HAND_OVER_FLUSH_SECONDS = 0.003  # after the last entries settle, before TimeoutNow ends our lease
POLL_SECONDS = 0.002


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
