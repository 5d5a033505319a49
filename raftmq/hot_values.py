"""`HotValue`: the base of the per-message records written out as plain classes rather than
`@value` (`Send`, `Ack`, `Nack`, `Deliver`, `Receipt`; raftmq.core.commands says why). Compiled
with them (raftmq.compiled), so they stay native classes."""

from __future__ import annotations

from typing import ClassVar


class HotValue:
    """Equal and hashed by the fields its `__match_args__` names (the subclass's `Final`
    attributes, in order), and shown as a dataclass is."""

    __slots__ = ()
    __match_args__: ClassVar[tuple[str, ...]] = ()

    def _fields(self) -> tuple[object, ...]:
        return tuple([getattr(self, name) for name in self.__match_args__])

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self) or not isinstance(other, HotValue):
            return NotImplemented
        return self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{name}={getattr(self, name)!r}' for name in self.__match_args__)})"
