"""Temporary destinations: `/temp-queue/NAME` and `/temp-topic/NAME`, private to the
connection that names them and deleted with it (ActiveMQ's and RabbitMQ's STOMP adapters).

The STOMP layer turns a session's `/temp-queue/NAME` (in SUBSCRIBE, SEND and a SEND's
`reply-to`) into `/queue/$temp.TOKEN.NAME`, TOKEN being a digest of the session id: a name
another connection can send to — a responder copies `reply-to` into its SEND's destination,
on this group or, through cluster connections, on another — but only the owner may consume.

In the core a temporary destination is an ordinary queue or topic plus its owner's record
(raftmq.core.temp_owners). This module only names them.
"""

from __future__ import annotations

import hashlib

from raftmq.core.validation import QUEUE_PREFIX, TOPIC_PREFIX

TEMP_QUEUE = "/temp-queue/"
TEMP_TOPIC = "/temp-topic/"
MARK = "$temp."
TOKEN_LENGTH = 16


def token_of(session_id: str) -> str:
    """The owner part of a session's temporary destination names."""
    return hashlib.blake2b(session_id.encode(), digest_size=TOKEN_LENGTH // 2).hexdigest()


def is_temp_alias(destination: str) -> bool:
    """`/temp-queue/NAME` or `/temp-topic/NAME`: what a client writes."""
    return destination.startswith((TEMP_QUEUE, TEMP_TOPIC))


def private_name(alias: str, session_id: str, group: str | None = None) -> str:
    """`/temp-queue/NAME` of session `session_id` -> `/queue/$temp.TOKEN.NAME`, or in a
    cluster of groups `/queue/$temp.TOKEN~GROUP~.NAME` (GROUP: the owner's, so that a reply
    sent from another group goes straight there; `~` is in no group name)."""
    if alias.startswith(TEMP_QUEUE):
        prefix, name = QUEUE_PREFIX, alias[len(TEMP_QUEUE):]
    else:
        prefix, name = TOPIC_PREFIX, alias[len(TEMP_TOPIC):]
    home = f"~{group}~" if group else ""
    return f"{prefix}{MARK}{token_of(session_id)}{home}.{name}"


def _parts(destination: str) -> tuple[str, str | None, str] | None:
    """(token, home group, NAME) of a temporary destination's name, ("", None, "") for a
    malformed one, None for any other destination."""
    if MARK not in destination:
        return None  # the common case, decided at once
    for prefix in (QUEUE_PREFIX, TOPIC_PREFIX):
        if destination.startswith(prefix + MARK):
            rest = destination[len(prefix) + len(MARK):]
            token, rest = rest[:TOKEN_LENGTH], rest[TOKEN_LENGTH:]
            home = None
            if rest.startswith("~"):
                end = rest.find("~", 1)
                home, rest = (rest[1:end], rest[end + 1:]) if end > 1 else (None, "")
            if len(token) == TOKEN_LENGTH and rest.startswith(".") and len(rest) > 1:
                return token, home, rest[1:]
            return "", None, ""  # a malformed temporary name: nobody owns it
    return None


def owner_token(destination: str) -> str | None:
    """TOKEN of a temporary destination ("" when malformed); None for any other destination."""
    parts = _parts(destination)
    return None if parts is None else parts[0]


def home_group(destination: str) -> str | None:
    """The owner's group a temporary destination names, if any."""
    parts = _parts(destination)
    return None if parts is None else parts[1]


def alias_of(destination: str) -> str:
    """`/queue/$temp.TOKEN....NAME` -> `/temp-queue/NAME` (the id of a reply-to's own subscription)."""
    parts = _parts(destination)
    kind = TEMP_QUEUE if destination.startswith(QUEUE_PREFIX) else TEMP_TOPIC
    return kind + (parts[2] if parts is not None else "")
