"""Message bodies of a group member: kept in the body journal, referred to by the core.

In a group, `Replica.apply` hands every Send of a committed Raft entry to `BodyStore.store`,
which writes one journal batch per entry (one record per Send, in order) and gives the core
a body reference `(raft_index, ordinal)` instead of the bytes: the position of the record
among the records of that Raft index, which is the same on every replica, so snapshots (which
hold references, not bodies) mean the same thing on every member. Deliveries resolve a
reference with `locate` + `read` through a small LRU of bodies.

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
from raftmq.core.snapshot import journal_indexes
from raftmq.errors import BodyUnavailable, JournalCorrupt
from raftmq.storage.journal import Journal
from raftmq.storage.payload import KIND_MESSAGE, decode_body, encode_payload

log = structlog.get_logger("raftmq.server.bodies")

SNAPSHOT_ATTEMPTS_KEPT = 16
BodyKey = tuple[int, int]  # (raft index, ordinal); after a snapshot restore it may be a 2-list
# Records of one Raft index as another member sends them: [(term, kind, payload), ...]
IndexRecords = tuple[int, list[tuple[int, int, bytes]]]

class BodyStore:
    def __init__(self, journal: Journal, cache_bytes: int = 16 * 2**20) -> None:
        self.journal = journal
        self.cache_bytes = cache_bytes
        self._cache: OrderedDict[BodyKey, bytes] = OrderedDict()
        self._cache_used = 0
        # (snapshot index, lowest raft index it references or index + 1), newest last
        self._snapshots: list[tuple[int, int]] = []
        self.missing: set[int] = set()  # raft indexes referenced but absent here
        self.records_written = 0
        self.entries_skipped = 0  # replayed entries already in the journal
        self.segments_deleted = 0

    # -- apply path (event loop) -----------------------------------------------------------

    def store(self, index: int, term: int, commands: Sequence[Command], *, cache: bool = True) -> Sequence[Command]:
        """`commands` with each Send's body replaced by its reference; the bodies are written
        as one journal batch unless this Raft index is already in the journal (replay).
        `cache`: keep the bodies for deliveries (the leader; followers deliver nothing)."""
        positions = [i for i, command in enumerate(commands) if type(command) is Send]
        if not positions:
            return commands
        last = self.journal.last_index
        if last is None or index > last:
            records = [(index, term, KIND_MESSAGE, encode_payload(commands[i])) for i in positions]  # type: ignore[arg-type]
            self.journal.append_batch(records)
            self.records_written += len(records)
        else:
            self.entries_skipped += 1
        swapped = list(commands)
        for ordinal, i in enumerate(positions):
            send: Send = commands[i]  # type: ignore[assignment]
            key = (index, ordinal)
            if cache and isinstance(send.body, bytes):
                self._cache_put(key, send.body)  # the leader delivers most bodies right away
            swapped[i] = Send(send.session, send.destination, send.headers, key, send.now, send.transaction, send.receipt)
        return swapped

    def body(self, ref: Any, *, cached: bool = True) -> bytes:
        """The bytes behind a reference; raises BodyUnavailable, never returns wrong bytes.
        `cached=False` reads (and checks) the journal even when the body is in the LRU."""
        key = (int(ref[0]), int(ref[1]))
        hit = self._cache.get(key) if cached else None
        if hit is not None:
            self._cache.move_to_end(key)
            return hit
        try:
            body = decode_body(self.journal.read(self.journal.locate(*key)))
        except KeyError:
            raise BodyUnavailable(f"no body at raft index {key[0]} ordinal {key[1]} in {self.journal.directory}") from None
        except (JournalCorrupt, ValueError) as exc:
            raise BodyUnavailable(f"body at raft index {key[0]} ordinal {key[1]}: {exc}") from None
        self._cache_put(key, body)
        return body

    def _cache_put(self, key: BodyKey, body: bytes) -> None:
        if len(body) > self.cache_bytes // 4:
            return  # one big body must not flush everything else
        previous = self._cache.pop(key, None)
        if previous is not None:
            self._cache_used -= len(previous)
        self._cache[key] = body
        self._cache_used += len(body)
        while self._cache_used > self.cache_bytes:
            _, dropped = self._cache.popitem(last=False)
            self._cache_used -= len(dropped)

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
            self.journal.append_batch([(index, term, kind, payload) for term, kind, payload in records])
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
            "cached_bodies": len(self._cache),
        }

    def close(self) -> None:
        self.journal.close()
