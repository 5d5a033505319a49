"""The leader's table of submitted entries (raftmq.replication.in_flight)."""

from __future__ import annotations

import asyncio

from raftmq.replication.in_flight import InFlightEntries, PendingEntry, fail_futures


def _pending(entry: bytes, *batches: bytes) -> PendingEntry:
    pending = PendingEntry(list(batches), [], [])
    pending.entry = entry
    return pending


def test_bytes_follow_what_the_table_holds() -> None:
    table = InFlightEntries()
    table.add(1, _pending(b"a", b"xx", b"yyy"))
    table.add(2, _pending(b"b", b"z"))
    assert (len(table), table.bytes) == (2, 6)
    assert table.pop(1) is not None
    assert (len(table), table.bytes) == (1, 1)
    assert table.pop(1) is None  # settled once only
    assert table.clear() and not table and table.bytes == 0


def test_equal_entries_are_applied_in_the_order_they_were_submitted() -> None:
    table = InFlightEntries()
    first, second = _pending(b"same", b"1"), _pending(b"same", b"1")
    table.add(1, first)
    table.add(2, second)
    assert table.take_applied(b"same") is first
    assert table.pop(1) is first  # applied, then settled: still found by its token
    assert table.take_applied(b"same") is second
    assert table.take_applied(b"same") is None
    assert table.take_applied(b"other") is None


def test_an_entry_settled_before_it_is_applied_here_is_no_longer_ours() -> None:
    table = InFlightEntries()
    table.add(1, _pending(b"e", b"1"))
    table.pop(1)
    assert table.take_applied(b"e") is None


def test_each_future_gets_its_own_exception_and_done_ones_are_left_alone() -> None:
    loop = asyncio.new_event_loop()
    try:
        done, a, b = loop.create_future(), loop.create_future(), loop.create_future()
        done.set_result(None)
        fail_futures([done, a, b], lambda: RuntimeError("x"))
        assert done.result() is None
        assert a.exception() is not b.exception()
        assert isinstance(a.exception(), RuntimeError)
    finally:
        loop.close()
