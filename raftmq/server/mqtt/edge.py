"""A node's MQTT side: its listener, its connections by client id (a second CONNECT with a client
id takes the session over from the first), and what the core keeps of persistent sessions."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable, Mapping, MutableMapping
from typing import Protocol

from raftmq.core import shares
from raftmq.core.state import BrokerState
from raftmq.server.mqtt.connection import MqttConnection
from raftmq.server.mqtt.kept import Kept, kept, prefix_of
from raftmq.server.mqtt.relay import MqttRelay
from raftmq.server.seams.host import ClientConnection, ConnectionHost
from raftmq.tls import member_client_tls


class EdgeHost(ConnectionHost, Protocol):
    @property
    def sessions(self) -> MutableMapping[str, ClientConnection]: ...


class MqttEdge:
    def __init__(self, host: EdgeHost, core: Callable[[], BrokerState]) -> None:
        self._host = host
        self._core = core  # the core's state: its durable subscriptions, shares and QoS 2 keys, read as they are
        self.server: asyncio.base_events.Server | None = None
        self.clients: dict[str, MqttConnection] = {}  # live sessions by client id
        # The group's members' MQTT addresses by client address (raftmq.app.group sets it): where
        # a follower relays a client to (raftmq.server.mqtt.relay); none known, none relayed.
        self.peers: Callable[[], Mapping[str, str]] = dict
        self.relays: set[MqttRelay] = set()
        self._tls: tuple[ssl.SSLContext, bytes] | None = None

    async def listen(self, host: str, port: int, tls: ssl.SSLContext | None) -> None:
        self.server = await self._host.loop.create_server(self.new_connection, host, port, reuse_address=True,
                                                          backlog=1024, ssl=tls)

    def new_connection(self) -> MqttConnection:
        session_id = self._host.new_session_id("m")
        connection = MqttConnection(self._host, session_id, self)
        self._host.sessions[session_id] = connection
        return connection

    def serve(self, transport: asyncio.Transport, replacing: ClientConnection) -> None:
        """MQTT over a WebSocket the STOMP port upgraded: the connection becomes an MQTT one."""
        self._host.sessions.pop(replacing.session_id, None)
        connection = self.new_connection()
        connection.transport_kind = getattr(replacing, "transport_kind", "ws")  # ws, or wss over TLS
        transport.set_protocol(connection)
        connection.connection_made(transport)

    def relay(self, client: asyncio.Transport, first: bytes, refuse: Callable[[bytes], None]) -> MqttRelay | None:
        """A follower's relay of a client's connection to the leader (once one is known); None
        where there is none: `follower_clients` is `redirect`, or the group's members' MQTT
        addresses are not known here."""
        if self._host.config.follower_clients != "relay" or not self.peers():
            return None
        relay = MqttRelay(self._host.loop, client, self._leader_mqtt, first, self._upstream_tls(), refuse,
                          self.relays.discard)
        self.relays.add(relay)
        return relay

    def leader_changed(self) -> None:
        """Relays to a leader that is no longer this node's leader end: their clients connect again
        (a relay still waiting for a leader to be known goes on waiting)."""
        target = self._leader_mqtt()
        for relay in list(self.relays):
            if relay.target is not None and relay.target != target:
                relay.close()

    def _leader_mqtt(self) -> str | None:
        hint = None if self._host.is_leader else self._host.leader_hint
        return None if hint is None else self.peers().get(hint)

    def _upstream_tls(self) -> tuple[ssl.SSLContext, bytes] | None:
        tls = self._host.security.config.tls
        if tls is None:
            return None
        if self._tls is None:
            self._tls = member_client_tls(tls)
        return self._tls

    def kept(self, client_id: str) -> list[Kept]:
        """What the core keeps of `client_id`'s persistent session (raftmq.server.mqtt.kept)."""
        state = self._core()
        return kept(state.durables, client_id, shares.kept(state, prefix_of(client_id)) if state.shares else ())

    def holds_keys(self, client_id: str) -> bool:
        """Whether the core keeps QoS 2 keys of `client_id` (publications it has not released)."""
        prefix = prefix_of(client_id)
        return any(key.startswith(prefix) for key in self._core().once)

    def releasing(self, client_id: str) -> list[int]:
        """The packet ids of QoS 2 deliveries `client_id` received (PUBREC) and did not complete
        (raftmq.server.mqtt.outbound): the core keeps a key for each until the PUBCOMP."""
        prefix = f"{prefix_of(client_id)}rel:"
        return [int(key[len(prefix):]) for key in self._core().once if key.startswith(prefix)]

    def claim(self, client_id: str, connection: MqttConnection) -> MqttConnection | None:
        """`connection` is `client_id`'s now; the one that was, if any (its session is taken over)."""
        previous = self.clients.get(client_id)
        self.clients[client_id] = connection
        return previous if previous is not connection else None

    def release(self, client_id: str, connection: MqttConnection) -> None:
        if self.clients.get(client_id) is connection:
            del self.clients[client_id]
