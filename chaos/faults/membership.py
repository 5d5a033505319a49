"""`membership`: the member is removed from its group (a committed configuration change; a leader
hands over first) and killed; at heal its files are set aside and it rejoins empty
(chaos.membership_fault), catching up from its peers."""

from __future__ import annotations

from typing import Any

from chaos.faults.strike import Strike
from chaos.membership_fault import leave, rejoin


class Membership(Strike):
    name = "membership"

    def inject(self) -> dict[str, Any]:
        return {"changes": [leave(self.deployment, key) for key in self.hit]}

    def heal(self) -> dict[str, Any]:
        return {"changes": [rejoin(self.deployment, key, self.environment.set_aside) for key in self.hit]}
