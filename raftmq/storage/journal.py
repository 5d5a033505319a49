"""The group's journal of message bodies: one directory of segment files per node.

Every node appends the records of each applied Raft batch with `append_batch` and makes them
durable with one `sync()` (group commit: one fsync per applied batch, not per record). A
`RecordLocation` says where a record lives on *this* node; `locate(raft_index, ordinal)` finds a
record by what is the same on every node, the Raft index and its position among the records
of that index, which is what replicated state (snapshots) should hold.

Threads: `append_batch`, `sync`, `delete_*` and `close` belong to one thread (the apply
path); `read`, `read_record`, `locate`, `records`, `segments` and the index properties may be
called from any thread.
"""

from __future__ import annotations

import bisect
import fcntl
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import NamedTuple

import structlog

from raftmq.errors import JournalCorrupt, RaftmqError
from raftmq.storage import records as rec
from raftmq.storage.batch_cache import BatchCache
from raftmq.storage.records import Record
from raftmq.storage.segments import (
    Segment,
    fsync_directory,
    list_segment_ids,
    read_batch,
    scan_segment,
    segment_name,
    write_exact,
)

log = structlog.get_logger("raftmq.storage.journal")

DEFAULT_SEGMENT_BYTES = 64 * 2**20
DEFAULT_CACHE_BYTES = 32 * 2**20
# An fsync slower than this is logged as `journal.fsync_slow`: on a healthy SSD it takes a
# few ms, and every commit waits for it, so 100 ms means a saturated or failing disk.
FSYNC_SLOW_MS = 100.0


class RecordLocation(NamedTuple):
    """Where one record lives in this node's journal; msgpack packs it as a 3-element array."""

    segment: int  # segment id (first raft index of the segment)
    offset: int  # byte offset of the batch in the segment
    slot: int  # position of the record in the batch


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    segment_id: int
    path: str
    first_index: int
    last_index: int
    size: int
    batches: int


