"""STOMP heart-beats on the client side: the negotiation rule and the two timers."""

from __future__ import annotations

import asyncio

from raftmq.client.transport import StompTransport
from raftmq.errors import ClientError
from raftmq.protocol.codec import HEARTBEAT
from raftmq.protocol.negotiation import HeartBeat, HeartbeatAgreement, agree_heartbeats, parse_heart_beat_leniently

# A peer is declared dead after this many silent receive intervals; the spec leaves the margin
# to us and network jitter or a GC pause on the broker should not cost a connection.
RECEIVE_GRACE_FACTOR = 2.0


def agree_with_broker(ours: tuple[int, int], theirs: str | None) -> HeartbeatAgreement:
    """What we send and expect, from our CONNECT's offer and the broker's CONNECTED header (a
    malformed one means no heart-beats; see raftmq.protocol.negotiation)."""
    return agree_heartbeats(HeartBeat(*ours), parse_heart_beat_leniently(theirs))


def negotiate_heartbeat(ours: tuple[int, int], theirs: str) -> tuple[int, int]:
    """(send every ms, expect data every ms) from our CONNECT and the broker's CONNECTED value.

    STOMP: we send every max(our cx, their cy) when both are non-zero, and expect something
    every max(our cy, their cx) when both are non-zero; 0 means never.
    """
    agreed = agree_with_broker(ours, theirs)
    return agreed.send_ms, agreed.receive_ms


class HeartbeatTimers:
    """Sends EOLs when we have been quiet, drops the connection when the broker has been."""

    def __init__(self, transport: StompTransport, agreed: HeartbeatAgreement) -> None:
        self._loop = asyncio.get_running_loop()
        self._transport = transport
        self._send_s = agreed.send_ms / 1000.0
        self._receive_s = agreed.receive_ms / 1000.0
        self._send_handle: asyncio.TimerHandle | None = None
        self._receive_handle: asyncio.TimerHandle | None = None

    def start(self) -> None:
        if self._send_s > 0:
            # Checking twice per interval keeps the worst gap below one interval.
            self._send_handle = self._loop.call_later(self._send_s / 2, self._send_tick)
        if self._receive_s > 0:
            self._receive_handle = self._loop.call_later(self._receive_s, self._receive_tick)

    def cancel(self) -> None:
        for handle in (self._send_handle, self._receive_handle):
            if handle is not None:
                handle.cancel()
        self._send_handle = self._receive_handle = None

    def _send_tick(self) -> None:
        if self._transport.is_lost:
            return
        if self._loop.time() - self._transport.last_sent >= self._send_s / 2:
            self._transport.write(HEARTBEAT)
        self._send_handle = self._loop.call_later(self._send_s / 2, self._send_tick)

    def _receive_tick(self) -> None:
        if self._transport.is_lost:
            return
        if self._transport.reading_held:
            # We stopped reading (a full subscription queue): the broker's bytes wait in the
            # socket, so its silence proves nothing.
            self._transport.last_received = self._loop.time()
        silent_for = self._loop.time() - self._transport.last_received
        if silent_for > self._receive_s * RECEIVE_GRACE_FACTOR:
            self._transport.abort(ClientError(f"no heart-beat from the broker for {silent_for:.1f} s"))
            return
        self._receive_handle = self._loop.call_later(self._receive_s, self._receive_tick)
