"""Real processes: `raftmq up --preset symmetric-lite` starts three single-node groups joined by
a cluster connection, each node with `--topology`, prints the failover URLs, and `raftmq down`
stops them. Every process started here is stopped by pid in a `finally`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cluster.topology import preset_path
from raftmq.ops.launcher import DeploymentState, is_our_node, launcher_alive, read_state
from tests.ops.test_ops_up_supervised import cleanup, raftmq

pytestmark = pytest.mark.integration

CLIENTS = ("127.0.0.1:61613", "127.0.0.1:61614", "127.0.0.1:61615")  # configs/symmetric-lite-g*.toml


def test_up_symmetric_lite_prints_the_urls_and_down_stops_it(tmp_path: Path) -> None:
    state_dir = tmp_path / ".raftmq"
    seen: list[DeploymentState | None] = []
    try:
        up = raftmq("up", "--detach", "--preset", "symmetric-lite", "--timeout", "25", cwd=tmp_path)
        state = read_state(state_dir)
        seen.append(state)
        assert up.returncode == 0, up.stdout + up.stderr
        assert state is not None and state.topology == "symmetric-lite"
        assert [(node.group, node.id, node.client) for node in state.nodes] == [
            (f"g{i + 1}", "n1", client) for i, client in enumerate(CLIENTS)]
        topology_file = str(preset_path("symmetric-lite"))
        for node in state.nodes:
            assert is_our_node(node)
            assert node.argv[-2:] == ("--topology", topology_file)  # kept for a restart by the supervisor
            assert (tmp_path / ".raftmq" / "symmetric-lite" / node.group / "n1").is_dir()

        lines = up.stdout.splitlines()
        assert lines[0] == "raftmq cluster 'symmetric-lite' is up: 3 group(s), 3 node(s)"
        assert [line.split(" (term")[0] for line in lines[1:4]] == [f"  group g{i}: master n1" for i in (1, 2, 3)]
        assert ([line.split(")  ", 1)[1] for line in lines[1:4]]
                == [f"failover:(stomp://{client})" for client in CLIENTS])
        whole = "failover:(" + ",".join(f"(stomp://{client})" for client in CLIENTS) + ")"
        assert lines[4:6] == ["links:   g1-g2, g1-g3, g2-g3", f"clients: {whole}"], up.stdout
        assert "stop:    raftmq down --preset symmetric-lite" in lines

        status = raftmq("status", "--json", cwd=tmp_path)
        assert status.returncode == 0, status.stdout + status.stderr
        summary = json.loads(status.stdout)
        assert [(group["name"], group["nodes_up"]) for group in summary["groups"]] == [("g1", 1), ("g2", 1), ("g3", 1)]

        down = raftmq("down", "--preset", "symmetric-lite", cwd=tmp_path)
        assert down.returncode == 0 and "stopped 3 node(s)" in down.stdout, down.stdout + down.stderr
        assert "SIGKILL" not in down.stdout
        assert not any(is_our_node(node) for node in state.nodes)
        assert read_state(state_dir) is None and not launcher_alive(state)
    finally:
        cleanup(seen)
