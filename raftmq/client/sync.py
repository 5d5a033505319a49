"""A blocking facade over `FailoverClient`, for scripts, the CLI and tests.

    with Client.connect("failover:(stomp://127.0.0.1:61613)?randomize=false") as client:
        client.send("/queue/a", "hello")                 # waits for the RECEIPT
        subscription = client.subscribe("/queue/a", ack="client-individual")
        message = subscription.receive(timeout=5)        # None when nothing came in time
        subscription.ack(message)

The asyncio client runs on an event loop in a background thread owned by this object; every
method hands a coroutine to that loop and waits for its result. Event listeners added with
`add_listener` run on that thread and must not block. A `vm://NAME` URL's client runs on the loop
of the in-VM broker it names instead (raftmq.vm): then nothing but the caller's thread and the
broker's takes part in a round trip.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import queue
import threading
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

from raftmq.client.failover import FailoverClient
from raftmq.client.failover_connector import EventListener
from raftmq.client.failover_subscription import Delivery, FailoverSubscription
from raftmq.client.failover_url import Address, parse_failover_url
from raftmq.client.headers import HeadersArg
from raftmq.client.subscription import DEFAULT_QUEUE_SIZE
from raftmq.errors import ClientError, SubscriptionEnded
from raftmq.protocol.frame import Frame

T = TypeVar("T")

DEFAULT_CONNECT_TIMEOUT = 30.0
CLOSE_TIMEOUT = 10.0


class _LoopThread:
    """An event loop running forever in a daemon thread until `stop()`."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="raftmq-client-loop", daemon=True)
        self.thread.start()

    def _check_caller(self) -> None:
        """Refuse a call that would wait for the loop from the loop's own thread, or for a
        loop that is gone."""
        if asyncio._get_running_loop() is self.loop:
            raise RuntimeError("the sync client cannot be called from its own event-loop thread (an event listener?)")
        if self.loop.is_closed():
            raise ClientError("the event loop this client ran on has stopped")

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        try:
            self._check_caller()
        except BaseException:
            coro.close()
            raise
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"no result within {timeout} s") from None

    def await_soon(self, start: Callable[[], asyncio.Future[T]], timeout: float | None = None) -> T:
        """`start()` on the loop, then wait for the future it returns: one hop each way, without
        a coroutine's task (a receipted send's path). The outcome comes back through a
        `queue.SimpleQueue`, the lightest of the thread hand-offs."""
        self._check_caller()
        box: queue.SimpleQueue[tuple[bool, Any]] = queue.SimpleQueue()

        def begin() -> None:
            try:
                started = start()
            except BaseException as exc:
                box.put((False, exc))
                return
            if started.done():
                _hand_over(box, started)
            else:
                started.add_done_callback(lambda done: _hand_over(box, done))

        self.loop.call_soon_threadsafe(begin)
        try:
            ok, value = box.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(f"no result within {timeout} s") from None
        if ok:
            return value  # type: ignore[no-any-return]
        raise value

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=CLOSE_TIMEOUT)
        if not self.thread.is_alive():
            self.loop.close()


