"""pysyncobj 0.3.17 made safe for raftmq, in our code (design.md §3 lists the holes).

Nothing here copies pysyncobj: we pass our own journal through its `journalFile` hook (via a
wrapped `createJournal`), a `TCPTransport` subclass through `transportClass`, our own snapshot
format through its `serializer`/`deserializer` hooks, override `_onTick`,
`_checkCommandsToApply` and the private `__applyLogEntries` in a `SyncObj` subclass (each
calls the original), and swap three module-level names (the pickle protocol, the zlib used on
the wire, the rename used for snapshot files). Importing this module with any pysyncobj but
0.3.17 raises ImportError.

| fix (name in `enabled`) | hole it closes |
|---|---|
| `fsync`             | journal fsynced (one fdatasync per replication message / tick) before an append-entries response or a vote leaves a node and before the leader counts its own entries |
| `durable_rename`    | snapshot files fsynced, renamed, directory fsynced |
| `dump_always`       | a journal is never configured without a snapshot file (state lost after compaction + restart) |
| `dump_journal_race` | a journal not yet trimmed after its snapshot is aligned to it, instead of being discarded |
| `entry_size`        | append-entries batches of 4 MiB, so no entry takes the broken chunking path (>64 KiB) |
| `pickle`            | pickle protocol 5 (bytes are not inflated) and stored zlib on the wire (lz4 already compressed) |
| `never_raise`       | the replicated apply and every callback never raise in the tick thread |
| `fallback`          | a leader without quorum steps down after one minimum election timeout, not 30 s |
| `bind`              | the Raft port is bound to its configured address; off loopback a password is required |
| `no_spurious_truncation` | a follower no longer deletes entries it already holds when a late or repeated append-entries arrives |
| `solo_commit`       | a group of one commits what it appended at once, not one tick period later |
| `short_candidate_round` | a candidate whose votes do not come in (a split vote) retries after 0.1-0.25 s, not after another whole election timeout |
| `piggyback_commit`  | a new commit index rides on the next append-entries (or goes out within one tick), not in an extra message to every follower per commit |
| `pre_vote`          | a member asks whether it could win before it raises its term, and nobody votes while it hears from a working leader (raftmq.replication.leadership): a healed partition does not depose a healthy leader |
| `wire`              | the Raft port speaks our wire (raftmq.replication.wire): peers prove the group secret before anything is decoded, frames are AES-GCM and msgpack, never pickle; reads bounded per frame and per poll; handshakes time out |
| `lease`             | a leader writes deliveries and receipts only while a majority answered it within the lease (raftmq.replication.leadership): a paused leader that resumes writes nothing stale |

`enabled` exists so a regression test can turn one fix off and show that it then fails; the
product never changes it.

Not closed here: one shared send budget per heartbeat can still starve a slow follower (§3.7);
the Raft log between compactions stays in RAM (bounded by `compact_after_bytes`); a torn or
corrupt journal record is cut off at open with everything after it (the leader re-sends it).
"""

from __future__ import annotations

import collections
import errno
import functools
import ipaddress
import os
import pickle
import random
import struct
import threading
import time
import zlib
from collections.abc import Callable, Sequence
from typing import Any

import crc32c
import msgpack
import pysyncobj.pickle as pso_pickle
import pysyncobj.serializer as pso_serializer
import pysyncobj.syncobj as pso_syncobj
import pysyncobj.tcp_connection as pso_tcp
import structlog
from pysyncobj import _RAFT_STATE, FAIL_REASON, SyncObj, SyncObjConf, replicated
from pysyncobj.journal import Journal
from pysyncobj.transport import TCPTransport
from pysyncobj.version import VERSION

from raftmq.errors import ConfigError, RaftmqError
from raftmq.replication.leadership import Leadership, LogTip
from raftmq.replication.wire import MAX_UNAUTHENTICATED, RaftConnection, RaftServer, frame_max_for, group_secret
from raftmq.storage.journal import log_if_slow_fsync

PINNED_VERSION = "0.3.17"
if VERSION != PINNED_VERSION:  # every patch below relies on 0.3.17's internals
    raise ImportError(f"raftmq needs pysyncobj=={PINNED_VERSION} exactly (its hardening patches are written against it); found {VERSION}")

log = structlog.get_logger("raftmq.replication.pysyncobj_fixes")

FIX_NAMES = (
    "fsync", "durable_rename", "dump_always", "dump_journal_race", "entry_size", "pickle", "never_raise", "fallback", "bind",
    "no_spurious_truncation", "solo_commit", "piggyback_commit", "short_candidate_round", "pre_vote", "lease", "wire",
)
enabled: dict[str, bool] = {name: True for name in FIX_NAMES}

