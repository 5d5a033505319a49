"""Server frames, built as bytes ready for the socket: MESSAGE from a Deliver effect, RECEIPT,
ERROR and CONNECTED.

A MESSAGE is built once per delivery; its headers are the delivery's (subscription, destination,
message-id, ack, redelivered, delivery-count, raftmq-term) followed by the message's stored
user headers, its block as stored (raftmq.protocol.header_block); the first two lines are built
once per subscription (`message_head`). `raftmq-term` (also on CONNECTED) is the Raft term of the leader that wrote the
frame: a client that has seen a higher one knows the frame comes from a deposed leader.
"""

from __future__ import annotations

from raftmq.core.effects import BrowseEnd, Deliver
from raftmq.errors import ProtocolError
from raftmq.protocol.codec import encode_frame
from raftmq.protocol.frame import GROUP_HEADER, TERM_HEADER, Frame
from raftmq.protocol.header_block import pairs_of

# Headers the server sets on MESSAGE; a stored user header of the same name is not copied,
# so a producer cannot make a first delivery look redelivered.
SERVER_MESSAGE_HEADERS = frozenset(
    {"subscription", "message-id", "destination", "ack", "redelivered", "delivery-count", "content-length", TERM_HEADER}
)
# An encoded frame with an empty body ends in the blank line and the NUL.
EMPTY_BODY_TAIL = b"content-length:0\n\n\0"


def message_frame(deliver: Deliver, version: str, body: bytes | None = None, term: int = 0,
                  heads: dict[str, tuple[str, bytes]] | None = None) -> bytes:
    """The MESSAGE frame of one delivery; `body`, when given, stands for the message's body
    (a group member's core holds a body reference, resolved by the node). `heads`: the
    connection's frame heads by subscription id (`message_head`), kept between deliveries.

    This is the hottest output path, so the common case (the message's block as stored, for a
    1.2 consumer or one without an escape in it) is written as one string after the
    subscription's head; anything else goes through `encode_frame`, which escapes or refuses."""
    message = deliver.message
    if body is None:
        body = message.body
    block = message.headers
    head = message_head(deliver.sub_id, deliver.destination, heads)
    # The block is 1.2's own escaping: as it is for 1.2, and for 1.1 and 1.0 where it holds no escape.
    ack_id = deliver.ack_id if version == "1.2" else None
    if head is not None and (version == "1.2" or "\\" not in block) and _plain(message.message_id) \
            and (ack_id is None or _plain(ack_id)):
        # One string built at once (no list of lines); a line a delivery lacks is "".
        again = "redelivered:true\n" if deliver.redelivered else ""
        term_line = _term_line(term)
        if ack_id is not None:
            text = (f"message-id:{message.message_id}\nack:{ack_id}\n{again}delivery-count:{deliver.delivery_count}\n"
                    f"{term_line}{block}content-length:{len(body)}\n\n")
        else:
            text = (f"message-id:{message.message_id}\n{again}delivery-count:{deliver.delivery_count}\n"
                    f"{term_line}{block}content-length:{len(body)}\n\n")
        try:
            return b"".join((head, text.encode("utf-8"), body, b"\0"))
        except UnicodeEncodeError:
            pass  # a lone surrogate: let encode_frame refuse it
    return _message_frame_escaped(deliver, version, body, term)


# `raftmq-term:TERM\n` by term: the same for every delivery of a leadership (a few terms kept).
_TERM_LINES: dict[int, str] = {}


def _term_line(term: int) -> str:
    if not term:
        return ""
    line = _TERM_LINES.get(term)
    if line is None:
        if len(_TERM_LINES) >= 8:
            _TERM_LINES.clear()
        line = _TERM_LINES[term] = f"raftmq-term:{term}\n"
    return line


def _plain(value: str) -> bool:
    """A server-made header value that needs no escaping in any version."""
    return ":" not in value and "\n" not in value and "\\" not in value and "\r" not in value and "\0" not in value


MAX_HEADS = 1024  # subscriptions' heads a connection keeps (more: forgotten, and built again)


def message_head(sub_id: str, destination: str, heads: dict[str, tuple[str, bytes]] | None) -> bytes | None:
    """`MESSAGE`, `subscription` and `destination` of a delivery, encoded: the same for every
    delivery to a subscription (a topic pattern's changes with the topic published to), so built
    once and kept in `heads`. None when one of them needs escaping (`encode_frame` then)."""
    if heads is not None:
        known = heads.get(sub_id)
        if known is not None and known[0] == destination:
            return known[1]
    text = f"MESSAGE\nsubscription:{sub_id}\ndestination:{destination}\n"
    if text.count(":") != 2 or text.count("\n") != 3 or "\\" in text or "\r" in text or "\0" in text:
        return None
    try:
        head = text.encode("utf-8")
    except UnicodeEncodeError:
        return None
    if heads is not None:
        if len(heads) >= MAX_HEADS:
            heads.clear()
        heads[sub_id] = (destination, head)
    return head


