"""A link whose connection only one end opens (ActiveMQ Classic's network connector: the broker
that declares it connects; with `duplex` that one connection carries both directions, as a
spoke behind a firewall needs).

The opening end's bridge (raftmq.server.links.bridge) pushes its own traffic as on any link, and
with its `Puller` SUBSCRIBEs, on that same connection, to the store-and-forward queue the other
end keeps for it (client-individual acks, the link's window as prefetch). What arrives is what
the other end's own bridge would have pushed: forwards, and the other end's adverts. Each is
proposed into this group's core from the bridge's in-process session and ACKed to the other
end only once it is applied here, so, as with a push, a message is owned by exactly one group
at any moment; one redelivered after a failure is stored once (its forward id).

The other end runs a `PassiveLink` instead of a bridge: it opens nothing, and puts its adverts
for the opener into that store-and-forward queue (when they change, when the opener's pull
subscription appears, and every `ADVERT_REFRESH_SECONDS` while it is there). Its status shows
the link connected while the opener's subscription is there and, as what it forwarded, what
the opener pulled and ACKed (the core counts those ACKs in the committed cluster state).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import structlog

from raftmq.client.failover import FailoverClient
from raftmq.protocol.frame import Frame
from raftmq.routing.bindings import encode_advert
from raftmq.routing.route import ADVERT_HEADER, CONTROL_DESTINATION, outgoing, sf_queue
from raftmq.server.links.bridge_session import ADVERT_CHECK_SECONDS, ADVERT_REFRESH_SECONDS, BridgeSession
from raftmq.server.seams.leader_task import LeaderTask
from raftmq.server.stomp.frames import SERVER_MESSAGE_HEADERS

log = structlog.get_logger("raftmq.server.links.passive_link")


class Puller:
    """Pulls the neighbour's traffic for `own_group` over the bridge's client; `failed` is
    set when a pulled message could not be stored here (the bridge then starts over: what was
    not ACKed is delivered again)."""

    def __init__(self, own_group: str, session: BridgeSession, client: FailoverClient, window: int,
                 duplicate_detection: bool, on_failed: Callable[[], None]) -> None:
        self.own_group = own_group
        self._session = session
        self._client = client
        self._window = window
        self._duplicate_detection = duplicate_detection
        self.failed = asyncio.Event()
        self._on_failed = on_failed
        self.pulled = 0  # stored here and ACKed there
        self.adverts = 0

    def start(self) -> None:
        self._client.subscribe(sf_queue(self.own_group), ack="client-individual", prefetch=self._window,
                               callback=self._on_message)

    def _on_message(self, frame: Frame) -> None:
        if self.failed.is_set():
            return  # the bridge is starting over; the neighbour delivers it again
        headers = tuple((name, value) for name, value in frame.headers if name not in SERVER_MESSAGE_HEADERS)
        advert = next((value for name, value in headers if name == ADVERT_HEADER), None)
        if advert is not None:
            future = self._session.send(CONTROL_DESTINATION, ((ADVERT_HEADER, advert),), b"")
        else:
            message_id = frame.get("message-id") or ""
            destination, sent = outgoing(headers, message_id, self.own_group, self._duplicate_detection)
            future = self._session.send(destination, tuple(sent), frame.body)
        future.add_done_callback(lambda done: self._stored(frame, advert is not None, done))

    def _stored(self, frame: Frame, advert: bool, future: asyncio.Future[None]) -> None:
        # A session the core refused something of is closed before the proposal completes: then
        # nothing is ACKed (not knowing what was stored, the neighbour sends it again).
        if future.cancelled() or future.exception() is not None or self._session.closed.is_set():
            if not self.failed.is_set():
                error = None if future.cancelled() else future.exception()
                log.warning("bridge.pull_failed", group=self.own_group, error=str(error or "session closed"))
            self.failed.set()
            self._on_failed()
            return
        if advert:
            self.adverts += 1
        else:
            self.pulled += 1
        self._client.ack_nowait(frame)


class PassiveLink(LeaderTask):
    """The end of a link that the neighbour opens: a leader service like a bridge."""

    def __init__(self, host: Any, own_group: str, neighbour: str, advertises: bool) -> None:
        self.name = f"link {own_group}->{neighbour} (opened by {neighbour})"
        self._host = host
        self.own_group = own_group
        self.neighbour = neighbour
        self.advertises = advertises  # the neighbour forwards to this group: it needs our bindings
        self.queue = sf_queue(neighbour)
        self._session: BridgeSession | None = None
        self.last_error: str | None = None
        self._since = (0, 0)  # what the neighbour had confirmed when this node began to run the link

    def confirmed(self) -> tuple[int, int]:
        """(forwards, adverts) the neighbour confirmed, in all: it ACKs what it pulled, and the
        committed state counts those ACKs (raftmq.core.cluster_state), the same on every member."""
        routing = self._host.broker.routing
        if routing is None:
            return 0, 0
        cluster = routing.cluster_state
        return cluster.confirmed.get(self.neighbour, 0), cluster.adverts_confirmed.get(self.neighbour, 0)

    async def start(self) -> None:
        self._since = self.confirmed()  # a bridge's figures too count from when this node leads
        await super().start()

    async def stop(self) -> None:
        await super().stop()
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    def _pulling(self) -> bool:
        store = self._host.broker.state.queues.get(self.queue)
        return store is not None and bool(store.consumers)

    async def run(self) -> None:
        while True:
            session = self._session = BridgeSession(self._host, self._host.new_session_id("link"), None, 0, None)
            try:
                await session.open()
                await self._advertise(session)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a lost proposal (a leader change): start over
                self.last_error = str(exc)
                log.warning("bridge.passive_failed", link=self.name, error=self.last_error)
            await session.close()
            await asyncio.sleep(ADVERT_REFRESH_SECONDS)

    async def _advertise(self, session: BridgeSession) -> None:
        last: tuple[Any, ...] | None = None
        last_sent = 0.0
        was_pulling = False
        seen = -1
        while not session.closed.is_set():
            # Bindings and pulls change in applied batches; a session ends on a role change,
            # which moves the pulse too (the refresh bounds the wait anyway).
            seen = await self._host.applied.wait(seen, ADVERT_REFRESH_SECONDS)
            await asyncio.sleep(ADVERT_CHECK_SECONDS)  # one look for a burst of batches
            routing = self._host.broker.routing
            pulling = self._pulling()
            if routing is None or not self.advertises:
                continue
            advert = routing.advert_for(self.neighbour, self._host.commit_log.position.index)
            content = (advert.groups, advert.bindings)
            now = time.monotonic()
            due = content != last or (pulling and (not was_pulling or now - last_sent >= ADVERT_REFRESH_SECONDS))
            was_pulling = pulling
            if not due:
                continue
            # Stored as it is in the queue the neighbour pulls (raftmq.core.broker: SF sends).
            await session.send(self.queue, ((ADVERT_HEADER, encode_advert(advert)),), b"")
            last, last_sent = content, now

    def status(self) -> dict[str, Any]:
        store = self._host.broker.state.queues.get(self.queue)
        waiting = 0 if store is None else store.depth + store.in_flight
        forwarded, adverts = self.confirmed()
        return {
            "from": self.own_group,
            "to": self.neighbour,
            "state": "connected" if self._pulling() else "waiting",  # for the neighbour to connect
            "opened_by": self.neighbour,
            "retry_in_s": None,
            "forwarded": forwarded - self._since[0],  # pulled and ACKed by the neighbour
            "refused": 0,  # a neighbour that pulls never refuses: what it cannot store it takes again
            "waiting": waiting,
            "in_flight": 0 if store is None else store.in_flight,
            "adverts_sent": adverts - self._since[1],
            "last_error": self.last_error,
        }
