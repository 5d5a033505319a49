"""What a follower's relay writes to the leader first: the client's bytes with its CONNECT
marked relayed (the leader then parks none of its sessions for the client itself to resume:
the client's socket is the follower's), and nothing else changed."""

from __future__ import annotations

import asyncio
import socket

import pytest

from raftmq.config import NodeConfig
from raftmq.protocol.codec import FrameParser
from raftmq.server.stomp.mobility import named_session
from raftmq.server.stomp.relay_sides import linger, mark_relayed
from raftmq.server.stomp.session import StompSession
from tests.server.test_stomp_session import NOW, Host, frame


def test_the_relayed_connect_carries_the_mark_and_everything_else_unchanged() -> None:
    connect = frame("CONNECT", {"accept-version": "1.2", "host": "x", "login": "a:b"})
    then = frame("SEND", {"destination": "/queue/a"}, b"body")
    marked = mark_relayed(b"\r\n\n" + connect + then)
    first, second = FrameParser(NodeConfig().limits, "1.2").feed(marked)
    assert first.get("raftmq.relayed") == "true" and first.get("login") == "a:b" and first.get("host") == "x"
    assert (second.command, second.body) == ("SEND", b"body")
    assert mark_relayed(b"CONNE") == b"CONNE"  # not a whole command line yet: left as it is
    session = StompSession(Host(), "s")
    session.receive(marked, NOW)
    assert session.via_relay
    direct = StompSession(Host(), "d")
    direct.receive(connect, NOW)
    assert not direct.via_relay


def test_the_session_id_is_read_from_the_leaders_connected() -> None:
    assert named_session(b"CONNECTED\nversion:1.2\nsession:n1:a:1\n\n\0") == "n1:a:1"
    assert named_session(b"CONNECTED\nversion:1.2\n") is None  # more may come
    assert named_session(b"ERROR\nmessage:x\n\n\0") == ""


@pytest.mark.integration
@pytest.mark.parametrize("lingering", [True, False])
def test_the_last_frame_reaches_a_slow_client_that_still_sends(lingering: bool) -> None:
    """A socket closed with input unread is reset, and the reset drops what the kernel had not
    sent yet: a client slow to read loses the end (the farewell ERROR). `linger` half-closes and
    reads on instead: everything arrives. The plain close is shown losing it."""

    async def scenario() -> tuple[bool, bool]:
        loop = asyncio.get_running_loop()
        served: asyncio.Future[asyncio.Transport] = loop.create_future()
        lost: asyncio.Future[None] = loop.create_future()

        class Server(asyncio.Protocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                transport.pause_reading()  # as a going node stops reading its client
                served.set_result(transport)  # type: ignore[arg-type]

        server = await loop.create_server(Server, "127.0.0.1", 0)
        client = socket.socket()
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8192)
        client.setblocking(False)
        await loop.sock_connect(client, server.sockets[0].getsockname())
        transport = await served
        await loop.sock_sendall(client, b"\n" * 20_000)  # sent, never read by the server
        await asyncio.sleep(0.05)
        transport.write(b"m" * 200_000 + b"END")
        await asyncio.sleep(0.05)  # handed to the kernel as far as the client's window allows
        if lingering:
            linger(transport, lambda _exc: lost.set_result(None), lambda t: t.close())
        else:
            transport.close()
        got, reset = b"", False
        try:
            while True:
                await asyncio.sleep(0.001)  # a slow reader
                chunk = await loop.sock_recv(client, 4096)
                if not chunk:
                    break
                got += chunk
        except ConnectionResetError:
            reset = True
        client.close()
        server.close()
        return got.endswith(b"END"), reset

    arrived, reset = asyncio.run(scenario())
    if lingering:
        assert arrived and not reset
    else:
        assert reset and not arrived  # what the close without lingering did
