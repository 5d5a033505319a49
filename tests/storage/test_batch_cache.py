"""The body journal's cache of decoded batches (raftmq.storage.batch_cache)."""

from __future__ import annotations

from raftmq.storage.batch_cache import RECORD_OVERHEAD, BatchCache, batch_ram
from raftmq.storage.records import Record


def _batch(*payload_sizes: int) -> tuple[Record, ...]:
    return tuple(Record(1, 1, 1, b"x" * size) for size in payload_sizes)


def test_the_least_recently_used_batch_goes_first() -> None:
    cache = BatchCache(budget_bytes=3 * (100 + RECORD_OVERHEAD))
    for offset in range(3):
        cache.put((0, offset), _batch(100))
    assert cache.get((0, 0)) is not None  # touched: now the most recent
    assert cache.get((0, 1), touch=False) is not None  # passed by: stays first in line
    cache.put((0, 3), _batch(100))
    assert cache.get((0, 1)) is None
    assert all(cache.get((0, offset)) is not None for offset in (0, 2, 3))
    assert cache.used_bytes == 3 * (100 + RECORD_OVERHEAD) == len(cache) * batch_ram(_batch(100))


def test_a_batch_over_the_budget_is_not_kept_and_a_replaced_one_is_counted_once() -> None:
    cache = BatchCache(budget_bytes=1000)
    cache.put((0, 0), _batch(2000))
    assert len(cache) == 0 and cache.used_bytes == 0
    cache.put((0, 0), _batch(10))
    cache.put((0, 0), _batch(20))
    assert cache.used_bytes == batch_ram(_batch(20))


def test_dropping_a_segment_forgets_only_its_batches() -> None:
    cache = BatchCache(budget_bytes=10**6)
    cache.put((1, 0), _batch(1))
    cache.put((1, 64), _batch(1))
    cache.put((2, 0), _batch(1))
    cache.drop_segment(1)
    assert len(cache) == 1 and cache.get((2, 0)) is not None
    cache.clear()
    assert len(cache) == 0 and cache.used_bytes == 0
