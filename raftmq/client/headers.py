"""Extra STOMP headers as the clients' callers pass them: a mapping, pairs, or None; and an
acknowledgement's."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from raftmq.errors import ClientError
from raftmq.protocol.frame import Frame

HeadersArg = Mapping[str, str] | Iterable[tuple[str, str]] | None


def header_pairs(headers: HeadersArg) -> list[tuple[str, str]]:
    """A new list of (name, value) str pairs: safe to keep after the caller changes theirs."""
    if headers is None:
        return []
    if isinstance(headers, Mapping):
        return [(str(k), str(v)) for k, v in headers.items()]
    return [(str(k), str(v)) for k, v in headers]


def header_list(headers: HeadersArg) -> list[tuple[str, str]]:
    """(name, value) pairs to read at once: a list is returned as it is (the hot path: callers
    building lists of pairs already have str pairs), anything else as `header_pairs`."""
    if type(headers) is list:
        return headers
    return header_pairs(headers)


def ack_headers(version: str, message: Frame, transaction: str | None) -> list[tuple[str, str]]:
    """The headers of an ACK or NACK of `message`, in STOMP `version`."""
    if version == "1.2":
        ack_id = message.get("ack")
        if ack_id is None:
            raise ClientError("MESSAGE has no ack header (subscribed with ack:auto?)")
        headers = [("id", ack_id)]
    else:
        message_id = message.get("message-id")
        if message_id is None:
            raise ClientError("MESSAGE has no message-id header")
        headers = [("message-id", message_id)]
        subscription = message.get("subscription")
        if version == "1.1" and subscription is not None:
            headers.append(("subscription", subscription))
    if transaction is not None:
        headers.append(("transaction", transaction))
    return headers
