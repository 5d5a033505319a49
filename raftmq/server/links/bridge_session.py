"""The source side of a cluster bridge: a session of the leader's own core, without a socket.

It is a consumer of one store-and-forward queue (client-individual acks, the link's
confirmation window as its prefetch) — or of none, when it only sends: what a bridge pulled
from a neighbour, or a passive link's adverts — registered with the node like a client connection, so
the replica hands it deliveries (with their bodies) and the leader's succession treats it as
any session: when this node stops leading, it is closed and the next leader's sweep returns its
unacknowledged deliveries to the queue, to be forwarded again with the same duplicate id.
"""

from __future__ import annotations

import asyncio
from collections import deque

import structlog

from raftmq.core.commands import ACK_CLIENT_INDIVIDUAL, Ack, Command, Connect, Disconnect, Nack, Send, Subscribe
from raftmq.core.effects import Deliver
from raftmq.protocol.header_block import user_block
from raftmq.server.seams.host import BridgeSessionHost
from raftmq.server.stomp.session import SessionState

log = structlog.get_logger("raftmq.server.bridge_session")

SUBSCRIPTION_ID = "sf"
# The bindings are compared with the last advert sent when the node's pulse moves (an applied
# batch), at most this often.
ADVERT_CHECK_SECONDS = 0.1
# An unchanged advert is sent again this often: every advert is receipted (stored by the
# neighbour's majority) and one goes on every new connection, so this is only a safety net, and
# each one costs the neighbour a Raft entry.
ADVERT_REFRESH_SECONDS = 30.0


class BridgeSession:
    """Implements `ClientConnection` for the node; `deliveries` is what the bridge forwards."""

    def __init__(self, host: BridgeSessionHost, session_id: str, queue: str | None, window: int,
                 login: str | None) -> None:
        self._host = host
        self._session_id = session_id
        self._queue = queue
        self._window = window
        self._login = login
        self._state = SessionState.CONNECTING
        self._held = False
        self.deliveries: deque[tuple[Deliver, bytes]] = deque()
        self.wakeup = asyncio.Event()
        self.closed = asyncio.Event()

    async def open(self) -> None:
        """Join the core (as a consumer of the queue, if any); raises if the proposal fails."""
        self._host.register_session(self)
        now = self._host.clock.now_ms()
        commands: list[Command] = [Connect(self._session_id, now, self._login)]
        if self._queue is not None:
            commands.append(Subscribe(self._session_id, SUBSCRIPTION_ID, self._queue, now, ACK_CLIENT_INDIVIDUAL,
                                      prefetch=self._window))
        await self._host.propose(commands)

    def send(self, destination: str, headers: tuple[tuple[str, str], ...], body: bytes) -> asyncio.Future[None]:
        """Propose a SEND from this session; the future completes once it is applied."""
        send = Send(self._session_id, destination, user_block(headers), body, self._host.clock.now_ms())
        return self._host.propose([send])

    def settle(self, ack_ids: list[str], forwarded: bool) -> asyncio.Future[None]:
        """ACK forwarded deliveries (the neighbour committed them) or NACK refused ones, in one
        proposal."""
        now = self._host.clock.now_ms()
        kind = Ack if forwarded else Nack
        return self._host.propose([kind(self._session_id, now, ack_id=ack_id) for ack_id in ack_ids])

    def put_back(self, deliveries: list[tuple[Deliver, bytes]]) -> None:
        """Deliveries whose forward has no outcome yet go first in line again (sent again with
        the same duplicate-detection id); nothing once the session closed (they return with it)."""
        if self._state != SessionState.CLOSED and deliveries:
            self.deliveries.extendleft(reversed(deliveries))
            self.wakeup.set()

    async def close(self) -> None:
        """End the session: while this node still leads, its Disconnect returns what is in flight."""
        if self._state.reading and self._host.is_leader:
            self._state = SessionState.DISCONNECTING
            try:
                disconnect = Disconnect(self._session_id, self._host.clock.now_ms())
                await asyncio.wait_for(self._host.propose([disconnect]), 2.0)
            except Exception:
                pass  # the next leader's sweep disconnects it
        self._closed()

    def _closed(self) -> None:
        if self._state != SessionState.CLOSED:
            self._state = SessionState.CLOSED
            self._host.connection_closed(self)
            self.closed.set()
            self.wakeup.set()

    # -- ClientConnection -------------------------------------------------------------------

    @property
    def session_id(self) -> str:
        return self._session_id

    @property
    def peer(self) -> str:
        return f"bridge {self._queue}"

    @property
    def version(self) -> str:
        return "1.2"

    @property
    def reading(self) -> bool:
        return self._state.reading

    @property
    def open_for_output(self) -> bool:
        return self._state == SessionState.OPEN

    @property
    def held_for_redirect(self) -> bool:
        return self._held

    def connect_committed(self) -> None:
        if self._state == SessionState.CONNECTING:
            self._state = SessionState.OPEN

    def disconnect_committed(self) -> None:
        self._closed()

    def deliver(self, effect: Deliver, body: bytes | None = None) -> None:
        if self._state == SessionState.CLOSED:
            return
        self.deliveries.append((effect, body if body is not None else effect.message.body))
        self.wakeup.set()

    def receipt(self, receipt_id: str) -> None:
        pass  # the bridge waits on its proposals' futures instead

    def write(self, data: bytes) -> None:
        pass  # no frames: a browse never targets this session

    def fail(self, message: str, detail: str = "", receipt_id: str | None = None, *, wait_for_log: bool = True,
             abort: bool = False, extra: dict[str, str] | None = None) -> None:
        # The core refused one of this session's commands: that is a bug or a configuration
        # mismatch between groups, never routine, so it is logged.
        log.error("bridge.session_refused", session=self._session_id, message=message, detail=detail)
        self._closed()

    def hold_for_redirect(self) -> None:
        self._held = True

    def hand_over(self, leader: str) -> bool:
        return False  # a bridge belongs to its leader: the successor's own bridge takes over

    def shutdown(self) -> None:
        self._closed()

    def abort(self) -> None:
        self._closed()

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed()
