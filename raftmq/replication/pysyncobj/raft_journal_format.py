"""The bytes of a member's Raft journal and its metadata, pure: bytes in, values out; no
pysyncobj, no asyncio, no I/O, nothing done at import (docs/raft-journal-format.md).
`RaftJournal` writes them; the Spark audit and the corruption nemesis read them with this
module alone. The snapshot file's bytes are `snapshot_file`.

- `raft.journal`: `JOURNAL_MAGIC`, then records `<length u32><crc32c u32><index u64><term u64>`
  followed by `length` bytes of command (one Raft entry, as pysyncobj pickles it). The CRC covers
  index, term and command. Zeros after the last record are reserved space.
- `raft.journal.meta`: a msgpack map (`term`, `voted_for`, `commit_index`).
- A record's command is pysyncobj's: a command-type byte, then for a regular command the
  pickled call `(function id, (entry,))`. `entry_of` takes the raftmq entry out of it without
  running anything a pickle could name (raftmq.replication.entry_codec decodes the entry).

Importing this module does not import pysyncobj: its package (`raftmq.replication.pysyncobj`)
re-exports nothing, so only the modules that need pysyncobj load it.
"""

from __future__ import annotations

import codecs
import io
import pickle
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import crc32c
import msgpack

from raftmq.errors import RaftJournalError

JOURNAL_MAGIC = b"RAFTMQ-RAFT-JOURNAL-1\n"
# Space reserved ahead of the records (zeros at the end of the file, read as "no more records").
# An fdatasync after an append that grows the file also commits the new size through the
# filesystem's journal; inside reserved space it flushes data and extent state only
# (ext4 here: ~0.17 -> ~0.11 ms, with three members syncing at once ~0.25 -> ~0.18 ms).
JOURNAL_RESERVE_BYTES = 4 * 2**20
RECORD = struct.Struct("<IIQQ")  # payload length, crc32c(index, term, payload), index, term
_INDEX_TERM = struct.Struct("<QQ")
Entry = tuple[bytes, int, int]  # (command, index, term), pysyncobj's entry shape
# pysyncobj's command types (the first byte of a command); it writes NO_OP as a new leader's first entry.
COMMAND_REGULAR = 0
COMMAND_NO_OP = 1


def record_crc(index: int, term: int, command: bytes) -> int:
    return int(crc32c.crc32c(command, crc32c.crc32c(_INDEX_TERM.pack(index, term))))


def encode_record(index: int, term: int, command: bytes) -> bytes:
    return RECORD.pack(len(command), record_crc(index, term, command), index, term) + command


@dataclass(frozen=True, slots=True)
class Record:
    index: int
    term: int
    command: bytes
    end: int  # offset just past the record in the file


@dataclass(frozen=True, slots=True)
class JournalScan:
    """What a journal file holds: its records, and where the readable part ends. `torn` is
    true when bytes other than reserved zeros follow the last good record (a crash mid-write)."""

    records: list[Record]
    end: int
    torn: bool


def scan_journal(data: bytes, path: str = "<buffer>") -> JournalScan:
    """Parse a journal file's bytes. Stops at the first record that is cut short or fails its
    CRC (a torn tail: never acknowledged); raises `RaftJournalError` when the file is not a
    journal, its indexes do not follow each other, or a whole record follows the one that
    failed (damage in the middle of the log, not a torn tail: records past it were fsynced)."""
    if not data:
        return JournalScan([], 0, False)
    if not data.startswith(JOURNAL_MAGIC):
        raise RaftJournalError(f"{path}: not a raftmq Raft journal")
    offset = len(JOURNAL_MAGIC)
    view = memoryview(data)
    records: list[Record] = []
    while offset + RECORD.size <= len(data):
        length, crc, index, term = RECORD.unpack_from(data, offset)
        end = offset + RECORD.size + length
        if end > len(data):
            break
        command = bytes(view[offset + RECORD.size:end])
        if record_crc(index, term, command) != crc:
            break
        if records and index != records[-1].index + 1:
            raise RaftJournalError(f"{path}: Raft index {index} follows {records[-1].index} at offset {offset}")
        records.append(Record(index, term, command, end))
        offset = end
    torn = data.count(0, offset) != len(data) - offset
    if torn:
        later = _later_record(data, offset, records)
        if later is not None:
            raise RaftJournalError(f"{path}: damaged record at offset {offset}, yet the record of Raft index "
                                   f"{later[1]} at offset {later[0]} is whole: corruption, not a torn tail")
    return JournalScan(records, offset, torn)


