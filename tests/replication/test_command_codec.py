from __future__ import annotations

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raftmq.core import commands as c
from raftmq.errors import CommandCodecError
from raftmq.protocol.header_block import STRIPPED, block_of
from raftmq.replication.command_codec import (
    FORMAT_VERSION,
    HEADER_PAIRS,
    SCHEMA,
    decode_batch,
    encode_batch,
    encode_rows,
)

text = st.text(max_size=20)
opt_text = st.none() | text
now = st.integers(min_value=0, max_value=2**53)
# A Send's header block; names as the edge leaves them (never empty, never a transport header).
headers = st.lists(st.tuples(text.filter(lambda name: bool(name) and name not in STRIPPED), text),
                   max_size=5).map(block_of)

command_strategy = st.one_of(
    st.builds(c.Connect, session=text, now=now, login=opt_text, client_id=opt_text),
    st.builds(c.Disconnect, session=text, now=now, receipt=opt_text),
    st.builds(
        c.Subscribe, session=text, sub_id=text, destination=text, now=now, ack=st.sampled_from(c.ACK_MODES),
        selector=opt_text, prefetch=st.integers(0, 10_000), exclusive=st.booleans(), durable_name=opt_text,
        receipt=opt_text,
    ),
    st.builds(c.Unsubscribe, session=text, sub_id=text, now=now, drop_durable=st.booleans(), receipt=opt_text),
    st.builds(c.Send, session=text, destination=text, headers=headers, body=st.binary(max_size=64), now=now,
              transaction=opt_text, receipt=opt_text),
    st.builds(c.Ack, session=text, now=now, ack_id=opt_text, message_id=opt_text, subscription=opt_text,
              transaction=opt_text, receipt=opt_text),
    st.builds(c.Nack, session=text, now=now, ack_id=opt_text, message_id=opt_text, subscription=opt_text,
              transaction=opt_text, receipt=opt_text),
    st.builds(c.Begin, session=text, transaction=text, now=now, receipt=opt_text),
    st.builds(c.Commit, session=text, transaction=text, now=now, receipt=opt_text),
    st.builds(c.Abort, session=text, transaction=text, now=now, receipt=opt_text),
    st.builds(c.Tick, now=now),
    st.builds(c.Browse, session=text, sub_id=text, destination=text, now=now, limit=st.integers(0, 20_000),
              selector=opt_text, receipt=opt_text),
    st.builds(c.Noop, session=text, now=now, receipt=opt_text),
    st.builds(c.Manage, request=text, op=st.sampled_from(c.MANAGE_OPS), now=now, destination=text, target=opt_text,
              ids=st.lists(text, max_size=3).map(tuple), selector=opt_text, every=st.booleans(), closing=opt_text),
)


@settings(max_examples=200)
@given(st.lists(command_strategy, max_size=8))
def test_round_trip(batch: list[c.Command]) -> None:
    assert decode_batch(encode_batch(batch)) == batch


@settings(max_examples=100)
@given(st.lists(command_strategy, max_size=8))
def test_version_1_rows_carry_the_same_commands(batch: list[c.Command]) -> None:
    """What a group writes for members of a release before header blocks: the headers as pairs."""
    data = encode_batch(batch, HEADER_PAIRS)
    assert msgpack.unpackb(data)[0] == 1
    assert decode_batch(data) == batch


@settings(max_examples=300)
@given(st.lists(command_strategy, max_size=8))
def test_rows_written_field_by_field_are_the_rows_of_the_schema(batch: list[c.Command]) -> None:
    """`encode_rows` writes a Send's, an Ack's and a Nack's fields one by one, in an order of its
    own: it must be SCHEMA's, value for value, and the bytes those of the whole rows packed."""
    rows = [[code, *(getattr(command, name) for name in names)]
            for command in batch for code, (cls, names) in SCHEMA.items() if type(command) is cls]
    assert encode_rows(batch) == msgpack.packb(rows, use_bin_type=True)
    assert decode_batch(msgpack.packb([FORMAT_VERSION, msgpack.unpackb(encode_rows(batch))])) == batch


def test_rows_of_a_stranger_are_refused_and_the_next_rows_are_whole() -> None:
    """A refused command leaves nothing behind in the thread's row packer."""
    send = c.Send("s", "/queue/a", "", b"x", 1)
    with pytest.raises(CommandCodecError):
        encode_rows([send, object()])  # type: ignore[list-item]
    assert decode_batch(msgpack.packb([FORMAT_VERSION, msgpack.unpackb(encode_rows([send]))])) == [send]


def test_a_send_row_of_version_1_decodes_to_a_block_without_transport_headers() -> None:
    """Logs of earlier releases hold pairs, and the producer's redelivered or delivery-count
    headers among them (filtered when a MESSAGE was written): the block drops them."""
    row = [5, "s1", "/queue/q", [["k", "a:b"], ["redelivered", "true"], ["k", "second"]], b"x", 7, None, "r1"]
    (send,) = decode_batch(msgpack.packb([1, [row]]))
    assert send == c.Send("s1", "/queue/q", "k:a\\cb\nk:second\n", b"x", 7, None, "r1")
    assert decode_batch(msgpack.packb([2, [[5, "s1", "/queue/q", "k:v\n", b"x", 7, None, None]]])) == [
        c.Send("s1", "/queue/q", "k:v\n", b"x", 7)]
    with pytest.raises(CommandCodecError, match="block or a list of pairs"):
        decode_batch(msgpack.packb([2, [[5, "s1", "/queue/q", 3, b"x", 7, None, None]]]))


