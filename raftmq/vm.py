"""In-VM connections (ActiveMQ's `vm://`): a client and a broker in one process speak STOMP to
each other through a pair of in-memory transports instead of a socket.

An `EmbeddedBroker(name="svc")` registers its name here (`serve`); `vm://svc` in a client's URL
finds it (`dial`). Each side keeps its own protocol object, unchanged: the broker's connection
(raftmq.server.stomp.connection, the same session code as for TCP) and the client's
(raftmq.client.transport). What one side writes during an event-loop turn reaches the other side's
`data_received` as one chunk, on the other side's loop: by `call_soon` when both run on one loop
(the sync client runs on its broker's, raftmq.client.sync), by `call_soon_threadsafe` otherwise.
No byte is copied on the way but the join of one turn's writes.

Flow control is a socket's: a side whose reading is paused (`pause_reading`) is handed nothing;
the writer's protocol is told `pause_writing` while more than `HIGH_WATER_BYTES` wait for it, and
`resume_writing` once they fall to `LOW_WATER_BYTES`. `close()` delivers what was written first,
then both protocols see `connection_lost(None)` (the peer an `eof_received` before it); `abort()`
ends both at once, the peer without an eof (what was written before it may still arrive, as over a
socket).
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from raftmq.errors import NoVmBroker

HIGH_WATER_BYTES = 1 << 20
LOW_WATER_BYTES = 256 << 10
SCHEME = "vm"


@dataclass(frozen=True)
class VmBroker:
    """A name served in this process: its loop, and how a new connection's protocol is made
    there (called on that loop)."""

    name: str
    loop: asyncio.AbstractEventLoop
    accept: Callable[[], asyncio.Protocol]


_served: dict[str, VmBroker] = {}
_lock = threading.Lock()


def serve(name: str, loop: asyncio.AbstractEventLoop, accept: Callable[[], asyncio.Protocol]) -> VmBroker:
    """Serve `vm://name` until `unserve`; ValueError when the name is taken or malformed."""
    if not name or any(c in name for c in "/:?,() "):
        raise ValueError(f"an in-VM broker's name is letters, digits, '.', '-' or '_': {name!r}")
    broker = VmBroker(name, loop, accept)
    with _lock:
        if name in _served:
            raise ValueError(f"an in-VM broker named {name!r} already runs in this process")
        _served[name] = broker
    return broker


def unserve(broker: VmBroker) -> None:
    with _lock:
        if _served.get(broker.name) is broker:
            del _served[broker.name]


def served(name: str) -> VmBroker:
    """The broker serving `vm://name` in this process; raises `NoVmBroker` naming those that run."""
    with _lock:
        broker = _served.get(name)
        names = sorted(_served)
    if broker is None:
        running = f"in-VM brokers running: {', '.join(names)}" if names else "no in-VM broker runs"
        raise NoVmBroker(f"no in-VM broker named {name!r} in this process ({running}); start one with "
                         f"EmbeddedBroker(name={name!r})")
    return broker


async def dial(name: str, protocol: asyncio.Protocol) -> None:
    """Connect `protocol` (on the running loop) to the broker serving `vm://name`."""
    broker = served(name)
    loop = asyncio.get_running_loop()
    if broker.loop is loop:
        server = broker.accept()
    else:
        server = await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(_accept(broker), broker.loop))
    ours = VmTransport(loop, protocol, ("vm", name))
    theirs = VmTransport(broker.loop, server, ("vm", f"{name}-client"))
    ours.peer, theirs.peer = theirs, ours
    if broker.loop is loop:
        server.connection_made(theirs)
    else:
        broker.loop.call_soon_threadsafe(server.connection_made, theirs)
    protocol.connection_made(ours)


async def _accept(broker: VmBroker) -> asyncio.Protocol:
    return broker.accept()


class VmTransport(asyncio.Transport):
    """One end of an in-VM connection: what is written here is handed to the peer's protocol."""

    def __init__(self, loop: asyncio.AbstractEventLoop, protocol: asyncio.Protocol, peername: tuple[str, str]) -> None:
        super().__init__()
        self._loop = loop
        self._protocol = protocol
        self._peername = peername
        self.peer: VmTransport | None = None
        self._inbox: deque[bytes] = deque()  # written by the peer, for our protocol
        self._inbox_bytes = 0
        self._scheduled = False
        self._reading = True
        self._closing = False
        self._lost = False
        self._eof_pending = False  # the peer closed: after the inbox, eof then lost
        self._writer_paused = False  # the peer's protocol was told pause_writing for our inbox
        self._count_lock = threading.Lock()

    # -- writing: into the peer's inbox -----------------------------------------------------------

    def write(self, data: bytes | bytearray | memoryview) -> None:
        peer = self.peer
        if self._closing or peer is None or peer._lost:
            return
        if not data:
            return
        peer._take(bytes(data))

    def writelines(self, list_of_data: Any) -> None:
        self.write(b"".join(list_of_data))

    def _take(self, data: bytes) -> None:
        """(The writer's thread.) Queue `data` for this end's protocol."""
        self._inbox.append(data)
        with self._count_lock:
            self._inbox_bytes += len(data)
            pause = self._inbox_bytes > HIGH_WATER_BYTES and not self._writer_paused
            if pause:
                self._writer_paused = True
        if pause and self.peer is not None:
            self.peer._protocol.pause_writing()
        self._schedule()

    def _schedule(self) -> None:
        if self._scheduled:
            return
        self._scheduled = True
        if self._loop.is_closed():
            return
        try:
            if _on_loop(self._loop):
                self._loop.call_soon(self._deliver)
            else:
                self._loop.call_soon_threadsafe(self._deliver)
        except RuntimeError:  # the loop closed under us: nobody reads any more
            pass

    def _deliver(self) -> None:
        """(This end's loop.) Hand what waits to the protocol, while it reads."""
        self._scheduled = False
        if self._lost or not self._reading:
            return
        inbox = self._inbox
        if inbox:
            chunks = []
            while inbox:
                chunks.append(inbox.popleft())
            data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
            with self._count_lock:
                self._inbox_bytes -= len(data)
                resume = self._writer_paused and self._inbox_bytes <= LOW_WATER_BYTES
                if resume:
                    self._writer_paused = False
            if resume and self.peer is not None:
                self.peer._call(self.peer._protocol.resume_writing)
            self._protocol.data_received(data)
        if self._eof_pending and not inbox and not self._lost:
            self._eof_pending = False
            self._protocol.eof_received()
            self._lose()

    def _call(self, callback: Callable[[], object]) -> None:
        if self._loop.is_closed():
            return
        if _on_loop(self._loop):
            self._loop.call_soon(callback)
        else:
            self._loop.call_soon_threadsafe(callback)

    # -- ending ---------------------------------------------------------------------------------

    def close(self) -> None:
        """Deliver what was written, then end both sides."""
        if self._closing:
            return
        self._closing = True
        peer = self.peer
        if peer is not None:
            peer._call(peer._peer_closed)
        self._call(self._lose)

    def _peer_closed(self) -> None:
        self._eof_pending = True
        self._scheduled = False
        self._deliver()

    def abort(self) -> None:
        self._closing = True
        peer = self.peer
        if peer is not None:
            peer._call(peer._aborted)
        self._call(self._lose)

    def _aborted(self) -> None:
        self._inbox.clear()
        self._lose()

    def _lose(self) -> None:
        if self._lost:
            return
        self._lost = True
        self._closing = True
        self._inbox.clear()
        self._protocol.connection_lost(None)

    def is_closing(self) -> bool:
        return self._closing or self._lost

    # -- reading --------------------------------------------------------------------------------

    def pause_reading(self) -> None:
        self._reading = False

    def resume_reading(self) -> None:
        if not self._reading:
            self._reading = True
            if self._inbox or self._eof_pending:
                self._scheduled = False
                self._schedule()

    def is_reading(self) -> bool:
        return self._reading and not self._lost

    # -- the rest of a transport ------------------------------------------------------------------

    def get_write_buffer_size(self) -> int:
        peer = self.peer
        return 0 if peer is None else peer._inbox_bytes

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass  # fixed: HIGH_WATER_BYTES, LOW_WATER_BYTES

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return LOW_WATER_BYTES, HIGH_WATER_BYTES

    def can_write_eof(self) -> bool:
        return False

    def write_eof(self) -> None:
        self.close()

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._protocol

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        assert isinstance(protocol, asyncio.Protocol)
        self._protocol = protocol

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "peername":
            return self._peername
        return default


def _on_loop(loop: asyncio.AbstractEventLoop) -> bool:
    return asyncio._get_running_loop() is loop
