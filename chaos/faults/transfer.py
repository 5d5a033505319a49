"""`transfer`: the leader hands its leadership to a caught-up follower and stays up (a signed
POST /leadership, as `raftmq hand-over` asks); its clients' sessions move with it. No heal."""

from __future__ import annotations

from typing import Any

from chaos.faults.strike import Strike
from chaos.membership_fault import transfer


class Transfer(Strike):
    name = "transfer"

    def inject(self) -> dict[str, Any]:
        return {"transfers": [transfer(self.deployment, key) for key in self.hit]}
