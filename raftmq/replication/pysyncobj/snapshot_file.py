"""A member's Raft snapshot file (`raft.snapshot`, docs/raft-journal-format.md): its bytes,
pure (`encode_snapshot`, `decode_snapshot`), and writing and reading the file.

No pysyncobj, no asyncio, nothing done at import: the Spark audit and the corruption nemesis
read snapshots with this module alone. The durable rename of a snapshot into place is
pysyncobj's (its `atomicReplace`, which `patches` makes fsync the file and the directory).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Sequence
from typing import Any

import crc32c
import msgpack

from raftmq.errors import RaftJournalError
from raftmq.replication.pysyncobj.raft_journal_format import Entry

SNAPSHOT_MAGIC = b"RAFTMQ-RAFT-SNAPSHOT-1\n"
SNAPSHOT_HEADER = struct.Struct("<IQ")  # crc32c(body), len(body)


def encode_snapshot(last: Entry, previous: Entry, cluster: Sequence[str], state: bytes) -> bytes:
    body = bytes(msgpack.packb([list(last), list(previous), list(cluster), state], use_bin_type=True))
    return SNAPSHOT_MAGIC + SNAPSHOT_HEADER.pack(crc32c.crc32c(body), len(body)) + body


def decode_snapshot(data: bytes, path: str = "<buffer>") -> tuple[Entry, Entry, list[str], bytes]:
    """(last entry, previous entry, cluster, state) of a snapshot file's bytes. A snapshot is
    all or nothing: a bad checksum raises `RaftJournalError` (it is never silently skipped)."""
    head = len(SNAPSHOT_MAGIC) + SNAPSHOT_HEADER.size
    if not data.startswith(SNAPSHOT_MAGIC) or len(data) < head:
        raise RaftJournalError(f"{path}: not a raftmq Raft snapshot")
    crc, length = SNAPSHOT_HEADER.unpack_from(data, len(SNAPSHOT_MAGIC))
    body = data[head:head + length]
    if len(body) != length or crc32c.crc32c(body) != crc:
        raise RaftJournalError(f"{path}: Raft snapshot fails its checksum")
    last, previous, cluster, state = msgpack.unpackb(body, raw=False)
    return _entry(last), _entry(previous), [str(n) for n in cluster], bytes(state)


def write_snapshot_file(path: str, last: Entry, previous: Entry, cluster: Sequence[str], state: bytes) -> None:
    """Write and fsync `path`. pysyncobj writes to a temporary name and renames it into place."""
    with open(path, "wb") as f:
        f.write(encode_snapshot(last, previous, cluster, state))
        f.flush()
        os.fsync(f.fileno())


def read_snapshot_file(path: str) -> tuple[Entry, Entry, list[str], bytes]:
    with open(path, "rb") as f:
        return decode_snapshot(f.read(), path)


def _entry(row: list[Any]) -> Entry:
    command, idx, term = row
    return (bytes(command), int(idx), int(term))
