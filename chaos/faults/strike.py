"""What every fault of the nemesis is: a `Strike`, made when the schedule's fault comes due, that
injects it into the members hit and later heals it. One module a kind (chaos.faults), each a
subclass with the kind's `name`; what each kind may hit is the schedule's business
(chaos.generator.NEMESIS_TARGETS)."""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from chaos.deployment import Deployment
    from chaos.environment import Environment


class Strike(ABC):
    """One fault struck at `hit` (members of `group`). `inject` does it and returns what the
    history records of how (a `nodes` entry there replaces the members hit, for a fault that
    chose them itself); `heal` undoes it and returns what the history records of that."""

    name: ClassVar[str]

    def __init__(self, deployment: Deployment, environment: Environment, group: str, hit: list[str],
                 rng: random.Random) -> None:
        self.deployment = deployment
        self.environment = environment
        self.group = group
        self.hit = hit
        self.rng = rng
        self.set_up_held()

    def set_up_held(self) -> None:
        """Set up what the fault holds until its heal (empty until `inject` takes it): none here."""

    @abstractmethod
    def inject(self) -> dict[str, Any]: ...

    def heal(self) -> dict[str, Any]:
        return {}  # a fault that heals by itself, or has nothing to undo

    def group_members(self) -> dict[str, list[str]]:
        """Every group's members, by group (for the faults that cut between them)."""
        return {group: self.deployment.members(group) for group in self.deployment.groups()}
