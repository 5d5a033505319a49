"""The failover client's outbox: the SENDs it still owes an outcome, and which frame an ERROR
refused. Bookkeeping only: no I/O, no timers, no event loop. The futures and timer handles are
the caller's (raftmq.client.failover_sends); the outbox sees them through small protocols.

Every SEND carries an `_AMQ_DUPL_ID` (the caller's, or a new one) so that writing it again on
the next connection is stored once by the broker. SENDs are kept in the order they were made
and written again in that order (`in_order`). `receipts` maps the receipt ids of the current
connection to what they confirm (a SEND, or a subscription's SUBSCRIBE), in the order written.
When a connection ends, `connection_lost` decides which frame a verdict ERROR was about (see
raftmq.client.failover), so that frame alone is not written again.
"""

from __future__ import annotations

import itertools
import os
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from raftmq.client.futures import ReceiptWait, unanswered
from raftmq.client.headers import HeadersArg, header_pairs

DUPL_ID_HEADER = "_AMQ_DUPL_ID"
# One repeat tells a frame that is refused on every connection from one that only came after
# the culprit, at the cost of one more connection per refused frame.
UNNAMED_REFUSALS_TO_BLAME = 2


class Receipted(Protocol):
    """A frame written with a receipt: a SEND, or a subscription's SUBSCRIBE."""

    @property
    def awaiting_receipt(self) -> bool: ...


class Outcome(Protocol):
    """The caller's handle on a SEND's outcome (an `asyncio.Future` in the client)."""

    def done(self) -> bool: ...


class Cancellable(Protocol):
    """A timer (an `asyncio.TimerHandle` in the client)."""

    def cancel(self) -> None: ...


OutcomeT = TypeVar("OutcomeT", bound=Outcome)


@dataclass(eq=False)
class PendingSend(Generic[OutcomeT]):
    seq: int  # the order SENDs were made in
    destination: str
    headers: list[tuple[str, str]]
    body: bytes
    receipt: bool
    transaction: str | None
    dupl_id: str
    future: OutcomeT
    writes: int = 0  # how many connections it was written on
    timer: Cancellable | None = None
    inner: ReceiptWait | None = None  # its RECEIPT on the connection it was last written on
    receipt_id: str | None = None  # that RECEIPT's id

    @property
    def awaiting_receipt(self) -> bool:
        inner = self.inner
        return not self.future.done() and inner is not None and unanswered(inner)


@dataclass(frozen=True, slots=True)
class Verdict:
    """An ERROR that refused one frame (not a transient one): the frame's receipt id if the
    broker could read it, and the ERROR's message."""

    receipt_id: str | None
    message: str


class _DuplIds:
    """Duplicate-detection ids, unique across processes and time: a random 128-bit prefix drawn
    once per process (again in a forked child), then a counter. `uuid4()` per SEND would read
    the kernel's random source on every message."""

    def __init__(self) -> None:
        self._renew()
        os.register_at_fork(after_in_child=self._renew)

    def _renew(self) -> None:
        self._prefix = f"raftmq-{uuid.uuid4().hex}-"
        self._count = itertools.count(1)

    def __call__(self) -> str:
        return f"{self._prefix}{next(self._count)}"


new_dupl_id = _DuplIds()


def with_dupl_id(headers: HeadersArg, make_id: Callable[[], str]) -> tuple[list[tuple[str, str]], str]:
    """The SEND's headers with a duplicate-detection id, and that id. An empty id would come
    first and switch duplicate detection off: it is replaced."""
    pairs = [h for h in header_pairs(headers) if h[0] != DUPL_ID_HEADER or h[1]]
    dupl_id = next((value for name, value in pairs if name == DUPL_ID_HEADER), None)
    if not dupl_id:
        dupl_id = make_id()
        pairs.append((DUPL_ID_HEADER, dupl_id))
    return pairs, dupl_id


class Outbox(Generic[OutcomeT]):
    def __init__(self) -> None:
        self._seq = itertools.count(1)
        self.pending: dict[int, PendingSend[OutcomeT]] = {}  # by seq: the order SENDs were made
        self.receipts: dict[str, Receipted] = {}  # receipt id on this connection -> what it confirms
        # (frame, ERROR message, times in a row): unnamed refusals pinned on one frame so far.
        self._suspect: tuple[Receipted, str, int] | None = None

    def __len__(self) -> int:
        return len(self.pending)

    def add(
        self,
        destination: str,
        body: bytes,
        headers: HeadersArg,
        receipt: bool,
        transaction: str | None,
        future: OutcomeT,
        make_id: Callable[[], str],
    ) -> PendingSend[OutcomeT]:
        """A new SEND, last in order, with its duplicate-detection id."""
        header_list, dupl_id = with_dupl_id(headers, make_id)
        pending = PendingSend(next(self._seq), destination, header_list, body, receipt, transaction, dupl_id, future)
        self.pending[pending.seq] = pending
        return pending

    def forget(self, pending: PendingSend[OutcomeT]) -> None:
        """`pending` has its outcome: never written again, and its receipt forgotten (a client
        that sends for days must not keep every SEND it ever made, body included)."""
        self.pending.pop(pending.seq, None)
        receipt_id = pending.receipt_id
        if receipt_id is not None and self.receipts.get(receipt_id) is pending:
            del self.receipts[receipt_id]

    def in_order(self) -> list[PendingSend[OutcomeT]]:
        """The SENDs still owed an outcome, oldest first (a copy: settling one while walking
        it is fine)."""
        return list(self.pending.values())

    def resent_ids(self) -> tuple[str, ...]:
        """Dupl ids of the SENDs written before that will be written again."""
        return tuple(p.dupl_id for p in self.pending.values() if p.writes)

    def written(self, receipt_id: str, item: Receipted) -> None:
        """`item` was written on the current connection asking for `receipt_id`."""
        self.receipts[receipt_id] = item
        if isinstance(item, PendingSend):
            item.receipt_id = receipt_id

    def new_connection(self) -> None:
        self.receipts = {}

    def connection_lost(self, verdict: Verdict | None) -> Receipted | None:
        """The connection ended (with the ERROR `verdict`, if it was one): what it refused, if
        known well enough to stop writing it; the receipts of that connection are forgotten."""
        culprit = None
        if verdict is None:
            self.not_blamed()
        else:
            culprit = self.blame(verdict.receipt_id, verdict.message)
        self.new_connection()
        return culprit

    def not_blamed(self) -> None:
        self._suspect = None

    def blame(self, receipt_id: str | None, message: str) -> Receipted | None:
        """The SEND or subscription a verdict ERROR refused, if known well enough to stop
        retrying it; None lets everything be written again. An ERROR that names no receipt is
        pinned on the oldest frame still waiting for its RECEIPT once the same ERROR came back
        for it `UNNAMED_REFUSALS_TO_BLAME` times in a row."""
        if receipt_id is not None:
            self._suspect = None
            return self.receipts.get(receipt_id)  # None: an ACK, COMMIT... never resent
        oldest = next((item for item in self.receipts.values() if item.awaiting_receipt), None)
        if oldest is None:
            self._suspect = None
            return None
        suspect = self._suspect
        times = suspect[2] + 1 if suspect is not None and suspect[0] is oldest and suspect[1] == message else 1
        if times >= UNNAMED_REFUSALS_TO_BLAME:
            self._suspect = None
            return oldest
        self._suspect = (oldest, message, times)
        return None
