"""`raftmq restart --rolling`: every node of a cluster started by `raftmq up`, one at a time,
while it serves.

Group by group (topology order), the followers first and the leader last: each node is
restarted by its supervisor on request (raftmq.ops.rolling_requests; a graceful stop, so a
leader hands leadership to a caught-up follower first), then the next one waits until the
restarted node answers /status, its group has a leader, and the node has applied everything
its leader had committed when it came back. So at most one member of a group is ever down, and
never one that is still catching up: a group of three keeps its majority throughout, and
clients see nothing but the one failover of their group's leader hand-over.

`restart_order` is the pure part; `RollingRestart` does the waiting, reporting each step.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from raftmq.errors import DeploymentError
from raftmq.ops.launcher import RUNNING, DeploymentState, NodeProcess, launcher_alive, read_state
from raftmq.ops.member_changes import caught_up
from raftmq.ops.rolling_requests import request_restart
from raftmq.ops.status_view import fetch_status

POLL_SECONDS = 0.1
StatusFetch = Callable[[str], "dict[str, Any] | None"]


def restart_order(nodes: Sequence[NodeProcess], roles: dict[tuple[str, str], str]) -> list[NodeProcess]:
    """Groups in the order they first appear, each group's followers (in their order) before
    its leader; a node whose role is unknown counts as a follower (it serves no one)."""
    groups: dict[str, list[NodeProcess]] = {}
    for node in nodes:
        groups.setdefault(node.group, []).append(node)
    order = []
    for members in groups.values():
        order += sorted(members, key=lambda n: roles.get((n.group, n.id)) == "leader")
    return order


@dataclass
class Step:
    group: str
    node: str
    was_leader: bool
    seconds: float  # from the request to the node serving again, caught up
    old_pid: int
    new_pid: int


@dataclass
class RollingResult:
    steps: list[Step] = field(default_factory=list)

    @property
    def seconds(self) -> float:
        return sum(step.seconds for step in self.steps)


class RollingRestart:
    def __init__(self, state_dir: Path, report: Callable[[str], None], node_timeout: float = 60.0,
                 fetch: StatusFetch = fetch_status) -> None:
        self.state_dir = state_dir
        self.report = report
        self.node_timeout = node_timeout
        self.fetch = fetch

    def run(self) -> RollingResult:
        state = self._state()
        if not launcher_alive(state):
            raise DeploymentError(f"{self.state_dir}: the `raftmq up` that started this cluster is not running: "
                                  "no one to restart the nodes (start the cluster with `raftmq up`)")
        down = [f"{n.group}/{n.id}" for n in state.nodes if n.state != RUNNING]
        if down:
            raise DeploymentError(f"not every node is running ({', '.join(down)}): a rolling restart would take "
                                  "a second member of a group down; bring them back first")
        roles = {(n.group, n.id): (self.fetch(n.admin) or {}).get("role", "unknown") for n in state.nodes}
        order = restart_order(state.nodes, roles)
        result = RollingResult()
        for number, node in enumerate(order, 1):
            was_leader = roles.get((node.group, node.id)) == "leader"
            self.report(f"[{number}/{len(order)}] {node.group}/{node.id} ({'leader' if was_leader else 'follower'}, "
                        f"pid {node.pid}): restarting")
            step = self._restart(node, was_leader)
            result.steps.append(step)
            self.report(f"[{number}/{len(order)}] {node.group}/{node.id}: serving again as pid {step.new_pid}, "
                        f"caught up, after {step.seconds:.1f} s")
        return result

    def _state(self) -> DeploymentState:
        state = read_state(self.state_dir)
        if state is None:
            raise DeploymentError(f"{self.state_dir}: no raftmq cluster state (start one with `raftmq up`)")
        return state

    def _restart(self, node: NodeProcess, was_leader: bool) -> Step:
        started = time.monotonic()
        deadline = started + self.node_timeout
        request_restart(self.state_dir, (node.group, node.id))
        fresh = self._wait(deadline, f"{node.group}/{node.id} to run again", lambda: self._running_again(node))
        self._wait(deadline, f"{node.group}/{node.id} to catch up", lambda: self._caught_up(fresh))
        return Step(node.group, node.id, was_leader, time.monotonic() - started, node.pid, fresh.pid)

    def _running_again(self, node: NodeProcess) -> NodeProcess | None:
        now = next((n for n in self._state().nodes if (n.group, n.id) == (node.group, node.id)), None)
        if now is not None and now.pid != node.pid and now.state == RUNNING:
            return now
        return None

    def _caught_up(self, node: NodeProcess) -> bool:
        """The node answers and has applied what its group's leader had committed."""
        own = self.fetch(node.admin)
        if own is None or "raft" not in own:
            return False
        members = [n for n in self._state().nodes if n.group == node.group]
        leaders = [s for s in (self.fetch(n.admin) for n in members) if s and s.get("role") == "leader"]
        if len(leaders) != 1:
            return False
        committed = int(leaders[0].get("commit_index", 0))
        # After the leader's figure: what it applied since counts.
        return caught_up(self.fetch(node.admin), committed)

    def _wait(self, deadline: float, what: str, probe: Callable[[], Any]) -> Any:
        while True:
            value = probe()
            if value:
                return value
            if time.monotonic() > deadline:
                raise DeploymentError(f"timed out after {self.node_timeout:g} s waiting for {what}; "
                                      "the rolling restart stopped there (`raftmq status` shows the cluster)")
            time.sleep(POLL_SECONDS)
