"""STOMP client frames → broker commands, with the checks the shell can make on its own.

Everything a session can check without the core (required headers, destinations, ack modes,
selectors, transactions it began, subscription ids it holds) is checked here, before the
command is appended: a frame that fails raises `ProtocolError`, the session answers with ERROR
and closes, and nothing after that frame reaches the log. What only the core can know (an ack
id it never handed out, a durable subscription active elsewhere) comes back as a Reject
effect after commit, when commands pipelined behind the frame are already in the log.
"""

from __future__ import annotations

from collections.abc import Callable

from raftmq.core.commands import (
    ACK_AUTO,
    ACK_MODES,
    DEFAULT_BROWSE_LIMIT,
    MAX_BROWSE_LIMIT,
    Abort,
    Ack,
    Begin,
    Browse,
    Command,
    Commit,
    Disconnect,
    Nack,
    Noop,
    Send,
    Subscribe,
    Unsubscribe,
)
from raftmq.core.exactly_once import ONCE
from raftmq.core.selector import compile_selector
from raftmq.core.temporary import TEMP_QUEUE, TEMP_TOPIC, is_temp_alias, private_name
from raftmq.errors import ProtocolError, SelectorError
from raftmq.protocol.frame import Frame
from raftmq.protocol.header_block import block_of, first, first_of, key, pairs_of, user_block
from raftmq.routing.route import CONTROL_DESTINATION, HEADER_PREFIX, RESENT_HEADER, SF_PREFIX, is_internal

QUEUE_PREFIX = "/queue/"
TOPIC_PREFIX = "/topic/"
PREFETCH_HEADERS = ("activemq.prefetchSize", "prefetch-count")
BROWSE_LIMIT_HEADER = "browser-limit"  # ours: ActiveMQ browsers have no limit
_DESTINATION, _TRANSACTION, _RECEIPT = key("destination"), key("transaction"), key("receipt")
_ID, _MESSAGE_ID, _SUBSCRIPTION = key("id"), key("message-id"), key("subscription")


def check_destination(destination: str | None, command: str) -> str:
    if destination is None:
        raise ProtocolError(f"{command} requires a destination header", f"{command} frame without 'destination'")
    if destination.startswith(QUEUE_PREFIX):
        prefix = len(QUEUE_PREFIX)
    elif destination.startswith(TOPIC_PREFIX):
        prefix = len(TOPIC_PREFIX)
    else:
        raise ProtocolError(
            "invalid destination",
            f"destination {destination!r} must be /queue/NAME (anycast) or /topic/NAME (multicast)",
        )
    if len(destination) == prefix:  # the name after the prefix is empty (no slice made to see it)
        raise ProtocolError("invalid destination", f"destination {destination!r} has an empty name")
    return destination


# What `/temp-queue/` and `/temp-topic/` start with.
_TEMP_PREFIX = "/temp-"
assert TEMP_QUEUE.startswith(_TEMP_PREFIX) and TEMP_TOPIC.startswith(_TEMP_PREFIX)


def _required(frame: Frame, name: str) -> str:
    value = frame.get(name)
    if value is None or value == "":
        raise ProtocolError(f"{frame.command} requires the {name} header", f"{frame.command} frame without {name!r}")
    return value


def _is_true(value: str | None) -> bool:
    return value is not None and value.lower() == "true"


def _refuse_reserved(block: str) -> None:
    """A client's SEND naming a header of the cluster's own (`_raftmq_to`, `_raftmq_id`, ...):
    the core would route or deduplicate by it. Only the failover client's resend mark is a
    client's to set. Nor is MQTT's QoS 2 key (`mqtt-once`, raftmq.core.exactly_once): with
    another client's key, a SEND would have that client's next QoS 2 publication dropped."""
    for name, _ in pairs_of(block):
        if name.startswith(HEADER_PREFIX) and name != RESENT_HEADER:
            raise ProtocolError("reserved header", f"{name!r}: {HEADER_PREFIX} headers belong to the cluster's bridges")
        if name == ONCE:
            raise ProtocolError("reserved header", f"{name!r} is MQTT's own (its QoS 2 publications)")


