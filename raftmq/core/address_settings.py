"""Producer flow control: how full a destination may get, and what happens then (Artemis's
address settings, by its names).

`[[core.address]]` tables give, for the destinations a pattern matches (first match wins, in
file order), `max_size_messages` and `max_size_bytes` (0: no limit) and an
`address_full_policy`:

- `PAGE` (the default): no limit; the messages page (raftmq.core.paging), memory stays bounded;
- `BLOCK`: the leader withholds the SEND (no RECEIPT) and reads nothing more from that producer's
  connection until there is room (raftmq.server.seams.flow): other destinations are unaffected;
- `FAIL`: the SEND is refused: ERROR (with the frame's receipt-id), the connection closes;
- `DROP`: the SEND is acknowledged and the message dropped (counted as `dropped`).

A destination's size is what it holds: ready (paged too), in flight and held-back messages,
and their body bytes; a topic's is the sum over its subscriptions. `[core]
global_max_size_messages` / `global_max_size_bytes` bound the sum over every destination: past
them, each destination applies its policy as if it were full. Pure: decided from the
replicated state alone, so FAIL and DROP are the same on every member.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from raftmq.core.validation import QUEUE_PREFIX, TOPIC_PREFIX, destination_name
from raftmq.patterns import check_pattern, pattern_matches

if TYPE_CHECKING:
    from raftmq.core.model import Store
    from raftmq.core.state import BrokerState

PAGE, BLOCK, FAIL, DROP = "PAGE", "BLOCK", "FAIL", "DROP"
POLICIES = (PAGE, BLOCK, FAIL, DROP)


@dataclass(frozen=True, slots=True)
class AddressSettings:
    match: str  # a destination or a pattern: /queue/orders.>, /topic/prices.*, /queue/>
    max_size_bytes: int = 0
    max_size_messages: int = 0
    address_full_policy: str = PAGE

    def check(self) -> None:
        """Raise ValueError naming what is wrong."""
        if self.address_full_policy not in POLICIES:
            raise ValueError(f"address_full_policy must be one of {', '.join(POLICIES)}, "
                             f"got {self.address_full_policy!r}")
        if not self.match.startswith((QUEUE_PREFIX, TOPIC_PREFIX)):
            raise ValueError(f"match must start with {QUEUE_PREFIX} or {TOPIC_PREFIX}, got {self.match!r}")
        check_pattern(destination_name(self.match))

    def matches(self, destination: str) -> bool:
        kind = QUEUE_PREFIX if self.match.startswith(QUEUE_PREFIX) else TOPIC_PREFIX
        return destination.startswith(kind) and pattern_matches(destination_name(self.match),
                                                                destination_name(destination))


class AddressLimits:
    """The settings of each destination (looked up once per name) and whether it is full."""

    def __init__(self, addresses: tuple[AddressSettings, ...], global_messages: int, global_bytes: int) -> None:
        self.addresses = addresses
        self.global_messages = global_messages
        self.global_bytes = global_bytes
        self._settings: dict[str, AddressSettings | None] = {}

    @property
    def active(self) -> bool:
        return bool(self.addresses)

    def settings(self, destination: str) -> AddressSettings | None:
        try:
            return self._settings[destination]
        except KeyError:
            found = next((a for a in self.addresses if a.matches(destination)), None)
            if len(self._settings) > 10_000:
                self._settings.clear()  # many short-lived names (temporary queues): start again
            self._settings[destination] = found
            return found

    def full(self, state: BrokerState, destination: str, more: int = 0, more_bytes: int = 0) -> AddressSettings | None:
        """The destination's settings when it is full (its own limits, or the global ones) and
        its policy is not PAGE; else None. `more`, `more_bytes`: on top of what it holds
        (the leader's SENDs proposed and not yet applied)."""
        settings = self.settings(destination)
        if settings is None or settings.address_full_policy == PAGE:
            return None
        messages, size = usage(stores_of(state, destination))
        messages, size = messages + more, size + more_bytes
        if (settings.max_size_messages and messages >= settings.max_size_messages) or (
                settings.max_size_bytes and size >= settings.max_size_bytes):
            return settings
        if self.global_messages or self.global_bytes:
            messages, size = usage(state.stores())
            if ((self.global_messages and messages >= self.global_messages)
                    or (self.global_bytes and size >= self.global_bytes)):
                return settings
        return None


def stores_of(state: BrokerState, destination: str) -> list[Store]:
    if destination.startswith(QUEUE_PREFIX):
        store = state.queues.get(destination)
        return [] if store is None else [store]
    topic = state.topics.get(destination)
    return [] if topic is None else [sub.store for sub in topic.subs]


def usage(stores: list[Store]) -> tuple[int, int]:
    """(messages, body bytes) the stores hold: ready (paged too), in flight, held back."""
    messages = size = 0
    for store in stores:
        messages += store.depth + store.in_flight + len(store.delayed)
        size += store.bytes
    return messages, size


def refusal(settings: AddressSettings, destination: str) -> str:
    """The ERROR's detail for a SEND that FAIL refused."""
    limits = [f"{name} {value}" for name, value in (("max_size_messages", settings.max_size_messages),
                                                    ("max_size_bytes", settings.max_size_bytes)) if value]
    return f"{destination} is full ({', '.join(limits) or 'the global limits'}; address_full_policy FAIL)"
