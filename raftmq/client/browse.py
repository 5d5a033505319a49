"""Queue browsing for the clients: ActiveMQ's queue browser over STOMP.

A SUBSCRIBE with `browser:true` gets a copy of each message waiting in the queue, in queue
order, then a MESSAGE with `browser:end` and no body; nothing is consumed. raftmq reads the
`browser-limit` header (at most that many copies) and says on the end marker how many it sent
(`browser-count`) and whether more were waiting (`browser-truncated:true`). An UNSUBSCRIBE
follows, which ActiveMQ needs to drop its browser and raftmq merely answers.
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass

from raftmq.client.protocols import Subscriber, SubscriptionKeeper
from raftmq.errors import BrokerRefused, ClientError
from raftmq.protocol.frame import Frame

BROWSE_TIMEOUT_SECONDS = 10.0
# A connection that breaks mid-browse is retried on the next one, this many times in all.
FAILOVER_BROWSE_ATTEMPTS = 3
# Not the clients' "sub-N" ids: a failover client's subscriptions use those on the same connection.
_browse_ids = itertools.count(1)


@dataclass(frozen=True, slots=True)
class BrowseResult:
    """The copies, in queue order, and whether the queue held more than the limit."""

    messages: list[Frame]
    truncated: bool


def browse_headers(limit: int | None, selector: str | None) -> list[tuple[str, str]]:
    headers = [("browser", "true")]
    if limit is not None:
        headers.append(("browser-limit", str(limit)))
    if selector is not None:
        headers.append(("selector", selector))
    return headers


async def browse(
    client: Subscriber,
    destination: str,
    *,
    limit: int | None = None,
    selector: str | None = None,
    timeout: float = BROWSE_TIMEOUT_SECONDS,
) -> BrowseResult:
    """Browse `destination` on one connection. Raises `BrokerRefused` when the broker refuses
    (a topic, a bad selector), `ClientError` when the connection ends or no end marker comes
    within `timeout` seconds."""
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit}")
    subscription = client.subscribe(
        destination, id=f"browse-{next(_browse_ids)}", ack="auto", headers=browse_headers(limit, selector)
    )
    messages: list[Frame] = []
    try:
        async with asyncio.timeout(timeout):
            while True:
                frame = await subscription.get()
                if frame.get("browser") == "end":
                    return BrowseResult(messages, frame.get("browser-truncated") == "true")
                messages.append(frame)
    except TimeoutError:
        raise ClientError(f"browsing {destination}: no browser:end within {timeout:g} s") from None
    finally:
        if subscription.active and not client.is_closed:
            await subscription.unsubscribe()


async def browse_failover(
    owner: SubscriptionKeeper,
    destination: str,
    *,
    limit: int | None = None,
    selector: str | None = None,
    timeout: float = BROWSE_TIMEOUT_SECONDS,
) -> BrowseResult:
    """Browse on the failover client's current connection; a browse only reads, so one cut
    short by a lost connection starts again on the next (within `timeout` in all)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    for attempt in range(1, FAILOVER_BROWSE_ATTEMPTS + 1):
        remaining = deadline - loop.time()
        try:
            await owner.wait_connected(max(remaining, 0.0))
        except TimeoutError:
            raise ClientError(f"browsing {destination}: not connected within {timeout:g} s") from None
        client = owner.stomp_client
        if client is None:
            continue
        try:
            return await browse(client, destination, limit=limit, selector=selector,
                                timeout=max(deadline - loop.time(), 0.001))
        except BrokerRefused:
            raise
        except ClientError:
            if not client.is_closed or attempt == FAILOVER_BROWSE_ATTEMPTS:
                raise
    raise ClientError(f"browsing {destination}: no connection held for a whole browse")
