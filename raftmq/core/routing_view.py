"""What the parts of cluster routing that move messages between groups (scale-down, redistribution)
use of raftmq.core.cluster_routing.ClusterRouting, which owns them: its state and its forwarding.
Each part adds what else it reads."""

from __future__ import annotations

from typing import Protocol

from raftmq.core.cluster_state import ClusterState
from raftmq.core.dispatch import Dispatcher
from raftmq.core.message import Message
from raftmq.core.state import BrokerState
from raftmq.routing.bindings import Consumers


class MessageMover(Protocol):
    own: str
    state: BrokerState
    dispatch: Dispatcher

    @property
    def cluster_state(self) -> ClusterState: ...

    def forward(self, via: str, destination: str, headers: str, body: object, now: int, to: str,
                here: tuple[str, ...], original: Message | None = None, delivered: int = 0) -> None: ...

    def takers(self, consumers: Consumers, matching: dict[str, str]) -> int: ...
