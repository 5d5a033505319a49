"""Who is told, explicitly, when a message enters or leaves a store.

Every way a message gets into a store (a queue, or a topic subscription's) goes through
`Dispatcher.enqueue`, and every way out for good (acknowledged, auto-acknowledged on delivery,
dead-lettered, expired, taken to another group, discarded with its store or by a purge) calls
`StoreObserver.left`. Moves inside a store (delivered and in flight, returned by a NACK,
waiting out a redelivery delay, paged out and back in) are not reported: the message is still
there. The audit's replay (spark_audit.replay) records its facts through this, and the tests
keep a ledger with it (raftmq.testing.store_ledger), so a new way in or out cannot escape them
unnoticed. Observing never changes what the core does. No observer (None, the default) costs
one attribute test per message.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from raftmq.core.message import Message
    from raftmq.core.model import Store

# Why a message entered a store.
PUBLISHED = "published"  # sent by a client, or arrived from (or on the way to) another group
DEAD_LETTER = "dead-letter"  # a copy of one that died in another store
EXPIRY = "expiry"  # a copy of one that expired in another store
RETAINED = "retained"  # a copy of a topic's retained message, for a subscription that asked (raftmq.core.retained)

# Why a message left a store for good.
ACKED = "acked"
AUTO_ACKED = "auto-acked"  # delivered to a subscription in ack mode auto
DEAD_LETTERED = "dead-lettered"
EXPIRED = "expired"
TAKEN = "taken"  # taken out to go to another group (redistribution, scale down, an operator's move)
DISCARDED = "discarded"  # its store went away (a topic subscription, a temporary queue), or a purge


class StoreObserver(Protocol):
    def entered(self, store: Store, message: Message, origin: str) -> None:
        """`message` was just stored in `store` (ready, or paged out behind its head)."""

    def left(self, store: Store, message: Message, outcome: str, session: str | None) -> None:
        """`message` is leaving `store` for good; `session`: the consumer's, for an ACK or an
        auto-acknowledged delivery."""
