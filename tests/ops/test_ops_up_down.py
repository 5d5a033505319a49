"""Real processes: `raftmq up --detach` / `status` / `down`, and an attached `up` stopped by Ctrl-C.

Every node started here is stopped by pid in a `finally`, whatever the test's outcome."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from raftmq.ops.launcher import DeploymentState, is_our_node, launcher_alive, read_state, stop_nodes

pytestmark = pytest.mark.integration

WriteGroup = Callable[..., Path]
COMMAND_TIMEOUT = 40


def raftmq(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "raftmq", *args], capture_output=True, text=True,
                          timeout=COMMAND_TIMEOUT, cwd=cwd)


def status_json(config: Path, cwd: Path, code: int = 0) -> dict:
    result = raftmq("status", "--json", "--config", str(config), cwd=cwd)
    assert result.returncode == code, result.stderr  # 1: a node is down or a group has no leader
    return json.loads(result.stdout)


def cleanup(state: DeploymentState | None) -> None:
    if state is not None:
        stop_nodes(state, grace=2.0)


def test_up_detached_status_kill_and_down(write_group: WriteGroup, tmp_path: Path) -> None:
    config = write_group("g1", mqtt=True)
    state_dir = tmp_path / "g1"
    state: DeploymentState | None = None
    try:
        up = raftmq("up", "--detach", "--config", str(config), "--timeout", "25", cwd=tmp_path)
        state = read_state(state_dir)
        assert up.returncode == 0, up.stdout + up.stderr
        assert state is not None and len(state.nodes) == 3 and all(is_our_node(node) for node in state.nodes)
        clients = [node.client for node in state.nodes]
        assert f"clients: failover:({','.join('stomp://' + c for c in clients)})" in up.stdout
        assert f"hosts:   {','.join(clients)}" in up.stdout
        assert f"mqtt:    {','.join(str(node.mqtt) for node in state.nodes)}" in up.stdout  # each member's own
        assert all(node.mqtt for node in state.nodes)
        assert "<data dir>" not in up.stdout  # real paths, not a placeholder
        shown = next(line for line in up.stdout.splitlines() if line.startswith("logs:")).split(None, 1)[1]
        head, ids, tail = re.fullmatch(r"(.*)/\{(.*)\}/(.*)", shown).groups()  # .raftmq/g1/{n1,n2,n3}/node.log
        assert {tmp_path / head / i / tail for i in ids.split(",")} == {Path(node.log) for node in state.nodes}
        for node in state.nodes:  # stdout went to its log (the line may trail the admin endpoint)
            deadline = time.monotonic() + 10
            while "raftmq node listening on" not in Path(node.log).read_text() and time.monotonic() < deadline:
                time.sleep(0.05)
            assert "raftmq node listening on" in Path(node.log).read_text()

        sent = raftmq("send", "/queue/flow", "hello from the CLI", "--count", "2", "--config", str(config),
                      cwd=tmp_path)
        assert sent.returncode == 0 and "sent 2 message(s)" in sent.stdout, sent.stdout + sent.stderr
        received = raftmq("receive", "/queue/flow", "--count", "2", "--timeout", "10", "--config", str(config),
                          cwd=tmp_path)
        assert received.returncode == 0, received.stdout + received.stderr
        assert received.stdout.splitlines() == ["hello from the CLI"] * 2

        summary = status_json(config, tmp_path)
        (group,) = summary["groups"]
        assert len(group["nodes"]) == 3 and group["nodes_up"] == 3
        assert [row["role"] for row in group["nodes"]].count("leader") == 1
        assert {row["pid"] for row in group["nodes"]} == {node.pid for node in state.nodes}
        assert {row["mqtt"] for row in group["nodes"]} == {node.mqtt for node in state.nodes}

        again = raftmq("up", "--detach", "--config", str(config), cwd=tmp_path)
        assert again.returncode != 0 and "already running" in again.stderr, again.stdout + again.stderr
        assert read_state(state_dir) == state  # the running cluster's state is untouched

        # A follower: killing the leader would leave the group electing while the view is taken.
        leader = next(row["id"] for row in group["nodes"] if row["role"] == "leader")
        victim = next(node for node in state.nodes if node.id != leader)
        survivors = [node.id for node in state.nodes if node is not victim]
        os.kill(victim.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while is_our_node(victim) and time.monotonic() < deadline:
            time.sleep(0.05)
        rows = {row["id"]: row for row in status_json(config, tmp_path, code=1)["groups"][0]["nodes"]}
        assert rows[victim.id]["up"] is False and rows[victim.id]["role"] == "down"
        assert all(rows[node_id]["up"] for node_id in survivors)
        view = raftmq("status", "--once", "--config", str(config), cwd=tmp_path)
        assert view.returncode == 1 and "2/3 nodes up" in view.stdout and "master" in view.stdout, (
            view.stdout + view.stderr)
        assert " mqtt " in view.stdout and all(str(node.mqtt) in view.stdout for node in state.nodes)

        down = raftmq("down", "--config", str(config), cwd=tmp_path)
        assert down.returncode == 0 and "stopped 2 node(s)" in down.stdout, down.stdout + down.stderr
        assert "SIGKILL" not in down.stdout  # SIGTERM was enough: each node stopped itself
        assert not any(is_our_node(node) for node in state.nodes)
        for node in state.nodes:
            assert not Path(f"/proc/{node.pid}").exists() or _is_zombie(node.pid)
        assert read_state(state_dir) is None
        assert state.launcher_pid > 0 and not launcher_alive(state), "the detached supervisor outlived raftmq down"
    finally:
        cleanup(state)


def test_attached_up_stops_the_cluster_on_ctrl_c(write_group: WriteGroup, tmp_path: Path) -> None:
    config = write_group("g2")
    state_dir = tmp_path / "g2"
    state: DeploymentState | None = None
    output = tmp_path / "up.out"
    with open(output, "wb") as out:
        up = subprocess.Popen([sys.executable, "-m", "raftmq", "up", "--config", str(config), "--timeout", "25"],
                              stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 30
        while "clients: failover:" not in output.read_text() and up.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        state = read_state(state_dir)
        assert state is not None and up.poll() is None, output.read_text()
        time.sleep(1.5)  # at least one refresh of the live view
        up.send_signal(signal.SIGINT)
        assert up.wait(timeout=40) == 0, output.read_text()
        text = output.read_text()
        assert "stopping the cluster" in text and "stopped 3 node(s)" in text and "SIGKILL" not in text, text
        assert not any(is_our_node(node) for node in state.nodes)
        assert read_state(state_dir) is None
        for node in state.nodes:
            assert "node.stopped" in Path(node.log).read_text()  # each one shut down cleanly
    finally:
        if up.poll() is None:
            up.kill()
            up.wait(timeout=10)
        cleanup(state)


def test_down_leaves_a_reused_pid_alone(tmp_path: Path) -> None:
    """A state file naming a pid that is now another process: `down` must not signal it."""
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        from raftmq.ops.launcher import NodeProcess, process_start_time, write_state

        start = process_start_time(bystander.pid)
        assert start is not None
        wrong_argv = NodeProcess("g", "n1", "127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3", bystander.pid, start,
                                 (sys.executable, "-m", "raftmq", "node", "--config", "x.toml", "--node", "n1"), "log")
        wrong_start = NodeProcess("g", "n2", "127.0.0.1:4", "127.0.0.1:5", "127.0.0.1:6", bystander.pid, start + 1,
                                  tuple(bystander.args), "log")
        assert not is_our_node(wrong_argv) and not is_our_node(wrong_start)
        assert is_our_node(NodeProcess("g", "n3", "", "", "", bystander.pid, start, tuple(bystander.args), "log"))
        write_state(DeploymentState("t", str(tmp_path), (wrong_argv, wrong_start)))
        group = tmp_path / "g.toml"
        group.write_text(f'[group]\nname = "g"\ndata_dir = "{tmp_path}"\n[[node]]\nid = "n1"\n'
                         'client = "127.0.0.1:1"\nraft = "127.0.0.1:2"\nadmin = "127.0.0.1:3"\n')
        down = raftmq("down", "--config", str(group), "--timeout", "1", cwd=tmp_path)
        assert down.returncode == 0 and "stopped 0 node(s)" in down.stdout, down.stdout + down.stderr
        assert bystander.poll() is None  # untouched
    finally:
        bystander.kill()
        bystander.wait(timeout=10)


def _is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat[stat.rfind(")") + 2] == "Z"


def test_down_lets_the_supervisor_stop_and_reap_its_nodes(write_group: WriteGroup, tmp_path: Path) -> None:
    # Before: `down` told the supervisor to let go (SIGUSR1) and stopped the nodes itself, so
    # they were re-parented while stopping and, where PID 1 does not reap, left as zombies.
    config = write_group("g1")
    state: DeploymentState | None = None
    try:
        up = raftmq("up", "--detach", "--config", str(config), "--timeout", "25", cwd=tmp_path)
        state = read_state(tmp_path / "g1")
        assert up.returncode == 0 and state is not None, up.stdout + up.stderr
        supervisor, pids = state.launcher_pid, [node.pid for node in state.nodes]
        assert all(parent_of(pid) == supervisor for pid in pids)
        down = subprocess.Popen([sys.executable, "-m", "raftmq", "down", "--config", str(config)], cwd=tmp_path,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        adopted: set[int] = set()
        deadline = time.monotonic() + COMMAND_TIMEOUT
        while down.poll() is None and time.monotonic() < deadline:
            for pid in pids:
                parent = parent_of(pid)
                if parent is not None and parent != supervisor:
                    adopted.add(pid)
            time.sleep(0.01)
        out, err = down.communicate(timeout=COMMAND_TIMEOUT)
        assert down.returncode == 0 and "stopped 3 node(s)" in out, out + err
        assert not adopted, f"nodes {sorted(adopted)} outlived their supervisor"
        assert not launcher_alive(state)
        assert [pid for pid in pids if Path(f"/proc/{pid}").exists()] == [], "a node is still there (or a zombie)"
        state = None
    finally:
        cleanup(state)


def parent_of(pid: int) -> int | None:
    """PPid of a live (non-zombie) process, else None."""
    try:
        fields = dict(line.split(":\t", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                      if ":\t" in line)
    except OSError:
        return None
    return None if fields.get("State", "").startswith("Z") else int(fields["PPid"])


def test_attached_up_counts_the_nodes_it_stopped_as_down_does(write_group: WriteGroup, tmp_path: Path) -> None:
    # Before: an attached `up` said "stopped 3 node(s)" for a group whose n3 had died (the
    # live view showed it down; `raftmq down` says "stopped 2 node(s)" there).
    config = write_group("g4")
    state_dir = tmp_path / "g4"
    state: DeploymentState | None = None
    output = tmp_path / "up.out"
    with open(output, "wb") as out:
        up = subprocess.Popen([sys.executable, "-m", "raftmq", "up", "--config", str(config), "--timeout", "25"],
                              stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 30
        while "clients: failover:" not in output.read_text() and up.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        state = read_state(state_dir)
        assert state is not None and up.poll() is None, output.read_text()
        victim = next(node for node in state.nodes if node.id == "n3")
        os.kill(victim.pid, signal.SIGKILL)
        deadline = time.monotonic() + 15
        while f"(pid {victim.pid}) was killed" not in output.read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert f"(pid {victim.pid}) was killed" in output.read_text()  # the supervisor saw it (restart = never)
        up.send_signal(signal.SIGINT)
        assert up.wait(timeout=40) == 0, output.read_text()
        text = output.read_text()
        assert "stopped 2 node(s)" in text and "stopped 3 node(s)" not in text, text
        assert not any(is_our_node(node) for node in state.nodes)
    finally:
        if up.poll() is None:
            up.kill()
            up.wait(timeout=10)
        cleanup(state)
