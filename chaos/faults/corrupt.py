"""`corrupt`: SIGKILL, then a bit flipped in or a truncation of one of its journal or snapshot
files (chaos.corrupt); at heal the node must start, having cut only an unacknowledged torn tail,
or refuse and name the damage; a refusing node is repaired the operator's way."""

from __future__ import annotations

from typing import Any

from chaos.corrupt import damage, refusal_for_damage
from chaos.faults.strike import Strike


class Corrupt(Strike):
    name = "corrupt"

    def inject(self) -> dict[str, Any]:
        damaged = {}
        for key in self.hit:
            self.deployment.kill(key)
            done = damage(self.deployment.nodes[key].member_dir, self.rng)
            damaged[key] = None if done is None else done.to_dict()
        return {"damage": damaged}

    def heal(self) -> dict[str, Any]:
        """Start each damaged node. One that refuses because of the damage has detected it (what
        we want); it is then repaired as an operator would: its directory moved aside (kept for
        the audit) and the node started empty, to resync from its peers. One that refuses for
        any other reason is a harness failure."""
        detected = {}
        for key in self.hit:
            refusal = self.deployment.try_start(key)
            if refusal is None:
                continue
            reason = refusal_for_damage(refusal)
            if reason is None:
                raise RuntimeError(f"{key} did not start after corruption, and not because of it: {refusal[-400:]}")
            detected[key] = reason[-400:]
            self.environment.set_aside(key)
            self.deployment.start([key], wait=True)
        return {"detected": detected} if detected else {}
