"""`drain`: the group starts draining to the other groups and the members hit are killed in the
middle of it (chaos.drain_fault); at heal they start again and the drain is cancelled."""

from __future__ import annotations

from typing import Any

from chaos import drain_fault
from chaos.faults.strike import Strike


class Drain(Strike):
    name = "drain"

    def inject(self) -> dict[str, Any]:
        return drain_fault.start(self.deployment, self.group, self.hit)

    def heal(self) -> dict[str, Any]:
        return drain_fault.stop(self.deployment, self.hit)
