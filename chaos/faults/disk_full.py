"""`disk-full`: the node's data directory's filesystem filled up; freed at heal."""

from __future__ import annotations

from typing import Any

from chaos.faults.strike import Strike


class DiskFull(Strike):
    name = "disk-full"

    def inject(self) -> dict[str, Any]:
        return {"filled_bytes": {key: self.environment.fill_disk(key) for key in self.hit}}

    def heal(self) -> dict[str, Any]:
        for key in self.hit:
            self.environment.free_disk(key)
        # A node may stop on a full disk (saying why): started again once there is room, as a
        # supervisor would (`raftmq up --restart on-failure`).
        restarted = [key for key in self.hit if not self.deployment.nodes[key].alive]
        self.deployment.start(restarted, wait=True)
        return {"restarted": restarted} if restarted else {}
