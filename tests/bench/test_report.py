from __future__ import annotations

import json

from rich.console import Console

from raftmq.bench.options import BenchOptions
from raftmq.bench.report import merge_results, render_table
from raftmq.bench.worker import WorkerState


def _worker(sends: list[tuple[int, int]], receives: list[tuple[int, int, bool]]) -> dict:
    state = WorkerState()
    for producer, seq in sends:
        state.sent.record_sent(producer, seq)
        state.sent.record_receipt(producer, seq)
        state.receipt_latency.record(1_000_000)
    for producer, seq, redelivered in receives:
        state.received.record(producer, seq, redelivered)
        state.e2e_latency.record(2_000_000)
    state.publish_windows.append((1_000_000_000, 3_000_000_000, len(sends)))
    state.first_receive_ns = 1_500_000_000
    state.last_receive_ns = 5_000_000_000
    return state.to_dict()


def test_merge_counts_distinct_measured_messages_across_processes() -> None:
    opts = BenchOptions(producers=2, consumers=2, processes=2, messages=6, warmup=2)
    # Producer 0 sends seq 0..3 (seq 0 is warm-up), producer 1 seq 0..3 (seq 0 warm-up).
    first = _worker([(0, s) for s in range(4)], [(0, 0, False), (0, 1, False), (1, 2, False)])
    second = _worker(
        [(1, s) for s in range(4)],
        [(1, 0, False), (1, 1, False), (0, 1, True), (1, 2, False)],  # (1, 2) twice: a duplicate
    )
    result = merge_results(opts, [first, second], wall_seconds=4.0)
    outcome = result.outcome
    assert (outcome.sent, outcome.receipted, outcome.received) == (8, 8, 5)
    assert outcome.lost == 3  # (0, 2), (0, 3), (1, 3)
    assert (outcome.duplicated, outcome.redelivered) == (1, 1)
    assert result.consumed == 3  # (0, 1), (1, 1), (1, 2): warm-up seq 0 left out
    assert result.published == 8
    assert result.publish_seconds == 2.0 and result.publish_rate == 4.0
    assert result.consume_seconds == 4.0  # first send 1.0 s to last reception 5.0 s
    assert result.receipt_latency.count == 8 and result.receipt_latency.p50 == 1_000_000
    data = result.to_json()
    json.dumps(data)  # serialisable
    assert data["receipt_latency_ms"]["p50"] == 1.0 and data["e2e_latency_ms"]["max"] == 2.0
    console = Console(record=True, width=200)
    console.print(render_table(result))
    text = console.export_text()
    assert "lost" in text and "4 msg/s" in text
