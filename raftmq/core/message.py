"""The message value the core stores and hands out in Deliver effects."""

from __future__ import annotations

from typing import Any, ClassVar, Final

from raftmq.hot_values import HotValue
from raftmq.protocol.header_block import user_block

DEFAULT_PRIORITY = 4

# A group member's reference to a stored body: (Raft index of the entry that carried the Send,
# ordinal of the Send among that entry's Sends, body size in bytes). The core counts a
# destination's bytes by the size (`body_size`); the core mints them itself (Broker.begin_entry),
# on the members and in the audit's replay alike. A plain tuple at run time (a
# NamedTuple's constructor would cost the follower's apply path per SEND); a snapshot holds it
# as a msgpack array, so a restored state holds a list, or 2 items when written before
# references carried sizes.
BodyRef = tuple[int, int, int]


class Message(HotValue):
    """A stored message.

    `body` is opaque to the core: plain `bytes` with the in-memory log, a reference into a
    journal segment once bodies live on disk. The core never looks inside it.
    `headers` are the user headers' block as sent (raftmq.protocol.header_block), transport
    headers removed.
    Every field but `delivery_count` keeps its value once the message is stored; copies for
    a topic's subscriptions or the dead-letter and expiry queues are new `Message`s.

    Written out (raftmq.hot_values) and compiled: a dataclass's generated `__init__` runs as
    Python even in a compiled module, once per message stored on every member.
    """

    __match_args__: ClassVar[tuple[str, ...]] = (
        "message_id", "destination", "headers", "body", "priority", "expires", "timestamp", "group", "persistent",
        "delivery_count",
    )
    __slots__ = __match_args__

    def __init__(self, message_id: str, destination: str, headers: str, body: Any,
                 priority: int = DEFAULT_PRIORITY, expires: int = 0, timestamp: int = 0, group: str | None = None,
                 persistent: bool = False, delivery_count: int = 0) -> None:
        self.message_id: Final = message_id
        self.destination: Final = destination
        self.headers: Final = headers
        self.body: Final = body
        self.priority: Final = priority
        self.expires: Final = expires  # ms since the epoch; 0 = never
        self.timestamp: Final = timestamp  # ms since the epoch, from the Send command
        self.group: Final = group  # JMSXGroupID
        self.persistent: Final = persistent
        self.delivery_count = delivery_count  # how many times it was handed to a consumer

    def __hash__(self) -> int:  # delivery_count changes: equal by value, never a key (as the dataclass was)
        raise TypeError("unhashable type: 'Message'")


def dump_message(message: Message) -> list[Any]:
    """A message as plain data (snapshots)."""
    return [
        message.message_id,
        message.destination,
        message.headers,
        message.body,
        message.priority,
        message.expires,
        message.timestamp,
        message.group,
        message.persistent,
        message.delivery_count,
    ]


def load_message(record: list[Any]) -> Message:
    message_id, destination, headers, body, priority, expires, timestamp, group, persistent, count = record
    # Headers as a block, or (written before blocks) as [name, value] pairs.
    block = headers if isinstance(headers, str) else user_block((name, value) for name, value in headers)
    return Message(message_id, destination, block, body, priority, expires, timestamp, group, persistent, count)


def body_size(body: Any) -> int:
    """A stored body's size in bytes: the bytes', or the one a body reference carries
    (`BodyRef`); 0 when neither says (a reference written before references carried sizes)."""
    if type(body) is tuple:  # in a group every stored body is a reference: look for one first
        if len(body) <= 2:
            return 0
        size: object = body[2]
        if isinstance(size, int):
            return size  # read without a call (and, compiled, never boxed again: no conditional expression)
        other: Any = size  # a float or a string a foreign writer may have left
        return int(other)
    if isinstance(body, (bytes, bytearray)):
        return len(body)
    if isinstance(body, list) and len(body) > 2:
        return int(body[2])
    return 0
