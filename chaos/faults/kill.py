"""`kill`: SIGKILL; at heal the nodes start again (same command, same data directory)."""

from __future__ import annotations

from typing import Any

from chaos.faults.strike import Strike


class Kill(Strike):
    name = "kill"

    def inject(self) -> dict[str, Any]:
        for key in self.hit:
            self.deployment.kill(key)
        return {}

    def heal(self) -> dict[str, Any]:
        self.deployment.start(self.hit, wait=True)
        return {}
