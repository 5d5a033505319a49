"""The Raft journal: pysyncobj's log and its term/vote/commit metadata, on disk in our format.

Their bytes are `raft_journal_format` (docs/raft-journal-format.md); this module adds the file
handling: appends with one fdatasync per `sync()`, metadata stored before a vote leaves,
compaction by rewrite-and-rename, torn tails cut at open. The snapshot file is `snapshot_file`.
"""

from __future__ import annotations

import contextlib
import errno
import os
import time
from typing import Any

import structlog
from pysyncobj.journal import Journal

from raftmq.errors import RaftJournalError
from raftmq.replication.pysyncobj.patches import fsync_directory
from raftmq.replication.pysyncobj.raft_journal_format import (
    JOURNAL_MAGIC,
    JOURNAL_RESERVE_BYTES,
    Entry,
    decode_meta,
    encode_meta,
    encode_record,
    scan_journal,
)
from raftmq.storage.journal import log_if_slow_fsync

log = structlog.get_logger("raftmq.replication.pysyncobj")
META_WARN_INTERVAL_S = 10.0


def fdatasync(fd: int) -> None:
    """What `RaftJournal.sync()` makes the journal durable with: a seam for a test that plants
    a journal that never fsyncs, to show the chaos harness catches it (no switch in the broker)."""
    os.fdatasync(fd)


