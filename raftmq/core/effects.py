"""Effects: the only output of the broker core. The node's asyncio shell executes them.

Every replica computes the same effects; only the node that owns `session` acts on them, the
others drop them. A member that serves no session (a follower) applies quietly
(`Broker.begin_entry`): its core builds no `Deliver` for a delivery and no `Receipt`.
"""

from __future__ import annotations

from typing import ClassVar, Final

from raftmq.core.message import Message
from raftmq.hot_values import HotValue
from raftmq.values import value

# Deliver and Receipt, made for every message on the leader, are written out rather than `@value`,
# as raftmq.core.commands explains for Send: compiled, they are native classes.


class Deliver(HotValue):
    """Send `message` to subscription `sub_id` of `session` as a MESSAGE frame.

    `ack_id` goes in the STOMP 1.2 `ack` header (None for ack mode auto, which needs no ack).
    `redelivered` and `delivery_count` tell the consumer it may have seen this message before.
    `message` is the core's stored record, not a copy: its `delivery_count` goes on counting
    with later deliveries, so read this effect's `delivery_count`, which stays as it was.
    `destination` is the subscription's destination (for a topic copy: the topic; for a
    pattern's: the topic published to).
    """

    __match_args__: ClassVar[tuple[str, ...]] = (
        "session", "sub_id", "destination", "message", "ack_id", "redelivered", "delivery_count")
    __slots__ = __match_args__

    def __init__(self, session: str, sub_id: str, destination: str, message: Message, ack_id: str | None,
                 redelivered: bool, delivery_count: int) -> None:
        self.session: Final = session
        self.sub_id: Final = sub_id
        self.destination: Final = destination
        self.message: Final = message
        self.ack_id: Final = ack_id
        self.redelivered: Final = redelivered
        self.delivery_count: Final = delivery_count


class Receipt(HotValue):
    __match_args__: ClassVar[tuple[str, ...]] = ("session", "receipt_id")
    __slots__ = __match_args__

    def __init__(self, session: str, receipt_id: str) -> None:
        self.session: Final = session
        self.receipt_id: Final = receipt_id


@value
class Reject:
    """The command broke a rule the core checks (unknown transaction, unknown ack id, duplicate
    subscription id, ...). The shell sends an ERROR frame and closes the connection."""

    session: str
    message: str
    detail: str = ""
    receipt_id: str | None = None


@value
class BrowseEnd:
    """The end of a browse (after its copies, as Deliver effects with no ack id): the shell
    writes a MESSAGE with `browser:end` and no body. `count` copies were sent; `truncated`
    when the queue held more matching messages than the browse's limit."""

    session: str
    sub_id: str
    destination: str
    count: int
    truncated: bool


@value
class Managed:
    """The outcome of a `Manage` command, for the admin request `session` (its request id):
    `error` None when it was done, else why not; `counts` what it did (e.g. ("moved", 3))."""

    session: str
    error: str | None
    counts: tuple[tuple[str, int], ...] = ()


Effect = Deliver | Receipt | Reject | BrowseEnd | Managed
