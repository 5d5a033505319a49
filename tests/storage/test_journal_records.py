"""The pure record/batch format, checked against the byte layout of docs/journal-format.md."""

from __future__ import annotations

import struct

import lz4.frame
import pytest
from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st

from raftmq.errors import JournalCorrupt
from raftmq.storage import records as rec
from raftmq.storage.records import Record

record_lists = st.lists(
    st.tuples(
        st.integers(0, 3),  # raft index step
        st.integers(0, 2**64 - 1),
        st.integers(0, 2**16 - 1),
        st.binary(max_size=300),
    ),
    min_size=1,
    max_size=20,
).map(lambda rows: _with_indexes(rows, start=0))


def _with_indexes(rows: list[tuple[int, int, int, bytes]], start: int) -> list[Record]:
    index = start
    out = []
    for step, term, kind, payload in rows:
        index += step
        out.append(Record(index, term, kind, payload))
    return out


def read_batch_as_documented(buf: bytes, offset: int) -> tuple[int, list[tuple[int, int, int, bytes]]]:
    """An independent reader written from docs/journal-format.md alone (offsets spelled out)."""
    assert buf[offset : offset + 4] == b"RMQJ"
    version, flags = struct.unpack_from("<HH", buf, offset + 4)
    count, clen, ulen, dcrc = struct.unpack_from("<IIII", buf, offset + 8)
    first, last = struct.unpack_from("<QQ", buf, offset + 24)
    (hcrc,) = struct.unpack_from("<I", buf, offset + 40)
    assert (version, flags) == (1, 0)
    assert hcrc == crc32c(buf[offset : offset + 40])
    data = buf[offset + 44 : offset + 44 + clen]
    assert crc32c(data) == dcrc
    raw = lz4.frame.decompress(data)
    assert len(raw) == ulen
    rows, position = [], 0
    for _ in range(count):
        (rcrc,) = struct.unpack_from("<I", raw, position)
        index, term, kind, length = struct.unpack_from("<QQHI", raw, position + 4)
        assert rcrc == crc32c(raw[position + 4 : position + 26 + length])
        rows.append((index, term, kind, raw[position + 26 : position + 26 + length]))
        position += 26 + length
    assert position == len(raw)
    assert (rows[0][0], rows[-1][0]) == (first, last)
    return offset + 44 + clen, rows


@settings(max_examples=60, deadline=None)
@given(record_lists)
def test_batch_round_trip_and_documented_layout(records: list[Record]) -> None:
    data = rec.encode_batch(records)
    header, decoded = rec.decode_batch(data)
    assert list(decoded) == records
    assert header.batch_size == len(data)
    end, rows = read_batch_as_documented(data, 0)
    assert end == len(data)
    assert rows == [tuple(r) for r in records]


def test_crc32c_check_value_in_the_docs() -> None:
    assert crc32c(b"123456789") == 0xE3069283


def test_iter_segment_reads_concatenated_batches() -> None:
    batches = [[Record(1, 1, 0, b"a")], [Record(2, 1, 0, b"b"), Record(4, 2, 3, b"c")]]
    buf = b"".join(rec.encode_batch(b) for b in batches)
    assert [list(records) for _, _, records in rec.iter_segment(buf)] == batches
    first_size = len(rec.encode_batch(batches[0]))
    assert [offset for offset, _, _ in rec.iter_segment(buf)] == [0, first_size]
    with pytest.raises(JournalCorrupt):
        list(rec.iter_segment(buf[:-1]))
    partial = [list(r) for _, _, r in rec.iter_segment(buf[:-1], stop_at_incomplete_tail=True)]
    assert partial == batches[:1]


@pytest.mark.parametrize("position", [0, 5, 9, 13, 21, 30, 41, 44, -1])
def test_any_flipped_bit_is_detected(position: int) -> None:
    data = bytearray(rec.encode_batch([Record(7, 2, 1, b"payload" * 20), Record(8, 2, 1, b"x")]))
    data[position] ^= 0x10
    with pytest.raises(JournalCorrupt):
        rec.decode_batch(bytes(data))


def test_record_crc_checked_even_when_the_batch_crc_matches() -> None:
    records = [Record(1, 1, 0, b"good"), Record(2, 1, 0, b"body")]
    raw = bytearray(rec.encode_records(records))
    raw[-1] ^= 0x01  # last payload byte, below the record CRC
    frame = lz4.frame.compress(bytes(raw))
    fields = struct.pack("<4sHHIIIIQQ", b"RMQJ", 1, 0, 2, len(frame), len(raw), crc32c(frame), 1, 2)
    forged = fields + struct.pack("<I", crc32c(fields)) + frame
    with pytest.raises(JournalCorrupt, match="record 1 CRC mismatch"):
        rec.decode_batch(forged)


def test_unknown_version_with_valid_header_crc_is_refused() -> None:
    data = bytearray(rec.encode_batch([Record(1, 1, 0, b"x")]))
    struct.pack_into("<H", data, 4, 2)
    struct.pack_into("<I", data, 40, crc32c(bytes(data[:40])))
    header = rec.parse_header(bytes(data))  # magic and CRC are fine
    assert header.version == 2
    with pytest.raises(JournalCorrupt, match="unsupported format version 2"):
        rec.decode_batch(bytes(data))


def test_invalid_input_is_rejected() -> None:
    with pytest.raises(ValueError):
        rec.encode_batch([])
    with pytest.raises(ValueError):
        rec.encode_batch([Record(5, 1, 0, b""), Record(4, 1, 0, b"")])
    with pytest.raises(ValueError):
        rec.check_record(Record(1, 1, 2**16, b""))
    with pytest.raises(ValueError):
        rec.check_record(Record(-1, 1, 0, b""))
    with pytest.raises(ValueError):
        rec.check_record(Record(1, 1, 0, "text"))  # type: ignore[arg-type]
    for short_or_long in [(1, 1, 0), (1, 1, 0, b"", b"")]:
        with pytest.raises(ValueError, match="4 fields"):
            rec.check_record(short_or_long)  # type: ignore[arg-type]
    assert rec.check_record(Record(1, 1, 0, bytearray(b"ab"))).payload == b"ab"


def test_incomplete_header_and_data() -> None:
    data = rec.encode_batch([Record(1, 1, 0, b"abc")])
    with pytest.raises(JournalCorrupt, match="incomplete batch header"):
        rec.parse_header(data[:43])
    with pytest.raises(JournalCorrupt, match="incomplete batch data"):
        rec.decode_batch(data[:-1])


@given(record_lists)
def test_the_writers_header_is_the_one_its_bytes_start_with(records: list[Record]) -> None:
    data, header = rec.encode_batch_with_header(records)
    assert header == rec.parse_header(data)  # what the journal files under, with no second reading
    assert data == rec.encode_batch(records)
