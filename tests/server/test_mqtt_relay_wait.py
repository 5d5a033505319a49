"""A follower's MQTT relay (raftmq.server.mqtt.relay) while no leader is known yet: it waits for
one (an election under way) and then pipes what the client sent; none in time, it refuses."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from raftmq.server.mqtt import relay as relay_module
from raftmq.server.mqtt.relay import MqttRelay

pytestmark = pytest.mark.integration  # (loopback sockets)


async def client_transport() -> tuple[asyncio.Transport, asyncio.StreamReader, Any]:
    """A real connection's server side (what the relay holds as its client) and the client's reader."""
    accepted: asyncio.Future[asyncio.Transport] = asyncio.get_running_loop().create_future()

    class Side(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            accepted.set_result(transport)  # type: ignore[arg-type]

    server = await asyncio.get_running_loop().create_server(Side, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    return await accepted, reader, (server, writer)


def test_a_relay_waits_for_a_leader_to_be_known_then_pipes() -> None:
    async def main() -> None:
        got: asyncio.Queue[bytes] = asyncio.Queue()

        async def leader_side(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            got.put_nowait(await reader.read(100))
            writer.write(b"answer")
            await writer.drain()

        leader = await asyncio.start_server(leader_side, "127.0.0.1", 0)
        address = f"127.0.0.1:{leader.sockets[0].getsockname()[1]}"
        asks = iter([None, None, None, address])
        client, client_reader, keep = await client_transport()
        refused: list[bytes] = []
        relay = MqttRelay(asyncio.get_running_loop(), client, lambda: next(asks, address), b"CONNECT", None,
                          refused.append, lambda _r: None)
        assert await asyncio.wait_for(got.get(), 5) == b"CONNECT" and relay.target == address and not refused
        assert await asyncio.wait_for(client_reader.read(100), 5) == b"answer"
        relay.close()
        leader.close()
        keep[0].close()
        keep[1].close()

    asyncio.run(main())


def test_a_relay_refuses_when_no_leader_is_known_in_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(relay_module, "LEADER_WAIT_SECONDS", 0.2)

    async def main() -> None:
        client, _reader, keep = await client_transport()
        refused: list[bytes] = []
        ended: list[object] = []
        MqttRelay(asyncio.get_running_loop(), client, lambda: None, b"CONNECT", None, refused.append, ended.append)
        await asyncio.sleep(0.5)
        assert refused == [b"CONNECT"] and len(ended) == 1
        client.close()
        keep[0].close()
        keep[1].close()

    asyncio.run(main())
