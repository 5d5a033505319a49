"""The on-disk and replicated formats can be read without pysyncobj or asyncio (the Spark audit
and the corruption nemesis import only these), and what the real writers wrote decodes: the
Raft journal's records, metadata and snapshots (docs/raft-journal-format.md), the raftmq
entries inside them, and the body journal's payloads."""

from __future__ import annotations

import json
import os
import pickle
import random
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgpack
import pytest
from crc32c import crc32c

from raftmq.core.commands import Command, Send
from raftmq.errors import RaftJournalError
from raftmq.protocol.header_block import block_of
from raftmq.replication.command_codec import encode_rows
from raftmq.replication.entry_codec import decode_entry, encode_entry
from raftmq.replication.pysyncobj.raft_journal_format import (
    COMMAND_NO_OP,
    JOURNAL_MAGIC,
    Entry,
    decode_meta,
    encode_record,
    entry_of,
    iter_entries,
    scan_journal,
)
from raftmq.replication.pysyncobj.snapshot_file import decode_snapshot
from raftmq.storage.payload import KIND_MESSAGE, decode_payload, encode_payload
from tests.helpers.raft_members import Members, commit, leader_of, wait_until

PURE = [
    "raftmq.replication.pysyncobj.raft_journal_format",
    "raftmq.replication.pysyncobj.snapshot_file",
    "raftmq.replication.entry_codec",
    "raftmq.replication.command_codec",
    "raftmq.storage.records",
    "raftmq.storage.payload",
    "raftmq.core.snapshot",
]


