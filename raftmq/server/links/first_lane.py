"""A bridge's forwards first (raftmq.server.links.forward_first): SENDs sent to the neighbour's
leader before they were stored in this group, each awaiting the neighbour's word.

Each forward goes as the store-and-forward queue's messages go (one SEND, or a batch of up to
`BATCH_MESSAGES`), with a receipt, and gets exactly one outcome: how many of its SENDs, from the
first, the neighbour stored. The rest take the store path in this group. That is everything
not confirmed: refused, sent on a connection that was lost (`fall_back_all`), or not answered
within `FIRST_TIMEOUT_SECONDS`. A forward that arrived after all is stored once there: the store
path sends it again with the same forward id.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import Any

from raftmq.client.failover import FailoverClient
from raftmq.core.commands import Send
from raftmq.errors import BrokerRefused, ClientError
from raftmq.protocol.header_block import block_of, pairs_of
from raftmq.routing.forward_batch import BATCH_COUNT_HEADER, BATCH_DESTINATION, BATCH_INDEX_HEADER, encode
from raftmq.routing.route import FALLBACK_HEADER, FORWARD_ID_HEADER, TO_HEADER, first_headers

BATCH_MESSAGES = 100  # messages in one forwarded batch, at most
BATCH_BYTES = 256 * 1024  # bodies in one batch, at most (past it the batch goes as it is)
SINGLE_BYTES = 64 * 1024  # a larger body goes in a SEND of its own
FIRST_TIMEOUT_SECONDS = 10.0  # a forward first not confirmed by then takes the store path
WINDOW = 2  # forwards (batches) in flight per link; what comes meanwhile waits to go in the next


class FirstSend:
    """One SEND forwarded first: the command, its target and its forward id."""

    __slots__ = ("send", "target", "forward_id")

    def __init__(self, send: Send, target: str, forward_id: str) -> None:
        self.send = send
        self.target = target
        self.forward_id = forward_id

    def fallback(self) -> Send:
        """The same SEND for the store path: pinned to its target, with its forward id."""
        send = self.send
        pins = block_of(((TO_HEADER, self.target), (FORWARD_ID_HEADER, self.forward_id), (FALLBACK_HEADER, "1")))
        return Send(send.session, send.destination, send.headers + pins, send.body, send.now, None, send.receipt)


# A forward's SENDs, and how many of them (from the first) the neighbour confirmed.
Outcome = Callable[[list[FirstSend], int], None]


class _Forward:
    __slots__ = ("number", "items", "timer")

    def __init__(self, number: int, items: list[tuple[FirstSend, Outcome]]) -> None:
        self.number = number
        self.items = items  # each SEND with whom to tell its outcome (several connections share a batch)
        self.timer: asyncio.TimerHandle | None = None


class FirstLane:
    """One bridge's forwards first in flight; `confirmed`: SENDs the neighbour stored this way;
    `fell_back`: SENDs that set out so and took the store path."""

    def __init__(self, own_group: str) -> None:
        self._own = own_group
        self._waiting: dict[int, _Forward] = {}
        self._queued: list[tuple[FirstSend, Outcome]] = []  # to go at the end of this loop turn
        self._client: FailoverClient | None = None
        self._flushing = False
        self._number = 0
        self.in_flight = 0
        self.confirmed = 0
        self.fell_back = 0
        self.refusals = 0  # forwards the neighbour refused (in part): what was refused fell back

    def send(self, client: FailoverClient | None, sends: list[FirstSend], outcome: Outcome) -> None:
        """Send `sends` in batches with whatever else is waiting to go (from any connection: one
        Raft entry in the neighbour for many producers): at the end of this loop turn while
        fewer than `WINDOW` forwards are in flight, else as soon as one is answered, so a busier
        link sends larger batches. `outcome` is told, in the order sent, how many of each run of
        them were confirmed."""
        self._client = client
        if not self._queued and len(self._waiting) < WINDOW:
            asyncio.get_running_loop().call_soon(self._flush)
        self._queued.extend((first, outcome) for first in sends)

    def _flush(self) -> None:
        if self._flushing:  # a forward answered at once (the link just went): the loop below goes on
            return
        self._flushing = True
        try:
            queued = self._queued
            while queued and len(self._waiting) < WINDOW:
                end, size = 0, 0
                while end < len(queued) and end < BATCH_MESSAGES and size < BATCH_BYTES:
                    size += _size(queued[end][0].send.body)
                    end += 1
                    if size > SINGLE_BYTES:
                        break
                items = queued[:end]
                del queued[:end]
                self._number += 1
                forward = self._waiting[self._number] = _Forward(self._number, items)
                self._send(self._client, forward)
                queued = self._queued  # `fall_back_all` may have taken them meanwhile
        finally:
            self._flushing = False

    def _send(self, client: FailoverClient | None, forward: _Forward) -> None:
        if client is None:
            return self._done(forward, 0)
        messages = [(first.send.destination,
                     first_headers(pairs_of(first.send.headers), self._own, first.target, first.forward_id),
                     _bytes(first.send.body)) for first, _ in forward.items]
        try:
            if len(messages) == 1:
                destination, headers, body = messages[0]
                future = client.send_nowait(destination, body, headers, receipt=True)
            else:
                future = client.send_nowait(BATCH_DESTINATION, encode(messages),
                                            [(BATCH_COUNT_HEADER, str(len(messages)))], receipt=True)
        except ClientError:
            return self._done(forward, 0)
        self.in_flight += len(forward.items)
        forward.timer = asyncio.get_running_loop().call_later(FIRST_TIMEOUT_SECONDS, self._done, forward, 0)
        future.add_done_callback(functools.partial(self._answered, forward))

    def _answered(self, forward: _Forward, future: asyncio.Future[Any]) -> None:
        if future.cancelled():
            return self._done(forward, 0)
        error = future.exception()
        if error is None:
            return self._done(forward, len(forward.items))
        confirmed = 0
        if isinstance(error, BrokerRefused):  # the store path sends the rest again: its refusals count
            self.refusals += 1
            confirmed = batch_index(error, len(forward.items)) or 0
        self._done(forward, confirmed)

    def _done(self, forward: _Forward, confirmed: int) -> None:
        """Once per forward: the first `confirmed` were stored there, the rest fall back."""
        if self._waiting.pop(forward.number, None) is None:
            return
        if forward.timer is not None:
            forward.timer.cancel()
            self.in_flight -= len(forward.items)
        self._tell(forward.items, confirmed)
        if self._queued:
            self._flush()

    def _tell(self, items: list[tuple[FirstSend, Outcome]], confirmed: int) -> None:
        self.confirmed += confirmed
        self.fell_back += len(items) - confirmed
        start = 0
        while start < len(items):  # each run of one connection's SENDs, in order
            outcome = items[start][1]
            end = start + 1
            while end < len(items) and items[end][1] is outcome:
                end += 1
            outcome([first for first, _ in items[start:end]], max(0, min(confirmed - start, end - start)))
            start = end

    def fall_back_all(self) -> None:
        """The link is lost or closing: every forward not confirmed takes the store path."""
        queued, self._queued = self._queued, []
        for forward in list(self._waiting.values()):
            self._done(forward, 0)
        if queued:
            self._tell(queued, 0)


def _bytes(body: object) -> bytes:
    """A SEND's body as a client frame gave it (bytes, or a view of the frame's buffer)."""
    return body if isinstance(body, bytes) else bytes(body)  # type: ignore[call-overload]


def _size(body: object) -> int:
    return len(body) if isinstance(body, (bytes, bytearray, memoryview)) else 0


def batch_index(error: BrokerRefused, size: int) -> int | None:
    """The message of a batch its neighbour refused (None: the batch as a whole)."""
    raw = error.headers.get(BATCH_INDEX_HEADER)
    if raw is None or not raw.isdigit() or int(raw) >= size:
        return None
    return int(raw)
