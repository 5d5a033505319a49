"""The payload of a body-journal record, pure (docs/journal-format.md): for `KIND_MESSAGE`, a
msgpack array `[destination, [[name, value], ...], body]`; for `KIND_PAGE`, a page of paged
messages (raftmq.core.paging.encode_page)."""

from __future__ import annotations

from collections.abc import Sequence

import msgpack

from raftmq.core.commands import Command, Send
from raftmq.core.message import BodyRef
from raftmq.packing import thread_packer

KIND_MESSAGE = 1
# A page of messages paged out of a store (raftmq.core.paging): the page's bytes, opaque here.
KIND_PAGE = 2


def reference_bodies(index: int, commands: Sequence[Command]) -> list[Command]:
    """The commands of the Raft entry at `index` as a group member's core applies them: each
    Send's body replaced by its `BodyRef` (index, ordinal, size), the ordinal counting the entry's
    Sends in order. The core counts a destination's bytes by the size, so the members
    (`raftmq.server.replica.bodies.BodyStore`) and the audit's replay (`spark_audit`) must both apply
    exactly these."""
    swapped = list(commands)
    ordinal = 0
    for i, command in enumerate(commands):
        if type(command) is Send:
            body = command.body
            ref: BodyRef = (index, ordinal, len(body) if isinstance(body, (bytes, bytearray)) else 0)
            swapped[i] = Send(command.session, command.destination, command.headers, ref, command.now,
                              command.transaction, command.receipt)
            ordinal += 1
    return swapped


def encode_payload(send: Send) -> bytes:
    # msgpack writes tuples as arrays: the same bytes as lists, without copying every header pair.
    return bytes(thread_packer().pack((send.destination, send.headers, send.body)))


def decode_payload(payload: bytes) -> tuple[str, list[tuple[str, str]], bytes]:
    """(destination, headers, body) of a message record's payload; ValueError if it is none."""
    fields = msgpack.unpackb(payload, raw=False)
    if not isinstance(fields, list) or len(fields) != 3 or not isinstance(fields[2], bytes):
        raise ValueError("journal record holds no message body")
    destination, headers, body = fields
    return str(destination), [(str(name), str(value)) for name, value in headers], body


def decode_body(payload: bytes) -> bytes:
    fields = msgpack.unpackb(payload, raw=False)
    body = fields[2]
    if not isinstance(body, bytes):
        raise ValueError("journal record holds no message body")
    return body