class FrameTranslator:
    """Turns one session's frames into commands; holds what the shell must remember to check
    them (the negotiated version, the client id, open transactions, live subscription ids)."""

    __slots__ = (
        "_table", "bridge", "browsers", "client_id", "edges", "group", "pullable", "session_id", "subscriptions",
        "transactions", "version",
    )

    def __init__(self, session_id: str, version: str, client_id: str | None, pullable: frozenset[str] = frozenset(),
                 group: str | None = None, bridge: bool = False, edges: bool = False) -> None:
        self.session_id = session_id
        # a cluster connection (a neighbour's bridge, the drain tool): its SENDs may carry the
        # cluster's own `_raftmq_` headers, which the core acts on; anyone else's may not
        self.bridge = bridge
        self.group = group  # in a cluster of groups, this one's: temporary destinations name it
        # store-and-forward queues a neighbour's bridge pulls (raftmq.server.links.passive_link)
        self.pullable = pullable
        # this group accepts edges (embedded brokers it lists nowhere): any other group's
        # store-and-forward queue may be an edge's to pull (the core checks who asks)
        self.edges = edges
        self.version = version
        self.client_id = client_id
        self.transactions: set[str] = set()
        self.subscriptions: set[str] = set()
        self.browsers: set[str] = set()  # ids of browser subscriptions (ended, until UNSUBSCRIBE)
        self._table: dict[str, Callable[[Frame, int], Command]] = {
            "SEND": self._send,
            "SUBSCRIBE": self._subscribe,
            "UNSUBSCRIBE": self._unsubscribe,
            "ACK": self._ack,
            "NACK": self._nack,
            "BEGIN": self._begin,
            "COMMIT": self._commit,
            "ABORT": self._abort,
            "DISCONNECT": self._disconnect,
        }

    def translate(self, frame: Frame, now: int) -> Command:
        command = frame.command
        # Every message's frames called directly: compiled, a call through the table boxes `now`.
        if command == "SEND":
            return self._send(frame, now)
        if command == "ACK":
            return self._ack(frame, now)
        handler = self._table.get(command)
        if handler is None:
            if frame.command in ("CONNECT", "STOMP"):
                raise ProtocolError("already connected", "a second CONNECT on one connection is not allowed")
            raise ProtocolError("unknown command", f"{frame.command!r} is not a STOMP client frame")
        return handler(frame, now)

    def _send(self, frame: Frame, now: int) -> Command:
        block = frame.block
        if block is not None:  # as the parser kept it: read what the shell checks from the text
            text = frame.text
            assert text is not None
            destination_header = first_of(text, _DESTINATION)
            transaction = first_of(text, _TRANSACTION)
            receipt = first_of(text, _RECEIPT)
        else:
            headers = frame.headers
            given = dict(reversed(headers))  # STOMP: the first occurrence of a header wins
            destination_header = given.get("destination")
            transaction, receipt = given.get("transaction"), given.get("receipt")
            block = user_block(headers)
        destination = check_destination(self._private(destination_header), "SEND")
        if is_internal(destination) and destination != CONTROL_DESTINATION:
            raise ProtocolError("reserved destination",
                                f"{destination!r}: $.raftmq. names belong to the cluster's bridges")
        if transaction is not None and transaction not in self.transactions:
            raise ProtocolError("unknown transaction", f"transaction {transaction!r} was not begun on this connection")
        if (HEADER_PREFIX in block or "mqtt-once:" in block) and not self.bridge:
            _refuse_reserved(block)
        if "reply-to:" in block:
            reply = first(block, "reply-to")
            if reply is not None and is_temp_alias(reply):  # a responder elsewhere must be able to send to it
                private = private_name(reply, self.session_id, self.group)
                block = block_of([(name, private if name == "reply-to" else value) for name, value in pairs_of(block)])
        return Send(self.session_id, destination, block, frame.body, now, transaction, receipt)

    def _private(self, destination: str | None) -> str | None:
        """This session's `/temp-queue/NAME` or `/temp-topic/NAME` as the core names it."""
        # The common prefix first: compiled, a plain `startswith` makes nothing, where the call
        # into raftmq.core.temporary builds its tuple of prefixes.
        if destination is not None and destination.startswith(_TEMP_PREFIX) and is_temp_alias(destination):
            return private_name(destination, self.session_id, self.group)
        return destination

    def _edge_pulls(self, destination: str) -> bool:
        return (self.edges and destination.startswith(SF_PREFIX) and len(destination) > len(SF_PREFIX)
                and destination != SF_PREFIX + (self.group or ""))

    def _subscribe(self, frame: Frame, now: int) -> Command:
        destination = check_destination(self._private(frame.get("destination")), "SUBSCRIBE")
        if is_internal(destination) and destination not in self.pullable and not self._edge_pulls(destination):
            raise ProtocolError("reserved destination",
                                f"{destination!r}: $.raftmq. names belong to the cluster's bridges")
        sub_id = frame.get("id")
        if sub_id is None or sub_id == "":
            if self.version != "1.0":
                raise ProtocolError("SUBSCRIBE requires an id header", "STOMP 1.1 and 1.2 require 'id' on SUBSCRIBE")
            sub_id = destination  # 1.0: one subscription per destination
        if sub_id in self.subscriptions or sub_id in self.browsers:
            raise ProtocolError("duplicate subscription id", f"subscription {sub_id!r} already exists here")
        if _is_true(frame.get("browser")):
            return self._browse(frame, now, destination, sub_id)
        ack = frame.get("ack", ACK_AUTO)
        if ack not in ACK_MODES:
            raise ProtocolError("invalid ack mode", f"ack must be one of {', '.join(ACK_MODES)}, got {ack!r}")
        prefetch = 0
        for name in PREFETCH_HEADERS:
            raw = frame.get(name)
            if raw is not None:
                if not raw.strip().isdigit():
                    raise ProtocolError(f"invalid {name} header", f"{name} must be a non-negative integer, got {raw!r}")
                prefetch = int(raw)
                break
        selector = _checked_selector(frame)
        durable_name = None
        if destination.startswith(TOPIC_PREFIX):
            durable_name = self._durable_name(frame, sub_id)
        self.subscriptions.add(sub_id)
        return Subscribe(
            self.session_id,
            sub_id,
            destination,
            now,
            ack,
            selector,
            prefetch,
            _is_true(frame.get("activemq.exclusive")),
            durable_name,
            frame.get("receipt"),
        )

    def _browse(self, frame: Frame, now: int, destination: str, sub_id: str) -> Command:
        """ActiveMQ's queue browser: copies of the queue's messages, then `browser:end`."""
        if not destination.startswith(QUEUE_PREFIX):
            raise ProtocolError("browsing works on queues",
                                f"browser:true needs a /queue/ destination, got {destination!r}")
        limit = DEFAULT_BROWSE_LIMIT
        raw = frame.get(BROWSE_LIMIT_HEADER)
        if raw is not None:
            if not raw.strip().isdigit() or not 0 < int(raw) <= MAX_BROWSE_LIMIT:
                detail = f"{BROWSE_LIMIT_HEADER} must be an integer from 1 to {MAX_BROWSE_LIMIT}, got {raw!r}"
                raise ProtocolError(f"invalid {BROWSE_LIMIT_HEADER} header", detail)
            limit = int(raw)
        selector = _checked_selector(frame)
        self.browsers.add(sub_id)
        return Browse(self.session_id, sub_id, destination, now, limit, selector, frame.get("receipt"))

    def _durable_name(self, frame: Frame, sub_id: str) -> str | None:
        activemq_name = frame.get("activemq.subscriptionName")
        if activemq_name is not None:
            # ActiveMQ: a durable subscriber is named by (client-id, subscriptionName).
            if not self.client_id:
                raise ProtocolError(
                    "durable subscription requires client-id",
                    "activemq.subscriptionName needs a client-id header on CONNECT",
                )
            return f"{self.client_id}:{activemq_name}"
        if _is_true(frame.get("durable")) or _is_true(frame.get("persistent")):
            # RabbitMQ: the subscription id names the durable subscription.
            return f"{self.client_id}:{sub_id}" if self.client_id else sub_id
        return None

    def _unsubscribe(self, frame: Frame, now: int) -> Command:
        sub_id = frame.get("id")
        if (sub_id is None or sub_id == "") and self.version == "1.0":
            sub_id = frame.get("destination")
        if sub_id is None or sub_id == "":
            raise ProtocolError("UNSUBSCRIBE requires an id header", "UNSUBSCRIBE frame without 'id'")
        if sub_id in self.browsers:
            self.browsers.discard(sub_id)  # it ended with browser:end; only a receipt is owed
            return Noop(self.session_id, now, frame.get("receipt"))
        if sub_id not in self.subscriptions:
            raise ProtocolError("unknown subscription", f"no subscription {sub_id!r} on this connection")
        self.subscriptions.discard(sub_id)
        drop_durable = (
            frame.get("activemq.subscriptionName") is not None
            or _is_true(frame.get("durable"))
            or _is_true(frame.get("persistent"))
        )
        return Unsubscribe(self.session_id, sub_id, now, drop_durable, frame.get("receipt"))

    def _ack_fields(self, frame: Frame) -> tuple[str | None, str | None, str | None, str | None, str | None]:
        """(ack_id, message_id, subscription, transaction, receipt) of an ACK or NACK."""
        text = frame.text
        if text is not None:  # as the parser kept it: read from the text, no header pairs made
            ack_id, message_id = first_of(text, _ID), first_of(text, _MESSAGE_ID)
            subscription = first_of(text, _SUBSCRIPTION)
            transaction, receipt = first_of(text, _TRANSACTION), first_of(text, _RECEIPT)
        else:
            first = dict(reversed(frame.headers))
            ack_id, message_id, subscription = first.get("id"), first.get("message-id"), first.get("subscription")
            transaction, receipt = first.get("transaction"), first.get("receipt")
        if self.version == "1.2":
            if not ack_id:
                raise ProtocolError(f"{frame.command} requires the id header", "STOMP 1.2 names the delivery by 'id'")
            message_id = subscription = None
        else:
            ack_id = None
            if not message_id:
                detail = "STOMP 1.0/1.1 name the message by 'message-id'"
                raise ProtocolError(f"{frame.command} requires the message-id header", detail)
        if transaction is not None and transaction not in self.transactions:
            raise ProtocolError("unknown transaction", f"transaction {transaction!r} was not begun on this connection")
        return ack_id, message_id, subscription, transaction, receipt

    # The fields unpacked by name, not with `*`: compiled, the tuple then stays a C struct.
    def _ack(self, frame: Frame, now: int) -> Command:
        ack_id, message_id, subscription, transaction, receipt = self._ack_fields(frame)
        return Ack(self.session_id, now, ack_id, message_id, subscription, transaction, receipt)

    def _nack(self, frame: Frame, now: int) -> Command:
        if self.version == "1.0":
            raise ProtocolError("unknown command", "NACK is not part of STOMP 1.0")
        ack_id, message_id, subscription, transaction, receipt = self._ack_fields(frame)
        return Nack(self.session_id, now, ack_id, message_id, subscription, transaction, receipt)

    def _begin(self, frame: Frame, now: int) -> Command:
        transaction = _required(frame, "transaction")
        if transaction in self.transactions:
            raise ProtocolError("transaction already begun", f"transaction {transaction!r} is already open")
        self.transactions.add(transaction)
        return Begin(self.session_id, transaction, now, frame.get("receipt"))

    def _finish_transaction(self, frame: Frame) -> str:
        transaction = _required(frame, "transaction")
        if transaction not in self.transactions:
            raise ProtocolError("unknown transaction", f"transaction {transaction!r} was not begun on this connection")
        self.transactions.discard(transaction)
        return transaction

    def _commit(self, frame: Frame, now: int) -> Command:
        return Commit(self.session_id, self._finish_transaction(frame), now, frame.get("receipt"))

    def _abort(self, frame: Frame, now: int) -> Command:
        return Abort(self.session_id, self._finish_transaction(frame), now, frame.get("receipt"))

    def _disconnect(self, frame: Frame, now: int) -> Command:
        return Disconnect(self.session_id, now, frame.get("receipt"))


def _checked_selector(frame: Frame) -> str | None:
    """The frame's `selector` header. The core compiles it too; compiling it here refuses a
    bad one before the frame is appended."""
    selector = frame.get("selector")
    if selector is not None and selector.strip():
        try:
            compile_selector(selector)
        except SelectorError as exc:
            raise ProtocolError("invalid selector", str(exc)) from None
    return selector
