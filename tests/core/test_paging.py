"""Pages and tails on their own (raftmq.core.paging): what goes in comes out, in order."""

from __future__ import annotations

from raftmq.core.message import Message
from raftmq.core.paging import MemoryPages, Tail, decode_page, encode_page, journal_indexes
from raftmq.protocol.header_block import block_of


def message(n: int, expires: int = 0, body: object = b"x") -> Message:
    return Message(f"m-{n}", "/queue/a", block_of((("n", str(n)), ("persistent", "true"))), body, n % 10, expires,
                   1_000 + n, "g" if n % 3 == 0 else None, bool(n % 2), n % 4)


def test_a_page_gives_back_every_field_with_its_type() -> None:
    messages = [message(n, body=(100 + n // 3, n % 3)) for n in range(50)]
    assert decode_page(encode_page(messages)) == messages
    assert decode_page(encode_page([message(1, body=b"\x00bytes")])) == [message(1, body=b"\x00bytes")]


def test_a_page_is_a_few_bytes_per_message() -> None:
    messages = [message(n, body=(10_000 + n // 40, n % 40)) for n in range(1000)]
    assert len(encode_page(messages)) < 20 * len(messages)


def test_journal_indexes_are_the_references_raft_indexes_once_each() -> None:
    assert journal_indexes([(7, 0), b"raw", (5, 1), (7, 1), [9, 0]]) == [5, 7, 9]


def test_a_tail_keeps_arrival_order_across_pages_and_the_open_list() -> None:
    pages = MemoryPages()
    tail = Tail(pages)
    for n in range(7):
        tail.append(message(n), page_size=3)
    assert len(tail.pages) == 2 and len(tail.open) == 1 and tail.count == 7 and len(pages) == 2
    assert [m.message_id for m in tail.messages()] == [f"m-{n}" for n in range(7)]
    assert [m.message_id for m in tail.take()] == ["m-0", "m-1", "m-2"]
    assert len(pages) == 1 and tail.count == 4
    assert [m.message_id for m in tail.take()] == ["m-3", "m-4", "m-5"]
    assert [m.message_id for m in tail.take()] == ["m-6"] and tail.count == 0


def test_expire_rewrites_only_pages_with_a_message_due() -> None:
    pages = MemoryPages()
    tail = Tail(pages)
    for n in range(9):
        tail.append(message(n, expires=5_000 if n in (4, 8) else 0), page_size=3)
    untouched = tail.pages[0].handle
    assert tail.min_expires() == 5_000
    assert tail.expire(4_999) == []
    assert [m.message_id for m in tail.expire(5_000)] == ["m-4", "m-8"]
    assert tail.pages[0].handle == untouched and [p.count for p in tail.pages] == [3, 2, 2]
    assert tail.count == 7 and tail.min_expires() == 0
    assert [m.message_id for m in tail.messages()] == [f"m-{n}" for n in (0, 1, 2, 3, 5, 6, 7)]


def test_a_page_emptied_by_expiry_goes_and_drop_frees_every_page() -> None:
    pages = MemoryPages()
    tail = Tail(pages)
    for n in range(6):
        tail.append(message(n, expires=5_000 if n < 3 else 0), page_size=3)
    assert len(tail.expire(6_000)) == 3 and len(tail.pages) == 1 and len(pages) == 1
    tail.drop()
    assert tail.count == 0 and len(pages) == 0 and not tail.pages
