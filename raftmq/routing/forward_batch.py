"""Forwarding in batches: many store-and-forward messages in one STOMP frame between groups.

A bridge sends what it has ready for a neighbour as one SEND to `BATCH_DESTINATION`, with a
receipt, whose body packs each message's destination, headers (its duplicate-detection id
among them) and body (`encode`). The neighbour's STOMP session takes such a frame only on a
cluster connection (CONNECT with `BRIDGE_CONNECT_HEADER`); anyone else gets `reserved
destination`, as for every `$.raftmq.` name. It translates and authorizes each message as it
would a SEND of its own (`message` checks the frame limits on each) and proposes them together:
one Raft entry in the neighbour for the batch, one RECEIPT back, and one proposal of the ACKs
in the source group.

Each message's Send carries an inner receipt id (`inner_receipt`) naming the batch's receipt,
its index and the batch's size. The session writes one RECEIPT, for the batch's last message,
and none once it has failed. A message refused (by the session's checks or by the core) is
refused as an ERROR for the batch's receipt with `BATCH_INDEX_HEADER`: the messages before it
were stored, it was not, and those after it may or may not have been (the bridge sends them
again: duplicate detection stores them once). An inner receipt id starts with a NUL, which no
STOMP header can hold, so no client's receipt id is ever mistaken for one.
"""

from __future__ import annotations

import msgpack

from raftmq.errors import ProtocolError
from raftmq.protocol.limits import Limits

BATCH_DESTINATION = "/queue/$.raftmq.batch"
BATCH_COUNT_HEADER = "raftmq-batch"  # on the batch's SEND: how many messages it carries
BATCH_INDEX_HEADER = "raftmq-batch-index"  # on an ERROR for a batch: the message refused (0-based)
_INNER = "\x00"

Message = tuple[str, list[tuple[str, str]], bytes]  # destination, headers, body


def encode(messages: list[Message]) -> bytes:
    """The batch's body: a msgpack array of [destination, [[name, value], ...], body]."""
    packed: bytes = msgpack.packb(
        [[destination, [list(pair) for pair in headers], body] for destination, headers, body in messages],
        use_bin_type=True)
    return packed


def decode(body: bytes) -> list[object]:
    """The items of a batch's body, each to be read with `message`; raises `BatchError`
    (`index` None) when the body is not a batch at all."""
    try:
        items = msgpack.unpackb(body, use_list=True, raw=False, strict_map_key=True)
    except Exception as exc:  # msgpack raises several types, all meaning "not a batch"
        raise BatchError("invalid batch", f"the batch body is not msgpack: {type(exc).__name__}", None) from None
    if not isinstance(items, list) or not items:
        raise BatchError("invalid batch", "the batch body must be a non-empty array of messages", None)
    return items


def message(item: object, index: int, limits: Limits) -> Message:
    """Item `index` of a batch as a message within `limits`, as a SEND frame of its own would
    be; raises `BatchError` naming it otherwise."""
    if not (isinstance(item, list) and len(item) == 3):
        raise BatchError("invalid batch", f"message {index} is not [destination, headers, body]", index)
    destination, raw_headers, body = item
    if not isinstance(destination, str) or not isinstance(raw_headers, list) or not isinstance(body, bytes):
        raise BatchError("invalid batch", f"message {index} has a field of the wrong type", index)
    if len(raw_headers) + 2 > limits.max_headers:  # its destination and inner receipt count too
        raise BatchError("too many headers", f"message {index} has more than {limits.max_headers} headers", index)
    headers: list[tuple[str, str]] = []
    for pair in raw_headers:
        if not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str) and isinstance(pair[1], str)):
            raise BatchError("invalid batch", f"message {index} has a header that is not [name, value]", index)
        if len(pair[0]) + len(pair[1]) + 1 > limits.max_header_line_bytes or "\x00" in pair[0] or "\x00" in pair[1]:
            raise BatchError("header line too long", f"message {index} has a header over "
                             f"{limits.max_header_line_bytes} bytes or with a NUL", index)
        headers.append((pair[0], pair[1]))
    if len(body) > limits.max_body_bytes:
        raise BatchError("frame too large", f"message {index} has a body over {limits.max_body_bytes} bytes", index)
    return destination, headers, body


class BatchError(ProtocolError):
    """A batch, or one of its messages (`index`), that cannot be taken."""

    def __init__(self, message: str, detail: str, index: int | None) -> None:
        super().__init__(message, detail)
        self.index = index


def inner_receipt(receipt: str, index: int, count: int) -> str:
    return f"{_INNER}{index}/{count}/{receipt}"


def parse_inner(receipt_id: str) -> tuple[str, int, int] | None:
    """(the batch's receipt, this message's index, the batch's size) of an inner receipt id;
    None for any other receipt id."""
    if not receipt_id.startswith(_INNER):
        return None
    index, count, receipt = receipt_id[1:].split("/", 2)
    return receipt, int(index), int(count)

