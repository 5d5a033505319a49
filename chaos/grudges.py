"""Partition shapes, pure: which hosts drop whose packets. A shape is either sides (every host
of a side drops every host of the other sides) or a grudge {host: hosts whose packets it drops};
the generator picks them, chaos.netns cuts them into real packets."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

Sides = Sequence[Sequence[str]]
Grudge = dict[str, frozenset[str]]  # host -> the hosts whose packets it drops

__all__ = ["Grudge", "Sides", "bridge", "grudge", "halves", "isolate", "majorities_ring", "sees"]


def grudge(sides: Sides) -> Grudge:
    """Every host of a side drops every host of the other sides; hosts in no side drop nobody."""
    seen = [h for side in sides for h in side]
    if len(set(seen)) != len(seen):
        raise ValueError(f"a host is on two sides: {sides}")
    return {h: frozenset(seen) - frozenset(side) for side in sides for h in side if len(side) < len(seen)}


def halves(hosts: Sequence[str]) -> list[list[str]]:
    """Two sides, the first one the smaller when the count is odd."""
    if len(hosts) < 2:
        raise ValueError("halves needs two hosts or more")
    middle = len(hosts) // 2
    return [list(hosts[:middle]), list(hosts[middle:])]


def isolate(hosts: Sequence[str], one: str) -> list[list[str]]:
    if one not in hosts:
        raise ValueError(f"{one} is not one of {hosts}")
    return [[one], [h for h in hosts if h != one]]


def bridge(hosts: Sequence[str]) -> Grudge:
    """Two halves that see each other only through one host (the first of the second half),
    which sees everybody (Jepsen's bridge)."""
    if len(hosts) < 3:
        raise ValueError("a bridge needs three hosts or more")
    first, second = halves(hosts)
    middle = second[0]
    return {h: dropped - {middle} for h, dropped in grudge([first, second]).items() if h != middle}


def majorities_ring(hosts: Sequence[str]) -> Grudge:
    """Hosts in a ring, each seeing its neighbours up to distance d, the least d for which that
    is a majority: every host sees a majority, no two the same one (Jepsen's majorities ring).
    Symmetric, so a link is either up both ways or dropped both ways. Shuffle `hosts` first for
    a random ring; needs four hosts (with three, two hosts that see each other share a majority)."""
    n = len(hosts)
    if n < 4:
        raise ValueError("a majorities ring needs four hosts or more")
    reach = -(-(n // 2) // 2)  # ceil(minority / 2): 2 * reach + 1 >= n // 2 + 1
    return {h: frozenset(hosts[j] for j in range(n) if min((i - j) % n, (j - i) % n) > reach)
            for i, h in enumerate(hosts)}


def sees(shape: Grudge, hosts: Iterable[str]) -> dict[str, frozenset[str]]:
    """Who each host can talk to (itself included) under `shape`: neither drops the other."""
    everyone = list(hosts)
    return {h: frozenset(o for o in everyone if o not in shape.get(h, ()) and h not in shape.get(o, ()))
            for h in everyone}
