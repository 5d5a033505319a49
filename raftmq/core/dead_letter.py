"""The copy of a message the dead-letter or expiry queue gets, and what it says about its death.

As ActiveMQ Classic (`dlqDeliveryFailureCause`) and Artemis (`_AMQ_ORIG_ADDRESS`, ...) do, the
copy carries headers: where the message was (`original-destination`), why it left
(`dead_letter_reason`: one of `REASONS`), how often it had been delivered there
(`dead_letter_deliveries`) and a sentence for a person (`dead_letter_cause`). The copy itself
starts afresh, as Classic's does: no expiry, a delivery count of 0 in its new queue. The names
use underscores so that a JMS selector can name them (`raftmq manage retry --selector
"dead_letter_reason = 'refused'"`); docs/operations.md lists them. A retry or a move removes
them again (raftmq.core.manage).
"""

from __future__ import annotations

from raftmq.core.message import Message
from raftmq.protocol.header_block import block_of, pairs_of
from raftmq.routing.route import SF_PREFIX

ORIGINAL_DESTINATION = "original-destination"
REASON = "dead_letter_reason"
DELIVERIES = "dead_letter_deliveries"
CAUSE = "dead_letter_cause"
HEADERS = frozenset({ORIGINAL_DESTINATION, REASON, DELIVERIES, CAUSE})

MAX_DELIVERIES = "max-deliveries"  # NACKed, or returned unacknowledged, at its max_delivery_count-th delivery
REFUSED = "refused"  # a neighbouring group refused it max_delivery_count times (a store-and-forward queue's)
EXPIRED = "expired"  # its `expires` time passed before anyone consumed it
REASONS = (MAX_DELIVERIES, REFUSED, EXPIRED)


def why(store_destination: str, message: Message, limit: int, returned: bool) -> tuple[str, str]:
    """(reason, cause) of a message dead-lettered from `store_destination` after `limit`
    deliveries: NACKed, or `returned` unacknowledged by a consumer that went away."""
    count = message.delivery_count
    if store_destination.startswith(SF_PREFIX):  # only a bridge's NACK (a refusal) counts there
        return REFUSED, (f"refused {count} times by group {store_destination[len(SF_PREFIX):]} "
                         f"(max_delivery_count {limit})")
    if returned:
        return MAX_DELIVERIES, (f"delivered {count} times, the last time to a consumer that left without an ACK "
                                f"(max_delivery_count {limit})")
    return MAX_DELIVERIES, f"NACKed at delivery {count} (max_delivery_count {limit})"


def expired_cause(message: Message) -> str:
    return f"its expires time ({message.expires}, ms since the epoch) passed after {message.delivery_count} deliveries"


def moved(message: Message, destination: str, side_queues: tuple[str, str], reason: str, cause: str) -> Message:
    """A copy of `message` for `destination` (one of `side_queues`, the dead-letter and expiry
    queues): no expiry, a fresh delivery count, and the headers above. A message that dies
    again there keeps the destination it first came from and tells its latest death."""
    origin = message.destination
    headers = []
    for name, value in pairs_of(message.headers):
        if name in HEADERS:
            if name == ORIGINAL_DESTINATION and message.destination in side_queues:
                origin = value  # keep where it first came from
        elif name != "expires":
            headers.append((name, value))
    headers += [(ORIGINAL_DESTINATION, origin), (REASON, reason), (DELIVERIES, str(message.delivery_count)),
                (CAUSE, cause)]
    return Message(message.message_id, destination, block_of(headers), message.body, message.priority, 0,
                   message.timestamp, message.group, message.persistent, 0)