def _message_frame_escaped(deliver: Deliver, version: str, body: bytes, term: int) -> bytes:
    message = deliver.message
    headers = [
        ("subscription", deliver.sub_id),
        ("destination", deliver.destination),
        ("message-id", message.message_id),
    ]
    if deliver.ack_id is not None and version == "1.2":
        headers.append(("ack", deliver.ack_id))
    if deliver.redelivered:
        headers.append(("redelivered", "true"))
    headers.append(("delivery-count", str(deliver.delivery_count)))
    if term:
        headers.append((TERM_HEADER, str(term)))
    for item in pairs_of(message.headers):
        if item[0] not in SERVER_MESSAGE_HEADERS:
            headers.append(item)
    # encode_frame appends content-length to a non-empty body; an empty one gets
    # "content-length:0" spliced in before the blank line.
    try:
        data = encode_frame(Frame("MESSAGE", headers, body), version)
    except ProtocolError:
        # A header the consumer's version cannot carry (say a newline sent by a 1.2 producer,
        # delivered to a 1.0 consumer): deliver the message without the headers that cannot be
        # written rather than not at all.
        data = encode_frame(Frame("MESSAGE", _encodable_headers(headers, version), body), version)
    if not body:
        data = data[:-2] + EMPTY_BODY_TAIL
    return data


def _encodable_headers(headers: list[tuple[str, str]], version: str) -> list[tuple[str, str]]:
    kept = []
    for name, value in headers:
        try:
            encode_frame(Frame("MESSAGE", [(name, value)]), version)
        except ProtocolError:
            continue
        kept.append((name, value))
    return kept


def browse_end_frame(end: BrowseEnd, version: str) -> bytes:
    """The MESSAGE that ends a browse (ActiveMQ's `browser:end`): no body, and how many copies
    came before it (`browser-truncated:true` when the queue held more than the limit)."""
    headers = [
        ("subscription", end.sub_id),
        ("message-id", "browser-end"),
        ("destination", end.destination),
        ("browser", "end"),
        ("browser-count", str(end.count)),
    ]
    if end.truncated:
        headers.append(("browser-truncated", "true"))
    try:
        data = encode_frame(Frame("MESSAGE", headers), version)
    except ProtocolError:
        data = encode_frame(Frame("MESSAGE", _encodable_headers(headers, version)), version)
    return data[:-2] + EMPTY_BODY_TAIL


def receipt_frame(receipt_id: str, version: str) -> bytes:
    if ":" in receipt_id or "\n" in receipt_id or "\\" in receipt_id or "\r" in receipt_id or "\0" in receipt_id:
        return encode_frame(Frame("RECEIPT", [("receipt-id", receipt_id)]), version)
    return f"RECEIPT\nreceipt-id:{receipt_id}\n\n\0".encode()  # ids come from decoded UTF-8


def error_frame(
    message: str, detail: str, version: str, receipt_id: str | None = None, extra: dict[str, str] | None = None
) -> bytes:
    """ERROR with `message`, a plain-text body carrying the detail, and `receipt-id` when the
    offending frame asked for a receipt."""
    body = (detail or message).encode("utf-8", "replace")
    if not body.endswith(b"\n"):
        body += b"\n"
    headers = [("message", _one_line(message))]
    if receipt_id is not None:
        headers.append(("receipt-id", receipt_id))
    if extra:
        headers.extend(extra.items())
    headers.append(("content-type", "text/plain"))  # encode_frame adds content-length
    try:
        return encode_frame(Frame("ERROR", headers, body), version)
    except ProtocolError:
        # The receipt id itself may be what the version cannot carry.
        return encode_frame(Frame("ERROR", _encodable_headers(headers, version), body), version)


def _one_line(text: str) -> str:
    # 1.0 ERROR headers cannot escape a newline; keep the message one short line.
    return " ".join(text.split())[:500] or "error"


def connected_frame(version: str, heart_beat: tuple[int, int], session_id: str, server: str, term: int = 0,
                    group: str | None = None) -> bytes:
    headers = [
        ("version", version),
        ("heart-beat", f"{heart_beat[0]},{heart_beat[1]}"),
        ("session", session_id),
        ("server", server),
    ]
    if term:
        headers.append((TERM_HEADER, str(term)))
    if group is not None:
        headers.append((GROUP_HEADER, group))
    return encode_frame(Frame("CONNECTED", headers), version)