class _BorrowedLoop(_LoopThread):
    """An in-VM broker's loop, which the client runs on and does not own (nor stops)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:  # (not super's: that would start a loop)
        self.loop = loop

    def stop(self) -> None:
        pass  # the broker's


def _runner_for(url: str) -> _LoopThread:
    target = parse_failover_url(url)
    if target.in_vm:
        from raftmq import vm

        return _BorrowedLoop(vm.served(target.groups[0][0].host).loop)
    return _LoopThread()


class Client:
    """A connected failover client; build it with `Client.connect(url, **kwargs)`."""

    def __init__(self, failover: FailoverClient, runner: _LoopThread) -> None:
        self._failover = failover
        self._runner = runner
        self._closed = False

    @classmethod
    def connect(cls, url: str, *, timeout: float | None = DEFAULT_CONNECT_TIMEOUT, **kwargs: Any) -> Client:
        """Connect to `url` (any form `parse_failover_url` accepts). Keyword arguments are those
        of `FailoverClient` plus `FailoverOptions` field overrides (e.g.
        `max_reconnect_attempts=3`). Raises `ClientError` if no connection within `timeout`."""
        runner = _runner_for(url)

        async def build() -> FailoverClient:
            client = FailoverClient.from_url(url, **kwargs)
            try:
                async with asyncio.timeout(timeout):
                    await client.start()
            except TimeoutError:
                raise ClientError(f"no connection to {url} within {timeout} s") from None
            return client

        try:
            failover = runner.run(build())
        except BaseException:
            runner.stop()
            raise
        return cls(failover, runner)

    def _run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        if self._closed:
            coro.close()
            raise ClientError("client is closed")
        return self._runner.run(coro, timeout)

    # -- state --------------------------------------------------------------------------------
    @property
    def failover(self) -> FailoverClient:
        """The asyncio client underneath (use it only from coroutines run on `loop`)."""
        return self._failover

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._runner.loop

    @property
    def address(self) -> Address | None:
        return self._failover.address

    @property
    def is_connected(self) -> bool:
        return self._failover.is_connected

    def add_listener(self, listener: EventListener) -> None:
        """Call `listener(event)` on the client's loop thread for every `FailoverEvent`."""
        self._runner.loop.call_soon_threadsafe(self._failover.events.append, listener)

    def wait_connected(self, timeout: float | None = None) -> None:
        self._run(self._failover.wait_connected(timeout))

    # -- operations ---------------------------------------------------------------------------
    def send(
        self,
        destination: str,
        body: bytes | str,
        headers: HeadersArg = None,
        receipt: bool = True,
        *,
        transaction: str | None = None,
        timeout: float | None = None,
    ) -> Frame | None:
        """Send; with `receipt` (the default) return the RECEIPT frame. Raises `ClientError`
        if the outcome is unknown (no RECEIPT within `timeout`, the client gave up)."""
        payload = body.encode("utf-8") if isinstance(body, str) else body
        failover = self._failover
        if receipt and timeout is None and not self._closed:  # the common case, without a task
            return self._runner.await_soon(
                lambda: failover.send_nowait(destination, payload, headers, True, transaction=transaction))

        async def send() -> Frame | None:
            try:
                async with asyncio.timeout(timeout):
                    return await failover.send(destination, payload, headers, receipt, transaction=transaction)
            except TimeoutError:
                raise ClientError(f"no RECEIPT within {timeout} s; the message may or may not be stored") from None

        return self._run(send())

    def subscribe(
        self,
        destination: str,
        ack: str = "auto",
        *,
        id: str | None = None,  # noqa: A002 - the STOMP header is called id
        headers: HeadersArg = None,
        prefetch: int | None = None,
        queue_size: int = DEFAULT_QUEUE_SIZE,
    ) -> SyncSubscription:
        async def subscribe() -> SyncSubscription:
            return SyncSubscription(self, self._failover.subscribe(
                destination, id=id, ack=ack, headers=headers, prefetch=prefetch, queue_size=queue_size
            ))

        return self._run(subscribe())

    def browse(
        self, destination: str, limit: int | None = None, *, selector: str | None = None, timeout: float = 10.0
    ) -> list[Frame]:
        """Copies of the messages waiting in the queue `destination`, in queue order (at most
        `limit`; the broker's default otherwise), without consuming them."""
        result = self._run(self._failover.browse(destination, limit=limit, selector=selector, timeout=timeout))
        return result.messages

    def ack(self, message: Frame, *, receipt: bool = False, transaction: str | None = None) -> bool:
        """ACK; False when the connection that delivered `message` is gone (it is redelivered)."""
        return self._run(self._failover.ack(message, receipt=receipt, transaction=transaction))

    def nack(self, message: Frame, *, receipt: bool = False, transaction: str | None = None) -> bool:
        return self._run(self._failover.nack(message, receipt=receipt, transaction=transaction))

    def begin(self, txid: str) -> None:
        self._run(self._failover.begin(txid))

    def commit(self, txid: str) -> None:
        self._run(self._failover.commit(txid))

    def abort(self, txid: str) -> None:
        self._run(self._failover.abort(txid))

    def close(self) -> None:
        """DISCONNECT and stop the loop thread; safe to call twice."""
        if self._closed:
            return
        self._closed = True
        try:
            self._runner.run(self._failover.close(CLOSE_TIMEOUT), timeout=CLOSE_TIMEOUT + 5)
        except ClientError:
            if not self._runner.loop.is_closed():
                raise  # (an in-VM broker that stopped took the connection with it)
        finally:
            self._runner.stop()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _settle(result: asyncio.Future[T] | concurrent.futures.Future[T], done: asyncio.Future[T]) -> None:
    """`done`'s outcome, given to `result`."""
    if done.cancelled():
        result.cancel()
    elif (error := done.exception()) is not None:
        result.set_exception(error)
    else:
        result.set_result(done.result())


def _hand_over(box: queue.SimpleQueue[tuple[bool, Any]], done: asyncio.Future[Any]) -> None:
    """`done`'s outcome, put in `box` for the thread that waits on it."""
    if done.cancelled():
        box.put((False, concurrent.futures.CancelledError()))
    elif (error := done.exception()) is not None:
        box.put((False, error))
    else:
        box.put((True, done.result()))


def _wake(room: asyncio.Future[None]) -> None:
    if not room.done():
        room.set_result(None)


def _retrieved(done: asyncio.Future[Any]) -> None:
    if not done.cancelled():
        done.exception()  # looked at: asyncio does not report it as never retrieved


