"""What the client's parts see of each other, as protocols: subscriptions of their connection,
the browser of a connection, a failover subscription of its client and of each connection.
They let `connection`, `subscription`, `browse`, `failover` and `failover_subscription` refer
to each other's types without importing each other in a circle.

Where a method takes the very object that sees it through a protocol (a subscription asking
its owner to forget it), the parameter is `Any`: naming its class here would close the circle
again. Callers pass only their own `self`."""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from raftmq.protocol.frame import Frame


class SubscriptionOwner(Protocol):
    """A `StompClient` as its `Subscription`s see it."""

    def hold_reading(self, holder: object) -> None:
        """Stop reading the socket until every holder has released it (a full queue)."""

    def release_reading(self, holder: object) -> None: ...

    def unsubscribe_subscription(self, subscription: Any, receipt: bool) -> asyncio.Future[Frame] | None:
        """Send UNSUBSCRIBE for `subscription` and forget it; the RECEIPT's future, if asked."""


class Stream(Protocol):
    """A `Subscription` as browsers and failover subscriptions see it."""

    receipt: asyncio.Future[Frame] | None

    @property
    def active(self) -> bool: ...

    async def get(self) -> Frame: ...

    def get_nowait(self) -> Frame | None: ...

    def qsize(self) -> int: ...

    async def unsubscribe(self, *, receipt: bool = False) -> None: ...


class Subscriber(Protocol):
    """A `StompClient` as browsers and failover subscriptions see it."""

    last_receipt_id: str | None

    @property
    def is_closed(self) -> bool: ...

    def subscribe(
        self,
        destination: str,
        *,
        id: str | None = None,  # noqa: A002 - the STOMP header is called id
        ack: str = "auto",
        headers: Any = None,
        prefetch: int | None = None,
        callback: Any = None,
        queue_size: int = ...,
        receipt: bool = False,
    ) -> Stream: ...


class SubscriptionKeeper(Protocol):
    """A `FailoverClient` as its subscriptions and browses see it."""

    @property
    def stomp_client(self) -> Subscriber | None: ...

    async def wait_connected(self, timeout: float | None = None) -> None: ...

    def forget_subscription(self, subscription: Any) -> None: ...
