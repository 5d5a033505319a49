"""Forward first: a client's SEND that the cluster's balancing sends to a neighbouring group goes
to that group's leader before it is stored anywhere (docs/cluster.md, "How a message travels").

The leader asks its core where the SEND would go (`ClusterRouting.first_target`, from the same
committed adverts as the routing of a stored SEND). When that is a neighbour whose bridge is
connected, the bridge sends the SEND there (raftmq.server.links.first_lane), with a forward id,
and the producer's RECEIPT is written when the neighbour answers its own: the message was
committed once, in the group that holds it now. While messages of that link's
store-and-forward queue wait to go on the wire, the plan is `Busy`: the connection waits for
them (raftmq.server.stomp.proposing).

Anything else takes the store path, never refusing a SEND (a transaction, a scheduled or
temporary destination, a link that is down, a neighbour without a leader). So does a forward
first that does not come back confirmed (refused, its connection lost, `FIRST_TIMEOUT_SECONDS`):
it is proposed here, pinned to the same target with the same forward id, and the bridge sends it
from the store-and-forward queue; if the first copy arrived after all, the target stores it once.

The forward id is `producer_forward_id` of the client's `_AMQ_DUPL_ID` when it set one, and the
target is then named by that id (`ClusterRouting.first_target`), so a SEND the client writes
again after a fail-over goes the same way and is caught there; else the id is one this leader
makes up (`raftmq:f:<nonce>.<n>`). A SEND written again (`_raftmq_resent`) never goes first:
it is checked at home by its producer's id first.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from raftmq.core.commands import Send
from raftmq.core.schedule import special_headers
from raftmq.core.temporary import MARK
from raftmq.protocol.header_block import first
from raftmq.routing.route import DUPLICATE_ID_HEADER, producer_forward_id
from raftmq.server.links.bridge import Bridge
from raftmq.server.links.first_lane import FirstSend, Outcome


class Busy:
    """A plan's answer for a SEND that would go first once what waits in its link's
    store-and-forward queue went on the wire."""

    __slots__ = ("bridge",)

    def __init__(self, bridge: Bridge) -> None:
        self.bridge = bridge


class FirstHost(Protocol):
    """What forwards first read of the node (raftmq.server.node.Node)."""

    bridges: list[Any]  # its links (bridges and passive links), discovered ones joining

    @property
    def broker(self) -> Any: ...  # raftmq.core.broker.Broker: its routing


class ForwardFirst:
    """The leader's forwards first, for every client connection of the node; counts what went
    first and what fell back (since this node started)."""

    def __init__(self, host: FirstHost) -> None:
        self._host = host
        self._nonce = secrets.token_hex(6)
        self._number = 0
        self._turn = 0
        self.first = 0  # SENDs the target confirmed, forwarded first
        self.fell_back = 0  # SENDs that set out first and took the store path
        self.by_destination: dict[str, int] = {}  # `first`, per destination

    def plan(self, send: Send) -> tuple[Bridge, FirstSend] | Busy | None:
        """The bridge and forward of a SEND that goes first; `Busy`: it would, once what waits
        in that link's store-and-forward queue went (`when_free`); None: it takes the store path."""
        routing = self._host.broker.routing
        if routing is None or send.transaction is not None or MARK in send.destination:
            return None
        scheduled, replying = special_headers(send.headers)
        if scheduled or replying:
            return None
        # With a producer id, first_target names the target by the id, whatever the turn.
        self._turn += 1
        target = routing.first_target(send.destination, send.headers, self._turn)
        if target is None:
            return None
        bridge = self._bridge(target)
        if bridge is None:
            return None
        ready = bridge.ready_first()
        if ready is None:
            return Busy(bridge)
        if not ready:
            return None
        producer_id = first(send.headers, DUPLICATE_ID_HEADER)
        if producer_id:
            forward_id = producer_forward_id(producer_id)
        else:
            self._number += 1
            forward_id = f"raftmq:f:{self._nonce}.{self._number}"
        return bridge, FirstSend(send, target, forward_id)

    @staticmethod
    def busy(plan: object) -> bool:
        return isinstance(plan, Busy)

    @staticmethod
    def when_free(plan: Busy, then: Callable[[], None]) -> None:
        plan.bridge.when_free(then)

    def forward(self, planned: Sequence[tuple[Bridge, FirstSend]], outcome: Outcome) -> None:
        """Send each bridge its share (in order); `outcome(sends, confirmed)` for each forward."""
        by_bridge: dict[int, tuple[Bridge, list[FirstSend]]] = {}
        for bridge, send in planned:
            by_bridge.setdefault(id(bridge), (bridge, []))[1].append(send)

        def counted(sends: list[FirstSend], confirmed: int) -> None:
            self.first += confirmed
            self.fell_back += len(sends) - confirmed
            by_destination = self.by_destination
            for sent in sends[:confirmed]:
                destination = sent.send.destination
                by_destination[destination] = by_destination.get(destination, 0) + 1
            outcome(sends, confirmed)

        for bridge, sends in by_bridge.values():
            bridge.forward_first(sends, counted)

    def _bridge(self, target: str) -> Bridge | None:
        for link in self._host.bridges:
            if isinstance(link, Bridge) and link.neighbour.name == target:
                return link
        return None

    def count_in(self, destinations: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """The core's per-destination counters with what this leader forwarded first added to
        `forwarded` (the core counts what the store path forwarded: it never saw these)."""
        for destination, count in self.by_destination.items():
            counters = destinations.get(destination)
            if counters is not None and "forwarded" in counters:
                counters["forwarded"] += count
        return destinations

    def status(self) -> dict[str, int]:
        return {"forwarded_first": self.first, "fell_back": self.fell_back}
