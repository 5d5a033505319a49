"""A node's MQTT side: its listener, its connections by client id (a second CONNECT with a client
id takes the session over from the first), and what the core keeps of persistent sessions."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable, MutableMapping
from typing import Protocol

from raftmq.core import shares
from raftmq.core.state import BrokerState
from raftmq.server.mqtt.connection import MqttConnection
from raftmq.server.mqtt.kept import Kept, kept, prefix_of
from raftmq.server.seams.host import ClientConnection, ConnectionHost


class EdgeHost(ConnectionHost, Protocol):
    @property
    def sessions(self) -> MutableMapping[str, ClientConnection]: ...


class MqttEdge:
    def __init__(self, host: EdgeHost, core: Callable[[], BrokerState]) -> None:
        self._host = host
        self._core = core  # the core's state: its durable subscriptions, shares and QoS 2 keys, read as they are
        self.server: asyncio.base_events.Server | None = None
        self.clients: dict[str, MqttConnection] = {}  # live sessions by client id

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
        transport.set_protocol(connection)
        connection.connection_made(transport)

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
