"""Any member serves an MQTT client: a follower relays the connection to its group's leader.

Only the leader runs sessions. A follower that gets a CONNECT while `follower_clients` is `relay`
(the default) opens a connection to the leader's MQTT address (TLS pinned to the group's
certificate where the port uses TLS), writes what the client sent so far, and copies bytes both
ways without parsing them: the session is the leader's. When the leader changes, the relays to
the old one end (`MqttEdge.leader_changed`); an MQTT client connects again — to any member — and
its kept session resumes at the new leader. Unlike a STOMP relay (raftmq.server.stomp.relay), an
MQTT one does not move: MQTT clients reconnect by design, and their sessions are the core's.

Back-pressure: a side is not read while the other's write buffer is above its high-water mark.
No leader known yet (an election under way): the relay waits up to `LEADER_WAIT_SECONDS` for one.
None by then, or the leader not reachable within `CONNECT_SECONDS`: the client gets CONNACK
"server unavailable", as a follower answered before relays.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Callable

import structlog

from raftmq.config import split_address
from raftmq.tls import pinned

log = structlog.get_logger("raftmq.server.mqtt")

CONNECT_SECONDS = 1.0  # to open the connection to the leader (TCP, and TLS where the port uses it)
LEADER_WAIT_SECONDS = 3.0  # for a leader to be known, when none is
LEADER_LOOK_SECONDS = 0.02
MAX_EARLY_BYTES = 1 << 20  # what the client may send before the leader's connection is open


class _Upstream(asyncio.Protocol):
    def __init__(self, relay: MqttRelay) -> None:
        self._relay = relay

    def data_received(self, data: bytes) -> None:
        self._relay.client.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self._relay.upstream_lost()

    def pause_writing(self) -> None:
        self._relay.client.pause_reading()

    def resume_writing(self) -> None:
        if not self._relay.client.is_closing():
            self._relay.client.resume_reading()


class MqttRelay:
    """One client connection piped to the leader's MQTT address, which `leader` names (None while
    no leader is known). `refuse` answers the client when the leader cannot be reached (given what
    it sent); `ended` is told once it is over. `target`: the address relayed to, once chosen."""

    def __init__(self, loop: asyncio.AbstractEventLoop, client: asyncio.Transport, leader: Callable[[], str | None],
                 first: bytes, tls: tuple[ssl.SSLContext, bytes] | None, refuse: Callable[[bytes], None],
                 ended: Callable[[MqttRelay], None]) -> None:
        self.client = client
        self._leader = leader
        self.target: str | None = None
        self._early: list[bytes] | None = [first]
        self._early_bytes = len(first)
        self._upstream: asyncio.Transport | None = None
        self._refuse = refuse
        self._ended = ended
        self._over = False
        self._task = loop.create_task(self._open(loop, tls))

    async def _open(self, loop: asyncio.AbstractEventLoop, tls: tuple[ssl.SSLContext, bytes] | None) -> None:
        deadline = loop.time() + LEADER_WAIT_SECONDS
        while (target := self._leader()) is None and loop.time() < deadline:
            await asyncio.sleep(LEADER_LOOK_SECONDS)
        if target is None:
            log.info("mqtt.relay_failed", error="no leader known")
            self._give_up()
            return
        self.target = target
        host, port = split_address(target)
        try:
            async with asyncio.timeout(CONNECT_SECONDS):
                transport, _ = await loop.create_connection(
                    lambda: _Upstream(self), host, port, ssl=None if tls is None else tls[0],
                    server_hostname=None if tls is None else host)
            upstream = transport
            if tls is not None:
                ssl_object = upstream.get_extra_info("ssl_object")
                if not pinned(ssl_object.getpeercert(binary_form=True) if ssl_object else None, tls[1]):
                    upstream.abort()
                    raise ConnectionRefusedError("its certificate is not this group's ([tls] cert_file)")
        except (OSError, TimeoutError) as failed:  # ssl.SSLError is an OSError
            log.info("mqtt.relay_failed", leader=self.target, error=f"{type(failed).__name__}: {failed}")
            self._give_up()
            return
        if self._over:
            upstream.close()
            return
        self._upstream = upstream
        early, self._early = self._early or [], None
        upstream.writelines(early)
        log.info("mqtt.relayed", leader=self.target)

    def _give_up(self) -> None:
        early, self._early = self._early or [], None
        self._finish()
        self._refuse(b"".join(early))

    def forward(self, data: bytes) -> None:
        """What the client sent next."""
        if self._upstream is not None:
            self._upstream.write(data)  # (past its mark the client is not read: `_Upstream.pause_writing`)
        elif self._early is not None:
            self._early.append(data)
            self._early_bytes += len(data)
            if self._early_bytes > MAX_EARLY_BYTES:
                self.close()

    def client_writable(self, writable: bool) -> None:
        """The client's write buffer crossed its mark: the leader's side waits while it is full."""
        if self._upstream is not None and not self._upstream.is_closing():
            if writable:
                self._upstream.resume_reading()
            else:
                self._upstream.pause_reading()

    def upstream_lost(self) -> None:
        """The leader's side closed: the client's closes once what came is written."""
        self._finish()
        if not self.client.is_closing():
            self.client.close()

    def close(self) -> None:
        """End both sides (the leader changed, the client went, the node stops)."""
        self._finish()
        if not self._task.done():
            self._task.cancel()
        if self._upstream is not None:
            self._upstream.close()
        if not self.client.is_closing():
            self.client.close()

    def _finish(self) -> None:
        if not self._over:
            self._over = True
            with contextlib.suppress(Exception):
                self._ended(self)