class RaftJournal(Journal):
    """pysyncobj's Raft log on disk: our record format, CRC32C per record, made durable with
    one fdatasync per `sync()` however many entries were added since the last one.

    Records are appended with `os.write` as entries arrive; `sync()` is what the transport and
    the tick call before anything that promises durability leaves the node. currentTerm and
    votedFor are stored (fsynced, renamed, directory fsynced) before `setCurrentTerm` returns.
    A torn tail (a crash mid-write: never acknowledged) is cut off at open; anything else that
    does not parse raises `RaftJournalError`.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._meta_path = path + ".meta"
        self._entries: list[Entry] = []
        self._ends: list[int] = []  # file offset just past each record
        self._dirty = False
        self._meta_dirty = False
        self._meta_due = False  # pysyncobj's one-second timer fired; stored at the next tick
        self._meta_warned = -META_WARN_INTERVAL_S  # when raft.meta_store_failed was last logged
        self._allocated = 0  # file size: records up to _size, then reserved zeros
        self._reserve = True  # off where the filesystem cannot preallocate
        self.durable_index = 0  # last index whose record is known to be on stable storage
        self.fsyncs = 0
        self._meta = self._load_meta()
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            self._load_records()
        except BaseException:
            os.close(self._fd)
            raise

    # -- loading

    def _load_meta(self) -> dict[str, Any]:
        try:
            with open(self._meta_path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            return {}
        return decode_meta(raw, self._meta_path)

    def _load_records(self) -> None:
        size = os.fstat(self._fd).st_size
        data = os.pread(self._fd, size, 0) if size else b""
        if not data:
            os.write(self._fd, JOURNAL_MAGIC)
            os.fsync(self._fd)
            fsync_directory(self.path)
            self._size = self._allocated = len(JOURNAL_MAGIC)
            return
        scan = scan_journal(data, self.path)
        self._entries = [(record.command, record.index, record.term) for record in scan.records]
        self._ends = [record.end for record in scan.records]
        offset = scan.end
        self._allocated = len(data)
        if scan.torn:
            committed = int(self._meta.get("commit_index", 0))
            if scan.records and scan.records[-1].index < committed:
                # The stored commit index is written only after the journal is fdatasynced up
                # to it: a committed record that fails its CRC is damage, never a torn append.
                raise RaftJournalError(f"{self.path}: damaged record at offset {offset} (Raft index "
                                       f"{scan.records[-1].index + 1}), below the stored commit index {committed}: "
                                       "corruption, not a torn tail; remove this member's data directory to resync it "
                                       "from its peers")
            log.warning(
                "raft.journal_torn_tail_truncated", path=self.path, offset=offset, dropped_bytes=len(data) - offset
            )
            os.ftruncate(self._fd, offset)
            os.fsync(self._fd)
            self._allocated = offset
        self._size = offset
        os.lseek(self._fd, offset, os.SEEK_SET)
        self.durable_index = self._entries[-1][1] if self._entries else 0

    # -- pysyncobj's Journal interface

    def add(self, command: bytes, idx: int, term: int) -> None:
        command = bytes(command)
        record = encode_record(idx, term, command)
        if self._reserve and self._size + len(record) > self._allocated:
            self._reserve_space(self._size + len(record) + JOURNAL_RESERVE_BYTES)
        self._write_all(record)
        self._entries.append((command, idx, term))
        self._size += len(record)
        self._ends.append(self._size)
        self._dirty = True

    def clear(self) -> None:
        self._truncate(0)

    def deleteEntriesFrom(self, entryFrom: int) -> None:
        if entryFrom < len(self._entries):
            self._truncate(entryFrom)

    def deleteEntriesTo(self, entryTo: int) -> None:
        """Drop the first `entryTo` entries (compaction): rewrite the rest to a new file and
        rename it into place, so a crash leaves either the old journal or the new one."""
        if entryTo <= 0:
            return
        keep = self._entries[entryTo:]
        tmp = self.path + ".tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        ends: list[int] = []
        try:
            chunks = [JOURNAL_MAGIC]
            size = len(JOURNAL_MAGIC)
            for command, idx, term in keep:
                chunks.append(encode_record(idx, term, command))
                size += len(chunks[-1])
                ends.append(size)
            _write_fd(fd, b"".join(chunks))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)
        fsync_directory(self.path)
        os.close(self._fd)
        self._fd = os.open(self.path, os.O_RDWR)
        os.lseek(self._fd, size, os.SEEK_SET)
        self._entries, self._ends, self._size, self._allocated = keep, ends, size, size
        self.fsyncs += 1
        self._dirty = False
        self.durable_index = keep[-1][1] if keep else 0

    def __getitem__(self, item: Any) -> Any:
        return self._entries[item]

    def __len__(self) -> int:
        return len(self._entries)

    def _destroy(self) -> None:
        if self._fd < 0:
            return
        try:
            self.sync()
            if self._meta_dirty:
                self._store_commit_index()
        except OSError as exc:  # stopping anyway: what is not durable was never acknowledged
            log.warning("raft.journal_sync_failed_at_stop", path=self.path, error=str(exc))
        os.close(self._fd)
        self._fd = -1

    def flush(self) -> None:
        self.sync()

    def setRaftCommitIndex(self, raftCommitIndex: int) -> None:
        if self._meta.get("commit_index") != raftCommitIndex:
            self._meta["commit_index"] = raftCommitIndex
            self._meta_dirty = True

    def getRaftCommitIndex(self) -> int:
        return int(self._meta.get("commit_index", 1))

    def setCurrentTerm(self, term: int, votedForNodeId: Any) -> None:
        # Raft: term and vote are durable before any message that reflects them is sent.
        self._meta["term"] = term
        self._meta["voted_for"] = None if votedForNodeId is None else str(votedForNodeId)
        self._store_meta()

    def getCurrentTerm(self) -> int:
        return int(self._meta.get("term", 0))

    def getVotedForNodeId(self) -> Any:
        return self._meta.get("voted_for")

    def onOneSecondTimer(self) -> None:
        # pysyncobj calls this inside its tick; the fsyncs happen in store_meta_when_due, which
        # HardenedSyncObj calls earlier in the tick (see HardenedSyncObj._tick).
        self._meta_due = True

    def store_meta_when_due(self) -> None:
        if self._meta_due and self._meta_dirty:
            self._store_commit_index()
        self._meta_due = False

    def _store_commit_index(self) -> None:
        """The periodic store of the commit index. It is a hint (a restart replays the log to
        it; a lower one only weakens the corruption check at open), so a full disk must not
        stop the tick it runs in: the node would stop committing, answering nobody. Term and
        vote are another matter: `setCurrentTerm` lets the error through, so no vote leaves
        that is not durable."""
        self.sync()  # a failed fsync is not forgiven here: the kernel may have dropped the pages
        try:
            self._write_meta()
        except OSError as exc:
            self._meta_dirty = True
            with contextlib.suppress(OSError):
                os.unlink(self._meta_path + ".tmp")
            now = time.monotonic()
            if now - self._meta_warned >= META_WARN_INTERVAL_S:
                self._meta_warned = now
                log.warning("raft.meta_store_failed", path=self._meta_path, error=str(exc))

    # -- ours

    def sync(self) -> None:
        """Make every entry added so far durable: one fdatasync for all of them."""
        if self._dirty and self._fd >= 0:
            started = time.monotonic()
            fdatasync(self._fd)
            log_if_slow_fsync(started, self.path)
            self.fsyncs += 1
            self._dirty = False
        self.durable_index = self._entries[-1][1] if self._entries else 0

    @property
    def size_bytes(self) -> int:
        return self._size

    def align_to_snapshot(self, last: Entry, previous: Entry) -> bool:
        """Fix for the dump/journal load race: if the node died after writing its snapshot but
        before trimming the journal, the journal still holds the snapshot's two entries further
        in. pysyncobj would then clear the journal, losing every entry past the snapshot; we trim
        the prefix instead, so pysyncobj finds the journal starting at the snapshot."""
        if len(self._entries) < 2 or (self._entries[0] == previous and self._entries[1] == last):
            return False
        position = previous[1] - self._entries[0][1]
        if not 0 < position < len(self._entries) - 1:
            return False
        if self._entries[position] != previous or self._entries[position + 1] != last:
            return False
        log.info("raft.journal_trimmed_after_snapshot", path=self.path, snapshot_index=previous[1])
        self.deleteEntriesTo(position)
        return True

    def _reserve_space(self, end: int) -> None:
        try:
            os.posix_fallocate(self._fd, self._allocated, end - self._allocated)
        except OSError as exc:
            if exc.errno in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                self._reserve = False  # appends grow the file, as they would without this
            return  # anything else (ENOSPC): the write that follows reports it
        self._allocated = end

    def _truncate(self, keep: int) -> None:
        new_size = self._ends[keep - 1] if keep > 0 else len(JOURNAL_MAGIC)
        # Cut the reserved space too: records dropped here must not be found past the end later.
        os.ftruncate(self._fd, new_size)
        self._allocated = new_size
        os.lseek(self._fd, new_size, os.SEEK_SET)
        del self._entries[keep:]
        del self._ends[keep:]
        self._size = new_size
        self._dirty = True
        last = self._entries[-1][1] if self._entries else 0
        self.durable_index = min(self.durable_index, last)

    def _store_meta(self) -> None:
        self.sync()  # a stored commit index never covers entries that are not durable
        self._write_meta()

    def _write_meta(self) -> None:
        tmp = self._meta_path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(encode_meta(self._meta))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self._meta_path)
        fsync_directory(self._meta_path)
        self.fsyncs += 2
        self._meta_dirty = False

    def _write_all(self, data: bytes) -> None:
        _write_fd(self._fd, data)


def _write_fd(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]

