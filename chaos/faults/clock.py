"""`clock`: the node's wall clock skewed or jumped (libfaketime, chaos.clock_fault); reset at heal."""

from __future__ import annotations

from typing import Any

from chaos.faults.strike import Strike
from chaos.generator import clock_change


class Clock(Strike):
    name = "clock"

    def inject(self) -> dict[str, Any]:
        change = clock_change(self.rng)
        for key in self.hit:
            self.environment.change_clock(key, change)
        return {"clock": change}

    def heal(self) -> dict[str, Any]:
        for key in self.hit:
            self.environment.reset_clock(key)
        return {}