STOCK_APPEND_ENTRIES_BATCH_BYTES = 2**16
# Also the largest entry: one SEND of a 16 MiB body (the STOMP body limit) must fit in one.
APPEND_ENTRIES_BATCH_BYTES = 24 * 2**20
STOCK_LEADER_FALLBACK_TIMEOUT = 30.0
# How long a candidate waits for the votes of one election round before it tries again. Votes
# answer within milliseconds; waiting a whole election timeout (0.3-0.6 s) after a split vote
# is what made a failover take over a second.
CANDIDATE_ROUND_MIN = 0.10
CANDIDATE_ROUND_MAX = 0.25
WIRE_PICKLE_PROTOCOL = 5
# A deadline this close counts as passed: pysyncobj reads the clock again a moment later in the
# same tick, and a deadline passing in between would let it stand without a pre-vote.
PREVOTE_LOOKAHEAD = 0.02


class JournalError(RaftmqError):
    """The Raft journal or snapshot on disk is unreadable; the node refuses to start."""


# ---------------------------------------------------------------------------------------------
# Module-level swaps (pickle protocol, wire zlib, snapshot rename, journal factory)


def fsync_directory(path: str) -> None:
    fd = os.open(os.path.dirname(os.path.abspath(path)) or ".", os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def durable_replace(src: str, dst: str) -> None:
    """Rename that survives power loss: the file's bytes, then the directory entry."""
    fd = os.open(src, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(src, dst)
    fsync_directory(dst)


class _StoredZlib:
    """Stands in for `zlib` in pysyncobj's connection code: our entries are lz4 already, and
    level 3 on top costs ~10 MB/s per follower for nothing. Level 0 stays readable by zlib."""

    @staticmethod
    def compress(data: bytes, level: int = -1) -> bytes:
        return zlib.compress(data, 0)

    decompress = staticmethod(zlib.decompress)


_ORIGINALS: dict[str, Any] = {
    "pickle": pso_pickle.__dict__["__protocol"],
    "zlib": pso_tcp.zlib,
    "durable_rename": pso_serializer.atomicReplace,
    "createJournal": pso_syncobj.createJournal,
}
_patch_lock = threading.Lock()


def _create_journal(journal_file: Any) -> Journal:
    # conf.journalFile carries our already-open journal; anything else keeps stock behaviour.
    if isinstance(journal_file, Journal):
        return journal_file
    return _ORIGINALS["createJournal"](journal_file)


def apply_module_fixes() -> None:
    """Make pysyncobj's module-level names match `enabled` (idempotent, process-wide)."""
    with _patch_lock:
        pso_syncobj.createJournal = _create_journal
        pso_pickle.__dict__["__protocol"] = WIRE_PICKLE_PROTOCOL if enabled["pickle"] else _ORIGINALS["pickle"]
        pso_tcp.zlib = _StoredZlib if enabled["pickle"] else _ORIGINALS["zlib"]
        pso_serializer.atomicReplace = durable_replace if enabled["durable_rename"] else _ORIGINALS["durable_rename"]


assert pickle.HIGHEST_PROTOCOL >= WIRE_PICKLE_PROTOCOL


# ---------------------------------------------------------------------------------------------
# The journal


_JOURNAL_MAGIC = b"RAFTMQ-RAFT-JOURNAL-1\n"
# Space reserved ahead of the records (zeros at the end of the file, read as "no more records").
# An fdatasync after an append that grows the file also commits the new size through the
# filesystem's journal; inside reserved space it flushes data and extent state only
# (ext4 here: ~0.17 -> ~0.11 ms, with three members syncing at once ~0.25 -> ~0.18 ms).
JOURNAL_RESERVE_BYTES = 4 * 2**20
# payload length, crc32c(index, term, payload), index, term
_RECORD = struct.Struct("<IIQQ")
_INDEX_TERM = struct.Struct("<QQ")
Entry = tuple[bytes, int, int]  # (command, index, term), pysyncobj's entry shape


def _record_crc(index: int, term: int, command: bytes) -> int:
    return crc32c.crc32c(command, crc32c.crc32c(_INDEX_TERM.pack(index, term)))


class DurableJournal(Journal):
    """pysyncobj's Raft log on disk: our record format, CRC32C per record, made durable with
    one fdatasync per `sync()` however many entries were added since the last one.

    Records are appended with `os.write` as entries arrive; `sync()` is what the transport and
    the tick call before anything that promises durability leaves the node. currentTerm and
    votedFor are stored (fsynced, renamed, directory fsynced) before `setCurrentTerm` returns.
    A torn tail (a crash mid-write: never acknowledged) is cut off at open; anything else that
    does not parse raises `JournalError`.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._meta_path = path + ".meta"
        self._entries: list[Entry] = []
        self._ends: list[int] = []  # file offset just past each record
        self._dirty = False
        self._meta_dirty = False
        self._meta_due = False  # pysyncobj's one-second timer fired; stored at the next tick
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
        try:
            meta = msgpack.unpackb(raw, raw=False)
        except Exception as exc:
            raise JournalError(f"{self._meta_path}: unreadable Raft metadata ({exc}); restore it or remove the node's data directory to resync it from its peers") from None
        if not isinstance(meta, dict):
            raise JournalError(f"{self._meta_path}: unreadable Raft metadata")
        return meta

    def _load_records(self) -> None:
        size = os.fstat(self._fd).st_size
        data = os.pread(self._fd, size, 0) if size else b""
        if not data:
            os.write(self._fd, _JOURNAL_MAGIC)
            os.fsync(self._fd)
            fsync_directory(self.path)
            self._size = self._allocated = len(_JOURNAL_MAGIC)
            return
        if not data.startswith(_JOURNAL_MAGIC):
            raise JournalError(f"{self.path}: not a raftmq Raft journal")
        offset = len(_JOURNAL_MAGIC)
        view = memoryview(data)
        while offset + _RECORD.size <= len(data):
            length, crc, index, term = _RECORD.unpack_from(data, offset)
            end = offset + _RECORD.size + length
            if end > len(data):
                break
            command = bytes(view[offset + _RECORD.size:end])
            if _record_crc(index, term, command) != crc:
                break
            if self._entries and index != self._entries[-1][1] + 1:
                raise JournalError(f"{self.path}: Raft index {index} follows {self._entries[-1][1]} at offset {offset}")
            self._entries.append((command, index, term))
            self._ends.append(end)
            offset = end
        self._allocated = len(data)
        if data.count(0, offset) != len(data) - offset:  # not just reserved space
            log.warning("raft.journal_torn_tail_truncated", path=self.path, offset=offset, dropped_bytes=len(data) - offset)
            os.ftruncate(self._fd, offset)
            os.fsync(self._fd)
            self._allocated = offset
        self._size = offset
        os.lseek(self._fd, offset, os.SEEK_SET)
        self.durable_index = self._entries[-1][1] if self._entries else 0

    # -- pysyncobj's Journal interface

    def add(self, command: bytes, idx: int, term: int) -> None:
        command = bytes(command)
        record = _RECORD.pack(len(command), _record_crc(idx, term, command), idx, term) + command
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
            chunks = [_JOURNAL_MAGIC]
            size = len(_JOURNAL_MAGIC)
            for command, idx, term in keep:
                chunks.append(_RECORD.pack(len(command), _record_crc(idx, term, command), idx, term))
                chunks.append(command)
                size += _RECORD.size + len(command)
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
        self.sync()
        if self._meta_dirty:
            self._store_meta()
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
            self._store_meta()
        self._meta_due = False

    # -- ours

    def sync(self) -> None:
        """Make every entry added so far durable: one fdatasync for all of them."""
        if self._dirty and self._fd >= 0:
            started = time.monotonic()
            os.fdatasync(self._fd)
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
        new_size = self._ends[keep - 1] if keep > 0 else len(_JOURNAL_MAGIC)
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
        tmp = self._meta_path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(msgpack.packb(self._meta, use_bin_type=True))
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


# ---------------------------------------------------------------------------------------------
# Snapshot file (pysyncobj's serializer hooks)

_SNAPSHOT_MAGIC = b"RAFTMQ-RAFT-SNAPSHOT-1\n"
_SNAPSHOT_HEADER = struct.Struct("<IQ")  # crc32c(body), len(body)


def write_snapshot_file(path: str, last: Entry, previous: Entry, cluster: Sequence[str], state: bytes) -> None:
    body = msgpack.packb([list(last), list(previous), list(cluster), state], use_bin_type=True)
    with open(path, "wb") as f:
        f.write(_SNAPSHOT_MAGIC + _SNAPSHOT_HEADER.pack(crc32c.crc32c(body), len(body)) + body)
        f.flush()
        os.fsync(f.fileno())


def read_snapshot_file(path: str) -> tuple[Entry, Entry, list[str], bytes]:
    with open(path, "rb") as f:
        data = f.read()
    head = len(_SNAPSHOT_MAGIC) + _SNAPSHOT_HEADER.size
    if not data.startswith(_SNAPSHOT_MAGIC) or len(data) < head:
        raise JournalError(f"{path}: not a raftmq Raft snapshot")
    crc, length = _SNAPSHOT_HEADER.unpack_from(data, len(_SNAPSHOT_MAGIC))
    body = data[head:head + length]
    if len(body) != length or crc32c.crc32c(body) != crc:
        raise JournalError(f"{path}: Raft snapshot fails its checksum")
    last, previous, cluster, state = msgpack.unpackb(body, raw=False)
    return _entry(last), _entry(previous), [str(n) for n in cluster], bytes(state)


def _entry(row: list[Any]) -> Entry:
    command, idx, term = row
    return (bytes(command), int(idx), int(term))


# ---------------------------------------------------------------------------------------------
# Addresses


def check_raft_address(address: str, password: str | None) -> tuple[str, int]:
    """The Raft port unpickles what it receives: off loopback only peers holding the password
    may talk to it. Returns (host, port)."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise ConfigError(f"Raft address {address!r}: expected host:port")
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback and not password and enabled["bind"]:
        raise ConfigError(f"Raft address {address}: not a loopback address, so a password is required (the Raft port runs pickle on what it receives)")
    return host, int(port)


# ---------------------------------------------------------------------------------------------
# Transport: durable before it speaks

_DURABLE_BEFORE_SENDING = frozenset({"next_node_idx", "response_vote", "request_vote"})
_ELECTION_MESSAGES = frozenset({"pre_vote", "pre_vote_response", "higher_term"})  # ours, never passed to pysyncobj


class DurableTransport(TCPTransport):
    """Syncs the journal before an append-entries response or a vote leaves this node. A
    follower answers once per append-entries message, so that is one fdatasync per message,
    covering every entry it carried. Its connections are ours (raftmq.replication.wire):
    authenticated by the group secret, encrypted, msgpack, bounded; pysyncobj's pickling
    TcpConnection and TcpServer are never built."""

    _refusals_logged_at = 0.0
    _refusals_unlogged = 0

    def _createServer(self) -> None:
        if not enabled["wire"]:
            super()._createServer()
            return
        address = self._syncObj.conf.bindAddress or self._selfNode.address
        host, port = address.rsplit(":", 1)
        self._server = RaftServer(self._syncObj._poller, host, int(port), self._onNewIncomingConnection, self._accepted)

    def _connection(self, sock: Any = None, bind_host: str | None = None) -> RaftConnection:
        conf = self._syncObj.conf
        return RaftConnection(self._syncObj._poller, self._syncObj.wire_secret, timeout=conf.connectionTimeout, sock=sock,
                              bind_host=bind_host, send_buffer=conf.sendBufferSize, recv_buffer=conf.recvBufferSize,
                              frame_max=frame_max_for(conf.appendEntriesBatchSizeBytes), on_refused=self._refused)

    def _accepted(self, sock: Any) -> RaftConnection:
        return self._connection(sock=sock)

    def addNode(self, node: Any) -> None:
        if not enabled["wire"]:
            super().addNode(node)
            return
        self._nodes.add(node)
        self._nodeAddrToNode[node.address] = node
        if self._shouldConnect(node):
            conn = self._connection(bind_host=self._selfNode.address.rsplit(":", 1)[0].strip("[]"))
            conn.setOnConnectedCallback(functools.partial(self._onOutgoingConnected, conn))
            conn.setOnMessageReceivedCallback(functools.partial(self._onMessageReceived, node))
            conn.setOnDisconnectedCallback(functools.partial(self._onDisconnected, conn))
            self._connections[node] = conn

    def _onNewIncomingConnection(self, conn: Any) -> None:
        if enabled["wire"] and len(self._unknownConnections) >= MAX_UNAUTHENTICATED:
            self._refused(getattr(conn, "peer", "?"), "too many connections still in their handshake")
            conn.disconnect()
            return
        super()._onNewIncomingConnection(conn)

    def _onTick(self) -> None:
        super()._onTick()
        if enabled["wire"]:
            now = time.monotonic()
            for conn in [*self._unknownConnections, *self._connections.values()]:
                conn.check_deadlines(now)

    def _refused(self, peer: str, reason: str) -> None:
        # A stranger may hammer the port: one line per second at most, with what was skipped.
        now = time.monotonic()
        if now - self._refusals_logged_at < 1.0:
            self._refusals_unlogged += 1
            return
        log.warning("raft.peer_refused", peer=peer, reason=reason, more_refused=self._refusals_unlogged)
        self._refusals_logged_at, self._refusals_unlogged = now, 0

    def send(self, node: Any, message: Any) -> bool:
        kind = message.get("type") if isinstance(message, dict) else None
        if enabled["fsync"] and kind in _DURABLE_BEFORE_SENDING:
            self._syncObj.durable_journal.sync()
        if kind is not None:
            message = self._syncObj.outgoing(kind, message)
        return super().send(node, message)

    def _onMessageReceived(self, node: Any, message: Any) -> None:
        if not isinstance(message, dict):
            return  # every Raft message is a dict; anything else is not for pysyncobj
        sync: HardenedSyncObj = self._syncObj
        kind = message.get("type")
        if kind in _ELECTION_MESSAGES:
            sync.on_election_message(node, message)
            return
        if kind == "request_vote" and sync.ignores_vote_request(message):
            return
        if kind == "next_node_idx":
            sync.on_answer(node, message)
        elif kind == "append_entries":
            sync.on_append_entries(node, message)
            if enabled["no_spurious_truncation"]:
                message = trim_known_entries(sync.durable_journal, message)
                if message is None:
                    return
        try:
            super()._onMessageReceived(node, message)
        finally:
            sync.answering_mark = None


def trim_known_entries(log: DurableJournal, message: dict[str, Any]) -> dict[str, Any] | None:
    """A follower in pysyncobj deletes every entry after `prevLogIdx` before appending, even
    entries that match: a late or repeated append-entries (the leader re-sends after a stale
    `reset` reply) truncates entries this node already acknowledged (logged as "truncating
    already-applied log entries"). Raft deletes only on conflict. So we drop from the message the
    entries this log already holds with the same term (Log Matching: they are identical), moving
    `prevLogIdx` up; a message that then carries nothing new while our log extends past it is
    dropped (the leader has already moved its next index past it; later messages follow)."""
    entries = message.get("entries")
    if not entries or "prevLogIdx" not in message or "transmission" in message or len(log) == 0:
        return message
    first, last = log[0][1], log[-1][1]
    prev = message["prevLogIdx"]
    if prev < first or prev > last or log[prev - first][2] != message["prevLogTerm"]:
        return message  # pysyncobj's own reset path
    known = 0
    for _command, idx, term in entries:
        if idx > last or log[idx - first][2] != term:
            break
        known += 1
    if known == 0:
        return message
    _command, new_prev, new_prev_term = entries[known - 1]
    if known == len(entries) and new_prev < last:
        return None
    trimmed = dict(message)
    trimmed["prevLogIdx"], trimmed["prevLogTerm"], trimmed["entries"] = new_prev, new_prev_term, entries[known:]
    return trimmed


# ---------------------------------------------------------------------------------------------
# SyncObj


OnApply = Callable[[int, int, bytes], Any]  # (raft index, term, entry) -> result for callbacks
Snapshotter = Callable[[], bytes]
Restorer = Callable[[bytes, int], None]  # (state, raft index it reflects)


def never_raise(fn: Callable[..., Any], what: str, on_error: Callable[[BaseException], None] | None = None) -> Callable[..., Any]:
    """Wrap a function that pysyncobj calls in its tick thread: an exception there makes it
    apply an entry twice (callbacks) or retry it forever (apply). We log and go on."""

    def guarded(*args: Any) -> Any:
        if not enabled["never_raise"]:
            return fn(*args)
        try:
            return fn(*args)
        except Exception as exc:
            log.exception("raft.callback_failed", callback=what)
            if on_error is not None:
                try:
                    on_error(exc)
                except Exception:
                    log.exception("raft.error_handler_failed", callback=what)
            return None

    return guarded


class HardenedSyncObj(SyncObj):
    """One Raft member with every fix of this module applied and one replicated method, which
    takes one `bytes` entry. `on_apply(index, term, entry)` runs for every committed entry, on
    every member, in log order, in the tick thread; what it returns reaches the submitter's
    callback.

    Timings default to the tuned values of design.md §3 (5 ms tick, 20 ms heartbeats,
    0.3-0.6 s election timeouts). Shorter timeouts fail over faster but elect spuriously when a
    member stalls (GC, fsync, a busy CPU) for longer than the minimum timeout.
    """

    def __init__(
        self,
        self_address: str,
        peers: Sequence[str],
        *,
        data_dir: str,
        on_apply: OnApply,
        snapshot: Snapshotter | None = None,
        restore: Restorer | None = None,
        on_state_changed: Callable[[int, int], None] | None = None,
        password: str | None = None,
        tick_period: float = 0.005,
        append_entries_period: float = 0.02,
        election_timeout_min: float = 0.3,
        election_timeout_max: float = 0.6,
        leader_fallback_timeout: float | None = None,  # default: election_timeout_min
        connection_timeout: float = 1.5,
        connection_retry: float = 0.25,
        append_entries_batch_bytes: int = APPEND_ENTRIES_BATCH_BYTES,
        compact_after_bytes: int = 64 * 2**20,
        journal: DurableJournal | None = None,
        secret: str | None = None,
    ) -> None:
        apply_module_fixes()
        check_raft_address(self_address, password)
        for peer in peers:
            check_raft_address(peer, password)
        os.makedirs(data_dir, exist_ok=True)
        # Members keep their files in <group dir>/<id>/; the group's secret sits beside them.
        self.wire_secret = secret or group_secret(password, os.path.dirname(os.path.abspath(data_dir)))
        self.leadership = Leadership(len({self_address, *peers}), election_timeout_min)
        self.answering_mark: float | None = None  # `lm` of the append-entries being answered
        self._handover_election = False  # this tick's election was asked for by the leader
        self._on_state_changed = on_state_changed
        self.apply_errors = 0
        self.last_apply_error: str | None = None
        self._on_apply = on_apply
        self._snapshot = snapshot
        self._restore = restore
        self._compact_after_bytes = compact_after_bytes if snapshot is not None else None
        self._compaction_retry_at = 0.0
        self._tick_tasks: collections.deque[Callable[[], None]] = collections.deque()
        self.durable_journal = journal if journal is not None else DurableJournal(os.path.join(data_dir, "raft.journal"))
        self.snapshot_path = os.path.join(data_dir, "raft.snapshot")
        journal_path: Any = self.durable_journal
        dump_path: str | None = self.snapshot_path
        if not enabled["dump_always"]:
            dump_path = None  # stock: journal without a dump file (regression test only)
        if dump_path is not None and os.path.exists(dump_path):
            # Read (and checksum) it now: pysyncobj would log a bad snapshot and start empty.
            last, previous, _cluster, _state = read_snapshot_file(dump_path)
            if enabled["dump_journal_race"]:
                self.durable_journal.align_to_snapshot(last, previous)
        fallback = election_timeout_min if leader_fallback_timeout is None else leader_fallback_timeout
        conf = SyncObjConf(
            password=None if enabled["wire"] else password,  # our wire encrypts; pysyncobj's Fernet is not used
            autoTickPeriod=tick_period,
            appendEntriesPeriod=append_entries_period,
            raftMinTimeout=election_timeout_min,
            raftMaxTimeout=election_timeout_max,
            leaderFallbackTimeout=fallback if enabled["fallback"] else STOCK_LEADER_FALLBACK_TIMEOUT,
            connectionTimeout=max(connection_timeout, election_timeout_max),
            connectionRetryTime=connection_retry,
            # Our group commit coalesces; pysyncobj sends each entry at once (the low-latency path).
            appendEntriesUseBatch=False,
            appendEntriesBatchSizeBytes=append_entries_batch_bytes if enabled["entry_size"] else STOCK_APPEND_ENTRIES_BATCH_BYTES,
            sendBufferSize=2**21,
            recvBufferSize=2**21,
            bindAddress=self_address if enabled["bind"] else None,
            journalFile=journal_path,
            fullDumpFile=dump_path,
            serializer=self._write_snapshot if dump_path else None,
            deserializer=self._read_snapshot if dump_path else None,
            # Compaction is ours, by journal bytes (see _onTick), not by entry count or time.
            logCompactionMinEntries=2**62,
            logCompactionMinTime=10**9,
            logCompactionBatchSize=2**18,
            commandsWaitLeader=False,
            onStateChanged=never_raise(self._state_changed, "onStateChanged"),
            dynamicMembershipChange=False,
            maxBindRetries=5,
            bindRetryTime=0.2,
        )
        self.entry_limit_bytes = conf.appendEntriesBatchSizeBytes - 4096
        self._commit_notice_delay = tick_period
        self._alone = all(peer == self_address for peer in peers)
        super().__init__(self_address, [p for p in peers if p != self_address], conf=conf, transportClass=DurableTransport)
        if self._alone and enabled["solo_commit"]:
            # Nobody else can lead a group of one: stand at the first tick, not an election timeout later.
            self._SyncObj__raftElectionDeadline = 0.0

    # -- the one replicated method

    @replicated
    def _apply_entry(self, entry: bytes) -> Any:
        index = self.raftLastApplied + 1  # pysyncobj counts an entry applied after this returns
        log = self.durable_journal
        term = log[index - log[0][1]][2]
        return never_raise(self._on_apply, "replicated apply", self._apply_failed)(index, term, entry)

    def submit(self, entry: bytes, callback: Callable[[Any, int], None]) -> None:
        """Queue one entry (thread-safe). `callback(result, FAIL_REASON)` runs in the tick thread."""
        if enabled["entry_size"] and len(entry) > self.entry_limit_bytes:
            raise ValueError(f"Raft entry of {len(entry)} bytes exceeds {self.entry_limit_bytes}")
        self._apply_entry(entry, callback=never_raise(callback, "commit callback"))

    def run_in_tick_thread(self, fn: Callable[[], None]) -> None:
        """Run `fn` in the tick thread at its next tick (pysyncobj is not thread-safe)."""
        self._tick_tasks.append(never_raise(fn, "tick task"))

    def _apply_failed(self, exc: BaseException) -> None:
        self.apply_errors += 1
        self.last_apply_error = f"{type(exc).__name__}: {exc}"

    # -- overridden ticks: durability before counting, compaction by bytes

    def _onTick(self, timeToWait: float = 0.0) -> None:
        try:
            self._tick(timeToWait)
        finally:
            self._handover_election = False

    def _tick(self, timeToWait: float) -> None:
        journal = self.durable_journal
        if enabled["fsync"]:
            # Entries added since the last tick (the no-op of a new leader, appends received
            # while polling) are durable before this tick's commit count includes us.
            journal.sync()
        while self._tick_tasks:
            self._tick_tasks.popleft()()
        limit = self._compact_after_bytes
        if limit is not None and journal.size_bytes > limit and time.monotonic() >= self._compaction_retry_at:
            self.forceLogCompaction()
        journal.store_meta_when_due()  # here, not in pysyncobj's tick: no fsync between the two checks below
        if not self.leadership.alone:
            # Last thing before pysyncobj looks at the election deadline in this tick, so it
            # cannot pass unseen in between and let pysyncobj stand without a pre-vote.
            self._before_election()
        super()._onTick(timeToWait)

    def _checkCommandsToApply(self) -> None:
        last = self._last_index()
        super()._checkCommandsToApply()
        if enabled["fsync"]:
            # The leader appended (and sent) new entries: its own fdatasync overlaps the followers'.
            self.durable_journal.sync()
        if enabled["solo_commit"] and self._alone and self._last_index() > last:
            # A group of one commits at the top of a tick, and nothing (no follower's answer)
            # wakes this tick's poll: what was just appended would wait a whole tick period.
            self._SyncObj__pipeNotifier.notify()

    def _SyncObj__applyLogEntries(self) -> bool:
        # With appendEntriesUseBatch off, pysyncobj answers every commit with an append-entries
        # to each follower that carries nothing but the new commit index, and each follower
        # answers it: at one client message in flight that doubles the Raft traffic every
        # member handles (on 2 shared cores the CPU it costs shows in the latency). Under traffic
        # the next entry's append-entries carries the index anyway; otherwise it goes out
        # within a tick. Followers only apply later; what a client is told does not change.
        send_now = SyncObj._SyncObj__applyLogEntries(self)
        if send_now and enabled["piggyback_commit"]:
            notice_at = pso_syncobj.monotonicTime() + self._commit_notice_delay
            if notice_at < self._SyncObj__newAppendEntriesTime:
                self._SyncObj__newAppendEntriesTime = notice_at
            return False
        return send_now

    def _SyncObj__generateRaftTimeout(self) -> float:
        # pysyncobj draws the same timeout for "no leader heard from" (follower) and "this
        # election round failed" (candidate); it asks for the latter exactly when the deadline
        # has passed and it is about to stand (again). A shorter round after a split vote
        # keeps the follower timeout's protection against needless elections.
        deadline = getattr(self, "_SyncObj__raftElectionDeadline", None)  # unset while __init__ runs
        if enabled["short_candidate_round"] and deadline is not None and deadline < pso_syncobj.monotonicTime():
            return CANDIDATE_ROUND_MIN + (CANDIDATE_ROUND_MAX - CANDIDATE_ROUND_MIN) * random.random()
        return SyncObj._SyncObj__generateRaftTimeout(self)

    def _last_index(self) -> int:
        journal = self.durable_journal
        return journal[-1][1] if len(journal) else 0

    # -- pre-vote, stickiness, lease (decisions in raftmq.replication.leadership)

    def _state_changed(self, old: int, new: int) -> None:
        if new == _RAFT_STATE.LEADER:
            self.leadership.became_leader(time.monotonic())
        elif old == _RAFT_STATE.LEADER:
            self.leadership.stepped_down()
        if self._on_state_changed is not None:
            self._on_state_changed(old, new)

    def _before_election(self) -> None:
        """pysyncobj stands for election (raising its term) in this tick when the election
        deadline has passed. Unless the leader asked for it or a pre-vote round was just won,
        run a pre-vote round instead and push the deadline past it."""
        if self._SyncObj__raftState == _RAFT_STATE.LEADER:
            return
        # pysyncobj's deadlines are on its own clock (CLOCK_MONOTONIC_RAW, which is not
        # time.monotonic: 0.25 s apart on this machine); ours (leadership) on time.monotonic.
        now = pso_syncobj.monotonicTime()
        if self._SyncObj__raftElectionDeadline >= now + PREVOTE_LOOKAHEAD or not self._SyncObj__connectedToAnyone():
            return
        if self._SyncObj__transferInProgress:
            self._handover_election = True  # our request_vote says so: voters waive stickiness
            return
        leader = self._SyncObj__raftLeader
        if leader is not None:  # once per loss, not per round
            log.info("raft.leader_lost", leader=str(leader.id), term=self._SyncObj__raftCurrentTerm,
                     asking="pre-vote" if enabled["pre_vote"] else "vote")
            self._SyncObj__raftLeader = None  # not heard from for an election timeout: unknown
        if not enabled["pre_vote"] or self.leadership.take_prevote_win():
            return
        term = self.leadership.start_prevote(self._SyncObj__raftCurrentTerm)
        self._SyncObj__raftElectionDeadline = now + self._SyncObj__generateRaftTimeout()
        tip = self._log_tip()
        for node in self._SyncObj__otherNodes:
            self._SyncObj__transport.send(node, {"type": "pre_vote", "term": term, "last_log_term": tip.term,
                                                 "last_log_index": tip.index})

    def _log_tip(self) -> LogTip:
        return LogTip(self._SyncObj__getCurrentLogTerm(), self._SyncObj__getCurrentLogIndex())

    def on_election_message(self, node: Any, message: dict[str, Any]) -> None:
        """A pre-vote request or answer (tick thread)."""
        term = message.get("term")
        if not isinstance(term, int):
            return
        if message["type"] == "higher_term":
            if enabled["pre_vote"] and term > self._SyncObj__raftCurrentTerm:
                # Raft: a reply with a higher term makes a leader a follower of that term.
                log.info("raft.stepped_down_for_higher_term", term=self._SyncObj__raftCurrentTerm, new_term=term)
                self._SyncObj__setCurrentTerm(term, None)
                self._SyncObj__raftLeader = None
                self._SyncObj__setState(_RAFT_STATE.FOLLOWER)
        elif message["type"] == "pre_vote":
            theirs = LogTip(int(message.get("last_log_term", 0)), int(message.get("last_log_index", 0)))
            granted = self.leadership.grants_prevote(time.monotonic(), self._SyncObj__raftCurrentTerm, self._log_tip(), term, theirs)
            if granted and self._SyncObj__raftState != _RAFT_STATE.LEADER:
                self.leadership.stand_aside()
                self._SyncObj__raftElectionDeadline = pso_syncobj.monotonicTime() + SyncObj._SyncObj__generateRaftTimeout(self)
            self._SyncObj__transport.send(node, {"type": "pre_vote_response", "term": term, "granted": granted})
        elif self._SyncObj__raftState != _RAFT_STATE.LEADER and self.leadership.prevote_answer(node, term, message.get("granted") is True):
            self._SyncObj__raftElectionDeadline = 0.0  # stand in the next tick

    def ignores_vote_request(self, message: dict[str, Any]) -> bool:
        return enabled["pre_vote"] and self.leadership.ignores_vote_request(time.monotonic(), message.get("handover") is True)

    def on_append_entries(self, node: Any, message: dict[str, Any]) -> None:
        term = message.get("term", -1)
        if term >= self._SyncObj__raftCurrentTerm:
            self.leadership.heard_from_leader(time.monotonic())
            self.answering_mark = message.get("lm")
        elif enabled["pre_vote"]:
            # pysyncobj drops an append-entries of an older term without a word. A member whose
            # term got ahead (it won a pre-vote round, then lost the election it stood in) would
            # then never hear of a leader, and stickiness keeps it from standing again: tell
            # the leader our term, as Raft's reply would.
            self._SyncObj__transport.send(node, {"type": "higher_term", "term": self._SyncObj__raftCurrentTerm})

    def on_answer(self, node: Any, message: dict[str, Any]) -> None:
        mark = message.get("lm")
        if isinstance(mark, float) and self._SyncObj__raftState == _RAFT_STATE.LEADER:
            self.leadership.echoed(node, mark)

    def outgoing(self, kind: str, message: dict[str, Any]) -> dict[str, Any]:
        """Stamp what the lease and stickiness need on a message about to be sent."""
        if kind == "append_entries":
            return {**message, "lm": time.monotonic()}
        if kind == "next_node_idx" and self.answering_mark is not None:
            return {**message, "lm": self.answering_mark}
        if kind == "request_vote" and self._handover_election:
            return {**message, "handover": True}
        if kind == "timeout_now":
            self.leadership.handing_over()
        return message

    def lease_holds(self, now: float) -> bool:
        """May this member, as leader, write to clients now? (any thread: one float read)"""
        return not enabled["lease"] or now < self.leadership.lease_expiry

    # -- snapshot hooks

    def _write_snapshot(self, path: str, raft_data: tuple[Any, ...]) -> None:
        # pysyncobj catches what this raises, keeps the journal and reports a failed snapshot.
        try:
            last, previous, cluster = raft_data
            state = self._snapshot() if self._snapshot is not None else b""
            write_snapshot_file(path, tuple(last), tuple(previous), sorted(str(n) for n in cluster), state)
        except Exception:
            log.exception("raft.snapshot_failed", retry_in_s=1.0)  # the journal is kept
            self._compaction_retry_at = time.monotonic() + 1.0
            raise

    def _read_snapshot(self, path: str) -> tuple[Entry, Entry, list[str]]:
        last, previous, cluster, state = read_snapshot_file(path)
        if self._restore is not None:
            never_raise(self._restore, "snapshot restore", self._apply_failed)(state, last[1])
        return last, previous, cluster

    # -- status (plain attribute reads: safe from any thread)

    @property
    def is_leader(self) -> bool:
        return bool(self._isLeader())

    @property
    def leader_address(self) -> str | None:
        leader = self._getLeader()
        return None if leader is None else str(leader.id)


SUCCESS = FAIL_REASON.SUCCESS
