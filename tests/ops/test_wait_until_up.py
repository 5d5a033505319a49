"""`wait_until_up`: when `raftmq up` calls a cluster up. Real child processes stand in for the
nodes; the nodes' /status answers come from a scripted `collect`, built with the same
`summarise` that `raftmq status` uses."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from raftmq.errors import DeploymentError
from raftmq.ops.launcher import DeploymentState, NodeProcess, start_node, wait_until_up
from raftmq.ops.status_view import NodeAddress, summarise
from raftmq.processes import process_start_time

FAILING = ("import sys, time; time.sleep(0.5); "
           "print('raftmq node n2: raft.journal.meta: unreadable Raft metadata'); sys.exit(1)")
STAYING = "import time; time.sleep(30)"

pytestmark = pytest.mark.integration


def members(tmp_path: Path, scripts: dict[str, str]) -> tuple[DeploymentState, dict[int, subprocess.Popen[bytes]]]:
    nodes, children = [], {}
    for node_id, script in scripts.items():
        log = tmp_path / f"{node_id}.log"
        argv = (sys.executable, "-c", script)
        process = start_node(argv, log)
        children[process.pid] = process
        nodes.append(NodeProcess("g3", node_id, "127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3", process.pid,
                                 process_start_time(process.pid) or 0, argv, str(log)))
    return DeploymentState("t", str(tmp_path), tuple(nodes)), children


def answers(roles: dict[str, str | None]) -> Any:
    """A `collect` under which each node answers with its role, or not at all (None)."""

    def collect(addresses: list[NodeAddress]) -> dict[str, Any]:
        found = [(a, None if roles[a.id] is None else {"role": roles[a.id], "term": 2}) for a in addresses]
        return summarise(found)

    return collect


def stop(children: dict[int, subprocess.Popen[bytes]]) -> None:
    for child in children.values():
        child.kill()
        child.wait(timeout=10)


def test_a_leader_is_not_enough_while_a_node_has_yet_to_answer(tmp_path: Path) -> None:
    # n1 and n3 elected a leader; n2 never answers and exits: that is a failed start, not an up cluster
    state, children = members(tmp_path, {"n1": STAYING, "n2": FAILING, "n3": STAYING})
    try:
        with pytest.raises(DeploymentError,
                           match=r"^g3/n2 exited while starting: raftmq node n2: .*unreadable Raft metadata"):
            wait_until_up(state, children, timeout=20, collect=answers({"n1": "leader", "n2": None, "n3": "follower"}))
    finally:
        stop(children)


def test_a_node_that_never_answers_is_named_at_the_deadline(tmp_path: Path) -> None:
    state, children = members(tmp_path, {"n1": STAYING, "n2": STAYING})
    try:
        with pytest.raises(DeploymentError, match=r"^g3/n2 did not answer within 0.3 s; see the node.log files"):
            wait_until_up(state, children, timeout=0.3, collect=answers({"n1": "leader", "n2": None}))
    finally:
        stop(children)


def test_every_node_answering_with_a_leader_is_up(tmp_path: Path) -> None:
    state, children = members(tmp_path, {"n1": STAYING, "n2": STAYING})
    try:
        summary = wait_until_up(state, children, timeout=5, collect=answers({"n1": "follower", "n2": "leader"}))
        assert summary["groups"][0]["leader"] == "n2" and summary["groups"][0]["nodes_up"] == 2
    finally:
        stop(children)
