"""The body journal's cache of decoded batches: by (segment id, offset), least recently used
out first, within a budget of bytes (payloads plus a rough per-record overhead).

Not thread-safe on its own: `raftmq.storage.journal.Journal` calls it under its lock.
"""

from __future__ import annotations

from collections import OrderedDict

from raftmq.storage.records import RECORD_HEADER_SIZE, BatchHeader, Record

RECORD_OVERHEAD = 96  # rough RAM per cached record besides its payload

BatchKey = tuple[int, int]  # (segment id, offset of the batch in its segment)


def batch_ram(batch: tuple[Record, ...]) -> int:
    """What a batch counts for: its payloads' bytes plus RECORD_OVERHEAD per record."""
    return sum(len(record.payload) + RECORD_OVERHEAD for record in batch)


def header_ram(header: BatchHeader) -> int:
    """`batch_ram` of the batch `header` heads, read from the header's lengths: the same figure,
    with nothing made per record (each record's payload is its uncompressed bytes less the
    record's own header)."""
    return header.uncompressed_length + header.record_count * (RECORD_OVERHEAD - RECORD_HEADER_SIZE)


class BatchCache:
    def __init__(self, budget_bytes: int) -> None:
        self.budget_bytes = budget_bytes
        # each batch with what it counts for in `used_bytes` (summed once, not again to drop it)
        self._batches: OrderedDict[BatchKey, tuple[tuple[Record, ...], int]] = OrderedDict()
        self.used_bytes = 0

    def __len__(self) -> int:
        return len(self._batches)

    def get(self, key: BatchKey, *, touch: bool = True) -> tuple[Record, ...] | None:
        """The batch at `key`, if cached; `touch=False` leaves its place in line alone (a read
        that passes once should not keep a batch in)."""
        held = self._batches.get(key)
        if held is None:
            return None
        if touch:
            self._batches.move_to_end(key)
        return held[0]

    def put(self, key: BatchKey, batch: tuple[Record, ...], header: BatchHeader) -> None:
        """Cache `batch` (headed by `header`), then drop the least recently used until within
        budget (a batch over the whole budget is dropped at once)."""
        if key in self._batches:
            self._drop(key)
        ram = header_ram(header)
        self._batches[key] = (batch, ram)
        self.used_bytes += ram
        while self.used_bytes > self.budget_bytes and self._batches:
            self._drop(next(iter(self._batches)))

    def drop_segment(self, segment_id: int) -> None:
        for key in [key for key in self._batches if key[0] == segment_id]:
            self._drop(key)

    def clear(self) -> None:
        self._batches.clear()
        self.used_bytes = 0

    def _drop(self, key: BatchKey) -> None:
        self.used_bytes -= self._batches.pop(key)[1]
