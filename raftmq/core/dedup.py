"""Duplicate detection: a bounded memory of (destination, `_AMQ_DUPL_ID`) pairs, oldest forgotten first."""

from __future__ import annotations

from collections import deque


class DedupCache:
    """Remembers the last `capacity` duplicate-detection ids per broker.

    A deque keeps arrival order for eviction and a dict answers membership in O(1). (Evicting
    through the dict alone with `next(iter(...))` would walk the deleted slots left at its
    front, which costs O(evictions since the last resize) per call.)
    """

    __slots__ = ("_known", "_order", "capacity")

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._order: deque[tuple[str, str]] = deque()
        self._known: dict[tuple[str, str], None] = {}

    def __len__(self) -> int:
        return len(self._order)

    def __contains__(self, key: tuple[str, str]) -> bool:
        return key in self._known

    def remember(self, destination: str, dupl_id: str) -> bool:
        """Record the id; False when it was already known (the send is a duplicate)."""
        key = (destination, dupl_id)
        if key in self._known:
            return False
        if self.capacity <= 0:
            return True
        self._known[key] = None
        self._order.append(key)
        while len(self._order) > self.capacity:
            del self._known[self._order.popleft()]
        return True

    def dump(self) -> list[list[str]]:
        """Oldest first, as plain lists."""
        return [[destination, dupl_id] for destination, dupl_id in self._order]

    @classmethod
    def load(cls, capacity: int, entries: list[list[str]]) -> DedupCache:
        cache = cls(capacity)
        for destination, dupl_id in entries:
            cache.remember(destination, dupl_id)
        return cache
