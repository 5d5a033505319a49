"""The fact table: one row per thing a member's files show, in one schema for every kind, so
one pass over a member's files (raftmq_node source) feeds every check.

Each kind of fact, what it has one row per, and its columns besides run, group and node:
- `entry`: a Raft journal record (or a snapshot's last entry): index, term, kind
  (regular/noop/other), digest, committed.
- `enter`: a message arriving in a store: index (of the entry that did it), message_id, store,
  destination, dedup_id, value, digest, route, origin (client/forward/first/dead-letter/expiry/retained/
  moved: `first` arrived forwarded first, stored nowhere before), forward_id (of one from
  another group: what ties it to its producer's SEND), count, first.
- `leave`: a message leaving a store for good: message_id, store, outcome
  (acked/dead-lettered/expired/taken/discarded), session.
- `snapshot`: a message a member's snapshot holds (every member that has one): index (the
  snapshot's), message_id, store, destination, dedup_id, body_ref, kind (ready/in-flight).
- `waiting`: a message in a store at the end (ready or in flight): message_id, store,
  destination, dedup_id, value, digest, count.
- `applied`: a member: index (the last entry replayed), term, committed (true when it reached
  the group's commit index).
- `file`: a member file read: kind (journal/snapshot/meta/segment), outcome
  (ok/torn-tail/corrupt), detail.

`digest` is a short hash: of a journal record's command bytes for `entry` rows, of the body for
messages. `value` is the body as text when it is short UTF-8 (the chaos workloads' values), else
null.
"""

from __future__ import annotations

from typing import Any

SUBSCRIPTION_STORE = "#subscription"  # suffix of a topic subscription's store name (several share a topic)
FACT_COLUMNS: tuple[tuple[str, str], ...] = (
    ("run", "string"),
    ("group", "string"),
    ("node", "string"),
    ("fact", "string"),
    ("index", "long"),
    ("term", "long"),
    ("position", "long"),  # order of the row among this member's rows of its kind
    ("message_id", "string"),
    ("store", "string"),
    ("destination", "string"),
    ("dedup_id", "string"),
    ("value", "string"),
    ("digest", "string"),
    ("route", "string"),
    ("body_ref", "string"),  # "<raft index>:<ordinal>": where the body lies in the body journal
    ("kind", "string"),  # entry kind, origin of an enter, outcome of a leave, file kind
    ("session", "string"),
    ("count", "int"),
    ("committed", "boolean"),
    ("first", "boolean"),  # enter: the message id's first arrival at this member (later: dead-letter copies, returns)
    ("detail", "string"),
    ("forward_id", "string"),  # enter, from another group: the forward's duplicate-detection id
)
FACT_NAMES = tuple(name for name, _ in FACT_COLUMNS)
_INDEX = {name: i for i, name in enumerate(FACT_NAMES)}
FACT_SCHEMA_DDL = ", ".join(f"`{name}` {kind}" for name, kind in FACT_COLUMNS)


def fact_row(run: str, group: str, node: str, fact: str, **fields: Any) -> tuple[Any, ...]:
    """A row of the fact table; a column not named is null. Unknown names raise (a typo must
    not become a silent null)."""
    row: list[Any] = [None] * len(FACT_NAMES)
    row[0], row[1], row[2], row[3] = run, group, node, fact
    for name, value in fields.items():
        row[_INDEX[name]] = value
    return tuple(row)


def arrow_schema() -> Any:
    import pyarrow as pa

    kinds = {"string": pa.string(), "long": pa.int64(), "int": pa.int32(), "boolean": pa.bool_()}
    return pa.schema([(name, kinds[kind]) for name, kind in FACT_COLUMNS])


def to_batch(rows: list[tuple[Any, ...]], schema: Any) -> Any:
    """Rows as one Arrow record batch (column by column: the reader yields batches, not rows)."""
    import pyarrow as pa

    columns = list(zip(*rows, strict=True)) if rows else [() for _ in schema]
    return pa.RecordBatch.from_arrays(
        [pa.array(col, type=field.type) for col, field in zip(columns, schema, strict=True)], schema=schema)
