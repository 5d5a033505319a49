"""A versioned binary codec for batches of core commands (msgpack, never pickle).

What a log stores must stay readable by the next release, and must never execute code when
read (pickle does both wrong). A batch is `[FORMAT_VERSION, [[type_code, field, ...], ...]]`;
fields follow the order pinned in `SCHEMA` for that version, so changing a command's fields
means a new version here, which `tests/replication/test_command_codec.py` enforces.

Version 2 (written) carries a Send's headers as its block, one string
(raftmq.protocol.header_block); version 1 (`HEADER_PAIRS`, earlier releases) as a list of
`[name, value]` pairs. Both are read; `encode_rows(..., HEADER_PAIRS)` writes version 1 rows for
a group whose other members run a release that reads only those.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgpack

from raftmq.core import commands as c
from raftmq.errors import CommandCodecError
from raftmq.packing import row_packer, thread_packer
from raftmq.protocol.header_block import pairs_of, user_block

FORMAT_VERSION = 2
HEADER_PAIRS = 1  # the version before header blocks: still read, and written on request

# type code -> (command class, field names in wire order). Codes are forever: never reuse one.
SCHEMA: dict[int, tuple[type, tuple[str, ...]]] = {
    1: (c.Connect, ("session", "now", "login", "client_id")),
    2: (c.Disconnect, ("session", "now", "receipt")),
    3: (c.Subscribe, ("session", "sub_id", "destination", "now", "ack", "selector", "prefetch", "exclusive",
                      "durable_name", "receipt")),
    4: (c.Unsubscribe, ("session", "sub_id", "now", "drop_durable", "receipt")),
    5: (c.Send, ("session", "destination", "headers", "body", "now", "transaction", "receipt")),
    6: (c.Ack, ("session", "now", "ack_id", "message_id", "subscription", "transaction", "receipt")),
    7: (c.Nack, ("session", "now", "ack_id", "message_id", "subscription", "transaction", "receipt")),
    8: (c.Begin, ("session", "transaction", "now", "receipt")),
    9: (c.Commit, ("session", "transaction", "now", "receipt")),
    10: (c.Abort, ("session", "transaction", "now", "receipt")),
    11: (c.Tick, ("now",)),
    # New codes need no new FORMAT_VERSION: rows of the codes above decode as before.
    12: (c.Browse, ("session", "sub_id", "destination", "now", "limit", "selector", "receipt")),
    13: (c.Noop, ("session", "now", "receipt")),
    14: (c.Manage, ("request", "op", "now", "destination", "target", "ids", "selector", "every", "closing")),
    15: (c.Recover, ("session", "sub_id", "now")),
    16: (c.Will, ("session", "destination", "headers", "body", "now", "delay_ms")),
    17: (c.Release, ("session", "key", "now", "every", "receipt")),
    18: (c.Hold, ("session", "key", "now")),
    19: (c.Share, ("session", "sub_id", "group", "destination", "now", "ack", "prefetch", "holder", "receipt")),
    20: (c.Expiry, ("session", "key", "now", "after_ms")),
}


_SEND_CODE = 5
# class -> (type code, wire field names): what a command is written as, row by row.
_NAMES_OF: dict[type, tuple[int, tuple[str, ...]]] = {cls: (code, names) for code, (cls, names) in SCHEMA.items()}


def encode_batch(commands: Sequence[c.Command], version: int = FORMAT_VERSION) -> bytes:
    """A batch: `[version, [row, ...]]`."""
    return _pack((version, _rows(commands, version)))


def encode_rows(commands: Sequence[c.Command], version: int = FORMAT_VERSION) -> bytes:
    """The commands' rows as one msgpack array, `[row, ...]`, without the batch's version: a Raft
    entry (raftmq.replication.entry_codec) joins the rows of its proposals under one version.

    Written field by field, in SCHEMA's order, into this thread's row packer: no row tuple, no
    field tuple (for a Send or an Ack, only its `now` as an int, and the bytes). The bytes are
    the same as packing `_rows(commands, version)` whole (a test holds the two to each other
    for every command type)."""
    if version != FORMAT_VERSION:
        return _pack(_rows(commands, version))
    packer = row_packer()
    given: Sequence[object] = commands  # compiled, a Command-typed loop would refuse a stranger with a TypeError
    try:
        packer.pack_array_header(len(given))
        for command in given:
            try:
                code, names = _NAMES_OF[type(command)]
            except KeyError:
                raise CommandCodecError(f"not a command: {type(command).__name__}") from None
            packer.pack_array_header(len(names) + 1)
            packer.pack(code)
            for name in names:
                packer.pack(getattr(command, name))
        out: bytes = packer.bytes()
        return out
    except (TypeError, ValueError) as exc:
        raise CommandCodecError(f"cannot encode batch: {exc}") from exc
    finally:
        packer.reset()


def _rows(commands: Sequence[c.Command], version: int) -> list[tuple[Any, ...]]:
    if version not in (FORMAT_VERSION, HEADER_PAIRS):
        raise CommandCodecError(f"cannot encode command format version {version!r}")
    rows: list[tuple[Any, ...]] = []
    given: Sequence[object] = commands  # compiled, a Command-typed loop would refuse a stranger with a TypeError
    for command in given:
        try:
            code, names = _NAMES_OF[type(command)]
        except KeyError:
            raise CommandCodecError(f"not a command: {type(command).__name__}") from None
        row = (code, *(getattr(command, name) for name in names))
        if version == HEADER_PAIRS and code == _SEND_CODE:
            row = (*row[:3], pairs_of(row[3]), *row[4:])
        rows.append(row)
    return rows


def _pack(value: Any) -> bytes:
    try:
        return bytes(thread_packer().pack(value))
    except (TypeError, ValueError) as exc:
        raise CommandCodecError(f"cannot encode batch: {exc}") from exc


def decode_batch(data: bytes) -> list[c.Command]:
    try:
        # Arrays as tuples: a Send's headers come out as the core's `Headers` with no copy.
        envelope = msgpack.unpackb(data, raw=False, use_list=False, strict_map_key=True)
    except Exception as exc:  # msgpack raises several unrelated types for garbage
        raise CommandCodecError(f"not a command batch: {exc}") from exc
    if type(envelope) is not tuple or len(envelope) != 2:
        raise CommandCodecError("not a command batch: bad envelope")
    version, rows = envelope
    if version != FORMAT_VERSION and version != HEADER_PAIRS:
        raise CommandCodecError(
            f"unsupported command format version {version!r} (this build reads {HEADER_PAIRS} and {FORMAT_VERSION})"
        )
    if type(rows) is not tuple:
        raise CommandCodecError("not a command batch: rows are not a list")
    return [_decode_row(row) for row in rows]


# Classes whose fields (`__match_args__`, a dataclass's or written out) are exactly their wire
# fields, in order: built positionally.
_POSITIONAL = frozenset(cls for cls, names in SCHEMA.values() if getattr(cls, "__match_args__", None) == names)
# type code -> (class, row length); per message this is most of decoding, so it is one lookup.
_ROWS: dict[int, tuple[type, int]] = {code: (cls, len(names) + 1) for code, (cls, names) in SCHEMA.items()}


def _decode_row(row: Any) -> c.Command:
    if type(row) is not tuple or not row:
        raise CommandCodecError("bad command row")
    entry = _ROWS.get(row[0])
    if entry is None:
        raise CommandCodecError(f"unknown command type code {row[0]!r}")
    cls, length = entry
    if len(row) != length:
        raise CommandCodecError(f"{cls.__name__}: expected {length - 1} fields, got {len(row) - 1}")
    # The two per message built from the row's fields one by one: `cls(*row[1:])` slices a tuple.
    if cls is c.Send:
        headers = row[3] if type(row[3]) is str else _block(row[3])  # pairs, as version 1 wrote them
        return c.Send(row[1], row[2], headers, row[4], row[5], row[6], row[7])
    if cls is c.Ack:
        return c.Ack(row[1], row[2], row[3], row[4], row[5], row[6], row[7])
    if cls is c.Manage:
        if type(row[6]) is not tuple or not all(type(i) is str for i in row[6]):
            raise CommandCodecError("Manage: ids must be a list of strings")
    if cls in _POSITIONAL:
        return cls(*row[1:])  # type: ignore[no-any-return]
    return cls(**dict(zip(SCHEMA[row[0]][1], row[1:], strict=False)))  # type: ignore[no-any-return]


def _block(headers: Any) -> str:
    """The block of a Send's headers written as pairs (version 1): names and values made
    strings, or the row refused."""
    if type(headers) is not tuple:
        raise CommandCodecError("Send: headers must be a block or a list of pairs")
    pairs = []
    for pair in headers:
        if type(pair) is not tuple or len(pair) != 2:
            raise CommandCodecError("Send: headers must be a block or a list of pairs")
        key, value = pair
        pairs.append((key if type(key) is str else str(key), value if type(value) is str else str(value)))
    return user_block(pairs)
