"""The batch a bridge forwards in (raftmq.routing.forward_batch): its codec, its receipts, and
how a bridge reads a refusal of one."""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from raftmq.errors import BrokerRefused
from raftmq.protocol.limits import Limits
from raftmq.routing.forward_batch import BatchError, decode, encode, inner_receipt, message, parse_inner
from raftmq.server.links.first_lane import batch_index

LIMITS = Limits()

headers = st.lists(st.tuples(st.text(min_size=1, max_size=20).filter(lambda t: "\x00" not in t),
                             st.text(max_size=40).filter(lambda t: "\x00" not in t)), max_size=5)
messages = st.lists(st.tuples(st.text(min_size=1, max_size=30), headers, st.binary(max_size=200)),
                    min_size=1, max_size=20)


@given(messages)
def test_a_batch_decodes_to_what_was_encoded(sent: list[tuple[str, list[tuple[str, str]], bytes]]) -> None:
    items = decode(encode(sent))
    assert [message(item, i, LIMITS) for i, item in enumerate(items)] == sent


@given(st.binary(max_size=300))
def test_any_bytes_decode_to_a_batch_or_a_batch_error(body: bytes) -> None:
    try:
        items = decode(body)
        for index, item in enumerate(items):
            message(item, index, LIMITS)
    except BatchError:
        pass


@pytest.mark.parametrize(("item", "why"), [
    (["/queue/a", [], "not bytes"], "wrong type"),
    (["/queue/a", [["only-name"]], b""], "not [name, value]"),
    (["/queue/a", []], "not [destination, headers, body]"),
    (["/queue/a", [["k", "a\x00b"]], b""], "NUL"),
])
def test_a_malformed_message_is_named_by_its_index(item: list[object], why: str) -> None:
    items = decode(msgpack.packb([["/queue/ok", [], b"x"], item], use_bin_type=True))
    message(items[0], 0, LIMITS)
    with pytest.raises(BatchError) as raised:
        message(items[1], 1, LIMITS)
    assert raised.value.index == 1 and why in raised.value.detail


def test_each_message_is_held_to_the_frame_limits() -> None:
    limits = Limits(max_headers=3, max_header_line_bytes=16, max_body_bytes=8)
    for item in (["/queue/a", [["a", "1"], ["b", "2"]], b""], ["/queue/a", [["k", "v" * 20]], b""],
                 ["/queue/a", [], b"x" * 9]):
        with pytest.raises(BatchError) as raised:
            message(item, 4, limits)
        assert raised.value.index == 4
    assert message(["/queue/a", [["a", "1"]], b"x" * 8], 0, limits) == ("/queue/a", [("a", "1")], b"x" * 8)


@pytest.mark.parametrize("body", [msgpack.packb([]), msgpack.packb({"a": 1}), b"\xc1"])
def test_a_body_that_is_no_batch_is_refused_whole(body: bytes) -> None:
    with pytest.raises(BatchError) as raised:
        decode(body)
    assert raised.value.index is None


@given(st.text(), st.integers(0, 10_000), st.integers(1, 10_000))
def test_an_inner_receipt_names_its_batch_index_and_size(receipt: str, index: int, count: int) -> None:
    assert parse_inner(inner_receipt(receipt, index, count)) == (receipt, index, count)


def test_a_clients_receipt_id_is_never_an_inner_one() -> None:
    assert parse_inner("1/2/r") is None and parse_inner("") is None


def test_a_bridge_reads_the_refused_message_only_when_it_is_in_the_batch() -> None:
    assert batch_index(BrokerRefused("x", {"raftmq-batch-index": "3"}), 5) == 3
    assert batch_index(BrokerRefused("x", {"raftmq-batch-index": "5"}), 5) is None
    assert batch_index(BrokerRefused("x", {"raftmq-batch-index": "-1"}), 5) is None
    assert batch_index(BrokerRefused("x", {}), 5) is None
