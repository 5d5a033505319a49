"""The journal's record and batch format: bytes in, bytes out, no I/O.

A batch is a small uncompressed header followed by one lz4 frame holding its records. The
header carries its own CRC32C, so its length fields can be trusted before anything else is
read, and a CRC32C of the compressed bytes, so a reader verifies a batch without decompressing
it. Each record inside the frame carries a CRC32C too, checked whenever a record is served.
docs/journal-format.md is the normative description of these bytes; keep the two in step.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

import lz4.frame
from crc32c import crc32c

from raftmq.errors import JournalCorrupt

MAGIC = b"RMQJ"
FORMAT_VERSION = 1

# magic, version, flags, record count, compressed length, uncompressed length,
# CRC32C of the compressed bytes, first raft index, last raft index; then CRC32C of these 40 bytes.
_HEADER_FIELDS = struct.Struct("<4sHHIIIIQQ")
_HEADER_CRC = struct.Struct("<I")
BATCH_HEADER_SIZE = _HEADER_FIELDS.size + _HEADER_CRC.size  # 44

# CRC32C of the rest of the record, raft index, raft term, kind, payload length; then the payload.
_RECORD_CRC = struct.Struct("<I")
_RECORD_FIELDS = struct.Struct("<QQHI")
RECORD_HEADER_SIZE = _RECORD_CRC.size + _RECORD_FIELDS.size  # 26

MAX_U16 = 2**16 - 1
MAX_U32 = 2**32 - 1
MAX_U64 = 2**64 - 1


class Record(NamedTuple):
    raft_index: int
    raft_term: int
    kind: int  # chosen by the journal's user; opaque here
    payload: bytes


# A record as a plain tuple of its fields, in Record's order: what a writer that keeps nothing
# it writes hands the journal (`Journal.append_batch(cache=False)`), one object per record
# where a Record costs four (tuple.__new__'s argument tuples, then the Record).
Row = tuple[Any, Any, Any, bytes]
# What the functions below take and give for records and rows, typed `Any` on purpose: compiled,
# a value typed as a Record or a Row is a C struct, and every one handed on or returned would be
# boxed again as a new plain tuple (an object per record, and the Record's class lost).
Records = Sequence[Any]

_new_record = tuple.__new__  # builds a Record without NamedTuple's slower argument binding


def new_records(raft_index: object, raft_term: object, kind: object, payloads: list[bytes]) -> list[Any]:
    """A Record per payload, all of one index, term and kind: built as tuples are, without
    NamedTuple's argument binding, the three shared fields boxed once (typed `object`). (A list
    of rows: other records may follow them.)"""
    return [_new_record(Record, (raft_index, raft_term, kind, payload)) for payload in payloads]


def new_rows(raft_index: object, raft_term: object, kind: object, payloads: list[bytes]) -> list[Any]:
    """`new_records` as plain tuples."""
    return [(raft_index, raft_term, kind, payload) for payload in payloads]


def as_records(rows: Records) -> tuple[Record, ...]:
    """Every row as a Record (those that are one already, as they are)."""
    return tuple(row if type(row) is Record else _new_record(Record, row) for row in rows)


class BatchHeader(NamedTuple):
    version: int
    flags: int
    record_count: int
    compressed_length: int
    uncompressed_length: int
    data_crc: int
    first_index: int
    last_index: int

    @property
    def batch_size(self) -> int:
        """Bytes the whole batch (header + lz4 frame) occupies in a segment."""
        return BATCH_HEADER_SIZE + self.compressed_length


def check_record(record: Record | Row) -> Any:
    """Return `record` with a `bytes` payload (a Record, or a plain tuple as it is: `new_rows`),
    or raise ValueError if a field cannot be stored."""
    # Unpacked untyped: a payload of the wrong type is this function's ValueError in both builds
    # (a compiled build would raise TypeError on unpacking it as the annotation's bytes).
    fields: Any = record
    if len(fields) != 4:
        raise ValueError(f"a record has 4 fields, not {len(fields)}")
    # Read by index: compiled, unpacking an untyped value makes an iterator.
    raft_index, raft_term, kind, payload = fields[0], fields[1], fields[2], fields[3]
    # Compared with the limits as objects (`_LIMITS`): compiled, comparing an untyped field with
    # an int constant boxes the constant, an object per record.
    zero, max_u16, max_u64 = _LIMITS
    if not (zero <= raft_index <= max_u64 and zero <= raft_term <= max_u64):
        raise ValueError(f"raft index and term must fit in 64 unsigned bits: {raft_index}, {raft_term}")
    if not zero <= kind <= max_u16:
        raise ValueError(f"record kind must fit in 16 unsigned bits: {kind}")
    converted: Any
    if type(payload) is bytes and (type(record) is Record or type(record) is tuple):
        converted = record  # the common cases: nothing to convert
    elif isinstance(payload, (bytes, bytearray, memoryview)):
        payload = bytes(payload)
        converted = _new_record(Record, (raft_index, raft_term, kind, payload))
    else:
        raise ValueError(f"record payload must be bytes, not {type(payload).__name__}")
    if len(payload) > MAX_U32:
        raise ValueError("record payload over 4 GiB")
    return converted


_LIMITS: tuple[Any, Any, Any] = (0, MAX_U16, MAX_U64)
_crc32c: Any = crc32c


def encode_records(records: Records) -> bytes:
    """The uncompressed record area of a batch (what the lz4 frame holds)."""
    parts: list[bytes] = []
    pack_fields = _RECORD_FIELDS.pack
    pack_crc = _RECORD_CRC.pack
    for record in records:
        # Read by index, untyped: compiled, the fields go to `pack` as the objects they are, not
        # unboxed from the record and boxed again. The checksums stay untyped too (`_crc32c`).
        payload = record[3]
        fields = pack_fields(record[0], record[1], record[2], len(payload))
        parts.append(pack_crc(_crc32c(payload, _crc32c(fields))))
        parts.append(fields)
        parts.append(payload)
    return b"".join(parts)


def encode_batch(records: Records) -> bytes:
    """Header + lz4 frame for `records` (already checked, raft indexes non-decreasing)."""
    return encode_batch_with_header(records)[0]


def encode_batch_with_header(records: Records) -> tuple[bytes, BatchHeader]:
    """`encode_batch`'s bytes and the header they start with, as `parse_header` would read it
    (the writer needs both: no second reading of what was just written)."""
    if not records:
        raise ValueError("a batch holds at least one record")
    first_index: int = records[0][0]
    last_index: int = records[-1][0]
    previous = first_index
    for record in records:  # a plain loop: no pair made per record
        index: int = record[0]
        if index < previous:
            raise ValueError("raft indexes within a batch must not decrease")
        previous = index
    if len(records) > MAX_U32:
        raise ValueError("too many records for one batch")
    raw = encode_records(records)
    if len(raw) > MAX_U32:
        raise ValueError("batch over 4 GiB uncompressed")
    frame = lz4.frame.compress(raw)
    if len(frame) > MAX_U32:
        raise ValueError("batch over 4 GiB compressed")
    data_crc = crc32c(frame)
    fields = _HEADER_FIELDS.pack(MAGIC, FORMAT_VERSION, 0, len(records), len(frame), len(raw), data_crc, first_index,
                                 last_index)
    header = BatchHeader(FORMAT_VERSION, 0, len(records), len(frame), len(raw), data_crc, first_index, last_index)
    return b"".join((fields, _HEADER_CRC.pack(crc32c(fields)), frame)), header


def parse_header(buf: bytes | bytearray | memoryview, offset: int = 0) -> BatchHeader:
    """Read the batch header at `offset`, checking its magic and CRC (not its version: see
    `check_supported`, so a scanner can tell an unknown format from a torn write)."""
    if len(buf) - offset < BATCH_HEADER_SIZE:
        raise JournalCorrupt("incomplete batch header", offset=offset)
    fields = _HEADER_FIELDS.unpack_from(buf, offset)
    if fields[0] != MAGIC:
        raise JournalCorrupt(f"bad magic {bytes(fields[0])!r}", offset=offset)
    (stored_crc,) = _HEADER_CRC.unpack_from(buf, offset + _HEADER_FIELDS.size)
    if crc32c(memoryview(buf)[offset : offset + _HEADER_FIELDS.size]) != stored_crc:
        raise JournalCorrupt("batch header CRC mismatch", offset=offset)
    return BatchHeader(*fields[1:])


def check_supported(header: BatchHeader, offset: int | None = None) -> None:
    """Raise unless the header describes a batch this version can read and its fields agree."""
    if header.version != FORMAT_VERSION:
        raise JournalCorrupt(f"unsupported format version {header.version}", offset=offset)
    if header.flags != 0:
        raise JournalCorrupt(f"unsupported flags {header.flags:#x}", offset=offset)
    if header.record_count == 0:
        raise JournalCorrupt("batch with no records", offset=offset)
    if header.first_index > header.last_index:
        raise JournalCorrupt("batch first index above its last index", offset=offset)


def check_data(header: BatchHeader, data: bytes | bytearray | memoryview, offset: int | None = None) -> None:
    """Verify the compressed bytes of a batch against the CRC in its header."""
    if len(data) != header.compressed_length:
        raise JournalCorrupt("incomplete batch data", offset=offset)
    if crc32c(data) != header.data_crc:
        raise JournalCorrupt("batch data CRC mismatch", offset=offset)


def decode_records(header: BatchHeader, data: bytes | bytearray | memoryview,
                   offset: int | None = None) -> tuple[Record, ...]:
    """Decompress a verified batch and return its records, checking every record's CRC."""
    check_supported(header, offset)
    check_data(header, data, offset)
    try:
        raw = lz4.frame.decompress(data)
    except RuntimeError as exc:  # lz4 reports malformed frames as RuntimeError
        raise JournalCorrupt(f"lz4 frame does not decompress: {exc}", offset=offset) from exc
    if len(raw) != header.uncompressed_length:
        raise JournalCorrupt("decompressed length differs from the header", offset=offset)
    view = memoryview(raw)
    records: list[Record] = []
    position = 0
    for _ in range(header.record_count):
        if len(raw) - position < RECORD_HEADER_SIZE:
            raise JournalCorrupt(f"record {len(records)} truncated", offset=offset)
        (stored_crc,) = _RECORD_CRC.unpack_from(raw, position)
        raft_index, raft_term, kind, length = _RECORD_FIELDS.unpack_from(raw, position + _RECORD_CRC.size)
        end = position + RECORD_HEADER_SIZE + length
        if end > len(raw):
            raise JournalCorrupt(f"record {len(records)} runs past the batch", offset=offset)
        if crc32c(view[position + _RECORD_CRC.size : end]) != stored_crc:
            raise JournalCorrupt(f"record {len(records)} CRC mismatch", offset=offset)
        if records and raft_index < records[-1].raft_index:
            raise JournalCorrupt(f"record {len(records)} raft index decreases", offset=offset)
        records.append(_new_record(Record, (raft_index, raft_term, kind, raw[position + RECORD_HEADER_SIZE : end])))
        position = end
    if position != len(raw):
        raise JournalCorrupt("bytes after the last record", offset=offset)
    if records[0].raft_index != header.first_index or records[-1].raft_index != header.last_index:
        raise JournalCorrupt("record raft indexes disagree with the batch header", offset=offset)
    return tuple(records)


def decode_batch(buf: bytes | bytearray | memoryview, offset: int = 0) -> tuple[BatchHeader, tuple[Record, ...]]:
    """Header and records of the batch starting at `offset` of `buf`."""
    header = parse_header(buf, offset)
    start = offset + BATCH_HEADER_SIZE
    return header, decode_records(header, memoryview(buf)[start : start + header.compressed_length], offset)


def iter_segment(
    buf: bytes | bytearray | memoryview, *, stop_at_incomplete_tail: bool = False
) -> Iterator[tuple[int, BatchHeader, tuple[Record, ...]]]:
    """Every batch of a whole segment file's bytes, as (offset, header, records).

    For readers of closed segments (the Spark audit, replica comparison): any damage raises
    JournalCorrupt. A reader of a live segment may pass `stop_at_incomplete_tail` to end
    quietly at a last batch that is still being written (it runs past the end of `buf`).
    """
    offset = 0
    while offset < len(buf):
        remaining = len(buf) - offset
        if stop_at_incomplete_tail and remaining < BATCH_HEADER_SIZE:
            return
        header = parse_header(buf, offset)
        if stop_at_incomplete_tail and header.batch_size > remaining:
            return
        yield (offset, *decode_batch(buf, offset))
        offset += header.batch_size
