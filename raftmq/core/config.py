"""Settings of the broker core. Part of the replicated state's definition: every replica of a
group must apply commands with the same `CoreConfig`."""

from __future__ import annotations

from dataclasses import dataclass

from raftmq.core.address_settings import AddressSettings
from raftmq.routing.cluster_connection import ClusterView


@dataclass(frozen=True, slots=True)
class CoreConfig:
    broker_name: str = "raftmq"  # prefix of generated message ids
    max_delivery_count: int = 10  # a message delivered this many times and nacked goes to the DLQ
    dead_letter_queue: str = "/queue/DLQ"
    # A NACKed message waits this long before it is offered again (0: at once), multiplied by
    # `redelivery_multiplier` for each delivery after the first, at most `max_redelivery_delay_ms`.
    redelivery_delay_ms: int = 0
    redelivery_multiplier: float = 1.0
    max_redelivery_delay_ms: int = 3_600_000
    expiry_queue: str = "/queue/ExpiryQueue"
    dedup_cache_size: int = 20_000  # _AMQ_DUPL_ID ids remembered (oldest forgotten first)
    default_prefetch: int = 1000  # deliveries in flight per subscription when SUBSCRIBE names none
    selector_scan_limit: int = 10_000  # messages a dispatch pass looks past for a selector match
    # Paging (raftmq.core.paging): a store keeps up to 2 × page_size ready messages in memory;
    # later arrivals are packed into pages of page_size and paged back in as the head drains.
    # 0: never page (every ready message stays in memory).
    page_size: int = 1000
    # Producer flow control (raftmq.core.address_settings): per destination, first match wins
    # ([[core.address]] tables), and bounds on the sum over every destination (0: none).
    addresses: tuple[AddressSettings, ...] = ()
    global_max_size_messages: int = 0
    global_max_size_bytes: int = 0
    # The group's place in a cluster of groups (from the topology's [[cluster_connection]]s);
    # None: a broker on its own. Not a [core] key: `raftmq node --topology` sets it.
    cluster: ClusterView | None = None
