"""Chaos runs end to end against a real group of three (free ports, in a temp dir): the nemeses
do what they say, a run under kills and pauses is valid, and a broker with a planted bug (a
write-behind: receipts before commit; a journal that never fsyncs) is caught losing
acknowledged messages, one that writes without its lease caught delivering after it was deposed."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from chaos.deployment import Deployment
from chaos.environment import Environment, requirements
from chaos.generator import Fault
from chaos.history import History, read_history
from chaos.nemesis import Nemesis
from chaos.run import RunOptions, run
from cluster.topology import load_topology
from raftmq.processes import free_ports
from tests.helpers import unsafe_node

pytestmark = pytest.mark.integration


def group_file(tmp_path: Path) -> Path:
    ports = free_ports(9)
    lines = ["[group]", 'name = "g1"', 'data_dir = "data/g1"']
    for i in range(3):
        lines += ["[[node]]", f'id = "n{i + 1}"', f'client = "127.0.0.1:{ports[3 * i]}"',
                  f'raft = "127.0.0.1:{ports[3 * i + 1]}"', f'admin = "127.0.0.1:{ports[3 * i + 2]}"']
    path = tmp_path / "g1.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_the_nemeses_kill_pause_and_heal(tmp_path: Path) -> None:
    deployment = Deployment(load_topology(group_file(tmp_path)), tmp_path)
    history = History()
    try:
        deployment.start()
        leader = deployment.leader("g1", timeout=15)
        assert leader is not None
        nemesis = Nemesis(deployment, history, [], Environment(tmp_path, ()))
        nemesis.inject(Fault(0, "pause", "leader", 0, 0, 1))
        assert deployment.status(leader) is None and deployment.nodes[leader].paused
        assert deployment.nodes[leader].alive  # paused, not dead: it answers nothing
        other = deployment.leader("g1", timeout=10)
        assert other is not None and other != leader  # the others elected a new leader
        nemesis.heal()
        assert deployment.status(leader, timeout=2) is not None
        nemesis.inject(Fault(0, "kill", "one", 0, 7, 1))
        (killed,) = [op.value["nodes"] for op in history.ops if op.f == "kill"][0]
        assert not deployment.nodes[killed].alive
        nemesis.heal()
        assert deployment.nodes[killed].alive and deployment.status(killed, timeout=2) is not None
        assert [op.f for op in history.ops] == ["pause", "pause", "heal", "heal", "kill", "kill", "heal", "heal"]
    finally:
        deployment.stop()


def test_a_run_under_kills_pauses_and_partitions_is_valid_and_leaves_its_evidence(tmp_path: Path) -> None:
    # Partitions put every member in a network namespace of its own (chaos.netns): real packets are cut.
    run_dir, result = run(RunOptions(nemeses=("kill", "pause", "partition"), time_limit_s=24, rate=40,
                                     concurrency=3, seed=6, out=tmp_path / "runs"))
    assert result.valid, result.to_dict()
    assert result.acknowledged > 300 and result.lost == 0
    faults = {op.f for op in read_history(run_dir / "nemesis.jsonl") if op.type == "ok" and op.f != "heal"}
    assert faults == {"kill", "pause", "partition"}, faults  # seed 6 draws each of them
    assert json.loads((run_dir / "results.json").read_text())["valid"] is True
    assert (run_dir / "run.json").exists() and list((run_dir / "logs").glob("g1-n*.log"))
    assert "plotly" in (run_dir / "report.html").read_text().lower()
    assert any((run_dir / "data" / "g1").iterdir())  # the journals the audit will read (nodes run in the run dir)


def test_the_harness_catches_a_broker_that_receipts_before_commit(tmp_path: Path) -> None:
    topology = group_file(tmp_path)
    started = time.monotonic()
    _, result = run(RunOptions(topology=str(topology), nemeses=("kill",), targets=("leader",), time_limit_s=15,
                               rate=100, concurrency=4, seed=1, out=tmp_path / "runs",
                               node_command=unsafe_node.command("early-receipts")))
    assert not result.valid and result.lost > 0, result.to_dict()
    assert time.monotonic() - started < 60


def test_the_harness_catches_a_broker_that_does_not_fsync(tmp_path: Path) -> None:
    # Power loss on every member at once, with the consumers held back so what was acknowledged
    # is still waiting: a journal that never fsyncs loses it. The same run without the planted
    # bug is valid (tests/chaos/test_chaos_families.py, power-loss).
    problems = requirements(["power-loss"])
    if problems:
        pytest.skip("; ".join(problems))
    _, result = run(RunOptions(nemeses=("power-loss",), targets=("all",), backlog=True, time_limit_s=12, rate=100,
                               concurrency=4, seed=1, out=tmp_path / "runs",
                               node_command=unsafe_node.command("no-fsync")))
    assert not result.valid and result.lost > 0, result.to_dict()


@pytest.mark.slow
def test_the_harness_catches_a_leader_that_writes_without_its_lease(tmp_path: Path) -> None:
    # Leaders stalled at random points while plain and raftmq consumers read: a leader that
    # writes without asking its lease delivers after it was deposed, and the stale checker sees
    # it. The same run with the lease is valid (tests/chaos/test_stale.py; 24 runs in docs/chaos.md).
    # Slow (`-m slow`): whether a stall lands where the bug shows depends on timing; on a quiet
    # machine it did in every run tried (6 of 6), beside the rest of the suite it once did not.
    problems = requirements(["starve"])
    if problems:
        pytest.skip("; ".join(problems))
    _, result = run(RunOptions(topology=str(group_file(tmp_path)), workload="stale",
                               nemeses=("pause", "starve", "stutter"),
                               targets=("leader",), time_limit_s=30, rate=500, concurrency=2, seed=33,
                               out=tmp_path / "runs", node_command=unsafe_node.command("no-lease")))
    stale = result.stale_plain + result.stale_own  # type: ignore[attr-defined]
    assert not result.valid and stale > 0, result.to_dict()
