"""Scale-down in the broker core (`raftmq group drain`, raftmq.ops.drain): a group told to
drain — a committed control SEND, so a new leader goes on with it — moves everything it holds
to other groups as committed moves, through the same store-and-forward queues and forward ids
as any cluster routing (raftmq.core.cluster_routing), and advertises nothing meanwhile. Pure, like the rest
of the core.

- Queues (the dead-letter and expiry queues too): their ready messages, to groups with a
  consumer that would take them, else round robin; a JMSXGroupID's all to one group. What
  consumers hold comes back when the node ends their sessions, and moves on the next Tick.
- Inactive durable subscriptions: whole to one group (a hash of the name), each message carrying
  the subscription's name and selector, so the group that receives them makes the subscription
  again; an empty one travels as a marker with no message, so it collects there meanwhile.
"""

from __future__ import annotations

import json
import zlib
from typing import Protocol

from raftmq.core.commands import ACK_AUTO
from raftmq.core.message import Message
from raftmq.core.message_headers import read_headers
from raftmq.core.model import PRIORITY_LEVELS, Store, Subscription, selector_headers
from raftmq.core.routing_view import MessageMover
from raftmq.core.selector import Selector
from raftmq.protocol.header_block import block_of
from raftmq.routing.bindings import Route
from raftmq.routing.route import DURABLE_HEADER, SUBSCRIPTION_ONLY_HEADER, is_internal


class ClusterRouting(MessageMover, Protocol):
    """What scale-down uses of raftmq.core.cluster_routing.ClusterRouting (which owns it)."""

    @property
    def next_hops(self) -> dict[str, tuple[int, str]]: ...

    def routes_to(self, destination: str) -> dict[str, Route]: ...

    def selector(self, text: str) -> Selector | None: ...

# At most this many messages move per Tick (as redistribution: a Tick's apply stays short).
DRAIN_BATCH = 10_000


