"""The producers and consumers of one bench process, on one event loop.

Each message carries `bench-run`, `bench-producer`, `bench-seq` and `bench-ts` (wall clock,
ns: comparable across the bench's processes on one host); warm-up messages also carry
`bench-warmup:1` and count for loss but not for rates and latencies.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from raftmq.bench.accounting import ReceiveLedger, SendLedger
from raftmq.bench.board import Board, Tally
from raftmq.bench.options import BenchOptions, parse_failover
from raftmq.bench.stats import LatencyHistogram
from raftmq.client import StompClient, connect
from raftmq.client.failover_connector import connect_to_leader
from raftmq.errors import ClientError
from raftmq.protocol.frame import Frame

MAX_DISTINCT_ERRORS = 20
BOARD_SYNC_INTERVAL = 0.05
UNRECEIPTED_YIELD_EVERY = 256  # sends between yields when no receipt paces the producer
# ActiveMQ dispatches at most maxPageSize (200) unacknowledged messages of a queue whatever
# the prefetch, so a cumulative ACK must come well before that many.
CUMULATIVE_ACK_MAX = 100


@dataclass
class WorkerState:
    """Everything one process measures; merged across processes by the runner."""

    tally: Tally = field(default_factory=Tally)
    sent: SendLedger = field(default_factory=SendLedger)
    received: ReceiveLedger = field(default_factory=ReceiveLedger)
    receipt_latency: LatencyHistogram = field(default_factory=LatencyHistogram)
    e2e_latency: LatencyHistogram = field(default_factory=LatencyHistogram)
    publish_windows: list[tuple[int, int, int]] = field(default_factory=list)  # (start ns, end ns, msgs)
    first_receive_ns: int = 0
    last_receive_ns: int = 0
    foreign: int = 0  # messages on the destination that this run did not send
    errors: dict[str, int] = field(default_factory=dict)
    received_by_url: dict[str, int] = field(default_factory=dict)  # first receptions, by consumer URL

    def error(self, exc: BaseException | str) -> None:
        self.tally.errors += 1
        text = exc if isinstance(exc, str) else f"{type(exc).__name__}: {exc}"
        if text in self.errors or len(self.errors) < MAX_DISTINCT_ERRORS:
            self.errors[text] = self.errors.get(text, 0) + 1

    def to_dict(self) -> dict[str, Any]:
        return {
            "sent": self.sent.to_dict(),
            "received": self.received.to_dict(),
            "receipt_latency": self.receipt_latency.to_dict(),
            "e2e_latency": self.e2e_latency.to_dict(),
            "publish_windows": list(self.publish_windows),
            "first_receive_ns": self.first_receive_ns,
            "last_receive_ns": self.last_receive_ns,
            "foreign": self.foreign,
            "received_by_url": dict(self.received_by_url),
            "errors": dict(self.errors),
            "error_count": self.tally.errors,
        }


async def _connect(opts: BenchOptions, index: int, consumer: bool = False) -> StompClient:
    kwargs: dict[str, Any] = {
        "login": opts.login,
        "passcode": opts.passcode,
        "vhost": opts.vhost,
        "heartbeat": (opts.heartbeat_ms, opts.heartbeat_ms),
        "timeout": opts.connect_timeout,
    }
    url = opts.url_of(index, consumer=consumer)
    if url is None:
        return await connect(opts.host, opts.port, **kwargs)
    # Once connected, a broken connection is an error the run reports, as with one address:
    # resending what the broker may have stored would blur the loss and duplicate counts.
    target = parse_failover(url)
    client, _address = await connect_to_leader(target.groups, target.options, websocket_path=target.websocket_path,
                                               **kwargs)
    return client


class _Window:
    """At most `size` receipts in flight; a receipt that takes longer than `timeout` ends the producer."""

    def __init__(self, size: int, timeout: float) -> None:
        self.free = size
        self.size = size
        self.timeout = timeout
        self._waiter: asyncio.Future[None] | None = None

    async def wait_free(self) -> None:
        await self._wait_until(1)

    async def wait_empty(self) -> None:
        await self._wait_until(self.size)

    async def _wait_until(self, free: int) -> None:
        try:
            async with asyncio.timeout(self.timeout):
                while self.free < free:
                    self._waiter = asyncio.get_running_loop().create_future()
                    await self._waiter
        except TimeoutError:
            raise ClientError(f"no receipt within {self.timeout:g} s") from None

    def release(self) -> None:
        self.free += 1
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)


class Producer:
    def __init__(self, opts: BenchOptions, producer_id: int, state: WorkerState) -> None:
        self.opts = opts
        self.id = producer_id
        self.state = state
        self.body = os.urandom(opts.size)
        self._window = _Window(opts.receipt_window, opts.connect_timeout)

    async def run(self, board: Board) -> None:
        state = self.state
        try:
            client = await _connect(self.opts, self.id)
        except ClientError as exc:
            state.error(exc)
            state.tally.producers_done += 1
            return
        try:
            await self._produce(client, board)
        except ClientError as exc:
            state.error(exc)
        finally:
            state.tally.producers_done += 1
            if not client.is_closed:
                await client.disconnect(timeout=self.opts.connect_timeout)

    def _headers(self, warmup: bool) -> list[tuple[str, str]]:
        opts = self.opts
        headers = [("bench-run", opts.run_id), ("bench-producer", str(self.id))]
        if warmup:
            headers.append(("bench-warmup", "1"))
        headers.append(("persistent", "true" if opts.persistent else "false"))
        headers.extend(opts.extra_headers)
        return headers

    async def _produce(self, client: StompClient, board: Board) -> None:
        warmup = self.opts.warmup_of(self.id)
        if warmup:
            await self._send_range(client, 0, warmup, None, self._headers(True), board)
        count = self.opts.messages_of(self.id)
        deadline = None if self.opts.duration is None else time.monotonic() + self.opts.duration
        start_ns = time.time_ns()
        sent = await self._send_range(client, warmup, count, deadline, self._headers(False), board)
        if self.opts.receipt_window == 0:
            # Nothing confirmed the sends; DISCONNECT's receipt at least proves they were read.
            await client.disconnect(timeout=self.opts.connect_timeout)
        self.state.publish_windows.append((start_ns, time.time_ns(), sent))

    async def _send_range(
        self,
        client: StompClient,
        first: int,
        count: int | None,
        deadline: float | None,
        base_headers: list[tuple[str, str]],
        board: Board,
    ) -> int:
        """Send `count` messages (or until `deadline`); wait for their receipts. Returns sent."""
        opts = self.opts
        state = self.state
        window = self._window
        measured = not any(name == "bench-warmup" for name, _ in base_headers)
        destination, body, producer = opts.destination, self.body, self.id
        record_sent = state.sent.record_sent
        tally = state.tally
        seq = first
        end = first + count if count is not None else None
        while (end is None or seq < end) and not board.stop.is_set():
            if opts.receipt_window and window.free <= 0:
                await window.wait_free()
                if client.is_closed or board.stop.is_set():
                    break
            if deadline is not None and time.monotonic() >= deadline:
                break
            # Stamped after any wait for the window, so latency is the broker's, not ours.
            headers = base_headers + [("bench-seq", str(seq)), ("bench-ts", str(time.time_ns()))]
            if opts.receipt_window:
                receipt = client.send_nowait(destination, body, headers, True)
                assert receipt is not None
                window.free -= 1
                receipt.add_done_callback(self._receipt_callback(seq, time.monotonic_ns(), measured))
            else:
                client.send_nowait(destination, body, headers)
            record_sent(producer, seq)
            tally.sent += 1
            seq += 1
            if not opts.receipt_window and seq % UNRECEIPTED_YIELD_EVERY == 0:
                await client.drain()
                await asyncio.sleep(0)
        if opts.receipt_window:
            await window.wait_empty()
        return seq - first

    def _receipt_callback(self, seq: int, sent_at: int, measured: bool) -> Callable[[asyncio.Future[Frame]], None]:
        state = self.state
        producer = self.id

        def on_receipt(fut: asyncio.Future[Frame]) -> None:
            self._window.release()
            if fut.cancelled():
                return
            exc = fut.exception()
            if exc is not None:
                state.error(exc)
                return
            if measured:
                state.receipt_latency.record(time.monotonic_ns() - sent_at)
            state.sent.record_receipt(producer, seq)
            state.tally.receipted += 1

        return on_receipt


class Consumer:
    def __init__(self, opts: BenchOptions, consumer_id: int, state: WorkerState) -> None:
        self.opts = opts
        self.id = consumer_id
        self.state = state
        self.client: StompClient | None = None
        self._unacked: Frame | None = None
        self._unacked_count = 0
        prefetch = opts.prefetch or 1000
        self._ack_every = max(1, min(prefetch // 2, CUMULATIVE_ACK_MAX))
        # A slow consumer works on one message at a time, in arrival order, then acknowledges it.
        self._work_s = opts.consumer_work_ms / 1000 if consumer_id < opts.slow_consumers else 0.0
        self._backlog: asyncio.Queue[Frame] | None = None
        self._worker: asyncio.Task[None] | None = None

    async def start(self) -> None:
        opts = self.opts
        try:
            self.client = await _connect(opts, self.id, consumer=True)
            subscription = self.client.subscribe(
                opts.destination,
                ack=opts.ack,
                headers=list(opts.extra_headers),
                prefetch=opts.prefetch,
                callback=self._on_message if not self._work_s else self._queue_message,
                receipt=True,
            )
            if self._work_s:
                self._backlog = asyncio.Queue()
                self._worker = asyncio.get_running_loop().create_task(self._work())
            assert subscription.receipt is not None
            async with asyncio.timeout(opts.connect_timeout):
                await subscription.receipt
        except (ClientError, TimeoutError) as exc:
            self.state.error(exc if isinstance(exc, ClientError) else "SUBSCRIBE receipt timed out")
        finally:
            self.state.tally.consumers_ready += 1

    def _queue_message(self, frame: Frame) -> None:
        assert self._backlog is not None
        self._backlog.put_nowait(frame)

    async def _work(self) -> None:
        assert self._backlog is not None
        while True:
            frame = await self._backlog.get()
            deadline = time.perf_counter() + self._work_s
            while time.perf_counter() < deadline:  # the work: this consumer's time, not the broker's
                await asyncio.sleep(max(0.0, deadline - time.perf_counter()))
            self._on_message(frame)

    async def stop(self) -> None:
        if self._worker is not None:
            self._worker.cancel()  # what it had not worked on yet is redelivered elsewhere
        client = self.client
        if client is None or client.is_closed:
            error = client.closed.result() if client is not None else None
            if error is not None:
                self.state.error(error)
            return
        try:
            if self._unacked is not None:
                client.ack_nowait(self._unacked)
            await client.disconnect(timeout=self.opts.connect_timeout)
        except ClientError as exc:
            self.state.error(exc)

    def _on_message(self, frame: Frame) -> None:
        now = time.time_ns()
        state = self.state
        run = producer = seq = sent_ns = None
        redelivered = warmup = False
        for name, value in frame.headers:
            if name.startswith("bench-"):
                if name == "bench-seq":
                    seq = value
                elif name == "bench-ts":
                    sent_ns = value
                elif name == "bench-producer":
                    producer = value
                elif name == "bench-run":
                    run = value
                elif name == "bench-warmup":
                    warmup = True
            elif name == "redelivered":
                redelivered = value == "true"
        self._acknowledge(frame)
        if run != self.opts.run_id or producer is None or seq is None or sent_ns is None:
            state.foreign += 1
            return
        try:
            first = state.received.record(int(producer), int(seq), redelivered)
        except ValueError:
            state.foreign += 1
            return
        if not first:
            return
        state.tally.received += 1
        if self.opts.more_consumer_urls or self.opts.more_urls:
            key = str(self.opts.url_of(self.id, consumer=True))
            state.received_by_url[key] = state.received_by_url.get(key, 0) + 1
        if warmup:
            return
        if not state.first_receive_ns:
            state.first_receive_ns = now
        state.last_receive_ns = now
        if not redelivered:
            # A redelivery's first delivery (maybe in another process) already gave a sample.
            state.e2e_latency.record(now - int(sent_ns))

    def _acknowledge(self, frame: Frame) -> None:
        mode = self.opts.ack
        client = self.client
        if mode == "auto" or client is None or client.is_closed:
            return
        try:
            if mode == "client-individual":
                client.ack_nowait(frame)
                return
            self._unacked = frame
            self._unacked_count += 1
            if self._unacked_count >= self._ack_every:
                client.ack_nowait(frame)
                self._unacked = None
                self._unacked_count = 0
        except ClientError:
            pass  # disconnecting: the broker redelivers what we could not ack


async def run_worker(opts: BenchOptions, index: int, board: Board) -> dict[str, Any]:
    """Run the producers and consumers `opts` assigns to process `index` until the board says stop."""
    state = WorkerState()
    consumers = [Consumer(opts, c, state) for c in opts.consumers_of(index)]
    producers = [Producer(opts, p, state) for p in opts.producers_of(index)]
    await asyncio.gather(*(consumer.start() for consumer in consumers))
    board.publish(index, state.tally)
    producing: asyncio.Future[Any] | None = None
    try:
        while not board.stop.is_set():
            if producing is None and board.start.is_set():
                producing = asyncio.gather(*(producer.run(board) for producer in producers))
            board.publish(index, state.tally)
            await asyncio.sleep(BOARD_SYNC_INTERVAL if producing is not None else 0.005)
        if producing is not None:
            # Producers finished before the stop unless the run was cut short; then give the
            # receipts in flight a bounded moment.
            await asyncio.wait({producing}, timeout=opts.connect_timeout)
    finally:
        if producing is not None and not producing.done():
            producing.cancel()
        await asyncio.gather(*(consumer.stop() for consumer in consumers))
        state.tally.finished = 1
        board.publish(index, state.tally)
    return state.to_dict()
