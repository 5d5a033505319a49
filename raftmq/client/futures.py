"""Two rules about the futures the client's parts hand each other, kept in one place. Typed by
what they use, so pure modules (the failover outbox) can apply them without asyncio."""

from __future__ import annotations

from typing import Protocol


class ReceiptWait(Protocol):
    """A RECEIPT awaited on one connection (an `asyncio.Future[Frame]` in the client)."""

    def done(self) -> bool: ...

    def cancelled(self) -> bool: ...

    def exception(self) -> BaseException | None: ...


class Failable(Protocol):
    """A future the client may have to fail (an `asyncio.Future` in the client)."""

    def done(self) -> bool: ...

    def set_exception(self, exception: BaseException, /) -> None: ...

    def exception(self) -> BaseException | None: ...


def unanswered(wait: ReceiptWait) -> bool:
    """No RECEIPT answered it: still waiting, or its connection ended first (cancelled or failed)."""
    return not wait.done() or wait.cancelled() or wait.exception() is not None


def fail_quietly(future: Failable, error: BaseException) -> None:
    """Fail `future` unless it is done. The error is marked as retrieved: the cause also reaches
    whoever watches the connection, and a future nobody awaits need not log it again."""
    if not future.done():
        future.set_exception(error)
        future.exception()
