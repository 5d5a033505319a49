"""`membership-partition`: the member hit is cut off from its group by a partition, and while it
is, removed from the group (through the majority side's leader) and killed; at heal the
partition heals and it rejoins empty."""

from __future__ import annotations

import time
from typing import Any

from chaos.faults.strike import Strike
from chaos.generator import partition_grudge
from chaos.membership_fault import leave, rejoin

# A majority that lost its leader to the partition elects another before the member is removed.
PARTITION_SETTLE_SECONDS = 1.0


class MembershipPartition(Strike):
    name = "membership-partition"

    def inject(self) -> dict[str, Any]:
        shape, grudge = partition_grudge(self.group_members(), self.group, self.hit, self.rng)
        self.environment.cut(grudge)
        cut = {k: sorted(v) for k, v in grudge.items()}
        time.sleep(PARTITION_SETTLE_SECONDS)
        try:
            changes = [leave(self.deployment, key) for key in self.hit]
        except RuntimeError as exc:
            raise RuntimeError(f"{exc}; during partition {shape} {cut}") from None
        return {"shape": shape, "grudge": cut, "changes": changes}

    def heal(self) -> dict[str, Any]:
        self.environment.heal_network()
        return {"changes": [rejoin(self.deployment, key, self.environment.set_aside) for key in self.hit]}
