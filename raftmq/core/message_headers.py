"""What the core reads of a SEND's headers (priority, expires, persistent, message group,
duplicate-detection id), from its block, the first occurrence of a repeated header winning."""

from __future__ import annotations

from raftmq.core.message import DEFAULT_PRIORITY
from raftmq.core.model import PRIORITY_LEVELS
from raftmq.protocol.header_block import first_is, first_of, key

_PRIORITY, _EXPIRES, _PERSISTENT = key("priority"), key("expires"), key("persistent")
_GROUP, _DUPL_ID = key("JMSXGroupID"), key("_AMQ_DUPL_ID")


def _parse_priority(value: str) -> int:
    try:
        priority = int(value)
    except ValueError:
        return DEFAULT_PRIORITY
    return min(max(priority, 0), PRIORITY_LEVELS - 1)


def _is_true(value: str | None) -> bool:
    return value is not None and value.lower() == "true"


def _parse_expires(value: str) -> int:
    try:
        expires = int(value)
    except ValueError:
        return 0
    return max(expires, 0)


def read_headers(headers: str) -> tuple[int, int, bool, str | None, str | None]:
    """What the core reads of a SEND's header block: priority, expires, persistent, JMSXGroupID
    and _AMQ_DUPL_ID (the first occurrence of a repeated header wins). A few searches of the
    block's text: no header is taken apart that the core does not read."""
    if not headers:
        return DEFAULT_PRIORITY, 0, False, None, None
    value = first_of(headers, _PRIORITY)
    priority = DEFAULT_PRIORITY if value is None else _parse_priority(value)
    value = first_of(headers, _EXPIRES)
    expires = 0 if value is None else _parse_expires(value)
    # The usual "true" compared in place; any other value read out and compared without case.
    persistent = first_is(headers, _PERSISTENT, "true") or _is_true(first_of(headers, _PERSISTENT))
    return priority, expires, persistent, first_of(headers, _GROUP) or None, first_of(headers, _DUPL_ID) or None
