"""The `membership` nemesis's two moves, on a real group through its leader's admin port
(`POST /membership`, raftmq.ops.member_changes does the same for operators), and the
`transfer` nemesis's one (`POST /leadership`, as `raftmq hand-over` asks):

- `leave`: the member hit is removed from its group (a committed configuration change; a leader
  hit hands leadership over first), then killed;
- `rejoin` (the heal): its files are set aside (kept for the audit), it starts empty and is
  added back, catching up from a snapshot and its peers' bodies.
- `transfer`: the member hit (it leads) hands its leadership to a caught-up follower and stays
  up, its clients' sessions moving with the leadership; nothing to heal.

Every wait is bounded; a change that does not commit in time raises, and the nemesis records
the fault as failed (the run goes on)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from chaos.deployment import Deployment
from cluster.group_file import GroupConfig
from raftmq.config import split_address
from raftmq.replication.group_secret import group_secret
from raftmq.replication.membership import ADD, REMOVE, Change
from raftmq.server.admin.http import post_hand_over, post_membership

CHANGE_TIMEOUT_SECONDS = 20.0
POLL_SECONDS = 0.1


def _group(deployment: Deployment, key: str) -> GroupConfig:
    name = deployment.nodes[key].group
    return next(spec.config for spec in deployment.topology.groups if spec.name == name)


def raft_address(deployment: Deployment, key: str) -> str:
    return _group(deployment, key).member(deployment.nodes[key].id).raft


def members_of(deployment: Deployment, group: str) -> list[str] | None:
    """The Raft configuration the group's leader reports (None when no leader answers)."""
    leader = deployment.leader(group, timeout=2.0)
    status = deployment.status(leader) if leader is not None else None
    return None if status is None else list(status.get("raft", {}).get("members", []))


def commit_change(deployment: Deployment, key: str, op: str, timeout: float = CHANGE_TIMEOUT_SECONDS) -> list[str]:
    """Commit `op` (ADD / REMOVE) of node `key`, asking whichever member leads, until the
    leader reports it in effect. Returns the members after it."""
    config = _group(deployment, key)
    node = deployment.nodes[key]
    change = Change(op, raft_address(deployment, key))
    # The harness runs the nodes with the run directory as their working directory.
    config.require_password()
    secret = group_secret(config.password, deployment.workdir / config.data_dir)
    deadline = time.monotonic() + timeout
    last = "no leader"
    while time.monotonic() < deadline:
        members = members_of(deployment, node.group)
        if members and (change.address in members) == (op == ADD):
            return members
        leader = deployment.leader(node.group, timeout=1.0)
        if leader is not None:
            host, port = split_address(deployment.nodes[leader].admin)
            try:
                code, answer = post_membership(host, port, change, secret,
                                               timeout=max(1.0, deadline - time.monotonic()))
                last = f"{leader}: HTTP {code} {answer.get('error', '')}"
                if code == 200:
                    return list(answer.get("members", []))
            except OSError as exc:
                last = f"{leader}: {exc}"
        time.sleep(POLL_SECONDS)
    raise RuntimeError(f"{op} {key} not committed within {timeout:g} s (last: {last})")


def transfer(deployment: Deployment, key: str) -> dict[str, Any]:
    """Ask `key` to hand its leadership over; raises when it could not (it did not lead, say)."""
    config = _group(deployment, key)
    config.require_password()
    secret = group_secret(config.password, deployment.workdir / config.data_dir)
    host, port = split_address(deployment.nodes[key].admin)
    code, answer = post_hand_over(host, port, secret, timeout=CHANGE_TIMEOUT_SECONDS)
    if code != 200 or not answer.get("handed_over"):
        raise RuntimeError(f"{key}: HTTP {code} {answer}")
    return {"from": key, "leader": answer.get("leader")}


def leave(deployment: Deployment, key: str) -> dict[str, Any]:
    members = commit_change(deployment, key, REMOVE)
    deployment.kill(key)
    return {"removed": key, "members": members}


def rejoin(deployment: Deployment, key: str, set_aside: Callable[[str], Any]) -> dict[str, Any]:
    """Bring a member that left back, empty. One whose removal never took effect (its `leave`
    failed: no leader in time) is still a member with its files: it is left as it is, never
    emptied while it runs. One removed but still running (the change committed after `leave`
    gave up) is killed first."""
    deadline = time.monotonic() + CHANGE_TIMEOUT_SECONDS
    members = members_of(deployment, deployment.nodes[key].group)
    while members is None and time.monotonic() < deadline:
        members = members_of(deployment, deployment.nodes[key].group)
    if members is None:  # whether it is still a member is unknown: never empty it on a guess
        raise RuntimeError(f"no leader within {CHANGE_TIMEOUT_SECONDS:g} s to tell whether {key} is still a member; "
                           "left as it is")
    if raft_address(deployment, key) in members:
        deployment.start([key], wait=True)  # a no-op unless it is down
        return {"still_member": key, "members": members}
    deployment.kill(key)
    aside = set_aside(key)
    deployment.start([key], wait=True)
    members = commit_change(deployment, key, ADD)
    return {"added": key, "members": members, "set_aside": str(aside)}
