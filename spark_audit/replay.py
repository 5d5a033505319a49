"""What one member stored, as facts (spark_audit.facts): its Raft snapshot and journal, read
with the pure decoders (docs/raft-journal-format.md) and replayed through the broker core.

The core is deterministic and its only input is the committed log, so replaying a member's
snapshot and the entries after it rebuilds exactly what that member believed: which SENDs it
stored and under which message id, which it dropped as duplicates, what was acknowledged,
dead-lettered, expired or forwarded, and what still waited at the end. The checks compare that
with what clients saw (the chaos history) and with the other members.

The replay hands the core each entry's SENDs with the body references a member's core holds
(raftmq.core.broker.Broker.begin_entry: their sizes decide byte limits), and the core tells
it of every message entering or leaving a store (raftmq.core.store_observer). Entries past the
group's commit index are listed but not applied (they may never have been committed). A file
that fails its checks is a `file` row naming the damage; its bytes are never read as data, and a
member whose snapshot or journal is damaged is not replayed (its `applied` row says why).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from typing import Any

import msgpack

from raftmq.core.broker import Broker
from raftmq.core.commands import Commit, Send, Tick
from raftmq.core.config import CoreConfig
from raftmq.core.dispatch import ORIGINAL_DESTINATION
from raftmq.core.message import Message
from raftmq.core.message_headers import read_headers
from raftmq.core.model import Store
from raftmq.core.store_observer import DEAD_LETTER, EXPIRY, PUBLISHED, RETAINED
from raftmq.errors import RaftmqError
from raftmq.protocol.header_block import pairs_of
from raftmq.replication.entry_codec import decode_entry
from raftmq.replication.pysyncobj.raft_journal_format import (
    COMMAND_NO_OP,
    COMMAND_REGULAR,
    JOURNAL_MAGIC,
    RECORD,
    decode_meta,
    entry_of,
    scan_journal,
)
from raftmq.replication.pysyncobj.snapshot_file import decode_snapshot
from raftmq.routing.route import (
    DESTINATION_HEADER,
    FALLBACK_HEADER,
    FIRST_HEADER,
    FORWARD_ID_HEADER,
    ROUTE_HEADER,
    TO_HEADER,
)
from spark_audit.facts import SUBSCRIPTION_STORE, fact_row
from spark_audit.member_pages import MemberPages

JOURNAL = os.path.join("raft", "raft.journal")
META = os.path.join("raft", "raft.journal.meta")
SNAPSHOT = os.path.join("raft", "raft.snapshot")
VALUE_MAX_BYTES = 256  # longer bodies are known by their digest only
Row = tuple[Any, ...]


def digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=8).hexdigest()


def text_value(body: bytes) -> str | None:
    if len(body) > VALUE_MAX_BYTES:
        return None
    try:
        return body.decode()
    except UnicodeDecodeError:
        return None


def entry_kind(command: bytes) -> str:
    if command[:1] == bytes([COMMAND_REGULAR]):
        return "regular"
    if command[:1] == bytes([COMMAND_NO_OP]):
        return "noop"
    return "other"


def read_commit_index(directory: str) -> int:
    """The commit index a member stored (0 when it stored none or the file is unreadable: the
    member's `file` row reports the damage)."""
    path = os.path.join(directory, META)
    try:
        with open(path, "rb") as f:
            return int(decode_meta(f.read(), path).get("commit_index", 0))
    except (OSError, RaftmqError, ValueError, TypeError):
        return 0


def last_journal_index(directory: str) -> int:
    """The index of a member's last Raft journal record, found by walking the record headers
    (no checksums: the driver picks each group's reference member with it, cheaply); 0 for
    none. The walk stops where indexes stop following each other (reserved zeros, a torn tail)."""
    path = os.path.join(directory, JOURNAL)
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return 0
    try:
        size = os.fstat(fd).st_size
        if os.pread(fd, len(JOURNAL_MAGIC), 0) != JOURNAL_MAGIC:
            return 0
        offset, last = len(JOURNAL_MAGIC), 0
        while offset + RECORD.size <= size:
            length, _crc, index, _term = RECORD.unpack(os.pread(fd, RECORD.size, offset))
            if index == 0 or (last and index != last + 1) or offset + RECORD.size + length > size:
                break
            last, offset = index, offset + RECORD.size + length
        return last
    finally:
        os.close(fd)


def member_facts(run: str, group: str, node: str, directory: str, core: CoreConfig, commit_bound: int,
                 reference: bool = True) -> Iterator[Row]:
    """Every fact of one member. `commit_bound`: the group's commit index (the highest any
    member stored); entries past it are listed, not applied. `reference`: this member speaks for
    its group (spark_audit.sources picks it), so it is replayed; the others' files are checked
    and their entries listed, which is all the checks need of them."""
    yield from Replay(run, group, node, core).read(directory, commit_bound, reference)


class Replay:
    """One member's files read into facts: its snapshot and journal replayed through the core,
    whose store observer (`entered`, `left`) and end state (`contents`) say where every message
    went. The tests that prove a check can fail plant their bug in a subclass."""

    def __init__(self, run: str, group: str, node: str, core: CoreConfig) -> None:
        self.run, self.group, self.node = run, group, node
        self.core = core
        self.rows: list[Row] = []
        self.positions: dict[str, int] = {}
        self.bodies: dict[tuple[int, int], tuple[str | None, str]] = {}  # body ref -> (value, digest)
        self.seen: set[str] = set()  # message ids that entered a store here
        self.index = 0
        self.origin = "client"
        self.route = ""
        self.forward_id: str | None = None  # of the SEND applying, when it arrived from another group
        self.broker = Broker(core)

    def fact(self, fact: str, **fields: Any) -> None:
        position = self.positions.get(fact, 0)
        self.positions[fact] = position + 1
        self.rows.append(fact_row(self.run, self.group, self.node, fact, position=position, **fields))

    def flush(self) -> Iterator[Row]:
        rows, self.rows = self.rows, []
        yield from rows

    # -- files ---------------------------------------------------------------------------------

    def read(self, directory: str, commit_bound: int, reference: bool) -> Iterator[Row]:
        meta_path = os.path.join(directory, META)
        if os.path.exists(meta_path):
            try:
                with open(meta_path, "rb") as f:
                    decode_meta(f.read(), meta_path)
                self.fact("file", kind="meta", detail=META)
            except RaftmqError as exc:
                self.fact("file", kind="meta", detail=str(exc), committed=False)
        start, replayable = self.restore(os.path.join(directory, SNAPSHOT), reference)
        self.watch()
        yield from self.flush()
        journal_path = os.path.join(directory, JOURNAL)
        records = []
        if os.path.exists(journal_path):
            with open(journal_path, "rb") as f:
                data = f.read()
            try:
                scan = scan_journal(data, journal_path)
            except RaftmqError as exc:
                self.fact("file", kind="journal", detail=f"corrupt: {exc}", committed=False)
                replayable = False
            else:
                records = scan.records
                outcome = (f"torn tail at offset {scan.end} ({len(data) - scan.end} bytes not read)" if scan.torn
                           else JOURNAL)
                self.fact("file", kind="journal", detail=outcome, committed=not scan.torn)
        last = start
        for record in records:
            committed = record.index <= commit_bound
            self.fact("entry", index=record.index, term=record.term, kind=entry_kind(record.command),
                      digest=digest(record.command), committed=committed)
            if reference and replayable and start < record.index and committed:
                if not self.apply_record(record.index, record.term, record.command):
                    replayable = False
                else:
                    last = record.index
            if len(self.rows) >= 4096:
                yield from self.flush()
        if not reference:
            self.fact("applied", index=records[-1].index if records else start, kind="replica", committed=False)
        else:
            if replayable:
                self.end_state()
            self.fact("applied", index=last, kind="reference", committed=replayable and last >= commit_bound,
                      detail=None if replayable else "not replayed: a damaged file")
        yield from self.flush()

    def restore(self, path: str, reference: bool) -> tuple[int, bool]:
        """Check and load the snapshot when there is one, listing what it holds (every member:
        what each believed was waiting at its snapshot); the reference member starts its replay
        from it. Returns (the index it ends at, whether replay can go on)."""
        if not os.path.exists(path):
            return 0, True
        try:
            with open(path, "rb") as f:
                last, _previous, _cluster, state_bytes = decode_snapshot(f.read(), path)
            state = msgpack.unpackb(state_bytes, raw=False)
            self.broker = Broker.restore(state["broker"], self.core,
                                         MemberPages(os.path.dirname(os.path.dirname(path))))
        except (RaftmqError, ValueError, KeyError, TypeError) as exc:
            self.fact("file", kind="snapshot", detail=f"corrupt: {exc}", committed=False)
            self.broker = Broker(self.core)
            return 0, False
        command, index, term = last
        self.fact("file", kind="snapshot", detail=f"{SNAPSHOT} at index {index}", committed=True)
        self.fact("entry", index=index, term=term, kind=entry_kind(command), digest=digest(command),
                  committed=True, detail="snapshot")
        self.index = index
        self.origin = "snapshot"
        for store, message, in_flight in self.contents():
            self.fact("snapshot", index=index, store=_store_name(store), kind="in-flight" if in_flight else "ready",
                      count=message.delivery_count, **self.described(message))
            if reference:
                self.entered(store, message)
        return index, True

    # -- replay ----------------------------------------------------------------------------------

    def apply_record(self, index: int, term: int, raw: bytes) -> bool:
        self.index = index
        try:
            entry = entry_of(raw)
            commands = decode_entry(entry) if entry is not None else []
        except RaftmqError as exc:
            self.fact("file", kind="journal", detail=f"corrupt: entry {index} unreadable: {exc}", committed=False)
            return False
        ordinal = 0
        self.broker.begin_entry(index)  # the core holds body references, as a member's does
        for command in commands:
            if type(command) is Send:
                body = command.body if isinstance(command.body, bytes) else b""
                self.bodies[(index, ordinal)] = (text_value(body), digest(body))
                ordinal += 1
                pairs = pairs_of(command.headers)
                names = {name for name, _ in pairs}
                # A SEND forwarded first, stored nowhere before; a forward first that fell back
                # (its target and forward id pinned, no route yet) is the client's SEND here.
                if FIRST_HEADER in names:
                    self.origin = "first"
                elif (ROUTE_HEADER in names or TO_HEADER in names) and FALLBACK_HEADER not in names:
                    self.origin = "forward"
                else:
                    self.origin = "client"
                self.route = next((value for name, value in pairs if name == ROUTE_HEADER), "")
                self.forward_id = next((value for name, value in pairs if name == FORWARD_ID_HEADER), None)
            elif type(command) is Commit:
                self.origin, self.route, self.forward_id = "client", "", None
            elif type(command) is Tick:
                self.origin, self.route, self.forward_id = "moved", "", None
            self.broker.apply(command)
        return True

    def watch(self) -> None:
        """Be told by this broker's dispatcher of every message that enters or leaves a store
        (raftmq.core.store_observer): `entered` and `left` below."""
        self.broker.dispatch.observer = self

    def described(self, message: Message) -> dict[str, Any]:
        headers = message.headers
        destination = message.destination
        for name, text in pairs_of(headers):
            if name in (DESTINATION_HEADER, ORIGINAL_DESTINATION):
                destination = text
        ref = message.body
        value: str | None = None
        body_digest: str | None = None
        body_ref: str | None = None
        if isinstance(ref, (tuple, list)) and len(ref) in (2, 3):  # (raft index, ordinal[, size])
            key = (int(ref[0]), int(ref[1]))
            body_ref = f"{key[0]}:{key[1]}"
            known = self.bodies.get(key)
            if known is not None:
                value, body_digest = known
        return {"message_id": message.message_id, "destination": destination, "dedup_id": read_headers(headers)[4],
                "value": value, "digest": body_digest, "body_ref": body_ref}

    def entered(self, store: Store, message: Message, origin: str = PUBLISHED) -> None:
        """A message stored (StoreObserver), or held by the snapshot replay starts from. Its
        origin: a dead-letter, expiry or retained copy, or else what the command applying says (a client's
        SEND, one forwarded from another group, a move of a Tick)."""
        first = message.message_id not in self.seen
        if first:
            self.seen.add(message.message_id)
        kind = origin if origin in (DEAD_LETTER, EXPIRY, RETAINED) else self.origin
        self.fact("enter", index=self.index, store=_store_name(store), kind=kind, count=message.delivery_count,
                  route=self.route or None, forward_id=self.forward_id if kind in ("forward", "first") else None,
                  first=first, **self.described(message))

    def left(self, store: Store, message: Message, outcome: str, session: str | None) -> None:
        """A message leaving a store for good (StoreObserver)."""
        self.fact("leave", index=self.index, message_id=message.message_id, store=_store_name(store), kind=outcome,
                  session=session)

    def contents(self) -> Iterator[tuple[Store, Message, bool]]:
        """(store, message, in flight) for every message the state holds, queues first."""
        state = self.broker.state
        for store in state.stores():
            for message in store.ready.values():
                yield store, message, False
            for _due, message in store.delayed.values():  # NACKed, waiting out a redelivery delay
                yield store, message, False
            if store.tail is not None:  # paged out behind the head
                for message in store.tail.messages():
                    yield store, message, False
        for sub in state.subscriptions():
            for delivery in sub.in_flight.values():
                yield sub.store, delivery.message, True

    def end_state(self) -> None:
        for store, message, in_flight in self.contents():
            self.fact("waiting", index=self.index, store=_store_name(store), count=message.delivery_count,
                      kind="in-flight" if in_flight else "ready", **self.described(message))


def _store_name(store: Store) -> str:
    # A topic subscription's store carries the topic's name; several may exist at once.
    return store.destination if store.shared else f"{store.destination}{SUBSCRIPTION_STORE}"
