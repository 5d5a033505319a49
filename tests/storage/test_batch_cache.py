"""The body journal's cache of decoded batches (raftmq.storage.batch_cache)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from raftmq.storage.batch_cache import RECORD_OVERHEAD, BatchCache, batch_ram, header_ram
from raftmq.storage.records import BatchHeader, Record, decode_batch, encode_batch_with_header


def _batch(*payload_sizes: int) -> tuple[Record, ...]:
    return tuple(Record(1, 1, 1, b"x" * size) for size in payload_sizes)


def _header(batch: tuple[Record, ...]) -> BatchHeader:
    return encode_batch_with_header(batch)[1]


def _put(cache: BatchCache, key: tuple[int, int], batch: tuple[Record, ...]) -> None:
    cache.put(key, batch, _header(batch))


@given(st.lists(st.tuples(st.integers(0, 3), st.binary(max_size=300)), min_size=1, max_size=20))
def test_a_batch_counts_the_same_from_its_header_as_from_its_records(rows: list[tuple[int, bytes]]) -> None:
    batch = tuple(Record(7, 2, kind, payload) for kind, payload in rows)
    data, header = encode_batch_with_header(batch)
    read_header, records = decode_batch(data)
    assert header_ram(header) == header_ram(read_header) == batch_ram(records) == batch_ram(batch)


def test_the_least_recently_used_batch_goes_first() -> None:
    cache = BatchCache(budget_bytes=3 * (100 + RECORD_OVERHEAD))
    for offset in range(3):
        _put(cache, (0, offset), _batch(100))
    assert cache.get((0, 0)) is not None  # touched: now the most recent
    assert cache.get((0, 1), touch=False) is not None  # passed by: stays first in line
    _put(cache, (0, 3), _batch(100))
    assert cache.get((0, 1)) is None
    assert all(cache.get((0, offset)) is not None for offset in (0, 2, 3))
    assert cache.used_bytes == 3 * (100 + RECORD_OVERHEAD) == len(cache) * batch_ram(_batch(100))


def test_a_batch_over_the_budget_is_not_kept_and_a_replaced_one_is_counted_once() -> None:
    cache = BatchCache(budget_bytes=1000)
    _put(cache, (0, 0), _batch(2000))
    assert len(cache) == 0 and cache.used_bytes == 0
    _put(cache, (0, 0), _batch(10))
    _put(cache, (0, 0), _batch(20))
    assert cache.used_bytes == batch_ram(_batch(20))


def test_dropping_a_segment_forgets_only_its_batches() -> None:
    cache = BatchCache(budget_bytes=10**6)
    _put(cache, (1, 0), _batch(1))
    _put(cache, (1, 64), _batch(1))
    _put(cache, (2, 0), _batch(1))
    cache.drop_segment(1)
    assert len(cache) == 1 and cache.get((2, 0)) is not None
    cache.clear()
    assert len(cache) == 0 and cache.used_bytes == 0
