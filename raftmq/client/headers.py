"""Extra STOMP headers as the clients' callers pass them: a mapping, pairs, or None."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

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
