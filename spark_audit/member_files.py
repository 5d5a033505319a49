"""Writing a member's files the way a raftmq node does (docs/raft-journal-format.md,
docs/journal-format.md), with the project's own encoders: for the synthetic run generator
(spark_audit.synth) and for the tests that plant an anomaly in a real run's files.

Never used on a live member: these functions rewrite files whole, without the node's locks.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable, Sequence

from raftmq.core.commands import Command, Send
from raftmq.replication.command_codec import encode_rows
from raftmq.replication.entry_codec import decode_entry, encode_entry
from raftmq.replication.pysyncobj.raft_journal_format import (
    COMMAND_NO_OP,
    COMMAND_REGULAR,
    JOURNAL_MAGIC,
    decode_meta,
    encode_meta,
    encode_record,
    entry_of,
    scan_journal,
)
from raftmq.storage.journal import Journal
from raftmq.storage.payload import KIND_MESSAGE, encode_payload

# pysyncobj names the one replicated method by a number; the audit and the node never read it.
FUNCTION_ID = 0
NOOP = bytes([COMMAND_NO_OP])
Entry = tuple[int, int, bytes]  # (index, term, command as stored)


def command_of(commands: Sequence[Command]) -> bytes:
    """A Raft journal command carrying `commands` as one raftmq entry, as pysyncobj stores it."""
    entry = encode_entry([encode_rows(commands)])
    return bytes([COMMAND_REGULAR]) + pickle.dumps((FUNCTION_ID, (entry,)), protocol=5)


def commands_of(command: bytes) -> list[Command]:
    entry = entry_of(command)
    return decode_entry(entry) if entry is not None else []


def raft_dir(member: str) -> str:
    return os.path.join(member, "raft")


def read_entries(member: str) -> list[Entry]:
    path = os.path.join(raft_dir(member), "raft.journal")
    with open(path, "rb") as f:
        return [(r.index, r.term, r.command) for r in scan_journal(f.read(), path).records]


def write_entries(member: str, entries: Sequence[Entry], commit_index: int, term: int | None = None) -> None:
    """Replace the member's Raft journal and metadata (the term defaults to the last entry's)."""
    os.makedirs(raft_dir(member), exist_ok=True)
    with open(os.path.join(raft_dir(member), "raft.journal"), "wb") as f:
        f.write(JOURNAL_MAGIC)
        for index, entry_term, command in entries:
            f.write(encode_record(index, entry_term, command))
    meta = {"term": term if term is not None else (entries[-1][1] if entries else 0), "voted_for": None,
            "commit_index": commit_index}
    with open(os.path.join(raft_dir(member), "raft.journal.meta"), "wb") as f:
        f.write(encode_meta(meta))


def write_bodies(member: str, entries: Sequence[tuple[int, int, Sequence[Command]]],
                 segment_bytes: int = 64 * 2**20) -> None:
    """Append the SENDs of each (index, term, commands) to the member's body journal, one batch
    per entry, as `BodyStore.end` does."""
    with Journal(os.path.join(member, "bodies"), segment_bytes=segment_bytes, cache_bytes=0) as journal:
        for index, term, commands in entries:
            records = [(index, term, KIND_MESSAGE, encode_payload(c)) for c in commands if type(c) is Send]
            if records:
                journal.append_batch(records)
        journal.sync()


def stored_commit_index(member: str) -> int:
    path = os.path.join(raft_dir(member), "raft.journal.meta")
    with open(path, "rb") as f:
        return int(decode_meta(f.read(), path)["commit_index"])


def append_entry(member: str, commands: Sequence[Command]) -> int:
    """Append one committed entry with `commands` (and its bodies) after the member's last;
    returns its index."""
    entries = read_entries(member)
    index, term = (entries[-1][0] + 1, entries[-1][1]) if entries else (1, 1)
    write_entries(member, [*entries, (index, term, command_of(commands))], commit_index=index)
    write_bodies(member, [(index, term, commands)])
    return index


def rewrite_entry(member: str, index: int, change: Callable[[list[Command]], list[Command]]) -> None:
    """Replace the commands of entry `index` by `change(commands)`; the body journal is left as
    it is (a change to a SEND's body shows there as a difference between members too only if
    the caller rewrites it)."""
    entries = read_entries(member)
    if all(i != index for i, _t, _c in entries):
        raise ValueError(f"{member}: no entry {index}")
    commit = stored_commit_index(member)
    rewritten = [(i, t, command_of(change(commands_of(c))) if i == index else c) for i, t, c in entries]
    write_entries(member, rewritten, commit_index=commit)
