"""The committed cluster state of one group's core (raftmq.core.cluster_routing decides with it).
Snapshots carry it; the route index is derived from the adverts again on load."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from raftmq.routing.bindings import Advert, decode_advert, encode_advert


@dataclass(eq=False)
class ClusterState:
    """The committed cluster state of one group's core (snapshotted with the rest)."""

    adverts: dict[str, Advert] = field(default_factory=dict)  # by neighbour
    turns: dict[str, int] = field(default_factory=dict)  # round-robin turn per queue
    idle_since: dict[str, int] = field(default_factory=dict)  # queue -> first Tick seen idle with demand elsewhere
    forwarded: dict[str, int] = field(default_factory=dict)  # messages put on each neighbour's sf queue
    redistributed: int = 0
    unroutable: int = 0  # topic copies whose target became unreachable on the way (dropped)
    # Scale-down (`raftmq group drain`): None, or the groups this one moves everything to
    # (empty: any group it reaches).
    draining: tuple[str, ...] | None = None
    drained: int = 0  # messages moved out by the drain
    # Per destination: messages this group sent on towards another group (put on a sf queue),
    # and messages it stored that came from another group. `raftmq status` shows their rates.
    sent_on: dict[str, int] = field(default_factory=dict)
    arrived: dict[str, int] = field(default_factory=dict)
    # Per neighbour: messages of its store-and-forward queue it confirmed (ACKed there, by this
    # group's bridge after the neighbour's receipt, or by the neighbour pulling them), and of those
    # the adverts (a link's status shows both: raftmq.server.links).
    confirmed: dict[str, int] = field(default_factory=dict)
    adverts_confirmed: dict[str, int] = field(default_factory=dict)

    def is_empty(self) -> bool:
        return not (self.adverts or self.turns or self.idle_since or self.forwarded or self.redistributed
                    or self.unroutable or self.draining is not None or self.drained or self.sent_on or self.arrived
                    or self.confirmed or self.adverts_confirmed)

    def dump(self) -> dict[str, Any]:
        return {
            "adverts": {sender: encode_advert(advert) for sender, advert in self.adverts.items()},
            "turns": dict(self.turns),
            "idle_since": dict(self.idle_since),
            "forwarded": dict(self.forwarded),
            "redistributed": self.redistributed,
            "unroutable": self.unroutable,
            "draining": None if self.draining is None else list(self.draining),
            "drained": self.drained,
            "sent_on": dict(self.sent_on),
            "arrived": dict(self.arrived),
            "confirmed": dict(self.confirmed),
            "adverts_confirmed": dict(self.adverts_confirmed),
        }

    @classmethod
    def load(cls, data: dict[str, Any]) -> ClusterState:
        return cls(
            {str(sender): decode_advert(text) for sender, text in data["adverts"].items()},
            {str(k): int(v) for k, v in data["turns"].items()},
            {str(k): int(v) for k, v in data["idle_since"].items()},
            {str(k): int(v) for k, v in data["forwarded"].items()},
            int(data["redistributed"]),
            int(data["unroutable"]),
            None if data.get("draining") is None else tuple(str(g) for g in data["draining"]),
            int(data.get("drained", 0)),  # snapshots written before scale-down existed have neither
            {str(k): int(v) for k, v in data.get("sent_on", {}).items()},  # nor these, older still
            {str(k): int(v) for k, v in data.get("arrived", {}).items()},
            {str(k): int(v) for k, v in data.get("confirmed", {}).items()},  # neither these, until links counted them
            {str(k): int(v) for k, v in data.get("adverts_confirmed", {}).items()},
        )
