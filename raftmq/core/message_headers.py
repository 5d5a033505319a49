"""What the core reads of a SEND's headers (priority, expires, persistent, message group,
duplicate-detection id): one pass, the first occurrence of a repeated header winning."""

from __future__ import annotations

from raftmq.core.commands import Headers
from raftmq.core.message import DEFAULT_PRIORITY
from raftmq.core.model import PRIORITY_LEVELS


def _parse_priority(value: str) -> int:
    try:
        priority = int(value)
    except ValueError:
        return DEFAULT_PRIORITY
    return min(max(priority, 0), PRIORITY_LEVELS - 1)


def _parse_expires(value: str) -> int:
    try:
        expires = int(value)
    except ValueError:
        return 0
    return max(expires, 0)


def read_headers(headers: Headers) -> tuple[int, int, bool, str | None, str | None]:
    """What the core reads of a SEND's headers: priority, expires, persistent, JMSXGroupID and
    _AMQ_DUPL_ID (the first occurrence of a repeated header wins)."""
    priority = DEFAULT_PRIORITY
    expires = 0
    persistent = False
    group = None
    dupl_id = None
    # Reversed, so that the first occurrence of a repeated header is the one that sticks.
    for name, value in reversed(headers):
        if name == "priority":
            priority = _parse_priority(value)
        elif name == "expires":
            expires = _parse_expires(value)
        elif name == "persistent":
            persistent = value.lower() == "true"
        elif name == "JMSXGroupID":
            group = value or None
        elif name == "_AMQ_DUPL_ID":
            dupl_id = value or None
    return priority, expires, persistent, group, dupl_id
