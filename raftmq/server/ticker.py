"""The node's ticker: how time reaches the broker core (Tick commands, proposed by the leader).

Every `tick_interval_ms` (at most CLUSTER_TICK_SECONDS in a cluster of groups, whose
redistribution decides on Ticks), and as soon as a scheduled message or a redelivery delay
comes due (`Broker.next_due`), so that those are late by about one commit rather than up to
an interval. A follower proposes nothing (it hears of a new leader from its commit log).
"""

from __future__ import annotations

import asyncio

from raftmq.core.commands import Tick
from raftmq.server.seams.host import TickerHost

CLUSTER_TICK_SECONDS = 0.1
# How often a leader's ticker looks whether a scheduled message (or a redelivery delay) came
# due, at most: it sleeps until the next known due time when that is sooner.
DUE_POLL_SECONDS = 0.02


async def tick_forever(node: TickerHost) -> None:
    """Feed time to the core: every `tick_interval_ms`, and as soon as a scheduled message
    or a redelivery delay comes due (`Broker.next_due`), so that those are late by about one
    commit rather than up to an interval. One Tick at a time is in flight."""
    interval = node.config.tick_interval_ms / 1000
    if node.config.core.cluster is not None:
        # Redistribution decides on Ticks: often enough to honour a short delay.
        interval = min(interval, CLUSTER_TICK_SECONDS)
    loop = asyncio.get_running_loop()  # the interval runs on the loop's clock, `now` is the node's
    last = loop.time()
    pending: asyncio.Future[None] | None = None
    due: int | None = None
    while True:
        if not node.commit_log.is_leader:
            await asyncio.sleep(interval)  # a follower proposes nothing
            last = loop.time()
            continue
        # The leader looks again when the next job is due, and at least every DUE_POLL_SECONDS
        # (a job may have been scheduled meanwhile), never later than the interval.
        wait = DUE_POLL_SECONDS if due is None else max(0.001, (due - node.clock.now_ms()) / 1000)
        await asyncio.sleep(min(interval, DUE_POLL_SECONDS, wait))
        if not _leads(node):  # it may have lost leadership while it slept
            continue
        now = node.clock.now_ms()
        due = node.broker.next_due()
        if loop.time() - last < interval and (due is None or due > now or (pending is not None and not pending.done())):
            continue
        last = loop.time()
        pending = node.commit_log.propose([Tick(now)])
        pending.add_done_callback(ignore_outcome)


def ignore_outcome(future: asyncio.Future[None]) -> None:
    if not future.cancelled():
        future.exception()


def _leads(node: TickerHost) -> bool:
    return node.commit_log.is_leader
