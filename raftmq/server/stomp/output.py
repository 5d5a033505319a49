"""What a client connection writes (`Output`, owned by raftmq.server.stomp.connection's
`Connection`): queued, then handed to the socket once per loop turn right after a check that
the leader lease holds, and only once the socket took all it was handed before
(docs/replication.md, "What a client can see of a deposed leader"). A check and the
`writelines` that follows it are adjacent, with no loop turn between."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Protocol

import structlog

from raftmq.protocol.codec import HEARTBEAT
from raftmq.server.seams.host import ConnectionHost
from raftmq.server.stomp.heartbeat import HeartBeats
from raftmq.server.websocket.session import POLICY
from raftmq.server.websocket.transport import WebSocketTransport

log = structlog.get_logger("raftmq.server.connection")

# A connection queueing more is an auto-ack consumer that does not keep up (acked ones: prefetch): closed.
SLOW_CONSUMER_BYTES = 64 * 1024 * 1024
# While the lease does not hold, or the socket has not taken what it was handed, queued output is
# looked at again this often (the lease is renewed by every heart-beat round, 20 ms by default).
RECHECK_SECONDS = 0.002
# A closing connection whose client does not read what is left is dropped after this long.
CLOSE_GRACE_SECONDS = 5.0


class Writer(Protocol):
    """What the output sees of its connection (raftmq.server.stomp.connection)."""

    host: ConnectionHost
    session_id: str
    peer: str

    @property
    def transport(self) -> asyncio.Transport | None:
        """The client's transport (a WebSocket once upgraded)."""
    @property
    def websocket(self) -> WebSocketTransport | None: ...
    @property
    def held_for_redirect(self) -> bool: ...
    @property
    def closed_for_good(self) -> bool:
        """The session is closed: an abort changes nothing."""
    def fail(self, message: str, detail: str = "", receipt_id: str | None = None, *, wait_for_log: bool = True,
             abort: bool = False, extra: dict[str, str] | None = None) -> None: ...


class Output:
    """A connection's output: frames queued this loop turn, handed to the socket in one flush."""

    def __init__(self, connection: Writer, loop: asyncio.AbstractEventLoop, beats: HeartBeats) -> None:
        self._connection = connection
        self._loop = loop
        self._beats = beats
        self._out: list[bytes] = []
        self._out_bytes = 0
        self._flush_scheduled = False
        self._after_flush: list[Callable[[], None]] = []  # run once no output waits (`when_flushed`)

    @property
    def unsent(self) -> bool:  # output queued, not yet handed to the socket
        return bool(self._out)

    def when_flushed(self, then: Callable[[], None]) -> None:
        """Run `then` once no output waits to be handed to the socket (at once if none does):
        after the flush that hands it over, or once the queue is dropped."""
        if self._out:
            self._after_flush.append(then)
        else:
            then()

    def drop(self) -> None:
        """The connection is gone: nothing waits to go out any more."""
        self._out.clear()
        self._flushed()

    def _flushed(self) -> None:
        after, self._after_flush = self._after_flush, []
        for then in after:
            then()

    def beat(self) -> bool:
        """A heart-beat's EOL; False when queued output will carry the line instead."""
        transport = self._connection.transport
        if transport is not None and not transport.is_closing() and not self._out:
            transport.write(HEARTBEAT)
        return not self._out

    def write(self, data: bytes) -> None:
        if self._connection.held_for_redirect:
            return  # the leadership left: what its successor's entries make is the successor's to write
        self._out.append(data)
        self._out_bytes += len(data)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        connection = self._connection
        transport = connection.transport
        if not self._out or transport is None or transport.is_closing():
            self._out, self._out_bytes = [], 0
            return self._flushed()
        if transport.get_write_buffer_size() or not connection.host.holds_lease():
            # Bytes handed over earlier wait for the socket (more handed over now would leave later,
            # unchecked), or our leadership may have ended unseen (this process was paused, or cut
            # off): what is queued waits, or is dropped when the session fails because the node
            # stepped down (a new leader redelivers it, flagged).
            if self._out_bytes > SLOW_CONSUMER_BYTES:  # it would never read an ERROR behind all that
                detail = f"more than {SLOW_CONSUMER_BYTES} bytes waiting to be read"
                return connection.fail("slow consumer", detail, abort=True)
            self._flush_scheduled = True
            self._loop.call_later(RECHECK_SECONDS, self._flush)
            return
        out, self._out, self._out_bytes = self._out, [], 0
        transport.writelines(out)  # at once: one send per flush (recent uvloop writev()s the list)
        self._beats.last_written = self._loop.time()
        if self._after_flush:
            self._flushed()

    def close_after_flush(self, last: bytes | None = None) -> None:
        """Write what is queued (only under the lease), then `last` (an ERROR), and close."""
        connection = self._connection
        transport = connection.transport
        if transport is None or transport.is_closing():
            return
        out, self._out, self._out_bytes = self._out, [], 0
        if out and not connection.host.holds_lease():
            log.info("client.writes_dropped", session=connection.session_id, peer=connection.peer, frames=len(out),
                     reason="leader lease lapsed")
            out = []
        if last is not None:
            out.append(last)
            websocket = connection.websocket
            if websocket is not None:
                websocket.close_code, websocket.close_reason = POLICY, "STOMP ERROR"
        if out:
            transport.write(b"".join(out))
        transport.close()  # asyncio closes after the buffered data is written
        self._loop.call_later(CLOSE_GRACE_SECONDS, self.abort)
        self._flushed()

    def abort(self) -> None:
        """Drop the connection without flushing (a client that stopped reading)."""
        transport = self._connection.transport
        if transport is not None and not self._connection.closed_for_good:
            transport.abort()
