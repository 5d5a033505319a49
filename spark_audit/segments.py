"""The records of one body-journal segment (docs/journal-format.md), as rows: what a member
kept of each message it applied, without the body (its digest, and the text of a short one).
A record's ordinal is its place in its batch: a member writes one batch per Raft index
(`BodyStore.end`, `add_fetched`), so that is its place among the records of its index.

A batch that fails its checks is one row naming the damage (`status` torn-tail or corrupt),
never records: a torn tail is the remains of an append a crash interrupted (possible only at
the end of a member's last segment), anything else is corruption. Either way the reader stops
in that file: bytes past damage are not data.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from raftmq.errors import JournalCorrupt
from raftmq.routing.route import DUPLICATE_ID_HEADER
from raftmq.storage.payload import KIND_MESSAGE, KIND_PAGE, decode_payload
from raftmq.storage.records import BATCH_HEADER_SIZE, Record, decode_batch, parse_header
from spark_audit.layout import segment_files
from spark_audit.replay import digest, text_value

__all__ = ["SEGMENT_COLUMNS", "SEGMENT_SCHEMA_DDL", "segment_files", "segment_rows"]

SEGMENT_COLUMNS: tuple[tuple[str, str], ...] = (
    ("run", "string"),
    ("group", "string"),
    ("node", "string"),
    ("segment", "string"),
    ("offset", "long"),  # of the batch in the segment
    ("position", "long"),  # of the record in the segment
    ("index", "long"),
    ("ordinal", "int"),  # among the records of its Raft index: the body reference (index, ordinal)
    ("term", "long"),
    ("kind", "int"),
    ("destination", "string"),
    ("dedup_id", "string"),
    ("value", "string"),
    ("digest", "string"),
    ("status", "string"),  # ok, torn-tail, corrupt
    ("detail", "string"),
)
SEGMENT_SCHEMA_DDL = ", ".join(f"`{name}` {kind}" for name, kind in SEGMENT_COLUMNS)


def segment_rows(run: str, group: str, node: str, path: str, last: bool) -> Iterator[tuple[Any, ...]]:
    """Rows of one segment file; `last`: it is the member's last segment (only there can an
    interrupted append leave a torn tail)."""
    name = os.path.basename(path)
    with open(path, "rb") as f:
        data = f.read()
    position = 0
    offset = 0
    while offset < len(data):
        try:
            header, records = decode_batch(data, offset)
            rows = [_row(run, group, node, name, offset, position + i, i, record) for i, record in enumerate(records)]
        except (JournalCorrupt, ValueError) as exc:
            status = "torn-tail" if last and _runs_past_end(data, offset) else "corrupt"
            yield (run, group, node, name, offset, position, None, None, None, None, None, None, None, None, status,
                   f"{name} at offset {offset}: {exc}")
            return
        yield from rows
        position += len(rows)
        offset += header.batch_size


def _row(run: str, group: str, node: str, name: str, offset: int, position: int, ordinal: int,
         record: Record) -> tuple[Any, ...]:
    destination = dedup = value = body_digest = None
    if record.kind == KIND_MESSAGE:
        destination, headers, body = decode_payload(record.payload)
        # The first, as the core reads it.
        dedup = next((value for name, value in headers if name == DUPLICATE_ID_HEADER), None) or None
        value, body_digest = text_value(body), digest(body)
    elif record.kind == KIND_PAGE:  # paged messages (raftmq.core.paging): members must agree on it too
        body_digest = digest(record.payload)
    return (run, group, node, name, offset, position, record.raft_index, ordinal, record.raft_term, record.kind,
            destination, dedup, value, body_digest, "ok", None)


def _runs_past_end(data: bytes, at: int) -> bool:
    """A batch cut short by the end of the file: what an interrupted append leaves."""
    if len(data) - at < BATCH_HEADER_SIZE:
        return True
    try:
        return parse_header(data, at).batch_size > len(data) - at
    except JournalCorrupt:
        return False
