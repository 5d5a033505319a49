"""raftmq's asyncio STOMP 1.0/1.1/1.2 client.

    client = await connect("127.0.0.1", 61613)
    await client.send("/queue/a", b"hello", receipt=True)
    async for frame in client.subscribe("/queue/a", ack="client-individual"):
        await client.ack(frame)

`connect_failover(url)` gives a `FailoverClient` that follows leader redirects and reconnects
(see raftmq.client.failover); `raftmq.client.sync.Client` is its blocking facade.
TLS: `connect(host, port, ca_file=...)` or `ssl_context=client_ssl_context(...)`; failover
URLs take `stomp+ssl://` (or `ssl://`) addresses.
"""

from __future__ import annotations

from raftmq.client.failover import FailoverClient, connect_failover
from raftmq.client.failover_connector import FailoverEvent
from raftmq.client.failover_subscription import Delivery, FailoverSubscription
from raftmq.client.failover_url import Address, FailoverOptions, FailoverTarget, parse_failover_url
from raftmq.client.heartbeat import negotiate_heartbeat
from raftmq.client.policies import POLICY_NAMES, make_policy
from raftmq.client.stomp_client import StompClient, connect
from raftmq.client.subscription import Subscription
from raftmq.client.tls import client_ssl_context
from raftmq.errors import FailoverExhausted, InvalidFailoverUrl, RedirectLimitExceeded, SubscriptionEnded, TransactionRolledBack

__all__ = [
    "POLICY_NAMES",
    "Address",
    "Delivery",
    "FailoverClient",
    "FailoverEvent",
    "FailoverExhausted",
    "FailoverOptions",
    "FailoverSubscription",
    "FailoverTarget",
    "InvalidFailoverUrl",
    "RedirectLimitExceeded",
    "StompClient",
    "Subscription",
    "SubscriptionEnded",
    "TransactionRolledBack",
    "client_ssl_context",
    "connect",
    "connect_failover",
    "make_policy",
    "negotiate_heartbeat",
    "parse_failover_url",
]
