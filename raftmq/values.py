"""`value`: the decorator for the immutable records on the per-message path (commands, effects,
the STOMP session's decisions).

Why not `@dataclass(frozen=True)`: a frozen dataclass's `__init__` sets each field through
`object.__setattr__` (measured: 0.81 µs to make a Send, 0.19 µs unfrozen; an Ack 0.90 µs), and
a group makes several such records for every message on every member (a Send and an Ack decoded, a Deliver and a
Receipt computed). `value` builds a plain slotted dataclass at run time and declares it frozen to
the type checker (PEP 681 `frozen_default`), so assigning to a field is still refused, by mypy
(strict, in CI) rather than at run time. Equality and hashing are a frozen dataclass's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar, dataclass_transform

T = TypeVar("T")


@dataclass_transform(frozen_default=True, eq_default=True)
def value(cls: type[T]) -> type[T]:
    return dataclass(slots=True, unsafe_hash=True)(cls)
