"""Run a bench: start the workers (in this process or in K), conduct the phases, merge results.

Phases: consumers connect and subscribe -> the conductor sets `start` -> producers send ->
once every producer is done, consumers drain until they have every sent message or the drain
timeout passes -> the conductor sets `stop` -> workers disconnect and hand in their results.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import queue
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

from raftmq.bench.board import Board, Totals
from raftmq.bench.options import BenchOptions
from raftmq.bench.report import BenchResult, merge_results
from raftmq.bench.worker import run_worker

POLL_INTERVAL = 0.1
# Worker processes get this long beyond their own connect timeout to hand in results.
RESULT_GRACE_SECONDS = 30.0

ProgressCallback = Callable[[Totals], None]


@dataclass
class Conductor:
    """Decides when to start producing and when to stop; reads the board, sets its events."""

    opts: BenchOptions
    board: Board
    drain_started: float | None = None
    start_deadline: float | None = None

    def step(self, now: float) -> bool:
        """Advance; True once the run is over (stop has been set)."""
        board = self.board
        totals = board.totals()
        if board.stop.is_set():
            return True
        if not board.start.is_set():
            if self.start_deadline is None:
                # Consumers that fail to connect still report ready (with an error), so this
                # only fires when a worker hangs.
                self.start_deadline = now + 2 * self.opts.connect_timeout + 5.0
            if totals.consumers_ready >= self.opts.consumers or now >= self.start_deadline:
                board.start.set()
            return False
        if totals.producers_done < self.opts.producers:
            return False
        if self.drain_started is None:
            self.drain_started = now
        if (self.opts.consumers == 0 or totals.received >= totals.sent
                or now - self.drain_started >= self.opts.drain_timeout):
            board.stop.set()
            return True
        return False

T = TypeVar("T")


def _uvloop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def _run_loop(main: Coroutine[Any, Any, T]) -> T:
    with asyncio.Runner(loop_factory=_uvloop_factory()) as runner:
        return runner.run(main)


async def _in_process(opts: BenchOptions, on_progress: ProgressCallback | None) -> list[dict[str, Any]]:
    board = Board.local(1)
    conductor = Conductor(opts, board)
    worker = asyncio.ensure_future(run_worker(opts, 0, board))
    loop = asyncio.get_running_loop()
    try:
        while not worker.done():
            finished = conductor.step(loop.time())
            if on_progress is not None:
                on_progress(board.totals())
            if finished:
                break
            await asyncio.wait({worker}, timeout=POLL_INTERVAL)
        return [await worker]
    finally:
        board.stop.set()
        if not worker.done():
            await asyncio.wait({worker}, timeout=opts.connect_timeout + 5.0)
            worker.cancel()


def _process_main(opts: BenchOptions, index: int, board: Board,
                  results: multiprocessing.Queue[tuple[int, Any, str | None]]) -> None:
    try:
        result = _run_loop(run_worker(opts, index, board))
        results.put((index, result, None))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which decides
        results.put((index, None, f"{type(exc).__name__}: {exc}"))


def _multi_process(opts: BenchOptions, on_progress: ProgressCallback | None) -> list[dict[str, Any]]:
    context = multiprocessing.get_context("spawn")
    board = Board.shared(opts.processes, context)
    results: multiprocessing.Queue[tuple[int, Any, str | None]] = context.Queue()
    processes = [
        context.Process(target=_process_main, args=(opts, i, board, results), name=f"raftmq-bench-{i}", daemon=True)
        for i in range(opts.processes)
    ]
    for process in processes:
        process.start()
    conductor = Conductor(opts, board)
    collected: dict[int, dict[str, Any]] = {}
    failures: list[str] = []
    try:
        while True:
            finished = conductor.step(time.monotonic())
            if on_progress is not None:
                on_progress(board.totals())
            if finished:
                break
            if any(not p.is_alive() for p in processes) or not results.empty():
                board.stop.set()  # a worker died early: end the run, report what we have
                break
            time.sleep(POLL_INTERVAL)
    finally:
        board.stop.set()
        deadline = time.monotonic() + opts.connect_timeout + RESULT_GRACE_SECONDS
        while len(collected) + len(failures) < len(processes) and time.monotonic() < deadline:
            try:
                index, result, error = results.get(timeout=POLL_INTERVAL)
            except queue.Empty:
                if all(not p.is_alive() for p in processes) and results.empty():
                    break
                continue
            if error is not None:
                failures.append(f"worker {index}: {error}")
            else:
                collected[index] = result
        for process in processes:
            process.join(timeout=5.0)
            if process.is_alive():
                process.kill()
                process.join(timeout=5.0)
    if len(collected) + len(failures) < len(processes):
        failures.append(f"{len(processes) - len(collected) - len(failures)} worker(s) returned no result")
    outputs = [collected[i] for i in sorted(collected)]
    for failure in failures:
        outputs.append(_failure_result(failure))
    return outputs


def _failure_result(message: str) -> dict[str, Any]:
    from raftmq.bench.worker import WorkerState

    state = WorkerState()
    state.error(message)
    return state.to_dict()


def run_bench(opts: BenchOptions, on_progress: ProgressCallback | None = None) -> BenchResult:
    """Run the bench described by `opts` and return the merged result."""
    started = time.time()
    if opts.processes <= 1:
        outputs = _run_loop(_in_process(opts, on_progress))
    else:
        outputs = _multi_process(opts, on_progress)
    return merge_results(opts, outputs, wall_seconds=time.time() - started)
