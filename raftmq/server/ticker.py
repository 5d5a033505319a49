"""The node's ticker: how time reaches the broker core (Tick commands, proposed by the leader).

A leader proposes a Tick when a scheduled message, a redelivery delay or a message's expiry
comes due (`Broker.next_due`), so those are late by about one commit; and every
`tick_interval_ms` (at most CLUSTER_TICK_SECONDS in a cluster of groups, whose redistribution
decides on Ticks) while the core has work that Ticks move along without a due time
(`Broker.wants_ticks`: a queue redistribution watches, a drain, a paged message that expires).
Otherwise it proposes nothing: an idle group commits nothing and this task sleeps.

It sleeps until the next of those times, or until the node's pulse moves (`applied`): after
every applied batch (a SEND may have been scheduled, a NACK delayed, a queue filled) and on a
role change. A follower proposes nothing and sleeps until then. One Tick at a time is in flight.
"""

from __future__ import annotations

import asyncio

from raftmq.core.commands import Tick
from raftmq.server.seams.host import TickerHost
from raftmq.server.seams.pulse import Pulse

CLUSTER_TICK_SECONDS = 0.1


def interval_of(node: TickerHost) -> float:
    interval = node.config.tick_interval_ms / 1000
    if node.config.core.cluster is not None:
        # Redistribution decides on Ticks: often enough to honour a short delay.
        interval = min(interval, CLUSTER_TICK_SECONDS)
    return interval


async def tick_forever(node: TickerHost, applied: Pulse) -> None:
    """Propose Ticks while this node leads, when `Broker.next_due` or `Broker.wants_ticks` say
    one has work; `applied` beats after each applied batch and on a role change."""
    interval = interval_of(node)
    loop = asyncio.get_running_loop()  # the interval runs on the loop's clock, `now` is the node's
    last = loop.time()
    pending: asyncio.Future[None] | None = None
    periodic = False  # the core wanted ticks at the interval when last asked
    # When `wants_ticks` was last asked: it scans the queues, so at most once per interval (a
    # wake-up sooner than that leaves it for when the interval is up).
    asked_at, asked_count = -interval, -1  # and the pulse's count then
    seen = -1
    while True:
        wait: float | None = None  # None: until woken
        if node.commit_log.is_leader and (pending is None or pending.done()):
            now_ms = node.clock.now_ms()
            due = node.broker.next_due()
            ask_in = asked_at + interval - loop.time()
            if ask_in <= 0:
                periodic, ask_in = node.broker.wants_ticks(), interval
                asked_at, asked_count = loop.time(), applied.count
            if (due is not None and due <= now_ms) or (periodic and loop.time() - last >= interval):
                last = loop.time()
                pending = node.commit_log.propose([Tick(now_ms)])
                pending.add_done_callback(ignore_outcome)
                # Its apply beats before its future is settled, and a failed one is applied
                # nowhere: the settled future wakes this task either way.
                pending.add_done_callback(lambda _: applied.beat())
                continue
            times = [] if due is None else [(due - now_ms) / 1000]
            if periodic:
                times.append(last + interval - loop.time())
            elif asked_count != applied.count:
                times.append(ask_in)  # applied since the last ask: ask again when the interval is up
            wait = max(0.001, min(times)) if times else None
        seen = await applied.wait(seen, wait)


def ignore_outcome(future: asyncio.Future[None]) -> None:
    if not future.cancelled():
        future.exception()
