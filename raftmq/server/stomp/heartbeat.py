"""A connection's STOMP heart-beats, at the intervals its session agreed
(raftmq.protocol.negotiation): an EOL when the line has been quiet, and an ERROR for a client
that promised heart-beats and went silent."""

from __future__ import annotations

import asyncio
from typing import Protocol

import structlog

from raftmq.server.stomp.session import StompSession

log = structlog.get_logger("raftmq.server.connection")

# Heart-beats are a liveness hint; send one when the line has been quiet this share of the interval.
HEARTBEAT_SEND_SLACK = 0.9
# Close a client that promised heart-beats and sent nothing for this many agreed intervals.
HEARTBEAT_RECEIVE_GRACE = 2.0


class Beating(Protocol):
    """What heart-beats see of their connection (raftmq.server.stomp.connection)."""

    stomp: StompSession
    session_id: str
    peer: str

    @property
    def reading_paused(self) -> bool:
        """This node is the one not reading: the client's silence is ours."""

    def beat(self) -> bool:
        """Write a heart-beat's EOL; False when queued output will carry the line instead."""

    def fail(self, message: str, detail: str = "") -> None: ...


class HeartBeats:
    def __init__(self, connection: Beating, loop: asyncio.AbstractEventLoop) -> None:
        self._connection = connection
        self._loop = loop
        self.last_received = 0.0  # loop time
        self.last_written = 0.0
        self._send_timer: asyncio.TimerHandle | None = None
        self._check_timer: asyncio.TimerHandle | None = None

    def start(self) -> None:
        stomp = self._connection.stomp
        if stomp.send_interval_ms:
            self._send_timer = self._loop.call_later(stomp.send_interval_ms / 1000, self._send)
        if stomp.receive_interval_ms:
            self._check_timer = self._loop.call_later(stomp.receive_interval_ms / 1000, self._check)

    def stop(self) -> None:
        for timer in (self._send_timer, self._check_timer):
            if timer is not None:
                timer.cancel()

    def _send(self) -> None:
        connection = self._connection
        if connection.stomp.state.ended:
            return
        interval = connection.stomp.send_interval_ms / 1000
        now = self._loop.time()
        quiet = now - self.last_written
        if quiet >= interval * HEARTBEAT_SEND_SLACK and connection.beat():
            self.last_written = now
            quiet = 0.0
        self._send_timer = self._loop.call_later(max(0.001, interval - quiet), self._send)

    def _check(self) -> None:
        connection = self._connection
        if connection.stomp.state.ended:
            return
        interval = connection.stomp.receive_interval_ms / 1000
        now = self._loop.time()
        if connection.reading_paused:
            self.last_received = now  # we are the ones not reading: the silence is ours
        silent = now - self.last_received
        limit = interval * HEARTBEAT_RECEIVE_GRACE
        if silent > limit:
            log.info("client.heartbeat_timeout", session=connection.session_id, peer=connection.peer,
                     silent_s=round(silent, 3))
            detail = f"nothing received for {silent:.1f} s (agreed interval {interval:.3f} s)"
            connection.fail("heart-beat timeout", detail)
            return
        self._check_timer = self._loop.call_later(max(0.001, limit - silent), self._check)
