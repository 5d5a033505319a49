"""`restart`: SIGTERM, the way `raftmq restart --rolling` stops a node (a leader hands leadership
to a caught-up follower first); started again at heal."""

from __future__ import annotations

from typing import Any

from chaos.faults.strike import Strike


class Restart(Strike):
    name = "restart"

    def inject(self) -> dict[str, Any]:
        return {"graceful": {key: self.deployment.terminate(key) for key in self.hit}}

    def heal(self) -> dict[str, Any]:
        self.deployment.start(self.hit, wait=True)
        return {}