class SyncSubscription:
    """Blocking access to one `FailoverSubscription` (made on the client's loop).

    In `auto` ack mode a pump on the loop moves each message, as it arrives, into a thread-safe
    hand-off queue that `receive` reads without a hop to the loop: the broker considers those
    messages consumed already, so nothing is lost by taking them early. The pump holds at most
    `queue_size // 2` (at least one) there, then waits for `receive` to take half of them; the
    subscription's own queue (`queue_size`) and its hold on reading do the rest. In the client
    ack modes each `receive` takes a message from the subscription on the loop, so that a
    connection that breaks takes with it only what the application has not yet received."""

    def __init__(self, client: Client, subscription: FailoverSubscription) -> None:
        self._client = client
        self._subscription = subscription
        self._pending: asyncio.Future[Delivery] | None = None  # a get under way (on the loop)
        self._pumped: queue.SimpleQueue[tuple[bool, Any]] | None = None  # auto mode's hand-off
        self._pump_limit = max(1, subscription.queue_size // 2)
        self._pump_room: asyncio.Future[None] | None = None  # the pump waits on it while full
        self._pump_end: BaseException | None = None  # what ended the pump, for every later receive
        if subscription.ack_mode == "auto":
            self._pumped = queue.SimpleQueue()
            asyncio.ensure_future(self._pump())

    async def _pump(self) -> None:
        """(On the loop.) Move what arrives into the hand-off queue, up to `_pump_limit` waiting."""
        subscription, pumped, limit = self._subscription, self._pumped, self._pump_limit
        assert pumped is not None
        loop = asyncio.get_running_loop()
        try:
            while True:
                pumped.put((True, await subscription.get()))
                while pumped.qsize() < limit and (ready := subscription.get_nowait()) is not None:
                    pumped.put((True, ready))
                if pumped.qsize() >= limit:
                    room = self._pump_room = loop.create_future()
                    if pumped.qsize() >= limit:  # (the reader may have emptied it meanwhile)
                        await room
                    self._pump_room = None
        except BaseException as exc:  # SubscriptionEnded, the ClientError that ended it, a cancel
            pumped.put((False, exc))
            if isinstance(exc, asyncio.CancelledError):
                raise

    def _take_pumped(self, timeout: float | None) -> Delivery | None:
        pumped = self._pumped
        assert pumped is not None
        if self._pump_end is not None:
            raise self._pump_end
        try:
            ok, value = pumped.get(timeout=timeout)
        except queue.Empty:
            return None
        if not ok:
            self._pump_end = value
            raise value
        room = self._pump_room
        if room is not None and pumped.qsize() <= self._pump_limit // 2:
            self._client._runner.loop.call_soon_threadsafe(_wake, room)
        return value  # type: ignore[no-any-return]

    @property
    def id(self) -> str:
        return self._subscription.id

    @property
    def destination(self) -> str:
        return self._subscription.destination

    def receive(self, timeout: float | None = None) -> Delivery | None:
        """The next message, or None if none came within `timeout` seconds. Raises
        `SubscriptionEnded` once closed, or the `ClientError` that ended the subscription.

        One `get` of the subscription at a time runs on the loop, kept across calls: a call
        that times out leaves it waiting, and the message it then takes is the next call's."""
        if self._client._closed:
            raise ClientError("client is closed")
        if self._pumped is not None:
            return self._take_pumped(timeout)
        return self._client._runner.await_soon(lambda: self._next_delivery(timeout))

    def _next_delivery(self, timeout: float | None) -> asyncio.Future[Delivery | None]:
        """(On the loop.) What `receive` waits for: the pending get's outcome, or None at `timeout`."""
        loop = asyncio.get_running_loop()
        pending = self._pending
        if pending is None:
            subscription = self._subscription
            ready = subscription.get_nowait() if subscription.active else None
            if ready is not None:  # one waiting already: no task
                done: asyncio.Future[Delivery | None] = loop.create_future()
                done.set_result(ready)
                return done
            pending = self._pending = asyncio.ensure_future(subscription.get())
            pending.add_done_callback(_retrieved)  # its end (SubscriptionEnded) may find no caller
        if pending.done():
            self._pending = None
            return pending  # type: ignore[return-value]
        answer: asyncio.Future[Delivery | None] = loop.create_future()

        def arrived(got: asyncio.Future[Any]) -> None:
            if answer.done():
                return  # the call timed out: the next one takes it (still `_pending`)
            self._pending = None
            _settle(answer, got)

        pending.add_done_callback(arrived)
        if timeout is not None:
            def expire() -> None:
                if not answer.done():
                    answer.set_result(None)

            expiry = loop.call_later(timeout, expire)
            answer.add_done_callback(lambda _: expiry.cancel())
        return answer

    def __iter__(self) -> Iterator[Delivery]:
        """Every message until the subscription ends (blocks while none arrive)."""
        while True:
            try:
                message = self.receive()
            except SubscriptionEnded:
                return
            if message is not None:
                yield message

    def ack(self, message: Frame, *, receipt: bool = False) -> bool:
        return self._client.ack(message, receipt=receipt)

    def nack(self, message: Frame, *, receipt: bool = False) -> bool:
        return self._client.nack(message, receipt=receipt)

    def close(self, *, receipt: bool = False) -> None:
        """UNSUBSCRIBE."""
        self._client._run(self._subscription.unsubscribe(receipt=receipt))

    def __enter__(self) -> SyncSubscription:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._subscription.active:
            self.close()
