"""The Raft entry format, pure: one entry is a format byte and an lz4 block (size-prefixed) of a
msgpack list of encoded command batches (raftmq.replication.command_codec). No asyncio, no
pysyncobj: the audit decodes journals with it.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import lz4.block
import msgpack

from raftmq.core.commands import Command
from raftmq.errors import CommandCodecError
from raftmq.packing import thread_packer
from raftmq.replication.command_codec import decode_batch

ENTRY_FORMAT = 1
MAX_ENTRY_UNCOMPRESSED = 64 * 2**20  # refuse to inflate anything bigger (a corrupt size field)


def encode_entry(batches: Sequence[bytes]) -> bytes:
    """One Raft entry: format byte + lz4 block (size-prefixed) of a msgpack list of encoded batches."""
    return bytes([ENTRY_FORMAT]) + bytes(lz4.block.compress(thread_packer().pack(list(batches)), store_size=True))


def decode_entry(entry: bytes) -> list[Command]:
    if not entry or entry[0] != ENTRY_FORMAT:
        raise CommandCodecError(f"unknown Raft entry format {entry[:1]!r}")
    if len(entry) < 5:
        raise CommandCodecError("truncated Raft entry")
    (size,) = struct.unpack_from("<I", entry, 1)
    if size > MAX_ENTRY_UNCOMPRESSED:
        raise CommandCodecError(f"Raft entry claims {size} bytes uncompressed")
    batches = msgpack.unpackb(lz4.block.decompress(entry[1:]), raw=False)
    if not isinstance(batches, list):
        raise CommandCodecError("Raft entry is not a list of batches")
    commands: list[Command] = []
    for batch in batches:
        commands.extend(decode_batch(batch))
    return commands
