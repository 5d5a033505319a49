"""`starve`: the node's process held to a few per cent of the CPU by a cgroup quota, so it stalls
past the election timeout at arbitrary points of its work (chaos.cpu_fault); lifted at heal."""

from __future__ import annotations

from typing import Any

from chaos.cpu_fault import CpuLimit, starve_params
from chaos.faults.strike import Strike


class Starve(Strike):
    name = "starve"

    def set_up_held(self) -> None:
        self.limits: list[CpuLimit] = []  # the quota of each node hit, as far as it took

    def inject(self) -> dict[str, Any]:
        params = starve_params(self.rng)
        for key in self.hit:
            limit = CpuLimit(self.deployment.pid(key), key)
            self.limits.append(limit)
            limit.apply(**params)
        return {"cpu": params}

    def heal(self) -> dict[str, Any]:
        throttled = {}
        for limit in self.limits:
            throttled[limit.name] = limit.throttled()
            limit.release()
        return {"throttled": throttled}
