"""An object seen through a test's own methods: a compiled class's methods cannot be patched
(raftmq.compiled), so a test hands its user this in the object's place."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any


class Proxy:
    """`target` with the methods named in `methods` replaced: `Proxy(core, apply=f)` answers
    `apply(command)` with `f(core, command)`; every other attribute is the target's."""

    def __init__(self, target: Any, **methods: Callable[..., Any]) -> None:
        self._target = target
        for name, method in methods.items():
            setattr(self, name, partial(method, target))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target, name)


def raising(error: Exception) -> Callable[..., Any]:
    """A method that raises `error`: a bug in the object."""

    def method(target: Any, *args: Any, **kwargs: Any) -> Any:
        raise error

    return method
