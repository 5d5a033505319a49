"""What each part of a node needs from the node around it: its host protocols, all here, so
that `raftmq.server.node.Node`'s API reads in one place as their union.

- `SessionHost`: what a STOMP session needs; `ConnectionHost`: what a connection shell needs
  on top. A test, a simulator or an in-process bridge can implement `SessionHost` alone and
  drive a `StompSession` without sockets.
- `NodeView`: what the node's parts see of it; `ReplicaHost` (the replica),
  `SuccessionHost` (leader changes, with the `LeaderService`s it starts and stops),
  `TickerHost` (the ticker), `RelayHost` (followers' relays to the leader),
  `BridgeSessionHost` / `BridgeHost` (cluster bridges) and `ClusterEventsHost` (the cluster
  event log) add what each needs.
- `ClientConnection`: what the node and its parts see of a client connection (a STOMP
  connection, or a bridge's session).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any, Protocol

from raftmq.clock import Clock
from raftmq.config import NodeConfig
from raftmq.core.broker import Broker
from raftmq.core.commands import Command, Connect, Send
from raftmq.core.effects import Deliver, Managed
from raftmq.replication.commit_log import CommitLog, Proposer
from raftmq.security import Security
from raftmq.server.seams.flow import FlowGate
from raftmq.server.seams.pulse import Pulse
from raftmq.web_guard import HostNames


class Spawner(Protocol):
    def spawn(self, coroutine: Coroutine[Any, Any, None]) -> None: ...


class Handshakes(Protocol):
    """The node's count of WebSocket upgrades being read (raftmq.server.websocket.session's
    `HandshakeGate`), as a connection sees it."""

    limit: int

    def start(self) -> bool:
        """Count one more; False (not counted) at the limit."""
        ...

    def end(self) -> None: ...


class ClientConnection(Protocol):
    """A client connection as the node's parts see it (`raftmq.server.stomp.connection.Connection`)."""

    @property
    def session_id(self) -> str: ...

    @property
    def peer(self) -> str: ...

    @property
    def version(self) -> str: ...

    @property
    def reading(self) -> bool:
        """The client's frames are still read (it has not disconnected, failed or closed)."""
        ...

    @property
    def open_for_output(self) -> bool: ...

    @property
    def held_for_redirect(self) -> bool: ...

    def connect_committed(self) -> None: ...

    def disconnect_committed(self) -> None: ...

    def deliver(self, effect: Deliver, body: bytes | None = None) -> None: ...

    def receipt(self, receipt_id: str) -> None: ...

    def write(self, data: bytes) -> None: ...

    def fail(self, message: str, detail: str = "", receipt_id: str | None = None, *, wait_for_log: bool = True,
             abort: bool = False, extra: dict[str, str] | None = None) -> None: ...

    def hold_for_redirect(self) -> None: ...

    def hand_over(self, leader: str) -> bool:
        """Move the session to the new leader at `leader` (False: it cannot move; the caller closes it)."""

    def shutdown(self) -> None: ...

    def abort(self) -> None: ...

    def connection_lost(self, exc: Exception | None) -> None: ...


class RelayedConnection(ClientConnection, Protocol):
    """A client connection a relay takes over."""

    stream_bytes: int  # bytes of the client's stream read on its socket (raftmq.server.stomp.adoption)
    parting: bool  # its relay parks the session as this node stops: the socket is the relay's to close
    @property
    def eof_pending(self) -> bool:
        """Its client (a follower's relay) half-closed before the relay took it over."""

    @property
    def via_relay(self) -> bool:
        """Another member's relay carries this connection (its CONNECT was marked relayed)."""


class RelayStarter(Protocol):
    def start(self, connection: RelayedConnection, transport: asyncio.Transport, prefix: bytes) -> None:
        """Take over `transport` (the connection's) and pipe it, after `prefix`, to the leader."""

    def to_successor(self, connection: RelayedConnection, transport: asyncio.Transport, prefix: bytes, leader: str,
                     session_id: str, refusal: bytes, hops: int, parked_at: int | None = None) -> None:
        """Pipe `transport` to the successor at `leader`, which adopts `session_id` (`prefix`: its
        ticket); `hops`: relays between the client and this node; `parked_at`: the successor
        parks the session, and the client is told to resume it there from that offset."""