def test_schema_pins_every_command_and_field() -> None:
    # A command whose fields change must get a new FORMAT_VERSION, or old logs decode wrongly.
    assert {cls for cls, _ in SCHEMA.values()} == set(c.COMMAND_TYPES)
    for cls, names in SCHEMA.values():
        assert set(names) == set(cls.__match_args__), cls.__name__  # a dataclass's fields, or a written-out record's


def test_wire_layout_of_versions_1_and_2_is_pinned() -> None:
    # Logs written by earlier builds must keep decoding: a code's class and field order never
    # change within a FORMAT_VERSION; new commands only add codes (12 Browse, 13 Noop, 14 Manage,
    # 15 Recover, 16 Will, 17 Release, 18 Hold, 19 Share, 20 Expiry). Version 2 changed one field's type (a
    # Send's headers: a block, where version 1 has pairs).
    assert (HEADER_PAIRS, FORMAT_VERSION) == (1, 2)
    assert {code: (cls.__name__, names) for code, (cls, names) in SCHEMA.items()} == {
        1: ("Connect", ("session", "now", "login", "client_id")),
        2: ("Disconnect", ("session", "now", "receipt")),
        3: ("Subscribe", ("session", "sub_id", "destination", "now", "ack", "selector", "prefetch", "exclusive",
                          "durable_name", "receipt")),
        4: ("Unsubscribe", ("session", "sub_id", "now", "drop_durable", "receipt")),
        5: ("Send", ("session", "destination", "headers", "body", "now", "transaction", "receipt")),
        6: ("Ack", ("session", "now", "ack_id", "message_id", "subscription", "transaction", "receipt")),
        7: ("Nack", ("session", "now", "ack_id", "message_id", "subscription", "transaction", "receipt")),
        8: ("Begin", ("session", "transaction", "now", "receipt")),
        9: ("Commit", ("session", "transaction", "now", "receipt")),
        10: ("Abort", ("session", "transaction", "now", "receipt")),
        11: ("Tick", ("now",)),
        12: ("Browse", ("session", "sub_id", "destination", "now", "limit", "selector", "receipt")),
        13: ("Noop", ("session", "now", "receipt")),
        14: ("Manage", ("request", "op", "now", "destination", "target", "ids", "selector", "every", "closing")),
        15: ("Recover", ("session", "sub_id", "now")),
        16: ("Will", ("session", "destination", "headers", "body", "now", "delay_ms")),
        17: ("Release", ("session", "key", "now", "every", "receipt")),
        18: ("Hold", ("session", "key", "now")),
        19: ("Share", ("session", "sub_id", "group", "destination", "now", "ack", "prefetch", "holder", "receipt")),
        20: ("Expiry", ("session", "key", "now", "after_ms")),
    }


def test_a_browse_row_decodes_from_its_wire_form() -> None:
    row = [12, "s1", "b1", "/queue/q", 7, 50, "color = 'red'", "r1"]
    assert decode_batch(msgpack.packb([1, [row]])) == [c.Browse("s1", "b1", "/queue/q", 7, 50, "color = 'red'", "r1")]
    assert decode_batch(msgpack.packb([1, [[13, "s1", 8, None]]])) == [c.Noop("s1", 8, None)]
    assert decode_batch(msgpack.packb([2, [[15, "s1", "m3", 9]]])) == [c.Recover("s1", "m3", 9)]
    will = c.Will("s1", "/topic/gone", "mqtt-qos:1\n", b"\x00bye", 9, 5000)
    assert decode_batch(encode_batch([will])) == [will]


def test_a_manage_row_whose_ids_are_not_strings_is_refused() -> None:
    with pytest.raises(CommandCodecError):
        decode_batch(msgpack.packb([1, [[14, "r", "retry", 1, "/queue/DLQ", None, [1, 2], None, False, None]]]))


def test_unknown_version_is_refused() -> None:
    data = msgpack.packb([FORMAT_VERSION + 1, []])
    with pytest.raises(CommandCodecError, match="unsupported command format version"):
        decode_batch(data)


def test_unknown_type_code_is_refused() -> None:
    with pytest.raises(CommandCodecError, match="unknown command type code"):
        decode_batch(msgpack.packb([FORMAT_VERSION, [[99, "x"]]]))


def test_wrong_field_count_is_refused() -> None:
    with pytest.raises(CommandCodecError, match="expected 1 fields"):
        decode_batch(msgpack.packb([FORMAT_VERSION, [[11, 1, 2]]]))


def test_non_command_is_refused() -> None:
    with pytest.raises(CommandCodecError):
        encode_batch([object()])  # type: ignore[list-item]


@settings(max_examples=200)
@given(st.binary(max_size=64))
def test_garbage_raises_only_codec_error(data: bytes) -> None:
    try:
        decode_batch(data)
    except CommandCodecError:
        pass
