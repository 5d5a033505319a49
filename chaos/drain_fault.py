"""The `drain` nemesis: scale-down while members die. The group hit starts draining
(raftmq.ops.drain: it turns clients away and moves everything it holds to the other groups as
committed moves with duplicate-detection ids); half a second later the members hit are killed
in the middle of it. At heal they start again, the drain goes on until the group holds
nothing (at most `SETTLE_SECONDS`), and is then cancelled (the group serves again); whatever
was moved stays moved. The checker and `raftmq audit` then say whether
anything was lost or stored twice on the way."""

from __future__ import annotations

import time
from typing import Any

from chaos.deployment import Deployment
from raftmq.ops.drain import drain_group, remaining

KILL_AFTER_SECONDS = 1.5  # past a tick (1 s): the group has begun moving what it holds
SETTLE_SECONDS = 15.0  # at heal, how long the drain may go on before it is cancelled


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
    deadline = time.monotonic() + SETTLE_SECONDS
    status: dict[str, Any] | None = None
    while time.monotonic() < deadline:
        leader = deployment.leader(group, timeout=2.0)
        status = deployment.status(leader) if leader is not None else None
        if status is not None and remaining(status) == 0:
            break
        time.sleep(0.2)
    moved = None if status is None else status.get("cluster", {}).get("drained")
    left = None if status is None else remaining(status)
    drain_group(deployment.topology, group, (), cancel=True, report=lambda _line: None)
    return {"cancelled": group, "moved": moved, "left": left}
