"""pytest fixtures for testing code that talks to raftmq: an embedded broker per test.

`raftmq.testing` re-exports this module's names, so enable them in your top-level `conftest.py` with::

    pytest_plugins = ["raftmq.testing"]

(pytest accepts `pytest_plugins` only in the rootdir's conftest; in a conftest further down
the tree write `from raftmq.testing import *` instead.) Then::

    def test_order_flow(raftmq_client):
        raftmq_client.send("/queue/orders", "order-1")
        subscription = raftmq_client.subscribe("/queue/orders")
        assert subscription.receive(timeout=5).body == b"order-1"

`raftmq_broker` is an `EmbeddedBroker` (one in-memory node on a free loopback port; its
`url`, `addresses` and `client()` are what your code under test needs), started for each test
and stopped after it. The `raftmq_broker` marker passes arguments to `EmbeddedBroker`::

    @pytest.mark.raftmq_broker(nodes=3)
    def test_survives_failover(raftmq_broker): ...

`raftmq_client` is a sync client (`raftmq.client.sync.Client`) connected to that broker.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from raftmq.client.sync import Client
from raftmq.embedded import EmbeddedBroker

__all__ = ["pytest_configure", "raftmq_broker", "raftmq_client"]

MARKER = "raftmq_broker"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{MARKER}(**kwargs): arguments of raftmq.embedded.EmbeddedBroker for the raftmq_broker fixture"
    )


@pytest.fixture
def raftmq_broker(request: pytest.FixtureRequest) -> Iterator[EmbeddedBroker]:
    """An embedded broker for one test (`@pytest.mark.raftmq_broker(...)` configures it)."""
    marker = request.node.get_closest_marker(MARKER)
    kwargs = dict(marker.kwargs) if marker is not None else {}
    if marker is not None and marker.args:
        raise pytest.UsageError(f"@pytest.mark.{MARKER} takes keyword arguments only (nodes=..., config=...)")
    with EmbeddedBroker(**kwargs) as broker:
        yield broker


@pytest.fixture
def raftmq_client(raftmq_broker: EmbeddedBroker) -> Iterator[Client]:
    """A sync client connected to `raftmq_broker`, closed after the test."""
    client = raftmq_broker.client()
    try:
        yield client
    finally:
        client.close()
