"""The payload of a body-journal record, pure (docs/journal-format.md): for `KIND_MESSAGE`, a
msgpack array `[destination, headers, body]`, the headers a block (a string,
raftmq.protocol.header_block) or, written before blocks, `[[name, value], ...]`; for `KIND_PAGE`,
a page of paged messages (raftmq.core.paging.encode_page)."""

from __future__ import annotations

import msgpack

from raftmq.core.commands import Send
from raftmq.packing import row_packer
from raftmq.protocol.header_block import pairs_of

KIND_MESSAGE = 1
# A page of messages paged out of a store (raftmq.core.paging): the page's bytes, opaque here.
KIND_PAGE = 2


def encode_payload(send: Send) -> bytes:
    """`[destination, headers, body]`, packed element by element (no tuple of the three)."""
    packer = row_packer()
    try:
        packer.pack_array_header(3)
        packer.pack(send.destination)
        packer.pack(send.headers)
        packer.pack(send.body)
        payload: bytes = packer.bytes()
        return payload
    finally:
        packer.reset()


def decode_payload(payload: bytes) -> tuple[str, list[tuple[str, str]], bytes]:
    """(destination, headers, body) of a message record's payload; ValueError if it is none."""
    fields = msgpack.unpackb(payload, raw=False)
    if not isinstance(fields, list) or len(fields) != 3 or not isinstance(fields[2], bytes):
        raise ValueError("journal record holds no message body")
    destination, headers, body = fields
    if isinstance(headers, str):
        return str(destination), list(pairs_of(headers)), body
    return str(destination), [(str(name), str(value)) for name, value in headers], body


def decode_body(payload: bytes) -> bytes:
    fields = msgpack.unpackb(payload, raw=False)
    body = fields[2]
    if not isinstance(body, bytes):
        raise ValueError("journal record holds no message body")
    return body
