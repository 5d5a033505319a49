"""`packet`: netem delay, loss, duplication and reordering on the nodes hit."""

from __future__ import annotations

from typing import Any

from chaos.faults.strike import Strike
from chaos.generator import packet_params


class Packet(Strike):
    name = "packet"

    def inject(self) -> dict[str, Any]:
        params = packet_params(self.rng)
        for key in self.hit:
            self.environment.degrade(key, params)
        return {"packet": params}

    def heal(self) -> dict[str, Any]:
        self.environment.restore_packets()
        return {}
