"""What a STOMP session needs from the node it runs in (`SessionHost`), what a connection
shell needs on top (`ConnectionHost`), and what the node's other parts see of it (`NodeView`). `Node` implements both; a test, a simulator or an
in-process bridge can implement `SessionHost` alone and drive a `StompSession` without sockets.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from raftmq.clock import Clock
from raftmq.config import NodeConfig
from raftmq.core.commands import Command
from raftmq.replication.commit_log import CommitLog
from raftmq.security import Security

if TYPE_CHECKING:
    from raftmq.server.connection import Connection
    from raftmq.server.relay import Relays


class NodeView(Protocol):
    """What the node's parts (its replica, its succession) see of it."""

    @property
    def name(self) -> str: ...

    @property
    def commit_log(self) -> CommitLog: ...

    @property
    def sessions(self) -> Mapping[str, Connection]: ...

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

    def has_destination(self, destination: str) -> bool:
        """Whether the replicated state already holds this destination (ACL: creating one
        needs more rights than using it)."""

    def reserve_unfinished(self, grow: int) -> bool:
        """Take `grow` more bytes (or give back, when negative) of the node's budget for
        unfinished frames; False, taking nothing, when it would pass the budget."""


class ConnectionHost(SessionHost, Protocol):
    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...

    @property
    def clock(self) -> Clock: ...

    @property
    def relays(self) -> Relays: ...

    @property
    def connection_count(self) -> int: ...

    def propose(self, commands: Sequence[Command]) -> asyncio.Future[None]:
        """Hand commands to the commit log (see raftmq.replication.commit_log)."""

    def holds_lease(self) -> bool:
        """May output be written to clients at this instant?"""

    def connection_closed(self, connection: Connection) -> None: ...

    def internal_error(self) -> None:
        """Count a connection closed because handling its input raised (a bug)."""
