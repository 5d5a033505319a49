"""Commands: the only input of the broker core, and what the replicated log carries.

Each command is a frozen value. Time (`now`, ms since the epoch) and ids arrive inside the
command so that `Broker.apply` stays deterministic. `session` is an opaque id the node that
owns the connection assigns; it is unique across nodes and restarts.

`receipt` (when not None) asks the core to emit a `Receipt` effect once the command is applied,
which, because commands are applied only after they are committed, is after commit.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar, Final

from raftmq.hot_values import HotValue
from raftmq.values import value

Headers = tuple[tuple[str, str], ...]

ACK_AUTO = "auto"
ACK_CLIENT = "client"  # cumulative
ACK_CLIENT_INDIVIDUAL = "client-individual"
ACK_MODES = (ACK_AUTO, ACK_CLIENT, ACK_CLIENT_INDIVIDUAL)


@value
class Connect:
    session: str
    now: int
    login: str | None = None
    client_id: str | None = None


@value
class Disconnect:
    """The session is gone (DISCONNECT frame, socket closed, ERROR sent, or its node lost leadership).

    Non-durable subscriptions end, durable ones go inactive, open transactions abort, and every
    unacknowledged delivery returns to its queue flagged redelivered.
    """

    session: str
    now: int
    receipt: str | None = None


@value
class Subscribe:
    session: str
    sub_id: str
    destination: str  # "/queue/NAME" or "/topic/NAME"
    now: int
    ack: str = ACK_AUTO
    selector: str | None = None
    prefetch: int = 0  # 0 = the core's default prefetch
    exclusive: bool = False
    durable_name: str | None = None  # topic subscriptions only: survives disconnects
    receipt: str | None = None


@value
class Unsubscribe:
    session: str
    sub_id: str
    now: int
    drop_durable: bool = False  # also delete the durable subscription and its messages
    receipt: str | None = None


# Send, Ack and Nack, made for every message on every member, are written out rather than
# `@value`: compiled (raftmq.compiled), a native class's own `__init__` is C, where a dataclass's
# generated one runs as Python (0.13 against 0.03 µs per record), and the core reads their fields
# as struct members. Their fields are `Final` (mypy refuses an assignment, and the compiled build
# at run time); `__match_args__` names them in order, as a dataclass's does, and `HotValue` gives
# them a value's equality, hash and repr by those fields.


class Send(HotValue):
    __match_args__: ClassVar[tuple[str, ...]] = (
        "session", "destination", "headers", "body", "now", "transaction", "receipt")
    __slots__ = __match_args__

    def __init__(self, session: str, destination: str, headers: str, body: object, now: int,
                 transaction: str | None = None, receipt: str | None = None) -> None:
        self.session: Final = session
        self.destination: Final = destination
        # The user headers' block (raftmq.protocol.header_block); the core reads priority,
        # expires, persistent, JMSXGroupID and _AMQ_DUPL_ID from it.
        self.headers: Final = headers
        self.body: Final = body  # bytes, or a body reference once bodies live in journal segments
        self.now: Final = now
        self.transaction: Final = transaction
        self.receipt: Final = receipt


class _Settle(HotValue):
    """Ack and Nack: a delivery settled, named by `ack_id` (STOMP 1.2: the MESSAGE frame's `ack`
    header) or by `message_id` (1.0/1.1, with `subscription` in 1.1); exactly one is set."""

    __match_args__: ClassVar[tuple[str, ...]] = (
        "session", "now", "ack_id", "message_id", "subscription", "transaction", "receipt")
    __slots__ = __match_args__

    def __init__(self, session: str, now: int, ack_id: str | None = None, message_id: str | None = None,
                 subscription: str | None = None, transaction: str | None = None, receipt: str | None = None) -> None:
        self.session: Final = session
        self.now: Final = now
        self.ack_id: Final = ack_id
        self.message_id: Final = message_id
        self.subscription: Final = subscription
        self.transaction: Final = transaction
        self.receipt: Final = receipt


class Ack(_Settle):
    """Acknowledge a delivery."""

    __slots__ = ()


class Nack(_Settle):
    """Refuse a delivery: it returns to its queue (redelivered), or to the dead-letter queue
    once its delivery count reaches the configured maximum."""

    __slots__ = ()


@value
class Begin:
    session: str
    transaction: str
    now: int
    receipt: str | None = None


@value
class Commit:
    session: str
    transaction: str
    now: int
    receipt: str | None = None


@value
class Abort:
    session: str
    transaction: str
    now: int
    receipt: str | None = None


@value
class Tick:
    """Time passes: expire messages whose `expires` is at or before `now`."""

    now: int


# A browse answers with at most this many copies: every member applies (and so computes) it.
MAX_BROWSE_LIMIT = 10_000
DEFAULT_BROWSE_LIMIT = 1_000


@value
class Browse:
    """A queue browser (ActiveMQ's SUBSCRIBE with `browser:true`): copies of up to `limit`
    ready messages of the queue `destination`, in the order consumers would get them (best
    priority first, then arrival), then a `BrowseEnd`.

    A replicated read: it changes nothing (no delivery, no ack id, no delivery count, no new
    queue) and leaves no subscription behind. Applied in log order, so it sees every message
    whose SEND was acknowledged before it, like a consumer would."""

    session: str
    sub_id: str
    destination: str
    now: int
    limit: int = DEFAULT_BROWSE_LIMIT
    selector: str | None = None
    receipt: str | None = None


@value
class Noop:
    """Changes nothing; its receipt comes in order with the session's other commands. The
    shell appends it for a frame the core need not see whose RECEIPT must still not overtake
    earlier ones (UNSUBSCRIBE of a browser subscription, which ended with its BrowseEnd)."""

    session: str
    now: int
    receipt: str | None = None


@value
class Recover:
    """Copy the topics' retained messages that subscription `sub_id` matches into it
    (raftmq.core.retained): proposed after its Subscribe, by an MQTT session."""

    session: str
    sub_id: str
    now: int


@value
class Will:
    """The message session `session` leaves behind, published when it ends without the
    client's goodbye (raftmq.core.wills); no `destination` clears it (the goodbye). `body` is
    bytes, kept in the state; `delay_ms` publishes it that much later (MQTT 5's will delay)."""

    session: str
    destination: str
    headers: str
    body: bytes
    now: int
    delay_ms: int = 0


@value
class Release:
    """An MQTT QoS 2 publication's key is done with (raftmq.core.exactly_once): the PUBREL, or
    with `every` each key that begins with `key` (the end of a session the client does not keep)."""

    session: str
    key: str
    now: int
    every: bool = False
    receipt: str | None = None


@value
class Hold:
    """Keep `key` among the MQTT keys (raftmq.core.exactly_once) until a `Release` of it: what an
    MQTT session the client keeps marks itself with, so that a later connection finds it."""

    session: str
    key: str
    now: int


@value
class Share:
    """Consume the shared subscription of group `group` on topic `destination` (MQTT's
    `$share/GROUP/FILTER`; raftmq.core.shares) as `sub_id`: one copy of what the topic gets,
    waiting in a queue of its own, competed for by every session that shares it. `holder` names
    a session the client keeps (the share keeps collecting for it while it is away, until an
    Unsubscribe with `drop_durable`); without one, the share is this session's while it lives."""

    session: str
    sub_id: str
    group: str
    destination: str
    now: int
    ack: str = ACK_AUTO
    prefetch: int = 0
    holder: str | None = None
    receipt: str | None = None


@value
class Expiry:
    """What is kept under `key` (an MQTT client's prefix: its kept subscriptions, shares and QoS 2
    keys) lives `after_ms` after session `session` ends (MQTT 5's session expiry; -1: until the
    client ends it), unless another session claims the key first; claiming it also cancels a will
    still waiting out its delay (raftmq.core.lifetimes)."""

    session: str
    key: str
    now: int
    after_ms: int


MANAGE_OPS = ("create", "purge", "delete", "retry", "move", "close")


@value
class Manage:
    """An operator's change from the admin API (raftmq.core.manage): create, purge or delete
    `destination`; retry (to each message's original destination) or move (to `target`) the
    ready messages of `destination` named by `ids`, matched by `selector`, or `every` one;
    close the client session `closing`. Who may ask was checked before it was proposed.
    The answer is a `Managed` effect for `request`, the admin request's id (no session)."""

    request: str
    op: str
    now: int
    destination: str = ""
    target: str | None = None
    ids: tuple[str, ...] = ()
    selector: str | None = None
    every: bool = False
    closing: str | None = None


Command = (Connect | Disconnect | Subscribe | Unsubscribe | Send | Ack | Nack | Begin | Commit | Abort | Tick | Browse
           | Noop | Manage | Recover | Will | Release | Hold | Share | Expiry)

COMMAND_TYPES: tuple[type, ...] = (
    Connect, Disconnect, Subscribe, Unsubscribe, Send, Ack, Nack, Begin, Commit, Abort, Tick, Browse, Noop, Manage,
    Recover, Will, Release, Hold, Share, Expiry,
)


def unawaited(commands: Sequence[Command]) -> bool:
    """True when no client waits on these commands' outcome: each is an ACK or NACK that asked
    for no receipt (STOMP: fire and forget). Committed a little later, they change nothing a
    client was promised; the commit log may let them wait for company (`RaftTimings.settle_wait_ms`)."""
    for command in commands:
        if not isinstance(command, _Settle) or command.receipt is not None:
            return False
    return len(commands) > 0
