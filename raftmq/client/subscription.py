"""One SUBSCRIBE of a `StompClient`: an async iterator over MESSAGE frames, or a callback."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable

from raftmq.client.protocols import SubscriptionOwner
from raftmq.errors import ClientError, SubscriptionEnded
from raftmq.protocol.frame import Frame

DEFAULT_QUEUE_SIZE = 1024

MessageCallback = Callable[[Frame], None]


class Subscription:
    """Messages of one subscription, in arrival order.

    Without a callback, frames wait in a bounded queue; when it is full the client stops
    reading the socket (so the broker's flow control, not our memory, absorbs a slow consumer)
    and reads again once the queue is half empty. Beware: while reading is held, no RECEIPT
    reaches this connection either, so consume before awaiting a receipt on the same client.

    With a callback, each frame is handed over synchronously as it is parsed: the fastest path,
    and the callback must not block.
    """

    def __init__(
        self,
        client: SubscriptionOwner,
        sub_id: str,
        destination: str,
        ack: str,
        callback: MessageCallback | None = None,
        queue_size: int = DEFAULT_QUEUE_SIZE,
    ) -> None:
        if queue_size < 1:
            raise ValueError("queue_size must be at least 1")
        self.id = sub_id
        self.destination = destination
        self.ack_mode = ack
        self._client = client
        self._callback = callback
        self._queue: deque[Frame] = deque()
        self._queue_size = queue_size
        self._holding_reads = False
        self._waiter: asyncio.Future[None] | None = None
        self._ended = False
        self._error: BaseException | None = None
        self.receipt: asyncio.Future[Frame] | None = None
        """The RECEIPT of the SUBSCRIBE frame, when one was asked for."""

    @property
    def active(self) -> bool:
        return not self._ended

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> Frame:
        try:
            return await self.get()
        except SubscriptionEnded:
            raise StopAsyncIteration from None

    async def get(self) -> Frame:
        """The next message; raises `ClientError` once the subscription ended."""
        if self._callback is not None:
            raise ClientError("this subscription delivers to a callback")
        while not self._queue:
            if self._ended:
                if self._error is not None:
                    raise self._error
                raise SubscriptionEnded(f"subscription {self.id} ended")
            waiter = asyncio.get_running_loop().create_future()
            self._waiter = waiter
            try:
                await waiter
            finally:
                self._waiter = None
        frame = self._queue.popleft()
        if self._holding_reads and len(self._queue) <= self._queue_size // 2:
            self._holding_reads = False
            self._client.release_reading(self)
        return frame

    def get_nowait(self) -> Frame | None:
        """A queued message if there is one."""
        if not self._queue:
            return None
        frame = self._queue.popleft()
        if self._holding_reads and len(self._queue) <= self._queue_size // 2:
            self._holding_reads = False
            self._client.release_reading(self)
        return frame

    def qsize(self) -> int:
        return len(self._queue)

    async def unsubscribe(self, *, receipt: bool = False) -> None:
        """Send UNSUBSCRIBE; queued messages can still be read, then iteration stops."""
        if self._ended:
            return
        fut = self._client.unsubscribe_subscription(self, receipt=receipt)
        self.end(None)
        if fut is not None:
            await fut

    # -- called by the client ---------------------------------------------------------------
    def deliver(self, frame: Frame) -> None:
        """A MESSAGE for this subscription arrived: hand it to the callback, or queue it (a
        full queue holds the client's reading until `get` makes room)."""
        if self._ended:
            return
        callback = self._callback
        if callback is not None:
            callback(frame)
            return
        self._queue.append(frame)
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)
        if not self._holding_reads and len(self._queue) >= self._queue_size:
            self._holding_reads = True
            self._client.hold_reading(self)

    def end(self, error: BaseException | None) -> None:
        """No more messages: unsubscribed, or the connection ended (`error` is then what
        `get` raises once the queue is empty; None means a plain end of iteration)."""
        if self._ended:
            return
        self._ended = True
        self._error = error
        if self._holding_reads:
            self._holding_reads = False
            self._client.release_reading(self)
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)


