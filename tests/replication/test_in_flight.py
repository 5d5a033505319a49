"""The leader's table of submitted entries (raftmq.replication.in_flight)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from raftmq.core.commands import Command, Tick
from raftmq.replication.in_flight import InFlightEntries, PendingEntry, fail_waiters, settle_waiters


def _pending(entry: bytes, *rows: bytes) -> PendingEntry:
    pending = PendingEntry(list(rows), [], [])
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


def test_an_applied_copy_finds_its_entry_among_others_of_the_same_length() -> None:
    table = InFlightEntries()
    first, second = _pending(b"entry-a", b"1"), _pending(b"entry-b", b"1")
    table.add(1, first)
    table.add(2, second)
    applied = b"".join([b"entry-", b"b"])  # what pysyncobj applies is a copy, never the same object
    assert applied is not second.entry
    assert table.take_applied(applied) is second
    assert table.take_applied(b"entry-c") is None
    assert table.take_applied(bytes(bytearray(b"entry-a"))) is first
    assert table.take_applied(b"entry-a") is None


def test_an_entry_settled_before_it_is_applied_here_is_no_longer_ours() -> None:
    table = InFlightEntries()
    table.add(1, _pending(b"e", b"1"))
    table.pop(1)
    assert table.take_applied(b"e") is None


class Proposer:
    def __init__(self, fails: bool = False) -> None:
        self.heard: list[tuple[int, Sequence[Command], Exception | None]] = []
        self.fails = fails

    def settled(self, number: int, commands: Sequence[Command], error: Exception | None) -> None:
        self.heard.append((number, commands, error))
        if self.fails:
            raise ValueError("a proposer's bug")


def test_each_waiter_gets_its_own_exception_and_done_futures_are_left_alone() -> None:
    loop = asyncio.new_event_loop()
    try:
        done, a, b = loop.create_future(), loop.create_future(), loop.create_future()
        done.set_result(None)
        proposer = Proposer()
        fail_waiters([done, a, (proposer, 7, [Tick(1)]), b, (proposer, 8, [])], lambda: RuntimeError("x"))
        assert done.result() is None
        assert a.exception() is not b.exception()
        assert isinstance(a.exception(), RuntimeError)
        [(first, commands, error), (second, _, other)] = proposer.heard
        assert (first, commands, second) == (7, [Tick(1)], 8)
        assert isinstance(error, RuntimeError) and error is not other
    finally:
        loop.close()


def test_a_proposer_that_raises_does_not_keep_the_others_from_hearing() -> None:
    loop = asyncio.new_event_loop()
    try:
        broken, fine, future = Proposer(fails=True), Proposer(), loop.create_future()
        settle_waiters([(broken, 1, []), (fine, 2, []), future])
        assert broken.heard == [(1, [], None)] and fine.heard == [(2, [], None)] and future.result() is None
    finally:
        loop.close()


def test_drained_is_done_once_nothing_is_held() -> None:
    loop = asyncio.new_event_loop()
    try:
        table = InFlightEntries()
        assert table.drained(loop).done()  # nothing held
        table.add(1, _pending(b"a", b"x"))
        table.add(2, _pending(b"b", b"y"))
        drained = table.drained(loop)
        table.pop(1)
        assert not drained.done()
        table.pop(2)
        assert drained.done()
        table.add(3, _pending(b"c", b"z"))
        cleared = table.drained(loop)
        table.clear()
        assert cleared.done()
    finally:
        loop.close()
