"""Segment files: naming, the per-segment batch index, recovery at open, plain-fd writes.

A segment is an append-only file of batches named after the first raft index it holds
(`NNNNNNNNNNNNNNNNNNNN.seg`, 20 digits, so names sort like the indexes). Everything here
works on file descriptors with `os.pread` / `os.pwrite` / `os.fsync`; `Journal` decides when.
"""

from __future__ import annotations

import os
import re
from array import array
from dataclasses import dataclass, field

from raftmq.errors import JournalCorrupt
from raftmq.storage import records as rec

SEGMENT_SUFFIX = ".seg"
_SEGMENT_NAME = re.compile(r"^(\d{20})\.seg$")


def segment_name(segment_id: int) -> str:
    return f"{segment_id:020d}{SEGMENT_SUFFIX}"


def list_segment_ids(directory: str) -> list[int]:
    """Ids of the segment files in `directory`, ascending; other files are not ours and ignored."""
    ids = []
    for name in os.listdir(directory):
        match = _SEGMENT_NAME.match(name)
        if match:
            ids.append(int(match.group(1)))
    return sorted(ids)


@dataclass
class Segment:
    """One segment file and the index of its batches (kept in RAM: 28 bytes per batch)."""

    segment_id: int
    path: str
    size: int = 0  # bytes of whole, verified batches
    offsets: array[int] = field(default_factory=lambda: array("Q"))
    first_indexes: array[int] = field(default_factory=lambda: array("Q"))
    last_indexes: array[int] = field(default_factory=lambda: array("Q"))
    counts: array[int] = field(default_factory=lambda: array("I"))

    @property
    def first_index(self) -> int | None:
        return self.first_indexes[0] if self.offsets else None

    @property
    def last_index(self) -> int | None:
        return self.last_indexes[-1] if self.offsets else None

    @property
    def first(self) -> int:
        """`first_index` of a segment that holds a batch (every registered segment does)."""
        return self.first_indexes[0]

    @property
    def last(self) -> int:
        """`last_index` of a segment that holds a batch."""
        return self.last_indexes[-1]

    def add_batch(self, offset: int, header: rec.BatchHeader) -> None:
        self.offsets.append(offset)
        self.first_indexes.append(header.first_index)
        self.last_indexes.append(header.last_index)
        self.counts.append(header.record_count)
        self.size = offset + header.batch_size

    def batch_end(self, position: int) -> int:
        """End offset of the batch at `position` in this segment's index."""
        return self.offsets[position + 1] if position + 1 < len(self.offsets) else self.size


def read_exact(fd: int, length: int, offset: int) -> bytes:
    """`length` bytes at `offset`, fewer only at end of file (pread may return short reads)."""
    parts = []
    while length > 0:
        chunk = os.pread(fd, length, offset)
        if not chunk:
            break
        parts.append(chunk)
        length -= len(chunk)
        offset += len(chunk)
    return b"".join(parts)


def write_exact(fd: int, data: bytes, offset: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view = view[written:]
        offset += written


@dataclass
class ScanProblem:
    """Where and why verification of a segment stopped."""

    offset: int
    reason: str
    torn: bool  # a torn write explains it: nothing valid follows in the file


def _valid_batch_at(buf: bytes, offset: int) -> bool:
    try:
        header = rec.parse_header(buf, offset)
        start = offset + rec.BATCH_HEADER_SIZE
        rec.check_data(header, memoryview(buf)[start : start + header.compressed_length])
    except JournalCorrupt:
        return False
    return True


def _valid_batch_in(buf: bytes) -> bool:
    """Does any whole, CRC-valid batch start anywhere in `buf`?"""
    position = buf.find(rec.MAGIC)
    while position >= 0:
        if _valid_batch_at(buf, position):
            return True
        position = buf.find(rec.MAGIC, position + 1)
    return False


def scan_segment(fd: int, segment: Segment, file_size: int) -> ScanProblem | None:
    """Verify every batch of a segment file and index it into `segment`.

    Stops at the first batch that fails. The failure is `torn` when it can only be the
    remains of an interrupted append: the batch runs past the end of the file, or it is bad
    and no valid batch follows it (power loss may leave zeros or stale pages in the tail).
    Failures that no torn write explains (an unknown format version, index order) are raised.
    """
    offset = 0
    previous_last = None
    while offset < file_size:
        header_bytes = read_exact(fd, rec.BATCH_HEADER_SIZE, offset)
        if len(header_bytes) < rec.BATCH_HEADER_SIZE:
            return ScanProblem(offset, "incomplete batch header", torn=True)
        try:
            header = rec.parse_header(header_bytes)
        except JournalCorrupt as exc:
            rest = read_exact(fd, file_size - offset - 1, offset + 1)
            return ScanProblem(offset, exc.reason, torn=not _valid_batch_in(rest))
        try:
            rec.check_supported(header)
        except JournalCorrupt as exc:
            raise JournalCorrupt(exc.reason, segment.path, offset) from None
        end = offset + header.batch_size
        if end > file_size:
            return ScanProblem(offset, "batch runs past the end of the file", torn=True)
        try:
            rec.check_data(header, read_exact(fd, header.compressed_length, offset + rec.BATCH_HEADER_SIZE))
        except JournalCorrupt as exc:
            rest = read_exact(fd, file_size - end, end)
            return ScanProblem(offset, exc.reason, torn=not _valid_batch_in(rest))
        if previous_last is None and header.first_index != segment.segment_id:
            raise JournalCorrupt(
                f"first batch starts at raft index {header.first_index}, the file name says {segment.segment_id}",
                segment.path, offset,
            )
        if previous_last is not None and header.first_index < previous_last:
            raise JournalCorrupt("raft index goes back from the previous batch", segment.path, offset)
        segment.add_batch(offset, header)
        previous_last = header.last_index
        offset = end
    return None


def read_batch(fd: int, segment: Segment, position: int) -> tuple[rec.BatchHeader, tuple[rec.Record, ...]]:
    """Read, verify and decode the batch at `position` of the segment's index."""
    offset = segment.offsets[position]
    length = segment.batch_end(position) - offset
    data = read_exact(fd, length, offset)
    try:
        if len(data) != length:
            raise JournalCorrupt("segment is shorter than its index says", offset=offset)
        header, records = rec.decode_batch(data)
        if header.batch_size != length:
            raise JournalCorrupt("batch length differs from the index", offset=offset)
    except JournalCorrupt as exc:
        raise JournalCorrupt(exc.reason, segment.path, offset) from None
    return header, records


def fsync_directory(directory: str) -> None:
    """Make entries created, renamed or removed in `directory` durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
