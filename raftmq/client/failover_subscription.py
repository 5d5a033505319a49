"""One subscription of a `FailoverClient` (it survives reconnects by subscribing again), and
`FailoverSubscriptions`, the client's set of them.

Each connection gets its own `Subscription` (same destination, id, ack mode and headers); this
object hands out their messages as `Delivery` frames that remember which connection delivered
them, so the client never ACKs a message on a connection that did not deliver it.

When a connection breaks, messages it delivered in a client ack mode that were not yet taken
from the queue are dropped: the broker never saw an ACK for them and redelivers them (flagged
`redelivered`). In `auto` mode the broker considers them consumed, so they are still handed out.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from collections.abc import Callable

from raftmq.client.futures import fail_quietly, unanswered
from raftmq.client.protocols import Stream, Subscriber, SubscriptionKeeper
from raftmq.client.subscription import DEFAULT_QUEUE_SIZE
from raftmq.errors import ClientError, SubscriptionEnded
from raftmq.protocol.frame import Frame

DeliveryCallback = Callable[["Delivery"], None]


class Delivery(Frame):
    """A MESSAGE frame plus the number of the connection that delivered it.

    A plain subclass, as Frame is a plain class (compiled when raftmq.compiled says so)."""

    __slots__ = ("connection",)

    def __init__(self, command: str, headers: list[tuple[str, str]] | None = None, body: bytes = b"",
                 connection: int = 0) -> None:
        super().__init__(command, [] if headers is None else headers, body)
        self.connection = connection

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Delivery):
            return NotImplemented
        return (self.command, self.headers, self.body, self.connection) == (
            other.command, other.headers, other.body, other.connection)

    __hash__ = None  # type: ignore[assignment]  # mutable, like Frame

    def __repr__(self) -> str:
        return (f"Delivery(command={self.command!r}, headers={self.headers!r}, body={self.body!r}, "
                f"connection={self.connection!r})")

    @classmethod
    def of(cls, frame: Frame, connection: int) -> Delivery:
        return cls(frame.command, frame.headers, frame.body, connection)


class FailoverSubscription:
    """Iterate it (or pass a callback) like a `Subscription`; it lasts across failovers."""

    def __init__(
        self,
        owner: SubscriptionKeeper,
        sub_id: str,
        destination: str,
        ack: str,
        headers: list[tuple[str, str]],
        prefetch: int | None,
        callback: DeliveryCallback | None,
        queue_size: int = DEFAULT_QUEUE_SIZE,
    ) -> None:
        if queue_size < 1:
            raise ValueError("queue_size must be at least 1")
        self._owner = owner
        self.id = sub_id
        self.destination = destination
        self.ack_mode = ack
        self.headers = headers
        self.prefetch = prefetch
        self._callback = callback
        self._queue_size = queue_size
        self._inner: Stream | None = None
        self._inner_connection = 0
        self._leftover: deque[Delivery] = deque()
        self._ended = False
        self._error: BaseException | None = None
        self._change: asyncio.Future[None] | None = None
        self.attachments = 0  # how many connections this subscription was sent on
        self.receipt: asyncio.Future[Frame] = asyncio.get_running_loop().create_future()
        """Completes with the first RECEIPT of the SUBSCRIBE (fails if the broker refused it)."""

    @property
    def active(self) -> bool:
        return not self._ended

    @property
    def queue_size(self) -> int:
        """How many messages wait here at most before reading is held (per connection)."""
        return self._queue_size

    @property
    def attached(self) -> bool:
        return self._inner is not None

    def qsize(self) -> int:
        inner = self._inner
        return len(self._leftover) + (inner.qsize() if inner is not None else 0)

    def __aiter__(self) -> FailoverSubscription:
        return self

    async def __anext__(self) -> Delivery:
        try:
            return await self.get()
        except SubscriptionEnded:
            raise StopAsyncIteration from None

    async def get(self) -> Delivery:
        """The next message; raises `SubscriptionEnded` once unsubscribed or closed, or the
        `ClientError` that ended it (the broker refused it, the client gave up reconnecting)."""
        if self._callback is not None:
            raise ClientError("this subscription delivers to a callback")
        while True:
            if self._leftover:
                return self._leftover.popleft()
            inner = self._inner
            if inner is None:
                if self._ended:
                    raise self._error if self._error is not None else SubscriptionEnded(f"subscription {self.id} ended")
                await self._wait_change()
                continue
            connection = self._inner_connection
            try:
                frame = await inner.get()
            except ClientError:
                # The connection broke; the client detaches us shortly and subscribes again.
                if self._inner is inner:
                    await self._wait_change()
                continue
            if not inner.active and self.ack_mode != "auto":
                continue  # its connection is gone, so is any chance to ack it: it is redelivered
            return Delivery.of(frame, connection)

    def get_nowait(self) -> Delivery | None:
        if self._leftover:
            return self._leftover.popleft()
        inner = self._inner
        if inner is None:
            return None
        frame = inner.get_nowait()
        return None if frame is None else Delivery.of(frame, self._inner_connection)

    async def unsubscribe(self, *, receipt: bool = False) -> None:
        """UNSUBSCRIBE (if connected); messages already queued can still be read."""
        if self._ended:
            return
        inner = self._inner
        self._owner.forget_subscription(self)
        self.end(None, keep_queued=True)
        if inner is not None and inner.active:
            await inner.unsubscribe(receipt=receipt)

    # -- called by the failover client (its reconnects drive these) -----------------------
    def attach(self, client: Subscriber, connection: int) -> str | None:
        """SUBSCRIBE on a new connection; returns the receipt id of that SUBSCRIBE."""
        callback = None
        if self._callback is not None:
            user_callback = self._callback

            def callback(frame: Frame) -> None:
                user_callback(Delivery.of(frame, connection))

        inner = client.subscribe(
            self.destination,
            id=self.id,
            ack=self.ack_mode,
            headers=list(self.headers),
            prefetch=self.prefetch,
            callback=callback,
            queue_size=self._queue_size,
            receipt=True,
        )
        self._inner = inner
        self._inner_connection = connection
        self.attachments += 1
        if inner.receipt is not None:
            inner.receipt.add_done_callback(self._on_inner_receipt)
        self._wake()
        return client.last_receipt_id

    @property
    def awaiting_receipt(self) -> bool:
        """Subscribed on the current connection and its RECEIPT has not come (yet)."""
        inner = self._inner
        if self._ended or inner is None or inner.receipt is None:
            return False
        return unanswered(inner.receipt)

    def _on_inner_receipt(self, fut: asyncio.Future[Frame]) -> None:
        if self.receipt.done() or unanswered(fut):
            return  # a refusal reaches us through `end`; a break means a later SUBSCRIBE
        self.receipt.set_result(fut.result())

    def detach(self, keep_queued: bool = False) -> None:
        """Its connection broke. Messages still queued there are kept only in `auto` mode (or
        with `keep_queued`): in a client ack mode the broker redelivers them."""
        inner, self._inner = self._inner, None
        if inner is not None and (keep_queued or self.ack_mode == "auto"):
            while (frame := inner.get_nowait()) is not None:
                self._leftover.append(Delivery.of(frame, self._inner_connection))
        self._wake()

    def end(self, error: BaseException | None, keep_queued: bool = False) -> None:
        """No more connections: unsubscribed or closed (`error` None), refused by the broker or
        the client gave up (`get` raises `error` once what is queued was read)."""
        if self._ended:
            return
        self._ended = True
        self._error = error
        self.detach(keep_queued)
        fail_quietly(self.receipt, error or SubscriptionEnded(f"subscription {self.id} ended"))
        self._wake()

    def _wake(self) -> None:
        change, self._change = self._change, None
        if change is not None and not change.done():
            change.set_result(None)

    async def _wait_change(self) -> None:
        if self._change is None:
            self._change = asyncio.get_running_loop().create_future()
        await asyncio.shield(self._change)


class FailoverSubscriptions:
    """A failover client's live subscriptions, by id, in the order they were made: each new
    connection subscribes them again, in that order."""

    def __init__(self) -> None:
        self._by_id: dict[str, FailoverSubscription] = {}
        self._ids = itertools.count(1)

    def new_id(self, requested: str | None) -> str:
        """`requested`, or the next free "sub-N"; `ClientError` if that id is in use."""
        sub_id = requested if requested is not None else f"sub-{next(self._ids)}"
        if sub_id in self._by_id:
            raise ClientError(f"subscription id {sub_id!r} is already in use")
        return sub_id

    def add(self, subscription: FailoverSubscription) -> None:
        self._by_id[subscription.id] = subscription

    def forget(self, subscription: FailoverSubscription) -> None:
        """It unsubscribed or was refused: it is not subscribed again."""
        self._by_id.pop(subscription.id, None)

    def attach(self, subscription: FailoverSubscription, client: Subscriber | None, connection: int,
               written: Callable[[str, FailoverSubscription], None]) -> bool:
        """SUBSCRIBE on connection number `connection`, telling `written` its receipt id;
        False if that connection is gone already."""
        if client is None:
            return False
        try:
            receipt_id = subscription.attach(client, connection)
        except ClientError:
            return False
        if receipt_id is not None:
            written(receipt_id, subscription)
        return True

    def attach_all(self, client: Subscriber | None, connection: int,
                   written: Callable[[str, FailoverSubscription], None]) -> None:
        for subscription in list(self._by_id.values()):
            if not self.attach(subscription, client, connection, written):
                break

    def detach_all(self) -> None:
        for subscription in self._by_id.values():
            subscription.detach()

    def end_all(self, error: BaseException | None) -> None:
        """End them all (the client closed, or gave up with `error`) and forget them."""
        subscriptions = list(self._by_id.values())
        self._by_id.clear()
        for subscription in subscriptions:
            subscription.end(error)
