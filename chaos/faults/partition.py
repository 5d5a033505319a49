"""`partition`: real packets dropped between nodes (chaos.environment: iptables inside each node's
network namespace, or between loopback addresses). Shapes: the members hit against the rest of
their group (isolating the leader, halves...), a majorities ring, a bridge, and cutting only the
links between groups (chaos.generator.partition_grudge)."""

from __future__ import annotations

from typing import Any

from chaos.faults.strike import Strike
from chaos.generator import partition_grudge


class Partition(Strike):
    name = "partition"

    def inject(self) -> dict[str, Any]:
        shape, grudge = partition_grudge(self.group_members(), self.group, self.hit, self.rng)
        self.environment.cut(grudge)
        return {"shape": shape, "nodes": sorted(grudge), "grudge": {k: sorted(v) for k, v in grudge.items()}}

    def heal(self) -> dict[str, Any]:
        self.environment.heal_network()
        return {}
