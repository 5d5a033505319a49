"""Message bodies of a group member: kept in the body journal, referred to by the core.

In a group, `Replica.apply` hands every committed Raft entry to `BodyStore.begin`, which keeps
each Send's bytes as a record to write, while the core holds a body reference `(raft_index,
ordinal, size)` instead of the bytes (it mints them itself: `Broker.begin_entry`): the position
of the record among the records of that Raft index, which is the same on every replica, so
snapshots (which hold references, not bodies) mean the same thing on every member.
After the core has applied the entry, `BodyStore.end` writes one journal batch for it (one
record per Send, in order, then the pages its commands sealed). Where these two steps sit in
the order of a committed batch is the commit log's contract
(raftmq.replication.commit_log). Deliveries resolve a reference with `locate` + `read`
through a small LRU of bodies.

Durability: records are not fsynced per entry. Until a snapshot covers an entry, the Raft
journal (fsynced before anything is acknowledged) holds the entry with its bodies, and replay
after a restart writes whatever the body journal lost; entries at or below the journal's last
index are skipped on replay, so nothing is written twice. `sync()` runs before every snapshot,
which is what lets pysyncobj drop entries.

Segments are deleted once no durable snapshot can need them: see `collect`.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence
from typing import Any

import structlog

from raftmq.core.commands import Command, Send
from raftmq.core.paging import MemoryPages
from raftmq.core.snapshot import journal_indexes
from raftmq.errors import BodyUnavailable, JournalCorrupt
from raftmq.storage.journal import Journal
from raftmq.storage.payload import KIND_MESSAGE, KIND_PAGE, decode_body, encode_payload
from raftmq.storage.records import Record, new_records, new_rows

log = structlog.get_logger("raftmq.server.bodies")

SNAPSHOT_ATTEMPTS_KEPT = 16
BodyKey = tuple[int, int]  # (raft index, ordinal)
# The core holds a BodyRef (raft index, ordinal, body size); snapshots written before references
# carried sizes hold 2 items.
# Records of one Raft index as another member sends them: [(term, kind, payload), ...]
IndexRecords = tuple[int, list[tuple[int, int, bytes]]]

class _OpenEntry:
    """An entry between `begin` and `end`: its records to write and the next ordinal."""

    __slots__ = ("cache", "fresh", "index", "ordinal", "pages", "records", "term")

    def __init__(self, index: int, term: int, ordinal: int, records: list[Any], fresh: bool,
                 cache: bool) -> None:
        self.index = index
        self.term = term
        self.ordinal = ordinal
        self.records = records
        self.fresh = fresh  # not in the journal yet (else a replay: nothing to write)
        self.cache = cache  # the leader's: its batch may be read back soon (else a follower's)
        self.pages: dict[BodyKey, bytes] = {}  # sealed here, not written yet


class BodyStore:
    def __init__(self, journal: Journal, cache_bytes: int = 16 * 2**20) -> None:
        self.journal = journal
        self.cache_bytes = cache_bytes
        # Bodies kept for deliveries, within `cache_bytes` together (`_evict`): the leader's latest
        # entries, whole, by raft index (one insertion per entry; the oldest entry goes first), and
        # bodies read back from the journal, one by one (least recently used first).
        self._recent: OrderedDict[int, list[bytes]] = OrderedDict()
        self._recent_used = 0
        self._cache: OrderedDict[BodyKey, bytes] = OrderedDict()
        self._cache_used = 0
        # (snapshot index, lowest raft index it references or index + 1), newest last
        self._snapshots: list[tuple[int, int]] = []
        self.missing: set[int] = set()  # raft indexes referenced but absent here
        self.records_written = 0
        self.entries_skipped = 0  # replayed entries already in the journal
        self.segments_deleted = 0
        self._entry: _OpenEntry | None = None  # the entry being applied (begin .. end)
        self._memory = MemoryPages()  # pages from a snapshot made without a journal

    # -- apply path (event loop) -----------------------------------------------------------

    def begin(self, index: int, term: int, commands: Sequence[Command], *, cache: bool = True) -> None:
        """Open the entry at `index`: each Send's bytes become one of its records, kept in memory
        (the core holds each body as the reference (index, ordinal, size) it mints itself:
        `Broker.begin_entry`). Until `end`, pages the core seals while applying it are numbered
        after the bodies (`put`), and `end` writes them all as the index's one journal batch,
        unless this Raft index is already in the journal (a replay: nothing is written twice).
        `cache`: keep the bodies for deliveries, and the journal its batch (the leader; a
        follower delivers nothing, and reads a batch back only after taking over, from disk)."""
        last = self.journal.last_index
        fresh = last is None or index > last
        sends: list[Send] = [command for command in commands if isinstance(command, Send)]
        # Records as the journal stores them: it writes them as they are, converting none (a
        # follower's as plain tuples: the journal keeps nothing of its batches for reads).
        payloads = [encode_payload(send) for send in sends] if fresh else []
        make = new_records if cache else new_rows
        records = make(index, term, KIND_MESSAGE, payloads)
        if sends and not fresh:
            self.entries_skipped += 1
        self._entry = _OpenEntry(index, term, len(sends), records, fresh, cache)
        if cache and sends:  # the leader delivers most bodies right away
            self._remember(index, sends)

    def end(self) -> None:
        """Write the open entry's records (its bodies, then its pages) as one batch."""
        entry, self._entry = self._entry, None
        if entry is not None and entry.records:
            self.journal.append_batch(entry.records, cache=entry.cache, refs=False)  # read back by raft index
            self.records_written += len(entry.records)

    # -- pages (raftmq.core.paging.PageStore) ------------------------------------------------

    def put(self, blob: bytes) -> Any:
        """A page sealed while an entry applies becomes a record of that entry, after its bodies
        (every replica seals the same pages at the same command, so `(index, ordinal)` names the
        same page on every member and a snapshot can refer to it). Outside an entry (nothing
        seals one there today) it stays in memory."""
        entry = self._entry
        if entry is None:
            return self._memory.put(blob)
        ref = (entry.index, entry.ordinal)
        entry.ordinal += 1
        if entry.fresh:
            entry.records.append(Record(entry.index, entry.term, KIND_PAGE, bytes(blob)))
            entry.pages[ref] = blob
        elif not self._holds_page(ref):
            # A replay over a batch written without this page (by a version before paging):
            # keep it in memory rather than name a record that is not there.
            return self._memory.put(blob)
        return ref

    def _holds_page(self, ref: BodyKey) -> bool:
        try:
            return self.journal.read_record(self.journal.locate(*ref)).kind == KIND_PAGE
        except (KeyError, JournalCorrupt):
            return False

    def get(self, handle: Any) -> bytes:
        if isinstance(handle, int):
            return self._memory.get(handle)
        key = (int(handle[0]), int(handle[1]))
        entry = self._entry
        if entry is not None and key in entry.pages:
            return entry.pages[key]
        try:
            record = self.journal.read_record(self.journal.locate(*key))
        except KeyError:
            where = f"raft index {key[0]} ordinal {key[1]} in {self.journal.directory}"
            raise BodyUnavailable(f"no page at {where}") from None
        except JournalCorrupt as exc:
            raise BodyUnavailable(f"page at raft index {key[0]} ordinal {key[1]}: {exc}") from None
        if record.kind != KIND_PAGE:
            raise BodyUnavailable(f"raft index {key[0]} ordinal {key[1]} holds no page")
        return record.payload

    def drop(self, handle: Any) -> None:
        """A page taken back: its record goes with its segment (`collect`)."""
        if isinstance(handle, int):
            self._memory.drop(handle)

    def dump(self, handle: Any) -> Any:
        return self._memory.dump(handle) if isinstance(handle, int) else [int(handle[0]), int(handle[1])]

    def load(self, dumped: Any) -> Any:
        if isinstance(dumped, (bytes, bytearray)):
            return self._memory.load(dumped)
        return (int(dumped[0]), int(dumped[1]))

    def body(self, ref: Any, *, cached: bool = True) -> bytes:
        """The bytes behind a reference; raises BodyUnavailable, never returns wrong bytes.
        `cached=False` reads (and checks) the journal even when the body is in the LRU."""
        if cached:
            recent = self._recent.get(ref[0])
            ordinal: int = ref[1]
            if recent is not None and ordinal < len(recent):
                return recent[ordinal]
        key = (int(ref[0]), int(ref[1]))
        hit = self._cache.get(key) if cached else None
        if hit is not None:
            self._cache.move_to_end(key)
            return hit
        entry = self._entry
        if entry is not None and entry.fresh and key[0] == entry.index and key[1] < len(entry.records):
            return decode_body(entry.records[key[1]][3])  # the entry applying now: not written yet
        try:
            body = decode_body(self.journal.read(self.journal.locate(*key)))
        except KeyError:
            where = f"raft index {key[0]} ordinal {key[1]} in {self.journal.directory}"
            raise BodyUnavailable(f"no body at {where}") from None
        except (JournalCorrupt, ValueError) as exc:
            raise BodyUnavailable(f"body at raft index {key[0]} ordinal {key[1]}: {exc}") from None
        self._cache_put(key, body)
        return body

    def _remember(self, index: int, sends: list[Send]) -> None:
        """Keep an entry's bodies (the leader's), unless one is no bytes or the entry is too big."""
        bodies: list[bytes] = []
        size = 0
        for send in sends:
            body = send.body
            if not isinstance(body, bytes):
                return
            bodies.append(body)
            size += len(body)
        if size > self.cache_bytes // 4:
            return  # one big entry must not flush everything else
        self._recent[index] = bodies
        self._recent_used += size
        self._evict()

    def _cache_put(self, key: BodyKey, body: bytes) -> None:
        if len(body) > self.cache_bytes // 4:
            return  # one big body must not flush everything else
        previous = self._cache.pop(key, None)
        if previous is not None:
            self._cache_used -= len(previous)
        self._cache[key] = body
        self._cache_used += len(body)
        self._evict()

    def _evict(self) -> None:
        """Within `cache_bytes`: bodies read back keep up to a quarter of it, the leader's latest
        entries the rest."""
        while self._cache_used > self.cache_bytes // 4:
            _, dropped = self._cache.popitem(last=False)
            self._cache_used -= len(dropped)
        while self._recent_used + self._cache_used > self.cache_bytes and self._recent:
            _, entry = self._recent.popitem(last=False)
            self._recent_used -= sum(len(body) for body in entry)

    def sync(self) -> None:
        self.journal.sync()

    # -- snapshots ---------------------------------------------------------------------------

    def snapshot_taken(self, index: int, dump: dict[str, Any]) -> int:
        """Record that a snapshot of the state at `index` (with `dump` inside) is being written;
        returns the lowest raft index it references. Call after `sync()`."""
        lowest = min(journal_indexes(dump), default=index + 1)
        self._snapshots.append((index, lowest))
        del self._snapshots[:-SNAPSHOT_ATTEMPTS_KEPT]
        return lowest

    def collect(self, durable_floor: int) -> list[int]:
        """Delete segments no durable snapshot needs. `durable_floor` is at or below the index of
        the last snapshot known durable. Of the snapshots noted, the newest at or below it is
        durable (or an older one was, and then every later state references nothing older:
        a message alive at a later snapshot and created before an earlier one was alive at
        the earlier one). Recovering from it needs the bodies it references and every record
        past its index (replay skips indexes the journal already has), so segments ending
        below both may go."""
        durable = [(index, lowest) for index, lowest in self._snapshots if index <= durable_floor]
        if not durable:
            return []
        index, lowest = durable[-1]
        deleted = self.journal.delete_segments_before(min(lowest, index + 1))
        if deleted:
            self.segments_deleted += len(deleted)
            self._snapshots = [s for s in self._snapshots if s[0] >= index]
            log.info("bodies.segments_deleted", segments=len(deleted), below_index=min(lowest, index + 1))
        return deleted

    def restored(self, index: int, dump: dict[str, Any]) -> set[int]:
        """A snapshot at `index` replaced the state: note it and return the raft indexes it
        references that this journal does not hold (to fetch from a peer)."""
        indexes = journal_indexes(dump)
        self._snapshots.append((index, min(indexes, default=index + 1)))
        self.missing = {i for i in indexes if not self.has_index(i)}
        return set(self.missing)

    def has_index(self, index: int) -> bool:
        try:
            self.journal.locate(index, 0)
        except KeyError:
            return False
        return True

    # -- exchange with peers ---------------------------------------------------------------

    def records_at(self, indexes: Iterable[int], max_bytes: int) -> tuple[int, list[IndexRecords]]:
        """All records of each index this journal holds, ascending, up to about `max_bytes`
        of payload. Returns (the highest index looked at, what was found): a peer asks again
        for the indexes above the first."""
        found: list[IndexRecords] = []
        size = 0
        wanted = sorted(set(indexes))
        for index in wanted:
            records: list[tuple[int, int, bytes]] = []
            ordinal = 0
            while True:
                try:
                    record = self.journal.read_record(self.journal.locate(index, ordinal))
                except KeyError:
                    break
                records.append((record.raft_term, record.kind, record.payload))
                size += len(record.payload)
                ordinal += 1
            if records:
                found.append((index, records))
            if size >= max_bytes:
                return index, found
        return (wanted[-1] if wanted else 0), found

    def add_fetched(self, fetched: Iterable[IndexRecords]) -> int:
        """Append records fetched from a peer (ascending indexes past the journal's last),
        then sync. Returns how many indexes were added; indexes that would go back are left
        missing (the journal only grows)."""
        added = 0
        for index, records in sorted(fetched, key=lambda item: item[0]):
            last = self.journal.last_index
            if index not in self.missing or (last is not None and index <= last):
                continue
            self.journal.append_batch([(index, term, kind, payload) for term, kind, payload in records], refs=False)
            self.missing.discard(index)
            added += 1
        self.journal.sync()
        return added

    def stats(self) -> dict[str, Any]:
        segments = self.journal.segments()
        return {
            "segments": len(segments),
            "bytes": sum(s.size for s in segments),
            "first_index": self.journal.first_index,
            "last_index": self.journal.last_index,
            "records_written": self.records_written,
            "entries_skipped": self.entries_skipped,
            "segments_deleted": self.segments_deleted,
            "missing_indexes": len(self.missing),
            "cached_bodies": len(self._cache) + sum(len(bodies) for bodies in self._recent.values()),
        }

    def close(self) -> None:
        self.journal.close()
