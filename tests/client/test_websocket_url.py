"""STOMP over WebSocket in our clients' URLs: `ws://HOST:PORT/PATH` (and `wss://`, TLS) make
the whole target WebSocket, with one path; and a failover client over `ws://` against a node."""

from __future__ import annotations

import asyncio

import pytest

from raftmq.client import connect_failover
from raftmq.client.failover_url import Address, InvalidFailoverUrl, parse_failover_url
from tests.helpers.stomp_raw import WAIT, NodeProcess, unique


@pytest.mark.parametrize(
    ("url", "path", "tls"),
    [
        ("ws://h:1/ws", "/ws", False),
        ("ws://h:1", "/", False),
        ("wss://h:1/stomp", "/stomp", True),
        ("failover:(ws://a:1/ws,ws://b:2/ws)?randomize=false", "/ws", False),
        ("ws://a:1/ws,b:2", "/ws", False),  # an address without a scheme follows the others
        ("stomp://h:1", None, False),
    ],
)
def test_websocket_is_a_property_of_the_url(url: str, path: str | None, tls: bool) -> None:
    target = parse_failover_url(url)
    assert (target.websocket_path, target.tls) == (path, tls)
    assert all(isinstance(address, Address) and address.port in (1, 2) for group in target.groups for address in group)


@pytest.mark.parametrize("url", ["ws://a:1/ws,stomp://b:2", "ws://a:1/ws,ws://b:2/stomp"])
def test_mixing_websocket_and_plain_or_two_paths_is_refused(url: str) -> None:
    with pytest.raises(InvalidFailoverUrl, match="same path"):
        parse_failover_url(url)


def test_a_path_is_only_for_websocket_addresses() -> None:
    with pytest.raises(InvalidFailoverUrl, match="no path"):
        parse_failover_url("stomp://h:1/ws")


@pytest.mark.integration
def test_a_failover_client_over_websocket_sends_and_receives() -> None:
    node = NodeProcess()
    host, port = node.address

    async def scenario() -> None:
        client = await connect_failover(f"failover:(ws://{host}:{port}/ws)")
        try:
            destination = unique()
            subscription = client.subscribe(destination)
            await client.send(destination, b"\x00binary\xff over ws", receipt=True)
            delivery = await asyncio.wait_for(subscription.get(), WAIT)
            assert delivery.body == b"\x00binary\xff over ws"
        finally:
            await client.close()

    try:
        asyncio.run(scenario())
    finally:
        node.kill()
