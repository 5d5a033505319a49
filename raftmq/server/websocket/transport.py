"""The asyncio shell of STOMP over WebSocket: a transport that speaks WebSocket underneath.

A client connection (raftmq.server.stomp.connection) whose first byte is `G` (a `GET`: no STOMP
frame starts so) wraps its socket's transport in a `WebSocketTransport` and carries on as
before: it reads STOMP bytes and writes STOMP bytes, and this layer runs the handshake,
answers pings and frames every write as one WebSocket message (raftmq.server.websocket.session
does the protocol, without I/O). A follower's relay takes the client over through
`set_protocol`, as it would a plain socket: the leader sees a plain STOMP connection.

Reading pauses and resumes on the socket; STOMP bytes decoded from a read that arrive while
the protocol has paused reading are held (one read at most) and handed over on resume.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import structlog

from raftmq.protocol.wrapped_transport import WrappedTransport
from raftmq.server.seams.host import Handshakes
from raftmq.server.websocket.session import NORMAL, Closed, Opened, Reply, Stomp, WebSocketSession, http_error
from raftmq.web_guard import HostNames, local_address

log = structlog.get_logger("raftmq.server.websocket")


def upgrade(raw: asyncio.Transport, origins: tuple[str, ...], gate: Handshakes, protocol: asyncio.Protocol,
            on_opened: Callable[[Opened], None], hosts: HostNames | None = None) -> WebSocketTransport | None:
    """`raw` carried on as a WebSocket for `protocol`; None (503 written, closing) when the
    node reads as many upgrades as it may already. `hosts`: the names the port answers to."""
    if not gate.start():
        log.warning("client.refused", peer=raw.get_extra_info("peername"), reason="too many WebSocket handshakes",
                    max_handshakes=gate.limit)
        raw.write(http_error(503, "too many WebSocket handshakes in progress; try again"))
        raw.close()
        return None
    session = WebSocketSession(origins, hosts, local_address(raw.get_extra_info("sockname")))
    return WebSocketTransport(raw, session, protocol, on_opened, gate.end)


class WebSocketTransport(WrappedTransport):
    def __init__(self, raw: asyncio.Transport, session: WebSocketSession, protocol: asyncio.Protocol,
                 on_opened: Callable[[Opened], None], on_ended: Callable[[], None]) -> None:
        super().__init__(raw)
        self._ws = session
        self._protocol = protocol
        self._on_opened = on_opened
        self._on_ended = on_ended  # the handshake ended, one way or the other (the node's count)
        self._handshaking = True
        self._held: list[bytes] = []
        self._paused = False
        self._closing = False
        self.close_code = NORMAL  # what our close frame says (the connection sets it after an ERROR)
        self.close_reason = ""
        self.path: str | None = None
        self.subprotocol: str | None = None
        self.origin: str | None = None
        raw.set_protocol(_SocketSide(self))

    # -- from the socket -----------------------------------------------------------------------

    def feed(self, data: bytes) -> None:
        for action in self._ws.receive(data):
            if isinstance(action, Stomp):
                if self._paused or self._held:
                    self._held.append(action.data)
                else:
                    self._protocol.data_received(action.data)
            elif isinstance(action, Reply):
                if action.data and not self._raw.is_closing():
                    self._raw.write(action.data)
            elif isinstance(action, Opened):
                self.path, self.subprotocol, self.origin = action.path, action.subprotocol, action.origin
                self._handshake_ended()
                self._on_opened(action)
            elif isinstance(action, Closed):
                if self._handshaking:
                    log.info("client.websocket_refused", peer=self._raw.get_extra_info("peername"), code=action.code,
                             reason=action.reason)
                self._handshake_ended()
                self._closing = True
                self._raw.close()
            if self._raw.is_closing() and self._closing:
                break

    def _handshake_ended(self) -> None:
        if self._handshaking:
            self._handshaking = False
            self._on_ended()

    def socket_lost(self, exc: Exception | None) -> None:
        self._handshake_ended()
        self._protocol.connection_lost(exc)

    def socket_eof(self) -> bool | None:
        return self._protocol.eof_received()

    # -- asyncio.Transport, as the STOMP connection (or a relay) uses it -----------------------------

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if data and not self._closing:
            self._raw.write(self._ws.send(bytes(data)))

    def close(self) -> None:
        if not self._closing:
            self._closing = True
            last = self._ws.close(self.close_code, self.close_reason)
            if last and not self._raw.is_closing():
                self._raw.write(last)
        self._raw.close()

    def abort(self) -> None:
        self._closing = True
        super().abort()

    def is_closing(self) -> bool:
        return self._closing or self._raw.is_closing()

    def pause_reading(self) -> None:
        self._paused = True
        self._raw.pause_reading()

    def resume_reading(self) -> None:
        self._paused = False
        while self._held and not self._paused and not self._closing:
            self._protocol.data_received(self._held.pop(0))
        if not self._paused:
            self._raw.resume_reading()

    def is_reading(self) -> bool:
        return not self._paused

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        assert isinstance(protocol, asyncio.Protocol)
        self._protocol = protocol

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._protocol



class _SocketSide(asyncio.Protocol):
    """The socket's protocol once it carries WebSocket: everything goes through the transport."""

    def __init__(self, transport: WebSocketTransport) -> None:
        self._transport = transport

    def data_received(self, data: bytes) -> None:
        self._transport.feed(data)

    def eof_received(self) -> bool | None:
        return self._transport.socket_eof()

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport.socket_lost(exc)

    def pause_writing(self) -> None:
        self._transport.get_protocol().pause_writing()

    def resume_writing(self) -> None:
        self._transport.get_protocol().resume_writing()
