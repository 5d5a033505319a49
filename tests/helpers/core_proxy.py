"""A replica's core seen through a test's own `apply`: a compiled core's methods cannot be
patched (raftmq.compiled), so a test hands the replica this in its place."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from raftmq.core.broker import Broker


class CoreProxy:
    """`apply(command)` is `apply(core, command)`; every other attribute is the core's."""

    def __init__(self, core: Broker, apply: Callable[[Broker, Any], list[Any]]) -> None:
        self._core = core
        self._apply = apply

    def apply(self, command: Any) -> list[Any]:
        return self._apply(self._core, command)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._core, name)


def raising(error: Exception) -> Callable[[Broker, Any], list[Any]]:
    """An `apply` that raises `error`: a bug in the core."""

    def apply(core: Broker, command: Any) -> list[Any]:
        raise error

    return apply
