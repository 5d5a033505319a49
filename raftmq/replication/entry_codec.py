"""The Raft entry format, pure: a format byte, then an lz4 block (size-prefixed). Format 3 (what
this build writes) holds one command batch (raftmq.replication.command_codec) of version 2 (a
Send's headers as one block): every proposal's rows under one version, one msgpack level.
Format 2 (earlier builds) is the same with command version 1 (headers as pairs); format 1 a
msgpack list of batches, one per proposal. All decode. No asyncio, no pysyncobj: the audit
decodes journals with it.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import lz4.block
import msgpack

from raftmq.core.commands import Command
from raftmq.errors import CommandCodecError
from raftmq.packing import thread_packer
from raftmq.replication.command_codec import FORMAT_VERSION, HEADER_PAIRS, decode_batch

ENTRY_FORMAT = 3  # written; ENTRY_FORMAT_PAIRS (2) and ENTRY_FORMAT_LISTS (1) still read
ENTRY_FORMAT_PAIRS = 2
ENTRY_FORMAT_LISTS = 1
ENTRY_FORMATS = (ENTRY_FORMAT_LISTS, ENTRY_FORMAT_PAIRS, ENTRY_FORMAT)
MAX_ENTRY_UNCOMPRESSED = 64 * 2**20  # refuse to inflate anything bigger (a corrupt size field)
# The command version each entry format holds its rows in.
ROWS_VERSION = {ENTRY_FORMAT: FORMAT_VERSION, ENTRY_FORMAT_PAIRS: HEADER_PAIRS, ENTRY_FORMAT_LISTS: HEADER_PAIRS}
# Format byte, and a batch's array of two and its version, of formats 3 and 2.
_HEADS = {
    form: (bytes([form]), b"\x92" + bytes(msgpack.packb(ROWS_VERSION[form])))
    for form in (ENTRY_FORMAT, ENTRY_FORMAT_PAIRS)
}
_ARRAY_STARTS = frozenset(bytes([first]) for first in (*range(0x90, 0xA0), 0xDC, 0xDD))  # msgpack arrays' first bytes


def encode_entry(proposals: Sequence[bytes], form: int = ENTRY_FORMAT) -> bytes:
    """One Raft entry of format 3 (or 2) from its proposals' rows (`command_codec.encode_rows`,
    each a msgpack array, in `ROWS_VERSION[form]`): their rows joined into one batch,
    `[version, [row, ...]]`."""
    format_byte, batch_head = _HEADS[form]
    if len(proposals) == 1 and proposals[0][:1] in _ARRAY_STARTS:  # its rows' array is the batch's
        payload = batch_head + proposals[0]
    else:
        parts: list[bytes] = [batch_head, b""]
        total = 0
        for rows in proposals:
            first = rows[0] if rows else 0
            if 0x90 <= first <= 0x9F:  # a fixarray (up to 15 commands): a proposal's rows, nearly always
                total += first & 0x0F
                parts.append(rows[1:])  # one object (a view and its slice were two), the row copied once
            else:
                count, skip = _long_array_header(rows)
                total += count
                parts.append(rows[skip:])
        parts[1] = thread_packer().pack_array_header(total)
        payload = b"".join(parts)
    return format_byte + lz4.block.compress(payload, store_size=True)  # type: ignore[no-any-return]


def encode_entry_lists(batches: Sequence[bytes]) -> bytes:
    """An entry of format 1, as earlier builds wrote it: a msgpack list of batches (`encode_batch`)."""
    return bytes([ENTRY_FORMAT_LISTS]) + bytes(lz4.block.compress(thread_packer().pack(list(batches)), store_size=True))


def batch_of_rows(rows: bytes) -> bytes:
    """A proposal's rows (`encode_rows`, version 1) as a batch of its own, `[1, [row, ...]]`:
    what an entry of format 1 holds, one per proposal."""
    return _HEADS[ENTRY_FORMAT_PAIRS][1] + rows


def _long_array_header(data: bytes) -> tuple[int, int]:
    """(items, header bytes) of the msgpack array of 16 or more items `data` starts with
    (`encode_entry` reads a fixarray's count itself)."""
    first = data[0] if data else 0
    if first == 0xDC:
        return int.from_bytes(data[1:3], "big"), 3
    if first == 0xDD:
        return int.from_bytes(data[1:5], "big"), 5
    raise CommandCodecError("a proposal's rows are not a msgpack array")


def decode_entry(entry: bytes) -> list[Command]:
    if not entry or entry[0] not in ENTRY_FORMATS:
        raise CommandCodecError(f"unknown Raft entry format {entry[:1]!r}")
    if len(entry) < 5:
        raise CommandCodecError("truncated Raft entry")
    (size,) = struct.unpack_from("<I", entry, 1)
    if size > MAX_ENTRY_UNCOMPRESSED:
        raise CommandCodecError(f"Raft entry claims {size} bytes uncompressed")
    data = lz4.block.decompress(memoryview(entry)[1:])
    if entry[0] != ENTRY_FORMAT_LISTS:
        return decode_batch(data)
    batches = msgpack.unpackb(data, raw=False)
    if not isinstance(batches, list):
        raise CommandCodecError("Raft entry is not a list of batches")
    commands: list[Command] = []
    for batch in batches:
        commands.extend(decode_batch(batch))
    return commands
