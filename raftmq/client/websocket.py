"""STOMP over WebSocket for raftmq's own clients: `ws://HOST:PORT/PATH` and `wss://` URLs.

`WebSocketClientProtocol` is the socket's protocol: it sends the HTTP/1.1 upgrade (offering
`SUBPROTOCOLS`), and once the broker accepts it hands the STOMP transport
(raftmq.client.transport) a transport of its own whose writes each go out as one binary
WebSocket message; what arrives in messages is passed on as STOMP bytes. Pings are answered;
a close is answered and ends the connection. wsproto does the protocol.
"""

from __future__ import annotations

import asyncio
from typing import cast

from wsproto import ConnectionType, WSConnection
from wsproto.connection import ConnectionState
from wsproto.events import AcceptConnection, BytesMessage, CloseConnection, Ping, RejectConnection, Request, TextMessage
from wsproto.utilities import RemoteProtocolError

from raftmq.errors import ClientError
from raftmq.protocol.negotiation import WEBSOCKET_SUBPROTOCOLS
from raftmq.protocol.wrapped_transport import WrappedTransport

SUBPROTOCOLS = list(WEBSOCKET_SUBPROTOCOLS)


class WebSocketClientProtocol(asyncio.Protocol):
    def __init__(self, inner: asyncio.Protocol, host: str, path: str) -> None:
        self._inner = inner
        self._host = host
        self._path = path or "/"
        self._ws = WSConnection(ConnectionType.CLIENT)
        self._raw: asyncio.Transport | None = None
        self._transport: _Transport | None = None
        self.opened: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._raw = cast(asyncio.Transport, transport)
        self._raw.write(self._ws.send(Request(host=self._host, target=self._path, subprotocols=SUBPROTOCOLS)))

    def data_received(self, data: bytes) -> None:
        raw = self._raw
        assert raw is not None
        try:
            self._ws.receive_data(data)
            events = list(self._ws.events())
        except RemoteProtocolError as exc:
            self._failed(ClientError(f"WebSocket: {exc}"))
            return
        for event in events:
            if isinstance(event, AcceptConnection):
                self._transport = _Transport(raw, self._ws)
                self._inner.connection_made(self._transport)
                if not self.opened.done():
                    self.opened.set_result(None)
            elif isinstance(event, RejectConnection):
                self._failed(ClientError(f"the broker refused the WebSocket upgrade to {self._path}: "
                                         f"HTTP {event.status_code}"))
                return
            elif isinstance(event, (BytesMessage, TextMessage)):
                payload = event.data.encode("utf-8") if isinstance(event, TextMessage) else bytes(event.data)
                if payload:
                    self._inner.data_received(payload)
            elif isinstance(event, Ping):
                raw.write(self._ws.send(event.response()))
            elif isinstance(event, CloseConnection):
                if self._ws.state is ConnectionState.REMOTE_CLOSING:
                    raw.write(self._ws.send(event.response()))
                raw.close()
                return

    def _failed(self, error: ClientError) -> None:
        if not self.opened.done():
            self.opened.set_exception(error)
        if self._raw is not None:
            self._raw.close()

    def eof_received(self) -> bool | None:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.opened.done():
            self.opened.set_exception(ClientError(f"connection closed during the WebSocket upgrade: {exc or 'EOF'}"))
            return
        self._inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()


class _Transport(WrappedTransport):
    """What the STOMP transport writes to: one binary message per write."""

    def __init__(self, raw: asyncio.Transport, ws: WSConnection) -> None:
        super().__init__(raw)
        self._ws = ws

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if data and self._ws.state is ConnectionState.OPEN:
            self._raw.write(self._ws.send(BytesMessage(bytes(data))))

    def close(self) -> None:
        if self._ws.state is ConnectionState.OPEN:
            self._raw.write(self._ws.send(CloseConnection(1000)))
        self._raw.close()
