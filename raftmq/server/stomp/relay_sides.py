"""The parts of a relayed connection (raftmq.server.stomp.relay): the protocol of the client's
transport once it is relayed and of the connection to the leader, which hand what they see to
their `Relay`; and how a client's connection ends without losing its last frame (`linger`)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Protocol

from raftmq.protocol.frame import RELAYED_HEADER, with_header_line


class Piped(Protocol):
    """What the two ends see of their relay (raftmq.server.stomp.relay.Relay)."""

    @property
    def client(self) -> asyncio.Transport: ...
    @property
    def upstream(self) -> asyncio.Transport | None: ...
    @property
    def client_tls(self) -> bool: ...
    def client_data(self, data: bytes) -> None: ...
    def client_eof(self) -> None: ...
    def client_lost(self, exc: Exception | None) -> None: ...
    def upstream_data(self, data: bytes) -> None: ...
    def upstream_lost(self, transport: asyncio.BaseTransport | None) -> None: ...


def set_reading(transport: asyncio.Transport | None, reading: bool) -> None:
    if transport is None or transport.is_closing():
        return
    if reading:
        transport.resume_reading()
    else:
        transport.pause_reading()


class ClientSide(asyncio.Protocol):
    """The protocol of the client's transport once it is relayed."""

    def __init__(self, relay: Piped) -> None:
        self._relay = relay

    def data_received(self, data: bytes) -> None:
        self._relay.client_data(data)

    def eof_received(self) -> bool:
        self._relay.client_eof()
        # Keep writing to the client what the leader still sends (TLS cannot half-close: there
        # the transport closes whatever this returns, and the relay's other side follows).
        return not self._relay.client_tls

    def pause_writing(self) -> None:
        set_reading(self._relay.upstream, False)

    def resume_writing(self) -> None:
        set_reading(self._relay.upstream, True)

    def connection_lost(self, exc: Exception | None) -> None:
        self._relay.client_lost(exc)


class UpstreamSide(asyncio.Protocol):
    """The protocol of the follower's connection to the leader."""

    def __init__(self, relay: Piped) -> None:
        self._relay = relay
        self._transport: asyncio.BaseTransport | None = None
        self.lost = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport

    def data_received(self, data: bytes) -> None:
        self._relay.upstream_data(data)

    def pause_writing(self) -> None:
        set_reading(self._relay.client, False)

    def resume_writing(self) -> None:
        set_reading(self._relay.client, True)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self._relay.upstream_lost(self._transport)


def mark_relayed(prefix: bytes) -> bytes:
    """The client's first bytes with `RELAYED_HEADER` added to its CONNECT, so the leader knows
    the session is relayed."""
    return with_header_line(prefix, RELAYED_HEADER, "true")


LINGER_SECONDS = 1.0


class Lingering(asyncio.Protocol):
    """A client's connection once its last frame is written: what the client still sends is read
    and dropped until it closes."""

    def __init__(self, on_lost: Callable[[Exception | None], None]) -> None:
        self._on_lost = on_lost

    def data_received(self, data: bytes) -> None:
        pass

    def eof_received(self) -> bool:
        return False  # the client closed too: close

    def connection_lost(self, exc: Exception | None) -> None:
        self._on_lost(exc)


def linger(client: asyncio.Transport, on_lost: Callable[[Exception | None], None],
           close: Callable[[asyncio.Transport], None]) -> None:
    """End the client's connection after what was written to it (an ERROR) without losing it: a
    socket closed with input unread is reset, and a reset drops what the kernel had not sent yet
    (a client slow to read). So half-close, read what still comes, and close once the client
    closes, or after `LINGER_SECONDS`. Over TLS (no half-close): `close`."""
    if client.is_closing() or not client.can_write_eof():
        return close(client)
    client.set_protocol(Lingering(on_lost))
    client.write_eof()
    client.resume_reading()
    asyncio.get_running_loop().call_later(LINGER_SECONDS, close, client)


def abort(transport: asyncio.Transport) -> None:
    try:
        transport.abort()  # a no-op once the connection is gone
    except Exception:  # some transports refuse once detached from their socket
        pass