class NodeView(Protocol):
    """What the node's parts (its replica, its succession) see of it."""

    @property
    def name(self) -> str: ...

    @property
    def commit_log(self) -> CommitLog: ...

    @property
    def sessions(self) -> Mapping[str, ClientConnection]: ...

    @property
    def clock(self) -> Clock: ...


class SessionHost(Protocol):
    @property
    def config(self) -> NodeConfig: ...

    @property
    def security(self) -> Security: ...

    @property
    def is_leader(self) -> bool:
        """Whether this node serves clients itself (it leads its group)."""

    @property
    def leader_hint(self) -> str | None:
        """The leader's client address, when this node does not lead and knows it."""

    @property
    def draining(self) -> str | None:
        """While the group is drained (scale-down): where clients should go instead (the other
        groups' client addresses); None otherwise."""

    def has_destination(self, destination: str) -> bool:
        """Whether the replicated state already holds this destination (ACL: creating one
        needs more rights than using it)."""

    @property
    def hand_over_secret(self) -> str | None:
        """The group's secret, which signs a session handed to a successor (raftmq.server.stomp.adoption);
        None outside a group: sessions are not handed over."""

    def reserve_unfinished(self, grow: int) -> bool:
        """Take `grow` more bytes (or give back, when negative) of the node's budget for
        unfinished frames; False, taking nothing, when it would pass the budget."""


class FirstForwarder(Protocol):
    """Forwards first (raftmq.server.links.forward_first.ForwardFirst), as a connection's proposals
    use them."""

    def plan(self, send: Send) -> Any:
        """None: `send` takes the store path; else its plan, for `forward` (unless `busy`)."""

    def busy(self, plan: Any) -> bool:
        """The SEND would go first once its link sent what waits in its store-and-forward queue."""

    def when_free(self, plan: Any, then: Callable[[], None]) -> None:
        """Call `then` once a `busy` plan's link is free (or ended)."""

    def forward(self, planned: Sequence[Any], outcome: Callable[[list[Any], int], None]) -> None:
        """Send the planned SENDs; `outcome(sends, confirmed)` once per forward: each of `sends`
        has `.send` and `.fallback()`, and the first `confirmed` were stored by their target."""


class ConnectionHost(SessionHost, Protocol):
    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...

    @property
    def flow(self) -> FlowGate | None:
        """BLOCK's gate (raftmq.server.seams.flow); None when no address setting blocks."""

    @property
    def forward_first(self) -> FirstForwarder | None:
        """Sends a SEND bound for a neighbouring group there before it is stored here
        (raftmq.server.links.forward_first); None outside a cluster of groups."""

    @property
    def clock(self) -> Clock: ...

    @property
    def relays(self) -> RelayStarter: ...

    @property
    def sessions(self) -> Mapping[str, ClientConnection]:
        """The node's client connections (and bridge sessions) by session id."""

    @property
    def connection_count(self) -> int: ...

    def propose(self, commands: Sequence[Command]) -> asyncio.Future[None]:
        """Hand commands to the commit log (see raftmq.replication.commit_log)."""

    def propose_for(self, commands: Sequence[Command], proposer: Proposer, number: int) -> None:
        """The same, the outcome told to `proposer` (raftmq.replication.commit_log.Proposer)."""

    @property
    def commit_log(self) -> CommitLog:
        """Its `leader_term` goes on MESSAGE and CONNECTED frames."""
        ...

    def holds_lease(self) -> bool:
        """May output be written to clients at this instant?"""

    def connection_closed(self, connection: ClientConnection) -> None: ...

    def internal_error(self) -> None:
        """Count a connection closed because handling its input raised (a bug)."""

    @property
    def mobility(self) -> Spawner:
        """Where the node's hand-overs, adoptions and parkings run (raftmq.server.stomp.hand_over.Underway)."""
        ...

    @property
    def succession(self) -> HandOvers:
        """Leader changes: a session handed over is refused or claimed there."""
        ...

    def rename_session(self, old: str, new: str) -> None: ...

    def serve_mqtt(self, transport: asyncio.Transport, replacing: ClientConnection) -> None:
        """An upgraded WebSocket chose the subprotocol `mqtt`: an MQTT connection takes over
        `transport` from `replacing`, whose session had not begun."""

    def new_session_id(self, kind: str = "") -> str: ...

    @property
    def websocket_handshakes(self) -> Handshakes:
        """The node's count of WebSocket upgrades being read, and its limit."""

    @property
    def known_names(self) -> HostNames:
        """The names this node is known by (its configured hosts, `host_names`): what a browser's
        request may name in its Host (raftmq.web_guard)."""


