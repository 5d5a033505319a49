"""The node: a STOMP listener in front of one replica of the broker, joined by the commit log.

Connections (raftmq.server.stomp.connection) propose commands to the `CommitLog`; the log hands
committed batches to the node's `Replica` (raftmq.server.replica.state_machine), which applies them to the
core and executes the effects on this node's connections. The node is the host both sides
need: it implements `ConnectionHost` (raftmq.server.seams.host) for its connections and
`ReplicaHost` for its replica, and reacts to leadership changes through `Succession`.

In a group (raftmq.app.group builds it) the log is a `RaftLog` and every member applies: bodies
go to the body journal, the core holds references. Only the leader serves client sessions and
proposes Ticks; a follower relays its clients' connections to the leader
(raftmq.server.stomp.relay) or, in redirect mode, refuses them naming the leader.
"""

from __future__ import annotations

import asyncio
import itertools
import secrets
from collections.abc import Sequence
from typing import Any

import structlog

from raftmq.clock import Clock, SystemClock
from raftmq.config import NodeConfig, split_address
from raftmq.core.address_settings import BLOCK
from raftmq.core.broker import Broker
from raftmq.core.commands import Command, Connect, Manage
from raftmq.core.effects import Managed
from raftmq.errors import CommitFailed, NotLeader
from raftmq.replication.commit_log import CommitLog, InMemoryLog, Proposer
from raftmq.security import Security
from raftmq.server.gc_tuning import tune_gc
from raftmq.server.links.bridge import bridges_for
from raftmq.server.links.bridge_session import BridgeSession
from raftmq.server.links.cluster_events import ClusterEvents
from raftmq.server.links.discovery import Announcer, DiscoveredLinks
from raftmq.server.links.forward_first import ForwardFirst
from raftmq.server.links.hub_links import EdgeLinks, HubLink
from raftmq.server.mqtt.edge import MqttEdge
from raftmq.server.node_status import cluster_status, node_status
from raftmq.server.rates import IDLE_SAMPLE_SECONDS, SAMPLE_SECONDS, RateSampler
from raftmq.server.replica.bodies import BodyStore
from raftmq.server.replica.state_machine import BodyFetcher, Replica
from raftmq.server.seams.flow import Fairness, FlowGate
from raftmq.server.seams.host import ClientConnection, LeaderService
from raftmq.server.seams.pulse import Pulse
from raftmq.server.stomp import hand_over as handing
from raftmq.server.stomp.connection import Connection
from raftmq.server.stomp.relay import Relays
from raftmq.server.stomp.relay_sides import LINGER_SECONDS
from raftmq.server.succession import Succession
from raftmq.server.ticker import tick_forever
from raftmq.server.websocket.session import HandshakeGate
from raftmq.tls import server_ssl_context
from raftmq.web_guard import HostNames

log = structlog.get_logger("raftmq.server.node")

# How long a stopping node waits for the Disconnects of its closed sessions to commit.
STOP_DRAIN_SECONDS = 2.0
# How long a stopping leader that handed its sessions over waits for the other members' relays of
# them to move to the successor (raftmq.server.stomp.relay) before it ends the rest.
MOVE_AWAY_SECONDS = 0.3
HAND_OVER_SETTLE_SECONDS = 2.0  # its sessions' hand-overs (each waits up to 1 s for its commands)
MANAGE_TIMEOUT_SECONDS = 10.0