class ScaleDown:
    def __init__(self, routing: ClusterRouting) -> None:
        self.routing = routing

    def start(self, text: str) -> str | None:
        """Drain to the groups named (comma list), to any group reached ("") or stop ("-")."""
        if text == "-":
            self.routing.cluster_state.draining = None
            return None
        targets = tuple(sorted({name.strip() for name in text.split(",") if name.strip()}))
        unknown = [group for group in targets if group == self.routing.own or group not in self.routing.next_hops]
        if unknown:
            return f"cannot drain to {', '.join(unknown)}: not a group {self.routing.own!r} reaches (reaches: " \
                   f"{', '.join(sorted(self.routing.next_hops)) or 'none'})"
        self.routing.cluster_state.draining = targets
        return None

    def tick(self) -> None:
        """On a Tick while draining (`raftmq group drain`): move up to DRAIN_BATCH
        ready messages — of every queue, the dead-letter and expiry queues too, and of every
        inactive durable subscription — to the drain's groups, each a committed move through a
        store-and-forward queue with its own duplicate-detection id. What bridges hold (the
        store-and-forward queues) they forward themselves; what consumers hold comes back to
        its queue when their sessions end (the node closes them: a draining group serves no
        one), and moves on the next Tick."""
        if self.routing.cluster_state.draining is None:
            return
        targets = [group for group in (self.routing.cluster_state.draining or sorted(self.routing.next_hops))
                   if group in self.routing.next_hops]
        if not targets:
            return  # nowhere to go now; the next Tick tries again
        budget = DRAIN_BATCH
        for destination, store in list(self.routing.state.queues.items()):
            if budget > 0 and store.depth and not is_internal(destination):
                budget -= self._drain_store(destination, store, targets, None, budget)
        for sub in list(self.routing.state.durables.values()):
            if budget > 0 and sub.session is None and sub.store.depth:
                budget -= self._drain_store(sub.destination, sub.store, targets, sub, budget)
            if budget > 0 and sub.session is None and not sub.store.depth and not sub.store.in_flight:
                self._move_subscription(sub, targets)
                budget -= 1

    def _move_subscription(self, sub: Subscription, targets: list[str]) -> None:
        """An inactive durable subscription with nothing left here: made again in a target
        (so it collects what is published meanwhile for its subscriber to find there) by an
        empty move that carries only its name, then dropped here."""
        assert sub.durable_name is not None
        target = _durable_target(sub, targets)
        headers = block_of(((DURABLE_HEADER, _durable_text(sub)), (SUBSCRIPTION_ONLY_HEADER, "1")))
        marker = Message(self.routing.dispatch.mint_id(), sub.destination, headers, b"", persistent=True)
        self.routing.forward(self.routing.next_hops[target][1], sub.destination, headers, b"", 0, target,
                             (self.routing.own,), marker)
        topic = self.routing.state.topics[sub.destination]
        del topic.subs[sub]
        del self.routing.state.durables[sub.durable_name]
        topic.retire(sub.store, 0)

    def _drain_store(self, destination: str, store: Store, targets: list[str], durable: Subscription | None,
                     budget: int) -> int:
        # A queue's messages go where their consumers are, when some target has one that would
        # take them, else round robin; a durable subscription's travel with its name (and
        # selector), so the subscriber finds them by reconnecting to the group they went to.
        demand = [] if durable is not None else [
            route for group, route in sorted(self.routing.routes_to(destination).items())
            if group in targets and route.consumer_count > 0
        ]
        extra = "" if durable is None else block_of(((DURABLE_HEADER, _durable_text(durable)),))
        turn = self.routing.cluster_state.turns.get(destination, 0)
        moved = 0
        for priority in range(PRIORITY_LEVELS - 1, -1, -1):
            for token in list(store.lanes[priority]):
                if moved >= budget:
                    break
                message = store.ready.get(token)
                if message is None:
                    continue
                takers = ([r.group for r in demand if self.routing.takers(r.consumers, selector_headers(message))]
                          if demand else [])
                choices = takers or targets
                if durable is not None:  # one subscription, one group
                    target = _durable_target(durable, targets)
                elif message.group is not None:  # one JMSXGroupID, one group: its order holds
                    target = choices[zlib.crc32(message.group.encode()) % len(choices)]
                else:
                    target = choices[turn % len(choices)]
                    turn += 1
                self.routing.dispatch.take_ready(store, token)
                self.routing.forward(self.routing.next_hops[target][1], destination, message.headers + extra,
                                     message.body, message.timestamp, target, (self.routing.own,), message)
                moved += 1
        store.maybe_compact()
        if moved:
            self.routing.cluster_state.turns[destination] = turn
            self.routing.cluster_state.drained += moved
        return moved

    def store_durable(self, destination: str, headers: str, body: object, now: int, text: str,
                       delivered: int, subscription_only: bool = False) -> None:
        """A drained group's durable-subscription message: into the subscription of that name
        here, made (inactive) if it is not here yet."""
        try:
            name, selector_text = json.loads(text)
        except (ValueError, TypeError):
            self.routing.cluster_state.unroutable += 1
            return
        sub = self.routing.state.durables.get(name)
        if sub is None:
            selector = None if selector_text is None else self.routing.selector(selector_text)
            store = Store(destination, shared=False)
            sub = Subscription(None, "", destination, ACK_AUTO, 0, selector, False, name, store)
            self.routing.dispatch.topic(destination).subs[sub] = None
            self.routing.state.durables[name] = sub
        if subscription_only:
            return
        priority, expires, persistent, group, _ = read_headers(headers)
        message = Message(self.routing.dispatch.mint_id(), sub.destination, headers, body, priority, expires, now,
                          group, persistent)
        message.delivery_count = delivered
        self.routing.dispatch.enqueue(sub.store, message)


def _durable_target(sub: Subscription, targets: list[str]) -> str:
    """Where a drained durable subscription goes: always the same group of `targets`."""
    return targets[zlib.crc32((sub.durable_name or "").encode()) % len(targets)]


def _durable_text(sub: Subscription) -> str:
    selector = None if sub.selector is None else sub.selector.text
    return json.dumps([sub.durable_name, selector], separators=(",", ":"))