# -- the node's parts -------------------------------------------------------------------------


class ReplicaHost(NodeView, Protocol):
    """What the replica (raftmq.server.replica.state_machine) needs from the node around it."""

    @property
    def config(self) -> NodeConfig: ...

    def fail(self, reason: str) -> None: ...

    def connected(self, connection: ClientConnection, command: Connect) -> None: ...

    def disconnected(self, connection: ClientConnection) -> None: ...

    def replayed(self) -> None: ...

    def managed(self, effect: Managed) -> None: ...

    @property
    def awaiting_adoption(self) -> Mapping[str, Any]:
        """Sessions of the old leader this new leader may adopt (raftmq.server.takeover)."""
        ...


class LeaderService(Protocol):
    """Work that must run on the group's leader only (e.g. a cluster bridge)."""

    name: str

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


class SuccessionHost(NodeView, Protocol):
    """What leader changes (raftmq.server.succession) need from the node."""

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...

    def session_ids_in_core(self) -> list[str]: ...

    def own_client_address(self) -> str | None: ...


class HandOvers(Protocol):
    """Leader changes as a session handed over meets them (raftmq.server.succession)."""

    going: bool  # the node goes once it handed its leadership over: its sessions are parked for their clients

    def refuse(self, session: ClientConnection, hint: str | None) -> None:
        """It could not be handed over: ERROR `not the leader`, naming `hint`."""

    async def claim(self, session_id: str) -> str | None:
        """May this node adopt `session_id` now (a ticket arrived)? None, or why not."""

    def adopt(self, session_id: str, connection: ClientConnection) -> int:
        """`connection` serves the session now; returns how many kept effects it was handed."""

    def park(self, ticket: Any, unfinished: bytes) -> None:
        """Keep `ticket`'s session (raftmq.server.stomp.adoption.Ticket) for its relay to resume."""

    async def claim_parked(self, session_id: str) -> tuple[Any, bytes] | str:
        """(ticket, the bytes of a frame begun) of a session parked here, or why not."""


class TickerHost(Protocol):
    """What the ticker (raftmq.server.ticker) needs from the node."""

    @property
    def config(self) -> NodeConfig: ...

    @property
    def broker(self) -> Broker: ...

    @property
    def commit_log(self) -> CommitLog: ...

    @property
    def clock(self) -> Clock: ...


class RelayHost(Protocol):
    """What relays (raftmq.server.stomp.relay) need from the node."""

    @property
    def name(self) -> str: ...

    @property
    def config(self) -> NodeConfig: ...

    @property
    def commit_log(self) -> CommitLog: ...

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...

    @property
    def clock(self) -> Clock: ...

    @property
    def hand_over_secret(self) -> str | None:
        """The group's secret: signs a moving relay's resume request (None: relays do not move)."""

    def own_client_address(self) -> str | None: ...

    def resume_here(self, transport: asyncio.Transport, session_id: str, held: bytes, stream_bytes: int,
                    eof: bool = False) -> None:
        """Serve the session a relay of this node parked, on the relay's client transport."""


class BridgeSessionHost(Protocol):
    """What a bridge's session (raftmq.server.links.bridge_session) needs from the node."""

    @property
    def clock(self) -> Clock: ...

    @property
    def is_leader(self) -> bool: ...

    def propose(self, commands: Sequence[Command]) -> asyncio.Future[None]: ...

    def register_session(self, session: ClientConnection) -> None: ...

    def connection_closed(self, connection: ClientConnection) -> None: ...


class StateWatcherHost(Protocol):
    """What a task that watches the replicated state (a bridge, the cluster event log) needs:
    the node's name, its core, and the pulse that moves when the core does."""

    @property
    def name(self) -> str: ...

    @property
    def broker(self) -> Broker: ...

    @property
    def applied(self) -> Pulse: ...


class BridgeHost(BridgeSessionHost, StateWatcherHost, Protocol):
    """What a cluster bridge (raftmq.server.links.bridge) needs from the node."""

    @property
    def commit_log(self) -> CommitLog: ...

    def new_session_id(self, kind: str) -> str: ...


class ClusterEventsHost(StateWatcherHost, Protocol):
    """What the cluster event log (raftmq.server.links.cluster_events) needs from the node."""

    def refuse_clients(self, message: str, detail: str) -> int: ...
