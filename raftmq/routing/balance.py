"""Where a SEND to a queue goes: the `message_load_balancing` decision, pure.

- OFF and OFF_WITH_REDISTRIBUTION: the local group (the latter moves messages later, by
  redistribution, when they wait with no local consumer).
- STRICT: round robin over every group that has the queue, the local one included, whether
  or not anyone consumes there (Artemis: "even if there are no consumers").
- ON_DEMAND: round robin over the groups with a consumer whose selector would take the
  message, the local group included when it has one; the local group when none has.
  Two refinements come from ActiveMQ Classic's network connectors (cluster.network):
  `conduit=False` gives each group as many turns as it has such consumers (Classic's
  non-conduit subscriptions: 10/10/10 over three consumers, where one turn per group gives
  15/15 to one local consumer and a group of two); `prefer_local` keeps only the nearest
  such groups, the local one first (decreaseNetworkConsumerPriority).
- LOCAL_FIRST: the local group while one of its consumers that would take the message has room
  for it (fewer unacknowledged deliveries than its prefetch); else round robin over the nearest
  other groups with such a consumer that advertise room (`Candidate.room`); else, when the local
  group has such consumers (all full), the local group: the message waits for them, and
  redistribution moves such a backlog to groups that advertise room; else (no local consumer)
  as ON_DEMAND over the nearest groups with a consumer.

Round robin is over the candidates in name order, with a turn counter the core keeps per
queue as committed state, so every replica — and a new leader — decides the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from raftmq.routing.cluster_connection import LOCAL_FIRST, ON_DEMAND, STRICT


@dataclass(frozen=True, slots=True)
class Candidate:
    """A group that has the queue: how many of its consumers would take the message, and how
    many links away it is (0: the local group)."""

    group: str
    takers: int
    hops: int
    room: bool = True  # one of those consumers has room for another delivery (LOCAL_FIRST)


def choose(policy: str, own: Candidate, remote: Sequence[Candidate], turn: int, *, conduit: bool = True,
           prefer_local: bool = False) -> tuple[str, bool]:
    """The group a new message of a queue goes to, and whether the turn was used. `remote`:
    every other group known to have the queue within max_hops."""
    if policy == STRICT:
        candidates = sorted([own.group, *(c.group for c in remote)])
    elif policy == ON_DEMAND:
        eligible = [c for c in (own, *remote) if c.takers > 0]
        if prefer_local and eligible:
            nearest = min(c.hops for c in eligible)
            eligible = [c for c in eligible if c.hops == nearest]
        candidates = sorted(group for c in eligible for group in [c.group] * (1 if conduit else c.takers))
    elif policy == LOCAL_FIRST:
        if own.takers > 0 and own.room:
            return own.group, False
        others = [c for c in remote if c.takers > 0]
        roomy = [c for c in others if c.room]
        if roomy:
            others = roomy
        elif own.takers > 0:
            return own.group, False
        if others:
            nearest = min(c.hops for c in others)
            others = [c for c in others if c.hops == nearest]
        candidates = sorted(c.group for c in others)
    else:
        return own.group, False
    if not candidates:
        return own.group, False
    if len(candidates) == 1:
        return candidates[0], False
    return candidates[turn % len(candidates)], True
