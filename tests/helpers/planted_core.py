"""A broker core with a bug planted from the test side: a real `Broker` inside, and a subclass of
`PlantedCore` that changes what it does around it. The compiled core is closed to subclasses
(a native class), so tests wrap it instead of overriding it."""

from __future__ import annotations

from typing import Any

from raftmq.core.broker import Broker
from raftmq.core.commands import Command
from raftmq.core.config import CoreConfig
from raftmq.core.effects import Effect


class PlantedCore:
    """Passes everything to the real core it wraps; a subclass overrides what it plants. Made
    new (`kind(config)`) or from a snapshot (`kind.restore(data, config)`), as the fake log makes
    a replica's core: a restored one starts with the subclass's own state afresh."""

    def __init__(self, config: CoreConfig = CoreConfig(), core: Broker | None = None) -> None:
        self.core = core if core is not None else Broker(config)

    @classmethod
    def restore(cls, data: Any, config: CoreConfig) -> PlantedCore:
        return cls(config, Broker.restore(data, config))

    def apply(self, command: Command) -> list[Effect]:
        return self.core.apply(command)

    def snapshot(self) -> Any:
        return self.core.snapshot()

    def check_invariants(self) -> None:
        self.core.check_invariants()

    def session_ids(self) -> list[str]:
        return list(self.core.session_ids())