@pytest.mark.integration  # starts a fresh interpreter
def test_pure_decoders_import_neither_pysyncobj_nor_asyncio() -> None:
    probe = "import sys, threading, json\n" + "".join(f"import {m}\n" for m in PURE) + (
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('pysyncobj', 'asyncio', 'structlog')"
        " or m.startswith('raftmq.server') or m == 'raftmq.replication.pysyncobj.patches')\n"
        "print(json.dumps([bad, threading.active_count()]))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    bad, threads = json.loads(out.stdout)
    assert bad == [], bad
    assert threads == 1  # nothing started at import


def test_entries_round_trip() -> None:
    sends = [Send("s1", "/queue/a", block_of((("k", "v"),)), b"x" * 1000, 1), Send("s1", "/queue/b", "", b"", 2)]
    assert decode_entry(encode_entry([encode_rows(sends[:1]), encode_rows(sends[1:])])) == sends


def test_payload_round_trip() -> None:
    send = Send("s1", "/queue/a", block_of((("k", "v"),)), b"body", 1)
    assert KIND_MESSAGE == 1
    assert decode_payload(encode_payload(send)) == ("/queue/a", [("k", "v")], b"body")
    # docs/journal-format.md: the headers are the block, a string; journals written before
    # blocks hold [[name, value], ...], still read.
    assert msgpack.unpackb(encode_payload(send)) == ["/queue/a", "k:v\n", b"body"]
    earlier = msgpack.packb(["/queue/a", [["k", "a:b"]], b"body"])
    assert decode_payload(earlier) == ("/queue/a", [("k", "a:b")], b"body")


@pytest.mark.parametrize("protocol", [2, 5])  # stock pysyncobj pickles with 2, the `pickle` fix with 5
def test_the_entry_of_a_command_is_taken_out_without_running_anything(protocol: int) -> None:
    entry = encode_entry([encode_rows([Send("s", "/queue/q", "", b"m", 1)])])
    assert entry_of(b"\x00" + pickle.dumps((0, (entry,)), protocol)) == entry
    assert entry_of(bytes([COMMAND_NO_OP])) is None

    class Planted:
        def __reduce__(self) -> tuple[Any, ...]:
            return (os.remove, ("/nonexistent",))

    for bad in (b"", b"\x00not a pickle", b"\x00" + pickle.dumps((0, (Planted(),))),
                b"\x00" + pickle.dumps((0, ("str",)))):
        with pytest.raises(RaftJournalError):
            entry_of(bad)


def make_entries(count: int, first: int = 1) -> list[Entry]:
    return [(encode_entry([encode_rows([Send("s", "/queue/q", "", f"m{i}".encode(), i)])]), i, 1 + i // 3)
            for i in range(first, first + count)]


@pytest.mark.integration  # the Raft journal writes real files with fdatasync
def test_the_pure_decoder_reads_what_the_raft_journal_wrote(tmp_path: Path) -> None:
    from raftmq.replication.pysyncobj.raft_journal import RaftJournal
    from raftmq.replication.pysyncobj.snapshot_file import write_snapshot_file

    path = str(tmp_path / "raft.journal")
    journal = RaftJournal(path)
    entries = make_entries(7)
    for command, index, term in entries:
        journal.add(command, index, term)
    journal.setCurrentTerm(3, "127.0.0.1:7001")
    journal.setRaftCommitIndex(6)
    journal._destroy()

    data = Path(path).read_bytes()
    assert data.startswith(JOURNAL_MAGIC)
    assert list(iter_entries(data, path)) == entries
    bodies = [decode_entry(command)[0].body for command, _i, _t in iter_entries(data)]
    assert bodies == [f"m{i}".encode() for i in range(1, 8)]
    meta = decode_meta(Path(path + ".meta").read_bytes())
    assert meta == {"term": 3, "voted_for": "127.0.0.1:7001", "commit_index": 6}

    # A torn tail (a crash mid-append) is where the readable part ends.
    end = scan_journal(data).end  # past the last record: reserved zeros follow
    assert not scan_journal(data).torn and len(data) > end
    scan = scan_journal(data[:end] + entries[0][0][:5])
    assert scan.torn and scan.end == end and len(scan.records) == 7

    snapshot = str(tmp_path / "raft.snapshot")
    write_snapshot_file(snapshot, entries[-1], entries[-2], ["a:1", "b:2"], b"state")
    assert decode_snapshot(Path(snapshot).read_bytes()) == (entries[-1], entries[-2], ["a:1", "b:2"], b"state")


def read_journal_as_the_doc_says(data: bytes) -> tuple[list[tuple[bytes, int, int]], int, bool]:
    """An independent reader written from docs/raft-journal-format.md: (records, end, torn)."""
    if not data:
        return [], 0, False
    assert data[:22] == b"RAFTMQ-RAFT-JOURNAL-1\n"
    offset, records = 22, []
    while offset + 24 <= len(data):
        length, crc, index, term = struct.unpack("<IIQQ", data[offset:offset + 24])
        if offset + 24 + length > len(data) or crc32c(data[offset + 8:offset + 24 + length]) != crc:
            break
        if records:
            assert index == records[-1][1] + 1
        records.append((data[offset + 24:offset + 24 + length], index, term))
        offset += 24 + length
    return records, offset, data[offset:].strip(b"\0") != b""


def test_the_docs_crc32c_check_value() -> None:
    assert crc32c(b"123456789") == 0xE3069283


@pytest.mark.integration  # the Raft journal writes real files with fdatasync
def test_the_decoder_agrees_with_the_journal_through_truncations_compactions_and_reopens(tmp_path: Path) -> None:
    from raftmq.replication.pysyncobj.raft_journal import RaftJournal

    rng = random.Random(9)
    path = str(tmp_path / "raft.journal")
    journal = RaftJournal(path)
    term = 1
    for step in range(300):
        roll = rng.random()
        if roll < 0.75 or len(journal) < 3:
            last = journal[-1][1] if len(journal) else 0
            journal.add(rng.randbytes(rng.randrange(0, 300)), last + 1, term)
        elif roll < 0.85:  # a new leader's entries replace a conflicting suffix
            term += 1
            journal.deleteEntriesFrom(rng.randrange(1, len(journal)))
        elif roll < 0.92:  # compaction behind a snapshot
            journal.deleteEntriesTo(rng.randrange(1, len(journal)))
        elif roll < 0.97:
            journal.sync()
        else:  # a restart
            journal._destroy()
            journal = RaftJournal(path)
        data = Path(path).read_bytes()
        scan = scan_journal(data, path)
        assert [(r.command, r.index, r.term) for r in scan.records] == list(journal[:]), f"step {step}"
        assert scan.end == journal.size_bytes and not scan.torn
        assert read_journal_as_the_doc_says(data) == (list(journal[:]), scan.end, False)
    journal._destroy()


@pytest.mark.integration  # the Raft journal writes real files with fdatasync
def test_a_tail_torn_anywhere_decodes_as_the_reopened_journal_reads_it(tmp_path: Path) -> None:
    from raftmq.replication.pysyncobj.raft_journal import RaftJournal

    path = str(tmp_path / "raft.journal")
    journal = RaftJournal(path)
    for command, index, term in make_entries(4):
        journal.add(command, index, term)
    journal._destroy()
    whole = Path(path).read_bytes()
    records = scan_journal(whole).records
    start, end = records[-2].end, records[-1].end  # the last record's bytes
    for cut in sorted({start + 1, start + 12, start + 24, (start + end) // 2, end - 1}):
        for garbage in (b"", b"\xff" * 3):  # cut short, or cut short with stray bytes after it
            torn = whole[:cut] + garbage
            scan = scan_journal(torn)
            assert scan.torn and scan.end == start and len(scan.records) == 3
            scanned = [(r.command, r.index, r.term) for r in scan.records]
            assert read_journal_as_the_doc_says(torn) == (scanned, start, True)
            Path(path).write_bytes(torn)
            reopened = RaftJournal(path)
            assert list(reopened[:]) == [(r.command, r.index, r.term) for r in scan.records]
            assert reopened.size_bytes == scan.end == os.path.getsize(path)
            reopened._destroy()


@pytest.mark.integration  # a member with its tick thread and a TCP port on 127.0.0.1
def test_a_members_journal_and_snapshot_decode_to_the_commands_it_committed(group: Members) -> None:
    (member,) = group(1)
    leader_of([member])
    sends = [Send("s", f"/queue/q{i % 3}", block_of((("n", str(i)),)), os.urandom(i * 10), i) for i in range(12)]

    def committed_commands(data: bytes) -> list[Command]:
        carried = [entry_of(command) for command, _index, _term in iter_entries(data)]
        return [command for entry in carried if entry is not None for command in decode_entry(entry)]

    for send in sends[:6]:
        commit(member, encode_entry([encode_rows([send])]))
    assert member.obj is not None
    journal_path = member.obj.durable_journal.path
    member.obj.durable_journal.sync()
    data = Path(journal_path).read_bytes()
    assert committed_commands(data) == sends[:6]
    assert any(command[0] == COMMAND_NO_OP for command, _i, _t in iter_entries(data))  # the new leader's no-op

    member.obj.forceLogCompaction()
    assert wait_until(lambda: os.path.exists(member.obj.snapshot_path) and len(member.obj.durable_journal) <= 3, 5)  # type: ignore[union-attr]
    for send in sends[6:]:
        commit(member, encode_entry([encode_rows([send])]))
    term = member.obj.raftCurrentTerm
    snapshot_path = member.obj.snapshot_path
    member.stop()

    raw = Path(snapshot_path).read_bytes()
    last, previous, cluster, state = decode_snapshot(raw)
    crc, length = struct.unpack("<IQ", raw[23:35])  # as the doc says
    assert raw[:23] == b"RAFTMQ-RAFT-SNAPSHOT-1\n" and crc == crc32c(raw[35:]) and length == len(raw) - 35
    assert cluster == [member.address] and previous[1] == last[1] - 1
    assert [c for entry in msgpack.unpackb(state) for c in decode_entry(entry)] == sends[:6]  # what it had applied
    tail = committed_commands(Path(journal_path).read_bytes())
    assert tail[-6:] == sends[6:]
    assert decode_meta(Path(journal_path + ".meta").read_bytes())["term"] == term


def test_damage_in_the_middle_of_the_journal_is_corruption_not_a_torn_tail() -> None:
    # A crash can only tear the end; a whole record after a damaged one means fsynced entries
    # were damaged (bit rot). Reading it as a torn tail would cut them off silently.
    data = JOURNAL_MAGIC + b"".join(encode_record(index, term, command) for command, index, term in make_entries(12))
    records = scan_journal(data).records
    for victim in (0, 5, 10):  # the first record, one in the middle, the one before the last
        start = records[victim - 1].end if victim else len(JOURNAL_MAGIC)
        # In the record's length, index, term and command.
        for offset in (start + 1, start + 9, start + 17, start + 30, records[victim].end - 1):
            flipped = bytearray(data)
            flipped[offset] ^= 0x10
            with pytest.raises(RaftJournalError, match="corruption, not a torn tail"):
                scan_journal(bytes(flipped), "j")
    # Damage to the last record looks like a torn tail here; RaftJournal tells them apart with
    # the stored commit index (tests/replication/test_pysyncobj_raft_journal.py).
    last = bytearray(data)
    last[records[-1].end - 1] ^= 0x10
    scan = scan_journal(bytes(last))
    assert scan.torn and len(scan.records) == 11


def test_a_damaged_record_before_a_header_cut_short_reads_as_a_torn_tail() -> None:
    # Regression (found by the chaos corrupt nemesis, a truncation): the search for a whole
    # record after a damaged one read a header that ran past the end of the file and raised
    # struct.error, so the member could not start at all.
    data = JOURNAL_MAGIC + b"".join(encode_record(index, term, command) for command, index, term in make_entries(6))
    records = scan_journal(data).records
    damaged = bytearray(data[:records[3].end + 20])  # record 5's header cut after its index and term fields
    damaged[records[2].end + 30] ^= 0x01  # record 4 damaged
    scan = scan_journal(bytes(damaged))
    assert scan.torn and [r.index for r in scan.records] == [1, 2, 3]
