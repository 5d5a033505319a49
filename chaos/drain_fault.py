"""The `drain` nemesis: scale-down while members die. The group hit starts draining
(raftmq.ops.drain: it turns clients away and moves everything it holds to the other groups as
committed moves with duplicate-detection ids); half a second later the members hit are killed
in the middle of it. At heal they start again and the drain is cancelled (the group serves
again); whatever was moved stays moved. The checker and `raftmq audit` then say whether
anything was lost or stored twice on the way."""

from __future__ import annotations

import time
from typing import Any

from chaos.deployment import Deployment
from raftmq.ops.drain import drain_group

KILL_AFTER_SECONDS = 0.5


def start(deployment: Deployment, group: str, hit: list[str]) -> dict[str, Any]:
    if len(deployment.groups()) < 2:
        raise RuntimeError("drain needs a cluster of groups (--preset symmetric, chain, symmetric-lite)")
    drain_group(deployment.topology, group, (), wait=False, report=lambda _line: None)
    time.sleep(KILL_AFTER_SECONDS)  # the drain under way: moves committed and in flight
    for key in hit:
        deployment.kill(key)
    return {"draining": group, "killed": hit}


def stop(deployment: Deployment, hit: list[str]) -> dict[str, Any]:
    deployment.start(hit, wait=True)
    group = deployment.nodes[hit[0]].group
    drain_group(deployment.topology, group, (), cancel=True, report=lambda _line: None)
    return {"cancelled": group}