class Journal:
    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
        max_open_readers: int = 16,
        fsync_slow_ms: float = FSYNC_SLOW_MS,
    ) -> None:
        if segment_bytes <= 0 or cache_bytes < 0 or max_open_readers < 1:
            raise ValueError("segment_bytes and max_open_readers must be positive, cache_bytes not negative")
        self.directory = os.fspath(directory)
        self.segment_bytes = segment_bytes
        self.cache_bytes = cache_bytes
        self.max_open_readers = max_open_readers
        self.fsync_slow_ms = fsync_slow_ms
        self._lock = threading.Lock()
        self._segments: list[Segment] = []  # ascending; each holds at least one batch
        self._by_id: dict[int, Segment] = {}
        self._cache = BatchCache(cache_bytes)
        self._readers: OrderedDict[int, int] = OrderedDict()  # segment id -> read-only fd
        self._writer: tuple[Segment, int] | None = None  # the last segment and its write fd
        self._unsynced = False
        self._dir_dirty = False
        self._broken: str | None = None
        self._closed = False
        self._dir_fd = self._open_directory()
        try:
            self._recover()
        except BaseException:
            os.close(self._dir_fd)
            raise

    # -- opening ---------------------------------------------------------------------------

    def _open_directory(self) -> int:
        if not os.path.isdir(self.directory):
            os.makedirs(self.directory)
            fsync_directory(os.path.dirname(os.path.abspath(self.directory)))
        fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            # Two writers on one journal would interleave batches: refuse the second.
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise RaftmqError(f"journal directory {self.directory} is in use by another journal") from None
        return fd

    def _recover(self) -> None:
        ids = list_segment_ids(self.directory)
        for position, segment_id in enumerate(ids):
            is_last = position == len(ids) - 1
            segment = Segment(segment_id, os.path.join(self.directory, segment_name(segment_id)))
            fd = os.open(segment.path, os.O_RDONLY)
            try:
                problem = scan_segment(fd, segment, os.fstat(fd).st_size)
                # After a crash of this process (not of the machine) the file may hold batches
                # that were never fsynced; make them durable before `last_index` reports them.
                os.fsync(fd)
            finally:
                os.close(fd)
            if problem is not None and not (is_last and problem.torn):
                raise JournalCorrupt(problem.reason, segment.path, problem.offset)
            if problem is not None:
                self._truncate_torn_tail(segment, problem.offset, problem.reason)
            if not segment.offsets:
                if not is_last:
                    raise JournalCorrupt("segment holds no batch", segment.path, 0)
                os.unlink(segment.path)
                continue
            if self._segments and segment.first < self._segments[-1].last:
                raise JournalCorrupt("raft index goes back from the previous segment", segment.path, 0)
            self._register(segment)
        if ids:
            os.fsync(self._dir_fd)

    def _truncate_torn_tail(self, segment: Segment, offset: int, reason: str) -> None:
        # Legal: a torn append was never synced, so nobody was told it was stored.
        fd = os.open(segment.path, os.O_WRONLY)
        try:
            dropped = os.fstat(fd).st_size - offset
            os.ftruncate(fd, offset)
            os.fsync(fd)
        finally:
            os.close(fd)
        log.warning("journal.torn_tail_truncated", path=segment.path, offset=offset, dropped_bytes=dropped,
                    reason=reason)

    def _register(self, segment: Segment) -> None:
        with self._lock:
            self._segments.append(segment)
            self._by_id[segment.segment_id] = segment

    # -- index -----------------------------------------------------------------------------

    @property
    def last_index(self) -> int | None:
        """Highest raft index stored (replay resumes after it), None when the journal is empty."""
        with self._lock:
            return self._segments[-1].last_index if self._segments else None

    @property
    def first_index(self) -> int | None:
        with self._lock:
            return self._segments[0].first_index if self._segments else None

    def segments(self) -> list[SegmentInfo]:
        with self._lock:
            return [
                SegmentInfo(s.segment_id, s.path, s.first, s.last, s.size, len(s.offsets))
                for s in self._segments
            ]

    # -- writing (apply thread) ------------------------------------------------------------

    def append_batch(self, records: Iterable[Record | tuple[int, int, int, bytes]], *, cache: bool = True,
                     refs: bool = True) -> list[RecordLocation]:
        """Write one batch; durable only after the next `sync()`. Raft indexes must not go back.
        `cache=False`: do not keep its records for reads (a writer that will hardly read them).
        Returns where each record went; `refs=False`: [] (a writer that finds records by index)."""
        self._check_writable()
        checked = [rec.check_record(record) for record in records]
        if not checked:
            return []
        last_index = self.last_index
        if last_index is not None and checked[0][0] < last_index:
            raise ValueError(f"raft index {checked[0][0]} is below the journal's last index {last_index}")
        data, header = rec.encode_batch_with_header(checked)
        writer = self._writer_for(header.first_index, len(data))
        if writer is None:
            segment = self._start_segment(header.first_index, data)
            offset = 0
        else:
            segment, fd = writer
            offset = segment.size
            self._write_at(segment, fd, data, offset)
        with self._lock:
            segment.add_batch(offset, header)
            if offset == 0:  # readers only ever see segments that hold a batch
                self._segments.append(segment)
                self._by_id[segment.segment_id] = segment
            if cache:
                self._cache.put((segment.segment_id, offset), rec.as_records(checked), header)
        self._unsynced = True
        if not refs:
            return []
        return [RecordLocation(segment.segment_id, offset, slot) for slot in range(len(checked))]

    def _check_writable(self) -> None:
        if self._closed:
            raise ValueError("journal is closed")
        if self._broken is not None:
            raise JournalCorrupt(f"journal unusable after an I/O failure: {self._broken}", self.directory)

    def _writer_for(self, first_index: int, length: int) -> tuple[Segment, int] | None:
        """The segment to append to, or None when a new segment must start."""
        if not self._segments:
            return None
        last = self._segments[-1]
        # A new segment is named by its first raft index, so rotate only when that name is new.
        if last.size + length > self.segment_bytes and first_index > last.segment_id:
            return None
        if self._writer is None or self._writer[0] is not last:
            self._writer = (last, os.open(last.path, os.O_WRONLY))
        return self._writer

    def _start_segment(self, segment_id: int, data: bytes) -> Segment:
        if self._writer is not None:
            # The segment being left must be whole on disk before a later one can exist: a torn
            # batch in a segment that is no longer the last would read as corruption after a
            # power loss. One extra fsync per rotation, so every segment but the last is durable.
            self._fsync(self._writer[1], self._writer[0].path)
            os.close(self._writer[1])
            self._writer = None
        segment = Segment(segment_id, os.path.join(self.directory, segment_name(segment_id)))
        fd = os.open(segment.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            write_exact(fd, data, 0)
        except OSError as exc:
            os.close(fd)
            try:
                os.unlink(segment.path)
            except OSError as unlink_exc:
                self._broken = f"cannot remove {segment.path} after a failed write: {unlink_exc}"
            raise exc
        self._writer = (segment, fd)
        self._dir_dirty = True
        return segment

    def _write_at(self, segment: Segment, fd: int, data: bytes, offset: int) -> None:
        try:
            write_exact(fd, data, offset)
        except OSError:
            try:
                os.ftruncate(fd, offset)
            except OSError as exc:
                self._broken = f"cannot roll back a failed write in {segment.path} at offset {offset}: {exc}"
            raise

    def sync(self) -> None:
        """Make every batch appended so far durable, and the entries of segments created since."""
        self._check_writable()
        if self._unsynced and self._writer is not None:
            self._fsync(self._writer[1], self._writer[0].path)
        self._unsynced = False
        if self._dir_dirty:
            self._fsync(self._dir_fd, self.directory)
            self._dir_dirty = False

    def _fsync(self, fd: int, path: str) -> None:
        started = time.monotonic()
        try:
            os.fsync(fd)
        except OSError as exc:
            # After a failed fsync the kernel may have dropped the dirty pages: trust nothing more.
            self._broken = f"fsync failed: {exc}"
            raise
        log_if_slow_fsync(started, path, self.fsync_slow_ms)

    def delete_segments_before(self, raft_index: int) -> list[int]:
        """Delete every segment whose records all have raft indexes below `raft_index`,
        except the last segment (it holds `last_index`). Returns the deleted segment ids."""
        with self._lock:
            doomed = [s.segment_id for s in self._segments[:-1] if s.last < raft_index]
        for segment_id in doomed:
            os.unlink(self._forget_segment(segment_id))
        if doomed:
            os.fsync(self._dir_fd)
        return doomed

    def delete_segment(self, segment_id: int) -> None:
        """Delete one segment the snapshot no longer references (never the last one)."""
        os.unlink(self._forget_segment(segment_id))
        os.fsync(self._dir_fd)

    def _forget_segment(self, segment_id: int) -> str:
        """Drop a segment from the index, the cache and the open readers; return its path."""
        if self._closed:
            raise ValueError("journal is closed")
        with self._lock:
            segment = self._by_id.get(segment_id)
            if segment is None:
                raise KeyError(f"no segment {segment_id}")
            if segment is self._segments[-1]:
                raise ValueError("the last segment cannot be deleted")
            self._segments.remove(segment)
            del self._by_id[segment_id]
            reader = self._readers.pop(segment_id, None)
            if reader is not None:
                os.close(reader)
            self._cache.drop_segment(segment_id)
        return segment.path

    # -- reading (any thread) --------------------------------------------------------------

    def read(self, ref: RecordLocation | tuple[int, int, int]) -> bytes:
        """The payload of a record. Raises KeyError for an unknown ref, JournalCorrupt on bad bytes."""
        return self.read_record(ref).payload

    def read_record(self, ref: RecordLocation | tuple[int, int, int]) -> Record:
        segment_id, offset, slot = ref
        with self._lock:
            segment = self._by_id.get(segment_id)
            position = bisect.bisect_left(segment.offsets, offset) if segment is not None else -1
            if segment is None or position == len(segment.offsets) or segment.offsets[position] != offset:
                raise KeyError(f"no batch at segment {segment_id} offset {offset}")
            batch = self._load(segment, position)
        if not 0 <= slot < len(batch):
            raise KeyError(f"no record {slot} in the batch at segment {segment_id} offset {offset}")
        return batch[slot]

    def locate(self, raft_index: int, ordinal: int = 0) -> RecordLocation:
        """The `ordinal`-th record (from 0, in append order) among those with `raft_index`."""
        seen = 0
        with self._lock:
            start = bisect.bisect_left(self._segments, raft_index, key=lambda s: s.last)
            for segment in self._segments[start:]:
                first_position = bisect.bisect_left(segment.last_indexes, raft_index)
                for position in range(first_position, len(segment.offsets)):
                    if segment.first_indexes[position] > raft_index:
                        raise KeyError(f"no record {ordinal} at raft index {raft_index}")
                    if segment.first_indexes[position] == segment.last_indexes[position]:
                        # The whole batch has this index: no need to decompress it.
                        count = segment.counts[position]
                        if ordinal < seen + count:
                            return RecordLocation(segment.segment_id, segment.offsets[position], ordinal - seen)
                        seen += count
                        continue
                    for slot, record in enumerate(self._load(segment, position)):
                        if record.raft_index == raft_index:
                            if seen == ordinal:
                                return RecordLocation(segment.segment_id, segment.offsets[position], slot)
                            seen += 1
        raise KeyError(f"no record {ordinal} at raft index {raft_index}")

    def records(self, start_index: int = 0) -> Iterator[tuple[RecordLocation, Record]]:
        """Every record with raft index >= `start_index`, in order, bypassing the cache
        (replay, repair and replica comparison read once and should not evict hot batches)."""
        with self._lock:
            plan = [s for s in self._segments if s.last >= start_index]
        for segment in plan:
            with self._lock:
                position = bisect.bisect_left(segment.last_indexes, start_index)
            while True:
                with self._lock:
                    if position >= len(segment.offsets):
                        break
                    if segment.segment_id not in self._by_id:
                        raise KeyError(f"segment {segment.segment_id} was deleted while being read")
                    offset = segment.offsets[position]
                    batch = self._cache.get((segment.segment_id, offset), touch=False)
                    if batch is None:
                        _, batch = read_batch(self._reader_fd(segment), segment, position)
                for slot, record in enumerate(batch):
                    if record.raft_index >= start_index:
                        yield RecordLocation(segment.segment_id, offset, slot), record
                position += 1

    def _load(self, segment: Segment, position: int) -> tuple[Record, ...]:
        """Records of a batch through the cache. Caller holds the lock."""
        key = (segment.segment_id, segment.offsets[position])
        batch = self._cache.get(key)
        if batch is not None:
            return batch
        header, batch = read_batch(self._reader_fd(segment), segment, position)
        self._cache.put(key, batch, header)
        return batch

    def _reader_fd(self, segment: Segment) -> int:
        fd = self._readers.get(segment.segment_id)
        if fd is not None:
            self._readers.move_to_end(segment.segment_id)
            return fd
        fd = os.open(segment.path, os.O_RDONLY)
        self._readers[segment.segment_id] = fd
        while len(self._readers) > self.max_open_readers:
            os.close(self._readers.popitem(last=False)[1])
        return fd

    # -- closing ---------------------------------------------------------------------------

    def close(self) -> None:
        """Sync (unless an I/O failure made the journal unusable) and release every fd."""
        if self._closed:
            return
        try:
            if self._broken is None:
                self.sync()
        finally:
            self._closed = True
            with self._lock:
                fds = list(self._readers.values())
                if self._writer is not None:
                    fds.append(self._writer[1])
                self._readers.clear()
                self._writer = None
                self._cache.clear()
            for fd in fds:
                os.close(fd)
            os.close(self._dir_fd)  # also releases the directory lock

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def log_if_slow_fsync(started: float, path: str, threshold_ms: float = FSYNC_SLOW_MS) -> None:
    """Log `journal.fsync_slow` when the fsync that began at monotonic `started` took too long."""
    duration_ms = (time.monotonic() - started) * 1000
    if duration_ms >= threshold_ms:
        log.warning("journal.fsync_slow", file=path, duration_ms=round(duration_ms, 1), threshold_ms=threshold_ms)