class Node:
    """One broker node; in-process usable: `await node.start()`, `node.address`, `await node.stop()`."""

    def __init__(self, config: NodeConfig, commit_log: CommitLog | None = None, *, name: str | None = None,
                 bodies: BodyStore | None = None, fetch_bodies: BodyFetcher | None = None,
                 clock: Clock | None = None) -> None:
        self._config = config
        # Where the `now` of commands and rate samples comes from (a ManualClock in tests);
        # the loop's own timers (heart-beats, timeouts) stay on the loop's clock.
        self.clock: Clock = clock or SystemClock()
        self.commit_log = commit_log if commit_log is not None else InMemoryLog()
        self._security = Security(config.security)  # logins, ACL, TLS; sessions ask it
        self.name = name or config.name
        self.sessions: dict[str, ClientConnection] = {}  # client connections and bridge sessions
        self.hand_over_secret: str | None = None  # the group's: signs sessions handed to a successor (app.group)
        self.replica = Replica(self, bodies, fetch_bodies)
        self._managing: dict[str, asyncio.Future[Managed]] = {}  # admin requests awaiting their Managed effect
        self.succession = Succession(self)
        self._relays = Relays(self)  # sessions of this follower's clients, piped to the leader
        self.flow: FlowGate | None = None  # BLOCK's gate, when an address setting blocks (started with the node)
        self._fairness: Fairness | None = None  # [server] fair_queue_depth
        self._boot = secrets.token_hex(4)  # session ids stay unique across restarts
        self._session_numbers = itertools.count(1)
        self._server: asyncio.base_events.Server | None = None
        self._websocket_server: asyncio.base_events.Server | None = None  # [server] websocket, when set
        self.mqtt = MqttEdge(self, lambda: self.replica.broker.state)  # its listener: when `mqtt` is set
        self.websocket_handshakes = HandshakeGate(config.websocket_max_handshakes)
        self.mobility = handing.Underway()  # this node's hand-overs, adoptions and parkings under way
        # The names a web page may use for this node (raftmq.web_guard).
        self.known_names = HostNames.of(config.host, config.bind_host, config.websocket, *config.host_names)
        self._tick_task: asyncio.Task[None] | None = None
        self._sample_task: asyncio.Task[None] | None = None
        self.rates = RateSampler()  # enqueue/dequeue msg/s for status(); the core has no clock
        self._rates_stale = False  # set by a replay or restore: the counters jumped, rates restart
        self._loop: asyncio.AbstractEventLoop | None = None
        self._address: tuple[str, int] | None = None
        self._stopping = False
        self.internal_errors = 0  # connections closed because handling their input raised
        self.unfinished_frame_bytes = 0  # buffered by all sessions' parsers (max_unfinished_frame_bytes)
        self.failure: str | None = None  # set when the node must stop (journal unwritable, core bug)
        self.failed = asyncio.Event()
        self._connected_at: dict[str, float] = {}  # session id -> loop time its CONNECT committed
        cluster = config.core.cluster
        # In a cluster of groups the leader runs a bridge to each neighbouring group.
        self.bridges: list[Any] = list(bridges_for(self, cluster, config.cluster_peers)) if cluster is not None else []
        for bridge in self.bridges:
            self.add_leader_service(bridge)
        if cluster is not None:
            for connection in cluster.discovery:  # their bridges join self.bridges as groups are found
                self.add_leader_service(DiscoveredLinks(self, cluster.group, connection, self.bridges))
            hubs_file = config.cluster_hubs_file
            for connection in cluster.hubs:  # an edge's (embedded broker's) links to its hubs
                self.add_leader_service(HubLink(self, cluster.group, connection, self.bridges, hubs_file))
            if cluster.accepts_edges:  # a hub's passive links to the edges that show themselves
                self.add_leader_service(EdgeLinks(self, cluster, self.bridges))
            if cluster.discovery and config.cluster_broadcast:
                self.add_leader_service(Announcer(cluster.group, config.cluster_group_clients, config.cluster_broadcast,
                                                  cluster.discovery))
        if cluster is not None:
            self.add_leader_service(ClusterEvents(self))
        # A SEND bound for a neighbour goes there before it is stored here.
        self.forward_first: ForwardFirst | None = ForwardFirst(self) if cluster is not None else None

    # -- what connections and the replica ask (ConnectionHost, ReplicaHost)

    @property
    def config(self) -> NodeConfig:
        return self._config

    @property
    def security(self) -> Security:
        return self._security

    @property
    def relays(self) -> Relays:
        return self._relays

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        assert self._loop is not None, "node not started"
        return self._loop

    @property
    def broker(self) -> Broker:
        return self.replica.broker

    @property
    def applied(self) -> Pulse:
        """Beats after every applied batch and on a role change (raftmq.server.seams.pulse)."""
        return self.replica.applied

    @property
    def is_leader(self) -> bool:
        return self.commit_log.is_leader

    @property
    def leader_hint(self) -> str | None:
        return self.commit_log.leader_hint

    @property
    def draining(self) -> str | None:
        routing = self.broker.routing
        if routing is None or routing.cluster_state.draining is None:
            return None
        return ",".join(address for peer in self._config.cluster_peers for address in peer.clients) or "none known"

    def refuse_clients(self, message: str, detail: str) -> int:
        """End every client session (a drained group serves no one): their unacknowledged
        deliveries go back to their queues. The bridges' in-process sessions stay."""
        closed = 0
        for session in list(self.sessions.values()):
            if not isinstance(session, BridgeSession) and not getattr(session, "cluster_connection", False):
                session.fail(message, detail)  # after what it sent is committed and receipted
                closed += 1
        return closed

    @property
    def connection_count(self) -> int:
        return len(self.sessions)

    def has_destination(self, destination: str) -> bool:
        return self.replica.broker.has_destination(destination)

    def _flow_blocked(self, destination: str, proposed: int, proposed_bytes: int) -> bool:
        """Must a SEND to `destination` wait (raftmq.server.seams.flow): BLOCK, or fairness?"""
        broker = self.replica.broker
        full = broker.limits.full(broker.state, destination, proposed, proposed_bytes)
        if full is not None and full.address_full_policy == BLOCK:
            return True
        fairness = self._fairness
        store = broker.state.queues.get(destination) if fairness is not None else None
        return fairness is not None and store is not None and fairness.holds(store, proposed)

    def reserve_unfinished(self, grow: int) -> bool:
        if grow > 0 and self.unfinished_frame_bytes + grow > self._config.max_unfinished_frame_bytes:
            log.warning("client.refused", node=self.name, reason="unfinished-frame budget",
                        node_buffered=self.unfinished_frame_bytes)
            return False
        self.unfinished_frame_bytes += grow
        return True

    def propose(self, commands: Sequence[Command]) -> asyncio.Future[None]:
        return self.commit_log.propose(commands)

    def propose_for(self, commands: Sequence[Command], proposer: Proposer, number: int) -> None:
        self.commit_log.propose_for(commands, proposer, number)

    def holds_lease(self) -> bool:
        return self.commit_log.holds_lease()

    def internal_error(self) -> None:
        self.internal_errors += 1

    def connection_closed(self, connection: ClientConnection) -> None:
        self.sessions.pop(connection.session_id, None)
        self.succession.takeover.changed()  # a claim may have waited for this connection to go
        connected_at = self._connected_at.pop(connection.session_id, None)
        if connected_at is None:  # never got CONNECTED (a port probe, a refused CONNECT)
            log.debug("client.disconnected", node=self.name, session=connection.session_id, peer=connection.peer,
                      connected=False)
        else:
            log.info("client.disconnected", node=self.name, session=connection.session_id, peer=connection.peer,
                     connected_s=round(self.loop.time() - connected_at, 3))

    def connected(self, connection: ClientConnection, command: Connect) -> None:
        connection.connect_committed()
        self._connected_at[connection.session_id] = self.loop.time()
        # The passcode never reaches the core's Connect command, so it cannot be logged here.
        log.info("client.connected", node=self.name, session=connection.session_id, peer=connection.peer,
                 login=command.login, client_id=command.client_id, version=connection.version)

    def disconnected(self, connection: ClientConnection) -> None:
        if connection.reading and not self.commit_log.is_leader:
            # Not the client's own Disconnect: a new leader swept the sessions of this one
            # before it could tell its clients where to go. Tell them now.
            hint = self.succession.new_leader()
            detail = f"this node is no longer the leader of its group; leader: {hint or 'unknown'}"
            connection.fail("not the leader", detail, extra={"leader": hint} if hint else None, wait_for_log=False)
        else:
            connection.disconnect_committed()

    def replayed(self) -> None:
        self._rates_stale = True

    def managed(self, effect: Managed) -> None:
        waiter = self._managing.get(effect.session)
        if waiter is not None and not waiter.done():
            waiter.set_result(effect)

    async def manage(self, command: Manage) -> Managed:
        """Commit an operator's change (its `request` names it) and return what it did, once
        applied here. Raises NotLeader on a follower, CommitFailed when the outcome is unknown."""
        if not self.commit_log.is_leader:
            raise NotLeader(self.commit_log.leader_hint)
        waiter: asyncio.Future[Managed] = self.loop.create_future()
        self._managing[command.request] = waiter
        try:
            await self.commit_log.propose([command])
            return await asyncio.wait_for(waiter, MANAGE_TIMEOUT_SECONDS)
        except TimeoutError:
            raise CommitFailed("the change was committed but not applied in time") from None
        finally:
            self._managing.pop(command.request, None)

    def fail(self, reason: str) -> None:
        if self.failure is None:
            self.failure = reason
            log.critical("node.failed", node=self.name, reason=reason)
            self.failed.set()

    def session_ids_in_core(self) -> list[str]:
        return list(self.replica.broker.session_ids())

    def own_client_address(self) -> str | None:
        return None if self._address is None else f"{self._config.host}:{self._address[1]}"

    def add_leader_service(self, service: LeaderService) -> None:
        self.succession.add_service(service)

    def register_session(self, session: ClientConnection) -> None:
        """An in-process session (a bridge's) the replica hands effects to like a connection's."""
        self.sessions[session.session_id] = session

    def rename_session(self, old: str, new: str) -> None:
        """A session handed over (its connection relays, under a local name) or adopted (its
        connection takes the session's id): raftmq.server.stomp.hand_over."""
        self.sessions[new] = self.sessions.pop(old)
        self.succession.takeover.changed()
        connected_at = self._connected_at.pop(old, None)
        self._connected_at[new] = self.loop.time() if connected_at is None else connected_at

    @property
    def awaiting_adoption(self) -> dict[str, Any]:
        """Sessions of the old leader this one may adopt, standing in for them in the replica."""
        return self.succession.takeover.awaiting

    def new_session_id(self, kind: str = "") -> str:
        """Unique across the group's nodes and restarts (node name, boot token, counter)."""
        return f"{self.name}:{self._boot}:{kind}{next(self._session_numbers)}"

    # -- lifecycle

    @property
    def address(self) -> tuple[str, int]:
        assert self._address is not None, "node not started"
        return self._address

    def _leader_changed(self) -> None:
        """The leader this node knows of may have changed (the commit log says so as it learns)."""
        self.succession.leader_changed()
        self._relays.leader_changed()
        self.mqtt.leader_changed()

    def _role_changed(self, leader: bool) -> None:
        self.replica.applied.beat()  # the ticker, which proposes only on a leader, looks again
        self.succession.role_changed(leader)

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        if self._config.fair_queue_depth or any(a.address_full_policy == BLOCK for a in self._config.core.addresses):
            self.flow = FlowGate(self._loop, self._flow_blocked)
            if self._config.fair_queue_depth:
                self._fairness = Fairness(self._config.fair_queue_depth, self._loop.time)
        tune_gc()
        self.commit_log.set_role_listener(self._role_changed)
        self.commit_log.set_leader_listener(self._leader_changed)
        await self.commit_log.start(self.replica)
        host = self._config.bind_host or self._config.host
        self._server = await self._listen(host, self._config.port, websocket_only=False)
        self._address = tuple(self._server.sockets[0].getsockname()[:2])
        if self._config.websocket is not None:  # a listener for WebSocket clients only
            self._websocket_server = await self._listen(*split_address(self._config.websocket), websocket_only=True)
        if self._config.mqtt is not None:  # MQTT clients
            mqtt_host, mqtt_port = split_address(self._config.mqtt)
            tls = self._security.config.tls
            await self.mqtt.listen(self._config.bind_host or mqtt_host, mqtt_port,
                                   None if tls is None else server_ssl_context(tls))
        if self._config.tick_interval_ms > 0:
            self._tick_task = self._loop.create_task(tick_forever(self, self.replica.applied))
        self._sample_task = self._loop.create_task(self._sample_forever())
        if not self.commit_log.status().replicated:
            self.succession.lead_alone()
        log.info("node.started", node=self.name, host=self._address[0], port=self._address[1])

    async def stop(self) -> None:
        """Stop accepting; a group's leader first hands leadership over and sends its clients
        to the new leader; tell every remaining client the broker is shutting down, let their
        Disconnects commit (bounded), then stop the log."""
        if self._stopping or self._loop is None:
            return
        self._stopping = True
        for server in filter(None, (self._server, self._websocket_server, self.mqtt.server)):
            server.close()
        if self.flow is not None:
            self.flow.close()
        for task in (self._tick_task, self._sample_task):
            if task is not None:
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    pass
        await self.succession.stop()
        self.succession.going = True
        # A failed node's sessions are not handed over: entries committed after its failure made
        # deliveries it never wrote, which the successor would take as received. Ended, their
        # Disconnect returns what they hold to the queues.
        self.succession.stopping = self.failure is not None
        if self.commit_log.is_leader and await self._hand_over():
            await self.send_clients_off()
        self.succession.stopping = True  # its clients are told it stops, not handed over
        self._relays.farewell()  # the sessions still relayed from here end: their clients hear where the leader is
        for connection in list(self.sessions.values()):
            connection.shutdown()
        deadline = self.loop.time() + STOP_DRAIN_SECONDS
        while self.sessions and self.loop.time() < deadline:
            await asyncio.sleep(0.01)  # closing transports flush, then call connection_lost
        for connection in list(self.sessions.values()):
            connection.abort()  # a client that does not read is not waited for
        await asyncio.sleep(0)
        # An empty proposal completes after everything proposed before it (the Disconnects).
        drain = self.commit_log.propose([])
        try:
            await asyncio.wait_for(drain, max(0.1, deadline - self.loop.time()))
        except Exception:
            pass
        await self._relays.drained(LINGER_SECONDS)  # clients told where to resume have read it
        await self.commit_log.stop()
        log.info("node.stopped", node=self.name)

    async def _hand_over(self) -> bool:
        """Graceful stop of a group's leader: let what was proposed commit, then hand
        leadership to a caught-up follower before any client is closed. True once handed over."""
        try:
            await asyncio.wait_for(self.commit_log.propose([]), 1.0)
        except Exception:
            pass
        try:
            handed = await self.commit_log.transfer_leadership(timeout=1.0)
        except Exception:
            log.exception("node.transfer_failed", node=self.name)
            return False
        if handed:
            log.info("node.leadership_transferred", node=self.name, leader=self.commit_log.leader_hint)
        return handed

    async def _listen(self, host: str, port: int, websocket_only: bool) -> asyncio.base_events.Server:
        tls = self._security.config.tls
        return await self.loop.create_server(lambda: self._new_connection(websocket_only), host, port,
                                             reuse_address=True, backlog=1024,
                                             ssl=None if tls is None else server_ssl_context(tls))

    def serve_mqtt(self, transport: asyncio.Transport, replacing: ClientConnection) -> None:
        self.mqtt.serve(transport, replacing)

    def resume_here(self, transport: asyncio.Transport, session_id: str, held: bytes, stream_bytes: int,
                    eof: bool = False) -> None:
        """A relay of this node moved its session here (this node leads now): serve it on the
        relay's client transport (raftmq.server.stomp.relay, "moving closer"); `stream_bytes`:
        what the client sent before `held`; `eof`: the client half-closed after it."""
        connection = self._new_connection()
        transport.set_protocol(connection)
        connection.connection_made(transport)
        connection.stream_bytes = stream_bytes
        connection.resume_here(session_id, held, eof)

    async def send_clients_off(self) -> None:
        """This node handed its leadership over and goes next (a stop, a removal from its group):
        once its sessions are handed over, the other members' relays of them move to the
        successor (up to `MOVE_AWAY_SECONDS`); the sessions still relayed from here are its own
        clients', whose connections end with it: they are told where the leader is."""
        await self.succession.close_for_new_leader()
        await self.mobility.settled(HAND_OVER_SETTLE_SECONDS)
        await self._relays.moved_away(MOVE_AWAY_SECONDS)
        self.succession.stopping = True  # from now on its clients are told it goes, not handed over
        self._relays.farewell()

    def accept_in_vm(self) -> Connection:
        """The connection of a client in this process (raftmq.vm), served as a socket's."""
        return self._new_connection()

    def _new_connection(self, websocket_only: bool = False) -> Connection:
        session_id = self.new_session_id()
        connection = Connection(self, session_id, websocket_only)
        self.sessions[session_id] = connection
        return connection

    # -- status

    async def _sample_forever(self) -> None:
        seen = -1
        while True:
            destinations = self.broker.stats()["destinations"]
            self._sample_rates(self.forward_first.count_in(destinations) if self.forward_first else destinations)
            await asyncio.sleep(SAMPLE_SECONDS)
            # Counters move only in applied batches; an idle node still samples often enough to
            # keep one sample inside the window (a rate of 0, not an unknown one).
            seen = await self.applied.wait(seen, IDLE_SAMPLE_SECONDS - SAMPLE_SECONDS)

    def _sample_rates(self, destinations: dict[str, Any]) -> None:
        if self._rates_stale:
            self._rates_stale = False
            self.rates.restart(self.clock.monotonic(), destinations)
        else:
            self.rates.sample(self.clock.monotonic(), destinations)

    def rates_now(self, destinations: dict[str, Any]) -> dict[str, Any]:
        if self._rates_stale:
            self._sample_rates(destinations)
        return self.rates.rates(self.clock.monotonic(), destinations)

    def stats(self) -> dict[str, Any]:
        return {
            "sessions": len(self.sessions),
            "apply_failures": self.replica.apply_failures,
            "internal_errors": self.internal_errors,
            "broker": self.broker.stats(),
        }

    def status(self) -> dict[str, Any]:
        """Role, term, commit / applied index, counters and rates (JSON-able), for /status
        (raftmq.server.node_status)."""
        return node_status(self)

    def cluster_status(self) -> dict[str, Any]:
        """The group's name, its links and the groups it knows, for `raftmq status`."""
        return cluster_status(self)