# How far past the damaged record to look for a whole one. A torn tail holds at most the
# entries written since the last fdatasync, which is far fewer than this.
_LATER_INDEXES = 256


def _later_record(data: bytes, bad: int, records: list[Record]) -> tuple[int, int] | None:
    """(offset, index) of a whole record after the one that failed at `bad`, if there is one.

    A crash can only tear the end of the file (appends are sequential; truncations cut the file
    right after the last record kept), so a whole record past a damaged one means the damaged
    bytes were once fsynced: bit rot or a bad write, and cutting there would silently drop
    entries this member may have acknowledged. Records are found by their index field (the
    indexes after the damaged one) or, when the damaged record is the first and its index is
    unknown, by its term field, which keeps the search at C speed on a large file."""
    limit = len(data.rstrip(b"\0"))  # reserved zeros hold no record: a real torn tail is searched in microseconds
    if records:
        first = records[-1].index + 2
        needles = [(_INDEX_TERM.pack(index, 0)[:8], 8) for index in range(first, first + _LATER_INDEXES)]
    elif bad + RECORD.size <= len(data):
        _length, _crc, index, term = RECORD.unpack_from(data, bad)
        needles = [(_INDEX_TERM.pack(index + 1, 0)[:8], 8), (_INDEX_TERM.pack(0, term)[8:], 16)]
    else:
        return None
    for needle, field in needles:
        at = data.find(needle, bad + 1 + field, limit)
        while at != -1:
            start = at - field
            if start > bad and start + RECORD.size <= len(data):  # a header cut short is no record
                length, crc, found, term = RECORD.unpack_from(data, start)
                end = start + RECORD.size + length
                if end <= len(data) and record_crc(found, term, data[start + RECORD.size:end]) == crc:
                    return start, found
            at = data.find(needle, at + 1, limit)
    return None


def iter_entries(data: bytes, path: str = "<buffer>") -> Iterator[Entry]:
    for record in scan_journal(data, path).records:
        yield (record.command, record.index, record.term)


def encode_meta(meta: dict[str, Any]) -> bytes:
    return bytes(msgpack.packb(meta, use_bin_type=True))


def decode_meta(raw: bytes, path: str = "<buffer>") -> dict[str, Any]:
    try:
        meta = msgpack.unpackb(raw, raw=False)
    except Exception as exc:
        raise RaftJournalError(f"{path}: unreadable Raft metadata ({exc}); restore it or remove the node's data "
                               "directory to resync it from its peers") from None
    if not isinstance(meta, dict):
        raise RaftJournalError(f"{path}: unreadable Raft metadata")
    return meta


class _PlainUnpickler(pickle.Unpickler):
    """Builds ints, bytes and tuples only: a journal is data, and a corrupt or planted record
    must not run code when the audit reads it."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) == ("_codecs", "encode"):  # how pickle protocol 2 (stock pysyncobj) spells bytes
            return codecs.encode
        raise RaftJournalError(f"Raft journal command refers to {module}.{name}")


def entry_of(command: bytes) -> bytes | None:
    """The raftmq entry a record's command carries, or None for pysyncobj's own commands (a new
    leader's no-op; membership changes, raftmq.replication.membership; version changes). Raises
    `RaftJournalError` when a regular command is not one call with one `bytes` argument."""
    if not command:
        raise RaftJournalError("empty Raft journal command")
    if command[0] != COMMAND_REGULAR:
        return None
    try:
        call = _PlainUnpickler(io.BytesIO(command[1:])).load()
    except RaftJournalError:
        raise
    except Exception as exc:
        raise RaftJournalError(f"unreadable Raft journal command ({type(exc).__name__}: {exc})") from None
    if isinstance(call, tuple) and len(call) == 2 and isinstance(call[1], tuple) and len(call[1]) == 1:
        entry = call[1][0]
        if isinstance(entry, bytes):
            return entry
    raise RaftJournalError("Raft journal command is not a call with one raftmq entry")
