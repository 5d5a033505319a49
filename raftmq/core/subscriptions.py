"""Sessions, subscriptions and in-flight deliveries of the broker core.

Plain mutable records; the rules that change them live in `raftmq.core.broker`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from raftmq.core.commands import ACK_AUTO, ACK_CLIENT

if TYPE_CHECKING:
    from raftmq.core.message import Message
    from raftmq.core.queues import Store
    from raftmq.core.selector import Selector

# A transaction's buffered work, applied in order at COMMIT:
#   ("send", destination, headers, body, now) | ("ack", ack_id) | ("nack", ack_id)
TransactionOp = tuple[Any, ...]


class Delivery:
    """One message handed to a subscription that expects an ACK (ack mode client / client-individual)."""

    __slots__ = ("seq", "ack_id", "sub", "message")

    def __init__(self, seq: int, ack_id: str, sub: Subscription, message: Message) -> None:
        self.seq = seq
        self.ack_id = ack_id
        self.sub = sub
        self.message = message


class Subscription:
    """A consumer of one store: a queue (shared with competing consumers) or its own topic store.

    `session` is None while a durable topic subscription is inactive (it keeps collecting).
    `in_flight` is in delivery order, which the cumulative ACK of ack mode client relies on.
    """

    __slots__ = (
        "session",
        "sub_id",
        "destination",
        "ack",
        "auto",
        "cumulative",
        "prefetch",
        "selector",
        "exclusive",
        "durable_name",
        "store",
        "in_flight",
        "groups",
    )

    def __init__(
        self,
        session: Session | None,
        sub_id: str,
        destination: str,
        ack: str,
        prefetch: int,
        selector: Selector | None,
        exclusive: bool,
        durable_name: str | None,
        store: Store,
    ) -> None:
        self.session = session
        self.sub_id = sub_id
        self.destination = destination
        self.store = store
        self.selector = selector
        self.exclusive = exclusive
        self.durable_name = durable_name
        self.in_flight: dict[str, Delivery] = {}
        self.groups: dict[str, None] = {}  # message groups of a queue this consumer owns
        self.set_mode(ack, prefetch)

    def set_mode(self, ack: str, prefetch: int) -> None:
        self.ack = ack
        self.auto = ack == ACK_AUTO
        self.cumulative = ack == ACK_CLIENT
        self.prefetch = prefetch

    @property
    def has_room(self) -> bool:
        """May take another message now: auto-ack, or fewer unacknowledged than its prefetch."""
        return self.auto or len(self.in_flight) < self.prefetch

    def acked_through(self, delivery: Delivery) -> list[Delivery]:
        """The deliveries one ACK/NACK of `delivery` settles, in delivery order."""
        if not self.cumulative:
            return [delivery]
        settled = []
        for earlier in self.in_flight.values():
            settled.append(earlier)
            if earlier is delivery:
                break
        return settled


class Session:
    """A connected client.

    `deliveries` (by ack id, in delivery order) answers STOMP 1.2 ACKs. STOMP 1.0/1.1 clients ACK
    by message id: `by_message` maps each message id to its earliest delivery in flight in this
    session. It is built on the first such ACK (1.2 clients never pay for it). The same message
    id can be in flight twice in one session only through topic copies or dead-lettered copies;
    `shadowed` counts those later deliveries, so the rare fallback scan runs only when one exists.
    """

    __slots__ = ("session_id", "login", "client_id", "subs", "transactions", "deliveries", "by_message", "shadowed")

    def __init__(self, session_id: str, login: str | None, client_id: str | None) -> None:
        self.session_id = session_id
        self.login = login
        self.client_id = client_id
        self.subs: dict[str, Subscription] = {}
        self.transactions: dict[str, list[TransactionOp]] = {}
        self.deliveries: dict[str, Delivery] = {}
        self.by_message: dict[str, Delivery] | None = None
        self.shadowed = 0

    def add_delivery(self, delivery: Delivery) -> None:
        self.deliveries[delivery.ack_id] = delivery
        index = self.by_message
        if index is not None:
            message_id = delivery.message.message_id
            if message_id in index:
                self.shadowed += 1
            else:
                index[message_id] = delivery

    def remove_delivery(self, delivery: Delivery) -> None:
        del self.deliveries[delivery.ack_id]
        index = self.by_message
        if index is None:
            return
        message_id = delivery.message.message_id
        if index.get(message_id) is not delivery:
            self.shadowed -= 1
            return
        del index[message_id]
        if self.shadowed:
            for later in self.deliveries.values():
                if later.message.message_id == message_id:
                    index[message_id] = later
                    self.shadowed -= 1
                    break

    def find_by_message(self, message_id: str, sub_id: str | None) -> Delivery | None:
        index = self.by_message
        if index is None:
            index = self.by_message = {}
            for delivery in self.deliveries.values():
                if delivery.message.message_id in index:
                    self.shadowed += 1
                else:
                    index[delivery.message.message_id] = delivery
        found = index.get(message_id)
        if found is None or sub_id is None or found.sub.sub_id == sub_id:
            return found
        if self.shadowed:
            for delivery in self.deliveries.values():
                if delivery.message.message_id == message_id and delivery.sub.sub_id == sub_id:
                    return delivery
        return None
