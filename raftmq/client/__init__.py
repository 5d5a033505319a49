"""raftmq's asyncio STOMP 1.0/1.1/1.2 client.

    client = await connect("127.0.0.1", 61613)
    await client.send("/queue/a", b"hello", receipt=True)
    async for frame in client.subscribe("/queue/a", ack="client-individual"):
        await client.ack(frame)

`connect_failover(url)` gives a `FailoverClient` that follows leader redirects and reconnects
(see raftmq.client.failover); `raftmq.client.sync.Client` is its blocking facade.
TLS: `connect(host, port, ca_file=...)` or `ssl_context=client_ssl_context(...)`; failover
URLs take `stomp+ssl://` (or `ssl://`) addresses.

The names below are imported on first use (PEP 562): a command that needs one module of the
package (the admin API's `raftmq.client.admin`, say) does not load the whole client with it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from raftmq.client.failover import FailoverClient, connect_failover
    from raftmq.client.failover_connector import FailoverEvent
    from raftmq.client.failover_subscription import Delivery, FailoverSubscription
    from raftmq.client.failover_url import Address, FailoverOptions, FailoverTarget, parse_failover_url
    from raftmq.client.heartbeat import negotiate_heartbeat
    from raftmq.client.policies import POLICY_NAMES, make_policy
    from raftmq.client.stomp_client import StompClient, connect
    from raftmq.client.subscription import Subscription
    from raftmq.client.tls import client_ssl_context
    from raftmq.errors import (
        FailoverExhausted,
        InvalidFailoverUrl,
        NotStompPort,
        RedirectLimitExceeded,
        SubscriptionEnded,
        TransactionRolledBack,
    )

# name -> the module it comes from
_WHERE = {
    "FailoverClient": "raftmq.client.failover",
    "connect_failover": "raftmq.client.failover",
    "FailoverEvent": "raftmq.client.failover_connector",
    "Delivery": "raftmq.client.failover_subscription",
    "FailoverSubscription": "raftmq.client.failover_subscription",
    "Address": "raftmq.client.failover_url",
    "FailoverOptions": "raftmq.client.failover_url",
    "FailoverTarget": "raftmq.client.failover_url",
    "parse_failover_url": "raftmq.client.failover_url",
    "negotiate_heartbeat": "raftmq.client.heartbeat",
    "POLICY_NAMES": "raftmq.client.policies",
    "make_policy": "raftmq.client.policies",
    "StompClient": "raftmq.client.stomp_client",
    "connect": "raftmq.client.stomp_client",
    "Subscription": "raftmq.client.subscription",
    "client_ssl_context": "raftmq.client.tls",
    "NotStompPort": "raftmq.errors",
    "FailoverExhausted": "raftmq.errors",
    "InvalidFailoverUrl": "raftmq.errors",
    "RedirectLimitExceeded": "raftmq.errors",
    "SubscriptionEnded": "raftmq.errors",
    "TransactionRolledBack": "raftmq.errors",
}

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
    "NotStompPort",
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


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'raftmq.client' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_WHERE})
