"""Where a SEND to a queue goes: the `message_load_balancing` decision, pure.

- OFF and OFF_WITH_REDISTRIBUTION: the local group (the latter moves messages later, by
  redistribution, when they wait with no local consumer).
- STRICT: round robin over every group that has the queue, the local one included, whether
  or not anyone consumes there (Artemis: "even if there are no consumers").
- ON_DEMAND: round robin over the groups with a consumer whose selector would take the
  message, the local group included when it has one; the local group when none has.

Round robin is over the candidates in name order, with a turn counter the core keeps per
queue as committed state, so every replica — and a new leader — decides the same.
"""

from __future__ import annotations

from collections.abc import Sequence

from cluster.connection import ON_DEMAND, STRICT


def choose(policy: str, own: str, own_matches: bool, remote: Sequence[tuple[str, bool]], turn: int) -> tuple[str, bool]:
    """The group a new message of a queue goes to, and whether the turn was used.
    `own_matches`: a local consumer would take it; `remote`: (group, a consumer there would
    take it) for every other group known to have the queue within max_hops."""
    if policy == STRICT:
        candidates = sorted([own, *(group for group, _ in remote)])
    elif policy == ON_DEMAND:
        candidates = sorted([own] * own_matches + [group for group, matches in remote if matches])
    else:
        return own, False
    if not candidates:
        return own, False
    if len(candidates) == 1:
        return candidates[0], False
    return candidates[turn % len(candidates)], True
