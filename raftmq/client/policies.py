"""Connection load-balancing policies: which group, and which node of a group, to try first.

The names and meanings are Artemis's (`ConnectionLoadBalancingPolicy.select(max)`):

- `round-robin`: the first choice is random, then each call takes the next index in turn;
- `random`: every call picks an index at random;
- `random-sticky`: the first choice is random, then every call returns that same index;
- `first-element`: always index 0 (a primary listed first, backups after it).

A policy only picks the starting point; the failover client then walks the rest of the list in
order, so every address is tried once per reconnect attempt whatever the policy. Randomness
comes only from the `random.Random` handed in, so a seeded one makes a test deterministic.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")


class ConnectionLoadBalancingPolicy(ABC):
    """Chooses a starting index among `count` candidates."""

    name: str = ""

    @abstractmethod
    def select(self, count: int) -> int:
        """An index in `range(count)`; `count` is at least 1."""


class FirstElementPolicy(ConnectionLoadBalancingPolicy):
    name = "first-element"

    def select(self, count: int) -> int:
        _check_count(count)
        return 0


class RandomPolicy(ConnectionLoadBalancingPolicy):
    name = "random"

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng

    def select(self, count: int) -> int:
        _check_count(count)
        return self._rng.randrange(count)


class RandomStickyPolicy(ConnectionLoadBalancingPolicy):
    name = "random-sticky"

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng
        self._chosen: int | None = None

    def select(self, count: int) -> int:
        _check_count(count)
        # A shorter list than the one the choice was made for gets a fresh random choice.
        if self._chosen is None or self._chosen >= count:
            self._chosen = self._rng.randrange(count)
        return self._chosen


class RoundRobinPolicy(ConnectionLoadBalancingPolicy):
    name = "round-robin"

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng
        self._last: int | None = None

    def select(self, count: int) -> int:
        _check_count(count)
        # Starting at random spreads many clients built from the same list over all entries.
        if self._last is None:
            self._last = self._rng.randrange(count)
        else:
            self._last = (self._last + 1) % count
        return self._last


POLICY_NAMES: tuple[str, ...] = ("round-robin", "random", "random-sticky", "first-element")

# Artemis configures policies by class name; accept those spellings too.
_ARTEMIS_CLASS_NAMES = {
    "RoundRobinConnectionLoadBalancingPolicy": "round-robin",
    "RandomConnectionLoadBalancingPolicy": "random",
    "RandomStickyConnectionLoadBalancingPolicy": "random-sticky",
    "FirstElementConnectionLoadBalancingPolicy": "first-element",
}


def canonical_policy_name(name: str) -> str:
    """`round-robin` for `round-robin`, `RoundRobinConnectionLoadBalancingPolicy` or its
    fully qualified Artemis class name; ValueError naming the choices otherwise."""
    short = name.strip()
    if short in POLICY_NAMES:
        return short
    simple = short.rsplit(".", 1)[-1]
    if simple in _ARTEMIS_CLASS_NAMES:
        return _ARTEMIS_CLASS_NAMES[simple]
    raise ValueError(f"unknown connection load-balancing policy {name!r}; choose one of {', '.join(POLICY_NAMES)}")


def make_policy(name: str, rng: random.Random | None = None) -> ConnectionLoadBalancingPolicy:
    """A new policy instance (each keeps its own round-robin or sticky state)."""
    canonical = canonical_policy_name(name)
    if canonical == "first-element":
        return FirstElementPolicy()
    source = rng if rng is not None else random.Random()
    if canonical == "random":
        return RandomPolicy(source)
    if canonical == "random-sticky":
        return RandomStickyPolicy(source)
    return RoundRobinPolicy(source)


def rotated(items: Sequence[T], start: int) -> list[T]:
    """`items` starting at index `start`, wrapping around: every item exactly once."""
    if not items:
        return []
    start %= len(items)
    return [*items[start:], *items[:start]]


def _check_count(count: int) -> None:
    if count < 1:
        raise ValueError(f"a policy needs at least one candidate, got {count}")
