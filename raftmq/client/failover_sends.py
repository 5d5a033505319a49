"""Writing the failover client's SENDs until each has an outcome: a RECEIPT, a refusal, a
timeout, or the client giving up. What is owed lives in the `Outbox`; this adds the futures,
the timers and the writes on the current connection."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from functools import partial

from raftmq.client.failover_outbox import Outbox, PendingSend
from raftmq.client.futures import fail_quietly
from raftmq.client.headers import HeadersArg
from raftmq.client.stomp_client import StompClient
from raftmq.errors import ClientError
from raftmq.protocol.frame import Frame
from raftmq.routing.route import RESENT_HEADER

SendFuture = asyncio.Future[Frame | None]
Pending = PendingSend[SendFuture]


class Sends:
    def __init__(self, loop: asyncio.AbstractEventLoop, outbox: Outbox[SendFuture], timeout_ms: float,
                 new_dupl_id: Callable[[], str]) -> None:
        self._loop = loop
        self._outbox = outbox
        self._timeout_ms = timeout_ms
        self._new_dupl_id = new_dupl_id

    def make(self, destination: str, body: bytes, headers: HeadersArg, receipt: bool,
             transaction: str | None) -> Pending:
        """A new SEND in the outbox, with its duplicate-detection id, future and timeout."""
        future: SendFuture = self._loop.create_future()
        pending = self._outbox.add(destination, body, headers, receipt, transaction, future, self._new_dupl_id)
        future.add_done_callback(partial(self._forget_send, pending))
        if self._timeout_ms > 0:
            pending.timer = self._loop.call_later(self._timeout_ms / 1000, self._expire, pending)
        return pending

    def write(self, client: StompClient | None, pending: Pending) -> bool:
        """Write a SEND on the current connection; False if that connection is already gone."""
        if client is None or pending.future.done():
            return client is not None
        # Written again (its first outcome unknown): the broker routes it where it may have gone.
        headers = pending.headers if not pending.writes else [*pending.headers, (RESENT_HEADER, "1")]
        try:
            inner = client.send_nowait(
                pending.destination, pending.body, headers, pending.receipt, transaction=pending.transaction
            )
        except ClientError:
            return False  # broken: the supervisor notices and this SEND waits for the next one
        pending.writes += 1
        pending.inner = inner
        if inner is None:
            self.settle(pending, result=None)
        else:
            assert client.last_receipt_id is not None
            self._outbox.written(client.last_receipt_id, pending)
            inner.add_done_callback(partial(self._on_send_receipt, pending))
        return True

    def write_all(self, client: StompClient | None) -> None:
        """Write every SEND still owed an outcome, oldest first (on a new connection)."""
        for pending in self._outbox.in_order():
            if not self.write(client, pending):
                break

    def _on_send_receipt(self, pending: Pending, inner: asyncio.Future[Frame]) -> None:
        if not inner.cancelled() and inner.exception() is None:
            self.settle(pending, result=inner.result())
        # Otherwise the connection broke: the client's `_on_break` decides between retry and refusal.

    def _expire(self, pending: Pending) -> None:
        pending.timer = None
        if pending.writes:
            message = f"no RECEIPT within {self._timeout_ms:g} ms; the message may or may not be stored"
        else:
            message = f"not sent within {self._timeout_ms:g} ms (no connection)"
        self.settle(pending, error=ClientError(message))

    def settle(self, pending: Pending, *, result: Frame | None = None, error: BaseException | None = None) -> None:
        future = pending.future
        if future.done():
            return
        self._outbox.forget(pending)  # at once: a reconnect in this turn must not resend it
        if error is not None:
            fail_quietly(future, error)  # like StompClient's receipts
        else:
            future.set_result(result)

    def fail_all(self, error_for: Callable[[Pending], BaseException | None]) -> None:
        """Fail every SEND still owed an outcome with `error_for(it)`; None keeps it."""
        for pending in self._outbox.in_order():
            error = error_for(pending)
            if error is not None:
                self.settle(pending, error=error)

    def _forget_send(self, pending: Pending, future: SendFuture) -> None:
        # Runs however the future ended, a caller's cancellation included: never resend it then.
        self._outbox.forget(pending)
        if pending.timer is not None:
            pending.timer.cancel()
            pending.timer = None
