"""The on-disk and replicated formats can be read without pysyncobj or asyncio (the Spark audit
and the corruption nemesis import only these), and what the real writers write decodes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from raftmq.core.commands import Send
from raftmq.replication.command_codec import encode_batch
from raftmq.replication.entry_codec import decode_entry, encode_entry
from raftmq.replication.pysyncobj.raft_journal_format import (
    JOURNAL_MAGIC,
    decode_meta,
    iter_entries,
    scan_journal,
)
from raftmq.replication.pysyncobj.snapshot_file import decode_snapshot
from raftmq.storage.payload import KIND_MESSAGE, decode_payload, encode_payload

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
    probe = "import sys\n" + "".join(f"import {m}\n" for m in PURE) + (
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('pysyncobj', 'asyncio'))\nprint(bad)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_entries_round_trip() -> None:
    sends = [Send("s1", "/queue/a", (("k", "v"),), b"x" * 1000, 1), Send("s1", "/queue/b", (), b"", 2)]
    assert decode_entry(encode_entry([encode_batch(sends[:1]), encode_batch(sends[1:])])) == sends


def test_payload_round_trip() -> None:
    send = Send("s1", "/queue/a", (("k", "v"),), b"body", 1)
    assert KIND_MESSAGE == 1
    assert decode_payload(encode_payload(send)) == ("/queue/a", [("k", "v")], b"body")


@pytest.mark.integration  # pysyncobj's journal writes real files with fdatasync
def test_the_pure_decoder_reads_what_the_raft_journal_wrote(tmp_path: Path) -> None:
    from raftmq.replication.pysyncobj.raft_journal import RaftJournal
    from raftmq.replication.pysyncobj.snapshot_file import write_snapshot_file

    path = str(tmp_path / "raft.journal")
    journal = RaftJournal(path)
    entries = [(encode_entry([encode_batch([Send("s", "/queue/q", (), f"m{i}".encode(), i)])]), i + 1, 1 + i // 3)
               for i in range(7)]
    for command, index, term in entries:
        journal.add(command, index, term)
    journal.setCurrentTerm(3, "127.0.0.1:7001")
    journal._destroy()

    data = Path(path).read_bytes()
    assert data.startswith(JOURNAL_MAGIC)
    assert list(iter_entries(data, path)) == entries
    assert [decode_entry(command)[0].body for command, _i, _t in iter_entries(data)] == [f"m{i}".encode() for i in range(7)]
    meta = decode_meta(Path(path + ".meta").read_bytes())
    assert meta["term"] == 3 and meta["voted_for"] == "127.0.0.1:7001"

    # A torn tail (a crash mid-append) is where the readable part ends.
    end = scan_journal(data).end  # past the last record: reserved zeros follow
    assert not scan_journal(data).torn
    scan = scan_journal(data[:end] + entries[0][0][:5])
    assert scan.torn and scan.end == end and len(scan.records) == 7

    snapshot = str(tmp_path / "raft.snapshot")
    write_snapshot_file(snapshot, entries[-1], entries[-2], ["a:1", "b:2"], b"state")
    assert decode_snapshot(Path(snapshot).read_bytes()) == (entries[-1], entries[-2], ["a:1", "b:2"], b"state")
    assert os.path.getsize(snapshot) > 0
