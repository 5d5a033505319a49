"""The asyncio Protocol under `StompClient`: bytes to frames, frames to coalesced writes.

Writes are gathered per event-loop turn and handed to the transport as one buffer: a producer
that queues a thousand SENDs between two awaits costs one syscall, not a thousand.

An address that is no STOMP port fails at once with `NotStompPort` naming what answered: a
raftmq member's Raft port (its HELLO, or the STOMP ERROR it answers a CONNECT with), its admin
port (the same ERROR) or any HTTP server; they would otherwise leave the client waiting for a
CONNECTED until its timeout, or fail with a parse error.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

from raftmq.errors import NotStompPort, ProtocolError
from raftmq.protocol.codec import FrameParser
from raftmq.protocol.frame import Frame
from raftmq.protocol.limits import Limits

if TYPE_CHECKING:
    from raftmq.client.resume import ReplayBuffer

# Above this many queued bytes we write at once instead of waiting for the end of the turn,
# so the transport's own buffer (and its pause_writing signal) sees the pressure early.
FLUSH_THRESHOLD_BYTES = 256 * 1024

# A raftmq Raft port's first frame, its HELLO (raftmq.replication.wire: a length, MAGIC, a
# nonce), as a member that sends it before hearing the peer's does; tests/replication/test_wire.py
# keeps the two equal (the wire's module is not imported here: it loads the members' crypto).
RAFT_HELLO = b"\x00\x00\x00\x18RAFTMQ1\n"
# The ERROR frame a raftmq port that is not a STOMP one answers a CONNECT with names it: admin, raft.
PORT_HEADER = "raftmq-port"


def not_stomp(data: bytes) -> NotStompPort | None:
    """What the first bytes a broker sent say, when they cannot begin a STOMP frame."""
    if data.startswith(RAFT_HELLO) or (RAFT_HELLO.startswith(data) and data):
        return NotStompPort("this is a raftmq Raft port (where a group's members replicate), not a STOMP port: "
                            "connect to a member's client port")
    if data.startswith(b"HTTP/"):
        line = data.split(b"\r\n", 1)[0].decode("latin-1")
        return NotStompPort(f"this is an HTTP port (it answered {line!r}; a raftmq admin port?), not a STOMP port: "
                            "connect to a member's client port")
    return None


class StompTransport(asyncio.Protocol):
    """Owns the socket of one STOMP connection; knows nothing of receipts or subscriptions."""

    def __init__(
        self,
        on_frame: Callable[[Frame], None],
        on_lost: Callable[[BaseException | None], None],
        limits: Limits | None = None,
    ) -> None:
        self._loop = asyncio.get_running_loop()
        self._on_frame = on_frame
        self._on_lost = on_lost
        self._parser = FrameParser(limits=limits or Limits(), version="1.2")
        self._transport: asyncio.Transport | None = None
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self._flush_scheduled = False
        self._write_paused = False
        self._drain_waiters: list[asyncio.Future[None]] = []
        self._read_pause_holders: set[object] = set()
        self._lost = False
        self._first = True  # nothing received yet
        self.replay: ReplayBuffer | None = None  # what the client writes is kept there (raftmq.client.resume)
        self._output_held = False  # resuming: writes are kept in `replay` only, and sent once resumed
        self.last_received = self._loop.time()
        self.last_sent = self._loop.time()

    # -- asyncio.Protocol -------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports do not subclass asyncio.Transport, hence the cast.
        self._transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.last_received = self._loop.time()
        if self._first:
            self._first = False
            wrong = not_stomp(data)
            if wrong is not None:
                self.abort(wrong)
                return
        try:
            frames = self._parser.feed(data)
        except ProtocolError as exc:
            self.abort(exc)
            return
        on_frame = self._on_frame
        for frame in frames:
            on_frame(frame)
            if self._lost:
                break

    def eof_received(self) -> bool:
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        if self._lost:
            return
        self._lost = True
        self._pending.clear()
        self._wake_drain_waiters()
        self._on_lost(exc)

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        self._wake_drain_waiters()

    # -- for the client ---------------------------------------------------------------------
    @property
    def version(self) -> str:
        return self._parser.version

    @version.setter
    def version(self, value: str) -> None:
        self._parser.version = value

    @property
    def is_lost(self) -> bool:
        return self._lost

    def write(self, data: bytes) -> None:
        if self._lost:
            return
        if self.replay is not None:
            self.replay.record(data)
            if self._output_held:
                return
        self._pending.append(data)
        self._pending_bytes += len(data)
        if self._pending_bytes >= FLUSH_THRESHOLD_BYTES:
            self.flush()
        elif not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self.flush)

    def write_unkept(self, data: bytes) -> None:
        """Write what is not part of the client's stream (a resume request), or was kept already."""
        replay, self.replay = self.replay, None
        try:
            self.write(data)
        finally:
            self.replay = replay

    def hold_output(self) -> None:
        """Until `release_output`, what the client writes is kept, not sent (it is resuming)."""
        self._output_held = True

    def release_output(self, kept: bytes) -> None:
        """Send `kept` (what the client wrote from where the broker stopped reading), then write on."""
        self._output_held = False
        self.write_unkept(kept)

    def silence(self) -> None:
        """Hand the client nothing more from this connection (one it left for another)."""
        self._on_frame = _ignore
        self._on_lost = _ignore

    @property
    def read_holders(self) -> set[object]:
        return set(self._read_pause_holders)

    def flush(self) -> None:
        self._flush_scheduled = False
        if not self._pending or self._transport is None or self._lost:
            return
        data = self._pending[0] if len(self._pending) == 1 else b"".join(self._pending)
        self._pending.clear()
        self._pending_bytes = 0
        self.last_sent = self._loop.time()
        self._transport.write(data)

    async def drain(self) -> None:
        """Wait while the socket's send buffer is over its high-water mark."""
        while self._write_paused and not self._lost:
            waiter = self._loop.create_future()
            self._drain_waiters.append(waiter)
            await waiter

    @property
    def write_paused(self) -> bool:
        return self._write_paused

    @property
    def reading_held(self) -> bool:
        return bool(self._read_pause_holders)

    def hold_reading(self, holder: object) -> None:
        """Stop reading the socket until every holder released it (a full subscription queue)."""
        if not self._read_pause_holders and self._transport is not None and not self._lost:
            self._transport.pause_reading()
        self._read_pause_holders.add(holder)

    def release_reading(self, holder: object) -> None:
        if holder not in self._read_pause_holders:
            return
        self._read_pause_holders.discard(holder)
        if not self._read_pause_holders and self._transport is not None and not self._lost:
            self._transport.resume_reading()

    def release_all_reading(self) -> None:
        """Read again whatever holds reading: a closing client must read its DISCONNECT receipt."""
        if self._read_pause_holders:
            self._read_pause_holders.clear()
            if self._transport is not None and not self._lost:
                self._transport.resume_reading()

    def close(self) -> None:
        self.flush()
        if self._transport is not None:
            self._transport.close()

    def abort(self, exc: BaseException | None = None) -> None:
        """Drop the connection now; `connection_lost` follows with `exc` as the cause."""
        if self._lost:
            return
        if self._transport is None:
            self.connection_lost(exc if isinstance(exc, Exception) else None)
            return
        # Report our own reason rather than the transport's generic one.
        self._lost = True
        self._pending.clear()
        self._transport.abort()
        self._wake_drain_waiters()
        self._on_lost(exc)

    def _wake_drain_waiters(self) -> None:
        waiters, self._drain_waiters = self._drain_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)


def _ignore(_: object) -> None:
    pass


async def dial(protocol: StompTransport, host: str, port: int, context: ssl.SSLContext | None,
               websocket_path: str | None, in_vm: bool = False) -> None:
    """Open the connection `protocol` speaks on: TCP, TLS with `context`, and STOMP inside a
    WebSocket to `websocket_path` when given (raftmq.client.websocket); with `in_vm`, no socket:
    the broker named `host` in this process (raftmq.vm)."""
    if in_vm:
        from raftmq import vm

        await vm.dial(host, protocol)
        return
    loop = asyncio.get_running_loop()
    ws = None
    if websocket_path is not None:
        from raftmq.client.websocket import WebSocketClientProtocol  # wsproto, loaded only here

        ws = WebSocketClientProtocol(protocol, host, websocket_path)
    opened: asyncio.Protocol = protocol if ws is None else ws
    if context is None:
        await loop.create_connection(lambda: opened, host, port)
    else:
        await loop.create_connection(lambda: opened, host, port, ssl=context, server_hostname=host)
    if ws is not None:
        await ws.opened
