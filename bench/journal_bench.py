"""Journal throughput with one fsync per appended batch (the apply path's group commit).

    .venv/bin/python -m bench.journal_bench                 # the default shapes, ~3 s each
    .venv/bin/python -m bench.journal_bench --shape 100x1024 --seconds 10 --dir /data/x

Each shape is RECORDSxBYTES per batch. Payloads are random (incompressible: the worst case
for lz4) unless --compressible. Reports batches/s (= fsyncs/s), records/s, payload MB/s and
the append+sync latency per batch, then a read pass over the written refs with a cold cache.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import tempfile
import time

from raftmq.storage.journal import Journal
from raftmq.storage.records import Record

DEFAULT_SHAPES = ["1x1024", "100x1024", "1000x100", "16x65536"]


def run_shape(directory: str, records_per_batch: int, record_bytes: int, seconds: float, compressible: bool) -> None:
    # Random payloads are sliced from a 4 MiB blob in turn, so no batch repeats itself within
    # lz4's 64 KiB window; compressible ones are one repeated phrase.
    blob = random.Random(1).randbytes(4 * 2**20)
    slots = max(1, len(blob) // record_bytes - 1)
    phrase = (b"message body " * (record_bytes // 13 + 1))[:record_bytes]

    def payload(n: int) -> bytes:
        if compressible:
            return phrase
        start = (n % slots) * record_bytes
        return blob[start : start + record_bytes]

    latencies: list[float] = []
    refs = []
    raft_index = 0
    sequence = 0
    journal = Journal(directory)
    started = time.perf_counter()
    deadline = started + seconds
    while time.perf_counter() < deadline and len(latencies) < 10_000_000:
        raft_index += 1
        batch = [Record(raft_index, 1, 1, payload(sequence + k)) for k in range(records_per_batch)]
        sequence += records_per_batch
        t0 = time.perf_counter()
        batch_refs = journal.append_batch(batch)
        journal.sync()
        latencies.append(time.perf_counter() - t0)
        refs.append(batch_refs[-1])
    elapsed = time.perf_counter() - started
    journal.close()

    batches = len(latencies)
    payload_mb = batches * records_per_batch * record_bytes / 1e6
    disk_mb = sum(os.path.getsize(os.path.join(directory, name)) for name in os.listdir(directory)) / 1e6
    latencies.sort()
    print(
        f"{records_per_batch:>5} x {record_bytes:>6} B  "
        f"{batches / elapsed:>8.0f} batches/s  {batches * records_per_batch / elapsed:>10.0f} records/s  "
        f"{payload_mb / elapsed:>7.1f} MB/s payload  {disk_mb / elapsed:>7.1f} MB/s disk  "
        f"append+fsync p50 {statistics.median(latencies) * 1e3:.2f} ms  "
        f"p99 {latencies[int(batches * 0.99)] * 1e3:.2f} ms"
    )

    sample = refs[-min(len(refs), 5000):]
    with Journal(directory, cache_bytes=0) as cold:
        t0 = time.perf_counter()
        for ref in sample:
            cold.read(ref)
        read_elapsed = time.perf_counter() - t0
    print(f"{'':>17}cold reads: {len(sample) / read_elapsed:>8.0f} batches/s "
          f"({len(sample) * records_per_batch * record_bytes / 1e6 / read_elapsed:.1f} MB/s decompressed)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", action="append", help="RECORDSxBYTES per batch (repeatable)")
    parser.add_argument("--seconds", type=float, default=3.0, help="per shape")
    parser.add_argument("--dir", help="parent directory for the journal (default: system temp dir)")
    parser.add_argument("--compressible", action="store_true", help="repetitive payloads instead of random")
    args = parser.parse_args()
    for shape in args.shape or DEFAULT_SHAPES:
        records_per_batch, record_bytes = (int(part) for part in shape.lower().split("x"))
        directory = tempfile.mkdtemp(prefix="journal-bench-", dir=args.dir)
        try:
            run_shape(os.path.join(directory, "journal"), records_per_batch, record_bytes, args.seconds,
                      args.compressible)
        finally:
            shutil.rmtree(directory)


if __name__ == "__main__":
    main()
