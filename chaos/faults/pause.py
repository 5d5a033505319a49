"""`pause`: SIGSTOP past the election timeout; SIGCONT at heal."""

from __future__ import annotations

from typing import Any

from chaos.faults.strike import Strike


class Pause(Strike):
    name = "pause"

    def inject(self) -> dict[str, Any]:
        for key in self.hit:
            self.deployment.pause(key)
        return {}

    def heal(self) -> dict[str, Any]:
        for key in self.hit:
            self.deployment.resume(key)
        return {}
