"""`starve`: the node's process held to a few per cent of the CPU by a cgroup quota, so it stalls
past the election timeout at arbitrary points of its work (chaos.cpu_fault); lifted at heal."""

from __future__ import annotations

from typing import Any

from chaos.cpu_fault import CpuLimit, starve_params
from chaos.faults.strike import Strike


class Starve(Strike):
    name = "starve"

    def inject(self) -> dict[str, Any]:
        self.limits: list[CpuLimit] = []
        params = starve_params(self.rng)
        for key in self.hit:
            limit = CpuLimit(self.deployment.pid(key), key)
            self.limits.append(limit)
            limit.apply(**params)
        return {"cpu": params}

    def heal(self) -> dict[str, Any]:
        for limit in getattr(self, "limits", []):
            limit.release()
        return {}
