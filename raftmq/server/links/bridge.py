"""A cluster bridge: the leader of one group moving messages to one neighbouring group.

One `Bridge` per neighbour runs on the group's leader only (a `LeaderService`). It

- consumes the neighbour's store-and-forward queue through an in-process session of its own
  core (raftmq.server.links.bridge_session), at most `confirmation_window` messages in flight;
- SENDs each to the neighbour's leader with our failover client (following leader changes
  there, reconnecting with the connection's retry settings), to the destination it was sent
  to, with a duplicate-detection id made of its message id and target group
  (raftmq.routing.route.dedup_id) and a receipt;
- sends what it has ready in batches (raftmq.routing.forward_batch) when duplicate detection is
  on: one SEND frame of up to `BATCH_MESSAGES` messages, one Raft entry in the neighbour, one
  RECEIPT, one proposal of the ACKs here. A message over `SINGLE_BYTES`, a batch of one, and the
  messages of a batch the neighbour refused as a whole go as SENDs of their own;
- ACKs it in its own group only after that RECEIPT, i.e. after the neighbour's majority
  committed and fsynced it. A crash or leader change anywhere before the ACK means the message
  is delivered to the bridge again and sent again with the same id: the neighbour stores it
  once. A SEND the neighbour refuses outright (too large, not allowed) is NACKed: after
  `max_delivery_count` refusals it goes to the dead-letter queue, never silently away;
- tells the neighbour, as an advert on the control destination, which destinations and
  consumers can be reached through this group (raftmq.routing.bindings): at once on every change,
  and every `ADVERT_REFRESH_SECONDS` (30 s) anyway.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from cluster.group_file import load_members
from raftmq.client.failover import FailoverClient
from raftmq.client.failover_connector import FailoverEvent
from raftmq.client.failover_url import FailoverOptions
from raftmq.core.effects import Deliver
from raftmq.errors import BrokerRefused, ClientError, ConfigError
from raftmq.protocol.header_block import pairs_of
from raftmq.replication.commit_log import ignore_outcome
from raftmq.routing.bindings import encode_advert
from raftmq.routing.cluster_connection import ClusterConnection, ClusterView, PeerGroup
from raftmq.routing.forward_batch import BATCH_COUNT_HEADER, BATCH_DESTINATION, encode
from raftmq.routing.route import ADVERT_HEADER, BRIDGE_CONNECT_HEADER, CONTROL_DESTINATION, outgoing, sf_queue
from raftmq.server.links.bridge_session import ADVERT_CHECK_SECONDS, ADVERT_REFRESH_SECONDS, BridgeSession
from raftmq.server.links.first_lane import BATCH_BYTES, BATCH_MESSAGES, SINGLE_BYTES, FirstLane, batch_index
from raftmq.server.links.passive_link import PassiveLink, Puller
from raftmq.server.seams.host import BridgeHost
from raftmq.server.seams.leader_task import LeaderTask

if TYPE_CHECKING:
    from raftmq.server.links.first_lane import FirstSend, Outcome

log = structlog.get_logger("raftmq.server.bridge")

ELECTION_RETRY_SECONDS = 1.0  # while the neighbour elects: at most one attempt this often

Ready = tuple[Deliver, bytes]  # a delivery of the store-and-forward queue, with its body

class Bridge(LeaderTask):
    def __init__(self, host: BridgeHost, own_group: str, neighbour: PeerGroup, settings: ClusterConnection,
                 advertises: bool = True, pulls: bool = False) -> None:
        self.name = f"bridge {own_group}->{neighbour.name}"
        self._host = host
        self.own_group = own_group
        self.neighbour = neighbour
        self.settings = settings
        self.advertises = advertises  # the neighbour forwards to this group: it needs our bindings
        self.pulls = pulls  # this connection is the link's only one: the neighbour's traffic comes back on it
        self._puller: Puller | None = None
        self.presence: str | None = None  # a discovered group: "up" while heard of, else "down"
        self.queue = sf_queue(neighbour.name)
        self._client: FailoverClient | None = None
        self._session: BridgeSession | None = None
        # What `raftmq status` shows of the link.
        self.state = "stopped"  # stopped, connecting, connected, retrying, failed
        self.retry_at: float | None = None  # monotonic time of the next reconnect attempt
        self.forwarded = 0  # confirmed by the neighbour and acknowledged here
        self.batches = 0  # batch frames the neighbour confirmed
        self.refused = 0  # refused by the neighbour (NACKed)
        self.in_flight = 0
        self.adverts_sent = 0
        self.last_error: str | None = None
        self._attempt = 0
        self._members_moved = False  # the neighbour's members file lists others than we try
        self._back = asyncio.Event()  # the neighbour is back: end the wait before starting over
        self.retries_now = 0  # back-off waits cut short because the neighbour was back
        self._singles: set[str] = set()  # ack ids of deliveries to send alone (their batch was refused whole)
        self._electing_at = 0.0  # the last retry cut short because the neighbour was electing
        self.firsts = FirstLane(own_group)  # forwards first awaiting the neighbour's word
        self._free_waiters: list[Callable[[], None]] = []  # SENDs that may go first once the queue went

    # -- LeaderService ----------------------------------------------------------------------

    async def stop(self) -> None:
        await super().stop()
        await self._close()
        self.state = "stopped"
        log.info("bridge.stopped", bridge=self.name, forwarded=self.forwarded, batches=self.batches,
                 refused=self.refused)

    # -- the link -----------------------------------------------------------------------------

    async def run(self) -> None:
        """A bridge never dies silently: when its client gives up (`reconnect_attempts`), its
        session ends, so what it had in flight returns to the queue, the link shows `failed`,
        and after `max_retry_interval_ms` it starts over."""
        watcher = asyncio.get_running_loop().create_task(self._watch_neighbour())
        try:
            while True:
                try:
                    await self._run()
                finally:
                    await self._close()
                    self._host.applied.beat()  # the watcher looks every check period while the link is down
                self._back.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._back.wait(), self.settings.retry.max_retry_interval_ms / 1000)
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await watcher

    async def _watch_neighbour(self) -> None:
        """Retry at once, instead of at the end of the back-off, when the neighbour is back: an
        advert from it committed here (its leader's bridge reached us), or discovery hearing it
        again. A link that waited out a long back-off after the neighbour returned left
        messages in the store-and-forward queue for seconds."""
        last_position: int | None = None
        last_presence = self.presence
        seen = -1
        while True:
            # While the link is up there is nothing to hasten: look again when the pulse moves
            # (an advert applied, the link lost: `run`); while it is down, every check period.
            down = self.state in ("retrying", "failed", "connecting")
            seen = await self._host.applied.wait(seen, ADVERT_CHECK_SECONDS if down else None)
            if not down:
                await asyncio.sleep(ADVERT_CHECK_SECONDS)  # one look for a burst of batches
            routing = self._host.broker.routing
            advert = None if routing is None else routing.cluster_state.adverts.get(self.neighbour.name)
            position = None if advert is None else advert.position
            back = (position is not None and last_position is not None and position != last_position) or (
                self.presence == "up" and last_presence == "down") or self._electing()
            last_position, last_presence = position, self.presence
            if back and self.state in ("retrying", "failed", "connecting"):
                log.info("bridge.neighbour_back", bridge=self.name)
                self.retries_now += 1
                self._back.set()
                if self._client is not None:
                    self._client.retry_now()

    def _electing(self) -> bool:
        """The neighbour answered `not the leader` without naming one: it is up and electing,
        which takes about a second. A link that opens the only connection (a duplex spoke) hears
        no advert meanwhile, so without this it would wait out its whole back-off."""
        now = time.monotonic()
        if (self.state != "retrying" or "not the leader" not in (self.last_error or "") or self.retry_at is None
                or self.retry_at - now <= ELECTION_RETRY_SECONDS or now - self._electing_at < ELECTION_RETRY_SECONDS):
            return False
        self._electing_at = now
        return True

    async def _run(self) -> None:
        settings = self.settings
        retry = settings.retry
        options = FailoverOptions(
            initial_reconnect_delay_ms=retry.retry_interval_ms,
            max_reconnect_delay_ms=retry.max_retry_interval_ms,
            use_exponential_backoff=retry.retry_interval_multiplier > 1,
            backoff_multiplier=retry.retry_interval_multiplier,
            max_reconnect_attempts=retry.reconnect_attempts,
            randomize=False,
        )
        self.state = "connecting"
        self.neighbour = current_members(self.neighbour)
        client = self._client = FailoverClient(
            [list(self.neighbour.clients)], options,
            login=settings.cluster_user, passcode=settings.cluster_password,
            heartbeat=(1_000, 1_000),  # a hung neighbour leader is noticed in ~2 s
            connect_headers=[(BRIDGE_CONNECT_HEADER, self.own_group)],
            ca_file=settings.tls_ca_file, tls=settings.tls_ca_file is not None,
        )
        client.events.append(self._on_event)
        try:
            await client.start()
        except ClientError as exc:
            self._failed(exc)
            return
        session = self._session = BridgeSession(
            self._host, self._host.new_session_id("bridge"), self.queue, settings.confirmation_window,
            settings.cluster_user,
        )
        await session.open()
        advertiser = asyncio.get_running_loop().create_task(self._advertise(client)) if self.advertises else None
        if self.pulls:
            self._puller = Puller(self.own_group, session, client, settings.confirmation_window,
                                  settings.use_duplicate_detection, on_failed=session.wakeup.set)
            self._puller.start()
        try:
            await self._forward(client, session)
        finally:
            if advertiser is not None:
                advertiser.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await advertiser

    async def _forward(self, client: FailoverClient, session: BridgeSession) -> None:
        client.closed.add_done_callback(lambda _: session.wakeup.set())
        while not session.closed.is_set():
            await session.wakeup.wait()
            session.wakeup.clear()
            if self._members_moved:  # reconnect to the members the neighbour has now
                self._members_moved = False
                log.info("bridge.following_members", bridge=self.name)
                self.state = "retrying"
                return
            if client.closed.done():  # gave up reconnecting (or closed): start over
                error = client.closed.result() if not client.closed.cancelled() else None
                self._failed(error if error is not None else ClientError("client closed"))
                return
            if self._puller is not None and self._puller.failed.is_set():
                self._failed(ClientError("a pulled message could not be stored here"))
                return
            if not self._send_ready(client, session):
                return
            self._freed()

    def _send_ready(self, client: FailoverClient, session: BridgeSession) -> bool:
        """Send every delivery waiting, in batches where it may; False once the client gave up
        (what was not confirmed returns with the session)."""
        deliveries = session.deliveries
        batching = self.settings.use_duplicate_detection  # a batch sent again relies on it
        batch: list[Ready] = []
        size = 0
        try:
            while deliveries:
                ready = deliveries.popleft()
                ack_id, body = ready[0].ack_id, ready[1]
                if not batching or len(body) > SINGLE_BYTES or ack_id in self._singles:
                    self._singles.discard(ack_id or "")
                    self._send_one(client, session, ready)
                    continue
                batch.append(ready)
                size += len(body)
                if len(batch) >= BATCH_MESSAGES or size >= BATCH_BYTES:
                    self._send_batch(client, session, batch)
                    batch, size = [], 0
            if batch:
                self._send_batch(client, session, batch)
        except ClientError as exc:  # the client gave up: the deliveries return with the session
            self._failed(exc)
            return False
        return True

    def _send_one(self, client: FailoverClient, session: BridgeSession, ready: Ready) -> None:
        effect, body = ready
        destination, headers = self._outgoing(effect)
        future = client.send_nowait(destination, body, headers, receipt=True)
        self.in_flight += 1
        future.add_done_callback(functools.partial(self._sent, session, effect.ack_id))

    def _send_batch(self, client: FailoverClient, session: BridgeSession, batch: list[Ready]) -> None:
        if len(batch) == 1:
            return self._send_one(client, session, batch[0])
        messages = []
        for effect, body in batch:
            destination, headers = self._outgoing(effect)
            messages.append((destination, headers, body))
        future = client.send_nowait(BATCH_DESTINATION, encode(messages), [(BATCH_COUNT_HEADER, str(len(batch)))],
                                    receipt=True)
        self.in_flight += len(batch)
        future.add_done_callback(functools.partial(self._batch_sent, session, batch))

    def _outgoing(self, effect: Deliver) -> tuple[str, list[tuple[str, str]]]:
        message = effect.message
        return outgoing(pairs_of(message.headers), message.message_id, self.neighbour.name,
                        self.settings.use_duplicate_detection)

    def _sent(self, session: BridgeSession, ack_id: str | None, future: asyncio.Future[Any]) -> None:
        self.in_flight -= 1
        if future.cancelled() or ack_id is None:
            return
        error = future.exception()
        if isinstance(error, BrokerRefused):
            self._refused(error)
            _settle(session, [ack_id], forwarded=False)
        elif error is None:
            self.forwarded += 1
            _settle(session, [ack_id], forwarded=True)
        # Otherwise the outcome is unknown (the client closed): the delivery comes back with the session.

    def _batch_sent(self, session: BridgeSession, batch: list[Ready], future: asyncio.Future[Any]) -> None:
        self.in_flight -= len(batch)
        if future.cancelled():
            return
        error = future.exception()
        if error is None:
            self.forwarded += len(batch)
            self.batches += 1
            _settle(session, [effect.ack_id for effect, _ in batch if effect.ack_id is not None], forwarded=True)
            return
        if not isinstance(error, BrokerRefused):
            return  # outcome unknown (the client closed): the deliveries come back with the session
        index = batch_index(error, len(batch))
        if index is None:
            # The neighbour refused the batch as a whole (its frame limits are smaller, say):
            # each message goes again alone, and gets its own outcome.
            log.warning("bridge.batch_refused", bridge=self.name, messages=len(batch), error=str(error))
            self._singles.update(effect.ack_id for effect, _ in batch if effect.ack_id is not None)
            session.put_back(batch)
            return
        stored, refused, unknown = batch[:index], batch[index], batch[index + 1:]
        if stored:
            self.forwarded += len(stored)
            _settle(session, [effect.ack_id for effect, _ in stored if effect.ack_id is not None], forwarded=True)
        self._refused(error)
        if refused[0].ack_id is not None:
            _settle(session, [refused[0].ack_id], forwarded=False)
        session.put_back(unknown)  # perhaps stored already: sent again, stored once

    # -- forwards first (raftmq.server.links.forward_first) ----------------------------------------

    def ready_first(self) -> bool | None:
        """May a SEND go to the neighbour before it is stored here: True when connected (with
        duplicate detection: a forward that falls back relies on it) and every message of its
        store-and-forward queue went on the wire already (a producer's order holds); None while
        some wait to be sent (`when_free`); False otherwise."""
        client = self._client
        session = self._session
        if self.state != "connected" or client is None or not client.is_connected or session is None \
                or not self.settings.use_duplicate_detection:
            return False
        store = self._host.broker.state.queues.get(self.queue)
        return None if session.deliveries or (store is not None and store.depth) else True

    def when_free(self, then: Callable[[], None]) -> None:
        """Call `then` once what waits in the store-and-forward queue went on the wire (or the link ended)."""
        self._free_waiters.append(then)

    def _freed(self, ended: bool = False) -> None:
        if self._free_waiters and (ended or self.ready_first() is not None):
            waiters, self._free_waiters = self._free_waiters, []
            for then in waiters:
                then()

    def forward_first(self, sends: list[FirstSend], outcome: Outcome) -> None:
        """Send `sends` to the neighbour's leader now (raftmq.server.links.first_lane)."""
        self.firsts.send(self._client, sends, outcome)

    def _refused(self, error: BrokerRefused) -> None:
        self.refused += 1
        self.last_error = f"refused by {self.neighbour.name}: {error}"
        log.warning("bridge.refused", bridge=self.name, error=str(error))

    async def _advertise(self, client: FailoverClient) -> None:
        """Advertise when the bindings changed (looked at once the node's pulse moves: an
        applied batch, a new connection; at most every ADVERT_CHECK_SECONDS), on a new
        connection, and every ADVERT_REFRESH_SECONDS anyway."""
        last: tuple[Any, ...] | None = None
        last_sent = 0.0
        connection = -1
        seen = -1
        while True:
            refresh = None if last is None else max(0.0, last_sent + ADVERT_REFRESH_SECONDS - time.monotonic())
            seen = await self._host.applied.wait(seen, refresh)
            await asyncio.sleep(ADVERT_CHECK_SECONDS)  # changes come in bursts: one look for all
            routing = self._host.broker.routing
            if routing is None or not client.is_connected:
                continue
            advert = routing.advert_for(self.neighbour.name, self._host.commit_log.position.index)
            content = (advert.groups, advert.bindings)
            now = time.monotonic()
            if content == last and connection == client.connection_number and now - last_sent < ADVERT_REFRESH_SECONDS:
                continue
            try:
                await client.send(CONTROL_DESTINATION, b"", [(ADVERT_HEADER, encode_advert(advert))], receipt=True)
            except BrokerRefused as exc:
                self.last_error = f"advert refused by {self.neighbour.name}: {exc}"
                log.error("bridge.advert_refused", bridge=self.name, error=str(exc))
                await asyncio.sleep(ADVERT_REFRESH_SECONDS)
                continue
            except ClientError:
                continue
            last, last_sent, connection = content, now, client.connection_number
            self.adverts_sent += 1

    def _on_event(self, event: FailoverEvent) -> None:
        if event.kind == "connected":
            self.state = "connected"
            self._attempt = 0
            self._host.applied.beat()  # the advert goes on the new connection
            self.retry_at = None
            log.info("bridge.connected", bridge=self.name, address=str(event.address))
        elif event.kind == "disconnected":
            self.state = "retrying"
            self.firsts.fall_back_all()
            self.last_error = str(event.error) if event.error is not None else "connection closed"
            log.warning("bridge.disconnected", bridge=self.name, address=str(event.address), error=self.last_error)
        elif event.kind == "attempt_failed":
            self.state = "retrying"
            delay = self.settings.retry.delay_ms(self._attempt) / 1000
            self._attempt += 1
            self.retry_at = time.monotonic() + delay
            self.last_error = str(event.error) if event.error is not None else self.last_error
            log.info("bridge.retrying", bridge=self.name, attempt=self._attempt, in_s=round(delay, 3),
                     error=self.last_error)
            session = self._session
            if session is not None and current_members(self.neighbour).clients != self.neighbour.clients:
                self._members_moved = True  # failing on members that may be gone: start over with the file's
                session.wakeup.set()

    def _failed(self, error: BaseException) -> None:
        self.state = "failed"
        self.last_error = str(error)
        log.error("bridge.failed", bridge=self.name, error=self.last_error)

    async def _close(self) -> None:
        session, self._session = self._session, None
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(Exception):
                await client.close(timeout=1.0)
        if session is not None:
            await session.close()
        self.firsts.fall_back_all()
        self._freed(ended=True)
        self.in_flight = 0
        self._singles.clear()  # ack ids of the closed session

    # -- status -------------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        store = self._host.broker.state.queues.get(self.queue)
        waiting = 0 if store is None else store.depth + store.in_flight
        retry_in = None if self.retry_at is None else max(0.0, round(self.retry_at - time.monotonic(), 1))
        return {
            "from": self.own_group,
            "to": self.neighbour.name,
            "state": self.state,
            "retry_in_s": retry_in if self.state == "retrying" else None,
            "forwarded": self.forwarded,
            "batches": self.batches,
            "refused": self.refused,
            "waiting": waiting,
            "in_flight": self.in_flight + self.firsts.in_flight,
            "forwarded_first": self.firsts.confirmed,  # sent before being stored here, confirmed there
            "fell_back": self.firsts.fell_back,  # set out first, then took the store path
            "adverts_sent": self.adverts_sent,
            "retries_now": self.retries_now,
            "last_error": self.last_error,
            **({"presence": self.presence} if self.presence is not None else {}),
        }


def _settle(session: BridgeSession, ack_ids: list[str], forwarded: bool) -> None:
    if session.closed.is_set() or not ack_ids:
        return  # the next leader's sweep returns them
    future = session.settle(ack_ids, forwarded)
    future.add_done_callback(ignore_outcome)


def bridges_for(host: BridgeHost, view: ClusterView, peers: Sequence[PeerGroup]) -> list[Bridge | PassiveLink]:
    """One bridge per neighbour of the group `view` describes; a passive link instead to a
    neighbour that alone opens the link's connection (raftmq.server.links.passive_link)."""
    by_name = {peer.name: peer for peer in peers}
    bridges: list[Bridge | PassiveLink] = []
    for neighbour in view.neighbours:
        advertises = neighbour in view.upstream
        if view.pulled_by(neighbour):
            bridges.append(PassiveLink(host, view.group, neighbour, advertises))
            continue
        peer = by_name.get(neighbour)
        if peer is None:
            log.error("bridge.no_addresses", group=view.group, neighbour=neighbour)
            continue
        settings = view.link_settings(neighbour)
        bridges.append(Bridge(host, view.group, peer, settings, advertises, view.pulls_from(neighbour)))
    return bridges


def current_members(peer: PeerGroup) -> PeerGroup:
    """`peer` with the members its members file lists now (`raftmq group add-node` /
    `remove-node` changed them since this node started), else as it was."""
    if peer.members_file is None or not os.path.exists(peer.members_file):
        return peer
    try:
        clients = tuple(member.client for member in load_members(Path(peer.members_file)))
    except ConfigError as exc:
        log.warning("bridge.members_file_unreadable", group=peer.name, error=str(exc))
        return peer
    if clients != peer.clients:
        log.info("bridge.members_changed", group=peer.name, members=list(clients))
    return dataclasses.replace(peer, clients=clients)
