"""`raftmq group add-node / remove-node / replace-node` on a real cluster under
`raftmq up --detach`, while a failover producer and consumer keep working: a group of five
shrinks to three (its leader among the removed) and grows back to five, a member is replaced,
nothing receipted is lost, and `raftmq up` after `down` starts the members the group has now.

Every process started here is stopped by pid in a `finally`."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cluster.group_file import MEMBERS_FILE, load_group_config
from raftmq.ops.launcher import read_state
from raftmq.processes import free_ports
from tests.ops.test_ops_restart import Traffic, detached_cluster, raftmq

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def status(admin: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://{admin}/status", timeout=2) as answer:
        return dict(json.loads(answer.read()))


def leader_id(config: Path) -> str:
    group = load_group_config(config)
    for _ in range(100):
        for member in group.members:
            try:
                if status(member.admin or "")["role"] == "leader":
                    return member.id
            except OSError:
                pass
        time.sleep(0.1)
    raise AssertionError("no leader")


def new_member_args(node_id: str) -> list[str]:
    client, raft, admin = free_ports(3)
    return [node_id, "--client", f"127.0.0.1:{client}", "--raft", f"127.0.0.1:{raft}", "--admin", f"127.0.0.1:{admin}"]


def test_five_to_three_and_back_under_load_loses_nothing(tmp_path: Path, write_group: Callable[..., Path]) -> None:
    config = write_group("g1", 5)
    state_dir = tmp_path / "g1"
    with detached_cluster(config, state_dir, tmp_path) as (_before, url):
        traffic = Traffic(url)
        traffic.start()
        time.sleep(1.0)

        # Down to three: the leader first (it hands over), then a follower.
        leader = leader_id(config)
        follower = next(m.id for m in load_group_config(config).members if m.id != leader)
        for node_id in (leader, follower):
            removed = raftmq("group", "remove-node", "g1", node_id, "--config", str(config), cwd=tmp_path)
            assert removed.returncode == 0, removed.stdout + removed.stderr
        group = load_group_config(config)
        assert len(group.members) == 3 and {leader, follower}.isdisjoint(m.id for m in group.members)
        assert (state_dir / MEMBERS_FILE).exists()
        state = read_state(state_dir)
        assert state is not None and sorted(n.id for n in state.nodes) == sorted(m.id for m in group.members)
        assert len(status(group.members[0].admin or "")["raft"]["members"]) == 3
        assert list(state_dir.glob(f"{leader}.removed-*")), "the removed member's data was not set aside"

        # Back to five, then one member replaced: each new one catches up under the traffic.
        for node_id in ("n6", "n7"):
            added = raftmq("group", "add-node", "g1", *new_member_args(node_id), "--config", str(config), cwd=tmp_path)
            assert added.returncode == 0, added.stdout + added.stderr
            assert "caught up" in added.stdout
        old = load_group_config(config).members[0].id
        replaced = raftmq("group", "replace-node", "g1", old, *new_member_args("n8"), "--config", str(config),
                          cwd=tmp_path)
        assert replaced.returncode == 0, replaced.stdout + replaced.stderr
        time.sleep(1.0)
        traffic.stop(drain=30)

        group = load_group_config(config)
        ids = sorted(m.id for m in group.members)
        assert len(ids) == 5 and {"n6", "n7", "n8"} <= set(ids) and old not in ids
        rafts = sorted(m.raft for m in group.members)
        for member in group.members:
            assert sorted(status(member.admin or "")["raft"]["members"]) == rafts
        assert traffic.errors == []
        assert len(traffic.receipted) > 100
        missing = traffic.receipted - set(traffic.received)
        assert not missing, f"{len(missing)} receipted messages never arrived, e.g. {sorted(missing)[:3]}"

        # `raftmq up` after `down` starts the group as it is now.
        down = raftmq("down", "--config", str(config), cwd=tmp_path)
        assert down.returncode == 0, down.stdout + down.stderr
        up = raftmq("up", "--detach", "--config", str(config), "--timeout", "25", cwd=tmp_path)
        assert up.returncode == 0, up.stdout + up.stderr
        state = read_state(state_dir)
        assert state is not None and sorted(n.id for n in state.nodes) == ids
