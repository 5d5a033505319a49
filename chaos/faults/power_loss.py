"""`power-loss`: SIGKILL, then every write the node had not fsynced is discarded (its data
directory is on chaos.lazyfs); started again at heal."""

from __future__ import annotations

from typing import Any

from chaos.faults.strike import Strike


class PowerLoss(Strike):
    name = "power-loss"

    def inject(self) -> dict[str, Any]:
        for key in self.hit:
            self.deployment.kill(key)
        # All at once: every node hit has lost power before any data is dropped.
        return {"dropped_bytes": {key: self.environment.lose_unsynced(key) for key in self.hit}}

    def heal(self) -> dict[str, Any]:
        self.deployment.start(self.hit, wait=True)
        return {}
