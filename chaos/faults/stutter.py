"""`stutter`: the node's process stopped and continued in turn (0.2-1.2 s stopped, 20-400 ms
running) until healed (chaos.cpu_fault)."""

from __future__ import annotations

import random
from typing import Any

from chaos.cpu_fault import Stutter as Stutters
from chaos.cpu_fault import starve_params
from chaos.faults.strike import Strike


class Stutter(Strike):
    name = "stutter"

    def set_up_held(self) -> None:
        self.stutters: dict[str, Stutters] = {}  # each node hit's stop-and-go, as far as it took

    def inject(self) -> dict[str, Any]:
        starve_params(self.rng)  # drawn as `starve` draws them, so a seed's later draws stay the same
        for key in self.hit:
            stutter = self.stutters[key] = Stutters(self.deployment.pid(key), random.Random(self.rng.random()))
            stutter.start()
        return {}

    def heal(self) -> dict[str, Any]:
        stops = {key: stutter.stop()["stops"] for key, stutter in self.stutters.items()}
        return {"stops": stops} if stops else {}
